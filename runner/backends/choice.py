"""Choose the backend for a run: the CI's container, the host only when asked for, never by accident.

The host runner gives the code under test this machine's files, network and rights, so it is
never a fallback. `serve` runs code on the host only when its operator set
``PARITYBOT_RUNNER=host`` with ``PARITYBOT_ALLOW_HOST_RUNNER=trusted-code-only``, and then only
trusted code; otherwise every run goes to the container engine, and a run the engine cannot take
(unreachable, or no image to run) fails with the reason. ``paritybot check`` on a developer's own
checkout may use the host (``--runner auto`` without an engine or image, ``--runner host``) and
says so; ``--runner docker`` never falls back either.

The decision (:func:`describe_choice`) is a pure function of the policy, the run and what the
engine check found, tested without an engine; :func:`choose_runner` does the I/O. The reason is a
sentence because it is shown in the run's report.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import structlog

from bot.core.config import Environment
from runner.backends.base import Runner, RunnerFactory, RunnerRequest, RunRefused
from runner.backends.host import HostRunner
from runner.backends.ownership import Owner

if TYPE_CHECKING:
    import docker

# The Docker SDK (and requests under it) is imported only when a container is wanted: a local
# check on the host starts faster without it.

log = structlog.get_logger(__name__)

DEFAULT_ENGINE = "unix:///var/run/docker.sock"
CONNECT_TIMEOUT_S = 5.0

RunnerMode = Literal["auto", "docker", "host"]
HostUse = Literal["never", "trusted-code-only", "any"]
SERVICE_IMAGE_HINT = (
    "set `image:` for it in .github/paritybot.yml on the default branch, "
    "or PARITYBOT_DEFAULT_IMAGE in the service's settings"
)
CHECK_IMAGE_HINT = "set `image:` for it in .github/paritybot.yml, or pass --image IMAGE"
SERVICE_ENGINE_HINT = (
    "start the container engine on this machine (`systemctl start docker`), or point DOCKER_HOST "
    "in the service's environment at the engine's socket"
)
CHECK_ENGINE_HINT = (
    "start the container engine (`sudo systemctl start docker`, or Docker Desktop), or set "
    "DOCKER_HOST to where it listens (e.g. unix://$XDG_RUNTIME_DIR/docker.sock for a rootless "
    "engine); --runner host runs on this machine instead"
)


@dataclass(frozen=True)
class EngineCheck:
    """What one attempt to reach the container engine found."""

    where: str
    reachable: bool
    error: str | None = None


@dataclass(frozen=True)
class RunnerPolicy:
    """How runs get their runner: what the operator (`serve`) or the user (`check`) asked for."""

    mode: RunnerMode
    host: HostUse = "never"
    """Which code may run on the host: `serve` allows none unless told "trusted-code-only";
    `check` on the user's own machine allows any (the user chose what to check)."""
    default_image: str | None = None
    """The image of environments that name none (PARITYBOT_DEFAULT_IMAGE)."""
    asked_by: str = "PARITYBOT_RUNNER"
    """The setting or option that set ``mode``, named in reasons."""
    image_hint: str = SERVICE_IMAGE_HINT
    engine_hint: str = SERVICE_ENGINE_HINT
    """What to start or set when no engine answers."""
    redact: tuple[str, ...] = ()
    """The service's secrets, never shown in any run's output."""
    owner: Owner | None = None
    """Who owns the containers the runs start: the service's or agent's instance (None: this process)."""
    name_engine: bool = True
    """Whether reasons say where the engine is and how reaching it failed: yes on the user's own
    machine; not in the service's reports, which the public reads on a public repository (the
    operator finds the address and the error in the service's log)."""


@dataclass(frozen=True)
class RunnerChoice:
    kind: Literal["docker", "host", "refused"]
    reason: str
    image: str | None = None


def engine_location(env: Mapping[str, str]) -> str:
    """Where the Docker SDK will look for the engine: DOCKER_HOST, else the default socket."""
    return env.get("DOCKER_HOST") or DEFAULT_ENGINE


def image_of(policy: RunnerPolicy, environment: Environment) -> str | None:
    return environment.image or policy.default_image


def needs_engine(policy: RunnerPolicy, environment: Environment) -> bool:
    """Whether the choice depends on the engine: a container is wanted and there is an image."""
    return policy.mode != "host" and image_of(policy, environment) is not None


def _host_allowed(policy: RunnerPolicy, request: RunnerRequest) -> bool:
    return policy.host == "any" or (policy.host == "trusted-code-only" and request.trusted_code)


