"""Webhook intake: the rules a request must pass before the store records it.

The transport first (content coding, declared size), then the signature on the raw body, then the
headers and the body. Every rejection is a 4xx that names its reason in one line; a request
without a valid signature learns nothing about what else is wrong with it (401).
Deduplication, routing, schema checks and every API call happen later, in the dispatcher.
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass

from gidgethub import sansio

MAX_BODY_BYTES = 25 * 1024 * 1024  # GitHub caps payloads at 25 MB
SIGNATURE_ERROR = "missing or invalid X-Hub-Signature-256"


class IntakeError(Exception):
    def __init__(self, status: int, message: str):
        self.status = status
        super().__init__(message)


@dataclass(frozen=True, slots=True)
class IncomingDelivery:
    delivery_id: str
    event: str
    body: bytes  # JSON, as signed (form-encoded bodies are unwrapped to their JSON payload)


def check_transport(headers: Mapping[str, str]) -> None:
    """What can be refused before a byte of the body is read.

    GitHub never compresses a delivery and signs the bytes it sends; a coded body is refused with
    415, the status RFC 9110 §15.5.16 gives an unsupported content coding, rather than decoded.
    """
    coding = headers.get("Content-Encoding", "identity").strip().lower()
    if coding not in ("", "identity"):
        raise IntakeError(415, f"unsupported Content-Encoding {coding[:40]!r}; send the body uncompressed")
    length = headers.get("Content-Length")
    if length is not None and length.isdigit() and int(length) > MAX_BODY_BYTES:
        raise IntakeError(413, f"body over {MAX_BODY_BYTES} bytes")


def accept(headers: Mapping[str, str], body: bytes, secret: str) -> IncomingDelivery:
    """The delivery in a request whose body was read; IntakeError with the HTTP status if refused."""
    check_signature(body, headers.get("X-Hub-Signature-256"), secret)
    event = headers.get("X-GitHub-Event", "")
    delivery_id = headers.get("X-GitHub-Delivery", "")
    if not event.isascii() or not event.replace("_", "").isalnum() or len(event) > 64:
        raise IntakeError(400, "missing or malformed X-GitHub-Event header")
    if (
        not delivery_id
        or len(delivery_id) > 128
        or not delivery_id.isascii()
        or not delivery_id.isprintable()
    ):
        raise IntakeError(400, "missing or malformed X-GitHub-Delivery header")
    content_type = headers.get("Content-Type", "application/json").split(";")[0].strip().lower()
    if content_type == "application/x-www-form-urlencoded":
        body = _form_payload(body)
    elif content_type != "application/json":
        raise IntakeError(400, f"unsupported Content-Type {content_type[:80]!r}; use application/json")
    check_json_object(body)
    return IncomingDelivery(delivery_id=delivery_id, event=event, body=body)


def check_signature(body: bytes, signature: str | None, secret: str) -> None:
    """gidgethub's check of the HMAC-SHA256 of the raw body, for GitHub's SHA-256 header only.

    A non-ASCII header is refused before the comparison, which cannot compare such strings.
    """
    if signature is None or not signature.isascii() or not signature.startswith("sha256="):
        raise IntakeError(401, SIGNATURE_ERROR)
    try:
        sansio.validate_event(body, signature=signature, secret=secret)
    except sansio.ValidationFailure:
        raise IntakeError(401, SIGNATURE_ERROR) from None


def check_json_object(body: bytes) -> None:
    try:
        parsed = json.loads(body)
    except (ValueError, RecursionError) as exc:  # RecursionError: nested deeper than Python recurses
        raise IntakeError(400, f"body is not valid JSON: {str(exc)[:120]}") from None
    if not isinstance(parsed, dict):
        raise IntakeError(400, "body is not a JSON object")


def _form_payload(body: bytes) -> bytes:
    payload = urllib.parse.parse_qs(body.decode("utf-8", "replace")).get("payload")
    if not payload:
        raise IntakeError(400, "form-encoded delivery without a payload field")
    return payload[0].encode()
