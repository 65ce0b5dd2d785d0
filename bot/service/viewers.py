"""Who may see a repository's pages: anyone for a public repository; for a private one, a viewer
signed in with GitHub (the App's user authorization, OAuth web flow) who can read it.

A page asks :class:`ViewerGate` before it answers: ``None`` means show it; otherwise the gate's
answer is sent instead — a redirect to sign in for an anonymous viewer, 404 for everyone else who
may not see it (never 403: a private repository's name is not confirmed to outsiders).

The viewer's GitHub token lives only in the session cookie, encrypted and signed (Fernet, with a
key derived from the App's client secret), HttpOnly and SameSite=Lax; read access is asked of
GitHub with that token and remembered for ``PARITYBOT_VIEWER_ACCESS_TTL_S``. A program (``paritybot
repro``) sends its user's token instead, as ``Authorization: Bearer``: asked the same way, no
sign-in needed, never kept.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

import aiohttp
import structlog
from aiohttp import web
from cryptography.fernet import Fernet, InvalidToken
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from gidgethub import BadRequest, GitHubException, RateLimitExceeded

from bot.service.github import GitHubApp, RateLimitedError
from bot.service.logs import register_secret
from bot.service.settings import Settings, SettingsError

log = structlog.get_logger(__name__)

SESSION_COOKIE = "paritybot_session"
STATE_COOKIE = "paritybot_oauth_state"
SESSION_TTL_S = 8 * 3600  # a GitHub App's user token lives 8 hours
STATE_TTL_S = 600
REPOSITORY = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})/[A-Za-z0-9._-]{1,100}$")


def safe_next(target: str | None) -> str:
    """Where to go back after signing in: a path of this site only (no other host, no scheme)."""
    if not target or not target.startswith("/") or target.startswith("//") or "\\" in target:
        return "/"
    if any(ord(c) < 0x21 for c in target):
        return "/"
    return target


@dataclass(frozen=True)
class Viewer:
    login: str
    token: str


class Sealer:
    """Encrypts and signs what the cookies carry; a cookie changed or past its age reads as none."""

    def __init__(self, client_secret: str):
        key = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=b"paritybot viewer session").derive(
            client_secret.encode()
        )
        self._fernet = Fernet(base64.urlsafe_b64encode(key))

    def seal(self, data: dict[str, Any]) -> str:
        return self._fernet.encrypt(json.dumps(data).encode()).decode()

    def open(self, value: str | None, max_age_s: int) -> dict[str, Any] | None:
        if not value:
            return None
        try:
            data = json.loads(self._fernet.decrypt(value.encode(), ttl=max_age_s))
        except (InvalidToken, ValueError):
            return None
        return data if isinstance(data, dict) else None


class TimedCache:
    """Answers remembered for a while (read access, a repository's visibility)."""

    def __init__(self, ttl_s: float, clock: Callable[[], float] = time.monotonic, size: int = 10_000):
        self._ttl = ttl_s
        self._clock = clock
        self._size = size
        self._items: dict[Any, tuple[float, bool]] = {}

    def get(self, key: Any) -> bool | None:
        found = self._items.get(key)
        if found is None or found[0] < self._clock():
            return None
        return found[1]

    def put(self, key: Any, value: bool) -> None:
        if len(self._items) >= self._size:
            self._items.clear()  # a burst of viewers costs a few more questions, never memory
        self._items[key] = (self._clock() + self._ttl, value)


@dataclass(frozen=True)
class OAuthClient:
    """The App's user authorization: its client id and secret, GitHub's web address, ours."""

    client_id: str
    client_secret: str
    github_url: str
    public_url: str

    @property
    def callback_url(self) -> str:
        return f"{self.public_url}/oauth/callback"

    def authorize_url(self, state: str) -> str:
        query = urlencode({"client_id": self.client_id, "redirect_uri": self.callback_url, "state": state})
        return f"{self.github_url}/login/oauth/authorize?{query}"

    async def exchange(self, session: aiohttp.ClientSession, code: str) -> str | None:
        """The viewer's token for the code GitHub sent back; None when GitHub refuses it."""
        form = {
            "client_id": self.client_id,
            "client_secret": self.client_secret,
            "code": code,
            "redirect_uri": self.callback_url,
        }
        async with session.post(
            f"{self.github_url}/login/oauth/access_token", data=form, headers={"Accept": "application/json"}
        ) as response:
            data = await response.json(content_type=None) if response.status == 200 else {}
        token = data.get("access_token") if isinstance(data, dict) else None
        if not isinstance(token, str) or not token:
            error = data.get("error") if isinstance(data, dict) else None
            log.warning("sign-in refused by GitHub", status=response.status, error=str(error)[:100])
            return None
        register_secret(token)
        return token


def oauth_client(settings: Settings) -> OAuthClient | None:
    """The sign-in of the settings' App; None when its client id and secret are not given."""
    credentials = settings.viewer_sign_in()
    if credentials is None:
        return None
    if settings.public_url is None:
        raise SettingsError(
            "PARITYBOT_PUBLIC_URL: not set; viewers signing in are sent back to PUBLIC_URL/oauth/callback"
        )
    return OAuthClient(*credentials, settings.github_url, settings.public_url)


class ViewerGate:
    """``await gate(request, "owner/name")``: None to show the page, else the answer to send.

    Ask it about the repository of something the store holds (a run), never about a name taken
    from the URL alone: each repository it has not seen costs the App a request to GitHub (is it
    public?), and a stranger could otherwise spend the App's rate budget on made-up names."""

    def __init__(
        self,
        app: GitHubApp,
        session: aiohttp.ClientSession,
        oauth: OAuthClient | None,
        *,
        access_ttl_s: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ):
        self._app = app
        self._session = session
        self._oauth = oauth
        self._sealer = Sealer(oauth.client_secret) if oauth is not None else None
        self._secure = oauth is not None and oauth.public_url.startswith("https://")
        self._public = TimedCache(access_ttl_s, clock)
        self._access = TimedCache(access_ttl_s, clock)

    async def __call__(self, request: web.Request, repository: str) -> web.StreamResponse | None:
        if not REPOSITORY.match(repository):
            return _not_found()
        if await self._is_public(repository):
            return None
        viewer = self.viewer(request)
        if viewer is None:
            if self._oauth is None:
                return _not_found()  # no sign-in set up: private pages are shown to nobody
            return _redirect(f"/login?{urlencode({'next': request.path_qs})}")
        if await self._can_read(viewer, repository):
            return None
        return _not_found()

    def viewer(self, request: web.Request) -> Viewer | None:
        """The signed-in viewer (the session cookie), or a program sending its user's GitHub token
        (``Authorization: Bearer …``, as ``paritybot repro`` does); None for anyone else."""
        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        token = token.strip()
        if scheme.lower() in ("bearer", "token") and token:
            # Never stored nor logged: it only asks GitHub whether its user may read the repository.
            return Viewer(f"token:{hashlib.sha256(token.encode()).hexdigest()[:16]}", token)
        if self._sealer is None:
            return None
        data = self._sealer.open(request.cookies.get(SESSION_COOKIE), SESSION_TTL_S)
        if data is None or not isinstance(data.get("login"), str) or not isinstance(data.get("token"), str):
            return None
        return Viewer(data["login"], data["token"])

    async def _is_public(self, repository: str) -> bool:
        known = self._public.get(repository.lower())
        if known is not None:
            return known
        try:
            installation = await self._app.api().getitem(
                f"/repos/{repository}/installation", jwt=self._app.jwt()
            )
            gh = await self._app.client(int(installation["id"]))
            data = await gh.getitem(f"/repos/{repository}")
            public = data.get("private") is False
        except RateLimitExceeded:
            return False  # not an answer: private until GitHub says, asked again next time
        except BadRequest:  # 404: not installed there, or no such repository: private to all
            public = False
        except (GitHubException, RateLimitedError, aiohttp.ClientError):
            return False  # GitHub did not answer: private for now (fail closed), not remembered
        self._public.put(repository.lower(), public)
        return public

    async def _can_read(self, viewer: Viewer, repository: str) -> bool:
        key = (viewer.login.lower(), repository.lower())
        known = self._access.get(key)
        if known is not None:
            return known
        try:
            # GitHub shows a repository to a user's token only when that user can read it (and
            # the App is installed there); otherwise 404.
            await self._app.as_viewer(viewer.token).getitem(f"/repos/{repository}")
            allowed = True
        except RateLimitExceeded:
            return False  # the viewer's own budget is spent: not an answer about access
        except BadRequest as exc:  # 404 (no access), 403, 401 (a revoked token)
            allowed = False
            log.info("viewer has no access", login=viewer.login, repo=repository, status=int(exc.status_code))
        except (GitHubException, RateLimitedError, aiohttp.ClientError):
            return False  # GitHub failed to answer: not remembered, asked again next time
        self._access.put(key, allowed)
        return allowed

    # the routes -------------------------------------------------------------------------------

    def add_routes(self, router: web.UrlDispatcher) -> None:
        router.add_get("/login", self.login)
        router.add_get("/oauth/callback", self.callback)
        router.add_get("/logout", self.logout)

    async def login(self, request: web.Request) -> web.StreamResponse:
        if self._oauth is None or self._sealer is None:
            return _not_found()
        state = secrets.token_urlsafe(24)
        response = _redirect(self._oauth.authorize_url(state))
        sealed = self._sealer.seal({"state": state, "next": safe_next(request.query.get("next"))})
        self._cookie(response, STATE_COOKIE, sealed, STATE_TTL_S, path="/oauth")
        return response

    async def callback(self, request: web.Request) -> web.StreamResponse:
        if self._oauth is None or self._sealer is None:
            return _not_found()
        expected = self._sealer.open(request.cookies.get(STATE_COOKIE), STATE_TTL_S)
        state, code = request.query.get("state", ""), request.query.get("code", "")
        if expected is None or not code or not secrets.compare_digest(str(expected.get("state")), state):
            log.warning("sign-in callback refused: its state is not the one this browser was given")
            return web.Response(
                status=400, text="This sign-in link is stale or was not started here: sign in again."
            )
        token = await self._oauth.exchange(self._session, code)
        if token is None:
            return web.Response(status=400, text="GitHub refused this sign-in: sign in again.")
        try:
            user = await self._app.as_viewer(token).getitem("/user")
        except GitHubException:
            return web.Response(status=502, text="GitHub did not say who signed in: sign in again.")
        response = _redirect(safe_next(str(expected.get("next"))))
        sealed = self._sealer.seal({"login": str(user["login"]), "token": token})
        self._cookie(response, SESSION_COOKIE, sealed, SESSION_TTL_S, path="/")
        response.del_cookie(STATE_COOKIE, path="/oauth")
        log.info("viewer signed in", login=str(user["login"]))
        return response

    async def logout(self, request: web.Request) -> web.StreamResponse:
        response = _redirect("/")
        response.del_cookie(SESSION_COOKIE, path="/")
        return response

    def _cookie(self, response: web.StreamResponse, name: str, value: str, max_age: int, path: str) -> None:
        response.set_cookie(
            name, value, max_age=max_age, path=path, httponly=True, samesite="Lax", secure=self._secure
        )


def _redirect(location: str) -> web.Response:
    return web.Response(status=302, headers={"Location": location})


def _not_found() -> web.Response:
    return web.Response(status=404, text="Not Found")


GATE_KEY = web.AppKey("viewer_gate", ViewerGate)
"""Where a page finds the gate: ``await request.app[GATE_KEY](request, "owner/name")``."""
