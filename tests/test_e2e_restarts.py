"""kill -9 of `paritybot serve` during a run, once, twice and three times: every check run ends
completed, none twice, one summary that says what happened; the host runner's step that the dead
process left running is killed at the next start; each attempt works in a workspace of its own."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from botharness import REPO
from fakegithub import FakeGitHub
from finishing import CHECK_RUN, finished, problems, view
from serveproc import ServeProcess, alive

from bot.core.kinds import CheckKind
from bot.render.check_runs import check_run_name


def name(kind: str) -> str:
    return check_run_name(CheckKind(kind), "default")


async def until(what: str, predicate: Callable[[], bool], timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def conclusions(fake: FakeGitHub, head_sha: str) -> dict[str, str | None]:
    return {name: states[-1]["conclusion"] for name, states in view(fake, REPO, 7, head_sha).runs.items()}


@pytest.mark.parametrize("kills", [1, 2, 3])
async def test_kill_9_during_a_run_still_completes_every_check_run_and_one_summary(
    kills: int, fake_github: FakeGitHub, tmp_path: Path
) -> None:
    serve = ServeProcess.create(fake_github, tmp_path, max_attempts=2)
    head = serve.sample.head_sha
    try:
        await serve.start()
        assert await serve.send("pull_request", serve.pr_opened()) == 202
        for attempt in range(1, min(kills, 2) + 1):
            await until(
                f"attempt {attempt} at its set-up", lambda a=attempt: len(serve.started_attempts()) == a
            )
            if attempt == 1:
                # Early results: pre-commit and the docstrings are complete while the tests wait.
                def early() -> bool:
                    runs = view(fake_github, REPO, 7, head).runs
                    return all(
                        name(k) in runs and runs[name(k)][-1]["status"] == "completed"
                        for k in ("pre-commit", "docstrings")
                    )

                await until("pre-commit and docstrings completed", early)
                runs = view(fake_github, REPO, 7, head).runs
                assert runs[name("tests")][-1]["status"] == "in_progress"
            orphan = serve.started_attempts()[-1]
            await serve.kill()
            assert alive(orphan)  # the dead service's step goes on without it
            if kills == 3 and attempt == 2:
                fake_github.fail("PATCH", CHECK_RUN, 502, times=100_000)  # GitHub down as it restarts
            await serve.start()
            await until("the leftover step killed at start-up", lambda o=orphan: not alive(o), timeout=30)
        if kills == 1:
            serve.open_gate()
        if kills == 3:
            # The run failed at this start; telling GitHub fails, and the service dies once more.
            await until(
                "an attempt to complete the check runs",
                lambda: any(c.status == 502 for c in fake_github.calls_to("PATCH", CHECK_RUN)),
            )
            await serve.kill()
            fake_github.clear_failures()
            await serve.start()
        await until("GitHub to show the run finished", lambda: finished(view(fake_github, REPO, 7, head)))

        seen = view(fake_github, REPO, 7, head)
        assert problems(seen) == []
        done = conclusions(fake_github, head)
        summary = seen.summaries[0]
        if kills == 1:
            # The second attempt ran to the end: the real result.
            assert done[name("tests")] == "failure"
            assert "restarted" not in summary
        else:
            # Stopped twice: failed, saying so, with what had finished before.
            assert done[name("tests")] == "failure"
            assert done[name("pre-commit")] == "failure"
            test_run = seen.runs[name("tests")][-1]
            assert "paritybot restarted twice during this run" in test_run["output"]["title"]
            assert "paritybot restarted twice during this run" in summary
            assert "/retest-gpu" in summary
        assert len(serve.started_attempts()) == 2  # a second attempt, and never a third
        workspaces = sorted(p.name for p in (tmp_path / "workspaces").iterdir())
        assert workspaces == []  # each attempt's own workspace, removed at its end or at the next start
    finally:
        serve.open_gate()
        await serve.stop()
