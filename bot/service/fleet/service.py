"""What `serve` does for the agents when the store is PostgreSQL: it mints their clone tokens, tells
GitHub what they recorded (a run started, a result), and runs the stalled-job reaper.

Agents and replicas wake each other with NOTIFY (``paritybot_jobs``, ``paritybot_tokens``); each
loop also looks every second, so a missed notification (a dropped connection) costs at most that.
Any number of replicas may run these loops: a job's report and a token request are taken under
an advisory lock by one replica at a time, and a report is marked sent only after it was sent.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import psycopg
import structlog

from bot.core.models import RunState
from bot.service.executor import RunReporting
from bot.service.fleet.locks import AdvisoryPrLocks
from bot.service.fleet.reaper import reap_forever
from bot.service.fleet.sealing import SealError, seal
from bot.service.github import GitHubApp
from bot.service.store.postgres_fleet import JOBS_CHANNEL, TOKENS_CHANNEL, FleetStore, TokenRequest
from bot.service.store.records import Job

log = structlog.get_logger(__name__)

POLL_S = 1.0


@dataclass
class FleetLoops:
    store: FleetStore
    app: GitHubApp
    reporting: RunReporting
    locks: AdvisoryPrLocks
    database_url: str
    heartbeat_s: float
    stalled_after_s: float
    max_attempts: int
    _jobs: asyncio.Event = field(default_factory=asyncio.Event)
    _tokens: asyncio.Event = field(default_factory=asyncio.Event)
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)

    def start(self) -> None:
        self._tasks = [
            asyncio.create_task(self._supervised("listener", self._listen), name="fleet listener"),
            asyncio.create_task(self._supervised("reports", self._report_loop), name="fleet reports"),
            asyncio.create_task(self._supervised("tokens", self._token_loop), name="fleet tokens"),
            asyncio.create_task(
                reap_forever(self.store, self.heartbeat_s, self.stalled_after_s, self.max_attempts),
                name="reaper",
            ),
        ]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    @staticmethod
    async def _supervised(name: str, loop: Callable[[], Awaitable[None]]) -> None:
        while True:
            try:
                await loop()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("fleet loop failed; starting it again", loop=name)
                await asyncio.sleep(POLL_S)

    async def _listen(self) -> None:
        async with await psycopg.AsyncConnection.connect(self.database_url, autocommit=True) as conn:
            await conn.execute(f"LISTEN {JOBS_CHANNEL}")
            await conn.execute(f"LISTEN {TOKENS_CHANNEL}")
            self._jobs.set()
            self._tokens.set()
            async for note in conn.notifies():
                (self._tokens if note.channel == TOKENS_CHANNEL else self._jobs).set()

    async def _wait(self, event: asyncio.Event) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(event.wait(), POLL_S)
        event.clear()

    # --- reports --------------------------------------------------------------------------------

    async def _report_loop(self) -> None:
        while True:
            await self._wait(self._jobs)
            for job in await asyncio.to_thread(self.store.jobs_to_report):
                await self.report(job)

    async def report(self, job: Job) -> None:
        async with self.locks.try_hold(f"paritybot:report:{job.id}") as held:
            if not held:
                return  # another replica is on it
            fresh = await asyncio.to_thread(self.store.get_job, job.id)
            if fresh is None:
                return
            state = fresh.state
            structlog.contextvars.bind_contextvars(run_id=fresh.id, repo=fresh.repo, pr=fresh.pr_number)
            try:
                if state == RunState.RUNNING:
                    await self.reporting.started(fresh)
                elif state == RunState.QUEUED:
                    await self._refresh(fresh)
                else:
                    report = await asyncio.to_thread(self.store.report, fresh.id)
                    if report is None:
                        report = fresh.report_without_results(
                            state, fresh.error or "the run ended without results"
                        )
                    await self.reporting.finished(fresh, report)
                await asyncio.to_thread(self.store.mark_reported, fresh.id, state)
            finally:
                structlog.contextvars.unbind_contextvars("run_id", "repo", "pr")

    async def _refresh(self, job: Job) -> None:
        reporter = await self.reporting.reporter(job)
        if reporter is not None and job.pr_number is not None:
            await reporter.refresh_summary(job.repo, job.pr_number)

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
