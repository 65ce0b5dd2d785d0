"""Run logs in the SQLite store (:class:`bot.service.store.run_logs.RunLogStore`); a mixin of
:class:`bot.service.store.sqlite.SQLiteStore`, sharing its connection and its lock."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable
from datetime import UTC, datetime

from bot.core.run_log import LogEvent, LogKind, NewLogEvent
from bot.service.store.run_logs import READ_BATCH


class SQLiteRunLogs:
    _conn: sqlite3.Connection
    _lock: threading.Lock
    on_log: Callable[[str], None] | None = None
    """Called with the run's id after its events are committed: the in-process wake of live pages."""

    def append_log(self, job_id: str, attempt: int, events: list[NewLogEvent]) -> None:
        if not events:
            return
        at = datetime.now(UTC).isoformat()
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                self._conn.executemany(
                    "INSERT INTO run_log (job_id, attempt, step, kind, text, at) VALUES (?, ?, ?, ?, ?, ?)",
                    [(job_id, attempt, e.step, e.kind.value, e.text, at) for e in events],
                )
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")
        if self.on_log is not None:
            self.on_log(job_id)

    def log_events(self, job_id: str, after: int = 0, limit: int = READ_BATCH) -> list[LogEvent]:
        with self._lock:
            rows = self._conn.execute(
                "SELECT seq, attempt, step, kind, text, at FROM run_log WHERE job_id = ? AND seq > ? "
                "ORDER BY seq LIMIT ?",
                (job_id, after, limit),
            ).fetchall()
        return [
            LogEvent(
                seq=seq,
                attempt=attempt,
                step=step,
                kind=LogKind(kind),
                text=text,
                at=datetime.fromisoformat(at),
            )
            for seq, attempt, step, kind, text, at in rows
        ]

    def purge_logs(self, before: datetime) -> int:
        with self._lock:
            cur = self._conn.execute(
                "DELETE FROM run_log WHERE job_id IN "
                "(SELECT job_id FROM run_log GROUP BY job_id HAVING max(at) < ?)",
                (before.astimezone(UTC).isoformat(),),
            )
            return cur.rowcount

    def log_size(self) -> int:
        with self._lock:
            row = self._conn.execute("SELECT coalesce(sum(length(text)), 0) FROM run_log").fetchone()
        return int(row[0])
