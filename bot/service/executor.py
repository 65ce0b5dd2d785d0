"""Executes one claimed job: report it started, run the pipeline, record and report the result.

Each check's run completes as soon as its result is known (:class:`EarlyResults`); the final
state is recorded in the store, due to be reported, and published at once by the reconciler,
which tries again on its next pass if GitHub could not be told.

With several hosts an agent runs the pipeline (:func:`run_pipeline`, the same code) and the
service tells GitHub what it recorded: :func:`report_started` when a run starts, the reconciler's
``publish`` (after :func:`remember`) when it ends.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import Any

import structlog

from bot.core.config import RepoConfig
from bot.core.kinds import CheckKind
from bot.core.models import EnvFacts, RunKind, RunReport, RunState, TestOutcome
from bot.render.check_results import render_check_runs
from bot.render.check_runs import render_in_progress_output
from bot.service.github import GitHubApp
from bot.service.reconciler import Reconciler
from bot.service.reporter import GitHubReporter, PrLocking, PrLocks
from bot.service.run_log import RunLogRecorder
from bot.service.store.protocol import Store
from bot.service.store.records import Job
from bot.service.store.run_logs import RunLogStore
from bot.service.test_history import StoreHistory, record_tests
from runner.backends.base import ProcessLedger, RunnerFactory, StepProcess
from runner.checks.attribution import TestHistory
from runner.pipeline import Pipeline, PipelineDeps

log = structlog.get_logger(__name__)

QUEUE_REFRESH_LIMIT = 10  # waiting PRs whose summaries are refreshed when a run starts


class RunExecutor:
    def __init__(
        self,
        store: Store,
        runner_factory: RunnerFactory,
        *,
        workspace_root: Path,
        cache_root: Path,
        app: GitHubApp | None = None,
        locks: PrLocking | None = None,
        reconciler: Reconciler | None = None,
    ):
        self.store = store
        self.runner_factory = runner_factory
        self.workspace_root = workspace_root
        self.cache_root = cache_root
        self.app = app
        self.locks = locks or PrLocks()
        self.reconciler = reconciler or Reconciler(store, app, self.locks)

    async def __call__(self, job: Job, cancel: asyncio.Event) -> None:
        reporter = await self.reconciler.reporter(job)
        token = (
            await self.app.installation_token(job.request.installation_id)
            if self.app and job.request.installation_id
            else None
        )
        pr = job.pr_number
        if self.app is not None:
            await _send_reports("queue positions", partial(refresh_waiting, self.store, self.reconciler, job))
        if reporter is not None and pr is not None:
            async with self.locks(job.repo, pr):
                fresh = await asyncio.to_thread(self.store.get_job, job.id)
            job = fresh or job
            await report_started(reporter, job)
        early = EarlyResults(self.store, job, reporter)
        try:
            report = await self._execute(job, cancel, token, early)
        finally:
            await early.drain()  # never left running behind the run, whatever ended it
        if not await asyncio.to_thread(
            self.store.finish, job.id, report.state, report, report.error, attempt=job.attempts
        ):
            log.warning(
                "the run was taken back from this worker; its result is dropped", state=report.state.value
            )
            return
        await remember(self.store, self.locks, job, report)
        log.info("run finished", state=report.state.value, error=report.error)
        await self.reconciler.publish(job.id)

    async def _execute(
        self, job: Job, cancel: asyncio.Event, token: str | None, early: EarlyResults
    ) -> RunReport:
        baseline = await asyncio.to_thread(self.store.baseline, job.repo, job.environment)
        return await run_pipeline(
            job,
            cancel,
            token=token,
            baseline=baseline,
            runner_factory=self.runner_factory,
            workspace_root=self.workspace_root,
            cache_root=self.cache_root,
            progress=early,
            processes=StoreLedger(self.store, job.id, job.attempts),
            history=StoreHistory(self.store, job.repo, job.environment, job.pr_number),
            log_store=self.store,
        )


async def refresh_waiting(store: Store, reconciler: Reconciler, started: Job) -> None:
    """Everyone behind a run that starts moved up one place: their summaries say so (one machine:
    the executor; several hosts: the service, once an agent recorded the start).

    Only the first few waiting PRs are refreshed, so a long queue costs a bounded number of
    API calls per started run; the rest catch up as the queue moves.
    """
    queued = await asyncio.to_thread(store.jobs_in_state, RunState.QUEUED)
    waiting: dict[tuple[str, int], Job] = {}
    for other in queued:
        if other.queue == started.queue and other.pr_number is not None and other.request.installation_id:
            waiting.setdefault((other.repo, other.pr_number), other)
    for (repo, number), other in list(waiting.items())[:QUEUE_REFRESH_LIMIT]:
        reporter = await reconciler.reporter(other)
        if reporter is not None:
            await reporter.refresh_summary(repo, number)


async def remember(store: Store, locks: PrLocking, job: Job, report: RunReport) -> None:
    """What a final run leaves for later runs: a default-branch run's probe (the CI reference),
    a PR run's failing tests (for ``/retest-gpu failed``). Done by the process that records the
    run's end (one machine) or reports it (several hosts: agents may not write these rows)."""
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


