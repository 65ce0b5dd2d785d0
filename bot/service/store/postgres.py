"""The store on PostgreSQL, for several hosts: paritybot's records and procrastinate's queue in one
database, so a job row and its place in the queue change in the same transaction.

Each paritybot job is run by one procrastinate job per attempt (``jobs.queue_job_id``): one queue
per environment label, ``lock`` = the PR and environment (one running job), ``queueing_lock`` the
same (one queued job). Deferring, cancelling and aborting call procrastinate's own SQL functions
inside paritybot's transactions. Only the agent running the current attempt may write its results
(:meth:`PostgresStore.finish_attempt`): the procrastinate job must still be ``doing`` with that
agent's worker id; anything else is discarded and logged by the caller.

Longer than most modules: it is the store protocol for this backend (what agents and the reaper
need is in :mod:`bot.service.store.postgres_fleet`).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb
from psycopg_pool import ConnectionPool

from bot.core.models import EnvFacts, RunReport, RunRequest, RunState
from bot.service.store.overview import Overview, read_overview
from bot.service.store.postgres_logs import PostgresRunLogs
from bot.service.store.postgres_schema import migrate, safe_url
from bot.service.store.postgres_sessions import PostgresSessions
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
    pr_key,
    told_record,
)
from runner.backends.base import StepProcess

TASK_NAME = "paritybot.run"
# How long a serve replica keeps a delivery it is handling before another replica may take it.
DELIVERY_LEASE = timedelta(minutes=2)
STALLED_AFTER = timedelta(seconds=60)  # PARITYBOT_STALLED_AFTER_S's default
LEASE_BATCH = 1
REPLACED = "replaced by a newer request for the same environment before it started"
# Whatever changes a run NOTIFYs this channel (the payload is its id), at commit: the publishers of
# every service replica tell GitHub (bot.service.publisher), and the run's change feed moves on.
JOBS_CHANNEL = "paritybot_jobs"
# Service replicas wake each other's dispatchers through this one: a delivery was recorded, one of a
# PR's deliveries finished while the next waits, or a silent replica's delivery may be taken over
# (bot.service.fleet.deliveries). Each dispatcher still polls, so a dropped connection costs a poll.
DELIVERIES_CHANNEL = "paritybot_deliveries"
# Every final job has something to tell on GitHub: a pull request's runs their check runs and
# summary, a default-branch run whether its coverage map was recorded (a check run on its commit).
DUE = "true"


# procrastinate's job priority: a run taken back from an agent that died, was fenced or stopped goes
# to the front of its queue, so it runs again as soon as an agent of its labels is free, however
# many runs wait (the deploy guide's promise: within PARITYBOT_STALLED_AFTER_S plus a heartbeat).
FIRST_ATTEMPT = 0
TAKEN_BACK = 100


def queue_lock(repo: str, pr_number: int | None, environment: str) -> str:
    """procrastinate's lock and queueing lock of a job: one queued and one running per PR and
    environment (runs of the default branch share one per repository and environment)."""
    return f"{repo}#{pr_number if pr_number is not None else 'default'}/{environment}"


def _lock_key(name: str) -> str:
    return f"paritybot:{name}"


class PostgresStore(PostgresRunLogs, PostgresSessions):
    """:class:`bot.service.store.protocol.Store` on PostgreSQL, and what agents and the reaper need."""

    def __init__(
        self,
        url: str,
        *,
        migrate_schema: bool = True,
        pool_size: int = 8,
        delivery_lease: timedelta = DELIVERY_LEASE,
        stalled_after: timedelta = STALLED_AFTER,
    ):
        self.url = url
        self.delivery_lease = delivery_lease
        self.stalled_after = stalled_after
        self.instance_id: str | None = None  # the replica this store leases deliveries to, once registered
        if migrate_schema:
            with psycopg.connect(url, autocommit=True) as conn:
                self.schema_version, _ = migrate(conn, safe_url(url))
        self._pool = ConnectionPool(
            url,
            min_size=1,
            max_size=pool_size,
            kwargs={"autocommit": True, "row_factory": dict_row},
            open=True,
        )

    def close(self) -> None:
        self._pool.close()

    @contextmanager
    def _tx(self) -> Iterator[psycopg.Connection[dict[str, Any]]]:
        with self._pool.connection() as conn, conn.transaction():
            yield conn  # type: ignore[misc]

    def _query(self, sql: str, args: tuple[Any, ...] | dict[str, Any] = ()) -> list[dict[str, Any]]:
        with self._pool.connection() as conn:
            return list(conn.execute(sql.encode(), args).fetchall())  # type: ignore[arg-type]

    # deliveries -----------------------------------------------------------------------------------

    def record_delivery(self, delivery_id: str, event: str, body: bytes) -> bool:
        with self._tx() as c:
            new = c.execute(
                "INSERT INTO deliveries (delivery_id, event, body, pr_key) VALUES (%s, %s, %s, %s) "
                "ON CONFLICT (delivery_id) DO NOTHING RETURNING 1 AS new",
                (delivery_id, event, body, pr_key(body)),
            ).fetchone()
            if new is not None:  # every replica's dispatcher, at commit: not only this one's
                c.execute("SELECT pg_notify(%s, '')", (DELIVERIES_CHANNEL,))
        return new is not None

    def pending_deliveries(self, limit: int = 100) -> list[Delivery]:
        """Due deliveries no live replica holds, now held by this one for its delivery lease.

        A delivery is held until its lease ends or, sooner, until the replica holding it is silent
        (no heartbeat for ``stalled_after``, as agents are judged; :mod:`bot.service.instance`):
        a replica that died mid-delivery has its deliveries taken over in seconds.
        A replica takes at most LEASE_BATCH at a time, so deliveries spread over the replicas that
        are free rather than queueing behind the one that asked first."""
        limit = min(limit, LEASE_BATCH)
        rows = self._query(
            "UPDATE deliveries SET leased_until = now() + %s, leased_by = %s WHERE delivery_id IN ("
            " SELECT d.delivery_id FROM deliveries d WHERE d.status = 'received'"
            " AND (d.not_before IS NULL OR d.not_before <= now())"
            " AND (d.leased_until IS NULL OR d.leased_until <= now() OR (d.leased_by IS NOT NULL"
            " AND NOT EXISTS (SELECT 1 FROM instances i WHERE i.id = d.leased_by AND i.stopped_at IS NULL"
            " AND i.last_heartbeat > now() - %s)))"
            # A PR's deliveries one after another, in order: an older one still to handle comes first.
            " AND (d.pr_key IS NULL OR NOT EXISTS (SELECT 1 FROM deliveries o WHERE o.pr_key = d.pr_key"
            " AND o.status = 'received' AND o.seq < d.seq))"
            " ORDER BY d.seq LIMIT %s FOR UPDATE SKIP LOCKED) "
            "RETURNING delivery_id, event, body, received_at, attempts, seq",
            (self.delivery_lease, self.instance_id, self.stalled_after, limit),
        )
        rows.sort(key=lambda r: r["seq"])
        return [
            Delivery(
                delivery_id=r["delivery_id"],
                event=r["event"],
                body=bytes(r["body"]),
                received_at=r["received_at"],
                attempts=r["attempts"],
            )
            for r in rows
        ]

    def finish_delivery(self, delivery_id: str, status: DeliveryStatus, error: str | None = None) -> None:
        with self._tx() as c:
            c.execute(
                "UPDATE deliveries SET status = %s, error = %s, attempts = attempts + 1, leased_until = NULL "
                "WHERE delivery_id = %s",
                (DeliveryStatus(status).value, error, delivery_id),
            )
            # The PR's next delivery may go now: whichever replica is free takes it at once.
            c.execute(
                "SELECT pg_notify(%s, '') WHERE EXISTS (SELECT 1 FROM deliveries d JOIN deliveries o"
                " ON o.pr_key = d.pr_key WHERE d.delivery_id = %s AND o.status = 'received')",
                (DELIVERIES_CHANNEL, delivery_id),
            )

    def takeover_due(self) -> float | None:
        """Seconds until a delivery another replica holds may be taken over (its holder silent for
        ``stalled_after``, stopped, or its lease over); at 0 or less, every dispatcher is woken now.
        None: no other replica holds one."""
        with self._tx() as c:
            row = c.execute(
                "SELECT EXTRACT(EPOCH FROM min(LEAST(d.leased_until, CASE WHEN d.leased_by IS NULL"
                " THEN d.leased_until WHEN i.id IS NULL OR i.stopped_at IS NOT NULL THEN now()"
                " ELSE i.last_heartbeat + %s END)) - now()) AS wait"
                " FROM deliveries d LEFT JOIN instances i ON i.id = d.leased_by"
                " WHERE d.status = 'received' AND d.leased_until > now()"
                " AND d.leased_by IS DISTINCT FROM %s",
                (self.stalled_after, self.instance_id),
            ).fetchone()
            wait = None if row is None or row["wait"] is None else float(row["wait"])
            if wait is not None and wait <= 0:
                c.execute("SELECT pg_notify(%s, 'takeover')", (DELIVERIES_CHANNEL,))
        return wait

    def retry_delivery_later(self, delivery_id: str, error: str, delay_s: float) -> None:
        self._query(
            "UPDATE deliveries SET attempts = attempts + 1, error = %s, not_before = now() + %s, "
            "leased_until = NULL WHERE delivery_id = %s RETURNING 1",
            (error, timedelta(seconds=delay_s), delivery_id),
        )

    def delivery_status(self, delivery_id: str) -> DeliveryStatus | None:
        rows = self._query("SELECT status FROM deliveries WHERE delivery_id = %s", (delivery_id,))
        return DeliveryStatus(rows[0]["status"]) if rows else None

    def delivery(self, delivery_id: str) -> Delivery | None:
        rows = self._query(
            "SELECT delivery_id, event, body, received_at, attempts, status, error FROM deliveries "
            "WHERE delivery_id = %s",
            (delivery_id,),
        )
        if not rows:
            return None
        r = rows[0]
        return Delivery(
            delivery_id=r["delivery_id"],
            event=r["event"],
            body=bytes(r["body"]),
            received_at=r["received_at"],
            attempts=r["attempts"],
            status=DeliveryStatus(r["status"]),
            error=r["error"],
        )

    def delivery_count(self) -> int:
        return int(self._query("SELECT count(*) AS n FROM deliveries")[0]["n"])

    def delivery_status_count(self, status: DeliveryStatus) -> int:
        rows = self._query(
            "SELECT count(*) AS n FROM deliveries WHERE status = %s", (DeliveryStatus(status).value,)
        )
        return int(rows[0]["n"])

    # installations --------------------------------------------------------------------------------

    def record_installation(self, installation_id: int, account: str, action: str) -> None:
        self._query(
            "INSERT INTO installations (installation_id, account, action) VALUES (%s, %s, %s) "
            "ON CONFLICT (installation_id) DO UPDATE SET account = excluded.account, "
            "action = excluded.action, updated_at = now() RETURNING 1",
            (installation_id, account, action),
        )

    def installation(self, installation_id: int) -> tuple[str, str] | None:
        rows = self._query(
            "SELECT account, action FROM installations WHERE installation_id = %s", (installation_id,)
        )
        return (rows[0]["account"], rows[0]["action"]) if rows else None

    # jobs -----------------------------------------------------------------------------------------

    def enqueue(
        self, request: RunRequest, environment: str, dedupe_key: str, queue: str | None = None
    ) -> Job | None:
        """Insert the job and its first queue job in one transaction, under the PR and environment's
        advisory lock. A job already queued there for another request is replaced (cancelled)."""
        job_id = uuid.uuid4().hex[:16]
        queue = queue or environment
        lock = queue_lock(request.repo, request.pr_number, environment)
        with self._tx() as c:
            c.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (_lock_key(lock),))
            inserted = c.execute(
                "INSERT INTO jobs (id, queue, repo, pr_number, head_sha, environment, request, dedupe_key, "
                "state) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, 'queued') "
                "ON CONFLICT (dedupe_key) DO NOTHING RETURNING id",
                (
                    job_id,
                    queue,
                    request.repo,
                    request.pr_number,
                    request.head_sha,
                    environment,
                    Jsonb(request.model_dump(mode="json")),
                    dedupe_key,
                ),
            ).fetchone()
            if inserted is None:
                return None
            queue_job = self._defer(c, job_id, queue, lock, queueing=True)
            c.execute("UPDATE jobs SET queue_job_id = %s WHERE id = %s", (queue_job, job_id))
            c.execute("SELECT pg_notify(%s, %s)", (JOBS_CHANNEL, job_id))  # the publishers, at commit
        return self.get_job(job_id)

    @staticmethod
    def _defer(
        c: psycopg.Connection[dict[str, Any]],
        job_id: str,
        queue: str,
        lock: str,
        *,
        queueing: bool,
        priority: int = FIRST_ATTEMPT,
    ) -> int:
        """A new procrastinate job for ``job_id``; its insert trigger wakes the agents of ``queue``.
        procrastinate hands out the highest ``priority`` first (then the oldest).

        With ``queueing``, the queueing lock keeps one queued job per PR and environment: a job
        queued there already (procrastinate's AlreadyEnqueued, a unique violation) is cancelled
        with its run, and this one deferred in its place. The caller holds the advisory lock.
        """
        defer = (
            "SELECT unnest(procrastinate_defer_jobs_v1(ARRAY[ROW(%s, %s, %s, %s, %s, %s, NULL)"
            "::procrastinate_job_to_defer_v1])) AS id"
        )
        args = (queue, TASK_NAME, priority, lock, lock if queueing else None, Jsonb({"job_id": job_id}))
        try:
            with c.transaction():
                row = c.execute(defer.encode(), args).fetchone()
        except psycopg.errors.UniqueViolation:
            waiting = c.execute(
                "SELECT id FROM procrastinate_jobs WHERE queueing_lock = %s AND status = 'todo'", (lock,)
            ).fetchall()
            for old in (r["id"] for r in waiting):
                c.execute("SELECT procrastinate_cancel_job_v1(%s, false, false)", (old,))
                c.execute(
                    f"UPDATE jobs SET state = 'cancelled', finished_at = now(), error = %s, report_due = {DUE} "
                    "WHERE queue_job_id = %s AND state = 'queued'",
                    (REPLACED, old),
                )
            row = c.execute(defer.encode(), args).fetchone()
        assert row is not None
        return int(row["id"])

    def get_job(self, job_id: str) -> Job | None:
        rows = self._query("SELECT * FROM jobs WHERE id = %s", (job_id,))
        return _job(rows[0]) if rows else None

    def set_check_runs(self, job_id: str, check_runs: dict[str, int]) -> None:
        self._query(
            "UPDATE jobs SET check_runs = check_runs || %s WHERE id = %s RETURNING 1",
            (Jsonb(check_runs), job_id),
        )

    def intend_check_runs(self, job_id: str) -> bool:
        with self._tx() as c:
            row = c.execute(
                "SELECT check_runs_intent_at FROM jobs WHERE id = %s FOR UPDATE", (job_id,)
            ).fetchone()
            if row is None or row["check_runs_intent_at"] is not None:
                return row is not None
            c.execute("UPDATE jobs SET check_runs_intent_at = now() WHERE id = %s", (job_id,))
            return False

    def set_check_run_sent(self, job_id: str, kind: str, digest: str) -> None:
        self._query(
            "UPDATE jobs SET check_run_sent = check_run_sent || jsonb_build_object(%s::text, %s::text) "
            "WHERE id = %s RETURNING 1",
            (kind, digest, job_id),
        )

    def finish(
        self,
        job_id: str,
        state: RunState,
        report: RunReport | None,
        error: str | None,
        *,
        attempt: int | None = None,
    ) -> bool:
        fence = "" if attempt is None else " AND state = 'running' AND attempts = %s"
        with self._tx() as c:
            row = c.execute(
                f"UPDATE jobs SET state = %s, finished_at = now(), error = %s, report = %s, report_due = {DUE} "
                f"WHERE id = %s{fence} RETURNING 1",
                (state.value, error, _report_json(report), job_id, *(() if attempt is None else (attempt,))),
            ).fetchone()
            if row is not None:
                c.execute("SELECT pg_notify(%s, %s)", (JOBS_CHANNEL, job_id))
        return row is not None

    def save_progress(self, job_id: str, attempt: int, report: RunReport) -> bool:
        rows = self._query(
            "UPDATE jobs SET report = %s, progress = progress + 1 WHERE id = %s AND state = 'running' "
            "AND attempts = %s RETURNING 1",
            (_report_json(report), job_id, attempt),
        )
        return bool(rows)

    def jobs_due_for_report(self) -> list[Job]:
        return [_job(r) for r in self._query("SELECT * FROM jobs WHERE report_due ORDER BY seq")]

    def mark_reported(self, job_id: str) -> None:
        self._query("UPDATE jobs SET report_due = false WHERE id = %s RETURNING 1", (job_id,))

    def jobs_to_announce(self, limit: int = 50) -> list[Job]:
        """Jobs whose state change (started, queued again, ended) the service has not told GitHub
        about yet, oldest first. A final one is also ``report_due`` until the reconciler published it."""
        rows = self._query(
            "SELECT * FROM jobs WHERE reported_state IS DISTINCT FROM state "
            "OR (state = 'running' AND progress > progress_published) ORDER BY seq LIMIT %s",
            (limit,),
        )
        return [_job(r) for r in rows]

    def told(self, job_id: str) -> tuple[RunState | None, int]:
        """What GitHub was told of the job: the state, and how many progress writes it was not
        shown yet."""
        return told_record(self._query(TOLD_SQL.format(p="%s"), (job_id,)))

    def mark_announced(self, job_id: str, state: RunState, progress_seen: int = 0) -> None:
        """GitHub shows ``state``, and the progress writes seen before it was told (never later ones)."""
        self._query(
            "UPDATE jobs SET reported_state = %s, progress_published = progress_published + %s "
            "WHERE id = %s RETURNING 1",
            (state.value, progress_seen, job_id),
        )

    def request_cancel(self, repo: str, pr_number: int, *, keep_sha: str | None = None) -> list[Job]:
        """Queued runs are cancelled with their queue job; running ones are flagged and their queue
        job aborted: procrastinate tells the agent at once (NOTIFY), which stops the container."""
        with self._tx() as c:
            rows = c.execute(
                "SELECT id, state, queue_job_id, environment FROM jobs WHERE repo = %s AND pr_number = %s "
                "AND state IN ('queued', 'running') AND (%s::text IS NULL OR head_sha <> %s) ORDER BY seq "
                "FOR UPDATE",
                (repo, pr_number, keep_sha, keep_sha),
            ).fetchall()
            for r in rows:
                if r["queue_job_id"] is not None:
                    c.execute("SELECT procrastinate_cancel_job_v1(%s, true, false)", (r["queue_job_id"],))
                if r["state"] == RunState.QUEUED.value:
                    c.execute(
                        "UPDATE jobs SET state = 'cancelled', finished_at = now(), error = %s, "
                        f"report_due = {DUE} WHERE id = %s",
                        ("superseded before it started", r["id"]),
                    )
                    c.execute("SELECT pg_notify(%s, %s)", (JOBS_CHANNEL, r["id"]))
                else:
                    c.execute("UPDATE jobs SET cancel_requested = true WHERE id = %s", (r["id"],))
        return [j for j in (self.get_job(r["id"]) for r in rows) if j is not None]

    def is_cancel_requested(self, job_id: str) -> bool:
        rows = self._query("SELECT cancel_requested FROM jobs WHERE id = %s", (job_id,))
        return bool(rows and rows[0]["cancel_requested"])

    def queue_position(self, job_id: str) -> int | None:
        # In the order agents take them: procrastinate's priority (runs taken back first), then age.
        rows = self._query(
            "SELECT (SELECT count(*) FROM jobs o JOIN procrastinate_jobs oq ON oq.id = o.queue_job_id "
            "WHERE o.state = 'queued' AND o.queue = j.queue AND (oq.priority > q.priority "
            "OR (oq.priority = q.priority AND oq.id <= q.id))) AS pos, j.state "
            "FROM jobs j LEFT JOIN procrastinate_jobs q ON q.id = j.queue_job_id WHERE j.id = %s",
            (job_id,),
        )
        if not rows or rows[0]["state"] != RunState.QUEUED.value:
            return None
        return int(rows[0]["pos"])

    def jobs_for_pr(self, repo: str, pr_number: int) -> list[Job]:
        rows = self._query(
            "SELECT * FROM jobs WHERE repo = %s AND pr_number = %s ORDER BY seq", (repo, pr_number)
        )
        return [_job(r) for r in rows]

    def jobs_in_state(self, state: RunState) -> list[Job]:
        return [
            _job(r) for r in self._query("SELECT * FROM jobs WHERE state = %s ORDER BY seq", (state.value,))
        ]

    def report(self, job_id: str) -> RunReport | None:
        rows = self._query("SELECT report FROM jobs WHERE id = %s", (job_id,))
        if not rows or rows[0]["report"] is None:
            return None
        return RunReport.model_validate(rows[0]["report"])

    # pull requests --------------------------------------------------------------------------------

    def pull_state(self, repo: str, pr_number: int) -> PullState:
        rows = self._query("SELECT * FROM pulls WHERE repo = %s AND pr_number = %s", (repo, pr_number))
        if not rows:
            return PullState(repo=repo, pr_number=pr_number)
        r = rows[0]
        return PullState(
            repo=repo,
            pr_number=pr_number,
            comment_id=r["comment_id"],
            comment_body_hash=r["comment_body_hash"],
            comment_pending=r["comment_pending"],
            last_verdict=r["last_verdict"],
            failed_tests=r["failed_tests"],
        )

    def save_pull_state(self, state: PullState) -> None:
        self._query(
            "INSERT INTO pulls (repo, pr_number, comment_id, comment_body_hash, comment_pending, last_verdict, "
            "failed_tests) VALUES (%s, %s, %s, %s, %s, %s, %s) ON CONFLICT (repo, pr_number) DO UPDATE SET "
            "comment_id = excluded.comment_id, comment_body_hash = excluded.comment_body_hash, "
            "comment_pending = excluded.comment_pending, last_verdict = excluded.last_verdict, "
            "failed_tests = excluded.failed_tests RETURNING 1",
            (
                state.repo,
                state.pr_number,
                state.comment_id,
                state.comment_body_hash,
                state.comment_pending,
                state.last_verdict,
                Jsonb(state.failed_tests),
            ),
        )

    def add_approval(self, repo: str, pr_number: int, sha: str, approver: str) -> None:
        self._query(
            "INSERT INTO approvals (repo, pr_number, sha, approver) VALUES (%s, %s, %s, %s) "
            "ON CONFLICT DO NOTHING RETURNING 1",
            (repo, pr_number, sha, approver),
        )

    def approvals(self, repo: str, pr_number: int) -> list[tuple[str, str]]:
        rows = self._query(
            "SELECT sha, approver FROM approvals WHERE repo = %s AND pr_number = %s ORDER BY approved_at",
            (repo, pr_number),
        )
        return [(r["sha"], r["approver"]) for r in rows]

    # process groups a host runner started --------------------------------------------------------

    def record_step_process(self, job_id: str, attempt: int, process: StepProcess) -> None:
        self._query(
            "INSERT INTO step_processes (pgid, boot_id, start_ticks, job_id, attempt, step) "
            "VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (pgid, boot_id, start_ticks) DO UPDATE SET "
            "job_id = excluded.job_id, attempt = excluded.attempt, step = excluded.step, started_at = now() "
            "RETURNING 1",
            (process.pgid, process.boot_id, process.start_ticks, job_id, attempt, process.step),
        )

    def forget_step_process(self, process: StepProcess) -> None:
        self._query(
            "DELETE FROM step_processes WHERE pgid = %s AND boot_id = %s AND start_ticks = %s RETURNING 1",
            (process.pgid, process.boot_id, process.start_ticks),
        )

    def step_processes(self) -> list[StepProcess]:
        rows = self._query("SELECT pgid, boot_id, start_ticks, step FROM step_processes ORDER BY started_at")
        return [StepProcess(r["pgid"], r["boot_id"], r["start_ticks"], r["step"]) for r in rows]

    # instances ------------------------------------------------------------------------------------

    def register_instance(self, instance_id: str, kind: str, host: str, pid: int) -> None:
        self.instance_id = instance_id
        self._query(
            "INSERT INTO instances (id, kind, host, pid) VALUES (%s, %s, %s, %s) RETURNING 1",
            (instance_id, kind, host, pid),
        )

    def instance_heartbeat(self, instance_id: str) -> bool:
        rows = self._query(
            "UPDATE instances SET last_heartbeat = now() WHERE id = %s AND stopped_at IS NULL RETURNING 1",
            (instance_id,),
        )
        return bool(rows)

    def instance_stopped(self, instance_id: str) -> None:
        self._query(
            "UPDATE instances SET stopped_at = now() WHERE id = %s AND stopped_at IS NULL RETURNING 1",
            (instance_id,),
        )

    def runs_over(self, run_ids: set[str]) -> set[str]:
        rows = self._query(
            "SELECT id FROM jobs WHERE id = ANY(%s) AND state IN ('succeeded', 'failed', 'cancelled')",
            (sorted(run_ids),),
        )
        return {r["id"] for r in rows}

    def instances_alive(self, instance_ids: list[str], stalled_after_s: float) -> dict[str, bool]:
        rows = self._query(
            "SELECT id, stopped_at IS NULL AND last_heartbeat > now() - %s AS alive FROM instances WHERE id = ANY(%s)",
            (timedelta(seconds=stalled_after_s), instance_ids),
        )
        return {r["id"]: bool(r["alive"]) for r in rows}

    # baselines ------------------------------------------------------------------------------------

    def save_baseline(self, repo: str, environment: str, facts: EnvFacts) -> None:
        self._query(
            "INSERT INTO baselines (repo, environment, facts) VALUES (%s, %s, %s) "
            "ON CONFLICT (repo, environment) DO UPDATE SET facts = excluded.facts, updated_at = now() "
            "RETURNING 1",
            (repo, environment, Jsonb(facts.model_dump(mode="json"))),
        )

    def baseline(self, repo: str, environment: str) -> EnvFacts | None:
        rows = self._query(
            "SELECT facts FROM baselines WHERE repo = %s AND environment = %s", (repo, environment)
        )
        return EnvFacts.model_validate(rows[0]["facts"]) if rows else None

    # the tests' history -------------------------------------------------------------------------

    def record_test_run(self, run: TestRunRecord) -> None:
        with self._pool.connection() as conn, conn.transaction():
            conn.execute("DELETE FROM test_runs WHERE job_id = %s", (run.job_id,))
            conn.execute(
                "INSERT INTO test_runs (job_id, repo, environment, pr_number, head_sha, url) "
                "VALUES (%s, %s, %s, %s, %s, %s)",
                (run.job_id, run.repo, run.environment, run.pr_number, run.head_sha, run.url),
            )
            with conn.cursor() as cur:
                cur.executemany(
                    "INSERT INTO test_outcomes (job_id, nodeid, outcome, message) VALUES (%s, %s, %s, %s) "
                    "ON CONFLICT (job_id, nodeid) DO UPDATE SET outcome = excluded.outcome, "
                    "message = excluded.message",
                    [(run.job_id, nodeid, outcome, message) for nodeid, outcome, message in run.outcomes],
                )

    def flaky_elsewhere(
        self, repo: str, nodeids: list[str], *, pr_number: int | None, limit: int = 3
    ) -> dict[str, list[str]]:
        rows = self._query(
            "SELECT o.nodeid, r.url FROM test_outcomes o JOIN test_runs r ON r.job_id = o.job_id "
            "WHERE r.repo = %s AND o.outcome = 'flaky' AND o.nodeid = ANY(%s) "
            "AND (%s::integer IS NULL OR r.pr_number IS NULL OR r.pr_number != %s) "
            "ORDER BY r.recorded_at DESC, r.job_id",
            (repo, nodeids, pr_number, pr_number),
        )
        return links_by_test(rows, limit)

    def failing_at(self, repo: str, environment: str, sha: str) -> dict[str, str] | None:
        return commit_record(self._query(COMMIT_RECORD_SQL.format(p="%s"), (repo, environment, sha)))

    def failed_last_time(self, repo: str, environment: str, pr_number: int) -> set[str]:
        """The tests that failed in the pull request's last recorded run in ``environment``: what
        an agent runs first (it may not read the pull request's own row)."""
        rows = self._query(
            "SELECT o.nodeid FROM test_outcomes o WHERE o.outcome = 'failed' AND o.job_id = ("
            "SELECT job_id FROM test_runs WHERE repo = %s AND environment = %s AND pr_number = %s "
            "ORDER BY recorded_at DESC, job_id DESC LIMIT 1)",
            (repo, environment, pr_number),
        )
        return {str(r["nodeid"]) for r in rows}

    def overview(self, recent: int = 20) -> Overview:
        return read_overview(self._query, placeholder="%s", true="true", fleet=True, recent=recent)


def _report_json(report: RunReport | None) -> Jsonb | None:
    return Jsonb(json.loads(report.model_dump_json())) if report is not None else None


def _job(r: dict[str, Any]) -> Job:
    return Job(
        id=r["id"],
        queue=r["queue"],
        repo=r["repo"],
        pr_number=r["pr_number"],
        head_sha=r["head_sha"],
        environment=r["environment"],
        request=RunRequest.model_validate(r["request"]),
        state=RunState(r["state"]),
        attempts=r["attempts"],
        check_runs=r["check_runs"],
        check_runs_intent_at=r["check_runs_intent_at"],
        check_run_sent=r["check_run_sent"],
        report_due=r["report_due"],
        cancel_requested=r["cancel_requested"],
        created_at=r["created_at"],
        started_at=r["started_at"],
        finished_at=r["finished_at"],
        error=r["error"],
        queue_job_id=r["queue_job_id"],
        host=r["host"],
    )
