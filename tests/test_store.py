"""The store's schema: versioned migrations at start-up, upgrades that keep every row, and a clear
refusal of a database this code cannot read."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from bot.core.kinds import Stage
from bot.core.models import AdviceKind, RunState
from bot.render.comment import render_comment
from bot.service.store import sqlite_schema
from bot.service.store.protocol import StoreError
from bot.service.store.records import DeliveryStatus
from bot.service.store.sqlite import SQLiteStore
from bot.service.store.sqlite_schema import Migration, migrations

FIRST_SCHEMA_DB = Path(__file__).parent / "fixtures" / "store" / "first_schema_b6441fe.sql"
REPO = "octo-org/calc"


def first_schema_database(path: Path) -> Path:
    """A database as the first landed release left it, with data in every table."""
    conn = sqlite3.connect(path)
    conn.executescript(FIRST_SCHEMA_DB.read_text())
    conn.close()
    return path


def schema_of(path: Path) -> dict[str, list[tuple[str, str]]]:
    """Each table's and index's columns: what the code relies on."""
    conn = sqlite3.connect(path)
    try:
        names = [
            r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'index')")
        ]
        return {
            name: sorted((str(r[1]), str(r[2])) for r in conn.execute(f"PRAGMA table_xinfo({name})"))
            for name in names
            if not name.startswith("sqlite_")
        }
    finally:
        conn.close()


def user_version(path: Path) -> int:
    conn = sqlite3.connect(path)
    try:
        return int(conn.execute("PRAGMA user_version").fetchone()[0])
    finally:
        conn.close()


def test_a_new_database_gets_every_migration(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "new.db")
    store.close()
    assert user_version(tmp_path / "new.db") == len(migrations()) == store.schema_version
    assert "intake_position" not in schema_of(tmp_path / "new.db")


def test_the_first_landed_schema_with_data_is_upgraded_and_every_row_still_reads(tmp_path: Path) -> None:
    path = first_schema_database(tmp_path / "old.db")
    assert user_version(path) == 0 and "intake_position" in schema_of(path)

    store = SQLiteStore(path)
    try:
        # deliveries: the handled and the failed ones stay so; the pending one is dispatched next
        assert [d.delivery_id for d in store.pending_deliveries()] == ["delivery-pending"]
        assert store.delivery_status("delivery-handled") == DeliveryStatus.DISPATCHED
        assert store.delivery_status("delivery-failed") == DeliveryStatus.FAILED
        assert store.record_delivery("delivery-new", "push", b"{}") is True
        assert store.record_delivery("delivery-pending", "pull_request", b"{}") is False  # still deduplicated
        assert store.installation(1) == ("octo-org", "created")

        # jobs: the finished run's report renders; the queued one is claimed; the interrupted one recovers
        finished, queued = store.jobs_for_pr(REPO, 7)
        assert finished.state == RunState.SUCCEEDED and queued.state == RunState.QUEUED
        assert queued.check_runs == {"pre-commit": 21, "docstrings": 22, "tests": 23, "parity": 24}
        assert queued.request.comment_id == 99 and queued.request.config is not None
        report = store.report(finished.id)
        assert report is not None and report.parity is not None
        assert {a.kind for a in report.parity.advice} == {AdviceKind.NOTE}  # stored before advice had kinds
        assert "test_conv2d_matches_reference" in render_comment(report, stage=Stage.DONE)
        assert store.recover(max_attempts=2) == (1, 0)  # the baseline run the upgrade interrupted
        baseline, waiting = store.jobs_in_state(RunState.QUEUED)
        assert baseline.pr_number is None and waiting.id == queued.id
        claimed = [store.claim(), store.claim(), store.claim()]
        assert [job.id if job else None for job in claimed] == [baseline.id, queued.id, None]

        # pull requests, approvals and the CI reference
        state = store.pull_state(REPO, 7)
        assert (state.comment_id, state.last_verdict) == (555, "fail")
        assert state.failed_tests == {"cuda12": ["tests/test_stats.py::TestMean::test_mean_of_halves"]}
        assert store.approvals(REPO, 7) == [("2" * 40, "maintainer")]
        reference = store.baseline(REPO, "cuda12")
        assert reference is not None and reference.torch is not None
    finally:
        store.close()

    # The upgraded database has exactly the schema a new one gets.
    fresh = SQLiteStore(tmp_path / "fresh.db")
    fresh.close()
    assert schema_of(path) == schema_of(tmp_path / "fresh.db")
    assert user_version(path) == user_version(tmp_path / "fresh.db")


def test_opening_an_upgraded_database_again_changes_nothing(tmp_path: Path) -> None:
    path = first_schema_database(tmp_path / "old.db")
    SQLiteStore(path).close()
    before = schema_of(path)
    store = SQLiteStore(path)
    store.close()
    assert schema_of(path) == before and store.schema_version == len(migrations())


def test_a_database_newer_than_the_code_is_refused_and_left_as_it_is(tmp_path: Path) -> None:
    path = tmp_path / "newer.db"
    SQLiteStore(path).close()
    conn = sqlite3.connect(path)
    conn.execute(f"PRAGMA user_version = {len(migrations()) + 1}")
    conn.execute("CREATE TABLE from_the_future (x)")
    conn.commit()
    conn.close()
    before = schema_of(path)
    with pytest.raises(
        StoreError, match=r"newer than this paritybot's \d+: it was written by a newer release"
    ):
        SQLiteStore(path)
    assert schema_of(path) == before and user_version(path) == len(migrations()) + 1


def test_a_database_older_than_the_first_versioned_schema_is_refused_naming_what_it_lacks(
    tmp_path: Path,
) -> None:
    path = tmp_path / "older.db"
    conn = sqlite3.connect(path)
    conn.executescript(FIRST_SCHEMA_DB.read_text())
    conn.executescript("ALTER TABLE deliveries DROP COLUMN not_before")
    conn.close()
    with pytest.raises(StoreError, match=r"lacks deliveries\.not_before"):
        SQLiteStore(path)


def test_a_migration_that_fails_midway_leaves_the_previous_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "db"
    known = migrations()
    SQLiteStore(path).close()
    broken = Migration(
        len(known) + 1, "broken.sql", "CREATE TABLE half_done (x);\nSELECT * FROM no_such_table;\n"
    )
    monkeypatch.setattr(sqlite_schema, "migrations", lambda: [*known, broken])
    with pytest.raises(sqlite3.OperationalError, match="no_such_table"):
        SQLiteStore(path)
    assert user_version(path) == len(known)
    assert "half_done" not in schema_of(path)


def test_migration_files_are_numbered_without_a_gap() -> None:
    assert [m.version for m in migrations()] == list(range(1, len(migrations()) + 1))
    assert migrations()[0].name == "0001_first_schema.sql"


def _running_job(store: SQLiteStore, n: int = 7) -> str:
    from bot.core.models import RunRequest

    request = RunRequest(
        installation_id=1, repo=REPO, clone_url="file:///x", pr_number=n, head_sha="a" * 40, base_ref="main"
    )
    job = store.enqueue(request, "default", f"key-{n}")
    assert job is not None and store.claim() is not None
    return job.id


def test_a_run_stopped_by_restarts_is_requeued_then_failed_saying_so_and_due_on_github(
    tmp_path: Path,
) -> None:
    store = SQLiteStore(tmp_path / "db")
    job_id = _running_job(store)
    assert store.recover(max_attempts=2) == (1, 0)
    job = store.get_job(job_id)
    assert job is not None and job.state == RunState.QUEUED and not job.report_due
    assert store.claim() is not None  # the second attempt
    assert store.recover(max_attempts=2) == (0, 1)
    job = store.get_job(job_id)
    assert job is not None and job.state == RunState.FAILED and job.report_due
    assert job.error == "paritybot restarted twice during this run; comment `/retest-gpu` to run it again"
    assert [j.id for j in store.jobs_due_for_report()] == [job_id]
    store.mark_reported(job_id)
    assert store.jobs_due_for_report() == []
    store.close()


def test_a_silent_worker_loses_its_run_and_cannot_finish_it_afterwards(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "db")
    job_id = _running_job(store)
    assert store.heartbeat(job_id, attempt=1)
    assert store.recover(max_attempts=1, stale_after_s=60) == (0, 0)  # it beat just now
    assert store.recover(max_attempts=1, stale_after_s=0) == (0, 1)
    job = store.get_job(job_id)
    assert (
        job is not None
        and job.error is not None
        and job.error.startswith("the worker running it stopped answering once")
    )
    # The worker comes back: its heartbeat and its result are refused (fencing).
    assert not store.heartbeat(job_id, attempt=1)
    assert not store.finish(job_id, RunState.SUCCEEDED, None, None, attempt=1)
    assert store.get_job(job_id).state == RunState.FAILED  # type: ignore[union-attr]
    store.close()


def test_creating_check_runs_is_recorded_before_the_first_request(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "db")
    job_id = _running_job(store)
    assert store.intend_check_runs(job_id) is False  # nothing can exist yet: no lookup needed
    assert store.intend_check_runs(job_id) is True  # a retry: look them up first
    store.set_check_runs(job_id, {"tests": 3})
    store.set_check_runs(job_id, {"parity": 4})
    job = store.get_job(job_id)
    assert job is not None and job.check_runs == {"tests": 3, "parity": 4}
    store.close()


def test_runs_the_old_recovery_failed_in_the_database_only_are_due_after_the_upgrade(tmp_path: Path) -> None:
    path = first_schema_database(tmp_path / "old.db")
    conn = sqlite3.connect(path)
    conn.execute(
        "INSERT INTO jobs SELECT 'killedtwice00001', 9, queue, repo, pr_number, head_sha, environment, request, "
        "'killed-twice', 'failed', 2, check_runs, 0, created_at, started_at, finished_at, "
        "'interrupted by a restart too many times', NULL FROM jobs WHERE pr_number IS NOT NULL LIMIT 1"
    )
    conn.commit()
    conn.close()
    store = SQLiteStore(path)
    try:
        assert [j.id for j in store.jobs_due_for_report()] == ["killedtwice00001"]
    finally:
        store.close()
