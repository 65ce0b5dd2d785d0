"""The stalled-job reaper: procrastinate records heartbeats but never takes a dead worker's jobs back.

Every agent and every service replica runs one; each pass is one transaction that locks what it
takes (``FOR UPDATE SKIP LOCKED``), so several at once never take the same job twice. A stalled
attempt is ended and its run deferred again as a new queue job, rather than retried in place
(procrastinate's ``retry_job``): a frozen agent that comes back finishes its *own* queue job, which
is already over, so its late finish can neither mark the retry done nor release the retry's lock.
The new job's insert trigger wakes the idle agents of its queue at once (NOTIFY); ``retry_job``, an
UPDATE, would wait for their next poll.
"""

from __future__ import annotations

import asyncio

import structlog

from bot.service.store.postgres_fleet import FleetStore

log = structlog.get_logger(__name__)


async def reap_once(store: FleetStore, stalled_after_s: float, max_attempts: int) -> int:
    reaped = await asyncio.to_thread(store.reap, stalled_after_s, max_attempts)
    for r in reaped:
        log.warning(
            "run taken back from a silent agent", run_id=r.job_id, outcome=r.outcome, worker_id=r.worker_id
        )
    return len(reaped)


async def reap_forever(
    store: FleetStore, interval_s: float, stalled_after_s: float, max_attempts: int
) -> None:
    while True:
        await asyncio.sleep(interval_s)
        try:
            await reap_once(store, stalled_after_s, max_attempts)
        except Exception:
            log.exception("reaper pass failed; trying again at the next one")
