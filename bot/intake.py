"""Webhook intake: what a delivery must pass before its 202, and the durable group-commit recorder.

Before answering, a request needs only three things: a valid signature on the raw body, a body
that is JSON, and the delivery committed to disk. Routing, validation against the event's schema
and all API calls happen later, in the dispatcher. The recorder commits the deliveries of many
concurrent requests in one transaction (group commit), so the fsync that makes them durable is
paid once per batch, not once per request.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import sqlite3
import threading
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import orjson
import structlog

from bot.sqlite_store import SCHEMA, connect

log = structlog.get_logger(__name__)

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
    """
    if not verify_signature(body, headers.get("X-Hub-Signature-256"), secret):
        raise IntakeError(401, "missing or invalid X-Hub-Signature-256")
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
    try:
        parsed = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise IntakeError(400, f"body is not valid JSON: {exc}") from None
    if not isinstance(parsed, dict):
        raise IntakeError(400, "body is not a JSON object")
    return IncomingDelivery(delivery_id=delivery_id, event=event, body=body)


class DeliveryRecorder:
    """Commits deliveries durably in batches from a dedicated thread.

    ``await record(d)`` returns True when the delivery is new, False for a redelivery (same
    X-GitHub-Delivery), only after the transaction holding it has committed.
    """

    def __init__(self, path: Path, max_batch: int = 512):
        self._path = path
        self._max_batch = max_batch
        self._pending: list[tuple[IncomingDelivery, asyncio.Future[bool]]] = []
        self._cond = threading.Condition()
        self._closed = False
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.recorded = asyncio.Event()  # set whenever new deliveries were committed
        self.batches = 0

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        conn = connect(self._path)
        conn.executescript(SCHEMA)
        self._thread = threading.Thread(target=self._run, args=(conn,), name="delivery-recorder", daemon=True)
        self._thread.start()

    async def record(self, delivery: IncomingDelivery) -> bool:
        if self._loop is None or self._closed:
            raise RuntimeError("recorder is not running")
        fut: asyncio.Future[bool] = self._loop.create_future()
        with self._cond:
            self._pending.append((delivery, fut))
            if len(self._pending) == 1:
                self._cond.notify()
        return await fut

    async def stop(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify()
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join)

    def _run(self, conn: sqlite3.Connection) -> None:
        try:
            while True:
                with self._cond:
                    while not self._pending and not self._closed:
                        self._cond.wait()
                    if not self._pending and self._closed:
                        return
                    batch = self._pending[: self._max_batch]
                    del self._pending[: self._max_batch]
                self._commit(conn, batch)
        finally:
            conn.close()

    def _commit(self, conn: sqlite3.Connection, batch: list[tuple[IncomingDelivery, asyncio.Future[bool]]]) -> None:
        now = datetime.now(UTC).isoformat()
        results: list[bool] | BaseException
        try:
            conn.execute("BEGIN IMMEDIATE")
            results = []
            for delivery, _ in batch:
                cur = conn.execute(
                    "INSERT OR IGNORE INTO deliveries (delivery_id, event, body, received_at) VALUES (?, ?, ?, ?)",
                    (delivery.delivery_id, delivery.event, delivery.body, now),
                )
                results.append(cur.rowcount == 1)
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            # Nothing of the batch is recorded; each request gets a 5xx and GitHub shows it as failed.
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            log.error("recording deliveries failed", error=str(exc), batch=len(batch))
            results = exc
        self.batches += 1
        assert self._loop is not None
        self._loop.call_soon_threadsafe(self._resolve, batch, results)

    def _resolve(
        self, batch: list[tuple[IncomingDelivery, asyncio.Future[bool]]], results: list[bool] | BaseException
    ) -> None:
        for i, (_, fut) in enumerate(batch):
            if fut.done():
                continue
            if isinstance(results, BaseException):
                fut.set_exception(results)
            else:
                fut.set_result(results[i])
        if not isinstance(results, BaseException) and any(results):
            self.recorded.set()
