"""The aiohttp application: `POST /webhook` and `GET /healthz`.

The webhook handler verifies, records and answers; it never runs work inside the request.
"""

from __future__ import annotations

import structlog
from aiohttp import web

from bot.delivery_log import DeliveryLog
from bot.intake import MAX_BODY_BYTES, IntakeError, check_delivery

log = structlog.get_logger(__name__)

DELIVERY_LOG_KEY = web.AppKey("delivery_log", DeliveryLog)
SECRET_KEY = web.AppKey("secret", bytes)


async def webhook(request: web.Request) -> web.Response:
    body = await request.read()
    try:
        delivery = check_delivery(request.headers, body, request.app[SECRET_KEY])
    except IntakeError as exc:
        log.warning(
            "delivery rejected",
            status=exc.status,
            reason=str(exc),
            delivery_id=request.headers.get("X-GitHub-Delivery"),
        )
        return web.json_response({"error": str(exc)}, status=exc.status)
    if delivery.event == "ping":
        return web.json_response({"ok": True, "zen": "pong"})
    try:
        await request.app[DELIVERY_LOG_KEY].record(delivery.delivery_id, delivery.event, delivery.body)
    except Exception:
        log.exception("delivery not recorded", delivery_id=delivery.delivery_id)
        return web.json_response({"error": "could not record the delivery; redeliver it"}, status=503)
    # A redelivery is acknowledged too; the store drops it by its delivery id before dispatch.
    return web.Response(status=202, text="accepted")


async def healthz(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


def create_web_app(secret: bytes, delivery_log: DeliveryLog) -> web.Application:
    """The HTTP side only; the caller starts and stops the log and the background workers."""
    if not secret:
        raise ValueError("a webhook secret is required")
    app = web.Application(client_max_size=MAX_BODY_BYTES)
    app[SECRET_KEY] = secret
    app[DELIVERY_LOG_KEY] = delivery_log
    app.router.add_post("/webhook", webhook)
    app.router.add_get("/healthz", healthz)
    return app