async def report_started(reporter: GitHubReporter, job: Job) -> None:
    """A run started: its check runs in progress (created if missing), the summary refreshed."""
    assert job.pr_number is not None
    await _send_reports(
        "start",
        partial(
            reporter.sync_check_runs,
            job,
            render_in_progress_output(job.environment, attempt=job.attempts),
            while_state=RunState.RUNNING,
        ),
        partial(reporter.refresh_summary, job.repo, job.pr_number),
    )


async def report_progress(reporter: GitHubReporter, job: Job, report: RunReport) -> None:
    """A running job's results so far: the check runs of the checks that finished completed, the
    summary refreshed (one machine: its executor; several hosts: the service, from what the agent
    wrote to the store)."""
    assert job.pr_number is not None
    # Completed checks; and the tests while they run, once one failed (their failures so far).
    streaming = report.tests is not None and report.tests.in_progress is not None
    done = [
        out
        for out in render_check_runs(report)
        if out.status == "completed" or (streaming and out.kind == CheckKind.TESTS)
    ]
    await _send_reports(
        "early results",
        partial(reporter.sync_check_runs, job, done, while_state=RunState.RUNNING),
        partial(reporter.refresh_summary, job.repo, job.pr_number),
    )


async def run_pipeline(
    job: Job,
    cancel: asyncio.Event,
    *,
    token: str | None,
    baseline: EnvFacts | None,
    runner_factory: RunnerFactory,
    workspace_root: Path,
    cache_root: Path,
    progress: Callable[[RunReport], Awaitable[None]] | None = None,
    processes: ProcessLedger | None = None,
    history: TestHistory | None = None,
    log_store: RunLogStore | None = None,
) -> RunReport:
    """Run one attempt of a job's pipeline, in a workspace of its own; ``cancel`` stops it (and its
    container) and ends it cancelled. With ``log_store``, each step's output goes there as it comes
    (the run page)."""
    config = job.request.config or RepoConfig()
    environment = config.environment(job.environment)
    if environment is None:
        return job.report_without_results(
            RunState.FAILED, f"environment `{job.environment}` is no longer in the config"
        )
    recorder = None if log_store is None else RunLogRecorder(log_store, job.id, job.attempts, (token or "",))
    deps = PipelineDeps(
        runner_factory=runner_factory,
        workspace_root=workspace_root,
        cache_root=cache_root,
        token=token,
        baseline=baseline,
        attempt=job.attempts,
        progress=progress,
        processes=processes,
        history=history,
        step_log=recorder,
    )
    pipeline = Pipeline(job.request, config, environment, job.id, deps)
    async with recorder.flushing() if recorder is not None else contextlib.nullcontext():
        return await _until_done(pipeline, cancel)


async def _until_done(pipeline: Pipeline, cancel: asyncio.Event) -> RunReport:
    """The pipeline's report; ``cancel`` set first cancels it (its container stopped) and it ends cancelled."""
    run = asyncio.create_task(pipeline.execute())
    stop = asyncio.create_task(cancel.wait())
    try:
        await asyncio.wait({run, stop}, return_when=asyncio.FIRST_COMPLETED)
        if stop.done() and not run.done():
            await pipeline.cancel()
        return await run
    finally:
        stop.cancel()
        if not run.done():
            # This task was cancelled (the service is stopping): the run stops with it, its step's
            # processes killed, rather than going on with no one left to report it.
            run.cancel()
            await asyncio.wait({run})
        with contextlib.suppress(asyncio.CancelledError):
            await stop


async def _send_reports(what: str, *calls: Callable[[], Awaitable[Any]]) -> None:
    """Send reports one after another; a GitHub error is logged, and never loses the run's result,
    which is in the store already and is sent again at the next refresh of the PR. Each call is
    made only when its turn comes: one that never comes (an error, a cancelled task) leaves no
    coroutine behind that nobody awaits."""
    for call in calls:
        try:
            await call()
        except Exception:
            log.exception("reporting to GitHub failed", what=what)
            return


class EarlyResults:
    """The pipeline's progress callback: each check's run completes as soon as its result is known.

    The results so far go into the store at once (the summary shows them); GitHub is told in the
    background, one update after another, so the run never waits for GitHub.
    """

    def __init__(self, store: Store, job: Job, reporter: GitHubReporter | None):
        self.store = store
        self.job = job
        self.reporter = reporter
        self._sending: asyncio.Task[None] | None = None

    async def __call__(self, report: RunReport) -> None:
        if not await asyncio.to_thread(self.store.save_progress, self.job.id, self.job.attempts, report):
            return
        if self.reporter is None or self.job.pr_number is None:
            return
        previous = self._sending
        self._sending = asyncio.create_task(self._send(previous, report))

    async def _send(self, previous: asyncio.Task[None] | None, report: RunReport) -> None:
        if previous is not None:
            await previous
        assert self.reporter is not None
        await report_progress(self.reporter, self.job, report)

    async def drain(self) -> None:
        """Wait for the updates under way: the final one must come after them."""
        if self._sending is not None:
            await self._sending


class StoreLedger:
    """The host runner's process groups of one attempt, recorded in the store."""

    def __init__(self, store: Store, job_id: str, attempt: int):
        self.store, self.job_id, self.attempt = store, job_id, attempt

    def started(self, process: StepProcess) -> None:
        self.store.record_step_process(self.job_id, self.attempt, process)

    def ended(self, process: StepProcess) -> None:
        self.store.forget_step_process(process)
