"""Viewers' sessions in PostgreSQL (:class:`bot.service.store.sessions.SessionStore`); a mixin of
:class:`bot.service.store.postgres.PostgresStore`. Every `serve` replica reads the same table, so
signing out on one ends the session on all of them."""

from __future__ import annotations

from contextlib import AbstractContextManager
from datetime import datetime
from typing import TYPE_CHECKING, Any

import psycopg

from bot.service.store.sessions import ViewerSession


class PostgresSessions:
    if TYPE_CHECKING:  # the store's own, which this mixin shares

        def _tx(self) -> AbstractContextManager[psycopg.Connection[dict[str, Any]]]: ...
        def _query(self, sql: str, args: tuple[Any, ...] | dict[str, Any] = ()) -> list[dict[str, Any]]: ...

    def start_session(self, key: str, login: str, at: datetime, expires_at: datetime) -> None:
        with self._tx() as c:
            c.execute("DELETE FROM viewer_sessions WHERE expires_at < %s", (at,))
            c.execute(
                "INSERT INTO viewer_sessions (key, login, started_at, seen_at, expires_at) "
                "VALUES (%s, %s, %s, %s, %s)",
                (key, login, at, at, expires_at),
            )

    def viewer_session(self, key: str) -> ViewerSession | None:
        rows = self._query(
            "SELECT login, started_at, seen_at, expires_at FROM viewer_sessions WHERE key = %s", (key,)
        )
        if not rows:
            return None
        r = rows[0]
        return ViewerSession(r["login"], r["started_at"], r["seen_at"], r["expires_at"])

    def session_seen(self, key: str, at: datetime) -> None:
        with self._tx() as c:
            c.execute("UPDATE viewer_sessions SET seen_at = %s WHERE key = %s", (at, key))

    def end_session(self, key: str) -> bool:
        with self._tx() as c:
            return c.execute("DELETE FROM viewer_sessions WHERE key = %s", (key,)).rowcount == 1
