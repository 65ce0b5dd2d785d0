"""`paritybot serve`: the web app, the dispatcher and the worker pool in one process, wired together.

Start-up order matters for "never lose a job": kill what dead runs left running, recover
interrupted jobs, then start the publisher (the one writer of a run's state on GitHub, whose first
pass tells GitHub whatever the last process left untold) and the reconciler, the workers, the
dispatcher (which first dispatches whatever deliveries the store holds), then accept webhooks.

With PostgreSQL (``PARITYBOT_DATABASE_URL=postgresql://…``) `serve` runs no jobs: agents on the GPU
hosts do (:mod:`bot.service.fleet.agent`). Any number of replicas accept, decide, enqueue and report;
their per-PR locks are advisory locks; each runs the publisher (woken by what agents record,
through NOTIFY) and the reconciler (without its take-back: the stalled-job reaper does that), and
:class:`bot.service.fleet.service.FleetLoops` mints the agents' clone tokens, LISTENs and runs the
reaper.

Longer than most modules: it is the wiring of both modes, in start-up order.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from datetime import timedelta
from functools import partial

import aiohttp
import structlog
from aiohttp import web

from bot.service.dispatcher import Dispatcher
from bot.service.executor import RunExecutor
from bot.service.fleet.locks import AdvisoryPrLocks
from bot.service.fleet.service import FleetLoops
from bot.service.github import GitHubApp
from bot.service.http_limits import GuardedSite
from bot.service.instance import Instance
from bot.service.locks import PrLocking, PrLocks
from bot.service.metrics import Metrics
from bot.service.operators import OperatorAccess, OperatorPages
from bot.service.pages import add_static_routes
from bot.service.publisher.publisher import Publisher, reporter_for
from bot.service.reconciler import Reconciler
from bot.service.run_page.live import LogWake, listen_for_logs
from bot.service.run_page.redaction import public_redaction
from bot.service.run_page.routes import Gate, add_run_page
from bot.service.scheduler import Scheduler
from bot.service.sessions import Sessions
from bot.service.settings import Settings
from bot.service.store.postgres_fleet import FleetStore
from bot.service.store.protocol import EmbeddedQueue, Store
from bot.service.store.sqlite import SQLiteStore
from bot.service.supervisor import Supervisor, stop_on_signals
from bot.service.viewers import GATE_KEY, ViewerGate, oauth_client
from bot.service.web import create_web_app
from bot.service.worker import WorkerPool
from handlers.context import HandlerContext
from handlers.routing import router
from runner.backends.base import RunnerFactory
from runner.backends.choice import RunnerPolicy, check_engine, runner_factory
from runner.backends.docker_engine import remove_leftovers
from runner.backends.gpu_inventory import InventorySource, query_nvidia_smi, runner_inventory
from runner.backends.gpu_leasing import GpuLeases, leasing, start_leases
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
        name_engine=False,
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


def gpu_leases_at_startup(settings: Settings, source: InventorySource = query_nvidia_smi) -> GpuLeases | None:
    """This runner's GPU leases (None when its GPUs are not known: nothing is leased), with what
    the engine's running paritybot containers still hold taken. Raises ValueError when
    PARITYBOT_GPUS names a GPU that nvidia-smi does not list."""
    inventory = runner_inventory(settings.gpus, source)
    client = None
    if inventory and settings.runner == "docker":
        engine, client = check_engine()
        if client is None:
            log.error("GPU leases: the engine's containers could not be read", where=engine.where)
    return start_leases(inventory, shared=settings.gpu_sharing, client=client)


@dataclass
class Service:
    """Everything `serve` runs, so tests can start and stop the same thing in-process."""

    settings: Settings
    store: Store
    dispatcher: Dispatcher
    workers: WorkerPool | None  # one machine: the in-process workers
    publisher: Publisher  # the only writer of a run's state on GitHub
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
        await self.publisher.stop()
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
    settings: Settings, *, runner: RunnerFactory | None = None, gate: Gate | None = None
) -> Service:
    """Everything `serve` runs; ``gate`` decides who sees a private repository's run pages
    (:mod:`bot.service.run_page.routes`; None: the viewers' sign-in, :mod:`bot.service.viewers`)."""
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
    publisher = Publisher(store, app, locks, public_url=settings.public_url)
    reconciler = Reconciler(
        publisher,
        interval_s=settings.reconcile_interval_s,
        take_back=partial(store.recover, settings.max_attempts, stale_after_s=settings.stalled_after_s),
        log_retention=_retention(settings),
    )
    if runner is None:  # a runner given (tests) gets its GPUs as it likes
        leases = await asyncio.to_thread(gpu_leases_at_startup, settings)
        runner = leasing(runner_factory(service_policy(settings, instance.owner)), leases)
    executor = RunExecutor(
        store,
        runner,
        publisher,
        workspace_root=settings.workspace_root,
        cache_root=settings.cache_root,
        app=app,
    )
    workers = WorkerPool(
        store,
        executor,
        concurrency=settings.workers,
        heartbeat_s=settings.heartbeat_s,
        publish=publisher.publish,
    )
    return await _build(
        settings, store, locks, session, app, publisher, reconciler, workers, None, instance, gate=gate
    )


def _retention(settings: Settings) -> timedelta:
    """How long the run pages' logs are kept (the reconciler's pass removes older ones)."""
    return timedelta(days=settings.log_retention_days)


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
) -> tuple[
    Store, PrLocking, aiohttp.ClientSession, GitHubApp, Publisher, Reconciler, None, FleetLoops, Instance
]:
    """Several hosts: the PostgreSQL store (migrated at start), advisory locks, the publisher (a
    run published by one replica at a time), the reconciler (publishing only: the reaper takes
    back stalled runs) and the fleet's loops."""
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
    publisher = Publisher(
        store,
        app,
        locks,
        exclusive=lambda run_id: locks.try_hold(f"paritybot:report:{run_id}"),
        public_url=settings.public_url,
    )
    reconciler = Reconciler(
        publisher, interval_s=settings.reconcile_interval_s, log_retention=_retention(settings)
    )
    fleet = FleetLoops(
        store,
        app,
        publisher,
        locks,
        settings.database_url,
        heartbeat_s=settings.heartbeat_s,
        stalled_after_s=settings.stalled_after_s,
        max_attempts=settings.max_attempts,
    )
    return store, locks, session, app, publisher, reconciler, None, fleet, instance


