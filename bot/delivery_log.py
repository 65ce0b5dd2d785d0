"""The durable record of webhook deliveries: an append-only log with group commit.

A delivery must be on disk before its 202, and that is all the request has to pay for. Many
concurrent requests hand their deliveries to one writer process (:mod:`bot.log_writer`), which
checks their signatures, appends them with a single ``writev`` and makes them durable with a
single ``fdatasync``: the cost of durability is paid once per batch. The store then ingests the log in the background (:func:`ingest`), where redeliveries
are dropped by their ``X-GitHub-Delivery`` id, in the same transaction that advances the read
position, so each delivery is handled exactly once even across crashes.

Record: magic, CRC-32 of the rest, lengths, then delivery id, event name and body. The writer
starts a new segment at every start, so a record torn by a crash can only be the last one of a
segment; the reader treats an incomplete or corrupt record as the end of a segment that is no
longer written to. Such a record was never acknowledged: its fsync had not returned.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import hmac
import re
import sqlite3
import struct
import sys
import zlib
from collections import deque
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import NamedTuple

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


def encode_parts(delivery_id: str, event: str, body: bytes | memoryview) -> tuple[bytes, bytes | memoryview]:
    """The record as (header with ids, body): written with writev, the body is never copied."""
    did, ev = delivery_id.encode(), event.encode()
    ids = struct.pack(">HHI", len(did), len(ev), len(body)) + did + ev
    crc = zlib.crc32(body, zlib.crc32(ids))  # releases the GIL for a large body
    return HEADER.pack(MAGIC, crc, len(did), len(ev), len(body)) + did + ev, body


def encode(delivery_id: str, event: str, body: bytes) -> bytes:
    return b"".join(encode_parts(delivery_id, event, body))


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


# --- The writer process and its client --------------------------------------------------------------
#
# Frames to the writer: ">HHHI" (lengths of delivery id, event, signature, body), then those bytes.
# An empty signature means the caller verified it. The writer answers one byte per frame, in order:
# ACCEPTED once the frame is on disk, REJECTED when its signature does not match, FAILED when the
# write failed.

FRAME = struct.Struct(">HHHI")
ACCEPTED, REJECTED, NOT_JSON, FAILED = b"1", b"0", b"J", b"E"


class Outcome(StrEnum):
    """What the delivery log did with one delivery."""

    ACCEPTED = "accepted"  # durably on disk
    BAD_SIGNATURE = "bad signature"  # not written
    NOT_JSON = "not a JSON object"  # signed, but not written: nothing could dispatch it


_OUTCOMES = {ACCEPTED[0]: Outcome.ACCEPTED, REJECTED[0]: Outcome.BAD_SIGNATURE, NOT_JSON[0]: Outcome.NOT_JSON}
PIPE_BYTES = 1024 * 1024  # Linux's default pipe-max-size
STOP_TIMEOUT_S = 10.0


def encode_frame(delivery_id: str, event: str, body: bytes, signature: str | None) -> bytes:
    did, ev, sig = delivery_id.encode(), event.encode(), (signature or "").encode()
    return FRAME.pack(len(did), len(ev), len(sig), len(body)) + did + ev + sig + body


def decode_frames(buf: bytes | bytearray | memoryview) -> tuple[list[Frame], int]:
    """The complete frames at the start of ``buf``, and how many bytes they took.

    Bodies are memoryviews into ``buf`` (no copy): use them before ``buf`` changes.
    """
    view = memoryview(buf)
    frames = []
    pos = 0
    while len(view) - pos >= FRAME.size:
        n_id, n_ev, n_sig, n_body = FRAME.unpack_from(view, pos)
        start = pos + FRAME.size
        end = start + n_id + n_ev + n_sig + n_body
        if end > len(view):
            break
        did = str(view[start : start + n_id], "utf-8")
        ev = str(view[start + n_id : start + n_id + n_ev], "utf-8")
        sig = str(view[start + n_id + n_ev : end - n_body], "utf-8") or None
        frames.append(Frame(did, ev, view[end - n_body : end], sig))
        pos = end
    return frames, pos


class Frame(NamedTuple):
    delivery_id: str
    event: str
    body: memoryview
    signature: str | None


def signed(secret: bytes, body: bytes | memoryview, signature: str) -> bool:
    """`X-Hub-Signature-256` is "sha256=" + hex HMAC-SHA256 of the raw body; compared in constant time."""
    if not signature.startswith("sha256="):
        return False
    return hmac.compare_digest(hmac.new(secret, body, hashlib.sha256).hexdigest(), signature[7:])


class DeliveryLog:
    """``await record(...)`` returns True once the delivery is durably on disk.

    The appending, the signature check and the checksums run in a writer process of their own
    (:mod:`bot.log_writer`): the web server's event loop only hands the bytes over a pipe, so the
    hashing and the fsync neither wait for nor slow down the loop, and no lock is shared with it.
    """

    def __init__(self, directory: Path, secret: bytes, segment_bytes: int = SEGMENT_BYTES):
        self.directory = directory
        self.secret = secret
        self._segment_bytes = segment_bytes
        self._proc: asyncio.subprocess.Process | None = None
        self._waiting: deque[asyncio.Future[Outcome]] = deque()
        self._reader: asyncio.Task[None] | None = None
        self._broken: str | None = None
        self._restart_lock = asyncio.Lock()
        self.recorded = asyncio.Event()  # set whenever new deliveries reached the disk
        self.batches = 0  # answers read from the writer: a batch is what one read brings

    async def start(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        self._proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "bot.log_writer",
            str(self.directory),
            str(self._segment_bytes),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        assert self._proc.stdin is not None
        _grow_pipe(self._proc.stdin.transport.get_extra_info("pipe"))
        # The secret travels on the pipe, not on the command line, where `ps` would show it.
        self._proc.stdin.write(struct.pack(">H", len(self.secret)) + self.secret)
        self._broken = None
        self._reader = asyncio.create_task(self._read_answers(), name="delivery-log-answers")

    async def record(
        self, delivery_id: str, event: str, body: bytes, signature: str | None = None
    ) -> Outcome:
        """Append one delivery; ACCEPTED once it is on disk.

        The writer checks ``signature`` (the ``X-Hub-Signature-256`` header; None means the caller
        verified it) first, then that the body is a JSON object; it writes only what passes both.
        """
        if self._proc is None or self._proc.stdin is None:
            raise OSError("the delivery log is not running")
        if self._broken:
            await self._restart()
        assert self._proc.stdin is not None
        fut: asyncio.Future[Outcome] = asyncio.get_running_loop().create_future()
        self._waiting.append(fut)
        stdin = self._proc.stdin
        stdin.write(encode_frame(delivery_id, event, body, signature))
        if stdin.transport.get_write_buffer_size() > PIPE_BYTES:
            await stdin.drain()  # the writer is behind: let it catch up before taking more
        return await fut

    async def _read_answers(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        while True:
            answers = await self._proc.stdout.read(65536)
            if not answers:
                break
            self.batches += 1
            accepted = False
            for answer in answers:
                fut = self._waiting.popleft()
                if fut.done():
                    continue
                if answer == FAILED[0]:
                    fut.set_exception(OSError("the delivery log could not write to disk"))
                else:
                    accepted |= answer == ACCEPTED[0]
                    fut.set_result(_OUTCOMES[answer])
            if accepted:
                self.recorded.set()
        # The writer is gone: nothing waiting was acknowledged, so nothing may be reported as kept.
        self._broken = "the delivery log writer stopped"
        while self._waiting:
            fut = self._waiting.popleft()
            if not fut.done():
                fut.set_exception(OSError(self._broken))

    async def _restart(self) -> None:
        """A new writer (and so a new segment) after the old one died; one restart for many callers."""
        async with self._restart_lock:
            if not self._broken:
                return
            log.warning("restarting the delivery log writer", reason=self._broken)
            if self._proc is not None:
                await self._proc.wait()
            await self.start()

    async def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> None:
        """Close the writer's input and wait for it to finish what it has; kill it past the timeout.

        Whatever it had not answered for by then was never acknowledged, so nothing is lost that
        GitHub was told is kept.
        """
        if self._proc is None:
            return
        if self._proc.stdin is not None:
            self._proc.stdin.close()
        try:
            await asyncio.wait_for(self._proc.wait(), timeout_s)
        except TimeoutError:
            log.warning("the delivery log writer did not stop in time; killing it", timeout_s=timeout_s)
            with contextlib.suppress(ProcessLookupError):
                self._proc.kill()
            await self._proc.wait()
        if self._reader is not None:
            await self._reader
        self._proc = None


def _grow_pipe(pipe: object) -> None:
    """A larger pipe lets one read of the writer take a whole burst of deliveries: one fsync for all."""
    fileno = getattr(pipe, "fileno", None)
    if fileno is None or not hasattr(fcntl, "F_SETPIPE_SZ"):
        return
    with contextlib.suppress(OSError):
        fcntl.fcntl(fileno(), fcntl.F_SETPIPE_SZ, PIPE_BYTES)


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
