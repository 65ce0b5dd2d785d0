"""Turns recorded deliveries into handler calls, outside the request that received them.

A delivery is marked ``dispatched`` only after its handlers finished, so a crash between the
202 and the handlers loses nothing: the next start dispatches it again. A delivery whose handlers
keep failing is retried a few times, then marked ``failed`` with the error (never silently lost).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Awaitable, Callable
from typing import Any

import structlog
from gidgethub import sansio
from gidgethub.routing import Router

from bot.service.store.protocol import Store
from bot.service.store.records import Delivery, DeliveryStatus

log = structlog.get_logger(__name__)

ContextFactory = Callable[[sansio.Event], Awaitable[Any]]
MAX_DELIVERY_ATTEMPTS = 3
RETRY_BASE_DELAY_S = 5.0


class Dispatcher:
    def __init__(
        self,
        store: Store,
        router: Router,
        context_factory: ContextFactory,
        wake: asyncio.Event | None = None,
        poll_interval: float = 1.0,
        retry_base_delay_s: float = RETRY_BASE_DELAY_S,
    ):
        self.retry_base_delay_s = retry_base_delay_s
        self._store = store
        self._router = router
        self._context_factory = context_factory
        self._wake = wake or asyncio.Event()
        self._poll = poll_interval
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name="dispatcher")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _loop(self) -> None:
        while True:
            self._wake.clear()
            await self.drain()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self._poll)

    async def drain(self) -> int:
        """Dispatch every pending delivery once; returns how many were handled."""
        handled = 0
        while True:
            batch = await asyncio.to_thread(self._store.pending_deliveries, 50)
            batch = [d for d in batch if d.attempts < MAX_DELIVERY_ATTEMPTS]
            if not batch:
                return handled
            for delivery in batch:
                await self.dispatch(delivery)
                handled += 1

    async def dispatch(self, delivery: Delivery) -> None:
        structlog.contextvars.bind_contextvars(delivery_id=delivery.delivery_id, event=delivery.event)
        try:
            data = json.loads(delivery.body)
            event = sansio.Event(data, event=delivery.event, delivery_id=delivery.delivery_id)
            structlog.contextvars.bind_contextvars(
                action=data.get("action"),
                repo=(data.get("repository") or {}).get("full_name"),
            )
            ctx = await self._context_factory(event)
            await self._router.dispatch(event, ctx)
        except Exception as exc:
            attempts = delivery.attempts + 1
            log.exception("delivery handling failed", attempt=attempts)
            if attempts >= MAX_DELIVERY_ATTEMPTS:
                await asyncio.to_thread(
                    self._store.finish_delivery, delivery.delivery_id, DeliveryStatus.FAILED, repr(exc)
                )
            else:
                # GitHub's hiccups pass: wait longer after each failure (5 s, then 20 s).
                delay = self.retry_base_delay_s * 4 ** (attempts - 1)
                await asyncio.to_thread(
                    self._store.retry_delivery_later, delivery.delivery_id, repr(exc), delay
                )
        else:
            await asyncio.to_thread(
                self._store.finish_delivery, delivery.delivery_id, DeliveryStatus.DISPATCHED
            )
            log.info("delivery handled")
        finally:
            structlog.contextvars.unbind_contextvars("delivery_id", "event", "action", "repo")
