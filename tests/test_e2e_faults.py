"""GitHub failing any of paritybot's writes, once or again and again: every check run still ends
completed, none is created twice, no check is missing, and the PR keeps one summary that tells
the result. End to end: real payloads over HTTP, the real bot, the fake GitHub injecting faults
(before doing the work, or after it, losing the answer)."""

from __future__ import annotations

from pathlib import Path

import pytest
from botharness import REPO, BotHarness
from fakegithub import FakeGitHub
from finishing import FAST, WRITE_FAULTS, Fault, problems, run_with_fault, view
from sample_repo import BROKEN_TEST

NO_RERUNS = "tests:\n  reruns: 0\n"  # the broken test fails once: a shorter run, the same truth


@pytest.mark.parametrize("fault", WRITE_FAULTS, ids=lambda f: f.label)
async def test_a_failing_write_still_ends_with_every_check_run_completed_once(
    fault: Fault, fake_github: FakeGitHub, tmp_path: Path
) -> None:
    bot = await BotHarness.create(fake_github, tmp_path, settings=FAST)
    fake_github.set_file(REPO, ".github/paritybot.yml", NO_RERUNS, ref="main")
    try:
        _, runs = await run_with_fault(bot, fault)
        seen = view(fake_github, REPO, 7, bot.sample.head_sha)
        assert problems(seen, runs_per_check=runs) == []
        # The truth, whatever failed on the way: the sample PR breaks a test and a hook.
        conclusions = seen.conclusions()
        assert conclusions["paritybot / tests (default)"] == ["failure"] * runs
        assert conclusions["paritybot / pre-commit (default)"] == ["failure"] * runs
        assert BROKEN_TEST in seen.summaries[0]
        # The fault did happen, as often as asked; a creation whose answer was lost is looked up,
        # not posted again, so a lost answer may leave faults unused.
        hit = [c for c in fake_github.calls_to(fault.method, fault.path) if c.status == fault.status]
        assert len(hit) == fault.times or (fault.after and 1 <= len(hit) < fault.times)
    finally:
        await bot.stop()
