"""kill -9 of `paritybot serve` during a run, once, twice and three times: every check run ends
completed, none twice, one summary that says what happened; the host runner's step that the dead
process left running is killed at the next start; each attempt works in a workspace of its own."""

from __future__ import annotations

from pathlib import Path

import pytest
from botharness import REPO
from fakegithub import FakeGitHub
from finishing import problems, view
from serveproc import PRECOMMIT, TESTS, ServeProcess, kill_during_run


def conclusions(fake: FakeGitHub, head_sha: str) -> dict[str, str | None]:
    return {name: states[-1]["conclusion"] for name, states in view(fake, REPO, 7, head_sha).runs.items()}


@pytest.mark.parametrize("kills", [1, 2, 3])
async def test_kill_9_during_a_run_still_completes_every_check_run_and_one_summary(
    kills: int, fake_github: FakeGitHub, tmp_path: Path
) -> None:
    serve = ServeProcess.create(fake_github, tmp_path, max_attempts=2)
    head = serve.sample.head_sha
    try:
        report = await kill_during_run(serve, kills)
        # Early results: pre-commit and the docstrings were complete while the tests waited.
        assert report.tests_open_while_early_done
        # The host runner's step outlived each kill, and the next start killed it.
        assert report.orphans_outlived_serve == [True] * min(kills, 2)

        seen = view(fake_github, REPO, 7, head)
        assert problems(seen) == []
        done = conclusions(fake_github, head)
        summary = seen.summaries[0]
        if kills == 1:
            # The second attempt ran to the end: the real result.
            assert done[TESTS] == "failure"
            assert "restarted" not in summary
        else:
            # Stopped twice: failed, saying so, with what had finished before.
            assert done[TESTS] == "failure" and done[PRECOMMIT] == "failure"
            assert "paritybot restarted twice during this run" in seen.runs[TESTS][-1]["output"]["title"]
            assert "paritybot restarted twice during this run" in summary
            assert "/retest-gpu" in summary
        assert len(serve.started_attempts()) == 2  # a second attempt, and never a third
        # Each attempt had its own workspace, removed at its end or at the next start.
        assert list((tmp_path / "workspaces").iterdir()) == []
    finally:
        serve.open_gate()
        await serve.stop()
