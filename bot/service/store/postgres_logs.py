"""Run logs in PostgreSQL (:class:`bot.service.store.run_logs.RunLogStore`); a mixin of
:class:`bot.service.store.postgres.PostgresStore`. An agent's events and their NOTIFY on
``LOG_CHANNEL`` commit together, so a page woken by the notice finds them."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager
from datetime import datetime
from typing import TYPE_CHECKING, Any

import psycopg

from bot.core.run_log import LogEvent, LogKind, NewLogEvent
from bot.service.store.run_logs import LOG_CHANNEL, READ_BATCH


class PostgresRunLogs:
    if TYPE_CHECKING:  # the store's own, which this mixin shares

        def _tx(self) -> AbstractContextManager[psycopg.Connection[dict[str, Any]]]: ...
        def _query(self, sql: str, args: tuple[Any, ...] | dict[str, Any] = ()) -> list[dict[str, Any]]: ...

    def append_log(self, job_id: str, attempt: int, events: list[NewLogEvent]) -> None:
        if not events:
            return
        with self._tx() as c, c.cursor() as cur:
            cur.executemany(
                "INSERT INTO run_log (job_id, attempt, step, kind, text) VALUES (%s, %s, %s, %s, %s)",
                [(job_id, attempt, e.step, e.kind.value, _no_nul(e.text)) for e in events],
            )
            cur.execute("SELECT pg_notify(%s, %s)", (LOG_CHANNEL, job_id))

    def log_events(self, job_id: str, after: int = 0, limit: int = READ_BATCH) -> list[LogEvent]:
        rows = self._query(
            "SELECT seq, attempt, step, kind, text, at FROM run_log WHERE job_id = %s AND seq > %s "
            "ORDER BY seq LIMIT %s",
            (job_id, after, limit),
        )
        return list(_events(rows))

    def purge_logs(self, before: datetime) -> int:
        with self._tx() as c:
            cur = c.execute(
                "DELETE FROM run_log WHERE job_id IN "
                "(SELECT job_id FROM run_log GROUP BY job_id HAVING max(at) < %s)",
                (before,),
            )
            return int(cur.rowcount)

    def log_size(self) -> int:
        rows = self._query("SELECT coalesce(sum(length(text)), 0) AS size FROM run_log")
        return int(rows[0]["size"])


def _no_nul(text: str) -> str:
    # PostgreSQL's text cannot hold NUL; a step may print one.
    return text.replace("\x00", "\ufffd")


def _events(rows: list[dict[str, Any]]) -> Iterator[LogEvent]:
    for r in rows:
        yield LogEvent(
            seq=r["seq"],
            attempt=r["attempt"],
            step=r["step"],
            kind=LogKind(r["kind"]),
            text=r["text"],
            at=r["at"],
        )
