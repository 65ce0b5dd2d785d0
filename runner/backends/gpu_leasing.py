"""Runs wait for their GPUs, hold them while they run, and give them back when they end.

:class:`GpuLeases` drives the pure allocator (:mod:`runner.backends.gpu_leases`) for one runner
(`serve`, or one `agent`): :meth:`GpuLeases.acquire` waits, first come first served, until the
run's GPUs are free, and raises RunRefused at once for a demand the runner can never meet.
:func:`leasing` wraps a runner factory so that every run gets its lease before its runner is made,
runs with exactly the leased GPUs (by UUID), and ends it when the runner closes (the pipeline closes
it in a ``finally``), or when making the runner fails.

Leases live in this process only. At start-up :func:`start_leases` reads the engine's running
paritybot containers (their device requests name the UUIDs they were given): what they hold stays
taken until they are gone, so a restart never hands out a GPU a container still uses.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import docker.errors
import requests
import structlog

from runner.backends.base import (
    Runner,
    RunnerFactory,
    RunnerInfo,
    RunnerRequest,
    RunRefused,
    Step,
    StepResult,
)
from runner.backends.docker_engine import LABEL_MANAGED, LABEL_RUN_ID
from runner.backends.docker_limits import gpus_flag
from runner.backends.gpu_inventory import Gpu
from runner.backends.gpu_leases import GpuAllocator, GpusSetting, Lease, LeaseRefused, leased_environment
from runner.backends.ownership import OWNER_LABEL

log = structlog.get_logger(__name__)

# How often a run waiting behind recovered leases looks whether their containers are gone.
RECHECK_S = 10.0
StillRunning = Callable[[], Awaitable[dict[str, tuple[list[str], int]]]]


class GpuLeases:
    """The GPU leases of one runner; ``still_running`` reads the engine's GPU containers again
    (see :func:`engine_gpu_holders`) while runs wait behind recovered leases."""

    def __init__(
        self,
        allocator: GpuAllocator,
        *,
        still_running: StillRunning | None = None,
        recheck_s: float = RECHECK_S,
    ) -> None:
        self.allocator = allocator
        self._still_running = still_running
        self._recheck_s = recheck_s
        self._waiters: dict[str, asyncio.Future[Lease]] = {}
        self._ids = itertools.count(1)

    async def acquire(self, run_id: str, gpus: GpusSetting) -> Lease:
        """The run's lease, once its GPUs are free; RunRefused when they never can be."""
        holder = f"{run_id}#{next(self._ids)}"
        try:
            lease = self.allocator.request(holder, gpus)
        except LeaseRefused as exc:
            raise RunRefused(str(exc)) from None
        if lease is not None:
            return lease
        log.info("run waits for GPUs", run_id=run_id, gpus=gpus, position=self.allocator.position(holder))
        future: asyncio.Future[Lease] = asyncio.get_running_loop().create_future()
        self._waiters[holder] = future
        try:
            while not future.done():
                await asyncio.wait({future}, timeout=self._recheck_s)
                if not future.done() and self.allocator.recovered and self._still_running is not None:
                    running = await self._still_running()
                    self._settle(self.allocator.forget_recovered(set(running)))
            return future.result()
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():
                self.release(future.result())
            else:
                self._settle(self.allocator.withdraw(holder))
            raise
        finally:
            self._waiters.pop(holder, None)

    def release(self, lease: Lease) -> None:
        """The lease ends; runs waiting for its GPUs get theirs."""
        self._settle(self.allocator.release(lease.holder))

    def _settle(self, granted: list[Lease]) -> None:
        for lease in granted:
            future = self._waiters.get(lease.holder)
            if future is not None and not future.done():
                future.set_result(lease)
            else:  # nobody waits for it any more
                self._settle(self.allocator.release(lease.holder))


