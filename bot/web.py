"""The aiohttp application: `POST /webhook` and `GET /healthz`.

The webhook handler verifies, records and answers; it never runs work inside the request.
"""

from __future__ import annotations

import structlog
from aiohttp import web

from bot.delivery_log import DeliveryLog, Outcome
from bot.intake import (
    MAX_BODY_BYTES,
    IntakeError,
    check_delivery,
    check_headers,
    is_form_encoded,
    verify_signature,
)

log = structlog.get_logger(__name__)

DELIVERY_LOG_KEY = web.AppKey("delivery_log", DeliveryLog)
SECRET_KEY = web.AppKey("secret", bytes)


async def webhook(request: web.Request) -> web.Response:
    body = await request.read()
    headers, secret = request.headers, request.app[SECRET_KEY]
    signature = headers.get("X-Hub-Signature-256")
    verified = False
    try:
        delivery = check_headers(headers, body)
        if delivery.event == "ping" or is_form_encoded(headers):
            # Rare deliveries: verified here, before anything else is said about them.
            delivery = check_delivery(headers, body, secret)
            verified = True
    except IntakeError as exc:
        # An unsigned request learns nothing about what else is wrong with it.
        status = exc.status if verify_signature(body, signature, secret) else 401
        return _rejected(request, status, str(exc) if status != 401 else SIGNATURE_ERROR)
    if delivery.event == "ping":
        return web.json_response({"ok": True, "zen": "pong"})
    if not verified and (signature is None or not signature.startswith("sha256=")):
        return _rejected(request, 401, SIGNATURE_ERROR)
    try:
        # The log's writer process checks the signature and the JSON, beside this loop, and
        # appends only what passes both.
        outcome = await request.app[DELIVERY_LOG_KEY].record(
            delivery.delivery_id, delivery.event, delivery.body, signature=None if verified else signature
        )
    except Exception:
        log.exception("delivery not recorded", delivery_id=delivery.delivery_id)
        return web.json_response({"error": "could not record the delivery; redeliver it"}, status=503)
    if outcome == Outcome.BAD_SIGNATURE:
        return _rejected(request, 401, SIGNATURE_ERROR)
    if outcome == Outcome.NOT_JSON:
        return _rejected(request, 400, "body is not a JSON object")
    # A redelivery is acknowledged too; the store drops it by its delivery id before dispatch.
    return web.Response(status=202, text="accepted")


SIGNATURE_ERROR = "missing or invalid X-Hub-Signature-256"


def _rejected(request: web.Request, status: int, reason: str) -> web.Response:
    log.warning(
        "delivery rejected",
        status=status,
        reason=reason,
        delivery_id=request.headers.get("X-GitHub-Delivery"),
    )
    return web.json_response({"error": reason}, status=status)


async def healthz(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


def create_web_app(secret: bytes, delivery_log: DeliveryLog) -> web.Application:
    """The HTTP side only; the caller starts and stops the log and the background workers."""
    if not secret:
        raise ValueError("a webhook secret is required")
    if delivery_log.secret != secret:
        raise ValueError("the delivery log must verify signatures with the webhook secret")
    app = web.Application(client_max_size=MAX_BODY_BYTES)
    app[SECRET_KEY] = secret
    app[DELIVERY_LOG_KEY] = delivery_log
    app.router.add_post("/webhook", webhook)
    app.router.add_get("/healthz", healthz)
    return app
