"""The webhook intake: a 202 means the delivery is committed in the store, a redelivery is stored
once, and anything wrong with a request before its signature is verified is answered 4xx, never
5xx, with nothing stored.

Requests go over a raw socket, byte for byte, so headers no HTTP client would send (non-ASCII
bytes, a coded body, a size the body never reaches) can be sent as an attacker would.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import hashlib
import hmac
import os
import sqlite3
import sys
import urllib.parse
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import payloads
import pytest
from aiohttp.test_utils import TestServer
from botharness import REPO, SECRET, BotHarness, bot
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bot.service.intake import MAX_BODY_BYTES
from bot.service.store.sqlite import SQLiteStore
from bot.service.web import create_web_app

__all__ = ["bot"]  # the fixture, imported for pytest

BODY = payloads.encode(payloads.example("pull_request", "opened"))
Headers = list[tuple[bytes, bytes]]


async def send(
    port: int, headers: Headers, body: bytes = b"", *, length: int | None = None, rest: bytes = b""
) -> int:
    """POST the exact bytes given; the status of the answer.

    ``length`` overrides Content-Length; ``rest`` is sent a moment later, once the server is
    reading the body.
    """
    lines = [b"POST /webhook HTTP/1.1", b"Host: paritybot", b"Connection: close"]
    lines += [k + b": " + v for k, v in headers]
    if not any(k.lower() == b"transfer-encoding" for k, _ in headers):
        lines.append(b"Content-Length: %d" % (len(body) if length is None else length))
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(b"\r\n".join(lines) + b"\r\n\r\n" + body)
        if rest:
            await writer.drain()
            await asyncio.sleep(0.2)
            writer.write(rest)
        # The answer may come before the body was read (or sent): read the status line only.
        status_line = await asyncio.wait_for(reader.readline(), 60)
    finally:
        writer.close()
    return int(status_line.split()[1])


@dataclass
class Intake:
    port: int
    store: SQLiteStore
    recorded: list[None] = field(default_factory=list)

    async def send(self, headers: Headers, body: bytes = b"", *, length: int | None = None) -> int:
        return await send(self.port, headers, body, length=length)

    def rows(self) -> int:
        return self.store.delivery_count()


@pytest.fixture
async def intake(tmp_path: Path) -> AsyncIterator[Intake]:
    store = SQLiteStore(tmp_path / "bot.db")
    recorded: list[None] = []
    server = TestServer(create_web_app(SECRET, store, on_recorded=lambda: recorded.append(None)))
    await server.start_server()
    try:
        assert server.port is not None
        yield Intake(server.port, store, recorded)
    finally:
        await server.close()
        store.close()


def signed(
    body: bytes = BODY, *, event: bytes = b"pull_request", delivery: bytes = b"d-1", secret: str = SECRET
) -> Headers:
    return [
        (b"X-GitHub-Event", event),
        (b"X-GitHub-Delivery", delivery),
        (b"X-Hub-Signature-256", payloads.sign(body, secret).encode()),
        (b"Content-Type", b"application/json"),
    ]


def replaced(headers: Headers, name: bytes, value: bytes | None) -> Headers:
    kept = [(k, v) for k, v in headers if k.lower() != name.lower()]
    return kept if value is None else [*kept, (name, value)]


async def test_a_202_means_the_delivery_is_committed(intake: Intake, tmp_path: Path) -> None:
    assert await intake.send(signed(), BODY) == 202
    # Read through a connection of its own: the row is committed, not pending in the store's.
    other = sqlite3.connect(tmp_path / "bot.db")
    try:
        row = other.execute("SELECT delivery_id, event, body, status FROM deliveries").fetchall()
    finally:
        other.close()
    assert row == [("d-1", "pull_request", BODY, "received")]
    assert len(intake.recorded) == 1  # the dispatcher is woken


async def test_a_redelivery_is_answered_202_and_stored_once(intake: Intake) -> None:
    assert await intake.send(signed(), BODY) == 202
    assert await intake.send(signed(), BODY) == 202
    assert intake.rows() == 1
    assert len(intake.recorded) == 1  # nothing new: the dispatcher is not woken for it


async def test_a_form_encoded_delivery_stores_its_json_payload(intake: Intake) -> None:
    form = urllib.parse.urlencode({"payload": BODY.decode()}).encode()
    headers = replaced(signed(form), b"Content-Type", b"application/x-www-form-urlencoded")
    assert await intake.send(headers, form) == 202
    [delivery] = intake.store.pending_deliveries()
    assert delivery.body == BODY


async def test_ping_is_answered_and_not_stored(intake: Intake) -> None:
    ping = payloads.encode(payloads.example("ping"))
    assert await intake.send(signed(ping, event=b"ping"), ping) == 200
    assert intake.rows() == 0


def _gzip_signed() -> tuple[Headers, bytes]:
    body = gzip.compress(BODY)
    return [*signed(body), (b"Content-Encoding", b"gzip")], body


def _hmac_sha1(body: bytes) -> str:
    return hmac.new(SECRET.encode(), body, hashlib.sha1).hexdigest()


def _signed_body(body: bytes) -> tuple[Headers, bytes]:
    return signed(body), body


REJECTED: dict[str, tuple[Headers, bytes, int]] = {
    # The signature: nothing else about an unsigned request is looked at.
    "wrong secret": (signed(secret="not-the-secret"), BODY, 401),
    "no signature": (replaced(signed(), b"X-Hub-Signature-256", None), BODY, 401),
    "non-ASCII signature (UTF-8)": (
        replaced(signed(), b"X-Hub-Signature-256", "sha256=é".encode()),
        BODY,
        401,
    ),
    "non-ASCII signature (raw byte)": (
        replaced(signed(), b"X-Hub-Signature-256", b"sha256=\xff" * 9),
        BODY,
        401,
    ),
    "SHA-1 signature in the SHA-256 header": (
        replaced(signed(), b"X-Hub-Signature-256", b"sha1=" + _hmac_sha1(BODY).encode()),
        BODY,
        401,
    ),
    "unsigned, and malformed headers": (
        replaced(signed(secret="x", event=b"no such/event"), b"X-GitHub-Delivery", None),
        b"junk",
        401,
    ),
    # The transport, refused before the body is read.
    "gzip on a plain body": ([*signed(), (b"Content-Encoding", b"gzip")], BODY, 415),
    "gzip on a gzipped body": (*_gzip_signed(), 415),
    # Headers and body of a signed request.
    "no event header": (replaced(signed(), b"X-GitHub-Event", None), BODY, 400),
    "malformed event header": (signed(event=b"pull request/../x"), BODY, 400),
    "non-ASCII event header": (signed(event="pull_requést".encode()), BODY, 400),
    "no delivery header": (replaced(signed(), b"X-GitHub-Delivery", None), BODY, 400),
    "delivery header too long": (signed(delivery=b"d" * 129), BODY, 400),
    "non-ASCII delivery header": (signed(delivery="dé".encode()), BODY, 400),
    "unsupported content type": (replaced(signed(), b"Content-Type", b"text/plain"), BODY, 400),
    "form without a payload field": (
        replaced(signed(b"other=1"), b"Content-Type", b"application/x-www-form-urlencoded"),
        b"other=1",
        400,
    ),
    "not JSON": (*_signed_body(b'{"zen": "truncated'), 400),
    "JSON, not an object": (*_signed_body(b"[1, 2]"), 400),
    "not UTF-8": (*_signed_body(b'{"a": "\xff\xfe"}'), 400),
    "nested deeper than Python recurses": (*_signed_body(b"[" * 100_000 + b"]" * 100_000), 400),
    "malformed chunked body": (
        [*signed(), (b"Transfer-Encoding", b"chunked")],
        b"zz\r\nabc\r\n0\r\n\r\n",
        400,
    ),
}


@pytest.mark.parametrize("case", list(REJECTED))
async def test_a_refused_request_gets_4xx_and_stores_nothing(intake: Intake, case: str) -> None:
    headers, body, status = REJECTED[case]
    assert await intake.send(headers, body) == status
    assert intake.rows() == 0 and intake.recorded == []


async def test_a_30_digit_integer_is_json_like_any_other(intake: Intake) -> None:
    body = b'{"action": "opened", "id": 123456789012345678901234567890}'
    assert await intake.send(signed(body), body) == 202


async def test_a_body_nested_1024_deep_gets_202_or_400_never_5xx(intake: Intake) -> None:
    # A JSON parser with a fixed depth limit used to raise on it inside the writer: 503. Python's
    # parser takes it, or refuses it as nested deeper than Python recurses (400), by version.
    body = b'{"action": "opened", "deep": ' + b"[" * 1024 + b"]" * 1024 + b"}"
    status = await intake.send(signed(body), body)
    assert status in (202, 400)
    assert intake.rows() == (1 if status == 202 else 0)


async def test_a_non_ascii_signature_is_refused_alone(intake: Intake) -> None:
    # The signature check used to raise on it where deliveries were committed together, failing
    # every signed delivery sent at the same moment with 503.
    bad = replaced(signed(), b"X-Hub-Signature-256", "sha256=\u00e9".encode())
    requests = [signed(delivery=b"d-%d" % i) if i % 3 else bad for i in range(30)]
    statuses = await asyncio.gather(*(intake.send(headers, BODY) for headers in requests))
    assert statuses == [202 if i % 3 else 401 for i in range(30)]
    assert intake.rows() == 20


async def test_a_declared_size_over_the_limit_gets_413_before_the_body_is_sent(intake: Intake) -> None:
    # Only the headers are sent: the answer comes without the server waiting for (or reading) a byte.
    assert await intake.send(signed(), b"", length=MAX_BODY_BYTES + 1) == 413
    assert intake.rows() == 0


async def test_a_chunked_body_over_the_limit_gets_413(intake: Intake) -> None:
    chunk = b"x" * (1024 * 1024)
    chunks = (b"%x\r\n%s\r\n" % (len(chunk), chunk)) * (MAX_BODY_BYTES // len(chunk) + 1) + b"0\r\n\r\n"
    headers = [*signed(), (b"Transfer-Encoding", b"chunked")]
    assert await intake.send(headers, chunks) == 413
    assert intake.rows() == 0


async def test_when_the_store_cannot_commit_the_answer_is_503(intake: Intake) -> None:
    intake.store.close()  # the disk is gone: GitHub must see a failure it can redeliver
    assert await intake.send(signed(), BODY) == 503


# --- fuzzing -------------------------------------------------------------------------------------

HEADER_BYTES = st.binary(max_size=80).map(lambda b: b.replace(b"\r", b"").replace(b"\n", b""))
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=20,
)
BODIES = st.one_of(
    st.just(BODY),
    st.binary(max_size=300),
    JSON.map(lambda v: payloads.encode({"v": v}) if not isinstance(v, dict) else payloads.encode(v)),
    st.integers(0, len(BODY)).map(lambda n: BODY[:n]),
)


@st.composite
def requests(draw: st.DrawFn) -> tuple[Headers, bytes]:
    body = draw(BODIES)
    signature = draw(
        st.sampled_from(["valid", "other body", "none"]) | HEADER_BYTES.map(lambda b: b"sha256=" + b)
    )
    headers: Headers = [
        (b"X-GitHub-Event", draw(st.sampled_from([b"pull_request", b"push", b"ping"]) | HEADER_BYTES)),
        (b"X-GitHub-Delivery", draw(st.uuids().map(lambda u: str(u).encode()) | HEADER_BYTES)),
    ]
    if signature == "valid":
        headers.append((b"X-Hub-Signature-256", payloads.sign(body, SECRET).encode()))
    elif signature == "other body":
        headers.append((b"X-Hub-Signature-256", payloads.sign(body + b" ", SECRET).encode()))
    elif isinstance(signature, bytes):
        headers.append((b"X-Hub-Signature-256", signature))
    # Mostly what GitHub sends, so that some requests get through; sometimes anything.
    for name, usual, other in (
        (b"Content-Type", b"application/json", [b"application/x-www-form-urlencoded", b"text/plain"]),
        (b"Content-Encoding", None, [b"gzip", b"identity", b"br", b"deflate"]),
    ):
        value = draw(st.sampled_from([usual] * 3 + other) | HEADER_BYTES)
        if value is not None:
            headers.append((name, value))
    return headers, body


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(request=requests())
async def test_fuzzed_requests_never_get_5xx_and_only_202s_are_stored(
    intake: Intake, request: tuple[Headers, bytes]
) -> None:
    headers, body = request
    before = intake.rows()
    status = await intake.send(headers, body)
    assert status in (200, 202, 400, 401, 413, 415), (status, headers, body[:200])
    if status == 202:
        assert intake.rows() - before in (0, 1)  # 0: the id was drawn before (a redelivery)
    else:
        assert intake.rows() == before  # nothing refused is ever stored


# --- a crash between the commit and the dispatch ------------------------------------------------

SERVE_INTAKE_ONLY = """
import socket, sys
from pathlib import Path
from aiohttp import web
from bot.service.store.sqlite import SQLiteStore
from bot.service.web import create_web_app

