"""The service's web pages as `serve` wires them (``build_service`` in bot/service/app.py: the run
page behind the viewers' gate, the sign-in, the redaction of public records) and serves them (the
guarded site of bot/service/http_limits.py), on loopback, against the fake GitHub, with viewers'
sign-in set up. What the hostile tests of the pages attack. The service's loops are not started:
the pages read the store, and the tests write into it what a run would have.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web
from botharness import SECRET
from fakegithub import FakeGitHub
from run_page_support import free_port

from bot.service.app import Service, build_service
from bot.service.http_limits import GuardedSite
from bot.service.settings import Settings
from bot.service.store.sqlite import SQLiteStore
from bot.service.viewers import SESSION_COOKIE


@dataclass
class ServicePages:
    url: str
    service: Service
    settings: Settings

    @property
    def store(self) -> SQLiteStore:
        assert isinstance(self.service.store, SQLiteStore)
        return self.service.store


def browser() -> aiohttp.ClientSession:
    # A browser keeps cookies of 127.0.0.1 too (aiohttp's jar does only when told).
    return aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True))


@asynccontextmanager
async def service_pages(fake: FakeGitHub, tmp: Path, **overrides: Any) -> AsyncIterator[ServicePages]:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    (tmp / "client-id").write_text(fake.web.client_id + "\n")
    (tmp / "client-secret").write_text(fake.web.client_secret + "\n")
    fake.web.callback_urls = [f"{url}/oauth/callback"]
    values: dict[str, Any] = dict(
        app_id=fake.app_id,
        private_key=fake.private_key_pem,
        webhook_secret=SECRET,
        github_api_url=fake.url,
        github_url=fake.web.url,
        public_url=url,
        client_id_file=tmp / "client-id",
        client_secret_file=tmp / "client-secret",
        database_url=f"sqlite:///{tmp / 'data' / 'bot.db'}",
        workspace_root=tmp / "workspaces",
        cache_root=tmp / "cache",
        runner="host",
        allow_host_runner="trusted-code-only",
    )
    settings = Settings(**(values | overrides))
    service = await build_service(settings)
    runner = web.AppRunner(service.web_app, access_log=None)
    await runner.setup()
    await GuardedSite(runner, "127.0.0.1", port).start()
    try:
        yield ServicePages(url, service, settings)
    finally:
        await runner.cleanup()
        await service.stop()


async def sign_in(b: aiohttp.ClientSession, pages: ServicePages, fake: FakeGitHub, login: str) -> str:
    """Sign ``login`` in through GitHub (the fake's website) in browser ``b``; the session cookie."""
    fake.web.sign_in(login)
    async with b.get(f"{pages.url}/login?next=/") as r:
        assert r.history and r.history[-1].url.path == "/oauth/callback", r.history
        cookie = r.history[-1].cookies[SESSION_COOKIE].value
    assert cookie
    return cookie
