"""`paritybot agent --labels cuda12.1,h100`: one per GPU host (or GPU), running the jobs of its labels.

procrastinate's worker fetches the jobs (LISTEN/NOTIFY on the label queues; ``lock`` keeps one
running job per PR and environment) and cancels a job's asyncio task when the service aborts it.
Around that, the agent:

- records itself (host, labels, GPU models, a probe of the host) in paritybot's ``agents`` table;
- writes one heartbeat per interval (procrastinate's and its own, in one transaction). When it
  cannot write one for longer than the reaper's threshold less a margin, or learns that the reaper
  has already given its jobs away, it is *fenced*: it stops its runs (their containers) and exits,
  for its supervisor to start it afresh. Its results could not be written anyway: every write names
  the attempt and is refused unless this agent still owns it;
- asks the service for a clone token per job (sealed to a key it keeps in memory) and never holds
  the App's private key; it writes results to the database (the results so far too, as each check
  finishes), and the service posts them;
- is an instance in the store (:mod:`bot.service.instance`), beaten with its heartbeat: what its
  runs start on the engine carries it, and every ``stalled_after_s`` it removes what dead
  neighbours on the same engine left (never a live one's);
- runs the stalled-job reaper too (several at once are safe), so runs come back when any agent or
  service replica is alive.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import structlog
from procrastinate import App, JobContext, PsycopgConnector
from procrastinate.job_context import AbortReason
from procrastinate.worker import Worker

from bot.core.models import EnvFacts, RunReport, RunState
from bot.service.fleet.reaper import reap_forever
from bot.service.fleet.sealing import Opener, SealError
from bot.service.instance import Instance
from bot.service.store.postgres import TASK_NAME
from bot.service.store.postgres_fleet import FleetStore
from bot.service.store.records import Job

log = structlog.get_logger(__name__)

Progress = Callable[[RunReport], Awaitable[None]]
JobRunner = Callable[[Job, asyncio.Event, str | None, EnvFacts | None, Progress], Awaitable[RunReport]]
"""Runs one job: (job, cancel, clone token, CI reference, where its results so far go) → its report.
The pipeline, in production."""

FENCED_EXIT = 75  # EX_TEMPFAIL: the supervisor starts the agent again
TOKEN_WAIT_S = 60.0


@dataclass
class AgentConfig:
    labels: list[str]
    host: str = field(default_factory=socket.gethostname)
    name: str = ""
    heartbeat_s: float = 10.0
    stalled_after_s: float = 60.0
    max_attempts: int = 2
    concurrency: int = 1  # jobs at once (PARITYBOT_WORKERS); GPU leases decide which may start

    @property
    def fence_after_s(self) -> float:
        """Stop running once this long without a heartbeat: before the reaper may give the jobs away
        (at ``stalled_after_s``), with a margin of two heartbeats for the stop itself."""
        return max(self.heartbeat_s, self.stalled_after_s - 2 * self.heartbeat_s)


class Agent:
    def __init__(
        self,
        config: AgentConfig,
        store: FleetStore,
        run_job: JobRunner,
        database_url: str,
        instance: Instance,
    ):
        self.config = config
        self.instance = instance
        self.store = store
        self.run_job = run_job
        self.database_url = database_url
        self.opener = Opener()
        self.worker_id: int | None = None
        self._last_beat = time.monotonic()
        self._running: dict[int, asyncio.Event] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._fenced = False

    # --- procrastinate's side -------------------------------------------------------------------

    def procrastinate_app(self) -> App:
        app = App(connector=PsycopgConnector(conninfo=self.database_url, min_size=1, max_size=4))

        @app.task(name=TASK_NAME, pass_context=True)
        async def run(context: JobContext, job_id: str) -> None:
            await self.task(context, job_id)

        return app

    async def run(self) -> None:
        app = self.procrastinate_app()
        async with app.open_async():
            worker = _AgentWorker(
                self,
                app=app,
                queues=self.config.labels,
                name=self.config.name or self.config.host,
                concurrency=self.config.concurrency,
                listen_notify=True,
                fetch_job_polling_interval=5,
                abort_job_polling_interval=5,
                shutdown_graceful_timeout=0,
                update_heartbeat_interval=self.config.heartbeat_s,
                stalled_worker_timeout=self.config.stalled_after_s,
            )
            try:
                await worker.run()
            finally:
                if self.worker_id is not None:
                    with contextlib.suppress(Exception):
                        await asyncio.to_thread(self.store.agent_stopped, self.worker_id)
                with contextlib.suppress(Exception):
                    await asyncio.to_thread(self.store.instance_stopped, self.instance.id)

    async def registered(self, worker_id: int) -> None:
        self.worker_id = worker_id
        gpus, probe = await asyncio.to_thread(probe_host)
        await asyncio.to_thread(
            self.store.register_agent,
            worker_id,
            self.config.host,
            self.config.name or self.config.host,
            self.config.labels,
            gpus,
            probe,
        )
        self._last_beat = time.monotonic()
        log.info(
            "agent ready", worker_id=worker_id, labels=self.config.labels, host=self.config.host, gpus=gpus
        )

    def side_tasks(self) -> list[asyncio.Task[Any]]:
        return [
            asyncio.create_task(self.watchdog(), name="fence watchdog"),
            asyncio.create_task(
                reap_forever(
                    self.store, self.config.heartbeat_s, self.config.stalled_after_s, self.config.max_attempts
                ),
                name="reaper",
            ),
            asyncio.create_task(self.instance.sweep_forever(), name="engine sweep"),
        ]

    # --- heartbeat and fencing --------------------------------------------------------------------

    async def heartbeat(self) -> None:
        assert self.worker_id is not None
        # Silence is judged before writing: an agent that comes back from a freeze must not erase
        # it with a fresh heartbeat before its watchdog had a look.
        silent = time.monotonic() - self._last_beat
        if silent > self.config.fence_after_s:
            await self.fence(f"no heartbeat written for {silent:.1f} s")
            return
        try:
            alive = await asyncio.wait_for(
                asyncio.to_thread(self.store.agent_heartbeat, self.worker_id, self.instance.id),
                self.config.heartbeat_s,
            )
        except Exception as exc:
            log.warning("heartbeat not written", error=f"{type(exc).__name__}: {exc}")
            return
        if not alive:
            await self.fence("the reaper gave this agent's runs to others")
            return
        self._last_beat = time.monotonic()

    async def watchdog(self) -> None:
        while True:
            await asyncio.sleep(self.config.heartbeat_s / 4)
            silent = time.monotonic() - self._last_beat
            if silent > self.config.fence_after_s:
                await self.fence(f"no heartbeat written for {silent:.1f} s")

    async def fence(self, why: str) -> None:
        """Stop every run (its container) and exit: this agent can no longer prove it owns them."""
        if self._fenced:
            return
        self._fenced = True
        log.error("agent fenced: stopping its runs and exiting", reason=why, runs=len(self._running))
        for cancel in self._running.values():
            cancel.set()
        if self._tasks:
            await asyncio.wait(self._tasks, timeout=30)
        os._exit(FENCED_EXIT)

    # --- one job ------------------------------------------------------------------------------------

    async def task(self, context: JobContext, job_id: str) -> None:
        queue_job = context.job
        assert queue_job.id is not None and queue_job.worker_id is not None
        qid, worker = queue_job.id, queue_job.worker_id
        job = await asyncio.to_thread(self.store.start_attempt, job_id, qid, worker, self.config.host)
        if job is None:
            log.info("queue job is no longer a current attempt; nothing to run", run_id=job_id, queue_job=qid)
            return
        structlog.contextvars.bind_contextvars(run_id=job.id, repo=job.repo, pr=job.pr_number)
        cancel = asyncio.Event()
        self._running[qid] = cancel
        attempt = asyncio.create_task(self._attempt(job, qid, worker, cancel))
        self._tasks.add(attempt)
        aborted: AbortReason | None = None
        try:
            log.info("run started", environment=job.environment, head_sha=job.head_sha, attempt=job.attempts)
            try:
                report = await asyncio.shield(attempt)
            except asyncio.CancelledError:
                aborted = context.abort_reason() or AbortReason.SHUTDOWN
                cancel.set()
                report = await attempt
            await self._record(job, qid, worker, report, aborted)
        finally:
            self._running.pop(qid, None)
            self._tasks.discard(attempt)
            structlog.contextvars.unbind_contextvars("run_id", "repo", "pr")
        if aborted is not None:
            raise asyncio.CancelledError()

    async def _record(
        self, job: Job, qid: int, worker: int, report: RunReport, aborted: AbortReason | None
    ) -> None:
        if self._fenced:
            log.warning("result discarded: this agent was fenced", state=report.state.value)
            return
        if aborted == AbortReason.SHUTDOWN:
            requeued = await asyncio.to_thread(self.store.requeue_attempt, job.id, qid, worker)
            log.info("agent stopping: run queued again for another agent", requeued=requeued)
            return
        written = await asyncio.to_thread(self.store.finish_attempt, job.id, qid, worker, report)
        if written:
            log.info("run finished", state=report.state.value, error=report.error)
        else:
            log.warning(
                "result discarded: the run is no longer this agent's (taken back or superseded)",
                state=report.state.value,
                queue_job=qid,
            )

    async def _attempt(self, job: Job, qid: int, worker: int, cancel: asyncio.Event) -> RunReport:
        try:
            token = await self._clone_token(job, qid)
        except TokenError as exc:
            return job.report_without_results(RunState.FAILED, f"no clone token: {exc}")
        baseline = await asyncio.to_thread(self.store.baseline, job.repo, job.environment)

        async def progress(report: RunReport) -> None:
            # Into the store (fenced, like every write of the attempt); the service publishes it.
            await asyncio.to_thread(self.store.save_attempt_progress, job.id, qid, worker, report)

        return await self.run_job(job, cancel, token, baseline, progress)

    async def _clone_token(self, job: Job, qid: int) -> str | None:
        """A token for this one repository, read-only, minted by the service for this attempt."""
        if job.request.installation_id is None:
            return None
        await asyncio.to_thread(self.store.request_token, job.id, qid, self.opener.public_pem)
        deadline = time.monotonic() + TOKEN_WAIT_S
        delay = 0.02
        while time.monotonic() < deadline:
            sealed, error = await asyncio.to_thread(self.store.sealed_token, qid)
            if error:
                raise TokenError(error)
            if sealed is not None:
                try:
                    return self.opener.open(sealed)
                except SealError as exc:
                    raise TokenError(str(exc)) from None
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.1)
        raise TokenError(f"no paritybot service answered within {TOKEN_WAIT_S:.0f} s")


class TokenError(Exception):
    """No clone token for this attempt; the message says why."""


class _AgentWorker(Worker):
    """procrastinate's worker, with the agent's heartbeat (which fences) in place of its own."""

    def __init__(self, agent: Agent, **kwargs: Any):
        super().__init__(**kwargs)
        self.agent = agent

    async def _run_loop(self) -> None:
        assert self.worker_id is not None
        await self.agent.registered(self.worker_id)
        await super()._run_loop()

    async def _update_heartbeat(self) -> None:
        while True:
            await asyncio.sleep(self.update_heartbeat_interval)
            await self.agent.heartbeat()

    def _start_side_tasks(self) -> list[asyncio.Task[Any]]:
        return [*super()._start_side_tasks(), *self.agent.side_tasks()]


def probe_host() -> tuple[list[str], dict[str, Any]]:
    """The GPU models (nvidia-smi) and a few facts about the host, for `paritybot status`."""
    probe: dict[str, Any] = {"cpus": os.cpu_count()}
    gpus: list[str] = []
    if shutil.which("nvidia-smi"):
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            out = subprocess.run(
                ["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                capture_output=True,
                text=True,
                timeout=20,
                check=True,
            ).stdout
            rows = [[part.strip() for part in line.split(",")] for line in out.splitlines() if line.strip()]
            gpus = [row[0] for row in rows]
            if rows and len(rows[0]) > 1:
                probe["driver"] = rows[0][1]
    with contextlib.suppress(OSError, subprocess.SubprocessError, ValueError):
        out = subprocess.run(
            ["docker", "version", "--format", "{{json .Server.Version}}"],
            capture_output=True,
            text=True,
            timeout=20,
            check=True,
        ).stdout
        probe["docker"] = json.loads(out)
    return gpus, probe
