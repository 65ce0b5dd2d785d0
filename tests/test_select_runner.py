"""Choosing the runner: the container, the host only when asked for, never as a fallback."""

from __future__ import annotations

import itertools
import os
from pathlib import Path

import docker
import pytest
from docker_support import docker_client, test_image

from bot.core.config import Environment
from bot.core.models import RunKind, RunRequest
from runner.backends.base import RunnerRequest, RunRefused
from runner.backends.choice import (
    CHECK_ENGINE_HINT,
    CHECK_IMAGE_HINT,
    DEFAULT_ENGINE,
    EngineCheck,
    RunnerPolicy,
    check_engine,
    choose_runner,
    describe_choice,
    engine_location,
    needs_engine,
)
from runner.backends.docker import DockerRunner
from runner.backends.host import HostRunner

__all__ = ["docker_client", "test_image"]  # fixtures, imported for pytest
CI_IMAGE = "ghcr.io/example/ci:cuda12"
UP = EngineCheck("tcp://10.0.0.5:2375", True)
DOWN = EngineCheck("unix:///var/run/docker.sock", False, "connection refused")

# As `serve` makes them (bot.service.app.service_policy): its reports never say where the engine is.
SERVE = RunnerPolicy(mode="docker", name_engine=False)
SERVE_HOST = RunnerPolicy(mode="host", host="trusted-code-only", name_engine=False)
CHECK_AUTO = RunnerPolicy(mode="auto", host="any", asked_by="--runner", image_hint=CHECK_IMAGE_HINT)


def request(image: str | None = CI_IMAGE, *, trusted: bool = False) -> RunnerRequest:
    return RunnerRequest(Environment(name="gpu", image=image), "r1", trusted_code=trusted)


# --- the decision -------------------------------------------------------------------------------------


def test_serve_runs_an_image_in_the_engine_that_answers() -> None:
    choice = describe_choice(SERVE, request(), UP)
    assert choice.kind == "docker" and choice.image == CI_IMAGE
    assert CI_IMAGE in choice.reason and "10.0.0.5" not in choice.reason


def test_serve_with_the_engine_down_refuses_and_sends_the_operator_to_its_log() -> None:
    # The report is public on a public repository: where the engine listens is in the log only.
    choice = describe_choice(SERVE, request(trusted=True), DOWN)
    assert choice.kind == "refused"
    assert choice.reason == (
        "no container engine reachable (the service's log says where); "
        "nothing was run on the host instead: start the container engine on this machine "
        "(`systemctl start docker`), or point DOCKER_HOST in the service's environment at the "
        "engine's socket"
    )


def test_serve_with_no_image_refuses_and_names_what_to_set() -> None:
    choice = describe_choice(SERVE, request(None, trusted=True), None)
    assert choice.kind == "refused"
    assert choice.reason.startswith("no environment image configured: environment gpu names no image")
    assert "`image:`" in choice.reason and "PARITYBOT_DEFAULT_IMAGE" in choice.reason


def test_serve_gives_an_environment_without_image_the_default_image() -> None:
    policy = RunnerPolicy(mode="docker", default_image="ghcr.io/example/ci:default")
    assert needs_engine(policy, Environment(name="gpu"))
    choice = describe_choice(policy, request(None), UP)
    assert choice.kind == "docker" and choice.image == "ghcr.io/example/ci:default"
    assert "default image ghcr.io/example/ci:default" in choice.reason
    # The environment's own image wins over the default.
    assert describe_choice(policy, request(CI_IMAGE), UP).image == CI_IMAGE


def test_host_mode_runs_only_trusted_code() -> None:
    assert describe_choice(SERVE_HOST, request(trusted=True), None).kind == "host"
    refused = describe_choice(SERVE_HOST, request(trusted=False), None)
    assert refused.kind == "refused"
    assert "author of this code is not trusted" in refused.reason
    assert "never on the host" in refused.reason


def test_host_mode_without_the_allow_setting_runs_nothing() -> None:
    choice = describe_choice(RunnerPolicy(mode="host"), request(trusted=True), None)
    assert choice.kind == "refused"
    assert "PARITYBOT_ALLOW_HOST_RUNNER=trusted-code-only" in choice.reason


def test_check_auto_uses_the_host_and_says_why() -> None:
    assert describe_choice(CHECK_AUTO, request(None), None).reason == "environment gpu names no image"
    down = describe_choice(CHECK_AUTO, request(), DOWN)
    assert down.kind == "host"
    assert down.reason == "no container engine reachable at unix:///var/run/docker.sock (connection refused)"
    assert describe_choice(CHECK_AUTO, request(), UP).kind == "docker"


def test_check_docker_never_falls_back() -> None:
    policy = RunnerPolicy(
        mode="docker",
        host="any",
        asked_by="--runner",
        image_hint=CHECK_IMAGE_HINT,
        engine_hint=CHECK_ENGINE_HINT,
    )
    down = describe_choice(policy, request(), DOWN)
    assert down.kind == "refused" and down.reason.endswith(CHECK_ENGINE_HINT)
    assert "DOCKER_HOST" in down.reason and "--runner host" in down.reason
    no_image = describe_choice(policy, request(None), None)
    assert no_image.kind == "refused" and "--image IMAGE" in no_image.reason


