"""What `serve` does for the agents when the store is PostgreSQL: it mints their clone tokens, runs
the stalled-job reaper, watches for a silent replica's deliveries to take over, and LISTENs for
what agents and other replicas write.

Agents write every change of a run to the store (start, results so far, end, requeue) with a
NOTIFY on ``paritybot_jobs`` whose payload is the run's id; this replica's publisher
(:mod:`bot.service.publisher`) is woken with it and tells GitHub, as on one machine. The
dispatchers are woken by ``paritybot_deliveries`` (:mod:`bot.service.fleet.deliveries`), the token
loop by ``paritybot_tokens``. Each loop also looks every second, so a missed notification (a
dropped connection) costs at most that. Any number of replicas may run these loops: a run is
published and a token request answered under an advisory lock by one replica at a time.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field
from functools import partial

import structlog

from bot.service.fleet.deliveries import watch_takeovers
from bot.service.fleet.locks import AdvisoryPrLocks
from bot.service.fleet.notify import listen
from bot.service.fleet.reaper import reap_forever
from bot.service.fleet.sealing import SealError, seal
from bot.service.github import GitHubApp
from bot.service.publisher.publisher import Publisher
from bot.service.store.postgres import DELIVERIES_CHANNEL, JOBS_CHANNEL
from bot.service.store.postgres_fleet import TOKENS_CHANNEL, FleetStore, TokenRequest
from bot.service.supervisor import Supervisor

log = structlog.get_logger(__name__)

POLL_S = 1.0


@dataclass
class FleetLoops:
    store: FleetStore
    app: GitHubApp
    publisher: Publisher
    locks: AdvisoryPrLocks
    database_url: str
    heartbeat_s: float
    stalled_after_s: float
    max_attempts: int
    # Set by every replica's new delivery or takeover (NOTIFY): the dispatcher waits on it.
    deliveries: asyncio.Event = field(default_factory=asyncio.Event)
    _tokens: asyncio.Event = field(default_factory=asyncio.Event)
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)

    def start(self, supervisor: Supervisor) -> None:
        self._tasks = [
            supervisor.keep("fleet listener", self._listen),
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
            {TOKENS_CHANNEL: self._tokens, DELIVERIES_CHANNEL: self.deliveries},
            heard={JOBS_CHANNEL: self._run_changed},
        )

    def _run_changed(self, run_id: str) -> None:
        self.publisher.wake(run_id or None)

    async def _wait(self, event: asyncio.Event) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(event.wait(), POLL_S)
        event.clear()

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
