"""Enqueueing and cancelling runs, with their GitHub side: queued check runs and the summary.

A job is committed before its check runs are created (tagged with an ``external_id`` naming the
job and the check), so no check run exists that the store does not know to finish.
One scheduler is made per delivery, with the reporter of the delivery's installation (None when
there is none): handlers only say what to run (``handlers.context.RunScheduler``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

import structlog

from bot.core.config import Environment, RepoConfig
from bot.core.models import RunRequest, RunState
from bot.render.check_runs import render_queued_output
from bot.service.reconciler import Reconciler
from bot.service.reporter import GitHubReporter, PrLocking
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
        locks: PrLocking,
        reporter: GitHubReporter | None,
        wake: Callable[[], None] = lambda: None,
        *,
        reconciler: Reconciler | None = None,
    ):
        self.store = store
        self.locks = locks
        self.reporter = reporter
        self.wake = wake
        self.reconciler = reconciler

    async def schedule(
        self,
        request: RunRequest,
        config: RepoConfig,
        environments: Sequence[Environment],
        trigger_key: str,
    ) -> list[Job]:
        """Queue one run per environment; a PR's runs get their check runs, queued, at once.

        The job is committed first: it is the record of what must appear on GitHub. Should
        creating its check runs fail, the job still runs, and the reconciler (and the run's start)
        creates the missing ones, looking up any a lost answer hid.
        """
        reporter = self.reporter if request.pr_number is not None else None
        jobs: list[Job] = []
        # Under the PR's lock, which the worker takes before it reads a job's check runs: a run
        # starts once its check runs are created "queued" (or their creation has failed).
        async with self.locks(request.repo, request.pr_number or 0):
            for env in environments:
                req = request.model_copy(update={"environment": env.name, "config": config})
                job = await asyncio.to_thread(
                    self.store.enqueue, req, env.name, dedupe_key(request, env.name, trigger_key), env.queue
                )
                if job is None:
                    log.info("run already requested", environment=env.name, trigger=trigger_key)
                    continue
                log.info("run queued", run_id=job.id, environment=env.name, trigger=trigger_key)
                jobs.append(job)
            if reporter is not None:
                await self._announce(reporter, jobs)
        if jobs:
            self.wake()
            if reporter is not None and request.pr_number is not None:
                try:
                    await reporter.refresh_summary(request.repo, request.pr_number)
                except Exception:
                    log.exception("refreshing the summary failed; the next update or the reconciler does it")
                    self._reconcile_later()
        return jobs

    async def _announce(self, reporter: GitHubReporter, jobs: list[Job]) -> None:
        for job in jobs:
            try:
                position = await asyncio.to_thread(self.store.queue_position, job.id)
                outputs = render_queued_output(job.environment, queue_position=position)
                await reporter.sync_check_runs(job, outputs)
            except Exception:
                log.exception(
                    "creating a run's check runs failed; the reconciler creates them", run_id=job.id
                )
                self._reconcile_later()

    def _reconcile_later(self) -> None:
        if self.reconciler is not None:
            self.reconciler.wake()

    async def cancel(self, repo: str, pr_number: int, *, keep_sha: str | None = None) -> list[Job]:
        """Cancel the PR's runs for other SHAs (all of them when keep_sha is None).

        Queued runs end here (published as cancelled); running ones are flagged and their worker
        stops them (and their container) within seconds, then publishes them as cancelled.
        """
        async with self.locks(repo, pr_number):
            affected = await asyncio.to_thread(self.store.request_cancel, repo, pr_number, keep_sha=keep_sha)
        for job in affected:
            log.info("run cancelled", run_id=job.id, state=job.state.value, head_sha=job.head_sha)
            if job.state == RunState.CANCELLED and self.reconciler is not None:
                await self.reconciler.publish(job.id)
        return affected
