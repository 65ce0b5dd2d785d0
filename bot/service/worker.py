"""The in-process worker pool: takes queued jobs from the store and executes them.

Jobs are claimed in the store (``queued`` → ``running``) before they start, so a crash leaves a
trace that the store's ``recover`` turns back into a queued job at the next start. A running
job's worker beats a heartbeat in the store; the reconciler takes back a job whose heartbeat
stopped, and its worker, should it come back, finds the job no longer its own and stops. Cancellation is a flag in the store, so the same mechanism works when the job runs on
another host: the worker polls it and stops the pipeline within a second or two.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

import structlog

from bot.core.models import RunState
from bot.service.store.protocol import EmbeddedQueue
from bot.service.store.records import Job
from bot.service.supervisor import Supervisor

log = structlog.get_logger(__name__)

JobExecutor = Callable[[Job, asyncio.Event], Awaitable[None]]
Publish = Callable[[str], Awaitable[bool]]  # the publisher's publish: a run's state to GitHub


class WorkerPool:
    def __init__(
        self,
        store: EmbeddedQueue,
        execute: JobExecutor,
        *,
        concurrency: int = 2,
        queues: list[str] | None = None,
        poll_interval: float = 1.0,
        cancel_poll_interval: float = 1.0,
        heartbeat_s: float = 10.0,
        publish: Publish | None = None,
    ):
        self._store = store
        self._execute = execute
        self._concurrency = concurrency
        self._queues = queues
        self._poll = poll_interval
        self._cancel_poll = cancel_poll_interval
        self._heartbeat = heartbeat_s
        self._publish = publish
        self._wake = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._stopping = False
        self.busy = 0  # jobs being executed right now

    def wake(self) -> None:
        """New work was queued; don't wait for the next poll."""
        self._wake.set()

    def start(self, supervisor: Supervisor) -> None:
        self._tasks = [supervisor.keep(f"worker-{i}", self._loop) for i in range(self._concurrency)]

    async def stop(self) -> None:
        """Stop taking jobs and abandon the running ones; they stay `running` for recovery."""
        self._stopping = True
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []

    async def _loop(self) -> None:
        while not self._stopping:
            job = await asyncio.to_thread(self._store.claim, self._queues)
            if job is None:
                self._wake.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), self._poll)
                continue
            await self._run(job)

    async def _run(self, job: Job) -> None:
        cancel = asyncio.Event()
        structlog.contextvars.bind_contextvars(run_id=job.id, repo=job.repo, pr=job.pr_number)
        watcher = asyncio.create_task(self._watch_cancel(job, cancel))
        self.busy += 1
        try:
            log.info("run started", environment=job.environment, head_sha=job.head_sha, attempt=job.attempts)
            await self._execute(job, cancel)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            # The executor records its own failures; this is the last line of defence (GitHub
            # unreachable before the run could start, say), and the summary shows the error.
            log.exception("run executor crashed")
            error = f"the run could not be carried out: {type(exc).__name__}: {exc}"
            ours = await asyncio.to_thread(
                self._store.finish, job.id, RunState.FAILED, None, error, attempt=job.attempts
            )
            if ours and self._publish is not None:
                await self._publish(job.id)
        finally:
            self.busy -= 1
            watcher.cancel()
            structlog.contextvars.unbind_contextvars("run_id", "repo", "pr")

    async def _watch_cancel(self, job: Job, cancel: asyncio.Event) -> None:
        """Poll the cancel flag; beat the heart. A job that is no longer this attempt's (the
        reconciler took it back from a worker it thought dead) is stopped: it must not run twice."""
        loop = asyncio.get_running_loop()
        beat = loop.time()
        while not cancel.is_set():
            await asyncio.sleep(self._cancel_poll)
            if await asyncio.to_thread(self._store.is_cancel_requested, job.id):
                log.info("cancel requested")
                cancel.set()
            if loop.time() - beat >= self._heartbeat:
                beat = loop.time()
                if not await asyncio.to_thread(self._store.heartbeat, job.id, job.attempts):
                    now = await asyncio.to_thread(self._store.get_job, job.id)
                    if now is not None and now.state == RunState.RUNNING:
                        log.warning("the run was given to another attempt; stopping this one")
                        cancel.set()
                    return  # over: nothing left to watch
