"""Releases: one version shown everywhere, the schema each release runs on, `paritybot db status`
before a rollback, and settings renamed after a release still read (with a warning) for one more."""

from __future__ import annotations

import importlib.metadata
import json
import re
import sqlite3
import subprocess
from pathlib import Path

import pytest
from cli_run import run_cli
from postgres_support import pg_url

from bot.core.release import RELEASES, SCHEMAS, VERSION, reads
from bot.service.settings import load_settings
from bot.service.store.postgres_schema import migrations as postgres_migrations
from bot.service.store.sqlite import SQLiteStore
from bot.service.store.sqlite_schema import migrations as sqlite_migrations

__all__ = ["pg_url"]

ROOT = Path(__file__).resolve().parents[1]
CHANGELOG = ROOT / "CHANGELOG.md"


def test_the_version_is_set_once_and_shown_by_the_command_and_the_package() -> None:
    done = run_cli("--version")
    assert done.returncode == 0 and done.stdout == f"paritybot {VERSION}\n"
    assert importlib.metadata.version("paritybot") == VERSION
    assert 'version = "' not in (ROOT / "pyproject.toml").read_text().split("[project.optional")[0]


@pytest.mark.parametrize(
    ("backend", "files"), [("sqlite", sqlite_migrations), ("postgresql", postgres_migrations)]
)
def test_every_schema_version_names_the_releases_that_run_on_it(backend: str, files: object) -> None:
    latest = files()[-1].version  # type: ignore[operator]
    spans = [s for s in SCHEMAS if s.backend == backend]
    assert [s.schema_version for s in spans] == list(range(latest + 1)), (
        "a migration needs its row in SCHEMAS"
    )
    # Only this release's schema is open-ended; every other one ended with a release.
    assert [s.schema_version for s in spans if s.first is not None and s.last is None] == [latest]
    known = {r.version for r in RELEASES}
    for span in spans:
        assert span.first is None or span.first in known or span.last is None, span
    assert reads(spans[latest], VERSION)


def test_each_release_is_a_commit_of_this_history_with_upgrade_notes_in_the_changelog() -> None:
    text = CHANGELOG.read_text()
    assert "## [Unreleased]" in text
    for release in RELEASES:
        section = text.split(f"## [{release.version}] - {release.date}", 1)
        assert len(section) == 2, f"no section for {release.version} dated {release.date}"
        assert "### Upgrade notes" in section[1].split("\n## [", 1)[0], release.version
        link = re.search(rf"^\[{re.escape(release.version)}\]: .*\b([0-9a-f]{{40}})\b", text, re.M)
        assert link and link.group(1) == release.commit, f"the link of {release.version} names its commit"
        shallow = subprocess.run(["git", "-C", str(ROOT), "cat-file", "-e", f"{release.commit}^{{commit}}"])
        if shallow.returncode != 0:
            pytest.skip("a shallow clone: the releases' commits are not here")


def first_release_database(path: Path) -> None:
    """A database as 0.1.0 made it: its schema (migration 1 is it, verbatim) and no user_version."""
    conn = sqlite3.connect(path)
    conn.executescript(sqlite_migrations()[0].sql)
    conn.close()


def db_status(db: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_cli("db", "status", *args, env={"PARITYBOT_DATABASE_URL": f"sqlite:///{db}"}, timeout=60)


def test_db_status_says_which_releases_run_on_a_sqlite_database_and_changes_nothing(tmp_path: Path) -> None:
    db = tmp_path / "paritybot.db"
    assert db_status(db).stdout.startswith(f"sqlite:///{db}: no paritybot database yet")
    assert not db.exists()

    first_release_database(db)
    latest = len(sqlite_migrations())
    before = db.read_bytes()
    done = db_status(db, "--release", "0.1.0")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        f"sqlite:///{db}: sqlite schema 0; this paritybot ({VERSION}) is at schema {latest}",
        "runs on it as it is: paritybot 0.1.0 only",
        f"paritybot {VERSION} migrates it to schema {latest} at start-up (one way)",
        "paritybot 0.1.0: runs on this database as it is",
    ]
    assert db.read_bytes() == before, "db status wrote to the database"

    SQLiteStore(db).close()  # what the upgraded service does at start-up
    back = db_status(db, "--release", "0.1.0")
    assert back.returncode == 1
    assert back.stdout.splitlines()[1:] == [
        f"runs on it as it is: paritybot 0.3.0 up to this one ({VERSION})",
        "paritybot 0.1.0: cannot run on this database; restore the backup taken before the upgrade "
        "first (deploy/README.md, step 8)",
    ]
    # 0.3.0 added the instances table (schema 4): 0.2.0 refuses it, so going back restores too.
    assert db_status(db, "--release", "0.2.0").returncode == 1
    assert db_status(db, "--release", "0.3.0").returncode == 0


