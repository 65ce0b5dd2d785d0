"""A run's change feed: ``async for run in publisher.changes(run_id)`` yields the run as the store
holds it, first as it is, then each time it changed, until it is over and GitHub shows it.

Whatever changes a run wakes the publisher with its id, in both modes (one machine: the writer in
this process; several hosts: the NOTIFY every write sends at commit, LISTENed by each replica), and
the publisher tells the run's followers here. A follower re-reads the run when told, and also every
``poll_s`` (a notification lost with a dropped connection costs that), and yields it only when it
differs from what it yielded last: what it reads is the store's, never a message's.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import defaultdict
from collections.abc import AsyncIterator, Callable

from bot.core.models import RunState
from bot.service.store.protocol import Store
from bot.service.store.records import Job

ACTIVE = (RunState.QUEUED, RunState.RUNNING)


class ChangeFeed:
    def __init__(self, store: Store, poll_s: float = 5.0):
        self.store = store
        self.poll_s = poll_s
        self._followers: dict[str, set[asyncio.Event]] = defaultdict(set)
        # Told each changed run's id too: the run pages' live streams (bot/service/run_page/live.py).
        self.listeners: list[Callable[[str], None]] = []

    def changed(self, run_id: str) -> None:
        """The run's stored state may have changed: its followers read it again."""
        for event in self._followers.get(run_id, ()):
            event.set()
        for listener in self.listeners:
            listener(run_id)

    def following(self, run_id: str) -> int:
        return len(self._followers.get(run_id, ()))

    async def follow(self, run_id: str) -> AsyncIterator[Job]:
        """The run now, then at each change; ends once it is over and published (nothing about it
        changes after that), or at once for a run the store does not know."""
        told = asyncio.Event()
        self._followers[run_id].add(told)
        try:
            last: Job | None = None
            while True:
                told.clear()  # before reading: a change during the read is not missed
                job = await asyncio.to_thread(self.store.get_job, run_id)
                if job is None:
                    return
                if job != last:
                    last = job
                    yield job
                if job.state not in ACTIVE and not job.report_due:
                    return
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(told.wait(), self.poll_s)
        finally:
            self._followers[run_id].discard(told)
            if not self._followers[run_id]:
                del self._followers[run_id]
