"""The delivery log: what is acknowledged is on disk, is ingested once, and survives torn writes."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
from pathlib import Path

import pytest

from bot.delivery_log import DeliveryLog, Outcome, decode_from, encode, segments
from bot.sqlite_store import SQLiteStore

SECRET = b"log-secret"


async def record_all(log: DeliveryLog, items: list[tuple[str, str, bytes]]) -> None:
    await asyncio.gather(*(log.record(*item) for item in items))


async def test_concurrent_deliveries_are_committed_in_batches_and_ingested_once(tmp_path: Path) -> None:
    log = DeliveryLog(tmp_path / "log", SECRET)
    await log.start()
    items = [(f"id-{i}", "pull_request", b'{"n": %d}' % i) for i in range(200)]
    await record_all(log, items)
    await log.stop()
    assert log.batches < 200  # group commit: many deliveries share one fdatasync

    store = SQLiteStore(tmp_path / "bot.db")
    assert store.ingest_deliveries(tmp_path / "log") == 200
    assert store.ingest_deliveries(tmp_path / "log") == 0  # the read position advanced with the inserts
    pending = store.pending_deliveries(limit=500)
    assert [d.delivery_id for d in pending] == [f"id-{i}" for i in range(200)]
    assert pending[7].body == b'{"n": 7}'


async def test_redelivery_is_dropped_at_ingest(tmp_path: Path) -> None:
    log = DeliveryLog(tmp_path / "log", SECRET)
    await log.start()
    await log.record("same", "push", b"{}")
    await log.record("same", "push", b"{}")
    await log.stop()
    store = SQLiteStore(tmp_path / "bot.db")
    assert store.ingest_deliveries(tmp_path / "log") == 1
    assert store.delivery_count() == 1


async def test_a_torn_record_after_a_crash_is_skipped_and_the_next_start_goes_on(tmp_path: Path) -> None:
    directory = tmp_path / "log"
    log = DeliveryLog(directory, SECRET)
    await log.start()
    await log.record("before-crash", "push", b'{"a": 1}')
    await log.stop()
    # The process died in the middle of its next write: half a record at the end of the segment.
    [(_, segment)] = segments(directory)
    with open(segment, "ab") as f:
        f.write(encode("never-acknowledged", "push", b'{"b": 2}')[:20])

    restarted = DeliveryLog(directory, SECRET)
    await restarted.start()  # a new segment: nothing is ever appended after a torn record
    await restarted.record("after-restart", "push", b'{"c": 3}')
    await restarted.stop()

    store = SQLiteStore(tmp_path / "bot.db")
    store.ingest_deliveries(directory)
    assert [d.delivery_id for d in store.pending_deliveries()] == ["before-crash", "after-restart"]
    assert not segment.exists()  # fully read and no longer written: removed


async def test_segments_rotate_and_read_ones_are_removed(tmp_path: Path) -> None:
    directory = tmp_path / "log"
    log = DeliveryLog(directory, SECRET, segment_bytes=200)
    await log.start()
    for i in range(10):
        await log.record(f"d{i}", "push", b"{" + b" " * 100 + b"}")
    await log.stop()
    assert len(segments(directory)) > 3
    store = SQLiteStore(tmp_path / "bot.db")
    assert store.ingest_deliveries(directory) == 10
    assert len(segments(directory)) == 1  # only the newest, which a writer may still append to


def test_corrupt_bytes_are_not_a_record() -> None:
    record = bytearray(encode("x", "push", b"{}"))
    assert decode_from(bytes(record), 0) is not None
    record[-1] ^= 0xFF
    assert decode_from(bytes(record), 0) is None


async def test_a_bad_signature_is_refused_and_not_written(tmp_path: Path) -> None:
    log = DeliveryLog(tmp_path / "log", SECRET)
    await log.start()
    body = b'{"action": "opened"}'
    good = "sha256=" + hmac.new(SECRET, body, hashlib.sha256).hexdigest()
    assert await log.record("good", "pull_request", body, signature=good) == Outcome.ACCEPTED
    assert (
        await log.record("forged", "pull_request", body, signature="sha256=" + "0" * 64)
        == Outcome.BAD_SIGNATURE
    )
    assert (
        await log.record("wrong-scheme", "pull_request", body, signature="sha1=abc") == Outcome.BAD_SIGNATURE
    )
    not_json = b'{"truncated'
    signed_not_json = "sha256=" + hmac.new(SECRET, not_json, hashlib.sha256).hexdigest()
    assert await log.record("not-json", "push", not_json, signature=signed_not_json) == Outcome.NOT_JSON
    assert (
        await log.record("unsigned-not-json", "push", not_json, signature="sha256=" + "0" * 64)
        == Outcome.BAD_SIGNATURE
    )
    await log.stop()
    store = SQLiteStore(tmp_path / "bot.db")
    store.ingest_deliveries(tmp_path / "log")
    assert [d.delivery_id for d in store.pending_deliveries()] == ["good"]


async def test_when_the_writer_dies_nothing_waiting_is_reported_kept_and_it_restarts(tmp_path: Path) -> None:
    log = DeliveryLog(tmp_path / "log", SECRET)
    await log.start()
    proc = log._proc
    assert proc is not None
    # A delivery is on its way when the writer dies: its request must not get a 202.
    waiting = asyncio.ensure_future(log.record("in-flight", "push", b"{}"))
    proc.kill()
    with pytest.raises(OSError):
        await waiting
    # The next delivery gets a new writer, in a new segment.
    assert await log.record("after-restart", "push", b"{}") == Outcome.ACCEPTED
    await log.stop()
    store = SQLiteStore(tmp_path / "bot.db")
    store.ingest_deliveries(tmp_path / "log")
    assert "after-restart" in [d.delivery_id for d in store.pending_deliveries()]
