"""The first failure is reported while the rest of the tests still run; the final result replaces it.

Real pytest on the host runner through the pipeline: the progress callback (the service's
EarlyResults) is told the failures so far, and the tests check run renders them in progress.
"""

from __future__ import annotations

import json
from pathlib import Path

from gitrepo import GitRepo
from sample_repo import tool_env

from bot.core.config import parse_repo_config
from bot.core.kinds import CheckKind, Stage
from bot.core.models import RunReport, RunRequest, TestOutcome
from bot.render.check_results import render_check_runs
from bot.render.comment import render_comment
from runner.backends.base import RunnerRequest
from runner.backends.host import HostRunner
from runner.checks.streaming import LiveTail
from runner.pipeline import Pipeline, PipelineDeps

CONFIG = "checks: {precommit: false, docstrings: false}\ntests: {paths: [tests], use_coverage_map: false, reruns: 0}\n"
FAST_FAIL = "import lib\n\n\ndef test_fails_at_once():\n    assert lib.VALUE == 1\n"
SLOW = "import time\n\nimport lib\n\n\ndef test_slow():\n    time.sleep(6)\n    assert lib.VALUE\n"


async def test_the_first_failure_is_reported_while_the_rest_still_run(tmp_path: Path) -> None:
    repo = GitRepo(tmp_path / "repo")
    repo.commit(
        {
            ".github/paritybot.yml": CONFIG,
            "lib.py": "VALUE = 1\n",
            "tests/test_a.py": FAST_FAIL,
            "tests/test_b.py": SLOW,
        }
    )
    repo.git("checkout", "-q", "-b", "feature")
    repo.commit({"lib.py": "VALUE = 2\n"})
    told: list[RunReport] = []

    async def progress(report: RunReport) -> None:
        told.append(report)

    async def host(request: RunnerRequest) -> HostRunner:
        return HostRunner(env=tool_env())

    deps = PipelineDeps(
        runner_factory=host, workspace_root=tmp_path / "ws", cache_root=tmp_path / "cache", progress=progress
    )
    request = RunRequest(
        repo="octo/lib",
        pr_number=3,
        clone_url=str(repo.path),
        head_sha=repo.git("rev-parse", "feature"),
        base_sha=repo.git("rev-parse", "main"),
    )
    config = parse_repo_config(CONFIG)
    final = await Pipeline(request, config, config.default_environment(), "run-1", deps).execute()

    streamed = [r for r in told if r.tests is not None and r.tests.in_progress is not None]
    assert streamed, "no failure was reported before the tests ended"
    first = streamed[0]
    assert first.tests is not None and [r.nodeid for r in first.tests.results] == [
        "tests/test_a.py::test_fails_at_once"
    ]
    [tests_run] = [o for o in render_check_runs(first) if o.kind == CheckKind.TESTS]
    assert first.tests.results[0].line == 5, "the early failure is placed on the test's own line"
    assert tests_run.status == "in_progress"
    assert tests_run.title == "1 failed so far, 1 of 2 still running"
    assert "❌ 1 failed so far, 1 of 2 still running" in render_comment(first, stage=Stage.RUNNING)
    # The final result replaces it.
    assert final.tests is not None and final.tests.in_progress is None
    assert {r.nodeid: r.outcome for r in final.tests.results}[
        "tests/test_b.py::test_slow"
    ] == TestOutcome.PASSED
    [done] = [o for o in render_check_runs(final) if o.kind == CheckKind.TESTS]
    assert done.status == "completed" and done.conclusion == "failure"


def test_the_live_file_is_never_read_through_a_link(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text('{"failed": "host file"}\n')
    (tmp_path / "live.jsonl").symlink_to(secret)
    tail = LiveTail(tmp_path / "live.jsonl")
    assert not tail.read() and tail.failed == []


def test_a_line_in_the_live_file_is_taken_only_as_a_line_number(tmp_path: Path) -> None:
    # The PR's code can write the live file: what is not a plausible line number is dropped.
    lines = [7, "7", True, -1, 10**12, 2.5]
    (tmp_path / "live.jsonl").write_text(
        "".join(
            json.dumps({"failed": f"tests/test_x.py::test_{i}", "line": v}) + "\n"
            for i, v in enumerate(lines)
        )
    )
    tail = LiveTail(tmp_path / "live.jsonl")
    assert tail.read()
    assert [r.line for r in tail.failed] == [7, None, None, None, None, None]
