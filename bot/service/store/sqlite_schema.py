"""The SQLite store's schema: the numbered files of ``migrations/``, applied at start-up.

Each migration and the version it reaches (``PRAGMA user_version``) commit in one transaction, so
a crash midway leaves the database at the previous version, to be migrated again at the next
start. A database newer than this code is refused, with a line saying so, rather than half
understood; so is one older than the first versioned schema (a column it lacks is named).
"""

from __future__ import annotations

import re
import sqlite3
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from bot.service.store.protocol import StoreError


@dataclass(frozen=True, order=True)
class Migration:
    version: int
    name: str
    sql: str


_MIGRATION_FILE = re.compile(r"(\d{4})_[a-z0-9_]+\.sql")


def migrations() -> list[Migration]:
    """The numbered files of ``migrations/``, in order; their numbers run 1, 2, 3… without a gap."""
    return numbered_migrations("migrations")


def numbered_migrations(folder_name: str) -> list[Migration]:
    """The numbered SQL files of a folder of this package, in order, numbered 1, 2, 3… without a gap."""
    folder = resources.files("bot.service.store").joinpath(folder_name)
    found = sorted(
        Migration(int(m[1]), entry.name, entry.read_text(encoding="utf-8"))
        for entry in folder.iterdir()
        if (m := _MIGRATION_FILE.fullmatch(entry.name))
    )
    if [m.version for m in found] != list(range(1, len(found) + 1)):
        raise StoreError(f"migrations are not numbered 1..{len(found)}: {[m.name for m in found]}")
    return found


def _statements(sql: str) -> list[str]:
    """The statements of a migration file, each complete as SQLite reads it."""
    statements, current = [], ""
    for line in sql.splitlines(keepends=True):
        current += line
        if sqlite3.complete_statement(current):
            statements.append(current.strip())
            current = ""
    if current.strip() and not all(
        part.strip().startswith("--") or not part.strip() for part in current.splitlines()
    ):
        raise StoreError(f"an incomplete statement at the end of a migration: {current.strip()[:80]!r}")
    return statements


def migrate(conn: sqlite3.Connection, path: Path) -> int:
    """Bring the database to the newest schema; returns its version. StoreError when it is newer.

    Each migration and the version it reaches commit together, so a crash midway leaves the
    database at the previous version, to be migrated again at the next start. A second process
    starting at the same time waits for the lock, then finds nothing left to do.
    """
    known = migrations()
    latest = known[-1].version
    conn.execute("BEGIN IMMEDIATE")
    try:
        current = int(conn.execute("PRAGMA user_version").fetchone()[0])
        if current > latest:
            raise StoreError(
                f"{path}: the database is at schema version {current}, newer than this paritybot's "
                f"{latest}: it was written by a newer release. Run that release (or newer), or restore "
                "the backup taken before the upgrade; nothing was changed"
            )
        for migration in known[current:]:
            for statement in _statements(migration.sql):
                conn.execute(statement)
            conn.execute(f"PRAGMA user_version = {migration.version}")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")
    _check_tables(conn, path, known)
    return latest


def _columns(conn: sqlite3.Connection) -> dict[str, set[str]]:
    tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    return {t: {r[1] for r in conn.execute(f"PRAGMA table_info({t})")} for t in tables}


def _check_tables(conn: sqlite3.Connection, path: Path, known: list[Migration]) -> None:
    """Every table and column the migrations make is there: a database made before the first
    schema with migrations would otherwise fail later, at the first query that needs the column."""
    fresh = sqlite3.connect(":memory:", isolation_level=None)
    try:
        for migration in known:
            for statement in _statements(migration.sql):
                fresh.execute(statement)
        wanted = _columns(fresh)
    finally:
        fresh.close()
    have = _columns(conn)
    missing = sorted(
        f"{table}.{column}" for table, cols in wanted.items() for column in cols - have.get(table, set())
    )
    if missing:
        raise StoreError(
            f"{path}: the database lacks {', '.join(missing)}: it was made by a paritybot older than "
            "its first release with a versioned schema; start from a new database file"
        )
