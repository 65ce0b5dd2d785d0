"""Executes one claimed job: report it started, run the pipeline, record and report the result."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

import structlog

from bot.core.config import RepoConfig
from bot.core.models import RunKind, RunReport, RunState, TestOutcome
from bot.core.verdict import Verdict, verdict
from bot.render.check_results import render_check_runs, render_performance_check
from bot.render.check_runs import render_in_progress_output
from bot.service.github import GitHubApp
from bot.service.reporter import GitHubReporter, PrLocks
from bot.service.store.protocol import Store
from bot.service.store.records import Job
from runner.backends.base import RunnerFactory
from runner.pipeline import Pipeline, PipelineDeps

log = structlog.get_logger(__name__)

REACTION_PASSED = "rocket"
QUEUE_REFRESH_LIMIT = 10  # waiting PRs whose summaries are refreshed when a run starts
REACTION_FAILED = "confused"


class RunExecutor:
    def __init__(
        self,
        store: Store,
        runner_factory: RunnerFactory,
        *,
        workspace_root: Path,
        cache_root: Path,
        app: GitHubApp | None = None,
        locks: PrLocks | None = None,
    ):
        self.store = store
        self.runner_factory = runner_factory
        self.workspace_root = workspace_root
        self.cache_root = cache_root
        self.app = app
        self.locks = locks or PrLocks()

    async def _reporter(self, job: Job) -> tuple[GitHubReporter | None, str | None]:
        installation = job.request.installation_id
        if self.app is None or installation is None:
            return None, None
        gh = await self.app.client(installation)
        token = await self.app.installation_token(installation)
        return GitHubReporter(gh, self.store, self.locks, await self.app.bot_login()), token

    async def __call__(self, job: Job, cancel: asyncio.Event) -> None:
        reporter, token = await self._reporter(job)
        pr = job.pr_number
        await _send_reports("queue positions", self._refresh_waiting(job))
        if reporter is not None and pr is not None:
            async with self.locks(job.repo, pr):
                fresh = await asyncio.to_thread(self.store.get_job, job.id)
            job = fresh or job
            await _send_reports(
                "start",
                reporter.update_check_runs(
                    job.repo, job.check_runs, render_in_progress_output(job.environment)
                ),
                reporter.refresh_summary(job.repo, pr),
            )
        report = await self._execute(job, cancel, token)
        await asyncio.to_thread(self.store.finish, job.id, report.state, report, report.error)
        await self._remember(job, report)
        log.info("run finished", state=report.state.value, error=report.error)
        if reporter is not None and pr is not None:
            await _send_reports(
                "result",
                reporter.update_check_runs(job.repo, job.check_runs, render_check_runs(report)),
                reporter.refresh_summary(job.repo, pr),
                self._performance_check(reporter, job, report),
            )
            if job.request.comment_id is not None and report.state != RunState.CANCELLED:
                good = report.state == RunState.SUCCEEDED and not _has_failures(report)
                content = REACTION_PASSED if good else REACTION_FAILED
                await _send_reports("reaction", reporter.react(job.repo, job.request.comment_id, content))

    async def _performance_check(self, reporter: GitHubReporter, job: Job, report: RunReport) -> None:
        """The ``paritybot / performance`` check run exists only for a run that compared benchmarks:
        it is created already completed, so nothing is left to finish if the run breaks later."""
        output = render_performance_check(report)
        if output is None:
            return
        ids = await reporter.create_check_runs(job.repo, job.head_sha, [output])
        await asyncio.to_thread(self.store.set_check_runs, job.id, job.check_runs | ids)

    async def _refresh_waiting(self, started: Job) -> None:
        """Everyone behind a run that starts moved up one place: their summaries say so.

        Only the first few waiting PRs are refreshed, so a long queue costs a bounded number of
        API calls per started run; the rest catch up as the queue moves.
        """
        if self.app is None:
            return
        queued = await asyncio.to_thread(self.store.jobs_in_state, RunState.QUEUED)
        waiting: dict[tuple[str, int], Job] = {}
        for other in queued:
            if other.queue == started.queue and other.pr_number is not None and other.request.installation_id:
                waiting.setdefault((other.repo, other.pr_number), other)
        for (repo, number), other in list(waiting.items())[:QUEUE_REFRESH_LIMIT]:
            reporter, _ = await self._reporter(other)
            if reporter is not None:
                await reporter.refresh_summary(repo, number)

    async def _execute(self, job: Job, cancel: asyncio.Event, token: str | None) -> RunReport:
        config = job.request.config or RepoConfig()
        environment = config.environment(job.environment)
        if environment is None:
            return job.report_without_results(
                RunState.FAILED, f"environment `{job.environment}` is no longer in the config"
            )
        baseline = await asyncio.to_thread(self.store.baseline, job.repo, job.environment)
        deps = PipelineDeps(
            runner_factory=self.runner_factory,
            workspace_root=self.workspace_root,
            cache_root=self.cache_root,
            token=token,
            baseline=baseline,
        )
        pipeline = Pipeline(job.request, config, environment, job.id, deps)
        run = asyncio.create_task(pipeline.execute())
        stop = asyncio.create_task(cancel.wait())
        try:
            await asyncio.wait({run, stop}, return_when=asyncio.FIRST_COMPLETED)
            if stop.done() and not run.done():
                await pipeline.cancel()
            return await run
        finally:
            stop.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await stop

    async def _remember(self, job: Job, report: RunReport) -> None:
        if (
            job.request.kind == RunKind.BASELINE
            and report.probe is not None
            and report.state == RunState.SUCCEEDED
        ):
            await asyncio.to_thread(self.store.save_baseline, job.repo, job.environment, report.probe)
        if job.pr_number is None or report.tests is None or report.state != RunState.SUCCEEDED:
            return
        failed = sorted(
            r.nodeid for r in report.tests.results if r.outcome in (TestOutcome.FAILED, TestOutcome.ERROR)
        )
        async with self.locks(job.repo, job.pr_number):  # the reporter writes the same row
            state = await asyncio.to_thread(self.store.pull_state, job.repo, job.pr_number)
            state.failed_tests[job.environment] = failed
            await asyncio.to_thread(self.store.save_pull_state, state)


async def _send_reports(what: str, *calls: Coroutine[Any, Any, Any]) -> None:
    """Send reports one after another; a GitHub error is logged, and never loses the run's result,
    which is in the store already and is sent again at the next refresh of the PR."""
    for i, call in enumerate(calls):
        try:
            await call
        except Exception:
            log.exception("reporting to GitHub failed", what=what)
            for rest in calls[i + 1 :]:
                rest.close()
            return


def _has_failures(report: RunReport) -> bool:
    return verdict(report) not in (Verdict.PASS, Verdict.FLAKY_ONLY, Verdict.NOTHING_TO_CHECK)
