"""The set-up page on loopback against the fake GitHub (its website and API): the settings of a
service with no App yet, the page served as `serve` serves it, and a browser's view of its forms.
Used by tests/test_app_setup.py and tests/hostile/test_setup_page.py."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path

import aiohttp
from aiohttp import web
from aiohttp.test_utils import unused_port
from fakegithub import FakeGitHub

from bot.service.http_limits import GuardedSite, ServerLimits, limited_app
from bot.service.pages import add_static_routes
from bot.service.settings import Settings
from bot.service.setup import SetupPages

ROOT = Path(__file__).resolve().parent.parent
FILES = {
    "app_id_file": "app-id",
    "private_key_path": "private-key.pem",
    "webhook_secret_file": "webhook-secret",
    "client_id_file": "client-id",
    "client_secret_file": "client-secret",
}


def setup_settings(fake: FakeGitHub, tmp_path: Path, public_url: str) -> Settings:
    paths = {key: tmp_path / "app" / name for key, name in FILES.items()}
    return Settings(
        github_api_url=fake.url,
        github_url=fake.web.url,
        public_url=public_url,
        app_manifest=ROOT / "deploy" / "app-manifest.yml",
        database_url=f"sqlite:///{tmp_path / 'bot.db'}",
        **paths,
    )


@dataclass
class SetupSite:
    url: str
    pages: SetupPages
    settings: Settings


async def setup_site(fake: FakeGitHub, tmp_path: Path) -> AsyncIterator[SetupSite]:
    """The set-up pages of a service with no App, as `serve` serves them (serve_setup)."""
    port = unused_port()
    url = f"http://127.0.0.1:{port}"
    settings = setup_settings(fake, tmp_path, url)
    assert settings.awaiting_app_setup()
    async with aiohttp.ClientSession() as session:
        pages = SetupPages(settings, session)
        app = limited_app(ServerLimits())
        pages.add_routes(app.router)
        add_static_routes(app.router)
        runner = web.AppRunner(app)
        await runner.setup()
        await GuardedSite(runner, "127.0.0.1", port).start()
        try:
            yield SetupSite(url, pages, settings)
        finally:
            await runner.cleanup()


class Forms(HTMLParser):
    """The page's forms as a browser sees them: (method, action, fields)."""

    def __init__(self) -> None:
        super().__init__()
        self.forms: list[tuple[str, str, dict[str, str]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "form":
            self.forms.append((a.get("method", "get"), a["action"], {}))
        elif tag == "input" and self.forms and "name" in a:
            self.forms[-1][2][a["name"]] = a.get("value", "")


def forms_of(html: str) -> list[tuple[str, str, dict[str, str]]]:
    parser = Forms()
    parser.feed(html)
    return parser.forms


def browser() -> aiohttp.ClientSession:
    # A browser keeps cookies of 127.0.0.1 too (aiohttp's jar does only when told).
    return aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True))


def opened(site: SetupSite, query: str = "") -> str:
    """The page's address as `serve` logs it: with this start's token."""
    return f"{site.url}/setup?token={site.pages.token}{'&' + query if query else ''}"
