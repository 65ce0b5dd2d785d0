"""The delivery log: what is acknowledged is on disk, is ingested once, and survives torn writes."""

from __future__ import annotations

import asyncio
from pathlib import Path

from bot.delivery_log import DeliveryLog, decode_from, encode, segments
from bot.sqlite_store import SQLiteStore


async def record_all(log: DeliveryLog, items: list[tuple[str, str, bytes]]) -> None:
    await asyncio.gather(*(log.record(*item) for item in items))


async def test_concurrent_deliveries_are_committed_in_batches_and_ingested_once(tmp_path: Path) -> None:
    log = DeliveryLog(tmp_path / "log")
    log.start()
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
    log = DeliveryLog(tmp_path / "log")
    log.start()
    await log.record("same", "push", b"{}")
    await log.record("same", "push", b"{}")
    await log.stop()
    store = SQLiteStore(tmp_path / "bot.db")
    assert store.ingest_deliveries(tmp_path / "log") == 1
    assert store.delivery_count() == 1


async def test_a_torn_record_after_a_crash_is_skipped_and_the_next_start_goes_on(tmp_path: Path) -> None:
    directory = tmp_path / "log"
    log = DeliveryLog(directory)
    log.start()
    await log.record("before-crash", "push", b'{"a": 1}')
    await log.stop()
    # The process died in the middle of its next write: half a record at the end of the segment.
    [(_, segment)] = segments(directory)
    with open(segment, "ab") as f:
        f.write(encode("never-acknowledged", "push", b'{"b": 2}')[:20])

    restarted = DeliveryLog(directory)
    restarted.start()  # a new segment: nothing is ever appended after a torn record
    await restarted.record("after-restart", "push", b'{"c": 3}')
    await restarted.stop()

    store = SQLiteStore(tmp_path / "bot.db")
    store.ingest_deliveries(directory)
    assert [d.delivery_id for d in store.pending_deliveries()] == ["before-crash", "after-restart"]
    assert not segment.exists()  # fully read and no longer written: removed


async def test_segments_rotate_and_read_ones_are_removed(tmp_path: Path) -> None:
    directory = tmp_path / "log"
    log = DeliveryLog(directory, segment_bytes=200)
    log.start()
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
