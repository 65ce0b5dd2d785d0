"""Wiring of `paritybot agent`: its store, its runner choice and the pipeline it runs jobs with."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from functools import partial

from bot.core.models import EnvFacts, RunReport
from bot.service.app import check_engine_at_startup, gpu_leases_at_startup, service_policy
from bot.service.executor import run_pipeline
from bot.service.fleet.agent import Agent, AgentConfig, JobRunner, Progress
from bot.service.instance import Instance
from bot.service.settings import Settings
from bot.service.store.postgres_fleet import FleetStore
from bot.service.store.records import Job
from bot.service.store.run_logs import RunLogStore
from bot.service.test_history import AgentHistory
from runner.backends.base import RunnerFactory
from runner.backends.choice import runner_factory
from runner.backends.gpu_leasing import leasing
from runner.backends.ownership import Owner


def pipeline_runner(
    settings: Settings,
    runners: RunnerFactory,
    logs: RunLogStore | None = None,
    history: FleetStore | None = None,
) -> JobRunner:
    """What runs a job on an agent: the pipeline, its log into ``logs`` and the tests' history read
    from ``history`` (known flaky tests, the default branch's record, the last run's failures)."""

    async def run(
        job: Job, cancel: asyncio.Event, token: str | None, baseline: EnvFacts | None, progress: Progress
    ) -> RunReport:
        return await run_pipeline(
            job,
            cancel,
            token=token,
            baseline=baseline,
            runner_factory=runners,
            workspace_root=settings.workspace_root,
            cache_root=settings.cache_root,
            progress=progress,
            log_store=logs,
            history=None
            if history is None
            else AgentHistory(history, job.repo, job.environment, job.pr_number),
        )

    return run


async def run_agent(
    settings: Settings,
    labels: list[str],
    name: str = "",
    job_runner: Callable[[Owner], JobRunner] | None = None,
) -> int:
    """Run an agent until it is stopped (SIGTERM: its runs go back to the queue) or fenced.
    ``job_runner`` makes what runs a job, given this instance (the pipeline when None)."""
    store = await asyncio.to_thread(
        partial(FleetStore, settings.database_url, migrate_schema=False, pool_size=4)
    )
    config = AgentConfig(
        labels=labels,
        name=name,
        heartbeat_s=settings.heartbeat_s,
        stalled_after_s=settings.stalled_after_s,
        max_attempts=settings.max_attempts,
        concurrency=settings.workers,
    )
    instance = Instance(store, "agent", settings.heartbeat_s, settings.stalled_after_s)
    await asyncio.to_thread(instance.register)
    # What this host's runs left when their agent died (kill -9, a crash) goes first; the live runs
    # of the other agents on this engine stay.
    await asyncio.to_thread(check_engine_at_startup, settings, instance)
    if job_runner is None:
        leases = await asyncio.to_thread(gpu_leases_at_startup, settings)
        runner = pipeline_runner(
            settings, leasing(runner_factory(service_policy(settings, instance.owner)), leases), store, store
        )
    else:
        runner = job_runner(instance.owner)
    try:
        await Agent(config, store, runner, settings.database_url, instance).run()
    finally:
        store.close()
    return 0
