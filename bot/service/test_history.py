"""The tests' history in the store: what a finished run leaves, what a new run asks of it.

A finished run records its failing and flaky tests (:func:`record_tests`); a run on the default
branch records which tests fail on its commit, with no failure recorded as a run with no rows. A
pull request's run asks (:class:`StoreHistory`, the pipeline's ``TestHistory``) whether a test
still failing at its head was flaky on other changes or the default branch ("known flaky"), and
whether the default branch's record of its merge base already has it failing.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from bot.core.kinds import CheckKind
from bot.core.models import RunKind, RunReport, RunState, TestOutcome
from bot.service.store.protocol import Store
from bot.service.store.records import Job, TestRunRecord

if TYPE_CHECKING:
    from bot.service.store.postgres import PostgresStore

_RECORDED = {
    TestOutcome.FAILED: "failed",
    TestOutcome.ERROR: "failed",
    TestOutcome.FLAKY: "flaky",
}
MESSAGE_CHARS = 2000


class StoreHistory:
    """One run's questions to the store: its repository, environment and pull request."""

    def __init__(self, store: Store, repo: str, environment: str, pr_number: int | None):
        self.store, self.repo, self.environment, self.pr_number = store, repo, environment, pr_number

    async def flaky_elsewhere(self, nodeids: list[str]) -> dict[str, list[str]]:
        return await asyncio.to_thread(
            self.store.flaky_elsewhere, self.repo, nodeids, pr_number=self.pr_number
        )

    async def failing_at(self, sha: str) -> dict[str, str] | None:
        return await asyncio.to_thread(self.store.failing_at, self.repo, self.environment, sha)

    async def recently_failed(self) -> set[str]:
        if self.pr_number is None:
            return set()
        state = await asyncio.to_thread(self.store.pull_state, self.repo, self.pr_number)
        return set(state.failed_tests.get(self.environment, []))


class AgentHistory(StoreHistory):
    """The same questions from an agent (several hosts), whose role reads the tests' history but
    not the pull request's row: its last failures come from its last recorded run."""

    def __init__(self, store: PostgresStore, repo: str, environment: str, pr_number: int | None):
        super().__init__(store, repo, environment, pr_number)
        self.postgres = store

    async def recently_failed(self) -> set[str]:
        if self.pr_number is None:
            return set()
        return await asyncio.to_thread(
            self.postgres.failed_last_time, self.repo, self.environment, self.pr_number
        )


def run_url(job: Job) -> str:
    """Where a reader sees the run: its tests check run, else its pull request, else its commit."""
    web = f"https://github.com/{job.repo}"
    if (run_id := job.check_runs.get(CheckKind.TESTS.value)) is not None:
        return f"{web}/runs/{run_id}"
    if job.pr_number is not None:
        return f"{web}/pull/{job.pr_number}"
    return f"{web}/commit/{job.request.head_sha}"


def test_run_record(job: Job, report: RunReport) -> TestRunRecord | None:
    """What the history keeps of a finished run; None when its tests did not finish."""
    tests = report.tests
    if tests is None or report.state != RunState.SUCCEEDED or not (tests.results or tests.selected):
        return None
    if job.request.kind not in (RunKind.PULL_REQUEST, RunKind.BASELINE):
        return None
    outcomes = tuple(
        (r.nodeid, _RECORDED[r.outcome], r.message[:MESSAGE_CHARS])
        for r in tests.results
        if r.outcome in _RECORDED
    )
    return TestRunRecord(
        job_id=job.id,
        repo=job.repo,
        environment=job.environment,
        pr_number=job.pr_number if job.request.kind == RunKind.PULL_REQUEST else None,
        head_sha=job.request.head_sha,
        url=run_url(job),
        outcomes=outcomes,
    )


async def record_tests(store: Store, job: Job, report: RunReport) -> None:
    record = test_run_record(job, report)
    if record is not None:
        await asyncio.to_thread(store.record_test_run, record)
