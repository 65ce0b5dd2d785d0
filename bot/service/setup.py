"""Setting the App up in the browser: `serve` started before the App exists offers a one-time page
that registers it on GitHub from ``deploy/app-manifest.yml`` (GitHub's App-manifest flow).

1. ``GET /setup`` shows the manifest, made for this service's address (``PARITYBOT_PUBLIC_URL``),
   in a form that posts it to GitHub (an organization's, or the signed-in user's account);
2. GitHub asks its user to confirm, creates the App and sends the browser back to
   ``/setup/callback?code=…&state=…``; the state must be one this process handed out;
3. ``POST /app-manifests/{code}/conversions`` returns the App's id, key, webhook secret, client id
   and client secret: each is written to the file its setting names, mode 0600, never over an
   existing file; the page says what to do next, and `serve` goes on as the App.

Once the App is configured the pages are not there: 404, as for any unknown path.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import secrets
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import aiohttp
import structlog
import yaml
from aiohttp import web
from gidgethub import GitHubException
from gidgethub.aiohttp import GitHubAPI

from bot.service import pages
from bot.service.github import USER_AGENT
from bot.service.settings import Settings, SettingsError

log = structlog.get_logger(__name__)

EXAMPLE_URL = "https://paritybot.example.org"
ORG_NAME = r"^[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})$"
# What the conversion returns, and the setting naming the file each goes to.
CREDENTIALS = {
    "app_id": ("id", "PARITYBOT_APP_ID_FILE"),
    "private_key": ("pem", "PARITYBOT_PRIVATE_KEY_PATH"),
    "webhook_secret": ("webhook_secret", "PARITYBOT_WEBHOOK_SECRET_FILE"),
    "client_id": ("client_id", "PARITYBOT_CLIENT_ID_FILE"),
    "client_secret": ("client_secret", "PARITYBOT_CLIENT_SECRET_FILE"),
}


def check_setup_settings(settings: Settings) -> None:
    """What the set-up page needs: where to write each credential, and this service's address."""
    missing = [name for key, (_, name) in CREDENTIALS.items() if settings.app_files()[key] is None]
    if missing:
        raise SettingsError(
            "no GitHub App configured (PARITYBOT_APP_ID, PARITYBOT_PRIVATE_KEY_PATH, "
            "PARITYBOT_WEBHOOK_SECRET_FILE); to register one from the set-up page, set where it "
            f"writes the App's credentials: {', '.join(missing)}, and PARITYBOT_PUBLIC_URL"
        )
    if settings.public_url is None:
        raise SettingsError("PARITYBOT_PUBLIC_URL: not set; the set-up page makes the App for this address")
    if not settings.app_manifest.is_file():
        raise SettingsError(f"PARITYBOT_APP_MANIFEST: {settings.app_manifest} not found")


def app_manifest(path: Path, public_url: str) -> dict[str, Any]:
    """The manifest for this service: its example address replaced by ours, GitHub sending the
    browser back to the set-up page, and viewers' sign-in coming back to /oauth/callback."""
    text = path.read_text().replace(EXAMPLE_URL, public_url)
    manifest: dict[str, Any] = yaml.safe_load(text)
    manifest["redirect_url"] = f"{public_url}/setup/callback"
    manifest["callback_urls"] = [f"{public_url}/oauth/callback"]
    return manifest


def write_credential(path: Path, value: str) -> None:
    """One file, readable by this user only, created here: an existing file is never replaced."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(value if value.endswith("\n") else value + "\n")
    os.chmod(path, 0o600)  # whatever the umask


class SetupPages:
    """The one-time pages; :attr:`done` is set once the App's credentials are written."""

    def __init__(self, settings: Settings, session: aiohttp.ClientSession):
        check_setup_settings(settings)
        assert settings.public_url is not None
        self._settings = settings
        self._session = session
        self._manifest = app_manifest(settings.app_manifest, settings.public_url)
        self._states: set[str] = set()
        self.done = asyncio.Event()

    def add_routes(self, router: web.UrlDispatcher) -> None:
        router.add_get("/setup", self.start)
        router.add_get("/setup/callback", self.callback)

    async def start(self, request: web.Request) -> web.Response:
        if self.done.is_set():
            return web.Response(status=404, text="Not Found")
        org = request.query.get("organization", "").strip()
        if org and not _valid_org(org):
            org = ""
        state = secrets.token_urlsafe(24)
        self._states.add(state)
        where = f"/organizations/{quote(org)}/settings/apps/new" if org else "/settings/apps/new"
        action = f"{self._settings.github_url}{where}?{urlencode({'state': state})}"
        manifest = json.dumps(self._manifest, indent=2)
        return pages.render(
            "setup.html", forms=self._settings.github_url, action=action, manifest=manifest, organization=org
        )

    async def callback(self, request: web.Request) -> web.Response:
        if self.done.is_set():
            return web.Response(status=404, text="Not Found")
        state, code = request.query.get("state", ""), request.query.get("code", "")
        if state not in self._states or not code:
            log.warning("set-up callback refused: its state was not handed out by this page")
            return web.Response(
                status=400, text="This link was not started from this set-up page: start again."
            )
        self._states.discard(state)
        api = GitHubAPI(self._session, USER_AGENT, base_url=self._settings.github_api_url)
        try:
            # No body: GitHub documents none (a JSON body is refused).
            app = await api.post(f"/app-manifests/{quote(code, safe='')}/conversions", data=b"")
        except GitHubException as exc:
            log.warning("GitHub refused the App's code", error=str(exc)[:200])
            return web.Response(status=502, text="GitHub refused this code (expired or used): start again.")
        written = self._write(app)
        self.done.set()
        log.info("App registered", app_id=app["id"], slug=app.get("slug"), files=[str(p) for p in written])
        return pages.render(
            "setup_done.html",
            app=app,
            files=written,
            install_url=f"{app.get('html_url', '')}/installations/new",
            settings_url=f"{app.get('html_url', '')}".replace("/apps/", "/settings/apps/", 1),
        )

    def _write(self, app: dict[str, Any]) -> list[Path]:
        written = []
        files = self._settings.app_files()
        for key, (field, _) in CREDENTIALS.items():
            path = files[key]
            assert path is not None  # check_setup_settings
            write_credential(path, str(app[field]))
            written.append(path)
        return written


def _valid_org(name: str) -> bool:
    return re.match(ORG_NAME, name) is not None
