"""Who may see a repository's pages: anyone for a public repository; for a private one, a viewer
signed in with GitHub (the App's user authorization, OAuth web flow) who can read it.

A page asks :class:`ViewerGate` before it answers: ``None`` means show it; otherwise the gate's
answer is sent instead — a redirect to sign in for an anonymous viewer, 404 for everyone else who
may not see it (never 403: a private repository's name is not confirmed to outsiders).

The viewer's GitHub token lives only in the session cookie, encrypted and signed (Fernet, with a
key derived from the App's client secret), HttpOnly and SameSite=Lax; the cookie also names a
session the store must still hold (:mod:`bot.service.sessions`), so signing out ends it on the
server and revokes the token at GitHub. Read access is asked of GitHub with that token and
remembered for ``PARITYBOT_VIEWER_ACCESS_TTL_S``. A program (``paritybot repro``) sends its user's
token instead, as ``Authorization: Bearer``: asked the same way, no sign-in needed, never kept.

Whatever is not shown gets one answer, :meth:`ViewerGate.unseen`, whether it exists or not: an
anonymous viewer is sent to sign in, anyone else gets 404. A page must answer a made-up name with
it too, or its answers would tell an outsider which private names exist.
"""

from __future__ import annotations

import hashlib
import re
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any
from urllib.parse import urlencode

import aiohttp
import structlog
from aiohttp import web
from gidgethub import BadRequest, GitHubException, RateLimitExceeded

from bot.service.github import GitHubApp, RateLimitedError
from bot.service.sessions import SESSION_ABSOLUTE_S, Sessions, session_key
from bot.service.sign_in import OAuthClient, Sealer, oauth_client, safe_next

# OAuthClient, oauth_client and safe_next live in bot.service.sign_in; named here as before.
__all__ = ["GATE_KEY", "SESSION_COOKIE", "OAuthClient", "ViewerGate", "oauth_client", "safe_next"]
log = structlog.get_logger(__name__)

SESSION_COOKIE = "paritybot_session"
STATE_COOKIE = "paritybot_oauth_state"
SESSION_TTL_S = SESSION_ABSOLUTE_S  # the cookie's own age; the store decides before that
STATE_TTL_S = 600
REPOSITORY = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})/[A-Za-z0-9._-]{1,100}$")


@dataclass(frozen=True)
class Viewer:
    login: str
    token: str
    session_id: str | None = None  # None: a program's own token, no session


