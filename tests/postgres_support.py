"""Fixtures for tests that need a real PostgreSQL: a fresh database per test.

``scripts/test.sh`` starts a private cluster (``scripts/postgres.sh``) and exports
PARITYBOT_TEST_DATABASE_URL. Locally, without it, those tests are skipped with the reason; with CI
set they fail instead, like the tests that need Docker.

Use: ``from postgres_support import pg_url`` in a test module (the fixture, by name).
"""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Iterator
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from docker_support import unavailable

START_HINT = "start one with `scripts/postgres.sh start` and `eval $(scripts/postgres.sh env)`"


def benchmark_server_url() -> str | None:
    """The server a benchmark script measures on; None after saying on stderr how to start one."""
    url = os.environ.get("PARITYBOT_TEST_DATABASE_URL")
    if not url:
        print(f"PARITYBOT_TEST_DATABASE_URL is not set: {START_HINT}", file=sys.stderr)
    return url or None


def server_url() -> str:
    url = os.environ.get("PARITYBOT_TEST_DATABASE_URL")
    if not url:
        unavailable(f"PARITYBOT_TEST_DATABASE_URL is not set: no PostgreSQL for tests; {START_HINT}")
        raise AssertionError("unreachable")
    try:
        with psycopg.connect(url, connect_timeout=5) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        unavailable(f"PostgreSQL at PARITYBOT_TEST_DATABASE_URL does not answer: {exc}; {START_HINT}")
    return url


def with_database(url: str, name: str) -> str:
    """The same server's URL (postgresql://…), naming another database."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"/{name}"))


@pytest.fixture
def pg_url() -> Iterator[str]:
    """The URL of a new, empty database, dropped after the test."""
    server = server_url()
    name = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield with_database(server, name)
    finally:
        with psycopg.connect(server, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
