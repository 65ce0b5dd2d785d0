"""Enqueueing and cancelling runs, with their GitHub side: queued check runs and the summary.

A job and its check runs are created under the PR's lock; the worker takes the same lock before
it reads the job's check runs, so it never starts a run whose check runs are not recorded yet.
One scheduler is made per delivery, with the reporter of the delivery's installation (None when
there is none): handlers only say what to run (``handlers.context.RunScheduler``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

import structlog

from bot.core.config import Environment, RepoConfig
from bot.core.models import RunRequest, RunState
from bot.render.check_results import render_check_runs
from bot.render.check_runs import render_queued_output
from bot.service.reporter import GitHubReporter, PrLocks
from bot.service.store.protocol import Store
from bot.service.store.records import Job

log = structlog.get_logger(__name__)


def dedupe_key(request: RunRequest, environment: str, trigger_key: str) -> str:
    """One job per (PR, head SHA, environment, trigger): redeliveries and double clicks run once."""
    return f"{request.repo}#{request.pr_number}@{request.head_sha}/{environment}/{trigger_key}"


class Scheduler:
    def __init__(
        self,
        store: Store,
        locks: PrLocks,
        reporter: GitHubReporter | None,
        wake: Callable[[], None] = lambda: None,
    ):
        self.store = store
        self.locks = locks
        self.reporter = reporter
        self.wake = wake

    async def schedule(
        self,
        request: RunRequest,
        config: RepoConfig,
        environments: Sequence[Environment],
        trigger_key: str,
    ) -> list[Job]:
        """Queue one run per environment; a PR's runs get their check runs, queued, at once."""
        reporter = self.reporter if request.pr_number is not None else None
        jobs: list[Job] = []
        lock = self.locks(request.repo, request.pr_number or 0)
        async with lock:
            for env in environments:
                req = request.model_copy(update={"environment": env.name, "config": config})
                job = await asyncio.to_thread(
                    self.store.enqueue, req, env.name, dedupe_key(request, env.name, trigger_key)
                )
                if job is None:
                    log.info("run already requested", environment=env.name, trigger=trigger_key)
                    continue
                if reporter is not None:
                    position = await asyncio.to_thread(self.store.queue_position, job.id)
                    outputs = render_queued_output(env.name, queue_position=position)
                    ids = await reporter.create_check_runs(request.repo, request.head_sha, outputs)
                    await asyncio.to_thread(self.store.set_check_runs, job.id, ids)
                log.info("run queued", run_id=job.id, environment=env.name, trigger=trigger_key)
                jobs.append(job)
        if jobs:
            self.wake()
            if reporter is not None and request.pr_number is not None:
                await reporter.refresh_summary(request.repo, request.pr_number)
        return jobs

    async def cancel(self, repo: str, pr_number: int, *, keep_sha: str | None = None) -> list[Job]:
        """Cancel the PR's runs for other SHAs (all of them when keep_sha is None).

        Queued runs end here; running ones are flagged and their worker stops them (and their
        container) within seconds, then completes their check runs as cancelled.
        """
        async with self.locks(repo, pr_number):
            affected = await asyncio.to_thread(self.store.request_cancel, repo, pr_number, keep_sha=keep_sha)
        for job in affected:
            log.info("run cancelled", run_id=job.id, state=job.state.value, head_sha=job.head_sha)
            if self.reporter is not None and job.state == RunState.CANCELLED and job.check_runs:
                report = job.report_without_results(
                    RunState.CANCELLED, "superseded by a newer commit before it started"
                )
                await self.reporter.update_check_runs(repo, job.check_runs, render_check_runs(report))
        return affected
