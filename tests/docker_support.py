"""Fixtures for tests that need a real Docker engine and the local test image.

Locally, without an engine (or without the image), those tests are skipped with the reason. When
the environment variable CI is set they fail instead: CI starts an engine
(``scripts/docker-engine.sh start``) and builds the image (``scripts/build-test-image.sh``), so a
missing one there is a broken pipeline, not a reason to pass silently.

Use: ``from docker_support import docker_client, test_image`` in a test module, and mark its
engine tests with ``@pytest.mark.docker``. ``make_runner`` makes container runners of the test
image with small limits (:data:`SMALL`), and ``workspace`` is a small committed git checkout.
"""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import docker
import docker.errors
import pytest

from bot.core.config import Environment, ResourceLimits
from runner.backends.base import Step
from runner.backends.docker import DockerRunner

TEST_IMAGE = os.environ.get("PARITYBOT_TEST_IMAGE", "paritybot-test/python:bookworm")
# Small enough that every limit is reached in a second or two.
SMALL = ResourceLimits(
    memory="128m", pids=64, cpus=1, shm_size="16m", tmpfs_size="32m", workspace_size="256m"
)
BUILD_HINT = "start one with `scripts/docker-engine.sh start` and `eval $(scripts/docker-engine.sh env)`"


def in_ci() -> bool:
    return bool(os.environ.get("CI"))


def unavailable(reason: str) -> None:
    """Skip locally, fail in CI."""
    if in_ci():
        pytest.fail(f"{reason} (CI is set, so this is an error, not a skip)", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def docker_client() -> Iterator[docker.DockerClient]:
    """A client of the engine DOCKER_HOST (or the default socket) points at."""
    try:
        client = docker.from_env(timeout=10)
        client.ping()
    except docker.errors.DockerException as exc:
        where = os.environ.get("DOCKER_HOST", "the default socket")
        unavailable(f"no Docker engine reachable at {where}: {exc}; {BUILD_HINT}")
        raise AssertionError("unreachable") from exc  # for type checkers: unavailable() never returns
    client.api.timeout = 120
    try:
        yield client
    finally:
        client.close()


@pytest.fixture(scope="session")
def test_image(docker_client: docker.DockerClient) -> str:
    """The name of the local test image (Debian 12, python3, git, pytest, pre-commit)."""
    try:
        docker_client.images.get(TEST_IMAGE)
    except docker.errors.ImageNotFound:
        unavailable(f"image {TEST_IMAGE} is not built; run scripts/build-test-image.sh")
    return TEST_IMAGE


def engine_has_nvidia(client: docker.DockerClient) -> bool:
    """Whether the engine advertises the NVIDIA runtime (then GPU requests can succeed)."""
    runtimes = client.info().get("Runtimes") or {}
    return "nvidia" in runtimes


def containers_of(client: docker.DockerClient, run_id: str, role: str | None = None) -> list[str]:
    """Names of every container, running or not, labelled with ``run_id`` (and ``role``: step, watch)."""
    labels = [f"paritybot.run-id={run_id}", *([f"paritybot.role={role}"] if role else [])]
    # One removed between the listing and its inspection (a step's clean-up) is not an error: the
    # engine answers 404 for a container whose removal is under way.
    found = client.containers.list(all=True, ignore_removed=True, filters={"label": labels})
    return [c.name for c in found]


def volumes_of(client: docker.DockerClient, run_id: str) -> list[str]:
    """Names of the volumes labelled with ``run_id`` or named after it: the engine re-creates a
    removed volume, unlabelled, for a container that mounts it."""
    labelled = client.volumes.list(filters={"label": f"paritybot.run-id={run_id}"})
    named = client.volumes.list(filters={"name": run_id})
    return sorted({v.name for v in [*labelled, *named]})


def small_env(image: str, **kw: object) -> Environment:
    """An environment of ``image`` with the :data:`SMALL` limits, no GPU; ``kw`` overrides fields."""
    return Environment.model_validate({"name": "ci", "image": image, "gpus": "none", "limits": SMALL, **kw})


@pytest.fixture
async def make_runner(
    docker_client: docker.DockerClient, test_image: str
) -> AsyncIterator[Callable[..., DockerRunner]]:
    """Makes runners of the test image with small limits; closes them and checks nothing is left.

    Keyword arguments are Environment fields (``limits=...``) or DockerRunner options.
    """
    made: list[DockerRunner] = []

    def make(**kw: object) -> DockerRunner:
        env_kw = {k: v for k, v in kw.items() if k in Environment.model_fields}
        runner_kw: dict[str, Any] = {k: v for k, v in kw.items() if k not in Environment.model_fields}
        runner = DockerRunner(
            small_env(test_image, **env_kw), f"t-{uuid.uuid4().hex[:12]}", docker_client, **runner_kw
        )
        made.append(runner)
        return runner

    yield make
    for runner in made:
        await runner.close()
        assert containers_of(docker_client, runner.run_id) == []
        assert volumes_of(docker_client, runner.run_id) == []


def commit_all(ws: Path, message: str = "change") -> None:
    """Commit everything in the checkout ``ws``, symbolic links as links."""
    subprocess.run(["git", "-C", str(ws), "add", "-A"], check=True)
    identity = ["-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run(["git", "-C", str(ws), *identity, "commit", "-qm", message], check=True)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """A committed checkout: ``pkg/mod.py`` and ``README.md``."""
    ws = tmp_path / "ws"
    (ws / "pkg").mkdir(parents=True)
    (ws / "pkg" / "mod.py").write_text("VALUE = 1\n")
    (ws / "README.md").write_text("hello\n")
    subprocess.run(["git", "init", "-q", str(ws)], check=True)
    commit_all(ws, "init")
    return ws


def sh(name: str, script: str, **kw: object) -> Step:
    """A step running ``script`` with ``sh -c``; ``kw`` are other Step fields."""
    return Step.model_validate({"name": name, "argv": ["sh", "-c", script], **kw})
