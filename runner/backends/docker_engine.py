"""The container runner's labels and the engine calls it makes on containers and volumes that may
be gone already (a concurrent cancel, a clean-up): none of them raises for that. The removal of
what runners that died left on the engine, by owner (:mod:`runner.backends.ownership`).

Removal is idempotent and ordered: a container whose removal another caller has begun is waited
for, and a volume is removed only once no container holds it. The engine lets a volume go only at
the very end of a container's removal, after the container has already vanished from lists and
inspection (an inspect answers 404 meanwhile), so "volume is in use" is retried for a while."""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Callable
from typing import Any

import docker
import docker.errors
import structlog
from docker.models.containers import Container

from runner.backends.base import RunnerError
from runner.backends.ownership import (
    OWNER_LABEL,
    RUN_LABEL,
    Liveness,
    Owner,
    RunsOver,
    leftover_is_removable,
    parse_owner,
)

log = structlog.get_logger(__name__)


LABEL_MANAGED = "paritybot.managed"


LABEL_RUN_ID = RUN_LABEL


# step, watch (the workspace watcher beside the steps), workspace (per-run volume) or store (kept across runs)
LABEL_ROLE = "paritybot.role"

# How long a removal waits for one already under way elsewhere, and for a volume's containers to
# let it go; a forced removal takes well under a second, but seconds on a loaded engine.
RELEASE_TIMEOUT_S = 30.0
_POLL_S = 0.2


def safe_name(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "-", text)[:100]


def api_error_text(exc: Exception) -> str:
    explanation = getattr(exc, "explanation", None)
    if isinstance(explanation, bytes):
        explanation = explanation.decode("utf-8", "replace")
    return str(explanation or exc).strip()


def kill_container(container: Container) -> None:
    with contextlib.suppress(docker.errors.NotFound, docker.errors.APIError):
        container.kill()


def remove_container(container: Container) -> None:
    """Remove ``container``, running or not; one already gone is no error. Returns once it is gone."""
    try:
        container.remove(force=True, v=False)
    except docker.errors.NotFound:
        return
    except docker.errors.APIError as exc:
        # 409: another caller's removal is under way (a concurrent cancel or clean-up). Returning
        # at once would let our caller remove the volumes while the container still holds them.
        if exc.status_code != 409:
            raise
        if not _poll(lambda: _is_gone(container), RELEASE_TIMEOUT_S):
            raise RunnerError(
                f"container {container.short_id} was still being removed after {RELEASE_TIMEOUT_S:g} s"
            ) from None


def remove_volume(client: docker.DockerClient, name: str) -> None:
    """Remove the volume ``name`` once no container holds it: paritybot's containers that mount it
    are removed first (never another's), and one still letting it go is waited for. A volume
    already gone is no error; RunnerError says which containers still hold one after the wait."""
    holders = {"volume": name, "label": f"{LABEL_MANAGED}=1"}

    def removed() -> bool:
        # sparse: no inspect per container, which would answer 404 for one half removed.
        for holder in client.containers.list(all=True, sparse=True, filters=holders):
            remove_container(holder)
        try:
            client.api.remove_volume(name, force=True)
        except docker.errors.NotFound:
            return True
        except docker.errors.APIError as exc:
            if exc.status_code != 409:  # 409: in use, until the last holder's removal ends
                raise
            return False
        return True

    if not _poll(removed, RELEASE_TIMEOUT_S):
        users = [c.short_id for c in client.containers.list(all=True, sparse=True, filters={"volume": name})]
        raise RunnerError(
            f"volume {name} is still in use after {RELEASE_TIMEOUT_S:g} s"
            + (f", by container(s) {', '.join(users)}" if users else "")
        )


def _is_gone(container: Container) -> bool:
    try:
        container.client.api.inspect_container(container.id)
    except docker.errors.NotFound:
        return True
    return False


def _poll(done: Callable[[], bool], timeout: float) -> bool:
    """Call ``done`` until it is true or ``timeout`` seconds have passed; whether it became true."""
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() >= deadline:
            return False
        time.sleep(_POLL_S)
    return True


def inspect_state(container: Container) -> dict[str, Any] | None:
    try:
        container.reload()
    except docker.errors.NotFound:
        return None
    state = container.attrs.get("State")
    return state if isinstance(state, dict) else None


def writable_volumes(container: Container) -> list[str]:
    """The named volumes ``container`` mounts writable: what its step can fill."""
    mounts = container.attrs.get("Mounts") or []
    return [m["Name"] for m in mounts if m.get("Type") == "volume" and m.get("RW") and m.get("Name")]


def remove_leftovers(
    client: docker.DockerClient, me: Owner, alive: Liveness, runs_over: RunsOver | None = None
) -> tuple[int, int]:
    """Remove the containers and per-run volumes of owners that are dead, as ``me`` judges, and of
    runs the store says are over (:func:`runner.backends.ownership.leftover_is_removable`); returns
    how many of each. Store volumes are kept: they are meant to outlive runs.

    Call it at start-up before taking jobs, and from time to time while running: a neighbour on
    the same engine that died leaves its containers running until someone removes them.
    """
    # A container removed between the listing and its inspection (a run's own clean-up) is skipped.
    containers = client.containers.list(
        all=True, ignore_removed=True, filters={"label": f"{LABEL_MANAGED}=1"}
    )
    volumes = [
        v
        for v in client.volumes.list(filters={"label": f"{LABEL_ROLE}=workspace"})
        if (v.attrs.get("Labels") or {}).get(LABEL_MANAGED) == "1"
    ]
    labelled = [c.labels or {} for c in containers] + [v.attrs.get("Labels") or {} for v in volumes]
    owners = {o for o in (parse_owner(labels.get(OWNER_LABEL)) for labels in labelled) if o is not None}
    verdicts = {owner: (None if owner == me else alive(owner)) for owner in owners}
    runs = {labels[LABEL_RUN_ID] for labels in labelled if LABEL_RUN_ID in labels}
    over = runs_over(runs) if runs_over is not None and runs else set()
    removed = 0
    for container in containers:
        if leftover_is_removable(container.labels or {}, me, verdicts, over):
            remove_container(container)
            removed += 1
    gone = 0
    for volume in volumes:
        if not leftover_is_removable(volume.attrs.get("Labels") or {}, me, verdicts, over):
            continue
        try:
            remove_volume(client, volume.name)
            gone += 1
        except RunnerError as exc:
            log.warning("could not remove an orphaned volume", volume=volume.name, error=str(exc))
        except docker.errors.APIError as exc:
            log.warning("could not remove an orphaned volume", volume=volume.name, error=api_error_text(exc))
    if removed or gone:
        log.info("removed what dead runners left", containers=removed, volumes=gone)
    return removed, gone
