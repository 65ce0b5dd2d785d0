"""A report the service starts is sent or never made: a stop in the middle of telling GitHub that a
run started leaves no summary refresh made and never awaited (a refresh silently dropped)."""

from __future__ import annotations

import asyncio
import gc
import warnings

from botharness import REPO, BotHarness, bot

from bot.core.models import RunState

__all__ = ["bot"]  # the fixture, imported for pytest


async def test_a_stop_while_a_start_is_reported_drops_no_summary_refresh_unawaited(bot: BotHarness) -> None:
    # GitHub is slow to mark the check runs in progress: the stop comes while the executor waits.
    bot.fake.slow("PATCH", "/repos/{owner}/{repo}/check-runs/{check_run_id}", 5.0)
    assert await bot.send("pull_request", bot.pr_event("opened")) == 202

    def running() -> bool:
        return any(j.state == RunState.RUNNING for j in bot.store.jobs_for_pr(REPO, 7))

    await bot.wait_for("the run to start", running)
    await asyncio.sleep(0.5)  # the start's first report is under way
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        await bot.stop()
        gc.collect()
    unawaited = [str(w.message) for w in caught if "was never awaited" in str(w.message)]
    assert unawaited == []
