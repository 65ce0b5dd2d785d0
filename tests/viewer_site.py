"""A page behind the viewers' gate, served on loopback against the fake GitHub: what the sign-in
tests (HTTP and browser) look at until the run page is in front of it."""

from __future__ import annotations

import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import aiohttp
from aiohttp import web
from aiohttp.test_utils import unused_port
from fakegithub import FakeGitHub

from bot.service.github import GitHubApp, RetryPolicy
from bot.service.sessions import Sessions
from bot.service.store.sqlite import SQLiteStore
from bot.service.viewers import GATE_KEY, OAuthClient, ViewerGate

PUBLIC = "acme/open"
PRIVATE = "acme/secret"


@dataclass
class Site:
    url: str
    gate: ViewerGate
    clock: list[float]  # the gate's: how long GitHub's answers are remembered
    store: SQLiteStore  # where the sessions are
    wall: list[datetime]  # the sessions' clock

    def later(self, seconds: float) -> None:
        """Time passes for the gate and the sessions alike."""
        self.clock[0] += seconds
        self.wall[0] += timedelta(seconds=seconds)


async def page(request: web.Request) -> web.StreamResponse:
    """The page behind the gate (the run page, in the service)."""
    repository = f"{request.match_info['owner']}/{request.match_info['repo']}"
    if repository.startswith("acme/nothing"):  # a name the service holds nothing of
        return await request.app[GATE_KEY].unseen(request)
    denied = await request.app[GATE_KEY](request, repository)
    if denied is not None:
        return denied
    return web.Response(text=f"the runs of {repository}")


async def start_site(fake: FakeGitHub, *, sign_in: bool = True) -> AsyncIterator[Site]:
    fake.add_repo(PUBLIC, installation_id=7)
    fake.add_repo(PRIVATE, installation_id=7, private=True)
    fake.set_role(PRIVATE, "alice", "read")
    port = unused_port()
    public_url = f"http://127.0.0.1:{port}"
    fake.web.callback_urls = [f"{public_url}/oauth/callback"]
    clock = [1000.0]
    wall = [datetime(2026, 12, 1, 9, 0, tzinfo=UTC)]
    with tempfile.TemporaryDirectory() as tmp:
        store = SQLiteStore(Path(tmp) / "sessions.db")
        try:
            async for site in _serve(fake, sign_in, public_url, port, clock, wall, store):
                yield site
        finally:
            store.close()


async def _serve(
    fake: FakeGitHub,
    sign_in: bool,
    public_url: str,
    port: int,
    clock: list[float],
    wall: list[datetime],
    store: SQLiteStore,
) -> AsyncIterator[Site]:
    async with aiohttp.ClientSession() as session:
        # One try per request: a test of GitHub failing need not wait out the backoff.
        app = GitHubApp(session, fake.app_id, fake.private_key_pem, fake.url, retry=RetryPolicy(attempts=1))
        oauth = OAuthClient(fake.web.client_id, fake.web.client_secret, fake.web.url, public_url)
        sessions = Sessions(store, now=lambda: wall[0])
        gate = ViewerGate(
            app, session, oauth if sign_in else None, sessions, access_ttl_s=60, clock=lambda: clock[0]
        )
        web_app = web.Application()
        web_app[GATE_KEY] = gate
        gate.add_routes(web_app.router)
        web_app.router.add_get("/runs/{owner}/{repo}", page)
        runner = web.AppRunner(web_app)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        try:
            yield Site(public_url, gate, clock, store, wall)
        finally:
            await runner.cleanup()
