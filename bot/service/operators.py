"""The operators' pages: `/status` (HTML) and `/metrics` (Prometheus), not public by default.

They answer a request that carries the operators' token — ``Authorization: Bearer TOKEN`` (what
Prometheus sends with ``bearer_token_file``) or HTTP Basic with the token as the password (what a
browser asks for) — and 404 to anyone else, as if they did not exist. With no token set they
answer nobody, unless ``PARITYBOT_OPERATOR_PAGES_PUBLIC=true`` opens them (deploy/README.md).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hmac
from dataclasses import dataclass

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from bot.core.release import VERSION
from bot.service import pages
from bot.service.metrics import Metrics
from bot.service.store.protocol import Store

RECENT_RUNS = 30


@dataclass(frozen=True)
class OperatorAccess:
    token: str | None
    public: bool = False

    def allows(self, request: web.Request) -> bool:
        if self.public:
            return True
        if not self.token:
            return False
        offered = _credential(request.headers.get("Authorization", ""))
        return offered is not None and hmac.compare_digest(offered.encode(), self.token.encode())

    def refusal(self, request: web.Request) -> web.Response:
        if self.token and "Authorization" not in request.headers:
            # A browser asks its user for the token (as the password) when told how.
            return web.Response(
                status=401,
                text="Unauthorized",
                headers={"WWW-Authenticate": 'Basic realm="paritybot operators"'},
            )
        return web.Response(status=404, text="Not Found")


def _credential(header: str) -> str | None:
    scheme, _, value = header.partition(" ")
    if scheme.lower() == "bearer":
        return value.strip()
    if scheme.lower() == "basic":
        try:
            return base64.b64decode(value.strip(), validate=True).decode().partition(":")[2]
        except (binascii.Error, UnicodeDecodeError):
            return None
    return None


class OperatorPages:
    def __init__(self, store: Store, metrics: Metrics, access: OperatorAccess, *, github_url: str, mode: str):
        self._store = store
        self._metrics = metrics
        self._access = access
        self._github_url = github_url
        self._mode = mode

    def add_routes(self, router: web.UrlDispatcher) -> None:
        router.add_get("/metrics", self.metrics)
        router.add_get("/status", self.status)

    async def metrics(self, request: web.Request) -> web.Response:
        if not self._access.allows(request):
            return self._access.refusal(request)
        body = await asyncio.to_thread(generate_latest, self._metrics.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def status(self, request: web.Request) -> web.Response:
        if not self._access.allows(request):
            return self._access.refusal(request)
        view = await asyncio.to_thread(self._store.overview, RECENT_RUNS)
        return pages.render(
            "status.html", view=view, github_url=self._github_url, version=VERSION, mode=self._mode
        )
