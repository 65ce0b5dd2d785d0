"""Choosing between the container runner and the host runner."""

from __future__ import annotations

import os

import docker
import pytest
from docker_support import docker_client, test_image

from bot.config import Environment
from runner.docker import DockerRunner
from runner.host import HostRunner
from runner.select_runner import (
    DEFAULT_ENGINE,
    EngineCheck,
    check_engine,
    choose_runner,
    describe_choice,
    engine_location,
)

__all__ = ["docker_client", "test_image"]  # fixtures, imported for pytest
CI_IMAGE = "ghcr.io/example/ci:cuda12"


def test_an_environment_without_image_runs_on_the_host():
    choice = describe_choice(Environment(name="laptop"), EngineCheck("unix:///x.sock", True))
    assert choice.kind == "host"
    assert choice.reason == "environment laptop has no image"


def test_a_reachable_engine_runs_the_image():
    choice = describe_choice(
        Environment(name="gpu", image=CI_IMAGE), EngineCheck("tcp://10.0.0.5:2375", True)
    )
    assert choice.kind == "docker"
    assert CI_IMAGE in choice.reason and "tcp://10.0.0.5:2375" in choice.reason


def test_an_unreachable_engine_falls_back_to_the_host_and_says_where_and_why():
    engine = EngineCheck("unix:///var/run/docker.sock", False, "connection refused")
    choice = describe_choice(Environment(name="gpu", image=CI_IMAGE), engine)
    assert choice.kind == "host"
    assert (
        choice.reason == "no container engine reachable at unix:///var/run/docker.sock (connection refused)"
    )


def test_engine_location_follows_docker_host():
    assert engine_location({}) == DEFAULT_ENGINE
    assert engine_location({"DOCKER_HOST": "unix:///tmp/e/docker.sock"}) == "unix:///tmp/e/docker.sock"


async def test_a_socket_that_does_not_exist_gives_the_host_runner(tmp_path):
    where = f"unix://{tmp_path}/no-engine.sock"
    runner = await choose_runner(Environment(name="gpu", image=CI_IMAGE), "r1", env={"DOCKER_HOST": where})
    assert isinstance(runner, HostRunner)
    assert runner.info.kind == "host"
    assert runner.info.reason.startswith(f"no container engine reachable at {where} (")
    assert "no-engine.sock" in runner.info.reason or "No such file" in runner.info.reason


def test_check_engine_reports_the_error_of_a_dead_socket(tmp_path):
    sock = tmp_path / "dead.sock"
    sock.write_text("")  # a plain file where a socket should be
    check, client = check_engine({"DOCKER_HOST": f"unix://{sock}"}, timeout_s=2)
    assert client is None
    assert not check.reachable and check.where == f"unix://{sock}"
    assert check.error


async def test_without_image_no_engine_is_contacted():
    runner = await choose_runner(
        Environment(name="host", env={"A": "1"}), "r1", env={"DOCKER_HOST": "tcp://192.0.2.1:1"}
    )
    assert isinstance(runner, HostRunner)
    assert runner.info.reason == "environment host has no image"
    assert runner.info.env["A"] == "1"  # the environment's variables, plus the tools' PATH


@pytest.mark.docker
async def test_a_reachable_engine_gives_the_container_runner(
    docker_client: docker.DockerClient, test_image: str
):
    env = Environment(name="ci", image=test_image, gpus="none")
    runner = await choose_runner(env, "r-select", env=dict(os.environ), redact=["tok"])
    try:
        assert isinstance(runner, DockerRunner)
        assert runner.info.kind == "docker"
        assert test_image in runner.info.reason
        await runner.prepare()
        assert runner.info.image_ref
    finally:
        await runner.close()