class Access(Enum):
    YES = "yes"
    NO = "no"
    GONE = "gone"  # GitHub refused the token, or took back what this session was let into


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
        sessions: Sessions | None = None,
        *,
        access_ttl_s: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ):
        if oauth is not None and sessions is None:
            raise ValueError("signing viewers in needs the store's sessions")
        self._app = app
        self._session = session
        self._oauth = oauth
        self._sessions = sessions
        self._sealer = Sealer(oauth.client_secret) if oauth is not None else None
        self._secure = oauth is not None and oauth.public_url.startswith("https://")
        self._public = TimedCache(access_ttl_s, clock)
        self._access = TimedCache(access_ttl_s, clock)
        # (session key, repository) pairs GitHub let a session into: when a later check says no,
        # the access was taken back and the session ends (a bounded set; lost entries only mean a
        # 404 instead of ending the session).
        self._granted: set[tuple[str, str]] = set()

    async def __call__(self, request: web.Request, repository: str) -> web.StreamResponse | None:
        if not REPOSITORY.match(repository):
            return await self.unseen(request)
        if await self._is_public(repository):
            return None
        viewer = await self.viewer(request)
        if viewer is None:
            return self._anonymous(request)
        access = await self._can_read(viewer, repository)
        if access is Access.YES:
            return None
        if access is Access.GONE and viewer.session_id is not None and self._sessions is not None:
            await self._sessions.end(viewer.session_id, viewer.login, why="access gone")
            return self._anonymous(request)
        return _not_found()

    async def unseen(self, request: web.Request) -> web.StreamResponse:
        """The one answer for whatever is not shown, there or not: a function of the request
        alone (anonymous: sign in first, if sign-in is set up; anyone else: 404)."""
        return self._anonymous(request) if await self.viewer(request) is None else _not_found()

    def _anonymous(self, request: web.Request) -> web.StreamResponse:
        if self._oauth is None:
            return _not_found()  # no sign-in set up: private pages are shown to nobody
        response = _redirect(f"/login?{urlencode({'next': request.path_qs})}")
        if SESSION_COOKIE in request.cookies:
            response.del_cookie(SESSION_COOKIE, path="/")  # it names no session any more
        return response

    async def viewer(self, request: web.Request) -> Viewer | None:
        """The signed-in viewer (the session cookie, naming a session the store still holds), or
        a program sending its user's GitHub token (``Authorization: Bearer …``, as ``paritybot
        repro`` does); None for anyone else."""
        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        token = token.strip()
        if scheme.lower() in ("bearer", "token") and token:
            # Never stored nor logged: it only asks GitHub whether its user may read the repository.
            return Viewer(f"token:{hashlib.sha256(token.encode()).hexdigest()[:16]}", token)
        data = self._sealed_session(request)
        if data is None or self._sessions is None:
            return None
        login, token, session_id = data
        if not await self._sessions.check(session_id, login):
            return None
        return Viewer(login, token, session_id)

    def _sealed_session(self, request: web.Request) -> tuple[str, str, str] | None:
        """(login, token, session id) from an intact cookie of this service, not yet checked."""
        if self._sealer is None:
            return None
        data = self._sealer.open(request.cookies.get(SESSION_COOKIE), SESSION_TTL_S)
        if data is None:
            return None
        fields = data.get("login"), data.get("token"), data.get("sid")
        if not all(isinstance(f, str) and f for f in fields):
            return None  # a cookie of an older release names no session: sign in again
        return str(fields[0]), str(fields[1]), str(fields[2])

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

    async def _can_read(self, viewer: Viewer, repository: str) -> Access:
        key = (viewer.login.lower(), repository.lower())
        granted = (session_key(viewer.session_id), repository.lower()) if viewer.session_id else None
        known = self._access.get(key)
        if known is not None:
            return Access.YES if known else Access.NO
        try:
            # GitHub shows a repository to a user's token only when that user can read it (and
            # the App is installed there); otherwise 404.
            await self._app.as_viewer(viewer.token).getitem(f"/repos/{repository}")
        except RateLimitExceeded:
            return Access.NO  # the viewer's own budget is spent: not an answer about access
        except BadRequest as exc:  # 404 (no access), 403, 401 (a revoked or expired token)
            status = int(exc.status_code)
            log.info("viewer has no access", login=viewer.login, repo=repository, status=status)
            if status == 401 or granted in self._granted:
                if granted is not None:
                    self._granted.discard(granted)
                return Access.GONE  # not remembered: each session finds out for itself
            self._access.put(key, False)
            return Access.NO
        except (GitHubException, RateLimitedError, aiohttp.ClientError):
            return Access.NO  # GitHub failed to answer: not remembered, asked again next time
        self._access.put(key, True)
        if granted is not None:
            if len(self._granted) >= 10_000:
                self._granted.clear()
            self._granted.add(granted)
        return Access.YES

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
        if self._oauth is None or self._sealer is None or self._sessions is None:
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
        login = str(user["login"])
        session_id = await self._sessions.start(login)
        response = _redirect(safe_next(str(expected.get("next"))))
        sealed = self._sealer.seal({"login": login, "token": token, "sid": session_id})
        self._cookie(response, SESSION_COOKIE, sealed, SESSION_TTL_S, path="/")
        response.del_cookie(STATE_COOKIE, path="/oauth")
        log.info("viewer signed in", login=login)
        return response

    async def logout(self, request: web.Request) -> web.StreamResponse:
        """Ends the session on the server and revokes its token at GitHub: the cookie, kept or
        copied, is no session afterwards, and the token inside it opens nothing at GitHub."""
        response = _redirect("/")
        response.del_cookie(SESSION_COOKIE, path="/")
        sealed = self._sealed_session(request)
        if sealed is None or self._oauth is None or self._sessions is None:
            return response
        login, token, session_id = sealed
        await self._sessions.end(session_id, login, why="signed out")
        if await self._oauth.revoke(self._session, self._app.api_url, token):
            log.info("viewer token revoked", login=login)
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
