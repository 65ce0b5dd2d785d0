"""A runner's GPUs: what ``nvidia-smi`` lists, confined to the operator's ``PARITYBOT_GPUS``.

The inventory is what :mod:`runner.backends.gpu_leases` hands out. It comes from
``nvidia-smi --query-gpu=index,uuid,name,memory.total --format=csv,noheader,nounits`` (NVML's
Python binding is not a dependency); the parsing is pure and tested on the tool's real output.
``PARITYBOT_GPUS`` confines a runner to some of the machine's GPUs (indexes or UUIDs, ``0,1`` or
``GPU-…``), says which GPUs a remote engine's host has when this machine has no ``nvidia-smi``,
or says ``none``. Without both, the inventory is unknown (None) and nothing is leased.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from dataclasses import dataclass

QUERY = ["nvidia-smi", "--query-gpu=index,uuid,name,memory.total", "--format=csv,noheader,nounits"]
QUERY_TIMEOUT_S = 20.0


@dataclass(frozen=True)
class Gpu:
    """One GPU of a runner: leased by its UUID, which stays the same whatever the device order."""

    index: int
    uuid: str
    name: str = ""
    memory_mib: int | None = None

    def describe(self) -> str:
        memory = f", {self.memory_mib} MiB" if self.memory_mib is not None else ""
        return f"{self.index}: {self.name or 'GPU'} ({self.uuid}{memory})"


# What finds the machine's GPUs (nvidia-smi; a fake in tests): None when there is no way to look.
InventorySource = Callable[[], "list[Gpu] | None"]


def parse_nvidia_smi(text: str) -> list[Gpu]:
    """The rows of ``nvidia-smi --query-gpu=index,uuid,name,memory.total --format=csv,noheader,nounits``.

    A model name could hold a comma, so the fields are split from both ends: index and uuid
    first, memory last, the name between. ``[N/A]`` memory is None. Raises
    ValueError on a row that is not one (an error message the tool printed instead).
    """
    gpus: list[Gpu] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        head = [part.strip() for part in line.split(",", 2)]
        if len(head) < 3:
            raise ValueError(f"not an nvidia-smi GPU row: {line.strip()!r}")
        index_text, uuid, rest = head
        name, _, memory_text = rest.rpartition(",")
        if not index_text.isdigit() or not uuid.startswith(("GPU-", "MIG-")):
            raise ValueError(f"not an nvidia-smi GPU row: {line.strip()!r}")
        memory_text = memory_text.strip().removesuffix("MiB").strip()
        memory = int(memory_text) if memory_text.isdigit() else None
        gpus.append(Gpu(int(index_text), uuid, name.strip(), memory))
    return gpus


def parse_selection(value: str | None) -> list[str] | None:
    """``PARITYBOT_GPUS``: None when unset (every GPU nvidia-smi lists), [] for ``none``, else the
    ids in order, without duplicates. Raises ValueError on an empty entry."""
    if value is None or not value.strip():
        return None
    if value.strip().lower() == "none":
        return []
    ids = [part.strip() for part in value.split(",")]
    if any(not part for part in ids):
        raise ValueError(f"PARITYBOT_GPUS={value!r}: an empty entry; say e.g. 0,1 or GPU-…,GPU-…")
    return list(dict.fromkeys(ids))


def confine(found: list[Gpu] | None, selection: list[str] | None) -> list[Gpu] | None:
    """The runner's GPUs: ``found`` (None: nvidia-smi could not tell) confined to ``selection``.

    Without nvidia-smi the selection alone is the inventory (ids as given: Docker takes indexes
    and UUIDs alike). A selected id that nvidia-smi does not list raises ValueError naming it.
    """
    if selection is None:
        return found
    if found is None:
        return [Gpu(i, gpu_id) for i, gpu_id in enumerate(selection)]
    chosen: list[Gpu] = []
    for gpu_id in selection:
        gpu = find(found, gpu_id)
        if gpu is None:
            listed = ", ".join(g.describe() for g in found) or "none"
            raise ValueError(
                f"PARITYBOT_GPUS names {gpu_id}, which nvidia-smi does not list (it lists {listed})"
            )
        if gpu not in chosen:
            chosen.append(gpu)
    return chosen


def find(gpus: list[Gpu], gpu_id: str) -> Gpu | None:
    """The GPU of ``gpus`` that ``gpu_id`` (an index or a UUID) names."""
    for gpu in gpus:
        if gpu_id == gpu.uuid or (gpu_id.isdigit() and int(gpu_id) == gpu.index):
            return gpu
    return None


def query_nvidia_smi() -> list[Gpu] | None:
    """This machine's GPUs, or None when nvidia-smi is missing or fails (no driver, no GPU)."""
    try:
        done = subprocess.run(QUERY, capture_output=True, text=True, timeout=QUERY_TIMEOUT_S, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    if done.returncode != 0:
        return None
    try:
        return parse_nvidia_smi(done.stdout)
    except ValueError:
        return None


def runner_inventory(setting: str | None, source: InventorySource = query_nvidia_smi) -> list[Gpu] | None:
    """The GPUs this runner leases: ``source``'s, confined to ``PARITYBOT_GPUS`` (``setting``);
    None when neither tells (nothing is leased then). Raises ValueError on a bad setting."""
    selection = parse_selection(setting)
    if selection == []:
        return []
    return confine(source(), selection)
