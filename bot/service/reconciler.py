"""Whatever paritybot creates on GitHub, it finishes: the reconciler's periodic pass.

A job that reaches a final state for any reason (its run ended, it was cancelled, refused, its
executor crashed, a restart or a silent worker stopped it too often) is marked *due* in the same
transaction (``report_due``), and whatever changes a run leaves it to announce
(``reported_state``, ``progress``). The publisher (:mod:`bot.service.publisher`) tells GitHub, and
records that it did only once GitHub has it; whatever stops it half-way (GitHub down, a rate
limit, a crash) leaves the run to publish.

The reconciler runs at start-up and then every ``interval_s``. Each pass:

1. on one machine, takes back running jobs whose worker stopped answering (no heartbeat for
   ``PARITYBOT_STALLED_AFTER_S``): queued again, or failed once they had ``max_attempts``. With
   several hosts the stalled-job reaper does that instead, at the agents' heartbeat pace
   (:mod:`bot.service.fleet.reaper`);
2. has the publisher publish every run left to publish (due, or not announced);
3. has it give every queued or running job the check runs it lacks (a creation that failed);
4. removes the run pages' logs older than ``log_retention`` (``PARITYBOT_LOG_RETENTION_DAYS``).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import structlog

from bot.service.publisher.publisher import Publisher
from bot.service.supervisor import Supervisor, stop_kept

log = structlog.get_logger(__name__)

TakeBack = Callable[[], tuple[int, int]]
"""Takes back the runs of silent workers: (requeued, failed). One machine: the store's ``recover``
with ``stale_after_s``; several hosts have none here, the reaper does it (bot.service.fleet.reaper)."""


class Reconciler:
    def __init__(
        self,
        publisher: Publisher,
        *,
        interval_s: float = 60.0,
        take_back: TakeBack | None = None,
        log_retention: timedelta | None = None,
    ):
        self.publisher = publisher
        self.interval_s = interval_s
        self.take_back = take_back
        self.log_retention = log_retention
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self.passes = 0  # completed passes, for tests and logs

    async def run_once(self) -> None:
        if self.take_back is not None:
            requeued, failed = await asyncio.to_thread(self.take_back)
            if requeued or failed:
                log.warning("runs of silent workers taken back", requeued=requeued, failed=failed)
        await self.publisher.publish_pending()
        await self.publisher.publish_missing()
        if self.log_retention is not None:
            before = datetime.now(UTC) - self.log_retention
            purged = await asyncio.to_thread(self.publisher.store.purge_logs, before)
            if purged:
                log.info("run logs past their retention removed", events=purged)
        self.passes += 1

    def wake(self) -> None:
        self._wake.set()

    def start(self, supervisor: Supervisor) -> None:
        self._task = supervisor.keep("reconciler", self._loop)

    async def stop(self) -> None:
        await stop_kept(self._task)
        self._task = None

    async def _loop(self) -> None:
        while True:
            self._wake.clear()
            try:
                await self.run_once()
            except Exception:
                log.exception("reconciler pass failed")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.interval_s)
