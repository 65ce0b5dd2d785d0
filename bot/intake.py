"""Webhook intake: what a delivery must pass before its 202.

Before answering, a request needs only three things: a valid signature on the raw body, a body
that is a JSON object, and the delivery on disk (:mod:`bot.delivery_log`). Deduplication,
routing, schema checks and every API call happen later, in the dispatcher.
"""

from __future__ import annotations

import hashlib
import hmac
import threading
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass

import simdjson

MAX_BODY_BYTES = 25 * 1024 * 1024  # GitHub caps payloads at 25 MB


class IntakeError(Exception):
    def __init__(self, status: int, message: str):
        self.status = status
        super().__init__(message)


@dataclass(frozen=True, slots=True)
class IncomingDelivery:
    delivery_id: str
    event: str
    body: bytes  # JSON, as signed (form-encoded bodies are unwrapped to their JSON payload)


def verify_signature(body: bytes, signature: str | None, secret: bytes) -> bool:
    """`X-Hub-Signature-256` is "sha256=" + hex HMAC-SHA256 of the raw body; compared in constant time."""
    if not signature or not signature.startswith("sha256="):
        return False
    expected = hmac.new(secret, body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected, signature[7:])


def check_delivery(headers: Mapping[str, str], body: bytes, secret: bytes) -> IncomingDelivery:
    """Decide whether a request is a delivery we accept; raise IntakeError with the HTTP status if not.

    The signature is checked first, so an unsigned request learns nothing about what else is wrong.
    The web handler takes a faster path (:func:`check_unsigned`, then the signature in the
    delivery log's writer thread); this function is the same rules in one place.
    """
    if not verify_signature(body, headers.get("X-Hub-Signature-256"), secret):
        raise IntakeError(401, "missing or invalid X-Hub-Signature-256")
    return check_unsigned(headers, body)


def check_unsigned(headers: Mapping[str, str], body: bytes) -> IncomingDelivery:
    """Every rule but the signature: the headers, the content type, a body that is a JSON object."""
    delivery = check_headers(headers, body)
    check_json_object(delivery.body)
    return delivery


def check_headers(headers: Mapping[str, str], body: bytes) -> IncomingDelivery:
    """The headers and the content type; a form-encoded body is unwrapped to its JSON payload."""
    event = headers.get("X-GitHub-Event", "")
    delivery_id = headers.get("X-GitHub-Delivery", "")
    if not event or not event.replace("_", "").isalnum() or len(event) > 64:
        raise IntakeError(400, "missing or malformed X-GitHub-Event header")
    if not delivery_id or len(delivery_id) > 128 or not delivery_id.isprintable():
        raise IntakeError(400, "missing or malformed X-GitHub-Delivery header")
    content_type = headers.get("Content-Type", "application/json").split(";")[0].strip().lower()
    if content_type == "application/x-www-form-urlencoded":
        payload = urllib.parse.parse_qs(body.decode("utf-8", "replace")).get("payload")
        if not payload:
            raise IntakeError(400, "form-encoded delivery without a payload field")
        body = payload[0].encode()
    elif content_type != "application/json":
        raise IntakeError(400, f"unsupported Content-Type {content_type!r}; use application/json")
    return IncomingDelivery(delivery_id=delivery_id, event=event, body=body)


def check_json_object(body: bytes | memoryview) -> None:
    """The body must be a JSON object. simdjson validates the whole document (structure and
    UTF-8) in a few microseconds; the dispatcher builds Python objects from it later."""
    try:
        parsed = _json_parser().parse(body)
    except ValueError as exc:
        raise IntakeError(400, f"body is not valid JSON: {exc}") from None
    if not isinstance(parsed, simdjson.Object):
        raise IntakeError(400, "body is not a JSON object")
    del parsed  # the parser's buffer is reused by the next call


def is_form_encoded(headers: Mapping[str, str]) -> bool:
    return (
        headers.get("Content-Type", "").split(";")[0].strip().lower() == "application/x-www-form-urlencoded"
    )


_parsers = threading.local()


def _json_parser() -> simdjson.Parser:
    parser = getattr(_parsers, "parser", None)
    if parser is None:
        parser = _parsers.parser = simdjson.Parser()
    return parser
