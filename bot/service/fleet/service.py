"""What `serve` does for the agents when the store is PostgreSQL: it mints their clone tokens, tells
GitHub what they recorded (a run started, was queued again, ended), and runs the stalled-job reaper.

A run's end is published by the reconciler (:meth:`bot.service.reconciler.Reconciler.publish`):
the agent's write of the final state marked the job ``report_due`` in the same transaction, and
this loop only publishes it at once rather than at the reconciler's next pass (which sends it
again should GitHub fail now). A start or a requeue is told here alone (``reported_state``).

Agents and replicas wake each other with NOTIFY (``paritybot_jobs``, ``paritybot_tokens``; the
dispatchers with ``paritybot_deliveries``, :mod:`bot.service.fleet.deliveries`); each
loop also looks every second, so a missed notification (a dropped connection) costs at most that.
Any number of replicas may run these loops: a job's state change and a token request are taken
under an advisory lock by one replica at a time, and a change is marked told only after it was.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field
from functools import partial

import structlog

from bot.core.models import RunState
from bot.service.executor import refresh_waiting, remember, report_progress, report_started
from bot.service.fleet.deliveries import watch_takeovers
from bot.service.fleet.locks import AdvisoryPrLocks
from bot.service.fleet.notify import listen
from bot.service.fleet.reaper import reap_forever
from bot.service.fleet.sealing import SealError, seal
from bot.service.github import GitHubApp
from bot.service.reconciler import Reconciler
from bot.service.store.postgres import DELIVERIES_CHANNEL, JOBS_CHANNEL
from bot.service.store.postgres_fleet import TOKENS_CHANNEL, FleetStore, TokenRequest
from bot.service.store.records import Job
from bot.service.supervisor import Supervisor

log = structlog.get_logger(__name__)

POLL_S = 1.0


@dataclass
class FleetLoops:
    store: FleetStore
    app: GitHubApp
    reconciler: Reconciler
    locks: AdvisoryPrLocks
    database_url: str
    heartbeat_s: float
    stalled_after_s: float
    max_attempts: int
    # Set by every replica's new delivery or takeover (NOTIFY): the dispatcher waits on it.
    deliveries: asyncio.Event = field(default_factory=asyncio.Event)
    _jobs: asyncio.Event = field(default_factory=asyncio.Event)
    _tokens: asyncio.Event = field(default_factory=asyncio.Event)
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)

    def start(self, supervisor: Supervisor) -> None:
        self._tasks = [
            supervisor.keep("fleet listener", self._listen),
            supervisor.keep("fleet reports", self._report_loop),
            supervisor.keep("fleet tokens", self._token_loop),
            supervisor.keep("delivery takeovers", partial(watch_takeovers, self.store, self.heartbeat_s)),
            supervisor.keep(
                "reaper",
                partial(reap_forever, self.store, self.heartbeat_s, self.stalled_after_s, self.max_attempts),
            ),
        ]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _listen(self) -> None:
        await listen(
            self.database_url,
            {JOBS_CHANNEL: self._jobs, TOKENS_CHANNEL: self._tokens, DELIVERIES_CHANNEL: self.deliveries},
        )

    async def _wait(self, event: asyncio.Event) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(event.wait(), POLL_S)
        event.clear()

    # --- reports --------------------------------------------------------------------------------

    async def _report_loop(self) -> None:
        while True:
            await self._wait(self._jobs)
            for job in await asyncio.to_thread(self.store.jobs_to_announce):
                try:
                    await self.report(job)
                except Exception:
                    log.exception("telling GitHub about a run failed; trying again", run_id=job.id)

    async def report(self, job: Job) -> None:
        async with self.locks.try_hold(f"paritybot:report:{job.id}") as held:
            if not held:
                return  # another replica is on it
            fresh = await asyncio.to_thread(self.store.get_job, job.id)
            if fresh is None:
                return
            state = fresh.state
            # Read before GitHub is told: a progress write that comes meanwhile stays to publish.
            told, unpublished = await asyncio.to_thread(self.store.told, fresh.id)
            structlog.contextvars.bind_contextvars(run_id=fresh.id, repo=fresh.repo, pr=fresh.pr_number)
            try:
                if state in (RunState.QUEUED, RunState.RUNNING):
                    reporter = await self.reconciler.reporter(fresh)
                    if reporter is not None and fresh.pr_number is not None:
                        if state == RunState.RUNNING:
                            if told != RunState.RUNNING:
                                await report_started(reporter, fresh)
                                await self._moved_up(fresh)
                            progress = await asyncio.to_thread(self.store.report, fresh.id)
                            if unpublished and progress is not None:
                                # Early results: what the agent finished while the rest runs.
                                await report_progress(reporter, fresh, progress)
                        else:  # queued again after its agent was lost
                            await reporter.refresh_summary(fresh.repo, fresh.pr_number)
                else:
                    report = fresh.final_report(await asyncio.to_thread(self.store.report, fresh.id))
                    await remember(self.store, self.locks, fresh, report)
                    await self.reconciler.publish(fresh.id)  # still due if GitHub failed: its next pass
                await asyncio.to_thread(self.store.mark_announced, fresh.id, state, unpublished)
            finally:
                structlog.contextvars.unbind_contextvars("run_id", "repo", "pr")

    async def _moved_up(self, started: Job) -> None:
        """The PRs waiting behind a run an agent started: their summaries show their new place, as
        on one machine. A failure costs only that refresh; the next start or change sends it."""
        try:
            await refresh_waiting(self.store, self.reconciler, started)
        except Exception:
            log.exception("queue positions not refreshed")

    # --- clone tokens ---------------------------------------------------------------------------

    async def _token_loop(self) -> None:
        while True:
            await self._wait(self._tokens)
            for request in await asyncio.to_thread(self.store.token_requests):
                await self.mint(request)

    async def mint(self, request: TokenRequest) -> None:
        async with self.locks.try_hold(f"paritybot:token:{request.queue_job_id}") as held:
            if not held:
                return
            job = request.job
            installation = job.request.installation_id
            try:
                if installation is None:
                    raise ValueError("the run has no installation")
                token, expires = await self.app.repository_token(installation, job.repo)
                sealed = seal(request.public_key, token)
            except (SealError, ValueError) as exc:
                await asyncio.to_thread(self.store.answer_token, request.queue_job_id, None, None, str(exc))
                return
            except Exception:
                # GitHub's hiccups pass: the request stays, and the next pass asks again (the agent
                # gives up after a minute, failing the run with the reason).
                log.exception("clone token not issued yet", run_id=job.id)
                return
            await asyncio.to_thread(self.store.answer_token, request.queue_job_id, sealed, expires, None)
