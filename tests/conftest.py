"""Fixtures shared by every test module. Keep this file to fixtures only."""

from __future__ import annotations

import io
from collections.abc import AsyncIterator, Iterator

import pytest
import structlog
from fakegithub import FakeGitHub

from bot.service.logs import configure_logging


@pytest.fixture
async def fake_github() -> AsyncIterator[FakeGitHub]:
    """A started fake GitHub (``.url``) for one test.

    At teardown the test fails if it sent any request GitHub would refuse, unless it declared
    that with ``fake_github.expect_violation(...)``.
    """
    fake = FakeGitHub()
    await fake.start()
    try:
        yield fake
    finally:
        await fake.close()
    fake.check_violations()


@pytest.fixture
def json_logs() -> Iterator[io.StringIO]:
    """The service's logs as `serve` writes them (JSON lines), captured; structlog's defaults after."""
    out = io.StringIO()
    configure_logging("json", "info", stream=out)
    try:
        yield out
    finally:
        structlog.reset_defaults()
