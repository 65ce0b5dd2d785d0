"""Whatever paritybot creates on GitHub, it finishes: the reconciler.

A job that reaches a final state for any reason (its run ended, it was cancelled, refused, its
executor crashed, a restart or a silent worker stopped it too often) is marked *due* in the same
transaction (``report_due``). :meth:`Reconciler.publish` then completes its check runs and
refreshes the summary, and only then clears the mark; whatever stops it half-way (GitHub down, a
rate limit, a crash) leaves the job due, and the reconciler's next pass sends it again. Sending is
safe to repeat: each check run is found by its ``external_id`` before one is created, an unchanged
one is not sent again, and the summary is one comment found by marker and author.

The reconciler runs at start-up and then every ``interval_s``. Each pass:

1. on one machine, takes back running jobs whose worker stopped answering (no heartbeat for
   ``PARITYBOT_STALLED_AFTER_S``): queued again, or failed once they had ``max_attempts``. With
   several hosts the stalled-job reaper does that instead, at the agents' heartbeat pace
   (:mod:`bot.service.fleet.reaper`), and the reconciler only publishes;
2. publishes every due job;
3. gives every queued or running job the check runs it lacks (a creation that failed).

Publishing a job, whoever does it (the worker at a run's end, or a pass), also completes any check
run of this App on the job's commit that is still open and whose job is over or unknown (an
``external_id`` naming no job it knows).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta

import structlog

from bot.core.kinds import CHECK_KINDS, Reaction
from bot.core.models import RunKind, RunReport, RunState
from bot.core.verdict import Verdict, verdict
from bot.render.check_results import render_check_runs, render_coverage_map_check, render_performance_check
from bot.render.check_runs import abandoned_output, render_in_progress_output, render_queued_output
from bot.service.github import GitHubApp
from bot.service.reporter import GitHubReporter, PrLocking
from bot.service.store.protocol import Store
from bot.service.store.records import Job
from bot.service.supervisor import Supervisor

log = structlog.get_logger(__name__)

TakeBack = Callable[[], tuple[int, int]]
"""Takes back the runs of silent workers: (requeued, failed). One machine: the store's ``recover``
with ``stale_after_s``; several hosts have none here, the reaper does it (bot.service.fleet.reaper)."""

REACTION_PASSED = Reaction.PASSED
REACTION_FAILED = Reaction.FAILED


def _good(report: RunReport) -> bool:
    return report.state == RunState.SUCCEEDED and verdict(report) in (
        Verdict.PASS,
        Verdict.FLAKY_ONLY,
        Verdict.NOTHING_TO_CHECK,
    )


class Reconciler:
    def __init__(
        self,
        store: Store,
        app: GitHubApp | None,
        locks: PrLocking,
        *,
        interval_s: float = 60.0,
        take_back: TakeBack | None = None,
        reporter_factory: Callable[[Job], Awaitable[GitHubReporter | None]] | None = None,
        log_retention: timedelta | None = None,
        public_url: str | None = None,
    ):
        self.store = store
        self.app = app
        self._reporter_factory = reporter_factory
        self.locks = locks
        self.interval_s = interval_s
        self.take_back = take_back
        self.log_retention = log_retention
        self.public_url = public_url
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self.passes = 0  # completed passes, for tests and logs

    async def reporter(self, job: Job) -> GitHubReporter | None:
        """A reporter in the job's installation; None when the job reports to no PR, nor records
        the default branch's coverage map."""
        reports = job.pr_number is not None or job.request.kind == RunKind.BASELINE
        if self._reporter_factory is not None:
            return await self._reporter_factory(job) if reports else None
        installation = job.request.installation_id
        if self.app is None or installation is None or not reports:
            return None
        gh = await self.app.client(installation)
        return GitHubReporter(
            gh,
            self.store,
            self.locks,
            await self.app.bot_login(),
            app_id=self.app.app_id,
            retry=self.app.retry,
            public_url=self.public_url,
        )

    # --- one job --------------------------------------------------------------------------------

    async def publish(self, job_id: str) -> bool:
        """Show a final job on GitHub: every check run completed, the summary refreshed, the
        command's reaction, no stray left open on its commit. True once GitHub has it all (the
        job is then no longer due)."""
        job = await asyncio.to_thread(self.store.get_job, job_id)
        if job is None or not job.report_due:
            return True
        try:
            reporter = await self.reporter(job)
            if reporter is not None and job.pr_number is not None:
                report = job.final_report(await asyncio.to_thread(self.store.report, job.id))
                # The performance check run exists only for a run that compared benchmarks.
                performance = render_performance_check(report)
                outputs = [*render_check_runs(report), *([performance] if performance else [])]
                await reporter.sync_check_runs(job, outputs)
                await reporter.refresh_summary(job.repo, job.pr_number)
                if job.request.comment_id is not None and job.state != RunState.CANCELLED:
                    content = REACTION_PASSED if _good(report) else REACTION_FAILED
                    await reporter.react(job.repo, job.request.comment_id, content)
                await self.close_strays(job, reporter)
            elif reporter is not None and job.request.kind == RunKind.BASELINE:
                report = job.final_report(await asyncio.to_thread(self.store.report, job.id))
                await reporter.sync_check_runs(job, [render_coverage_map_check(report)])
        except Exception:
            log.exception("publishing a finished run failed; the reconciler tries again", run_id=job.id)
            return False
        await asyncio.to_thread(self.store.mark_reported, job.id)
        log.info("run published", run_id=job.id, state=job.state.value)
        return True

    async def ensure_check_runs(self, job: Job) -> None:
        """An active job's missing check runs, created as it stands (queued or in progress)."""
        reporter = await self.reporter(job)
        if reporter is None:
            return
        if job.state == RunState.QUEUED:
            position = await asyncio.to_thread(self.store.queue_position, job.id)
            outputs = render_queued_output(job.environment, queue_position=position)
        else:
            outputs = render_in_progress_output(job.environment)
        missing = [o for o in outputs if o.kind.value not in job.check_runs]
        await reporter.sync_check_runs(job, missing, while_state=job.state)

    async def close_strays(self, job: Job, reporter: GitHubReporter) -> int:
        """Complete this App's open check runs on the job's commit whose job is over or unknown:
        a check run must never stay open because paritybot lost track of it."""
        closed = 0
        for run in await reporter.list_open_check_runs(job.repo, job.head_sha):
            owner_id, _, kind = str(run.get("external_id") or "").partition("/")
            owner = await asyncio.to_thread(self.store.get_job, owner_id) if kind else None
            if owner is not None and (owner.state in (RunState.QUEUED, RunState.RUNNING) or owner.report_due):
                continue  # its job is alive, or due: the job completes it
            await reporter.complete_check_run(job.repo, int(run["id"]), abandoned_output(str(run["name"])))
            log.warning(
                "stray check run completed", check_run_id=run["id"], external_id=run.get("external_id")
            )
            closed += 1
        return closed

    # --- the periodic pass ----------------------------------------------------------------------

    async def run_once(self) -> None:
        if self.take_back is not None:
            requeued, failed = await asyncio.to_thread(self.take_back)
            if requeued or failed:
                log.warning("runs of silent workers taken back", requeued=requeued, failed=failed)
        for job in await asyncio.to_thread(self.store.jobs_due_for_report):
            await self.publish(job.id)
        for state in (RunState.QUEUED, RunState.RUNNING):
            for job in await asyncio.to_thread(self.store.jobs_in_state, state):
                if job.pr_number is not None and len(job.check_runs) < len(CHECK_KINDS):
                    try:
                        await self.ensure_check_runs(job)
                    except Exception:
                        log.exception("creating a run's check runs failed; trying again later", run_id=job.id)
        if self.log_retention is not None:
            before = datetime.now(UTC) - self.log_retention
            purged = await asyncio.to_thread(self.store.purge_logs, before)
            if purged:
                log.info("run logs past their retention removed", events=purged)
        self.passes += 1

    def wake(self) -> None:
        self._wake.set()

    def start(self, supervisor: Supervisor) -> None:
        self._task = supervisor.keep("reconciler", self._loop)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _loop(self) -> None:
        while True:
            self._wake.clear()
            try:
                await self.run_once()
            except Exception:
                log.exception("reconciler pass failed")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.interval_s)
