"""The first failure reaches the pull request while the rest of the tests still run.

The real bot against the fake GitHub, on the demo project: its first run fails one test. A push
then adds a slow test; the second run runs the test that failed before first (failure first), and
the tests check run shows it failing, in progress, with a warning on the test's line, while the slow
test still runs; the final result replaces it and adds its own annotation, the early one not sent
twice. The same with the tests in a container of the real Docker engine.
"""

from __future__ import annotations

from pathlib import Path

import docker
import pytest
from botharness import REPO, BotHarness
from docker_support import docker_client, test_image
from fakegithub import FakeGitHub
from fakegithub.state import CheckRun
from finishing import FAST, finished, view
from sample_repo import BROKEN_TEST
from serveproc import TESTS

from runner.backends.base import Runner, RunnerRequest
from runner.backends.docker import DockerRunner

SLOW = "import time\n\nfrom calc import stats\n\n\ndef test_slow():\n    time.sleep(8)\n    assert stats\n"
CONFIG = "tests:\n  reruns: 0\n  use_coverage_map: false\n"
IN_A_CONTAINER = "environments:\n  - name: default\n    image: {image}\n    gpus: none\n" + CONFIG

__all__ = ["docker_client", "test_image"]  # fixtures, imported for pytest


async def test_the_first_failure_shows_on_the_pull_request_before_the_tests_end(
    fake_github: FakeGitHub, tmp_path: Path
) -> None:
    bot = await BotHarness.create(fake_github, tmp_path, settings=FAST)
    fake_github.set_file(REPO, ".github/paritybot.yml", CONFIG, ref="main")
    await _first_failure_first(bot, fake_github)


@pytest.mark.docker
async def test_from_a_container_too_the_first_failure_shows_before_the_tests_end(
    fake_github: FakeGitHub, tmp_path: Path, docker_client: docker.DockerClient, test_image: str
) -> None:
    async def in_docker(request: RunnerRequest) -> Runner:
        return DockerRunner(request.environment, request.run_id, docker_client)

    bot = await BotHarness.create(fake_github, tmp_path, in_docker, settings=FAST)
    fake_github.set_file(REPO, ".github/paritybot.yml", IN_A_CONTAINER.format(image=test_image), ref="main")
    await _first_failure_first(bot, fake_github)


def _tests_run(fake_github: FakeGitHub, head: str) -> CheckRun:
    (run,) = [r for r in fake_github.check_runs(REPO, head_sha=head) if r.name == TESTS]
    return run


async def _first_failure_first(bot: BotHarness, fake_github: FakeGitHub) -> None:
    try:
        assert await bot.send("pull_request", bot.pr_event("opened")) == 202
        await bot.wait_for("the first run", lambda: finished(view(fake_github, REPO, 7, bot.sample.head_sha)))

        head = bot.commit_on_feature("tests/test_zz_slow.py", SLOW, "a slow test")
        assert await bot.send("pull_request", bot.pr_event("synchronize", head_sha=head)) == 202

        def streamed() -> bool:
            runs = view(fake_github, REPO, 7, head).runs.get(TESTS, [])
            return bool(runs) and "failed so far" in (runs[-1].get("output") or {}).get("title", "")

        await bot.wait_for("the failure while the slow test runs", streamed)
        state = view(fake_github, REPO, 7, head).runs[TESTS][-1]
        assert state["status"] == "in_progress"
        assert state["output"]["title"].startswith("1 failed so far, ")
        assert BROKEN_TEST in state["output"]["summary"]
        # On the test's line at once, as a warning: what caused it is known only at the end.
        (early,) = _tests_run(fake_github, head).annotations
        assert (early["path"], early["annotation_level"]) == (BROKEN_TEST.split("::")[0], "warning")
        assert early["message"].startswith("Failed at this head while the other tests still ran: ")
        await bot.wait_for(
            "the summary to say so",
            lambda: "failed so far" in view(fake_github, REPO, 7, head).summaries[0],
        )

        await bot.wait_for("the final result", lambda: finished(view(fake_github, REPO, 7, head)))
        final = view(fake_github, REPO, 7, head).runs[TESTS][-1]
        assert final["status"] == "completed" and final["conclusion"] == "failure"
        assert "failed so far" not in final["output"]["title"]
        assert "failed so far" not in view(fake_github, REPO, 7, head).summaries[0]
        # The early annotation was sent once, whatever updates came between; the final adds its own.
        levels = sorted(a["annotation_level"] for a in _tests_run(fake_github, head).annotations)
        assert levels == ["failure", "warning"]
    finally:
        await bot.stop()
