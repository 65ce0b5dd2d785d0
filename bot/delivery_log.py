"""The durable record of webhook deliveries: an append-only log with group commit.

A delivery must be on disk before its 202, and that is all the request has to pay for. Many
concurrent requests hand their deliveries to one writer thread, which appends them with a single
``writev`` and makes them durable with a single ``fdatasync``: the cost of durability is paid once
per batch. The store then ingests the log in the background (:func:`ingest`), where redeliveries
are dropped by their ``X-GitHub-Delivery`` id, in the same transaction that advances the read
position, so each delivery is handled exactly once even across crashes.

Record: magic, CRC-32 of the rest, lengths, then delivery id, event name and body. The writer
starts a new segment at every start, so a record torn by a crash can only be the last one of a
segment; the reader treats an incomplete or corrupt record as the end of a segment that is no
longer written to. Such a record was never acknowledged: its fsync had not returned.
"""

from __future__ import annotations

import asyncio
import os
import re
import sqlite3
import struct
import threading
import zlib
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import structlog

log = structlog.get_logger(__name__)

MAGIC = b"PBD1"
HEADER = struct.Struct(">4sIHHI")  # magic, crc32, len(delivery id), len(event), len(body)
SEGMENT_BYTES = 64 * 1024 * 1024
_SEGMENT = re.compile(r"^segment-(\d{8})\.log$")


@dataclass(frozen=True, slots=True)
class LoggedDelivery:
    delivery_id: str
    event: str
    body: bytes


def encode(delivery_id: str, event: str, body: bytes) -> bytes:
    did, ev = delivery_id.encode(), event.encode()
    rest = struct.pack(">HHI", len(did), len(ev), len(body)) + did + ev + body
    return HEADER.pack(MAGIC, zlib.crc32(rest), len(did), len(ev), len(body)) + did + ev + body


def decode_from(buf: bytes, offset: int) -> tuple[LoggedDelivery, int] | None:
    """The record at ``offset`` and the offset after it; None when incomplete or corrupt."""
    if len(buf) - offset < HEADER.size:
        return None
    magic, crc, n_id, n_ev, n_body = HEADER.unpack_from(buf, offset)
    start = offset + HEADER.size
    end = start + n_id + n_ev + n_body
    if magic != MAGIC or end > len(buf):
        return None
    payload = buf[start:end]
    if zlib.crc32(struct.pack(">HHI", n_id, n_ev, n_body) + payload) != crc:
        return None
    delivery = LoggedDelivery(
        delivery_id=payload[:n_id].decode(),
        event=payload[n_id : n_id + n_ev].decode(),
        body=payload[n_id + n_ev :],
    )
    return delivery, end


def segments(directory: Path) -> list[tuple[int, Path]]:
    found = []
    for path in directory.glob("segment-*.log"):
        m = _SEGMENT.match(path.name)
        if m:
            found.append((int(m.group(1)), path))
    return sorted(found)


class DeliveryLog:
    """``await record(...)`` returns once the delivery is durably on disk."""

    def __init__(self, directory: Path, segment_bytes: int = SEGMENT_BYTES):
        self.directory = directory
        self._segment_bytes = segment_bytes
        self._pending: list[tuple[bytes, asyncio.Future[None]]] = []
        self._cond = threading.Condition()
        self._closed = False
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.recorded = asyncio.Event()  # set after each batch reaches the disk
        self.batches = 0

    def start(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        self._loop = asyncio.get_running_loop()
        existing = segments(self.directory)
        number = existing[-1][0] + 1 if existing else 1
        self._thread = threading.Thread(target=self._run, args=(number,), name="delivery-log", daemon=True)
        self._thread.start()

    async def record(self, delivery_id: str, event: str, body: bytes) -> None:
        if self._loop is None or self._closed:
            raise RuntimeError("the delivery log is not running")
        fut: asyncio.Future[None] = self._loop.create_future()
        record = encode(delivery_id, event, body)
        with self._cond:
            self._pending.append((record, fut))
            if len(self._pending) == 1:
                self._cond.notify()
        await fut

    async def stop(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify()
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join)
            self._thread = None

    def _open(self, number: int) -> int:
        path = self.directory / f"segment-{number:08d}.log"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        # The new file's directory entry must be durable too.
        dir_fd = os.open(self.directory, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
        return fd

    def _run(self, number: int) -> None:
        fd = self._open(number)
        written = 0
        try:
            while True:
                with self._cond:
                    while not self._pending and not self._closed:
                        self._cond.wait()
                    if not self._pending:
                        return
                    batch, self._pending = self._pending, []
                error: OSError | None = None
                try:
                    if written >= self._segment_bytes:
                        os.close(fd)
                        number += 1
                        fd, written = self._open(number), 0
                    written += os.writev(fd, [record for record, _ in batch])
                    os.fdatasync(fd)
                except OSError as exc:
                    log.error("delivery log write failed", error=str(exc), batch=len(batch))
                    error = exc
                self.batches += 1
                assert self._loop is not None
                self._loop.call_soon_threadsafe(self._resolve, batch, error)
        finally:
            os.close(fd)

    def _resolve(self, batch: list[tuple[bytes, asyncio.Future[None]]], error: OSError | None) -> None:
        for _, fut in batch:
            if fut.done():
                continue
            if error is not None:
                fut.set_exception(error)
            else:
                fut.set_result(None)
        if error is None:
            self.recorded.set()


def ingest(conn: sqlite3.Connection, directory: Path, max_records: int = 2000) -> int:
    """Move logged deliveries into the store's ``deliveries`` table; returns how many were new.

    The read position advances in the same transaction as the inserts, so a crash in between
    repeats nothing and loses nothing. Fully read segments that are no longer written are deleted.
    """
    all_segments = segments(directory)
    if not all_segments:
        return 0
    row = conn.execute("SELECT segment, offset FROM intake_position WHERE id = 1").fetchone()
    seg_no, offset = (row[0], row[1]) if row else (all_segments[0][0], 0)
    newest = all_segments[-1][0]
    new = 0
    for number, path in all_segments:
        if number < seg_no:
            path.unlink(missing_ok=True)
            continue
        start = offset if number == seg_no else 0
        buf = path.read_bytes()
        records: list[LoggedDelivery] = []
        pos = start
        while len(records) < max_records:
            decoded = decode_from(buf, pos)
            if decoded is None:
                break
            records.append(decoded[0])
            pos = decoded[1]
        finished = number < newest and len(records) < max_records
        new += _commit(conn, records, number + 1 if finished else number, 0 if finished else pos)
        if finished:
            if pos < len(buf):
                log.warning("torn record at the end of a segment ignored", segment=path.name, offset=pos)
            path.unlink(missing_ok=True)
            seg_no, offset = number + 1, 0
            continue
        break
    return new


def _commit(conn: sqlite3.Connection, records: list[LoggedDelivery], segment: int, offset: int) -> int:
    now = datetime.now(UTC).isoformat()
    new = 0
    conn.execute("BEGIN IMMEDIATE")
    try:
        for r in records:
            cur = conn.execute(
                "INSERT OR IGNORE INTO deliveries (delivery_id, event, body, received_at) VALUES (?, ?, ?, ?)",
                (r.delivery_id, r.event, r.body, now),
            )
            new += cur.rowcount
        conn.execute(
            "INSERT INTO intake_position (id, segment, offset) VALUES (1, ?, ?) "
            "ON CONFLICT(id) DO UPDATE SET segment = excluded.segment, offset = excluded.offset",
            (segment, offset),
        )
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")
    if len(records) > new:
        log.info("redeliveries dropped", count=len(records) - new)
    return new
