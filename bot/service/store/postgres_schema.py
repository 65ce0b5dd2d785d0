"""The PostgreSQL schema: procrastinate's job tables and paritybot's own, brought up to date by one
command (`paritybot db upgrade`, also run when `serve` starts).

Both are applied in one transaction under an advisory lock, so replicas starting together wait
for each other and find nothing left to do, and a failure leaves the database as it was.
procrastinate ships its schema and numbered SQL migrations but no record of which were applied;
the names of those applied are kept in ``paritybot_procrastinate_migrations`` (a fresh schema
counts as all of them). paritybot's own migrations are the numbered files of
``postgres_migrations/``, their versions kept in ``paritybot_schema_migrations``. A database newer
than this code is refused, as for SQLite.
"""

from __future__ import annotations

from pathlib import Path

import psycopg
from procrastinate.schema import SchemaManager

from bot.service.store.protocol import StoreError
from bot.service.store.sqlite_schema import Migration, numbered_migrations

# Any constant will do: it only has to be the same for every process that migrates this database.
_MIGRATION_LOCK = 0x70617269_7479  # "parity"

# The tables the agents' role works on in procrastinate's schema (its worker fetches, finishes,
# heartbeats and, in the reaper, defers); granted again after every upgrade, for tables it adds.
_AGENT_GRANTS = """
GRANT SELECT, INSERT, UPDATE ON procrastinate_jobs TO paritybot_agent;
GRANT SELECT, INSERT, UPDATE, DELETE ON procrastinate_workers TO paritybot_agent;
GRANT SELECT, INSERT ON procrastinate_events TO paritybot_agent;
GRANT SELECT, INSERT, DELETE ON procrastinate_periodic_defers TO paritybot_agent;
GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO paritybot_agent;
"""


def migrations() -> list[Migration]:
    """paritybot's numbered PostgreSQL migrations, in order, numbered 1, 2, 3… without a gap."""
    return numbered_migrations("postgres_migrations")


def procrastinate_migrations() -> list[tuple[str, str]]:
    """(name, SQL) of procrastinate's migrations, in the order it applies them."""
    folder = Path(SchemaManager.get_migrations_path())
    return [(p.name, p.read_text(encoding="utf-8")) for p in sorted(folder.glob("*.sql"))]


def migrate(conn: psycopg.Connection, where: str) -> tuple[int, list[str]]:
    """Bring the database to the newest schema: (paritybot's version, procrastinate's migrations
    applied now). StoreError when the database is newer than this code; nothing changes then."""
    known = migrations()
    latest = known[-1].version
    applied_now: list[str] = []
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
        conn.execute(
            "CREATE TABLE IF NOT EXISTS paritybot_schema_migrations "
            "(version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())"
        )
        conn.execute(
            "CREATE TABLE IF NOT EXISTS paritybot_procrastinate_migrations "
            "(name text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
        )
        row = conn.execute("SELECT coalesce(max(version), 0) FROM paritybot_schema_migrations").fetchone()
        current = int(row[0]) if row else 0
        if current > latest:
            raise StoreError(
                f"{where}: the database is at schema version {current}, newer than this paritybot's "
                f"{latest}: it was written by a newer release. Run that release (or newer); nothing "
                "was changed"
            )
        applied_now = _procrastinate(conn)
        for migration in known[current:]:
            conn.execute(migration.sql.encode())
            conn.execute(
                "INSERT INTO paritybot_schema_migrations (version, name) VALUES (%s, %s)",
                (migration.version, migration.name),
            )
        conn.execute(_AGENT_GRANTS.encode())
    return latest, applied_now


def _procrastinate(conn: psycopg.Connection) -> list[str]:
    """procrastinate's schema on a new database, else its migrations not applied yet."""
    every = procrastinate_migrations()
    exists = conn.execute("SELECT to_regclass('procrastinate_jobs') IS NOT NULL").fetchone()
    if not (exists and exists[0]):
        conn.execute(SchemaManager.get_schema().encode())
        for name, _ in every:
            conn.execute("INSERT INTO paritybot_procrastinate_migrations (name) VALUES (%s)", (name,))
        return ["schema.sql"]
    done = {r[0] for r in conn.execute("SELECT name FROM paritybot_procrastinate_migrations")}
    applied = []
    for name, sql in every:
        if name not in done:
            conn.execute(sql.encode())
            conn.execute("INSERT INTO paritybot_procrastinate_migrations (name) VALUES (%s)", (name,))
            applied.append(name)
    return applied


def safe_url(url: str) -> str:
    """The URL without its password, for messages."""
    try:
        info = psycopg.conninfo.conninfo_to_dict(url)
    except psycopg.ProgrammingError:
        return "the database"
    return f"postgresql://{info.get('user', '')}@{info.get('host', '')}:{info.get('port', '')}/{info.get('dbname', '')}"
