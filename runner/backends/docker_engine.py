"""The container runner's labels and the engine calls it makes on containers and volumes that may
be gone already (a concurrent cancel, a clean-up): none of them raises for that. The removal of
what runners that died left on the engine."""

from __future__ import annotations

import contextlib
import re
from typing import Any

import docker
import docker.errors
import structlog
from docker.models.containers import Container

log = structlog.get_logger(__name__)


LABEL_MANAGED = "paritybot.managed"


LABEL_RUN_ID = "paritybot.run-id"


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


def remove_orphans(client: docker.DockerClient, live_run_ids: set[str] | None = None) -> int:
    """Remove containers and per-run volumes left by runners that died; returns the container count.

    Call it at start-up, before taking jobs, with the ids of runs still in progress elsewhere
    (none, for a single runner). Store volumes are kept: they are meant to outlive runs.
    """
    live = live_run_ids or set()
    removed = 0
    for container in client.containers.list(all=True, filters={"label": f"{LABEL_MANAGED}=1"}):
        if container.labels.get(LABEL_RUN_ID) in live:
            continue
        remove_container(container)
        removed += 1
    volumes = 0
    for volume in client.volumes.list(filters={"label": f"{LABEL_ROLE}=workspace"}):
        labels = volume.attrs.get("Labels") or {}
        if labels.get(LABEL_MANAGED) != "1" or labels.get(LABEL_RUN_ID) in live:
            continue
        try:
            volume.remove(force=True)
            volumes += 1
        except docker.errors.APIError as exc:
            log.warning("could not remove an orphaned volume", volume=volume.name, error=api_error_text(exc))
    if removed or volumes:
        log.info("removed orphans", containers=removed, volumes=volumes)
    return removed
