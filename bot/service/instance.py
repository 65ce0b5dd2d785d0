"""This start of `serve` or of an agent as its store knows it: an id, a heartbeat, and what it
may remove from the container engine at start-up and while it runs.

Everything its runners start carries the instance's id (:mod:`runner.backends.ownership`); the
store says which instances live (a heartbeat younger than ``PARITYBOT_STALLED_AFTER_S``), and
``/proc`` which `paritybot check` processes do. So a restarting agent removes what it or dead
neighbours left, never the live run of another agent on the same engine.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from dataclasses import dataclass, field

import structlog

from bot.service.store.protocol import Store
from bot.service.supervisor import Supervisor
from runner.backends.choice import check_engine
from runner.backends.docker_engine import remove_leftovers
from runner.backends.ownership import Owner, new_instance, process_alive

log = structlog.get_logger(__name__)


@dataclass
class Instance:
    store: Store
    kind: str  # "serve" or "agent"
    heartbeat_s: float
    stalled_after_s: float
    owner: Owner = field(default_factory=new_instance)
    _task: asyncio.Task[None] | None = None

    @property
    def id(self) -> str:
        return self.owner.id

    def register(self) -> None:
        self.store.register_instance(self.id, self.kind, socket.gethostname(), os.getpid())
        log.info("instance recorded", instance=self.id, kind=self.kind)

    def alive(self, owner: Owner) -> bool | None:
        """Whether ``owner`` lives: a `check` by its process, an instance by this store (None:
        not this store's, so not this instance's to judge)."""
        if owner.kind == "process":
            return process_alive(owner)
        return self.store.instances_alive([owner.id], self.stalled_after_s).get(owner.id)

    def sweep_engine(self) -> tuple[int, int]:
        """Remove from the engine what this instance may (blocking); (containers, volumes)."""
        _engine, client = check_engine()
        if client is None:
            return 0, 0
        try:
            return remove_leftovers(client, self.owner, self.alive, self.store.runs_over)
        finally:
            client.close()

    def start(self, supervisor: Supervisor) -> None:
        self._task = supervisor.keep("instance heartbeat", self.beat_forever)

    async def stop(self) -> None:
        """Stop beating and say so in the store: the instance is over, its leftovers anyone's."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        with contextlib.suppress(Exception):
            await asyncio.to_thread(self.store.instance_stopped, self.id)

    async def beat_forever(self) -> None:
        """The heartbeat of `serve` (an agent beats in its own heartbeat, which also fences)."""
        while True:
            if not await asyncio.to_thread(self.store.instance_heartbeat, self.id):
                log.error(
                    "this instance is recorded stopped: another start of serve took over", instance=self.id
                )
            await asyncio.sleep(self.heartbeat_s)

    async def sweep_forever(self) -> None:
        """Now and then, what neighbours that died left on the engine (their containers run on)."""
        while True:
            await asyncio.sleep(self.stalled_after_s)
            try:
                await asyncio.to_thread(self.sweep_engine)
            except Exception:
                log.exception("removing what dead neighbours left failed; trying again later")
