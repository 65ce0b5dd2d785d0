"""GitHub App authentication and API clients.

The App signs a JWT with its private key, trades it for an installation token, and uses that
token for everything it does in a repository. Tokens live an hour; we cache each one until five
minutes before it expires, so a busy PR does not cost a token request per API call.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from datetime import datetime
from typing import Any

import aiohttp
import structlog
from gidgethub import apps
from gidgethub.aiohttp import GitHubAPI

from bot.service.logs import register_secret

log = structlog.get_logger(__name__)

USER_AGENT = "paritybot"
REFRESH_MARGIN_S = 300


# Requests that may be sent again without doing anything twice; a POST (a comment, a check run)
# may have been carried out before its connection failed, so it is never repeated.
RETRYABLE_METHODS = frozenset({"GET", "PATCH", "PUT", "DELETE"})
RETRYABLE_STATUSES = frozenset({502, 503, 504})
RETRY_DELAYS_S = (0.5, 2.0)


class RetryingGitHubAPI(GitHubAPI):
    """gidgethub's client, retrying idempotent requests after a gateway error or a dropped connection.

    GitHub answers 502/503/504 now and then under load; a run's result must not be lost to one.
    """

    async def _request(
        self, method: str, url: str, headers: Mapping[str, str], body: bytes = b""
    ) -> tuple[int, Mapping[str, str], bytes]:
        retryable = method.upper() in RETRYABLE_METHODS
        for delay in (*RETRY_DELAYS_S, None):
            try:
                status, response_headers, data = await super()._request(method, url, headers, body)
            except aiohttp.ClientConnectionError:
                if not retryable or delay is None:
                    raise
                log.warning("GitHub connection failed; retrying", method=method, delay_s=delay)
            else:
                if not (retryable and status in RETRYABLE_STATUSES) or delay is None:
                    return status, response_headers, data
                log.warning(
                    "GitHub answered a gateway error; retrying", method=method, status=status, delay_s=delay
                )
            await self.sleep(delay)
        raise AssertionError("unreachable")


class GitHubApp:
    """One GitHub App: its JWT, its installations' tokens, and clients that use them."""

    def __init__(
        self,
        session: aiohttp.ClientSession,
        app_id: int,
        private_key: str,
        api_url: str = "https://api.github.com",
        clock: Any = time.time,
    ):
        self._session = session
        self.app_id = app_id
        self._private_key = private_key
        self.api_url = api_url.rstrip("/")
        self._clock = clock
        self._tokens: dict[int, tuple[str, float]] = {}
        self._locks: dict[int, asyncio.Lock] = {}
        self._slug: str | None = None

    def _api(self, token: str | None = None) -> GitHubAPI:
        return RetryingGitHubAPI(self._session, USER_AGENT, oauth_token=token, base_url=self.api_url)

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

    async def client(self, installation_id: int) -> GitHubAPI:
        return self._api(await self.installation_token(installation_id))
