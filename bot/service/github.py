"""GitHub App authentication and API clients.

The App signs a JWT with its private key, trades it for an installation token, and uses that
token for everything it does in a repository. Tokens live an hour; we cache each one until five
minutes before it expires, so a busy PR does not cost a token request per API call.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from email.utils import parsedate_to_datetime
from typing import Any

import aiohttp
import stamina
import structlog
from gidgethub import GitHubBroken, apps
from gidgethub.aiohttp import GitHubAPI

from bot.service.logs import register_secret

log = structlog.get_logger(__name__)

USER_AGENT = "paritybot"
REFRESH_MARGIN_S = 300

# Requests that may be sent again without doing anything twice. A POST (a comment, a check run)
# may have been carried out before its answer was lost, so a gateway error never repeats it here:
# the reporter makes each creation safe to retry (it looks for what it created before it creates
# again). Any request refused by a rate limit was not carried out, so it is sent again, POST too.
IDEMPOTENT_METHODS = frozenset({"GET", "PATCH", "PUT", "DELETE"})
SERVER_ERRORS = frozenset({500, 502, 503, 504})


@dataclass(frozen=True)
class RetryPolicy:
    """How long to keep trying one request (stamina: exponential backoff with jitter)."""

    attempts: int = 5
    timeout_s: float = 120.0
    wait_initial_s: float = 0.5
    wait_max_s: float = 30.0
    wait_jitter_s: float = 1.0
    rate_limit_wait_s: float = 60.0
    """GitHub: after a secondary rate limit that names no time, wait at least a minute."""
    max_wait_s: float = 300.0
    """A limit that lasts longer is not waited out in line: the request fails now, nothing is sent
    until the limit ends, and the reconciler sends what is due afterwards."""


def _header(headers: Mapping[str, str], name: str) -> str | None:
    value = headers.get(name)
    if value is None:  # a plain dict in tests; aiohttp's headers are case-insensitive already
        value = next((v for k, v in headers.items() if k.lower() == name), None)
    return value


def rate_limit_wait(
    status: int, headers: Mapping[str, str], body: bytes, now: float, policy: RetryPolicy
) -> float | None:
    """How long GitHub asks us to wait before the next request, when ``status`` is a rate limit;
    None when it is not one (a 403 for a missing permission is an answer, not a limit).

    As GitHub documents it: ``retry-after`` seconds when given; else, with no requests left
    (``x-ratelimit-remaining: 0``), until ``x-ratelimit-reset``; else, for a secondary limit, at
    least a minute.
    """
    if status not in (403, 429):
        return None
    retry_after = _header(headers, "retry-after")
    if retry_after is not None:
        try:
            return max(0.0, float(retry_after))
        except ValueError:
            with contextlib.suppress(TypeError, ValueError):
                return max(0.0, parsedate_to_datetime(retry_after).timestamp() - now)
    reset = _header(headers, "x-ratelimit-reset")
    if _header(headers, "x-ratelimit-remaining") == "0" and reset is not None and reset.isdigit():
        return max(0.0, int(reset) - now) + 1.0  # the reset second itself, rounded down
    if status == 429 or b"rate limit" in body.lower():
        return policy.rate_limit_wait_s
    return None


class _Retry(Exception):
    """An attempt to try again; ``wait`` is GitHub's own delay, None for the backoff's."""

    def __init__(self, response: tuple[int, Mapping[str, str], bytes] | None, wait: float | None):
        super().__init__()
        self.response = response
        self.wait = wait


class RateGate:
    """GitHub's rate limits hold for the whole App: once one answer says wait, no request goes out
    until that time has passed, whichever client sends it."""

    def __init__(self, clock: Callable[[], float] = time.time):
        self._clock = clock
        self._until = 0.0
        self._warned_reset: str | None = None
        # Told of every answer (None: none came), with its headers in lower case: the metrics.
        self.on_response: Callable[[str, int | None, Mapping[str, str]], None] | None = None

    def observe(self, method: str, status: int | None, headers: Mapping[str, str]) -> None:
        if self.on_response is not None:
            self.on_response(method, status, {k.lower(): v for k, v in headers.items()})

    def hold(self, seconds: float) -> None:
        self._until = max(self._until, self._clock() + seconds)

    def remaining_s(self) -> float:
        return max(0.0, self._until - self._clock())

    def note_budget(self, headers: Mapping[str, str]) -> None:
        """Log what is left of the hourly budget; a warning once per window when under a tenth."""
        remaining, limit = _header(headers, "x-ratelimit-remaining"), _header(headers, "x-ratelimit-limit")
        if remaining is None or limit is None or not (remaining.isdigit() and limit.isdigit()):
            return
        reset = _header(headers, "x-ratelimit-reset")
        resource = _header(headers, "x-ratelimit-resource") or "core"
        if int(remaining) * 10 < int(limit) and reset != self._warned_reset:
            self._warned_reset = reset
            log.warning(
                "GitHub rate budget low",
                remaining=int(remaining),
                limit=int(limit),
                resource=resource,
                reset=reset,
            )
        else:
            log.debug("GitHub rate budget", remaining=int(remaining), limit=int(limit), resource=resource)


# What a caller-level retry waits for: an answer lost on the way (a server error or a dropped
# connection). A POST may have been carried out all the same: retry only what is safe to repeat.
LOST_ANSWERS = (GitHubBroken, aiohttp.ClientConnectionError)


def retrying(policy: RetryPolicy) -> Any:
    """stamina's retry context for a request the caller made safe to repeat."""
    return stamina.retry_context(
        on=LOST_ANSWERS,
        attempts=policy.attempts,
        timeout=policy.timeout_s,
        wait_initial=policy.wait_initial_s,
        wait_max=policy.wait_max_s,
        wait_jitter=policy.wait_jitter_s,
    )


