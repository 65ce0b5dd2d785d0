"""A page behind the viewers' gate, served on loopback against the fake GitHub: what the sign-in
tests (HTTP and browser) look at until the run page is in front of it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

import aiohttp
from aiohttp import web
from aiohttp.test_utils import unused_port
from fakegithub import FakeGitHub

from bot.service.github import GitHubApp, RetryPolicy
from bot.service.viewers import GATE_KEY, OAuthClient, ViewerGate

PUBLIC = "acme/open"
PRIVATE = "acme/secret"


@dataclass
class Site:
    url: str
    gate: ViewerGate
    clock: list[float]


async def page(request: web.Request) -> web.StreamResponse:
    """The page behind the gate (the run page, in the service)."""
    repository = f"{request.match_info['owner']}/{request.match_info['repo']}"
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
    async with aiohttp.ClientSession() as session:
        # One try per request: a test of GitHub failing need not wait out the backoff.
        app = GitHubApp(session, fake.app_id, fake.private_key_pem, fake.url, retry=RetryPolicy(attempts=1))
        oauth = OAuthClient(fake.web.client_id, fake.web.client_secret, fake.web.url, public_url)
        gate = ViewerGate(app, session, oauth if sign_in else None, access_ttl_s=60, clock=lambda: clock[0])
        web_app = web.Application()
        web_app[GATE_KEY] = gate
        gate.add_routes(web_app.router)
        web_app.router.add_get("/runs/{owner}/{repo}", page)
        runner = web.AppRunner(web_app)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        try:
            yield Site(public_url, gate, clock)
        finally:
            await runner.cleanup()
