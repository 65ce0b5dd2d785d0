"""The repro command posted for a failing test, run as printed, reproduces the failure in the image.

`paritybot check` runs the demo project in a real container; the commands in its report are then
run in a shell on a fresh directory, exactly as a contributor would paste them.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import docker
import pytest
from cli_run import run_cli
from docker_support import docker_client, test_image

from bot.cli.demo import BROKEN_TEST
from bot.core.models import RunReport, TestOutcome

__all__ = ["docker_client", "test_image"]


@pytest.mark.docker
def test_posted_docker_repro_command_reproduces_the_failure(
    docker_client: docker.DockerClient, test_image: str, tmp_path: Path
) -> None:
    # The demo project lives in the user's cache (here the test's), where the posted clone finds it.
    home = tmp_path / "home"
    done = run_cli(
        "check", "--demo", "--image", test_image, "--gpus", "none", "--json", timeout=600, home=home
    )
    assert done.returncode == 0, done.stderr
    assert "runner: docker" in done.stderr
    report = RunReport.model_validate_json(done.stdout)
    # The test image is built here: named as a reader can pull or build it, with the run's image id.
    assert report.runner == "docker" and report.image_ref == test_image
    assert report.image_digest and report.image_digest.startswith("sha256:")
    assert report.tests is not None
    [failed] = [r for r in report.tests.results if r.outcome == TestOutcome.FAILED]
    assert failed.nodeid == BROKEN_TEST
    assert any(report.image_ref in command and command.startswith("docker run") for command in failed.repro)
    assert failed.repro[-1].endswith(f"the run used image {report.image_digest}")

    script = " && ".join(failed.repro)
    (tmp_path / "work").mkdir()
    repro = subprocess.run(
        ["bash", "-c", script],
        cwd=tmp_path / "work",
        capture_output=True,
        text=True,
        timeout=600,
        env=dict(os.environ),
    )
    assert repro.returncode == 1, repro.stdout + repro.stderr
    assert "1 failed" in repro.stdout and "test_mean_of_halves" in repro.stdout
    assert "assert 2 == 2.5" in repro.stdout  # the same failure the report shows
    assert "2.5" in failed.message