class RetryingGitHubAPI(GitHubAPI):
    """gidgethub's client, trying a request again as GitHub asks: after a rate limit (any method,
    after the time GitHub names), and after a server error or a dropped connection (idempotent
    methods only), with exponential backoff and jitter.
    """

    def __init__(self, *args: Any, policy: RetryPolicy, gate: RateGate, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._policy = policy
        self._gate = gate

    async def _request(
        self, method: str, url: str, headers: Mapping[str, str], body: bytes = b""
    ) -> tuple[int, Mapping[str, str], bytes]:
        p = self._policy
        try:
            async for attempt in stamina.retry_context(
                on=self._backoff,
                attempts=p.attempts,
                timeout=p.timeout_s,
                wait_initial=p.wait_initial_s,
                wait_max=p.wait_max_s,
                wait_jitter=p.wait_jitter_s,
            ):
                with attempt:
                    return await self._attempt(method, url, headers, body)
        except _Retry as exc:
            if exc.response is None:
                raise exc.__cause__ or exc from None
            return exc.response  # the last answer: gidgethub raises what it means
        raise AssertionError("unreachable")

    async def _attempt(
        self, method: str, url: str, headers: Mapping[str, str], body: bytes
    ) -> tuple[int, Mapping[str, str], bytes]:
        waiting = self._gate.remaining_s()
        if waiting > self._policy.max_wait_s:
            raise RateLimitedError(waiting)
        if waiting:
            await self.sleep(waiting)
        idempotent = method.upper() in IDEMPOTENT_METHODS
        try:
            status, response_headers, data = await super()._request(method, url, headers, body)
        except aiohttp.ClientConnectionError as exc:
            self._gate.observe(method, None, {})
            if not idempotent:
                raise
            log.warning("GitHub connection failed", method=method, error=str(exc)[:200])
            raise _Retry(None, None) from exc
        self._gate.observe(method, status, response_headers)
        self._gate.note_budget(response_headers)
        wait = rate_limit_wait(status, response_headers, data, time.time(), self._policy)
        if wait is not None:
            self._gate.hold(wait)
            log.warning("GitHub rate limit", method=method, status=status, wait_s=round(wait, 1))
            if wait > self._policy.max_wait_s:
                return status, response_headers, data  # not waited out in line (see RetryPolicy)
            raise _Retry((status, response_headers, data), wait)
        if idempotent and status in SERVER_ERRORS:
            log.warning("GitHub answered a server error", method=method, status=status)
            raise _Retry((status, response_headers, data), None)
        return status, response_headers, data

    @staticmethod
    def _backoff(exc: BaseException) -> bool | float:
        if not isinstance(exc, _Retry):
            return False
        return exc.wait if exc.wait is not None else True


class RateLimitedError(Exception):
    """GitHub asked for a pause longer than a request waits in line; nothing was sent."""

    def __init__(self, seconds: float):
        super().__init__(f"GitHub's rate limit holds requests for {seconds:.0f} s more")
        self.seconds = seconds


class GitHubApp:
    """One GitHub App: its JWT, its installations' tokens, and clients that use them."""

    def __init__(
        self,
        session: aiohttp.ClientSession,
        app_id: int,
        private_key: str,
        api_url: str = "https://api.github.com",
        clock: Any = time.time,
        retry: RetryPolicy | None = None,
    ):
        self._session = session
        self.app_id = app_id
        self._private_key = private_key
        self.api_url = api_url.rstrip("/")
        self._clock = clock
        self._tokens: dict[int, tuple[str, float]] = {}
        self._locks: dict[int, asyncio.Lock] = {}
        self._slug: str | None = None
        self.retry = retry or RetryPolicy()
        self.gate = RateGate(clock)

    def _api(self, token: str | None = None, gate: RateGate | None = None) -> GitHubAPI:
        return RetryingGitHubAPI(
            self._session,
            USER_AGENT,
            oauth_token=token,
            base_url=self.api_url,
            policy=self.retry,
            gate=gate or self.gate,
        )

    def api(self) -> GitHubAPI:
        """A client without a token: the App's JWT is passed per call."""
        return self._api()

    def as_viewer(self, token: str) -> GitHubAPI:
        """A client with a viewer's own token (the App's user authorization). Its rate limit is the
        viewer's, not the App's: it neither holds the App's requests nor counts in its metrics."""
        return self._api(token, RateGate(self._clock))

    def jwt(self) -> str:
        return apps.get_jwt(app_id=str(self.app_id), private_key=self._private_key)

    async def slug(self) -> str:
        """The App's slug; its comments are authored by ``<slug>[bot]``."""
        if self._slug is None:
            data = await self._api().getitem("/app", jwt=self.jwt())
            self._slug = str(data["slug"])
        return self._slug

    async def bot_login(self) -> str:
        return f"{await self.slug()}[bot]"

    async def installation_token(self, installation_id: int) -> str:
        lock = self._locks.setdefault(installation_id, asyncio.Lock())
        async with lock:
            cached = self._tokens.get(installation_id)
            if cached and cached[1] - REFRESH_MARGIN_S > self._clock():
                return cached[0]
            # A token more is harmless: asking again after a lost answer is safe.
            async for attempt in retrying(self.retry):
                with attempt:
                    data = await apps.get_installation_access_token(
                        self._api(),
                        installation_id=str(installation_id),
                        app_id=str(self.app_id),
                        private_key=self._private_key,
                    )
            token = str(data["token"])
            expires = datetime.fromisoformat(str(data["expires_at"]).replace("Z", "+00:00")).timestamp()
            register_secret(token)
            self._tokens[installation_id] = (token, expires)
            log.info("installation token issued", installation_id=installation_id)
            return token

    async def repository_token(self, installation_id: int, repo: str) -> tuple[str, datetime]:
        """A new token for one repository (``owner/name``) with read-only contents: what an agent
        needs to clone it, and nothing more. Never cached: one per run, handed to its agent."""
        data = await self._api().post(
            f"/app/installations/{installation_id}/access_tokens",
            data={"repositories": [repo.split("/", 1)[1]], "permissions": {"contents": "read"}},
            jwt=self.jwt(),
        )
        token = str(data["token"])
        register_secret(token)
        expires = datetime.fromisoformat(str(data["expires_at"]).replace("Z", "+00:00"))
        log.info("clone token issued", installation_id=installation_id, repo=repo)
        return token, expires

    async def client(self, installation_id: int) -> GitHubAPI:
        return self._api(await self.installation_token(installation_id))
