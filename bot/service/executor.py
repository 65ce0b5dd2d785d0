"""Executes one claimed job: its start published, the pipeline run, its end recorded and published.

Each step writes the store and leaves GitHub to the publisher (:mod:`bot.service.publisher`): the
start is published before the pipeline runs, each early result wakes the publisher
(:class:`EarlyResults`), and the final state, recorded due to be reported, is published at once
(and by the reconciler's next pass, should GitHub not be told now).

With several hosts an agent runs the pipeline (:func:`run_pipeline`, the same code) and writes the
same store rows; the publisher of a service replica tells GitHub.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from pathlib import Path

import structlog

from bot.core.config import RepoConfig
from bot.core.models import EnvFacts, RunReport, RunState
from bot.service.github import GitHubApp
from bot.service.publisher.publisher import Publisher
from bot.service.run_log import RunLogRecorder
from bot.service.store.protocol import Store
from bot.service.store.records import Job
from bot.service.store.run_logs import RunLogStore
from bot.service.test_history import StoreHistory
from runner.backends.base import ProcessLedger, RunnerFactory, StepProcess
from runner.checks.attribution import TestHistory
from runner.pipeline import Pipeline, PipelineDeps

log = structlog.get_logger(__name__)


class RunExecutor:
    def __init__(
        self,
        store: Store,
        runner_factory: RunnerFactory,
        publisher: Publisher,
        *,
        workspace_root: Path,
        cache_root: Path,
        app: GitHubApp | None = None,
    ):
        self.store = store
        self.runner_factory = runner_factory
        self.publisher = publisher
        self.workspace_root = workspace_root
        self.cache_root = cache_root
        self.app = app

    async def __call__(self, job: Job, cancel: asyncio.Event) -> None:
        token = (
            await self.app.installation_token(job.request.installation_id)
            if self.app and job.request.installation_id
            else None
        )
        # Started: its check runs in progress, the summary, the PRs behind it a place up.
        await self.publisher.publish(job.id)
        report = await self._execute(job, cancel, token, EarlyResults(self.store, job, self.publisher))
        if not await asyncio.to_thread(
            self.store.finish, job.id, report.state, report, report.error, attempt=job.attempts
        ):
            log.warning(
                "the run was taken back from this worker; its result is dropped", state=report.state.value
            )
            return
        log.info("run finished", state=report.state.value, error=report.error)
        await self.publisher.publish(job.id)

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


class EarlyResults:
    """The pipeline's progress callback: each check's result goes to the store as soon as it is
    known, and the publisher is woken; the run never waits for GitHub, and the publisher sends the
    checks that finished while the rest runs (the same as with agents, whose writes wake it by
    NOTIFY)."""

    def __init__(self, store: Store, job: Job, publisher: Publisher):
        self.store = store
        self.job = job
        self.publisher = publisher

    async def __call__(self, report: RunReport) -> None:
        if await asyncio.to_thread(self.store.save_progress, self.job.id, self.job.attempts, report):
            self.publisher.wake(self.job.id)


class StoreLedger:
    """The host runner's process groups of one attempt, recorded in the store."""

    def __init__(self, store: Store, job_id: str, attempt: int):
        self.store, self.job_id, self.attempt = store, job_id, attempt

    def started(self, process: StepProcess) -> None:
        self.store.record_step_process(self.job_id, self.attempt, process)

    def ended(self, process: StepProcess) -> None:
        self.store.forget_step_process(process)
