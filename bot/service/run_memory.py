"""What a final run leaves for later runs: a default-branch run's probe (the CI reference), the
tests' history, a PR run's failing tests (for ``/retest-gpu failed``).

Written by the publisher before it publishes a run's end, in both modes (agents may not write
these rows). Every write replaces what the same run wrote before, so writing it again (a publish
interrupted and completed later) changes nothing.
"""

from __future__ import annotations

import asyncio

from bot.core.models import RunKind, RunReport, RunState, TestOutcome
from bot.service.locks import PrLocking
from bot.service.store.protocol import Store
from bot.service.store.records import Job
from bot.service.test_history import record_tests


async def remember(store: Store, locks: PrLocking, job: Job, report: RunReport) -> None:
    if (
        job.request.kind == RunKind.BASELINE
        and report.probe is not None
        and report.state == RunState.SUCCEEDED
    ):
        await asyncio.to_thread(store.save_baseline, job.repo, job.environment, report.probe)
    await record_tests(store, job, report)  # the history: known flaky tests, the default branch's record
    if job.pr_number is None or report.tests is None or report.state != RunState.SUCCEEDED:
        return
    failed = sorted(
        r.nodeid for r in report.tests.results if r.outcome in (TestOutcome.FAILED, TestOutcome.ERROR)
    )
    async with locks(job.repo, job.pr_number):  # the reporter writes the same row
        state = await asyncio.to_thread(store.pull_state, job.repo, job.pr_number)
        state.failed_tests[job.environment] = failed
        await asyncio.to_thread(store.save_pull_state, state)
