"""Turns recorded deliveries into handler calls, outside the request that received them.

A delivery is marked ``dispatched`` only after its handlers finished, so a crash between the
202 and the handlers loses nothing: the next start dispatches it again. A delivery whose handlers
keep failing is retried a few times, then marked ``failed`` with the error (never silently lost).
A delivery whose payload does not have the shape the handlers read (``handlers.events``) is
marked ``failed`` at once with one line naming the field: the same bytes would fail again.
A delivery no handler listens to is marked ``dispatched`` without a call to GitHub.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

import structlog
from gidgethub import sansio
from gidgethub.routing import Router

from bot.service.store.protocol import Store
from bot.service.store.records import Delivery, DeliveryStatus
from bot.service.supervisor import Supervisor
from handlers.events import Envelope, MalformedPayload, parse, read_body

log = structlog.get_logger(__name__)

ContextFactory = Callable[[int | None], Awaitable[Any]]  # installation id → handler context
ERROR_MAX = 500  # characters of an error kept with a failed delivery
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
        concurrency: int = 1,
    ):
        self.retry_base_delay_s = retry_base_delay_s
        # One machine: one delivery at a time, in order. Several replicas on PostgreSQL: several at
        # once, since the store hands out a PR's deliveries only one after another, in order.
        self.concurrency = concurrency
        self._store = store
        self._router = router
        self._context_factory = context_factory
        self._wake = wake or asyncio.Event()
        self._poll = poll_interval
        self._task: asyncio.Task[None] | None = None

    def start(self, supervisor: Supervisor) -> None:
        self._task = supervisor.keep("dispatcher", self._loop)

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
        if self.concurrency > 1:
            return await self._drain_concurrently()
        handled = 0
        while True:
            batch = await asyncio.to_thread(self._store.pending_deliveries, 50)
            batch = [d for d in batch if d.attempts < MAX_DELIVERY_ATTEMPTS]
            if not batch:
                return handled
            for delivery in batch:
                await self.dispatch(delivery)
                handled += 1

    async def _drain_concurrently(self) -> int:
        handled = 0
        running: set[asyncio.Task[None]] = set()
        while True:
            while len(running) < self.concurrency:
                batch = await asyncio.to_thread(
                    self._store.pending_deliveries, self.concurrency - len(running)
                )
                batch = [d for d in batch if d.attempts < MAX_DELIVERY_ATTEMPTS]
                if not batch:
                    break
                running |= {asyncio.create_task(self.dispatch(d)) for d in batch}
            if not running:
                return handled
            # A slot frees, or a new delivery is recorded here, or a poll passes (another replica's).
            self._wake.clear()
            waiter = asyncio.create_task(self._wake.wait())
            done, _ = await asyncio.wait(
                running | {waiter}, timeout=self._poll, return_when=asyncio.FIRST_COMPLETED
            )
            waiter.cancel()
            finished = done - {waiter}
            running -= finished
            handled += len(finished)

    async def dispatch(self, delivery: Delivery) -> None:
        structlog.contextvars.bind_contextvars(delivery_id=delivery.delivery_id, event=delivery.event)
        try:
            await self._handle(delivery)
        except MalformedPayload as exc:
            log.warning("delivery malformed; not retried", error=str(exc))
            await asyncio.to_thread(
                self._store.finish_delivery, delivery.delivery_id, DeliveryStatus.FAILED, str(exc)
            )
        except Exception as exc:
            attempts = delivery.attempts + 1
            log.exception("delivery handling failed", attempt=attempts)
            error = _one_line(exc)
            if attempts >= MAX_DELIVERY_ATTEMPTS:
                await asyncio.to_thread(
                    self._store.finish_delivery, delivery.delivery_id, DeliveryStatus.FAILED, error
                )
            else:
                # GitHub's hiccups pass: wait longer after each failure (5 s, then 20 s).
                delay = self.retry_base_delay_s * 4 ** (attempts - 1)
                await asyncio.to_thread(self._store.retry_delivery_later, delivery.delivery_id, error, delay)
        else:
            await asyncio.to_thread(
                self._store.finish_delivery, delivery.delivery_id, DeliveryStatus.DISPATCHED
            )
            log.info("delivery handled")
        finally:
            structlog.contextvars.unbind_contextvars("delivery_id", "event", "action", "repo")

    async def _handle(self, delivery: Delivery) -> None:
        # In a thread: a large body does not hold up the event loop, and a thread's stack is
        # shallower than the intake's, so whatever nesting the intake parsed parses here too.
        data = await asyncio.to_thread(read_body, delivery.body)
        envelope = parse(Envelope, data)
        repo = envelope.repository.full_name if envelope.repository is not None else None
        structlog.contextvars.bind_contextvars(action=envelope.action, repo=repo)
        event = sansio.Event(data, event=delivery.event, delivery_id=delivery.delivery_id)
        if not self._router.fetch(event):
            return  # no handler listens: no installation token, no call to GitHub
        installation = envelope.installation.id if envelope.installation is not None else None
        await self._router.dispatch(event, await self._context_factory(installation))


def _one_line(exc: Exception) -> str:
    """The error kept with a delivery: its type and message, on one bounded line."""
    text = " ".join(f"{type(exc).__name__}: {exc}".split())
    return text if len(text) <= ERROR_MAX else text[: ERROR_MAX - 1] + "…"
