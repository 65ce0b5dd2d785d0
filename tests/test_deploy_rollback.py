"""The backup and restore commands of deploy/README.md, step 8, run as written on a real SQLite
database in an engine volume and on a real PostgreSQL: what an upgrade changed is gone after the
restore, and the release before it runs on the database again.

scripts/check-deploy.sh --upgrade-from runs the whole of step 8 with the images; these run in the
suite, in seconds.
"""

from __future__ import annotations

import os
import re
import sqlite3
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import docker
import psycopg
import pytest
from cli_run import run_cli
from docker_support import TEST_IMAGE, docker_client, test_image
from postgres_support import server_url, with_database

__all__ = ["docker_client", "test_image"]

ROOT = Path(__file__).resolve().parents[1]
GUIDE = ROOT / "deploy" / "README.md"


def guide_block(name: str) -> str:
    """The `sh` block of step 8 marked `<!-- step8: NAME -->`."""
    found = re.search(rf"<!-- step8: {re.escape(name)} -->\n```sh\n(.*?)```", GUIDE.read_text(), re.S)
    assert found, f"deploy/README.md has no block step8: {name}"
    return found.group(1)


def run_block(name: str, env: dict[str, str], text: str | None = None) -> None:
    done = subprocess.run(
        ["bash", "-e", "-c", text if text is not None else guide_block(name)],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, f"step8: {name}: {done.stderr}"


def test_every_block_of_step_8_is_run_by_check_deploy() -> None:
    script = (ROOT / "scripts" / "check-deploy.sh").read_text()
    named = set(re.findall(r"run_guide_block ([a-z-]+)", script))
    named |= set(re.findall(r'guide_block "\$ROOT/deploy/README.md" ([a-z-]+)', script))
    named |= set(re.findall(r"own_pg ([a-z-]+)", script))
    marked = set(re.findall(r"<!-- step8: ([a-z-]+) -->", GUIDE.read_text()))
    assert marked == named
    assert {"prepare", "stop", "backup-sqlite", "start", "rollback-check", "restore-sqlite"} <= named


# --- SQLite, in the compose file's data volume ---------------------------------------------------


@pytest.fixture
def data_volume(docker_client: docker.DockerClient, test_image: str) -> Iterator[tuple[str, str]]:
    """(volume, image tag): an engine volume and the test image under the name the guide runs."""
    client = docker_client
    volume = f"paritybot-rollback-{uuid.uuid4().hex[:8]}"
    tag = f"rollback-{uuid.uuid4().hex[:8]}"
    client.volumes.create(volume)
    client.images.get(test_image).tag("paritybot", tag)
    try:
        yield volume, tag
    finally:
        client.volumes.get(volume).remove(force=True)
        client.images.remove(f"paritybot:{tag}")


def in_volume(volume: str, script: str, *mounts: str) -> str:
    return subprocess.run(
        [
            "docker",
            "run",
            "--rm",
            "-u",
            "0",
            "-v",
            f"{volume}:/data",
            *mounts,
            TEST_IMAGE,
            "sh",
            "-c",
            script,
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout


def first_release_files(where: Path) -> None:
    """The data of a 0.1.0 deployment: its database (unversioned schema) and its delivery log."""
    from bot.service.store.sqlite_schema import migrations

    conn = sqlite3.connect(where / "paritybot.db")
    conn.executescript(migrations()[0].sql)
    conn.execute("INSERT INTO installations VALUES (7, 'acme', 'created', '2026-11-30T10:00:00Z')")
    conn.commit()
    conn.close()
    (where / "paritybot.db.deliveries").mkdir()
    (where / "paritybot.db.deliveries" / "00000001.log").write_bytes(b"a segment")


@pytest.mark.docker
def test_the_guides_sqlite_backup_and_restore_bring_the_old_database_back(
    tmp_path: Path, data_volume: tuple[str, str]
) -> None:
    volume, tag = data_volume
    seed = tmp_path / "seed"
    seed.mkdir()
    first_release_files(seed)
    # The service's files belong to its user, as on a deployment's volume.
    in_volume(volume, "cp -a /seed/. /data/ && chown -R 10001:10001 /data", f"-v={seed}:/seed:ro")
    backup = tmp_path / "backups" / "before"
    backup.mkdir(parents=True)
    env = {"VOLUME": volume, "BACKUP": str(backup), "NEW": tag, "OLD": "0.1.0"}

    run_block("backup-sqlite", env)
    # What the upgrade does to it: migrated (schema 3), the delivery log gone, a new row.
    from bot.service.store.sqlite import SQLiteStore

    work = tmp_path / "upgraded"
    work.mkdir()
    in_volume(volume, "cp /data/paritybot.db /out/", f"-v={work}:/out")
    SQLiteStore(work / "paritybot.db").close()
    in_volume(
        volume,
        "rm -rf /data/paritybot.db* && cp /in/paritybot.db /data/ && chown 10001:10001 /data/paritybot.db",
        f"-v={work}:/in:ro",
    )

    run_block("restore-sqlite", env)
    out = tmp_path / "restored"
    out.mkdir()
    listing = in_volume(
        volume, "cd /data && ls -n paritybot.db && cp -a paritybot.db* /out/", f"-v={out}:/out"
    )
    assert " 10001 10001 " in listing, listing
    conn = sqlite3.connect(out / "paritybot.db")
    assert conn.execute("PRAGMA user_version").fetchone()[0] == 0
    assert conn.execute("SELECT account FROM installations").fetchall() == [("acme",)]
    assert conn.execute("SELECT count(*) FROM sqlite_master WHERE name = 'step_processes'").fetchone() == (0,)
    conn.close()
    assert (out / "paritybot.db.deliveries" / "00000001.log").read_bytes() == b"a segment"
    status = run_cli(
        "db", "status", "--release", "0.1.0", env={"PARITYBOT_DATABASE_URL": f"sqlite:///{out}/paritybot.db"}
    )
    assert status.returncode == 0, status.stdout


# --- PostgreSQL, with pg_dump and pg_restore --------------------------------------------------------


@pytest.fixture
def owned_database() -> Iterator[tuple[str, str]]:
    """(name, URL): a database owned by a role of the same name, as `paritybot` is on a control host."""
    server = server_url()
    name = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f'CREATE ROLE "{name}" LOGIN CREATEDB')
        conn.execute(f'CREATE DATABASE "{name}" OWNER "{name}"')
        if not conn.execute("SELECT 1 FROM pg_roles WHERE rolname = 'paritybot_agent'").fetchone():
            conn.execute("CREATE ROLE paritybot_agent LOGIN")
    parts = urlsplit(with_database(server, name))
    url = urlunsplit(parts._replace(netloc=f"{name}@{parts.hostname}:{parts.port}"))
    try:
        yield name, url
    finally:
        with psycopg.connect(server, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            conn.execute(f'DROP ROLE IF EXISTS "{name}"')


def as_database(block: str, name: str) -> str:
    """The block for a PostgreSQL of one's own (the guide: `PG=` empty, libpq's variables set),
    with this test's database in place of `paritybot`."""
    block = re.sub(r"^PG=.*$", "PG=", block, flags=re.M)
    return re.sub(r"\bparitybot\b(?!\.dump)", name, block)


@pytest.mark.postgres
def test_the_guides_pg_dump_and_pg_restore_bring_the_old_database_back(
    tmp_path: Path, owned_database: tuple[str, str]
) -> None:
    name, url = owned_database
    env = {"PARITYBOT_DATABASE_URL": url}
    assert run_cli("db", "upgrade", env=env, timeout=120).returncode == 0
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO installations (installation_id, account, action) VALUES (7, 'acme', 'created')"
        )
    server = psycopg.conninfo.conninfo_to_dict(server_url())
    libpq = {"PGHOST": str(server["host"]), "PGPORT": str(server["port"]), "PGUSER": str(server["user"])}
    backup = tmp_path / "before"
    backup.mkdir()
    run_block(
        "backup-postgres", {**libpq, "BACKUP": str(backup)}, as_database(guide_block("backup-postgres"), name)
    )
    assert (backup / "paritybot.dump").stat().st_size > 0

    # A newer release's migration: a table, a row gone, its version recorded.
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE TABLE from_a_newer_release (id int)")
        conn.execute("DELETE FROM installations")
        conn.execute("INSERT INTO paritybot_schema_migrations (version, name) VALUES (99, 'newer')")
    assert run_cli("db", "status", "--release", "0.3.0", env=env, timeout=60).returncode == 1

    run_block(
        "restore-postgres",
        {**libpq, "BACKUP": str(backup)},
        as_database(guide_block("restore-postgres"), name),
    )
    with psycopg.connect(url) as conn:
        assert conn.execute("SELECT account FROM installations").fetchall() == [("acme",)]
        assert conn.execute("SELECT to_regclass('from_a_newer_release')").fetchone() == (None,)
        owner = conn.execute("SELECT pg_get_userbyid(datdba) FROM pg_database WHERE datname = %s", (name,))
        assert owner.fetchone() == (name,)
        grants = conn.execute("SELECT has_table_privilege('paritybot_agent', 'procrastinate_jobs', 'UPDATE')")
        assert grants.fetchone() == (True,), "the agents' privileges come back with the tables"
    status = run_cli("db", "status", "--release", "0.3.0", env=env, timeout=60)
    assert status.returncode == 0, status.stdout
