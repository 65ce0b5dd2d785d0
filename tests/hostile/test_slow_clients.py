"""Slow and vanishing clients: `serve` must not wait for ever for a request's headers or its body,
must not let a crowd of slow connections crowd out the rest, and must log a webhook body that never
arrived as one structured line, not a traceback.

Before: 64 connections trickling their headers were held open as long as they liked (24 s in the
attack, an hour by aiohttp's default), and each abandoned webhook body left a 22-line traceback.
"""

from __future__ import annotations

import asyncio
import io
import json
import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import aiohttp
import pytest
from botharness import SECRET
from run_page_support import free_port

from bot.service.http_limits import GuardedSite, ServerLimits, longest_waiting
from bot.service.store.sqlite import SQLiteStore
from bot.service.web import create_web_app

WEBHOOK_HEAD = (
    b"POST /webhook HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nX-GitHub-Event: ping\r\n"
    b"X-GitHub-Delivery: d-slow\r\nX-Hub-Signature-256: sha256=" + b"0" * 64 + b"\r\n"
    b"Content-Length: 1000\r\n\r\n"
)


@asynccontextmanager
async def serving(tmp: Path, limits: ServerLimits) -> AsyncIterator[int]:
    """The webhook's application with ``limits``, on the site `serve` uses; its port."""
    from aiohttp import web

    store = SQLiteStore(tmp / "bot.db")
    runner = web.AppRunner(create_web_app(SECRET, store, limits=limits), access_log=None)
    await runner.setup()
    port = free_port()
    await GuardedSite(runner, "127.0.0.1", port).start()
    try:
        yield port
    finally:
        await runner.cleanup()
        store.close()


async def slow(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A connection that starts a request and never finishes its headers."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: 1\r\n")
    await writer.drain()
    return reader, writer


async def closed_within(reader: asyncio.StreamReader, seconds: float) -> bool:
    try:
        await asyncio.wait_for(reader.read(), seconds)  # read() returns at the end of the stream
    except TimeoutError:
        return False
    return True


async def healthy(port: int) -> bool:
    timeout = aiohttp.ClientTimeout(total=2)
    async with aiohttp.ClientSession(timeout=timeout) as s, s.get(f"http://127.0.0.1:{port}/healthz") as r:
        return r.status == 200


async def test_sixty_four_slow_connections_are_closed_at_the_header_timeout_and_others_are_served(
    tmp_path: Path,
) -> None:
    limits = ServerLimits(header_timeout_s=2.0, max_waiting=100)
    async with serving(tmp_path, limits) as port:
        crowd = [await slow(port) for _ in range(64)]
        started = time.monotonic()

        async def trickle(writer: asyncio.StreamWriter) -> None:
            for n in range(40):  # a header line now and then, as slowloris does
                await asyncio.sleep(0.25)
                writer.write(b"X-More-%d: 1\r\n" % n)

        trickling = [asyncio.create_task(trickle(w)) for _, w in crowd]
        assert await healthy(port)  # served meanwhile
        closed = await asyncio.gather(*(closed_within(r, limits.header_timeout_s + 3) for r, _ in crowd))
        assert all(closed) and time.monotonic() - started < limits.header_timeout_s + 3
        for task in trickling:
            task.cancel()
        await asyncio.gather(*trickling, return_exceptions=True)
        for _, w in crowd:
            w.close()
        assert await healthy(port)


async def test_beyond_the_limit_the_longest_waiting_connections_are_closed_at_once(tmp_path: Path) -> None:
    limits = ServerLimits(header_timeout_s=30.0, max_waiting=8)
    async with serving(tmp_path, limits) as port:
        crowd = [await slow(port) for _ in range(12)]
        # The four that waited longest are closed long before the header timeout; the rest wait.
        oldest = await asyncio.gather(*(closed_within(r, 2.0) for r, _ in crowd[:4]))
        assert all(oldest)
        assert not any(await asyncio.gather(*(closed_within(r, 0.3) for r, _ in crowd[4:])))
        assert await healthy(port)  # a client that sends its request at once is served
        for _, w in crowd:
            w.close()


async def test_a_webhook_body_that_stops_arriving_gets_408_and_one_log_line(
    tmp_path: Path, json_logs: io.StringIO, caplog: pytest.LogCaptureFixture
) -> None:
    limits = ServerLimits(body_timeout_s=1.0)
    async with serving(tmp_path, limits) as port:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(WEBHOOK_HEAD + b'{"zen": "slo')
        await writer.drain()
        answer = await asyncio.wait_for(reader.read(), limits.body_timeout_s + limits.lingering_s + 3)
        writer.close()
    assert answer.startswith(b"HTTP/1.1 408 ")
    assert abandoned_lines(json_logs) == [("the body did not arrive within 1 s", "d-slow")]
    assert no_tracebacks(json_logs, caplog)


async def test_an_abandoned_webhook_body_is_one_log_line_not_a_traceback(
    tmp_path: Path, json_logs: io.StringIO, caplog: pytest.LogCaptureFixture
) -> None:
    async with serving(tmp_path, ServerLimits()) as port:
        for _ in range(3):
            _, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(WEBHOOK_HEAD + b'{"zen": "gone')
            await writer.drain()
            writer.close()
            await writer.wait_closed()
        await asyncio.sleep(0.5)
        assert await healthy(port)
    assert abandoned_lines(json_logs) == [("the connection closed before the body's end", "d-slow")] * 3
    assert no_tracebacks(json_logs, caplog)


def abandoned_lines(logs: io.StringIO) -> list[tuple[str, str]]:
    lines = [json.loads(line) for line in logs.getvalue().splitlines() if line.strip()]
    return [(e["reason"], e["delivery_id"]) for e in lines if e["event"] == "delivery body abandoned"]


def no_tracebacks(logs: io.StringIO, caplog: pytest.LogCaptureFixture) -> bool:
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    return "Traceback" not in logs.getvalue() and "exception" not in logs.getvalue() and errors == []


def test_which_connections_close_is_the_longest_waiting() -> None:
    assert longest_waiting({"a": 3.0, "b": 1.0, "c": 2.0}, 1) == ["b", "c"]
    assert longest_waiting({"a": 3.0}, 1) == []
    assert ServerLimits().handler_args()["keepalive_timeout"] == 10.0  # the default header timeout
