"""The one publisher: the only thing that tells GitHub a run's state (as Prow's crier is).

Whatever changes a run — the scheduler queueing or cancelling it, a worker or an agent starting it,
its pipeline's early results, its end, the reaper or a restart taking it back — writes the store
first and wakes the publisher with the run's id (one machine: :meth:`Publisher.wake` in-process;
several hosts: the NOTIFY the write sends at commit, which every replica LISTENs to). The publisher
then makes GitHub show what the store holds of the run, and nothing else:

- queued: its check runs queued with its place in the queue, the summary;
- running: its check runs in progress (the attempt), those of checks with early results
  completed, the summary; the PRs waiting behind it moved up a place (their summaries);
- over (``report_due``): what the run leaves for later runs (:mod:`bot.service.run_memory`), every
  check run completed, the summary, the command's reaction, this App's strays on its commit
  completed; then the run is no longer due.

What it sends is a function of the stored run (:mod:`bot.service.publisher.outputs`), and the
reporter sends a check run or the summary only when it differs from what GitHub was last sent,
so publishing twice changes nothing on GitHub. What GitHub was told is recorded after it was told
(``reported_state``, ``progress_published``, ``report_due``): a publish that GitHub or a crash
interrupted is found again (``jobs_to_announce``) by the next wake, pass or start, and completed.
A run is published by one publisher at a time (a lock per run in this process; with several
replicas, an advisory lock), so its updates reach GitHub in order.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager

import structlog

from bot.core.kinds import CHECK_KINDS
from bot.core.models import RunKind, RunState
from bot.render.check_results import render_coverage_map_check
from bot.render.check_runs import abandoned_output
from bot.service.github import GitHubApp
from bot.service.locks import PrLocking
from bot.service.publisher.changes import ChangeFeed
from bot.service.publisher.github import GitHubReporter
from bot.service.publisher.outputs import final_outputs, final_reaction, queued_outputs, running_outputs
from bot.service.run_memory import remember
from bot.service.store.protocol import Store
from bot.service.store.records import Job
from bot.service.supervisor import Supervisor, stop_kept

log = structlog.get_logger(__name__)

QUEUE_REFRESH_LIMIT = 10  # waiting PRs whose summaries are refreshed when the queue moves
POLL_S = 1.0  # the publisher also looks for what is left to publish this often
BACKOFF_MAX_S = 60.0  # a run GitHub keeps refusing is tried again at most this far apart

ReporterFactory = Callable[[Job], Awaitable[GitHubReporter | None]]
Exclusive = Callable[[str], AbstractAsyncContextManager[bool]]
"""Holds a run for publishing if no other replica does; yields whether it is held."""


@contextlib.asynccontextmanager
async def _alone(job_id: str) -> AsyncIterator[bool]:
    yield True  # one machine: the lock per run in this process is enough


class Publisher:
    def __init__(
        self,
        store: Store,
        app: GitHubApp | None,
        locks: PrLocking,
        *,
        reporter_factory: ReporterFactory | None = None,
        exclusive: Exclusive | None = None,
        poll_s: float = POLL_S,
        public_url: str | None = None,
    ):
        self.store = store
        self.app = app
        self.locks = locks
        self.poll_s = poll_s
        self.public_url = public_url  # the run pages' address: check runs and the summary link them
        self.feed = ChangeFeed(store)
        self._reporter_factory = reporter_factory
        self._exclusive = exclusive or _alone
        self._running: dict[str, tuple[asyncio.Lock, int]] = {}  # per run: its lock, its users
        self._woken: set[str] = set()
        self._wake = asyncio.Event()
        self._backoff: dict[str, tuple[int, float]] = {}  # run → (failures, not before)
        self._task: asyncio.Task[None] | None = None
        self.on_published: Callable[[Job], None] = lambda job: None  # the metrics' queue wait and duration

    # --- what wakes it, and who follows ---------------------------------------------------------

    def wake(self, run_id: str | None = None) -> None:
        """A run's stored state changed (None: some runs', found in the store): publish it soon.
        Never waits for GitHub; safe from any task of the loop."""
        if run_id:
            self._woken.add(run_id)
            self._backoff.pop(run_id, None)
            self.feed.changed(run_id)
        self._wake.set()

    def changes(self, run_id: str) -> AsyncIterator[Job]:
        """The run as stored, now and at each change (see :mod:`bot.service.publisher.changes`)."""
        return self.feed.follow(run_id)

    # --- publishing -------------------------------------------------------------------------------

    async def reporter(self, job: Job) -> GitHubReporter | None:
        """A reporter in the job's installation; None when the job reports to no PR, nor records
        the default branch's coverage map."""
        reports = job.pr_number is not None or job.request.kind == RunKind.BASELINE
        if self._reporter_factory is not None:
            return await self._reporter_factory(job) if reports else None
        installation = job.request.installation_id
        if self.app is None or installation is None or not reports:
            return None
        return await reporter_for(self.app, self.store, self.locks, installation, public_url=self.public_url)

    async def publish(self, run_id: str) -> bool:
        """Make GitHub show what the store holds of the run, now. True once it does; False when
        it could not (logged; the run stays to publish, and a later pass completes it) or another
        replica is publishing it."""
        async with self._alone_on(run_id), self._exclusive(run_id) as held:
            if not held:
                return False
            structlog.contextvars.bind_contextvars(run_id=run_id)
            try:
                await self._publish(run_id)
            except Exception:
                log.exception("publishing a run failed; the next pass sends it again")
                failures = self._backoff.get(run_id, (0, 0.0))[0] + 1
                self._backoff[run_id] = (failures, time.monotonic() + min(2.0**failures, BACKOFF_MAX_S))
                return False
            finally:
                structlog.contextvars.unbind_contextvars("run_id")
        self._backoff.pop(run_id, None)
        self.feed.changed(run_id)
        return True

    async def publish_pending(self) -> int:
        """Publish every run with something left to tell GitHub (woken, or found in the store);
        returns how many were published."""
        self._wake.clear()  # before taking the woken: a wake from now on is seen by the next pass
        woken, self._woken = self._woken, set()
        pending = [job.id for job in await asyncio.to_thread(self.store.jobs_to_announce)]
        due = [job.id for job in await asyncio.to_thread(self.store.jobs_due_for_report)]
        now = time.monotonic()
        published = 0
        for run_id in dict.fromkeys([*woken, *pending, *due]):
            if run_id not in woken and self._backoff.get(run_id, (0, 0.0))[1] > now:
                continue
            published += await self.publish(run_id)
        return published

    async def publish_missing(self) -> None:
        """Active runs that lack check runs (their creation failed) get them, as they stand."""
        for state in (RunState.QUEUED, RunState.RUNNING):
            for job in await asyncio.to_thread(self.store.jobs_in_state, state):
                if job.pr_number is not None and len(job.check_runs) < len(CHECK_KINDS):
                    await self.publish(job.id)

    @contextlib.asynccontextmanager
    async def _alone_on(self, run_id: str) -> AsyncIterator[None]:
        """One publish of a run at a time in this process; the lock is dropped with its last user."""
        lock, users = self._running.get(run_id, (asyncio.Lock(), 0))
        self._running[run_id] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._running[run_id]
            if users == 1:
                del self._running[run_id]
            else:
                self._running[run_id] = (lock, users - 1)

    async def _publish(self, run_id: str) -> None:
        job = await asyncio.to_thread(self.store.get_job, run_id)
        if job is None:
            return
        # Read before GitHub is told: a change written meanwhile stays to publish.
        told, unpublished = await asyncio.to_thread(self.store.told, job.id)
        reporter = await self.reporter(job)
        if job.report_due:
            await self._ended(reporter, job)
        elif reporter is not None and job.pr_number is not None and job.state == RunState.QUEUED:
            position = await asyncio.to_thread(self.store.queue_position, job.id)
            await reporter.sync_check_runs(job, queued_outputs(job, position), while_state=RunState.QUEUED)
            await reporter.refresh_summary(job.repo, job.pr_number)
        elif reporter is not None and job.pr_number is not None and job.state == RunState.RUNNING:
            so_far = await asyncio.to_thread(self.store.report, job.id)
            await reporter.sync_check_runs(job, running_outputs(job, so_far), while_state=RunState.RUNNING)
            await reporter.refresh_summary(job.repo, job.pr_number)
        if told != job.state and RunState.QUEUED in (told, job.state):
            await self._queue_moved(job)
        await asyncio.to_thread(self.store.mark_announced, job.id, job.state, unpublished)

    async def _ended(self, reporter: GitHubReporter | None, job: Job) -> None:
        """A final run: what it leaves for later runs, then GitHub shows its end; only then is it
        no longer due."""
        report = job.final_report(await asyncio.to_thread(self.store.report, job.id))
        await remember(self.store, self.locks, job, report)
        if reporter is not None and job.pr_number is not None:
            await reporter.sync_check_runs(job, final_outputs(report))
            await reporter.refresh_summary(job.repo, job.pr_number)
            reaction = final_reaction(job, report)
            if reaction is not None and job.request.comment_id is not None:
                await reporter.react(job.repo, job.request.comment_id, reaction)
            await self.close_strays(job, reporter)
        elif reporter is not None and job.request.kind == RunKind.BASELINE:
            await reporter.sync_check_runs(job, [render_coverage_map_check(report)])
        await asyncio.to_thread(self.store.mark_reported, job.id)
        log.info("run published", state=job.state.value)
        self.on_published(job)

    async def _queue_moved(self, moved: Job) -> None:
        """A run left its queue (started, cancelled) or came back to its front (taken back): the
        PRs waiting in that queue show their new place. Only the first few, so a long queue
        costs a bounded number of API calls per move; the rest catch up as the queue moves. A
        failure costs only that refresh."""
        queued = await asyncio.to_thread(self.store.jobs_in_state, RunState.QUEUED)
        waiting: dict[tuple[str, int], Job] = {}
        for other in queued:
            if other.queue == moved.queue and other.pr_number is not None and other.request.installation_id:
                waiting.setdefault((other.repo, other.pr_number), other)
        for (repo, number), other in list(waiting.items())[:QUEUE_REFRESH_LIMIT]:
            try:
                reporter = await self.reporter(other)
                if reporter is not None:
                    await reporter.refresh_summary(repo, number)
            except Exception:
                log.exception("a waiting PR's place in the queue not refreshed", pr=number)

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

    # --- the loop ---------------------------------------------------------------------------------

    def start(self, supervisor: Supervisor) -> None:
        self._task = supervisor.keep("publisher", self._loop)

    async def stop(self) -> None:
        await stop_kept(self._task)
        self._task = None

    async def _loop(self) -> None:
        while True:
            await self.publish_pending()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.poll_s)


async def reporter_for(
    app: GitHubApp, store: Store, locks: PrLocking, installation: int, *, public_url: str | None = None
) -> GitHubReporter:
    """The write side in one installation (the App's client for it); with ``public_url``, check
    runs and the summary link each run's page."""
    gh = await app.client(installation)
    return GitHubReporter(
        gh, store, locks, await app.bot_login(), app_id=app.app_id, retry=app.retry, public_url=public_url
    )
