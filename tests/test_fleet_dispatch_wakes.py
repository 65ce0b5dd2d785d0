"""Several service replicas on one PostgreSQL: a replica's dispatcher takes a delivery as soon as
one is there for it, whichever replica recorded it, not at its next poll.

The dispatchers here poll once an hour, so a delivery handled at all was handled because a
NOTIFY woke its dispatcher: without one these tests time out.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import pytest
from gidgethub import sansio
from gidgethub.routing import Router
from postgres_support import pg_url

from bot.service.dispatcher import Dispatcher
from bot.service.fleet.deliveries import watch_takeovers
from bot.service.fleet.notify import listen
from bot.service.store.postgres import DELIVERIES_CHANNEL
from bot.service.store.postgres_fleet import FleetStore
from bot.service.store.records import DeliveryStatus

__all__ = ["pg_url"]
pytestmark = pytest.mark.postgres

HOUR_S = 3600.0


class Replica:
    """One replica's dispatching side, as `serve` wires it: its store, its instance, the LISTEN
    that wakes its dispatcher, and the watch for deliveries to take over."""

    def __init__(self, url: str, name: str, stalled: timedelta):
        self.url = url
        self.store = FleetStore(url, stalled_after=stalled, delivery_lease=timedelta(minutes=10))
        self.store.register_instance(name, "serve", "control", 1)
        self.handled: list[str] = []
        router = Router()

        @router.register("ping")
        async def ping(event: sansio.Event, *args: Any, **kwargs: Any) -> None:
            self.handled.append(event.delivery_id)

        self.wake = asyncio.Event()
        self.dispatcher = Dispatcher(
            self.store, router, self._context, wake=self.wake, poll_interval=HOUR_S, concurrency=8
        )
        self.tasks: list[asyncio.Task[None]] = []

    async def _context(self, installation: int | None) -> object:
        return object()

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[Replica]:
        self.tasks = [
            asyncio.create_task(listen(self.url, {DELIVERIES_CHANNEL: self.wake})),
            asyncio.create_task(watch_takeovers(self.store, 0.2)),
        ]
        await asyncio.sleep(0.5)  # listening
        self.tasks.append(asyncio.create_task(self.dispatcher._loop()))
        try:
            yield self
        finally:
            for task in self.tasks:
                task.cancel()
            for task in self.tasks:
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            self.store.close()


async def handled(replica: Replica, delivery_id: str, timeout: float = 20.0) -> None:
    async with asyncio.timeout(timeout):
        while delivery_id not in replica.handled:
            await asyncio.sleep(0.05)


async def test_a_delivery_recorded_by_another_replica_wakes_this_replicas_dispatcher(pg_url: str) -> None:
    receiving = FleetStore(pg_url)  # the replica GitHub sent it to: it does not dispatch here
    try:
        async with Replica(pg_url, "replica-2", timedelta(seconds=5)).running() as other:
            await asyncio.sleep(0.5)  # the dispatcher's first drain found nothing: it waits now
            assert receiving.record_delivery("d-1", "ping", b"{}")
            await handled(other, "d-1")
            assert receiving.delivery_status("d-1") == DeliveryStatus.DISPATCHED
    finally:
        receiving.close()


async def test_a_killed_replicas_delivery_is_taken_over_once_it_is_silent_not_at_a_poll(pg_url: str) -> None:
    killed = FleetStore(pg_url, stalled_after=timedelta(seconds=1), delivery_lease=timedelta(minutes=10))
    try:
        killed.register_instance("replica-1", "serve", "control", 1)
        assert killed.record_delivery("d-2", "ping", b"{}")
        (held,) = killed.pending_deliveries()  # replica-1 took it, then died: no heartbeat again
        assert held.delivery_id == "d-2"
        async with Replica(pg_url, "replica-2", timedelta(seconds=1)).running() as other:
            beating = asyncio.create_task(beat(other))
            try:
                await handled(other, "d-2")
            finally:
                beating.cancel()
        assert killed.delivery_status("d-2") == DeliveryStatus.DISPATCHED
    finally:
        killed.close()


async def beat(replica: Replica) -> None:
    while True:
        await asyncio.to_thread(replica.store.instance_heartbeat, "replica-2")
        await asyncio.sleep(0.2)