def _host_refusal(policy: RunnerPolicy) -> str:
    if policy.host == "never":
        return (
            f"{policy.asked_by}=host needs PARITYBOT_ALLOW_HOST_RUNNER=trusted-code-only, and even "
            "then runs only trusted code on the host"
        )
    return (
        f"this service runs only trusted authors' code, on its host ({policy.asked_by}=host), and "
        "the author of this code is not trusted; a maintainer's approval of a commit lets it run "
        "in a container, never on the host"
    )


def describe_choice(policy: RunnerPolicy, request: RunnerRequest, engine: EngineCheck | None) -> RunnerChoice:
    """Which backend serves ``request`` and why; ``engine`` is None when it was not checked."""
    environment = request.environment
    if policy.mode == "host":
        if not _host_allowed(policy, request):
            return RunnerChoice("refused", _host_refusal(policy))
        trusted = ", and the code's author is trusted" if policy.host == "trusted-code-only" else ""
        # In backticks: the reason is shown in the report, where a setting's name is code.
        return RunnerChoice("host", f"`{policy.asked_by}=host`{trusted}")
    image = image_of(policy, environment)
    if image is None:
        if policy.mode == "auto" and _host_allowed(policy, request):
            return RunnerChoice("host", f"environment {environment.name} names no image")
        return RunnerChoice(
            "refused",
            f"no environment image configured: environment {environment.name} names no image "
            f"({policy.image_hint}); nothing was run on the host instead",
        )
    if engine is None or not engine.reachable:
        if engine is None:
            where = "(it was not checked)"
        else:
            where = (
                f"at {engine.where} ({engine.error})"
                if policy.name_engine
                else "(the service's log says where)"
            )
        if policy.mode == "auto" and _host_allowed(policy, request):
            return RunnerChoice("host", f"no container engine reachable {where}")
        return RunnerChoice(
            "refused",
            f"no container engine reachable {where}; nothing was run on the host instead: "
            f"{policy.engine_hint}",
        )
    source = (
        f"in {image}"
        if environment.image
        else f"in the service's default image {image} (it names none; PARITYBOT_DEFAULT_IMAGE)"
    )
    engine_at = f" (engine at {engine.where})" if policy.name_engine else ""
    return RunnerChoice("docker", f"environment {environment.name} runs {source}{engine_at}", image)


def check_engine(
    env: Mapping[str, str] | None = None, timeout_s: float = CONNECT_TIMEOUT_S
) -> tuple[EngineCheck, docker.DockerClient | None]:
    """Ping the engine the environment variables point at (blocking); the client when it answered."""
    import docker
    import docker.errors

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
    policy: RunnerPolicy,
    request: RunnerRequest,
    *,
    env: Mapping[str, str] | None = None,
    timeout_s: float = CONNECT_TIMEOUT_S,
) -> Runner:
    """The runner for one run; raises RunRefused, with the reason, when the policy refuses it."""
    engine, client = None, None
    if needs_engine(policy, request.environment):
        engine, client = await asyncio.to_thread(check_engine, env, timeout_s)
    choice = describe_choice(policy, request, engine)
    secrets = (*policy.redact, *request.redact)
    if engine is not None and not policy.name_engine:
        # What the reports leave out, for the operator.
        log.info("engine checked", run_id=request.run_id, where=engine.where, error=engine.error)
    if choice.kind == "refused":
        log.info("run refused", run_id=request.run_id, reason=choice.reason)
        if client is not None:
            client.close()
        raise RunRefused(choice.reason)
    log.info("runner chosen", run_id=request.run_id, kind=choice.kind, reason=choice.reason)
    if choice.kind == "host":
        return HostRunner(
            reason=choice.reason,
            env=request.environment.env,
            redact=secrets,
            processes=request.processes,
            on_output=request.output,
        )
    from runner.backends.docker import DockerRunner

    environment = request.environment.model_copy(update={"image": choice.image})
    return DockerRunner(
        environment,
        request.run_id,
        client,
        redact=list(secrets),
        reason=choice.reason,
        owns_client=True,
        owner=policy.owner,
        on_output=request.output,
    )


def runner_factory(policy: RunnerPolicy) -> RunnerFactory:
    """The runner factory of `serve` or `check`: every run chosen by ``policy``."""

    async def make(request: RunnerRequest) -> Runner:
        return await choose_runner(policy, request)

    return make
