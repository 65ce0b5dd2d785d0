"""Waking a run's live pages when its log grows: in-process on one machine (SQLite), through
PostgreSQL's LISTEN/NOTIFY with several hosts, where the agents NOTIFY as they add lines."""

from __future__ import annotations

import asyncio
import contextlib
from collections import defaultdict
from collections.abc import Iterator

import psycopg
import structlog

from bot.service.store.run_logs import LOG_CHANNEL

log = structlog.get_logger(__name__)


class LogWake:
    """Who waits for which run's log; ``notify`` may be called from any thread."""

    def __init__(self) -> None:
        self._waiting: dict[str, set[asyncio.Event]] = defaultdict(set)
        self._loop: asyncio.AbstractEventLoop | None = None
        self.closed = False  # the server is stopping: live streams end

    def close(self) -> None:
        """End every live stream now (the server is stopping and would wait for them)."""
        self.closed = True
        for events in self._waiting.values():
            for event in events:
                event.set()

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop

    def notify(self, job_id: str) -> None:
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            self._wake(job_id)
        else:
            loop.call_soon_threadsafe(self._wake, job_id)

    def _wake(self, job_id: str) -> None:
        for event in self._waiting.get(job_id, ()):
            event.set()

    @contextlib.contextmanager
    def watch(self, job_id: str) -> Iterator[asyncio.Event]:
        event = asyncio.Event()
        self._waiting[job_id].add(event)
        try:
            yield event
        finally:
            self._waiting[job_id].discard(event)
            if not self._waiting[job_id]:
                del self._waiting[job_id]


async def listen_for_logs(url: str, wake: LogWake, *, retry_s: float = 2.0) -> None:
    """LISTEN on the log channel for ever, waking the pages of each run named; reconnects after a
    lost connection (pages fall back on their periodic look meanwhile)."""
    while True:
        try:
            async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
                await conn.execute(f"LISTEN {LOG_CHANNEL}")
                async for notice in conn.notifies():
                    wake.notify(notice.payload)
        except (psycopg.Error, OSError) as exc:
            log.warning("listening for run logs failed; trying again", error=str(exc))
        await asyncio.sleep(retry_s)
