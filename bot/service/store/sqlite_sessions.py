"""Viewers' sessions in the SQLite store (:class:`bot.service.store.sessions.SessionStore`); a mixin
of :class:`bot.service.store.sqlite.SQLiteStore`, sharing its connection and its lock."""

from __future__ import annotations

import sqlite3
import threading
from datetime import UTC, datetime

from bot.service.store.sessions import ViewerSession


def _text(moment: datetime) -> str:
    # One time zone and one format, so that the text compares as the times do.
    return moment.astimezone(UTC).isoformat()


class SQLiteSessions:
    _conn: sqlite3.Connection
    _lock: threading.Lock

    def start_session(self, key: str, login: str, at: datetime, expires_at: datetime) -> None:
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                self._conn.execute("DELETE FROM viewer_sessions WHERE expires_at < ?", (_text(at),))
                self._conn.execute(
                    "INSERT INTO viewer_sessions (key, login, started_at, seen_at, expires_at) "
                    "VALUES (?, ?, ?, ?, ?)",
                    (key, login, _text(at), _text(at), _text(expires_at)),
                )
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")

    def viewer_session(self, key: str) -> ViewerSession | None:
        with self._lock:
            row = self._conn.execute(
                "SELECT login, started_at, seen_at, expires_at FROM viewer_sessions WHERE key = ?", (key,)
            ).fetchone()
        if row is None:
            return None
        login, started, seen, expires = row
        return ViewerSession(
            login,
            datetime.fromisoformat(started),
            datetime.fromisoformat(seen),
            datetime.fromisoformat(expires),
        )

    def session_seen(self, key: str, at: datetime) -> None:
        with self._lock:
            self._conn.execute("UPDATE viewer_sessions SET seen_at = ? WHERE key = ?", (_text(at), key))

    def end_session(self, key: str) -> bool:
        with self._lock:
            return self._conn.execute("DELETE FROM viewer_sessions WHERE key = ?", (key,)).rowcount == 1