class LeasedRunner:
    """A runner whose run holds a GPU lease, ended when the runner closes; all else is the inner's."""

    def __init__(self, inner: Runner, lease: Lease, leases: GpuLeases) -> None:
        self._inner = inner
        self.lease = lease
        self._leases = leases
        self._released = False

    @property
    def info(self) -> RunnerInfo:
        return self._inner.info

    async def prepare(self) -> None:
        await self._inner.prepare()

    async def run(self, step: Step, workspace: Path) -> StepResult:
        return await self._inner.run(step, workspace)

    async def cancel(self) -> None:
        await self._inner.cancel()

    async def close(self) -> None:
        try:
            await self._inner.close()
        finally:
            if not self._released:
                self._released = True
                self._leases.release(self.lease)

    def __getattr__(self, name: str) -> Any:
        # What some runners have besides (read_running, start_session) stays reachable.
        return getattr(self._inner, name)


def leasing(factory: RunnerFactory, leases: GpuLeases | None) -> RunnerFactory:
    """``factory`` whose runs first get their GPUs' lease (None: GPUs are not leased)."""
    if leases is None:
        return factory

    async def make(request: RunnerRequest) -> Runner:
        lease = await leases.acquire(request.run_id, request.environment.gpus)
        try:
            environment = leased_environment(request.environment, lease)
            runner = await factory(replace(request, environment=environment))
        except BaseException:
            leases.release(lease)
            raise
        if runner.info.gpus is not None:
            # A repro command runs elsewhere: it asks for what the environment asks, not this host's UUIDs.
            runner.info.gpus = gpus_flag(request.environment.gpus)
        log.info("GPUs leased", run_id=request.run_id, gpus=list(lease.uuids))
        return LeasedRunner(runner, lease, leases)

    return make


def engine_gpu_holders(client: docker.DockerClient) -> dict[str, tuple[list[str], int]]:
    """The GPUs that the engine's running paritybot containers were given, by run:
    ``owner/run id`` → (device ids, count) of their device requests (blocking)."""
    holders: dict[str, tuple[list[str], int]] = {}
    running = client.containers.list(
        ignore_removed=True, filters={"label": f"{LABEL_MANAGED}=1", "status": "running"}
    )
    for container in running:
        labels = container.labels or {}
        key = f"{labels.get(OWNER_LABEL, '?')}/{labels.get(LABEL_RUN_ID, container.id)}"
        ids, count = holders.get(key, ([], 0))
        for request in (container.attrs.get("HostConfig") or {}).get("DeviceRequests") or []:
            if ["gpu"] not in (request.get("Capabilities") or []):
                continue
            ids = ids + [str(i) for i in request.get("DeviceIDs") or []]
            wanted = int(request.get("Count") or 0)
            count = -1 if wanted < 0 or count < 0 else max(count, wanted)
        if ids or count:
            holders[key] = (ids, count)
    return holders


def start_leases(
    inventory: list[Gpu] | None,
    *,
    shared: bool = False,
    client: docker.DockerClient | None = None,
) -> GpuLeases | None:
    """The leases of a runner with ``inventory`` (None: not known, nothing is leased), with what
    the running containers of ``client``'s engine hold recovered (blocking)."""
    if inventory is None:
        log.warning(
            "GPUs are not leased: nvidia-smi lists none here and PARITYBOT_GPUS is unset; runs get "
            "the GPUs their gpus: setting names, and concurrent runs may share them"
        )
        return None
    allocator = GpuAllocator(inventory, shared=shared)
    still_running: StillRunning | None = None
    if client is not None:
        for key, (ids, count) in engine_gpu_holders(client).items():
            lease = allocator.recover(key, ids, count)
            log.warning("GPUs still held by a running container", holder=key, gpus=list(lease.uuids))
        engine = client

        async def still_running() -> dict[str, tuple[list[str], int]]:
            try:
                return await asyncio.to_thread(engine_gpu_holders, engine)
            except (docker.errors.DockerException, requests.RequestException) as exc:
                # Not known to be gone: what was recovered stays taken until the engine answers.
                log.warning("GPU leases: the engine's containers could not be read", error=str(exc))
                return {key: ([], 0) for key in allocator.recovered}

    log.info("GPU leases", gpus=[g.describe() for g in inventory], shared=shared)
    return GpuLeases(allocator, still_running=still_running)
