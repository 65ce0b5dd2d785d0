"""Enqueueing and cancelling runs: written to the store, then published by the publisher.

A job is committed before its check runs are created (tagged with an ``external_id`` naming the
job and the check), so no check run exists that the store does not know to finish. The scheduler
never writes to GitHub itself: the publisher (:mod:`bot.service.publisher`) shows each change.
Handlers only say what to run (``handlers.context.RunScheduler``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

import structlog

from bot.core.config import Environment, RepoConfig
from bot.core.models import RunRequest, RunState
from bot.service.locks import PrLocking
from bot.service.publisher.publisher import Publisher
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
        publisher: Publisher,
        wake: Callable[[], None] = lambda: None,
    ):
        self.store = store
        self.locks = locks
        self.publisher = publisher
        self.wake = wake

    async def schedule(
        self,
        request: RunRequest,
        config: RepoConfig,
        environments: Sequence[Environment],
        trigger_key: str,
    ) -> list[Job]:
        """Queue one run per environment; the publisher shows each on GitHub (its check runs
        queued, the summary) before a worker is woken to start it.

        The job is committed first: it is the record of what must appear on GitHub. Should
        publishing fail, the job still runs, and the publisher's next pass (or the run's start)
        creates what is missing, looking up any check run a lost answer hid.
        """
        jobs: list[Job] = []
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
        for job in jobs:
            await self.publisher.publish(job.id)
        if jobs:
            self.wake()
        return jobs

    async def cancel(self, repo: str, pr_number: int, *, keep_sha: str | None = None) -> list[Job]:
        """Cancel the PR's runs for other SHAs (all of them when keep_sha is None).

        Queued runs end here (published as cancelled); running ones are flagged and their worker
        stops them (and their container) within seconds, then their end is published.
        """
        async with self.locks(repo, pr_number):
            affected = await asyncio.to_thread(self.store.request_cancel, repo, pr_number, keep_sha=keep_sha)
        for job in affected:
            log.info("run cancelled", run_id=job.id, state=job.state.value, head_sha=job.head_sha)
            if job.state == RunState.CANCELLED:
                await self.publisher.publish(job.id)
        return affected