sock = socket.socket()
sock.bind(("127.0.0.1", 0))
sock.listen()
print(sock.getsockname()[1], flush=True)
web.run_app(create_web_app(sys.argv[2], SQLiteStore(Path(sys.argv[1]))), sock=sock, print=None)
"""


@contextlib.asynccontextmanager
async def intake_process(db: Path, **env: str) -> AsyncIterator[int]:
    """The web app alone, in a process of its own (no dispatcher); its port. Killed (SIGKILL) on exit."""
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        SERVE_INTAKE_ONLY,
        str(db),
        SECRET,
        stdout=asyncio.subprocess.PIPE,
        env={**os.environ, **env},
    )
    try:
        assert child.stdout is not None
        yield int(await asyncio.wait_for(child.stdout.readline(), 60))
    finally:
        child.kill()
        await child.wait()


async def test_a_malformed_chunk_met_while_reading_the_body_gets_400(tmp_path: Path) -> None:
    # aiohttp's pure-Python parser (where no compiled one is installed) raises it inside the read.
    async with intake_process(tmp_path / "bot.db", AIOHTTP_NO_EXTENSIONS="1") as port:
        headers = [*signed(), (b"Transfer-Encoding", b"chunked")]
        assert await send(port, headers, b"3\r\nabc\r\n", rest=b"zz\r\nabc\r\n0\r\n\r\n") == 400


async def test_a_delivery_committed_before_a_crash_is_dispatched_once_after_the_restart(
    bot: BotHarness,
) -> None:
    await bot.stop()
    # A process that only takes deliveries answers 202 and is killed before anything dispatched it.
    async with intake_process(bot.tmp / "bot.db") as port:
        body, headers = payloads.delivery(
            "pull_request", bot.pr_event("opened"), SECRET, delivery_id="d-crash"
        )
        url = f"http://127.0.0.1:{port}/webhook"
        async with aiohttp.ClientSession() as session, session.post(url, data=body, headers=headers) as resp:
            assert resp.status == 202
    assert bot.fake.calls == []

    await bot.start()  # the service comes back on the same database
    await bot.wait_runs_done()
    assert bot.store.delivery_status("d-crash") == "dispatched"
    assert len(bot.store.jobs_for_pr(REPO, 7)) == 1
    assert len(bot.bot_comments()) == 1
