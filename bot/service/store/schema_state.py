"""The schema version a database is at, read without changing it (`paritybot db status`).

Opening a store migrates it; these only look: SQLite's file is opened read-only, PostgreSQL is
asked in a read-only transaction.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import psycopg

from bot.service.store.protocol import StoreError


def sqlite_schema_version(path: Path) -> int | None:
    """``PRAGMA user_version`` of the file; None when it holds no paritybot database yet.

    0 with paritybot's tables is the unversioned schema of the first release."""
    if not path.is_file():
        return None
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    except sqlite3.Error as exc:
        raise StoreError(f"{path}: cannot open the database: {exc}") from None
    try:
        version = int(conn.execute("PRAGMA user_version").fetchone()[0])
        tables = conn.execute("SELECT count(*) FROM sqlite_master WHERE name = 'deliveries'").fetchone()[0]
    except sqlite3.Error as exc:
        raise StoreError(f"{path}: not a readable SQLite database: {exc}") from None
    finally:
        conn.close()
    return None if version == 0 and not tables else version


def postgres_schema_version(url: str, where: str) -> int | None:
    """The highest of paritybot's migrations applied; None when the database has none of its tables."""
    try:
        with psycopg.connect(url, autocommit=False) as conn:
            conn.read_only = True
            made = conn.execute("SELECT to_regclass('paritybot_schema_migrations') IS NOT NULL").fetchone()
            if not (made and made[0]):
                return None
            row = conn.execute("SELECT coalesce(max(version), 0) FROM paritybot_schema_migrations").fetchone()
            return int(row[0]) if row else 0
    except psycopg.Error as exc:
        raise StoreError(f"{where}: {str(exc).strip().splitlines()[0]}") from None
