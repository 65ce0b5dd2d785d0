"""The aiohttp application: `POST /webhook` and `GET /healthz`.

The webhook handler checks, commits the delivery to the store and answers; it never runs work
inside the request. A 202 means the delivery is committed (or was already: a redelivery).
`/healthz` answers 200 while every loop of the service runs, and 503 naming those that do not.

A body that does not arrive — its sender went away, or trickles it slower than
:class:`bot.service.http_limits.ServerLimits` allows — is one log line (``delivery body
abandoned``), never a traceback: it is the sender's failure, and GitHub redelivers.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import structlog
from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from bot.core.release import VERSION
from bot.service.http_limits import LIMITS_KEY, ServerLimits, limited_app
from bot.service.intake import MAX_BODY_BYTES, IntakeError, accept, check_transport
from bot.service.metrics import Metrics
from bot.service.store.protocol import Store

log = structlog.get_logger(__name__)


class Abandoned(Exception):
    """The body did not arrive: ``status`` is the answer (None: nobody is left to answer)."""

    def __init__(self, status: int | None, reason: str):
        super().__init__(reason)
        self.status = status


STORE_KEY = web.AppKey("store", Store)
SECRET_KEY = web.AppKey("secret", str)
ON_RECORDED_KEY: web.AppKey[Callable[[], None]] = web.AppKey("on_recorded")
LOOPS_DOWN_KEY: web.AppKey[Callable[[], list[str]]] = web.AppKey("loops_down")
METRICS_KEY = web.AppKey("metrics", Metrics)


async def webhook(request: web.Request) -> web.Response:
    try:
        check_transport(request.headers)
        body = await _read_body(request)
        delivery = accept(request.headers, body, request.app[SECRET_KEY])
    except IntakeError as exc:
        _count(request, "refused")
        return _rejected(request, exc.status, str(exc))
    except Abandoned as exc:
        _count(request, "abandoned")
        log.warning(
            "delivery body abandoned",
            reason=str(exc),
            delivery_id=request.headers.get("X-GitHub-Delivery", "")[:128],
            github_event=request.headers.get("X-GitHub-Event", "")[:64],
            length=request.content_length,
        )
        # No keep-alive: what is left of the body would be read as the next request.
        response = web.json_response({"error": str(exc)}, status=exc.status or 400)
        response.force_close()
        return response
    if delivery.event == "ping":
        return web.json_response({"ok": True, "zen": "pong"})
    try:
        # One committed INSERT; a redelivery is dropped by its delivery id in the same statement.
        # In a thread: the commit waits for the disk, the event loop must not.
        new = await asyncio.to_thread(
            request.app[STORE_KEY].record_delivery, delivery.delivery_id, delivery.event, delivery.body
        )
    except Exception:
        log.exception("delivery not recorded", delivery_id=delivery.delivery_id)
        _count(request, "unrecorded")
        return web.json_response({"error": "could not record the delivery; redeliver it"}, status=503)
    _count(request, "accepted" if new else "redelivered")
    if new:
        request.app[ON_RECORDED_KEY]()
    return web.Response(status=202, text="accepted")


def _count(request: web.Request, outcome: str) -> None:
    request.app[METRICS_KEY].deliveries.labels(outcome).inc()


async def _read_body(request: web.Request) -> bytes:
    """The body, read only up to the size limit (aiohttp stops at ``client_max_size``) and
    within the time limit."""
    limit = request.app[LIMITS_KEY].body_timeout_s
    try:
        async with asyncio.timeout(limit):
            return await request.read()
    except TimeoutError:
        raise Abandoned(408, f"the body did not arrive within {limit:g} s") from None
    except ConnectionResetError:  # the sender closed the connection before the body's end
        raise Abandoned(None, "the connection closed before the body's end") from None
    except web.HTTPRequestEntityTooLarge:
        raise IntakeError(413, f"body over {MAX_BODY_BYTES} bytes") from None
    except HttpProcessingError as exc:  # a malformed chunked body, seen after the handler started
        raise IntakeError(400, f"malformed body: {str(exc.message)[:120]}") from None


def _rejected(request: web.Request, status: int, reason: str) -> web.Response:
    log.warning(
        "delivery rejected",
        status=status,
        reason=reason,
        delivery_id=request.headers.get("X-GitHub-Delivery", "")[:128],
    )
    return web.json_response({"error": reason}, status=status)


async def healthz(request: web.Request) -> web.Response:
    down = request.app[LOOPS_DOWN_KEY]()
    if down:
        return web.json_response({"status": "unhealthy", "loops_down": down, "version": VERSION}, status=503)
    return web.json_response({"status": "ok", "version": VERSION})


def create_web_app(
    secret: str,
    store: Store,
    on_recorded: Callable[[], None] = lambda: None,
    loops_down: Callable[[], list[str]] = list,
    metrics: Metrics | None = None,
    limits: ServerLimits | None = None,
) -> web.Application:
    """The HTTP side only; ``on_recorded`` is called after each new delivery is committed,
    ``loops_down`` names the service's loops that are not running (for /healthz), ``limits``
    how long a client may take (:mod:`bot.service.http_limits`)."""
    if not secret:
        raise ValueError("a webhook secret is required")
    # Bodies are never decoded by the server: a coded one is refused before it is read.
    app = limited_app(
        limits or ServerLimits(), client_max_size=MAX_BODY_BYTES, handler_args={"auto_decompress": False}
    )
    app[SECRET_KEY] = secret
    app[STORE_KEY] = store
    app[ON_RECORDED_KEY] = on_recorded
    app[LOOPS_DOWN_KEY] = loops_down
    app[METRICS_KEY] = metrics or Metrics()
    app.router.add_post("/webhook", webhook)
    app.router.add_get("/healthz", healthz)
    return app
