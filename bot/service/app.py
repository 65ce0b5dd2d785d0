"""`paritybot serve`: the web app, the dispatcher and the worker pool in one process, wired together.

Start-up order matters for "never lose a job": kill what dead runs left running, recover
interrupted jobs, then start the reconciler (which finishes on GitHub whatever is due), the
workers, the dispatcher (which first dispatches whatever deliveries the store holds), then accept
webhooks.

With PostgreSQL (``PARITYBOT_DATABASE_URL=postgresql://…``) `serve` runs no jobs: agents on the GPU
hosts do (:mod:`bot.service.fleet.agent`). Any number of replicas accept, decide, enqueue and report;
their per-PR locks are advisory locks; each runs the reconciler (without its take-back: the
stalled-job reaper does that), and :class:`bot.service.fleet.service.FleetLoops` mints the agents'
clone tokens, tells GitHub what they record and runs the reaper.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from dataclasses import dataclass
from datetime import timedelta
from functools import partial
from typing import Any

import aiohttp
import structlog
from aiohttp import web

from bot.service.dispatcher import Dispatcher
from bot.service.executor import RunExecutor
from bot.service.fleet.locks import AdvisoryPrLocks
from bot.service.fleet.service import FleetLoops
from bot.service.github import GitHubApp
from bot.service.instance import Instance
from bot.service.reconciler import Reconciler
from bot.service.reporter import GitHubReporter, PrLocking, PrLocks
from bot.service.run_page.live import LogWake, listen_for_logs
from bot.service.run_page.routes import Gate, add_run_page, private_not_found
from bot.service.scheduler import Scheduler
from bot.service.settings import Settings
from bot.service.store.postgres_fleet import FleetStore
from bot.service.store.protocol import EmbeddedQueue, Store
from bot.service.store.sqlite import SQLiteStore
from bot.service.supervisor import Supervisor
from bot.service.web import create_web_app
from bot.service.worker import WorkerPool
from handlers.context import HandlerContext
from handlers.routing import router
from runner.backends.base import RunnerFactory
from runner.backends.choice import RunnerPolicy, check_engine, runner_factory
from runner.backends.docker_engine import remove_leftovers
from runner.backends.host import kill_leftovers
from runner.backends.ownership import Owner
from runner.workspace import remove_stale_workspaces

log = structlog.get_logger(__name__)

# Several replicas: deliveries each replica handles at once (those of one PR stay one at a time).
DISPATCH_CONCURRENCY = 8

ENGINE_FIX = (
    "runs fail until the engine is reachable: in deploy/docker-compose.yml, mount the engine's "
    "socket (DOCKER_SOCKET) and set DOCKER_GID to its group (stat -c %g /var/run/docker.sock); "
    "elsewhere, point DOCKER_HOST at the engine"
)


def service_policy(settings: Settings, owner: Owner | None = None) -> RunnerPolicy:
    """How `serve` chooses each run's runner: the container engine unless the operator said host;
    what the runs start on the engine is ``owner``'s (this instance's)."""
    return RunnerPolicy(
        mode=settings.runner,
        host="trusted-code-only" if settings.allow_host_runner == "trusted-code-only" else "never",
        default_image=settings.default_image,
        redact=settings.service_secrets(),
        owner=owner,
    )


def check_engine_at_startup(settings: Settings, instance: Instance) -> None:
    """Say loudly what will go wrong before the first run does; remove what this instance may of
    what runners left on the engine: dead owners' and ended runs' (never a live neighbour's)."""
    if settings.runner == "host":
        log.warning(
            "host runner: pull requests by trusted authors and default-branch runs execute on this "
            "machine without a container; other runs are refused"
        )
        return
    engine, client = check_engine()
    if client is None:
        log.error("container engine unreachable", where=engine.where, error=engine.error, fix=ENGINE_FIX)
        return
    try:
        removed, volumes = remove_leftovers(client, instance.owner, instance.alive, instance.store.runs_over)
    finally:
        client.close()
    if removed or volumes:
        log.warning("containers of dead runs removed", count=removed, volumes=volumes)
    if settings.default_image is None:
        log.info("no PARITYBOT_DEFAULT_IMAGE: runs of environments that name no image will fail, saying so")


@dataclass
class Service:
    """Everything `serve` runs, so tests can start and stop the same thing in-process."""

    settings: Settings
    store: Store
    dispatcher: Dispatcher
    workers: WorkerPool | None  # one machine: the in-process workers
    reconciler: Reconciler
    session: aiohttp.ClientSession
    app: GitHubApp
    web_app: web.Application
    supervisor: Supervisor
    instance: Instance
    fleet: FleetLoops | None = None  # several hosts: what the service does for the agents
    log_wake: LogWake | None = None  # wakes the run pages' live logs
    log_listener: asyncio.Task[None] | None = None  # several hosts: LISTEN for the agents' log lines

    async def stop(self) -> None:
        if self.log_listener is not None:
            self.log_listener.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.log_listener
        await self.dispatcher.stop()
        await self.reconciler.stop()
        if self.workers is not None:
            await self.workers.stop()
        if self.fleet is not None:
            await self.fleet.stop()
            await self.fleet.locks.close()
        await self.instance.stop()
        await self.session.close()
        self.store.close()


def recover_at_startup(store: EmbeddedQueue, settings: Settings) -> None:
    """What a dead process left: its steps' processes killed, its runs requeued (or failed past
    their attempts, due to be reported), its workspaces removed. Nothing runs yet."""
    killed = kill_leftovers(store.step_processes())
    for group in store.step_processes():
        store.forget_step_process(group)
    if killed:
        log.warning("leftover steps of dead runs killed", count=len(killed), steps=[g.step for g in killed])
    requeued, failed = store.recover(settings.max_attempts)
    if requeued or failed:
        log.warning("interrupted runs recovered", requeued=requeued, failed=failed)
    removed = remove_stale_workspaces(settings.workspace_root)
    if removed:
        log.info("workspaces of dead runs removed", count=removed)


async def build_service(
    settings: Settings, *, runner: RunnerFactory | None = None, gate: Gate = private_not_found
) -> Service:
    """Everything `serve` runs; ``gate`` decides who sees a private repository's run pages
    (:mod:`bot.service.run_page.routes`)."""
    settings.require_serving()
    if settings.is_postgres:
        return await _build(settings, *await _fleet_parts(settings), gate=gate)
    store = SQLiteStore(settings.sqlite_path)
    instance = Instance(store, "serve", settings.heartbeat_s, settings.stalled_after_s)
    await asyncio.to_thread(instance.register)
    await asyncio.to_thread(recover_at_startup, store, settings)
    await asyncio.to_thread(check_engine_at_startup, settings, instance)
    session = aiohttp.ClientSession()
    app = _github_app(settings, session)
    locks = PrLocks()
    reconciler = Reconciler(
        store,
        app,
        locks,
        interval_s=settings.reconcile_interval_s,
        take_back=partial(store.recover, settings.max_attempts, stale_after_s=settings.stalled_after_s),
        **_run_page_settings(settings),
    )
    executor = RunExecutor(
        store,
        runner or runner_factory(service_policy(settings, instance.owner)),
        workspace_root=settings.workspace_root,
        cache_root=settings.cache_root,
        app=app,
        locks=locks,
        reconciler=reconciler,
    )
    workers = WorkerPool(
        store,
        executor,
        concurrency=settings.workers,
        heartbeat_s=settings.heartbeat_s,
        publish=reconciler.publish,
    )
    return await _build(settings, store, locks, session, app, reconciler, workers, None, instance, gate=gate)


def _run_page_settings(settings: Settings) -> dict[str, Any]:
    """What the reconciler needs of the run pages: their address, how long their logs are kept."""
    return {
        "public_url": settings.public_url,
        "log_retention": timedelta(days=settings.log_retention_days),
    }


def _github_app(settings: Settings, session: aiohttp.ClientSession) -> GitHubApp:
    return GitHubApp(
        session,
        int(settings.app_id or 0),
        settings.private_key_text(),
        settings.github_api_url,
        retry=settings.retry_policy(),
    )


async def _fleet_parts(
    settings: Settings,
) -> tuple[Store, PrLocking, aiohttp.ClientSession, GitHubApp, Reconciler, None, FleetLoops, Instance]:
    """Several hosts: the PostgreSQL store (migrated at start), advisory locks, the reconciler
    (publishing only: the reaper takes back stalled runs) and the fleet's loops."""
    store = await asyncio.to_thread(
        partial(
            FleetStore,
            settings.database_url,
            delivery_lease=timedelta(seconds=settings.delivery_lease_s),
            stalled_after=timedelta(seconds=settings.stalled_after_s),
        )
    )
    instance = Instance(store, "serve", settings.heartbeat_s, settings.stalled_after_s)
    await asyncio.to_thread(instance.register)
    locks = AdvisoryPrLocks(settings.database_url)
    await locks.open()
    session = aiohttp.ClientSession()
    app = _github_app(settings, session)
    reconciler = Reconciler(
        store, app, locks, interval_s=settings.reconcile_interval_s, **_run_page_settings(settings)
    )
    fleet = FleetLoops(
        store,
        app,
        reconciler,
        locks,
        settings.database_url,
        heartbeat_s=settings.heartbeat_s,
        stalled_after_s=settings.stalled_after_s,
        max_attempts=settings.max_attempts,
    )
    return store, locks, session, app, reconciler, None, fleet, instance


async def _build(
    settings: Settings,
    store: Store,
    locks: PrLocking,
    session: aiohttp.ClientSession,
    app: GitHubApp,
    reconciler: Reconciler,
    workers: WorkerPool | None,
    fleet: FleetLoops | None,
    instance: Instance,
    *,
    gate: Gate,
) -> Service:
    assert settings.webhook_secret is not None  # require_serving() checked it
    recorded = asyncio.Event()  # wakes the dispatcher when a new delivery is committed

    async def context_for(installation: int | None) -> HandlerContext:
        bot_login = await app.bot_login()
        gh = await app.client(installation) if installation is not None else None
        reporter = (
            GitHubReporter(
                gh,
                store,
                locks,
                bot_login,
                app_id=app.app_id,
                retry=app.retry,
                public_url=settings.public_url,
            )
            if gh is not None
            else None
        )
        return HandlerContext(
            gh=gh,
            store=store,
            reporter=reporter,
            scheduler=Scheduler(
                store, locks, reporter, wake=workers.wake if workers else lambda: None, reconciler=reconciler
            ),
            installation_id=installation,
            bot_login=bot_login,
        )

    dispatcher = Dispatcher(
        store,
        router,
        context_for,
        wake=recorded,
        concurrency=DISPATCH_CONCURRENCY if fleet is not None else 1,
    )
    supervisor = Supervisor()
    web_app = create_web_app(
        settings.webhook_secret.get_secret_value(),
        store,
        on_recorded=recorded.set,
        loops_down=supervisor.down,
    )
    wake = add_run_page(web_app, store, gate=gate, public_url=settings.public_url)
    wake.bind(asyncio.get_running_loop())
    if isinstance(store, SQLiteStore):
        store.on_log = wake.notify  # one machine: the workers write the logs in this process
    return Service(
        settings,
        store,
        dispatcher,
        workers,
        reconciler,
        session,
        app,
        web_app,
        supervisor,
        instance,
        fleet,
        log_wake=wake,
    )


async def start_service(service: Service) -> None:
    service.instance.start(service.supervisor)
    service.reconciler.start(service.supervisor)  # its first pass finishes what the last process left due
    if service.workers is not None:
        service.workers.start(service.supervisor)
    if service.fleet is not None:
        service.fleet.start(service.supervisor)
        if service.log_wake is not None:
            # The agents' log lines come through PostgreSQL: LISTEN wakes the live pages.
            listen = partial(listen_for_logs, service.settings.database_url, service.log_wake)
            service.log_listener = service.supervisor.keep("run-log listener", listen)
    service.dispatcher.start(service.supervisor)


async def serve(settings: Settings) -> None:
    service = await build_service(settings)
    await start_service(service)
    runner = web.AppRunner(service.web_app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, settings.host, settings.port)
    await site.start()
    log.info("serving", host=settings.host, port=settings.port, api=settings.github_api_url)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    log.info("shutting down")
    await runner.cleanup()
    await service.stop()
