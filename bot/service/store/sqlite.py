"""The embedded store and queue: one SQLite file in WAL mode, and every query it runs.

One connection guarded by a lock serves the whole process, the webhook intake included: its one
INSERT per delivery waits for the disk, not for the lock (see docs/intake.md). The schema is the
numbered files of ``migrations/``, applied at start-up (:mod:`bot.service.store.sqlite_schema`).

Longer than most modules: it is the whole store protocol for one backend, every query beside
the others it must agree with; splitting it by table would scatter the transactions.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

from bot.core.kinds import COMMAND
from bot.core.models import EnvFacts, RunReport, RunRequest, RunState
from bot.service.store.overview import Overview, read_overview
from bot.service.store.records import (
    COMMIT_RECORD_SQL,
    TOLD_SQL,
    Delivery,
    DeliveryStatus,
    Job,
    PullState,
    TestRunRecord,
    commit_record,
    links_by_test,
    told_record,
)
from bot.service.store.sqlite_logs import SQLiteRunLogs
from bot.service.store.sqlite_schema import migrate
from bot.service.store.sqlite_sessions import SQLiteSessions
from runner.backends.base import StepProcess

_ACTIVE = (RunState.QUEUED.value, RunState.RUNNING.value)
HISTORY_CHUNK = 500  # node ids per query: under SQLite's limit of bound parameters
# Every final job has something to tell on GitHub: a pull request's runs their check runs and
# summary, a default-branch run whether its coverage map was recorded (a check run on its commit).
_DUE = "1"


def interrupted_error(attempts: int, cause: str) -> str:
    """What a run stopped by ``cause`` on each of its ``attempts`` says, in its check runs and summary."""
    times = {1: "once", 2: "twice"}.get(attempts, f"{attempts} times")
    return f"{cause} {times} during this run; comment `{COMMAND}` to run it again"


RESTARTED = "paritybot restarted"
WORKER_LOST = "the worker running it stopped answering"


def _now() -> str:
    return datetime.now(UTC).isoformat()


def connect(path: Path) -> sqlite3.Connection:
    """A connection with the settings every user of the file needs."""
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None, timeout=30)
    conn.execute("PRAGMA journal_mode=WAL")
    # FULL: a commit is on disk when it returns; the webhook answers 202 only after its commit.
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute("PRAGMA busy_timeout=30000")
    return conn


def _delivery(row: sqlite3.Row) -> Delivery:
    return Delivery(
        delivery_id=row["delivery_id"],
        event=row["event"],
        body=row["body"],
        received_at=datetime.fromisoformat(row["received_at"]),
        attempts=row["attempts"],
        status=DeliveryStatus(row["status"]),
        error=row["error"],
    )


class SQLiteStore(SQLiteRunLogs, SQLiteSessions):
    """:class:`bot.service.store.protocol.Store` on one SQLite file."""

    def __init__(self, path: Path):
        self.path = path
        self._conn = connect(path)
        self._lock = threading.Lock()
        try:
            self.schema_version = migrate(self._conn, path)
        except BaseException:
            self._conn.close()
            raise

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                yield self._conn
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")

    def _query(self, sql: str, args: tuple[object, ...] = ()) -> list[sqlite3.Row]:
        with self._lock:
            cur = self._conn.execute(sql, args)
            cur.row_factory = sqlite3.Row
            return cur.fetchall()

    # deliveries -----------------------------------------------------------------------------------

    def record_delivery(self, delivery_id: str, event: str, body: bytes) -> bool:
        """Commit a delivery; False for a redelivery (its id is known), which changes nothing."""
        with self._lock:
            # One statement in autocommit mode: its own transaction, durable when it returns.
            cur = self._conn.execute(
                "INSERT INTO deliveries (delivery_id, event, body, received_at) VALUES (?, ?, ?, ?) "
                "ON CONFLICT(delivery_id) DO NOTHING",
                (delivery_id, event, body, _now()),
            )
            return cur.rowcount == 1

    def pending_deliveries(self, limit: int = 100) -> list[Delivery]:
        rows = self._query(
            "SELECT delivery_id, event, body, received_at, attempts, status, error FROM deliveries "
            "WHERE status = 'received' AND (not_before IS NULL OR not_before <= ?) ORDER BY rowid LIMIT ?",
            (_now(), limit),
        )
        return [_delivery(r) for r in rows]

    def finish_delivery(self, delivery_id: str, status: DeliveryStatus, error: str | None = None) -> None:
        with self._tx() as c:
            c.execute(
                "UPDATE deliveries SET status = ?, error = ?, attempts = attempts + 1 WHERE delivery_id = ?",
                (status.value, error, delivery_id),
            )

    def retry_delivery_later(self, delivery_id: str, error: str, delay_s: float) -> None:
        """Count a failed attempt; the delivery is pending again once ``delay_s`` has passed."""
        not_before = (datetime.now(UTC) + timedelta(seconds=delay_s)).isoformat()
        with self._tx() as c:
            c.execute(
                "UPDATE deliveries SET attempts = attempts + 1, error = ?, not_before = ? WHERE delivery_id = ?",
                (error, not_before, delivery_id),
            )

    def delivery_status(self, delivery_id: str) -> DeliveryStatus | None:
        rows = self._query("SELECT status FROM deliveries WHERE delivery_id = ?", (delivery_id,))
        return DeliveryStatus(rows[0]["status"]) if rows else None

    def delivery(self, delivery_id: str) -> Delivery | None:
        rows = self._query(
            "SELECT delivery_id, event, body, received_at, attempts, status, error FROM deliveries "
            "WHERE delivery_id = ?",
            (delivery_id,),
        )
        return _delivery(rows[0]) if rows else None

    def delivery_count(self) -> int:
        return int(self._query("SELECT count(*) AS n FROM deliveries")[0]["n"])

    def delivery_status_count(self, status: DeliveryStatus) -> int:
        rows = self._query(
            "SELECT count(*) AS n FROM deliveries WHERE status = ?", (DeliveryStatus(status).value,)
        )
        return int(rows[0]["n"])

    # installations --------------------------------------------------------------------------------

    def record_installation(self, installation_id: int, account: str, action: str) -> None:
        with self._tx() as c:
            c.execute(
                "INSERT INTO installations VALUES (?, ?, ?, ?) ON CONFLICT(installation_id) DO UPDATE "
                "SET account = excluded.account, action = excluded.action, updated_at = excluded.updated_at",
                (installation_id, account, action, _now()),
            )

    def installation(self, installation_id: int) -> tuple[str, str] | None:
        rows = self._query(
            "SELECT account, action FROM installations WHERE installation_id = ?", (installation_id,)
        )
        return (rows[0]["account"], rows[0]["action"]) if rows else None

    # jobs -----------------------------------------------------------------------------------------

    def enqueue(
        self, request: RunRequest, environment: str, dedupe_key: str, queue: str | None = None
    ) -> Job | None:
        job_id = uuid.uuid4().hex[:16]
        with self._tx() as c:
            seq = c.execute("SELECT coalesce(max(seq), 0) + 1 FROM jobs").fetchone()[0]
            cur = c.execute(
                "INSERT OR IGNORE INTO jobs (id, seq, queue, repo, pr_number, head_sha, environment, "
                "request, dedupe_key, state, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    job_id,
                    seq,
                    queue or environment,
                    request.repo,
                    request.pr_number,
                    request.head_sha,
                    environment,
                    request.model_dump_json(),
                    dedupe_key,
                    RunState.QUEUED.value,
                    _now(),
                ),
            )
            if cur.rowcount == 0:
                return None
        return self.get_job(job_id)

    def claim(self, queues: list[str] | None = None) -> Job | None:
        where = "state = 'queued'"
        args: tuple[object, ...] = ()
        if queues:
            where += f" AND queue IN ({','.join('?' * len(queues))})"
            args = tuple(queues)
        with self._tx() as c:
            row = c.execute(f"SELECT id FROM jobs WHERE {where} ORDER BY seq LIMIT 1", args).fetchone()
            if row is None:
                return None
            c.execute(
                "UPDATE jobs SET state = 'running', attempts = attempts + 1, started_at = ?, heartbeat_at = ? "
                "WHERE id = ?",
                (_now(), _now(), row[0]),
            )
        return self.get_job(row[0])

    def get_job(self, job_id: str) -> Job | None:
        rows = self._query("SELECT * FROM jobs WHERE id = ?", (job_id,))
        return self._job(rows[0]) if rows else None

    @staticmethod
    def _job(r: sqlite3.Row) -> Job:
        def ts(v: str | None) -> datetime | None:
            return datetime.fromisoformat(v) if v else None

        return Job(
            id=r["id"],
            queue=r["queue"],
            repo=r["repo"],
            pr_number=r["pr_number"],
            head_sha=r["head_sha"],
            environment=r["environment"],
            request=RunRequest.model_validate_json(r["request"]),
            state=RunState(r["state"]),
            attempts=r["attempts"],
            check_runs=json.loads(r["check_runs"]),
            check_runs_intent_at=ts(r["check_runs_intent_at"]),
            check_run_sent=json.loads(r["check_run_sent"]),
            report_due=bool(r["report_due"]),
            heartbeat_at=ts(r["heartbeat_at"]),
            cancel_requested=bool(r["cancel_requested"]),
            created_at=datetime.fromisoformat(r["created_at"]),
            started_at=ts(r["started_at"]),
            finished_at=ts(r["finished_at"]),
            error=r["error"],
        )

    def set_check_runs(self, job_id: str, check_runs: dict[str, int]) -> None:
        """Add check run ids (check kind → id) to those the job has."""
        with self._tx() as c:
            row = c.execute("SELECT check_runs FROM jobs WHERE id = ?", (job_id,)).fetchone()
            if row is not None:
                merged = json.loads(row[0]) | check_runs
                c.execute("UPDATE jobs SET check_runs = ? WHERE id = ?", (json.dumps(merged), job_id))

    def intend_check_runs(self, job_id: str) -> bool:
        """Record that the job's check runs are about to be created; True when that was recorded
        before (a request may have created some whose ids were never saved: look them up)."""
        with self._tx() as c:
            row = c.execute("SELECT check_runs_intent_at FROM jobs WHERE id = ?", (job_id,)).fetchone()
            if row is None or row[0] is not None:
                return row is not None
            c.execute("UPDATE jobs SET check_runs_intent_at = ? WHERE id = ?", (_now(), job_id))
            return False

    def set_check_run_sent(self, job_id: str, kind: str, digest: str) -> None:
        with self._tx() as c:
            row = c.execute("SELECT check_run_sent FROM jobs WHERE id = ?", (job_id,)).fetchone()
            if row is not None:
                sent = json.loads(row[0]) | {kind: digest}
                c.execute("UPDATE jobs SET check_run_sent = ? WHERE id = ?", (json.dumps(sent), job_id))

    def finish(
        self,
        job_id: str,
        state: RunState,
        report: RunReport | None,
        error: str | None,
        *,
        attempt: int | None = None,
    ) -> bool:
        """Record a final state, due to be reported. With ``attempt``, only if that attempt still
        runs the job (a worker the reaper gave up on must not overwrite its retry); else False."""
        fence = "" if attempt is None else " AND state = 'running' AND attempts = ?"
        with self._tx() as c:
            cur = c.execute(
                f"UPDATE jobs SET state = ?, finished_at = ?, error = ?, report = ?, report_due = {_DUE}, "
                f"heartbeat_at = NULL WHERE id = ?{fence}",
                (
                    state.value,
                    _now(),
                    error,
                    report.model_dump_json() if report else None,
                    job_id,
                    *(() if attempt is None else (attempt,)),
                ),
            )
            return cur.rowcount == 1

    def save_progress(self, job_id: str, attempt: int, report: RunReport) -> bool:
        """The results so far of a running job (shown in the summary); False when it is no longer
        this attempt's."""
        with self._tx() as c:
            cur = c.execute(
                "UPDATE jobs SET report = ?, progress = progress + 1 WHERE id = ? AND state = 'running' "
                "AND attempts = ?",
                (report.model_dump_json(), job_id, attempt),
            )
            return cur.rowcount == 1

    def heartbeat(self, job_id: str, attempt: int) -> bool:
        """The worker running ``attempt`` is alive; False when the job is no longer its to run."""
        with self._tx() as c:
            cur = c.execute(
                "UPDATE jobs SET heartbeat_at = ? WHERE id = ? AND state = 'running' AND attempts = ?",
                (_now(), job_id, attempt),
            )
            return cur.rowcount == 1

    def jobs_due_for_report(self) -> list[Job]:
        rows = self._query("SELECT * FROM jobs WHERE report_due = 1 ORDER BY seq")
        return [self._job(r) for r in rows]

    def mark_reported(self, job_id: str) -> None:
        with self._tx() as c:
            c.execute("UPDATE jobs SET report_due = 0 WHERE id = ?", (job_id,))

    def jobs_to_announce(self, limit: int = 50) -> list[Job]:
        rows = self._query(
            "SELECT * FROM jobs WHERE reported_state IS NOT state OR progress > progress_published "
            "ORDER BY seq LIMIT ?",
            (limit,),
        )
        return [self._job(r) for r in rows]

    def told(self, job_id: str) -> tuple[RunState | None, int]:
        return told_record([dict(r) for r in self._query(TOLD_SQL.format(p="?"), (job_id,))])

    def mark_announced(self, job_id: str, state: RunState, progress_seen: int = 0) -> None:
        with self._tx() as c:
            c.execute(
                "UPDATE jobs SET reported_state = ?, progress_published = progress_published + ? WHERE id = ?",
                (state.value, progress_seen, job_id),
            )

    def request_cancel(self, repo: str, pr_number: int, *, keep_sha: str | None = None) -> list[Job]:
        with self._tx() as c:
            rows = c.execute(
                "SELECT id, state FROM jobs WHERE repo = ? AND pr_number = ? AND state IN (?, ?) "
                "AND (? IS NULL OR head_sha != ?)",
                (repo, pr_number, *_ACTIVE, keep_sha, keep_sha),
            ).fetchall()
            for job_id, state in rows:
                if state == RunState.QUEUED.value:
                    c.execute(
                        f"UPDATE jobs SET state = 'cancelled', finished_at = ?, error = ?, report_due = {_DUE} "
                        "WHERE id = ?",
                        (_now(), "superseded before it started", job_id),
                    )
                else:
                    c.execute("UPDATE jobs SET cancel_requested = 1 WHERE id = ?", (job_id,))
        return [j for j in (self.get_job(job_id) for job_id, _ in rows) if j is not None]

    def is_cancel_requested(self, job_id: str) -> bool:
        rows = self._query("SELECT cancel_requested FROM jobs WHERE id = ?", (job_id,))
        return bool(rows and rows[0]["cancel_requested"])

    def queue_position(self, job_id: str) -> int | None:
        rows = self._query(
            "SELECT (SELECT count(*) FROM jobs o WHERE o.state = 'queued' AND o.queue = j.queue "
            "AND o.seq <= j.seq) AS pos, j.state AS state FROM jobs j WHERE j.id = ?",
            (job_id,),
        )
        if not rows or rows[0]["state"] != RunState.QUEUED.value:
            return None
        return int(rows[0]["pos"])

    def recover(self, max_attempts: int, *, stale_after_s: float | None = None) -> tuple[int, int]:
        """Running jobs whose process is gone: all of them at start-up (``stale_after_s`` None), else
        those whose heartbeat is older than that. Each is queued again, or failed once it has had
        ``max_attempts``, saying how often it was stopped; a failed one is due to be reported.
        Returns (requeued, failed)."""
        args: tuple[str, ...] = ()
        if stale_after_s is None:
            where, cause = "state = 'running'", RESTARTED
        else:
            cutoff = (datetime.now(UTC) - timedelta(seconds=stale_after_s)).isoformat()
            where = "state = 'running' AND (heartbeat_at IS NULL OR heartbeat_at < ?)"
            args, cause = (cutoff,), WORKER_LOST
        requeued = failed = 0
        with self._tx() as c:
            for job_id, attempts in c.execute(
                f"SELECT id, attempts FROM jobs WHERE {where}", args
            ).fetchall():
                if attempts >= max_attempts:
                    c.execute(
                        f"UPDATE jobs SET state = 'failed', finished_at = ?, error = ?, report_due = {_DUE}, "
                        "heartbeat_at = NULL WHERE id = ?",
                        (_now(), interrupted_error(attempts, cause), job_id),
                    )
                    failed += 1
                else:
                    # The dead attempt's results so far are dropped: the next attempt starts afresh.
                    c.execute(
                        "UPDATE jobs SET state = 'queued', started_at = NULL, heartbeat_at = NULL, "
                        "report = NULL WHERE id = ?",
                        (job_id,),
                    )
                    requeued += 1
        return requeued, failed

    def jobs_for_pr(self, repo: str, pr_number: int) -> list[Job]:
        rows = self._query(
            "SELECT * FROM jobs WHERE repo = ? AND pr_number = ? ORDER BY seq", (repo, pr_number)
        )
        return [self._job(r) for r in rows]

    def jobs_in_state(self, state: RunState) -> list[Job]:
        return [
            self._job(r)
            for r in self._query("SELECT * FROM jobs WHERE state = ? ORDER BY seq", (state.value,))
        ]

    def report(self, job_id: str) -> RunReport | None:
        rows = self._query("SELECT report FROM jobs WHERE id = ?", (job_id,))
        if not rows or rows[0]["report"] is None:
            return None
        return RunReport.model_validate_json(rows[0]["report"])

    # pull requests --------------------------------------------------------------------------------

    def pull_state(self, repo: str, pr_number: int) -> PullState:
        rows = self._query("SELECT * FROM pulls WHERE repo = ? AND pr_number = ?", (repo, pr_number))
        if not rows:
            return PullState(repo=repo, pr_number=pr_number)
        r = rows[0]
        return PullState(
            repo=repo,
            pr_number=pr_number,
            comment_id=r["comment_id"],
            comment_body_hash=r["comment_body_hash"],
            comment_pending=bool(r["comment_pending"]),
            last_verdict=r["last_verdict"],
            failed_tests=json.loads(r["failed_tests"]),
        )

    def save_pull_state(self, state: PullState) -> None:
        with self._tx() as c:
            c.execute(
                "INSERT INTO pulls (repo, pr_number, comment_id, comment_body_hash, last_verdict, "
                "failed_tests, comment_pending) VALUES (?, ?, ?, ?, ?, ?, ?) "
                "ON CONFLICT(repo, pr_number) DO UPDATE SET "
                "comment_id = excluded.comment_id, comment_body_hash = excluded.comment_body_hash, "
                "last_verdict = excluded.last_verdict, failed_tests = excluded.failed_tests, "
                "comment_pending = excluded.comment_pending",
                (
                    state.repo,
                    state.pr_number,
                    state.comment_id,
                    state.comment_body_hash,
                    state.last_verdict,
                    json.dumps(state.failed_tests),
                    int(state.comment_pending),
                ),
            )

    def add_approval(self, repo: str, pr_number: int, sha: str, approver: str) -> None:
        with self._tx() as c:
            c.execute(
                "INSERT OR IGNORE INTO approvals VALUES (?, ?, ?, ?, ?)",
                (repo, pr_number, sha, approver, _now()),
            )

    def approvals(self, repo: str, pr_number: int) -> list[tuple[str, str]]:
        rows = self._query(
            "SELECT sha, approver FROM approvals WHERE repo = ? AND pr_number = ?", (repo, pr_number)
        )
        return [(r["sha"], r["approver"]) for r in rows]

    # process groups of host-runner steps ---------------------------------------------------------

    def record_step_process(self, job_id: str, attempt: int, process: StepProcess) -> None:
        with self._tx() as c:
            c.execute(
                "INSERT OR REPLACE INTO step_processes VALUES (?, ?, ?, ?, ?, ?, ?)",
                (process.pgid, process.boot_id, process.start_ticks, job_id, attempt, process.step, _now()),
            )

    def forget_step_process(self, process: StepProcess) -> None:
        with self._tx() as c:
            c.execute(
                "DELETE FROM step_processes WHERE pgid = ? AND boot_id = ? AND start_ticks = ?",
                (process.pgid, process.boot_id, process.start_ticks),
            )

    def step_processes(self) -> list[StepProcess]:
        rows = self._query("SELECT pgid, boot_id, start_ticks, step FROM step_processes ORDER BY started_at")
        return [StepProcess(r["pgid"], r["boot_id"], r["start_ticks"], r["step"]) for r in rows]

    # instances ------------------------------------------------------------------------------------

    def register_instance(self, instance_id: str, kind: str, host: str, pid: int) -> None:
        now = _now()
        with self._tx() as c:
            c.execute("UPDATE instances SET stopped_at = ? WHERE stopped_at IS NULL", (now,))
            c.execute(
                "INSERT INTO instances (id, kind, host, pid, started_at, last_heartbeat) VALUES (?, ?, ?, ?, ?, ?)",
                (instance_id, kind, host, pid, now, now),
            )

    def instance_heartbeat(self, instance_id: str) -> bool:
        with self._tx() as c:
            cur = c.execute(
                "UPDATE instances SET last_heartbeat = ? WHERE id = ? AND stopped_at IS NULL",
                (_now(), instance_id),
            )
            return cur.rowcount == 1

    def instance_stopped(self, instance_id: str) -> None:
        with self._tx() as c:
            c.execute(
                "UPDATE instances SET stopped_at = ? WHERE id = ? AND stopped_at IS NULL",
                (_now(), instance_id),
            )

    def runs_over(self, run_ids: set[str]) -> set[str]:
        if not run_ids:
            return set()
        ids = sorted(run_ids)
        rows = self._query(
            f"SELECT id FROM jobs WHERE id IN ({', '.join('?' * len(ids))}) "
            "AND state IN ('succeeded', 'failed', 'cancelled')",
            tuple(ids),
        )
        return {r["id"] for r in rows}

    def instances_alive(self, instance_ids: list[str], stalled_after_s: float) -> dict[str, bool]:
        if not instance_ids:
            return {}
        fresh = (datetime.now(UTC) - timedelta(seconds=stalled_after_s)).isoformat()
        marks = ", ".join("?" * len(instance_ids))
        rows = self._query(
            f"SELECT id, stopped_at IS NULL AND last_heartbeat > ? AS alive FROM instances WHERE id IN ({marks})",
            (fresh, *instance_ids),
        )
        return {r["id"]: bool(r["alive"]) for r in rows}

    # baselines ------------------------------------------------------------------------------------

    def save_baseline(self, repo: str, environment: str, facts: EnvFacts) -> None:
        with self._tx() as c:
            c.execute(
                "INSERT INTO baselines VALUES (?, ?, ?, ?) ON CONFLICT(repo, environment) DO UPDATE "
                "SET facts = excluded.facts, updated_at = excluded.updated_at",
                (repo, environment, facts.model_dump_json(), _now()),
            )

    def baseline(self, repo: str, environment: str) -> EnvFacts | None:
        rows = self._query(
            "SELECT facts FROM baselines WHERE repo = ? AND environment = ?", (repo, environment)
        )
        return EnvFacts.model_validate_json(rows[0]["facts"]) if rows else None

    # the tests' history -------------------------------------------------------------------------

    def record_test_run(self, run: TestRunRecord) -> None:
        with self._tx() as c:
            c.execute("DELETE FROM test_outcomes WHERE job_id = ?", (run.job_id,))
            c.execute("DELETE FROM test_runs WHERE job_id = ?", (run.job_id,))
            c.execute(
                "INSERT INTO test_runs VALUES (?, ?, ?, ?, ?, ?, ?)",
                (run.job_id, run.repo, run.environment, run.pr_number, run.head_sha, run.url, _now()),
            )
            c.executemany(
                "INSERT OR REPLACE INTO test_outcomes VALUES (?, ?, ?, ?)",
                [(run.job_id, nodeid, outcome, message) for nodeid, outcome, message in run.outcomes],
            )

    def flaky_elsewhere(
        self, repo: str, nodeids: list[str], *, pr_number: int | None, limit: int = 3
    ) -> dict[str, list[str]]:
        rows: list[sqlite3.Row] = []
        for i in range(0, len(nodeids), HISTORY_CHUNK):
            chunk = nodeids[i : i + HISTORY_CHUNK]
            rows += self._query(
                "SELECT o.nodeid, r.url FROM test_outcomes o JOIN test_runs r ON r.job_id = o.job_id "
                f"WHERE r.repo = ? AND o.outcome = 'flaky' AND o.nodeid IN ({', '.join('?' * len(chunk))}) "
                "AND (? IS NULL OR r.pr_number IS NULL OR r.pr_number != ?) "
                "ORDER BY r.recorded_at DESC, r.job_id",
                (repo, *chunk, pr_number, pr_number),
            )
        return links_by_test(
            [dict(r) for r in rows], limit
        )  # a chunk's newest first: enough for a few links per test

    def failing_at(self, repo: str, environment: str, sha: str) -> dict[str, str] | None:
        rows = self._query(COMMIT_RECORD_SQL.format(p="?"), (repo, environment, sha))
        return commit_record([dict(r) for r in rows])

    def overview(self, recent: int = 20) -> Overview:
        return read_overview(self._query, placeholder="?", true="1", fleet=False, recent=recent)
