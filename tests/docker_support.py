"""Fixtures for tests that need a real Docker engine and the local test image.

Locally, without an engine (or without the image), those tests are skipped with the reason. When
the environment variable CI is set they fail instead: CI starts an engine
(``scripts/docker-engine.sh start``) and builds the image (``scripts/build-test-image.sh``), so a
missing one there is a broken pipeline, not a reason to pass silently.

Use: ``from docker_support import docker_client, test_image`` in a test module, and mark its
engine tests with ``@pytest.mark.docker``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import docker
import docker.errors
import pytest

TEST_IMAGE = os.environ.get("PARITYBOT_TEST_IMAGE", "paritybot-test/python:bookworm")
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


def containers_of(client: docker.DockerClient, run_id: str) -> list[str]:
    """Names of every container, running or not, labelled with ``run_id``."""
    found = client.containers.list(all=True, filters={"label": f"paritybot.run-id={run_id}"})
    return [c.name for c in found]


def volumes_of(client: docker.DockerClient, run_id: str) -> list[str]:
    return [v.name for v in client.volumes.list(filters={"label": f"paritybot.run-id={run_id}"})]
