"""Fixtures shared by every test module. Keep this file to fixtures only."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from fakegithub import FakeGitHub


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