def newer_database(db: Path) -> None:
    """A database a release newer than this one wrote: one schema version past ours."""
    SQLiteStore(db).close()
    conn = sqlite3.connect(db)
    conn.execute(f"PRAGMA user_version = {len(sqlite_migrations()) + 1}")
    conn.close()


def test_db_status_of_a_database_newer_than_this_paritybot(tmp_path: Path) -> None:
    db = tmp_path / "paritybot.db"
    newer_database(db)
    done = db_status(db, "--release", VERSION)
    assert done.returncode == 1
    assert "a release newer than this one" in done.stdout


def test_db_status_refuses_a_release_that_is_no_version_in_one_line(tmp_path: Path) -> None:
    done = db_status(tmp_path / "paritybot.db", "--release", "yesterday")
    assert (done.returncode, done.stderr) == (
        2,
        "paritybot: --release yesterday: not a version (e.g. 0.2.0)\n",
    )


@pytest.mark.postgres
def test_db_status_on_postgresql_before_and_after_the_migration(pg_url: str) -> None:
    env = {"PARITYBOT_DATABASE_URL": pg_url}
    empty = run_cli("db", "status", "--release", "0.2.0", env=env, timeout=60)
    assert empty.returncode == 0 and "no paritybot database yet" in empty.stdout, empty.stderr
    assert run_cli("db", "upgrade", env=env, timeout=120).returncode == 0
    latest = postgres_migrations()[-1].version
    done = run_cli("db", "status", "--release", "0.3.0", env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    assert f"postgresql schema {latest}" in done.stdout
    assert done.stdout.splitlines()[-1] == "paritybot 0.3.0: runs on this database as it is"
    assert run_cli("db", "status", "--release", "0.2.0", env=env, timeout=60).returncode == 1
    assert run_cli("db", "status", "--release", "0.1.0", env=env, timeout=60).returncode == 1


def test_a_renamed_setting_is_read_with_a_warning_naming_the_new_one(tmp_path: Path) -> None:
    env_file = tmp_path / "paritybot.env"
    env_file.write_text("PARITYBOT_STALE_AFTER_S=90\n")
    settings = load_settings(env_file)
    assert settings.stalled_after_s == 90
    assert settings.deprecation_warnings() == [
        "PARITYBOT_STALE_AFTER_S is renamed PARITYBOT_STALLED_AFTER_S: rename it in your settings; "
        "paritybot 0.3.0 is the last release that reads the old name"
    ]


def test_a_renamed_setting_set_under_both_names_is_refused_in_one_line(tmp_path: Path) -> None:
    done = run_cli(
        "db",
        "status",
        env={
            "PARITYBOT_DATABASE_URL": f"sqlite:///{tmp_path / 'p.db'}",
            "PARITYBOT_STALE_AFTER_S": "90",
            "PARITYBOT_STALLED_AFTER_S": "120",
        },
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr == (
        "paritybot: settings: Value error, PARITYBOT_STALE_AFTER_S is renamed "
        "PARITYBOT_STALLED_AFTER_S, which is set too: remove PARITYBOT_STALE_AFTER_S\n"
    )


def test_serve_logs_its_version_first_then_the_renamed_setting(tmp_path: Path) -> None:
    # serve stops at the database newer than itself: the start of the log is all this needs.
    db = tmp_path / "paritybot.db"
    newer_database(db)
    key = tmp_path / "key.pem"
    key.write_text("-----BEGIN PRIVATE KEY-----\nx\n-----END PRIVATE KEY-----\n")
    env = {
        "PARITYBOT_DATABASE_URL": f"sqlite:///{db}",
        "PARITYBOT_WEBHOOK_SECRET": "s",
        "PARITYBOT_APP_ID": "1",
        "PARITYBOT_PRIVATE_KEY_PATH": str(key),
        "PARITYBOT_STALE_AFTER_S": "90",
    }
    done = run_cli("serve", env=env, cwd=tmp_path, timeout=60)
    started, renamed = (json.loads(line) for line in done.stderr.splitlines()[:2])
    assert (started["event"], started["command"], started["version"]) == ("starting", "serve", VERSION)
    assert (renamed["event"], renamed["level"]) == ("setting renamed", "warning")
    assert renamed["fix"].startswith("PARITYBOT_STALE_AFTER_S is renamed PARITYBOT_STALLED_AFTER_S")
