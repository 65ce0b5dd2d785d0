"""Setting the App up in the browser: `serve` started before the App exists offers a one-time page
that registers it on GitHub from ``deploy/app-manifest.yml`` (GitHub's App-manifest flow).

Whoever registers the App owns the credentials this service will act with, so the page opens only
for the operator: `serve` makes a one-time token at start and writes the page's address with it to
its own log (stderr), as Jupyter and Grafana do. Nothing else opens it — not the client's address,
which behind a proxy is the proxy's and in ``X-Forwarded-For`` is whatever the client says.

1. ``GET /setup?token=…`` with this process's token sets a short-lived cookie (``paritybot_setup``,
   HttpOnly, path ``/setup``) and sends the browser to ``/setup`` without the token in its address;
2. ``GET /setup`` with that cookie shows the manifest, made for this service's address
   (``PARITYBOT_PUBLIC_URL``), in a form that posts it to GitHub (an organization's, or the
   signed-in user's account); without the token or the cookie: 404, as for any unknown path;
3. GitHub asks its user to confirm, creates the App and sends the browser back to
   ``/setup/callback?code=…&state=…``; the state must be one this process handed out to a browser
   let in by step 1 (else 404);
4. ``POST /app-manifests/{code}/conversions`` returns the App's id, key, webhook secret, client id
   and client secret: each is written to the file its setting names, mode 0600, never over an
   existing file; the page says what to do next, and `serve` goes on as the App.

Once the App is configured the pages are not there: 404, token or not.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import secrets
import time
from collections.abc import Callable
from enum import Enum
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

import aiohttp
import structlog
import yaml
from aiohttp import web
from gidgethub import GitHubException
from gidgethub.aiohttp import GitHubAPI

from bot.service import pages
from bot.service.github import USER_AGENT
from bot.service.http_limits import GuardedSite, ServerLimits, limited_app
from bot.service.settings import Settings, SettingsError
from bot.service.supervisor import stop_on_signals

log = structlog.get_logger(__name__)

EXAMPLE_URL = "https://paritybot.example.org"
ORG_NAME = r"^[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})$"
SETUP_COOKIE = "paritybot_setup"
SETUP_COOKIE_TTL_S = 1800  # time enough to register the App; the token in the log opens it again
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


class Admission(Enum):
    REFUSED = "refused"  # 404: as if there were no such page
    LET_IN = "let in"  # the token: set the cookie, go on without the token in the address
    ADMITTED = "admitted"  # the cookie of a browser let in before


def admission(
    offered_token: str | None, token: str, cookie: str | None, cookies: dict[str, float], now: float
) -> Admission:
    """Who may see the set-up page: the holder of this process's token, and the browser it let
    in (for ``SETUP_COOKIE_TTL_S``); nobody else, whatever their address or headers say."""
    if offered_token is not None:
        return Admission.LET_IN if secrets.compare_digest(offered_token, token) else Admission.REFUSED
    if cookie and cookies.get(cookie, 0.0) > now:
        return Admission.ADMITTED
    return Admission.REFUSED


def write_credential(path: Path, value: str) -> None:
    """One file, readable by this user only, created here: an existing file is never replaced."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(value if value.endswith("\n") else value + "\n")
    os.chmod(path, 0o600)  # whatever the umask


class SetupPages:
    """The one-time pages; :attr:`done` is set once the App's credentials are written."""

    def __init__(
        self,
        settings: Settings,
        session: aiohttp.ClientSession,
        *,
        token: str | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        check_setup_settings(settings)
        assert settings.public_url is not None
        self._settings = settings
        self._session = session
        self._manifest = app_manifest(settings.app_manifest, settings.public_url)
        self._states: set[str] = set()
        # Hex: nothing in it looks like a credential to the log's redaction, which would hide it.
        self.token = token or secrets.token_hex(24)
        self._cookies: dict[str, float] = {}  # a let-in browser's cookie → when it stops working
        self._clock = clock
        self.done = asyncio.Event()

    @property
    def url(self) -> str:
        """The page's address with the token: what the operator is told to open."""
        return f"{self._settings.public_url}/setup?{urlencode({'token': self.token})}"

    def add_routes(self, router: web.UrlDispatcher) -> None:
        router.add_get("/setup", self.start)
        router.add_get("/setup/callback", self.callback)

    async def start(self, request: web.Request) -> web.Response:
        if self.done.is_set():
            return _not_found()
        now = self._clock()
        let = admission(
            request.query.get("token"), self.token, request.cookies.get(SETUP_COOKIE), self._cookies, now
        )
        if let is Admission.REFUSED:
            log.warning("set-up page refused: no token, or not this process's")
            return _not_found()
        if let is Admission.LET_IN:
            return self._let_in(request, now)
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

    def _let_in(self, request: web.Request, now: float) -> web.Response:
        """The token was right: a cookie for this browser, and the page again without the token
        in its address (nor in the browser's history)."""
        cookie = secrets.token_urlsafe(32)
        self._cookies = {c: until for c, until in self._cookies.items() if until > now}
        self._cookies[cookie] = now + SETUP_COOKIE_TTL_S
        org = request.query.get("organization", "")
        response = web.Response(
            status=303,
            headers={"Location": "/setup" + (f"?{urlencode({'organization': org})}" if org else "")},
        )
        public = urlsplit(self._settings.public_url or "")
        # Secure where the browser came through the public https address; an operator's SSH tunnel
        # to http://127.0.0.1 must keep the cookie too.
        secure = public.scheme == "https" and request.host == public.netloc
        response.set_cookie(
            SETUP_COOKIE,
            cookie,
            max_age=SETUP_COOKIE_TTL_S,
            path="/setup",
            httponly=True,
            samesite="Lax",
            secure=secure,
        )
        log.info("set-up page opened with its token")
        return response

    async def callback(self, request: web.Request) -> web.Response:
        if self.done.is_set():
            return _not_found()
        state, code = request.query.get("state", ""), request.query.get("code", "")
        if state not in self._states:
            # Only a browser let in with the token was handed a state: anyone else meets no page.
            log.warning("set-up callback refused: its state was not handed out by this page")
            return _not_found()
        if not code:
            return web.Response(status=400, text="GitHub sent no code back: start again.")
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


def _not_found() -> web.Response:
    return web.Response(status=404, text="Not Found")


async def serve_setup(settings: Settings, limits: ServerLimits | None = None) -> bool:
    """No App yet: the one-time set-up page until the App is registered (True: serve as the App
    now) or the service is stopped (False). Its address, with the token, goes to the log."""
    async with aiohttp.ClientSession() as session:
        setup = SetupPages(settings, session)
        web_app = limited_app(limits or ServerLimits())
        setup.add_routes(web_app.router)
        pages.add_static_routes(web_app.router)
        web_app.router.add_get("/healthz", _awaiting_setup)
        runner = web.AppRunner(web_app, access_log=None)
        await runner.setup()
        await GuardedSite(runner, settings.host, settings.port).start()
        log.warning(
            "no GitHub App configured: open the set-up page at this address (it holds this start's "
            "one-time token; without it the page answers 404)",
            url=setup.url,
        )
        stop = stop_on_signals()
        done, stopping = asyncio.create_task(setup.done.wait()), asyncio.create_task(stop.wait())
        await asyncio.wait([done, stopping], return_when=asyncio.FIRST_COMPLETED)
        for task in (done, stopping):
            task.cancel()
        await runner.cleanup()
        return setup.done.is_set()


async def _awaiting_setup(request: web.Request) -> web.Response:
    return web.json_response({"status": "awaiting set-up"})