def test_no_combination_runs_code_on_the_host_unless_asked_and_allowed() -> None:
    """Every policy, run, image and engine state: the host only in the modes that name it,
    only where the policy allows it, and for `serve` only for trusted code."""
    for mode, host, trusted, image, default, engine in itertools.product(
        ("auto", "docker", "host"),
        ("never", "trusted-code-only", "any"),
        (False, True),
        (CI_IMAGE, None),
        (None, "ci:default"),
        (None, UP, DOWN),
    ):
        policy = RunnerPolicy(mode=mode, host=host, default_image=default)  # type: ignore[arg-type]
        choice = describe_choice(policy, request(image, trusted=trusted), engine)
        case = (mode, host, trusted, image, default, engine)
        if choice.kind == "host":
            assert mode in ("auto", "host"), case
            assert host == "any" or (host == "trusted-code-only" and trusted), case
        if mode == "host":
            assert choice.kind in ("host", "refused"), case  # never a container the operator did not ask for
        if choice.kind == "docker":
            assert engine is UP and choice.image == (image or default), case
        if choice.kind == "refused":
            assert choice.reason, case


def test_trusted_code_is_a_trusted_author_s_pr_or_the_default_branch_s_own() -> None:
    pr = RunRequest(repo="o/r", clone_url="x", head_sha="a" * 40)
    assert not pr.code_trusted  # an approval alone never sets author_trusted
    assert pr.model_copy(update={"author_trusted": True}).code_trusted
    assert pr.model_copy(update={"kind": RunKind.BASELINE}).code_trusted


def test_engine_location_follows_docker_host() -> None:
    assert engine_location({}) == DEFAULT_ENGINE
    assert engine_location({"DOCKER_HOST": "unix:///tmp/e/docker.sock"}) == "unix:///tmp/e/docker.sock"


# --- the I/O ------------------------------------------------------------------------------------------


async def test_a_dead_socket_refuses_the_run_with_the_engine_s_error(tmp_path: Path) -> None:
    where = f"unix://{tmp_path}/no-engine.sock"
    with pytest.raises(RunRefused) as refused:
        await choose_runner(SERVE, request(trusted=True), env={"DOCKER_HOST": where})
    message = str(refused.value)
    assert message.startswith("no container engine reachable (the service's log says where); ")
    assert "nothing was run on the host instead: start the container engine" in message
    assert where not in message


async def test_check_auto_with_a_dead_socket_gives_the_host_runner(tmp_path: Path) -> None:
    where = f"unix://{tmp_path}/no-engine.sock"
    runner = await choose_runner(CHECK_AUTO, request(), env={"DOCKER_HOST": where})
    assert isinstance(runner, HostRunner)
    assert runner.info.reason.startswith(f"no container engine reachable at {where} (")


def test_check_engine_reports_the_error_of_a_dead_socket(tmp_path: Path) -> None:
    sock = tmp_path / "dead.sock"
    sock.write_text("")  # a plain file where a socket should be
    check, client = check_engine({"DOCKER_HOST": f"unix://{sock}"}, timeout_s=2)
    assert client is None
    assert not check.reachable and check.where == f"unix://{sock}"
    assert check.error


async def test_without_image_no_engine_is_contacted() -> None:
    # 192.0.2.1 is reserved for documentation: a connection attempt would hang until the timeout.
    unroutable = {"DOCKER_HOST": "tcp://192.0.2.1:1"}
    runner = await choose_runner(
        CHECK_AUTO,
        RunnerRequest(Environment(name="host", env={"A": "1"}), "r1"),
        env=unroutable,
        timeout_s=30,
    )
    assert isinstance(runner, HostRunner)
    assert runner.info.env["A"] == "1"  # the environment's variables, plus the tools' PATH
    with pytest.raises(RunRefused, match="no environment image configured"):
        await choose_runner(SERVE, request(None), env=unroutable, timeout_s=30)


@pytest.mark.docker
async def test_a_reachable_engine_gives_the_container_runner(
    docker_client: docker.DockerClient, test_image: str
) -> None:
    env = Environment(name="ci", image=test_image, gpus="none")
    runner = await choose_runner(SERVE, RunnerRequest(env, "r-select"), env=dict(os.environ))
    try:
        assert isinstance(runner, DockerRunner)
        assert runner.info.kind == "docker"
        assert test_image in runner.info.reason
        await runner.prepare()
        assert runner.info.image_ref
    finally:
        await runner.close()


@pytest.mark.docker
async def test_the_default_image_serves_an_environment_without_one(
    docker_client: docker.DockerClient, test_image: str
) -> None:
    policy = RunnerPolicy(mode="docker", default_image=test_image)
    env = Environment(name="default", gpus="none")
    runner = await choose_runner(policy, RunnerRequest(env, "r-default"), env=dict(os.environ))
    try:
        assert isinstance(runner, DockerRunner)
        await runner.prepare()
        assert runner.info.image == test_image
        assert "default image" in runner.info.reason
    finally:
        await runner.close()
