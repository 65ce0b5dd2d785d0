"""Choose the backend for a run: the CI's container when an engine answers, else the host.

The decision itself (:func:`describe_choice`) is a pure function of the environment and of what
the engine check found, so it is tested without an engine; :func:`choose_runner` does the I/O.
The reason is kept as a sentence because it is shown in the run's report.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping
from dataclasses import dataclass

import docker
import docker.errors
import structlog

from bot.config import Environment
from runner.base import Runner
from runner.docker import DockerRunner
from runner.host import HostRunner

log = structlog.get_logger(__name__)

DEFAULT_ENGINE = "unix:///var/run/docker.sock"
CONNECT_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class EngineCheck:
    """What one attempt to reach the container engine found."""

    where: str
    reachable: bool
    error: str | None = None


@dataclass(frozen=True)
class RunnerChoice:
    kind: str  # "docker" or "host"
    reason: str


def engine_location(env: Mapping[str, str]) -> str:
    """Where the Docker SDK will look for the engine: DOCKER_HOST, else the default socket."""
    return env.get("DOCKER_HOST") or DEFAULT_ENGINE


def describe_choice(environment: Environment, engine: EngineCheck | None) -> RunnerChoice:
    """Which backend serves ``environment`` and why; ``engine`` is None when it was not checked."""
    if not environment.image:
        return RunnerChoice("host", f"environment {environment.name} has no image")
    if engine is None:
        return RunnerChoice("host", "the container engine was not checked")
    if engine.reachable:
        return RunnerChoice(
            "docker", f"environment {environment.name} runs in {environment.image} (engine at {engine.where})"
        )
    return RunnerChoice("host", f"no container engine reachable at {engine.where} ({engine.error})")


def check_engine(
    env: Mapping[str, str] | None = None, timeout_s: float = CONNECT_TIMEOUT_S
) -> tuple[EngineCheck, docker.DockerClient | None]:
    """Ping the engine the environment variables point at (blocking); the client when it answered."""
    variables = dict(os.environ if env is None else env)
    where = engine_location(variables)
    try:
        client = docker.from_env(environment=variables, timeout=int(max(timeout_s, 1)))
        client.ping()
    except docker.errors.DockerException as exc:
        return EngineCheck(where, False, _short(exc)), None
    except OSError as exc:  # a malformed DOCKER_HOST can surface as a socket error
        return EngineCheck(where, False, _short(exc)), None
    # Pings must fail fast, but pulls and long waits need the SDK's normal timeout.
    client.api.timeout = 60
    return EngineCheck(where, True), client


def _short(exc: Exception) -> str:
    text = " ".join(str(exc).split())
    return text if len(text) <= 200 else text[:197] + "..."


async def choose_runner(
    environment: Environment,
    run_id: str,
    *,
    env: Mapping[str, str] | None = None,
    redact: list[str] | None = None,
    timeout_s: float = CONNECT_TIMEOUT_S,
) -> Runner:
    """The runner for one run: DockerRunner when the environment has an image and an engine answers."""
    if not environment.image:
        choice = describe_choice(environment, None)
        return HostRunner(reason=choice.reason, env=environment.env)
    engine, client = await asyncio.to_thread(check_engine, env, timeout_s)
    choice = describe_choice(environment, engine)
    log.info("runner chosen", run_id=run_id, kind=choice.kind, reason=choice.reason)
    if client is None:
        return HostRunner(reason=choice.reason, env=environment.env)
    return DockerRunner(environment, run_id, client, redact=redact, reason=choice.reason, owns_client=True)
