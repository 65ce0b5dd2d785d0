"""Who owns what a runner leaves on a container engine, and whether that owner is still alive.

Several agents (one per GPU) share one engine, `serve` and a developer's `paritybot check
--runner docker` may too. Everything a runner starts there carries its owner and its run
(:data:`OWNER_LABEL`, :data:`RUN_LABEL`), so that an instance starting up (and now and then while it
runs) removes only the leftovers of owners that are dead — those of its own earlier start among
them — or of runs its store says are over, never a live neighbour's run.

Two kinds of owner:

* an **instance** (``instance:<id>``): one start of `serve` or of an agent, recorded in its store
  with a heartbeat. Whether it lives is the store's to say (:class:`Liveness` gets it from there);
  an instance a store does not know belongs to another deployment, and is left alone.
* a **process** (``process:<host>/<boot>/<pid namespace>/<pid>/<start ticks>``): a `check` on a
  developer's machine, which has no store. It lives while that process does; a process id alone may
  be reused, the boot and the start time name one process for good. Only a process of the same
  host, boot and pid namespace can be judged; any other is left alone.

The decision (:func:`leftover_is_removable`) is a pure function of the labels, this instance and
what is known of the owners; :func:`process_alive` reads ``/proc``.
"""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Callable, Mapping, Set
from dataclasses import dataclass
from typing import Literal

from runner.backends.host import boot_id, start_ticks

OWNER_LABEL = "paritybot.owner"
RUN_LABEL = "paritybot.run-id"

OwnerKind = Literal["instance", "process"]


@dataclass(frozen=True)
class Owner:
    kind: OwnerKind
    id: str

    @property
    def label(self) -> str:
        return f"{self.kind}:{self.id}"


Liveness = Callable[[Owner], bool | None]
"""Whether an owner is alive: True, False, or None when it cannot be told from here (left alone)."""
RunsOver = Callable[[set[str]], set[str]]
"""Of these run ids, those the store knows to be over (ended); a run it does not know is not."""


def parse_owner(label: str | None) -> Owner | None:
    """The owner an ``OWNER_LABEL`` value names; None for a value this code never writes."""
    kind, sep, ident = (label or "").partition(":")
    if not sep or not ident or kind not in ("instance", "process"):
        return None
    return Owner("instance" if kind == "instance" else "process", ident)


def new_instance() -> Owner:
    """A fresh identity for one start of `serve` or an agent; the store records it."""
    return Owner("instance", uuid.uuid4().hex)


def _pid_namespace() -> str:
    try:
        return os.readlink("/proc/self/ns/pid").removeprefix("pid:").strip("[]")
    except OSError:
        return "?"


def _process_id(pid: int) -> str | None:
    boot, ticks = boot_id(), start_ticks(pid)
    if boot is None or ticks is None:
        return None
    return f"{socket.gethostname()}/{boot}/{_pid_namespace()}/{pid}/{ticks}"


def this_process() -> Owner:
    """This process as an owner (`paritybot check`, or a runner made without an instance)."""
    ident = _process_id(os.getpid())
    # Without /proc, a process cannot be judged later: a random id is then never removed by others.
    return Owner("process", ident or f"unknown/{uuid.uuid4().hex}")


def process_alive(owner: Owner) -> bool | None:
    """Whether the process ``owner`` names still runs; None when this process cannot tell (another
    host, another pid namespace, no /proc). A process of an earlier boot of this host is dead."""
    parts = owner.id.split("/")
    here = (_process_id(os.getpid()) or "").split("/")
    if owner.kind != "process" or len(parts) != 5 or len(here) != 5 or not parts[3].isdigit():
        return None
    host, boot, namespace, pid, ticks = parts
    if host != here[0]:
        return None
    if boot != here[1]:
        return False  # this host rebooted since: nothing of that process is left
    if namespace != here[2]:
        return None
    return str(start_ticks(int(pid))) == ticks


def leftover_is_removable(
    labels: Mapping[str, str],
    me: Owner,
    alive: Mapping[Owner, bool | None],
    runs_over: Set[str] = frozenset(),
) -> bool:
    """Whether an instance starting up (``me``) may remove a container or volume with ``labels``.

    A dead owner's, yes; one of a run the store says is over (``runs_over``: ended, whoever ran
    it), yes; its own (it is running them), a live owner's or one that cannot be judged, never. Nor what a build that wrote no owner left: whether its runner lives cannot be
    told (the operator removes those by hand, deploy/README.md). An instance's identity is new at
    each start, so what it left before a restart is a dead owner's.
    """
    owner = parse_owner(labels.get(OWNER_LABEL))
    if owner is None or owner == me:
        return False
    return alive.get(owner) is False or labels.get(RUN_LABEL) in runs_over
