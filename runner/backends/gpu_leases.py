"""GPU leases: which of a runner's GPUs each run gets, exclusively, for as long as it runs. Pure.

An environment's ``gpus:`` is a demand on the runner's inventory (:mod:`runner.backends.gpu_inventory`):

* ``N`` — any N GPUs, for this run alone (the free ones with the lowest indexes);
* ``all`` — every GPU of the runner, for this run alone;
* ``none`` or ``0`` — no GPU: granted at once, never queued;
* a list of device ids (indexes or UUIDs) — exactly those, which must be in the inventory.

A demand the runner can never meet (more GPUs than it has, a device it does not have) is refused
at once, with the reason; any other waits. Waiting is first come, first served: a run is granted
only when every run that asked before it has been, so a run of 8 GPUs is never starved by a stream
of runs of 1. With ``shared=True`` (an operator's choice) leases do not exclude each other: each
run gets the GPUs that the fewest runs hold.

What a dead process's runs still hold is *recovered* from the engine's running containers
(:meth:`GpuAllocator.recover`) and stays taken until those containers are gone.

The allocator does no I/O and never waits: :mod:`runner.backends.gpu_leasing` drives it.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from bot.core.config import Environment
from runner.backends.gpu_inventory import Gpu, find

GpusSetting = str | int | list[str]
# The variables that choose GPUs inside a run: set from the lease, after the environment's own.
VISIBLE_VARIABLES = ("NVIDIA_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES")


class LeaseRefused(ValueError):
    """The runner can never give this demand its GPUs; the message says why."""


@dataclass(frozen=True)
class Demand:
    """What a run asks for: ``count`` GPUs, or exactly ``devices`` (UUIDs) when set."""

    count: int
    devices: tuple[str, ...] | None = None


@dataclass(frozen=True)
class Lease:
    """The GPUs (UUIDs, in the inventory's order) that ``holder`` has for itself."""

    holder: str
    uuids: tuple[str, ...]


class GpuAllocator:
    """The leases of one runner's GPUs; see the module docstring."""

    def __init__(self, inventory: list[Gpu], *, shared: bool = False) -> None:
        self.inventory = list(inventory)
        self.shared = shared
        self._held: dict[str, Lease] = {}
        self._recovered: dict[str, Lease] = {}
        self._waiting: list[tuple[str, Demand]] = []

    # --- demands ---------------------------------------------------------------------------------

    def demand(self, gpus: GpusSetting) -> Demand:
        """``gpus:`` as a demand on this inventory; LeaseRefused when it can never be met."""
        if gpus == "none" or gpus == 0 or gpus == []:
            return Demand(0)
        if gpus == "all":
            return Demand(len(self.inventory), tuple(g.uuid for g in self.inventory))
        if isinstance(gpus, bool) or not isinstance(gpus, int | list):
            raise LeaseRefused(f"gpus must be 'all', 'none', a count or a list of device ids, not {gpus!r}")
        if isinstance(gpus, int):
            if gpus > len(self.inventory):
                raise LeaseRefused(
                    f"the environment asks for {gpus} GPUs (`gpus: {gpus}`) and this runner has "
                    f"{self._has()}: it can never run here; ask for at most {len(self.inventory)}"
                )
            return Demand(gpus)
        chosen: list[str] = []
        for gpu_id in (str(g) for g in gpus):
            gpu = find(self.inventory, gpu_id)
            if gpu is None:
                raise LeaseRefused(
                    f"the environment asks for GPU {gpu_id} (`gpus: {gpus}`) and this runner has "
                    f"{self._has()}: name the runner's GPUs by index or UUID, or ask for a count"
                )
            if gpu.uuid not in chosen:
                chosen.append(gpu.uuid)
        return Demand(len(chosen), tuple(g.uuid for g in self.inventory if g.uuid in chosen))

    def _has(self) -> str:
        if not self.inventory:
            return "no GPU"
        return f"{len(self.inventory)} ({'; '.join(g.describe() for g in self.inventory)})"

    # --- requests and releases ---------------------------------------------------------------------

    def request(self, holder: str, gpus: GpusSetting) -> Lease | None:
        """Ask for ``gpus`` on behalf of ``holder`` (unique among the live ones): the lease when
        granted at once, else None (it waits; :meth:`release` and :meth:`withdraw` grant it later).
        Raises LeaseRefused when the demand can never be met."""
        if holder in self._held or any(h == holder for h, _ in self._waiting):
            raise ValueError(f"{holder} already holds or waits for a lease")
        demand = self.demand(gpus)
        if demand.count == 0:
            lease = Lease(holder, ())
            self._held[holder] = lease
            return lease
        self._waiting.append((holder, demand))
        granted = self._grant()
        return next((lease for lease in granted if lease.holder == holder), None)

    def release(self, holder: str) -> list[Lease]:
        """``holder``'s lease ends; the leases that this grants to waiting runs, in order."""
        self._held.pop(holder, None)
        return self._grant()

    def withdraw(self, holder: str) -> list[Lease]:
        """A waiting run gives up (cancelled); the leases its leaving grants to the runs behind it."""
        self._waiting = [(h, d) for h, d in self._waiting if h != holder]
        return self._grant()

    def recover(self, key: str, device_ids: list[str], count: int = 0) -> Lease:
        """GPUs that a running container already has (a dead process's run, or another
        instance's on the same engine): taken until :meth:`forget_recovered` drops ``key``.
        ``device_ids`` are the container's device request's ids (indexes or UUIDs); a request by
        count (an older paritybot's) took the first ``count`` GPUs, -1 all of them."""
        uuids = [gpu.uuid for gpu in (find(self.inventory, str(i)) for i in device_ids) if gpu is not None]
        if count < 0:
            uuids = [g.uuid for g in self.inventory]
        elif count > 0:
            uuids += [g.uuid for g in sorted(self.inventory, key=lambda g: g.index)[:count]]
        earlier = self._recovered.get(key)
        uuids += list(earlier.uuids) if earlier else []
        lease = Lease(key, tuple(g.uuid for g in self.inventory if g.uuid in uuids))
        self._recovered[key] = lease
        return lease

    def forget_recovered(self, still_running: set[str]) -> list[Lease]:
        """Recovered leases whose containers are gone end; the leases this grants, in order."""
        self._recovered = {k: v for k, v in self._recovered.items() if k in still_running}
        return self._grant()

    # --- state -------------------------------------------------------------------------------------

    @property
    def recovered(self) -> dict[str, Lease]:
        return dict(self._recovered)

    @property
    def held(self) -> dict[str, Lease]:
        return dict(self._held)

    def position(self, holder: str) -> int | None:
        """1 for the first waiting run; None when ``holder`` does not wait."""
        return next((i + 1 for i, (h, _) in enumerate(self._waiting) if h == holder), None)

    def free(self) -> list[str]:
        """The UUIDs no lease holds, in the inventory's order."""
        taken = self._use()
        return [g.uuid for g in self.inventory if not taken[g.uuid]]

    def _use(self) -> Counter[str]:
        return Counter(u for lease in (*self._held.values(), *self._recovered.values()) for u in lease.uuids)

    def _grant(self) -> list[Lease]:
        """Grant waiting demands from the head of the queue while they fit; stop at the first
        that does not (first come, first served: nobody overtakes a bigger run)."""
        granted: list[Lease] = []
        while self._waiting:
            holder, demand = self._waiting[0]
            uuids = self._pick(demand)
            if uuids is None:
                break
            self._waiting.pop(0)
            lease = Lease(holder, uuids)
            self._held[holder] = lease
            granted.append(lease)
        return granted

    def _pick(self, demand: Demand) -> tuple[str, ...] | None:
        use = self._use()
        order = sorted(self.inventory, key=lambda g: g.index)
        if self.shared:
            if demand.devices is not None:
                return demand.devices
            least = sorted(order, key=lambda g: use[g.uuid])[: demand.count]
            return tuple(g.uuid for g in self.inventory if g in least)
        if demand.devices is not None:
            return demand.devices if not any(use[u] for u in demand.devices) else None
        free = [g for g in order if not use[g.uuid]]
        if len(free) < demand.count:
            return None
        picked = {g.uuid for g in free[: demand.count]}
        return tuple(g.uuid for g in self.inventory if g.uuid in picked)


def leased_environment(environment: Environment, lease: Lease) -> Environment:
    """``environment`` as the run gets it under ``lease``: its GPUs by UUID (a container gets a
    device request of exactly these ids, never a count), and the variables that pick GPUs set to
    the lease, last, over whatever the environment's ``env:`` said: a run cannot widen its lease.
    A run of no GPU gets ``NVIDIA_VISIBLE_DEVICES=void`` (an image's ``all`` exposes nothing) and
    an empty ``CUDA_VISIBLE_DEVICES`` (the host runner's processes see no GPU).

    ``CUDA_VISIBLE_DEVICES`` is set only to UUIDs, which name the same GPUs on the host and in a
    container; a lease of bare indexes (``PARITYBOT_GPUS=0,1`` without nvidia-smi) leaves it unset,
    as a container numbers its GPUs from 0 again."""
    env = {k: v for k, v in environment.env.items() if k not in VISIBLE_VARIABLES}
    env["NVIDIA_VISIBLE_DEVICES"] = ",".join(lease.uuids) or "void"
    if all(u.startswith(("GPU-", "MIG-")) for u in lease.uuids):
        env["CUDA_VISIBLE_DEVICES"] = ",".join(lease.uuids)
    gpus: GpusSetting = list(lease.uuids) or "none"
    return environment.model_copy(update={"gpus": gpus, "env": env})
