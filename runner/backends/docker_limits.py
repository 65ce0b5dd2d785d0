"""The limits of a step container: GPUs as device requests, memory, shared memory, /tmp, CPUs
and the workspace's size, with unset sizes derived from the engine's machine. Pure functions."""

from __future__ import annotations

from dataclasses import dataclass

import docker.errors
from docker.types import DeviceRequest
from docker.utils import parse_bytes

from bot.core.config import (
    CPUS_DEFAULT_MAX,
    MEMORY_DEFAULT_MAX,
    SHM_DEFAULT_MAX,
    TMPFS_DEFAULT_MAX,
    Environment,
    ResourceLimits,
)
from runner.backends.base import RunnerError


def device_requests(gpus: str | int | list[str]) -> list[DeviceRequest]:
    """``environment.gpus`` as Docker device requests: 'all', a count, device ids, or none."""
    if gpus == "none" or gpus == 0 or gpus == []:
        return []
    if gpus == "all":
        return [DeviceRequest(count=-1, capabilities=[["gpu"]])]
    if isinstance(gpus, int):
        return [DeviceRequest(count=gpus, capabilities=[["gpu"]])]
    if isinstance(gpus, list):
        return [DeviceRequest(device_ids=[str(g) for g in gpus], capabilities=[["gpu"]])]
    raise ValueError(f"gpus must be 'all', 'none', a count or a list of device ids, not {gpus!r}")


@dataclass(frozen=True)
class EffectiveLimits:
    """The limits a step container gets, sizes in bytes."""

    memory: int
    shm: int
    tmpfs: int
    cpus: float
    pids: int


def effective_limits(limits: ResourceLimits, engine_memory: int, engine_cpus: int) -> EffectiveLimits:
    """The configured limits, with unset ones derived from the engine's machine.

    The rule, said in the config schema too: memory = min(16g, 3/4 of the engine's memory);
    shm = min(8g, memory / 2); tmpfs = min(4g, memory / 4); cpus = min(8, the engine's CPUs), and
    a configured CPU count above the engine's is lowered to it (Docker refuses more). An engine
    that reports no memory or CPU count (0) gets the maximums. Raises ValueError on a bad size.
    """
    if limits.memory is not None:
        memory = _size(limits.memory, "memory")
    else:
        memory = _size(MEMORY_DEFAULT_MAX, "memory")
        if engine_memory > 0:
            memory = min(memory, _round_down_mib(engine_memory * 3 // 4))
    if limits.shm_size is not None:
        shm = _size(limits.shm_size, "shm_size")
    else:
        shm = min(_size(SHM_DEFAULT_MAX, "shm_size"), _round_down_mib(memory // 2))
    if limits.tmpfs_size is not None:
        tmpfs = _size(limits.tmpfs_size, "tmpfs_size")
    else:
        tmpfs = min(_size(TMPFS_DEFAULT_MAX, "tmpfs_size"), _round_down_mib(memory // 4))
    cpus = limits.cpus if limits.cpus is not None else CPUS_DEFAULT_MAX
    if engine_cpus > 0:
        cpus = min(cpus, float(engine_cpus))
    return EffectiveLimits(memory=memory, shm=shm, tmpfs=tmpfs, cpus=cpus, pids=limits.pids)


def _size(value: str, key: str) -> int:
    try:
        return int(parse_bytes(value))
    except docker.errors.DockerException as exc:
        raise ValueError(f"limits.{key} = {value!r}: {exc}") from None


def _round_down_mib(n: int) -> int:
    return max(n >> 20, 1) << 20


def human_size(n: int) -> str:
    """Bytes in Docker's size syntax, as short as it stays exact: 8g, 768m, 1536k, 1000."""
    for suffix, shift in (("g", 30), ("m", 20), ("k", 10)):
        if n and n % (1 << shift) == 0:
            return f"{n >> shift}{suffix}"
    return str(n)


def gpus_flag(gpus: str | int | list[str]) -> str | None:
    """The ``docker run --gpus`` value asking for the same GPUs; None when no GPU is requested."""
    if not device_requests(gpus):
        return None
    if isinstance(gpus, list):
        # The CLI splits --gpus on commas, so a device list must be quoted inside the value.
        return '"device=' + ",".join(str(g) for g in gpus) + '"'
    return str(gpus)


def workspace_limit(environment: Environment) -> int:
    """``limits.workspace_size`` in bytes; a RunnerError naming the setting when it is not a size."""
    from docker.utils import parse_bytes

    try:
        size = int(parse_bytes(environment.limits.workspace_size))
    except docker.errors.DockerException as exc:
        raise RunnerError(f"environment {environment.name}: bad limits.workspace_size: {exc}") from None
    if size <= 0:
        raise RunnerError(f"environment {environment.name}: limits.workspace_size must be more than 0")
    return size
