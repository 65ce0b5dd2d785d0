"""The container runner's labels and the engine calls it makes on containers and volumes that may
be gone already (a concurrent cancel, a clean-up): none of them raises for that. The removal of
what runners that died left on the engine, by owner (:mod:`runner.backends.ownership`)."""

from __future__ import annotations

import contextlib
import re
from typing import Any

import docker
import docker.errors
import structlog
from docker.models.containers import Container

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
    with contextlib.suppress(docker.errors.NotFound):
        try:
            container.remove(force=True, v=False)
        except docker.errors.APIError as exc:
            # 409: removal already in progress (a concurrent cancel); that is the outcome we want.
            if getattr(exc, "status_code", None) != 409:
                raise


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
    containers = client.containers.list(all=True, filters={"label": f"{LABEL_MANAGED}=1"})
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
            volume.remove(force=True)
            gone += 1
        except docker.errors.NotFound:
            pass
        except docker.errors.APIError as exc:
            log.warning("could not remove an orphaned volume", volume=volume.name, error=api_error_text(exc))
    if removed or gone:
        log.info("removed what dead runners left", containers=removed, volumes=gone)
    return removed, gone