async def _build(
    settings: Settings,
    store: Store,
    locks: PrLocking,
    session: aiohttp.ClientSession,
    app: GitHubApp,
    publisher: Publisher,
    reconciler: Reconciler,
    workers: WorkerPool | None,
    fleet: FleetLoops | None,
    instance: Instance,
    *,
    gate: Gate | None,
) -> Service:
    assert settings.webhook_secret is not None  # require_serving() checked it
    # Wakes the dispatcher when a new delivery is committed (several replicas: by any of them).
    recorded = fleet.deliveries if fleet is not None else asyncio.Event()

    async def context_for(installation: int | None) -> HandlerContext:
        bot_login = await app.bot_login()
        gh = await app.client(installation) if installation is not None else None
        # What handlers say themselves: replies, a command's acknowledgement, a PR's notice with no
        # run (a bad config, awaiting approval). A run's state is the publisher's alone.
        reporter = (
            await reporter_for(app, store, locks, installation, public_url=settings.public_url)
            if installation is not None
            else None
        )
        return HandlerContext(
            gh=gh,
            store=store,
            reporter=reporter,
            scheduler=Scheduler(store, locks, publisher, wake=workers.wake if workers else lambda: None),
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
    metrics = Metrics(store)
    app.gate.on_response = metrics.github_response
    publisher.on_published = metrics.run_published
    web_app = create_web_app(
        settings.webhook_secret.get_secret_value(),
        store,
        on_recorded=recorded.set,
        loops_down=supervisor.down,
        metrics=metrics,
    )
    access = OperatorAccess(settings.operator_token(), settings.operator_pages_public)
    mode = "several hosts (PostgreSQL)" if fleet is not None else "one machine (SQLite)"
    OperatorPages(store, metrics, access, github_url=settings.github_url, mode=mode).add_routes(
        web_app.router
    )
    add_static_routes(web_app.router)
    # Who may see a repository's pages; the pages ask it (GATE_KEY) before they answer.
    viewers = ViewerGate(
        app, session, oauth_client(settings), Sessions(store), access_ttl_s=settings.viewer_access_ttl_s
    )
    web_app[GATE_KEY] = viewers
    viewers.add_routes(web_app.router)
    wake = add_run_page(
        web_app,
        store,
        gate=gate or viewers,
        unseen=viewers.unseen,
        redaction=public_redaction(settings),
        public_url=settings.public_url,
    )
    wake.bind(asyncio.get_running_loop())
    publisher.feed.listeners.append(wake.notify)  # a run's state changed: its open pages look now
    if isinstance(store, SQLiteStore):
        store.on_log = wake.notify  # one machine: the workers write the logs in this process
    return Service(
        settings,
        store,
        dispatcher,
        workers,
        publisher,
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
    service.publisher.start(service.supervisor)
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
    # Slow clients are closed and counted (bot/service/http_limits.py): a TCP site with a guard.
    await GuardedSite(runner, settings.host, settings.port).start()
    log.info("serving", host=settings.host, port=settings.port, api=settings.github_api_url)
    await stop_on_signals().wait()
    log.info("shutting down")
    await runner.cleanup()
    await service.stop()
