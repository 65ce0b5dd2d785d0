"""Deliveries across service replicas: the dispatchers wake on each other's deliveries.

A delivery recorded by one replica, or the next of a PR once the one before it finished, wakes
every replica's dispatcher through a NOTIFY (``DELIVERIES_CHANNEL``, sent by the store at commit).
A delivery held by a replica that went silent becomes free at a moment no write marks: its
holder's last heartbeat plus ``PARITYBOT_STALLED_AFTER_S``. Each replica therefore watches for
that moment (:func:`watch_takeovers`) and wakes every dispatcher when it comes, so a killed
replica's deliveries are taken over within the stalled rule, not the stalled rule plus a poll.
"""

from __future__ import annotations

import asyncio

import structlog

from bot.service.store.postgres import PostgresStore

log = structlog.get_logger(__name__)

MIN_WAIT_S = 0.05  # a clock apart between this host and PostgreSQL's never makes this spin


async def watch_takeovers(store: PostgresStore, heartbeat_s: float) -> None:
    """Until cancelled: wake every dispatcher when a silent replica's delivery may be taken over.
    Sleeps until the earliest such moment, and at most a heartbeat (a live holder's moment moves
    on with each of its heartbeats)."""
    while True:
        try:
            wait = await asyncio.to_thread(store.takeover_due)
        except Exception:
            log.exception("looking for deliveries to take over failed; trying again")
            wait = None
        if wait is None or wait <= 0:
            await asyncio.sleep(heartbeat_s)
        else:
            await asyncio.sleep(max(MIN_WAIT_S, min(wait, heartbeat_s)))
