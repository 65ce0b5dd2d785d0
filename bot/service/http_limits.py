"""How long `serve` waits for a client, and how many clients may keep it waiting at once.

aiohttp on its own waits about an hour for a request's headers and has no limit on connections
that have not sent one, so a few dozen connections trickling a byte now and then (slowloris) stay
open as long as their sender likes. The limits, the same for the set-up page and the service:

- ``header_timeout_s`` (10 s): from a connection's start, or the end of its last answer, to the
  complete headers of its next request; past it the connection is closed. It is aiohttp's
  keep-alive timer, which closes a connection still waiting for a request (so an idle keep-alive
  connection is closed after the same time; a request being answered — a live log — never is).
- ``body_timeout_s`` (15 s): a webhook's whole body (GitHub gives up on an answer after 10 s
  anyway); past it, 408 and one log line (:mod:`bot.service.web`).
- ``max_waiting`` (32): connections waiting for a request at once; one more closes the one that
  has waited longest, so a flood of slow connections cannot crowd out clients that send their
  request at once.
- ``lingering_s`` (2 s): how long an unread body is drained after the answer before closing.

:func:`longest_waiting` is the decision, pure; :class:`ConnectionGuard` keeps the count (each
connection passes through :class:`GuardedSite`; a middleware says when a request starts and ends).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import structlog
from aiohttp import web

log = structlog.get_logger(__name__)

K = TypeVar("K")
LOG_EVERY_S = 60.0  # closing slow connections is logged once a minute at most, with the count


@dataclass(frozen=True)
class ServerLimits:
    header_timeout_s: float = 10.0
    body_timeout_s: float = 15.0
    max_waiting: int = 32
    lingering_s: float = 2.0

    def handler_args(self) -> dict[str, Any]:
        """What aiohttp's request handler is given (``web.Application(handler_args=…)``)."""
        return {"keepalive_timeout": self.header_timeout_s, "lingering_time": self.lingering_s}


def longest_waiting(waiting: Mapping[K, float], limit: int) -> list[K]:
    """The connections to close so that at most ``limit`` wait: those waiting since longest."""
    excess = len(waiting) - limit
    if excess <= 0:
        return []
    return sorted(waiting, key=lambda k: waiting[k])[:excess]


class ConnectionGuard:
    """Which connections wait for a request, and since when; closes the longest-waiting beyond the
    limit. Connections are known by their aiohttp request handler (``request.protocol``)."""

    def __init__(self, max_waiting: int, clock: Callable[[], float] = time.monotonic):
        self.max_waiting = max_waiting
        self._clock = clock
        self._open: dict[object, asyncio.BaseTransport] = {}
        self._waiting: dict[object, float] = {}
        self._closed = 0
        self._logged_at: float | None = None

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    def wrap(self, handler: asyncio.Protocol) -> asyncio.Protocol:
        return _Watched(handler, self)

    def connected(self, handler: object, transport: asyncio.BaseTransport) -> None:
        self._open[handler] = transport
        self._wait(handler)

    def disconnected(self, handler: object) -> None:
        self._open.pop(handler, None)
        self._waiting.pop(handler, None)

    def request_started(self, handler: object) -> None:
        self._waiting.pop(handler, None)

    def request_ended(self, handler: object) -> None:
        if handler in self._open:  # kept alive: it waits for its next request now
            self._wait(handler)

    def _wait(self, handler: object) -> None:
        self._waiting[handler] = self._clock()
        for slow in longest_waiting(self._waiting, self.max_waiting):
            self._waiting.pop(slow, None)
            transport = self._open.pop(slow, None)
            if transport is not None:
                transport.close()
                self._closed += 1
        self._log_closed()

    def _log_closed(self) -> None:
        now = self._clock()
        if self._closed and (self._logged_at is None or now - self._logged_at >= LOG_EVERY_S):
            log.warning(
                "slow connections closed",
                count=self._closed,
                waiting=len(self._waiting),
                limit=self.max_waiting,
                why="more connections waited for a request than the limit",
            )
            self._closed, self._logged_at = 0, now

    @web.middleware
    async def middleware(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        connection = request.protocol
        self.request_started(connection)
        try:
            return await handler(request)
        finally:
            self.request_ended(connection)


class _Watched(asyncio.Protocol):
    """aiohttp's request handler for one connection, passed through as is; the guard is told when
    the connection opens and closes."""

    def __init__(self, inner: asyncio.Protocol, guard: ConnectionGuard):
        self._inner = inner
        self._guard = guard

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._inner.connection_made(transport)
        self._guard.connected(self._inner, transport)

    def connection_lost(self, exc: Exception | None) -> None:
        self._guard.disconnected(self._inner)
        self._inner.connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        self._inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self._inner.eof_received()

    def pause_writing(self) -> None:
        self._inner.pause_writing()

    def resume_writing(self) -> None:
        self._inner.resume_writing()


GUARD_KEY = web.AppKey("connection_guard", ConnectionGuard)
LIMITS_KEY = web.AppKey("server_limits", ServerLimits)


def limited_app(limits: ServerLimits, **kwargs: Any) -> web.Application:
    """A web application with ``limits``: its handler's timeouts and the guard's middleware.
    ``handler_args`` in ``kwargs`` are added to the limits' own."""
    guard = ConnectionGuard(limits.max_waiting)
    handler_args = limits.handler_args() | kwargs.pop("handler_args", {})
    app = web.Application(middlewares=[guard.middleware], handler_args=handler_args, **kwargs)
    app[GUARD_KEY] = guard
    app[LIMITS_KEY] = limits
    return app


class GuardedSite(web.BaseSite):
    """A TCP site whose every connection passes the application's guard (the guard of
    :func:`limited_app`; an application without one is served as by ``web.TCPSite``)."""

    def __init__(self, runner: web.AppRunner, host: str, port: int):
        super().__init__(runner)
        self._host, self._port = host, port
        self._guard = runner.app.get(GUARD_KEY)
        self._listening: asyncio.Server | None = None

    @property
    def name(self) -> str:
        return f"http://{self._host}:{self.port}"

    @property
    def port(self) -> int:
        if self._listening is not None and self._listening.sockets:
            return int(self._listening.sockets[0].getsockname()[1])
        return self._port

    async def start(self) -> None:
        await super().start()
        server, guard = self._runner.server, self._guard
        assert server is not None
        factory: Callable[[], asyncio.Protocol] = server
        if guard is not None:
            factory = lambda: guard.wrap(server())  # noqa: E731
        loop = asyncio.get_running_loop()
        self._listening = await loop.create_server(factory, self._host, self._port, backlog=self._backlog)
        self._server = self._listening  # what BaseSite.stop() closes
