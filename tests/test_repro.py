"""Repro commands: exact text for both forms, and the host form run as printed in a real shell."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from pydantic import ValidationError
from sample_repo import BROKEN_TEST, git, make_sample_repo, tool_env

from runner.checks.repro import ReproContext, repro_commands

SHA = "1d574a6d9ec97083d9bf81cecb48627fb856d91d"


def test_docker_form_names_the_image_by_digest_with_gpus_env_and_options() -> None:
    ctx = ReproContext(
        head_sha=SHA,
        repo="octo/calc",
        pr_number=12,
        image_ref="ghcr.io/octo/ci@sha256:" + "a" * 64,
        gpus="all",
        env={"TORCH_LOGS": "+dynamo", "OMP_NUM_THREADS": "4"},
        pytest_args=["-x", "--tb=short"],
    )

    assert repro_commands(ctx, "tests/test_x.py::TestY::test_z[a b]") == [
        "git clone https://github.com/octo/calc.git calc-1d574a6 && cd calc-1d574a6"
        f" && git fetch origin pull/12/head && git checkout {SHA}",
        "docker run --rm --gpus all -e OMP_NUM_THREADS=4 -e TORCH_LOGS=+dynamo"
        ' -v "$PWD":/workspace -w /workspace ghcr.io/octo/ci@sha256:'
        + "a"
        * 64
        + " python -m pytest -x --tb=short"
        " 'tests/test_x.py::TestY::test_z[a b]'",
    ]


def test_an_image_without_registry_digest_is_named_by_name_and_tag_with_its_id() -> None:
    image_id = "sha256:" + "b" * 64
    ctx = ReproContext(head_sha=SHA, repo="octo/calc", image_ref="ci/calc:cuda12", image_id=image_id)

    _clone, run = repro_commands(ctx, "tests/test_x.py::test_z")

    command, comment = run.split("  # ")
    assert command.endswith("ci/calc:cuda12 python -m pytest tests/test_x.py::test_z")
    assert comment == f"ci/calc:cuda12 has no registry digest; the run used image {image_id}"
    # With a registry digest the reference says it all: no comment.
    pinned = ctx.model_copy(update={"image_ref": "ci/calc@sha256:" + "a" * 64})
    assert "#" not in repro_commands(pinned, "tests/test_x.py::test_z")[1]


def test_docker_form_quotes_device_lists_and_runs_setup_inside_the_container() -> None:
    ctx = ReproContext(
        head_sha=SHA,
        clone_url="https://example.com/calc.git",
        image_ref="sha256:" + "b" * 64,
        gpus='"device=0,1"',
        env={"MSG": "it's"},
        setup=["pip install -e ."],
        docker_options=["--shm-size", "8g"],
        workdir="/src",
    )

    assert repro_commands(ctx, "tests/test_a.py::test_b") == [
        f"git clone https://example.com/calc.git calc-1d574a6 && cd calc-1d574a6 && git checkout {SHA}",
        "docker run --rm --gpus '\"device=0,1\"' -e 'MSG=it'\"'\"'s' --shm-size 8g"
        ' -v "$PWD":/src -w /src sha256:'
        + "b" * 64
        + " sh -c 'pip install -e . && python -m pytest tests/test_a.py::test_b'",
    ]


def test_host_form_sets_variables_with_env_and_runs_setup_first() -> None:
    ctx = ReproContext(
        head_sha=SHA, repo="octo/calc", env={"CUDA_VISIBLE_DEVICES": "0", "NAME": "a b"}, setup=["make"]
    )

    assert repro_commands(ctx, "tests/t.py::test[1]")[1] == (
        "make && env CUDA_VISIBLE_DEVICES=0 'NAME=a b' python -m pytest 'tests/t.py::test[1]'"
    )


def test_a_context_needs_somewhere_to_clone_from() -> None:
    with pytest.raises(ValidationError, match="clone_url or repo"):
        ReproContext(head_sha=SHA)
    with pytest.raises(ValidationError):
        ReproContext(head_sha="not a sha; rm -rf ~", repo="octo/calc")


def test_host_form_run_as_printed_reproduces_the_failure(tmp_path: Path) -> None:
    sample = make_sample_repo(tmp_path)
    # The "GitHub" remote: a bare repo holding the base branch and the PR head only as pull/7/head.
    bare = tmp_path / "remote.git"
    git(tmp_path, "clone", "-q", "--bare", str(sample.path), str(bare))
    git(bare, "update-ref", "refs/pull/7/head", sample.head_sha)
    git(bare, "branch", "-D", "feature")
    ctx = ReproContext(
        head_sha=sample.head_sha,
        clone_url=str(bare),
        repo="octo/calc",
        pr_number=7,
        env={"CALC_TRACE": "on off"},
        pytest_args=["-p", "no:cacheprovider"],
    )
    reader = tmp_path / "reader"
    reader.mkdir()

    script = "\n".join(repro_commands(ctx, BROKEN_TEST))
    env = {**os.environ, **tool_env(), "GIT_CONFIG_GLOBAL": os.devnull}
    done = subprocess.run(
        script, shell=True, cwd=reader, env=env, capture_output=True, text=True, timeout=120
    )

    assert done.returncode == 1, done.stdout + done.stderr
    assert f"FAILED {BROKEN_TEST}" in done.stdout
    assert "assert 2 == 2.5" in done.stdout
    assert git(reader / ctx.directory, "rev-parse", "HEAD") == sample.head_sha
