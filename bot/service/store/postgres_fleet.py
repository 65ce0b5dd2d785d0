"""What several hosts add to the PostgreSQL store: attempts run by agents, the fence on their results,
the stalled-job reaper, the agents' table, clone tokens handed over sealed, and the state changes
the service still has to tell GitHub about.

Every write an agent makes about a job is fenced: it names the procrastinate job of its attempt and
its worker id, and changes nothing unless that job is still ``doing`` with that worker id and is
still the job's current attempt. A frozen agent that comes back after its job went to another agent
therefore writes nothing: the caller logs the discarded result.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from psycopg.types.json import Jsonb

from bot.core.models import RunReport
from bot.service.store.postgres import (
    DUE,
    JOBS_CHANNEL,
    TAKEN_BACK,
    PostgresStore,
    _job,
    _report_json,
    queue_lock,
)
from bot.service.store.records import Job

# Besides JOBS_CHANNEL, agents and the service wake each other through these NOTIFY channels.
TOKENS_CHANNEL = "paritybot_tokens"  # an agent asks for a clone token
TOKEN_READY_CHANNEL = "paritybot_token_ready"  # the service answered one

_OWNED = (
    "EXISTS (SELECT 1 FROM procrastinate_jobs q WHERE q.id = %(qid)s AND q.status = 'doing' "
    "AND q.worker_id = %(worker)s)"
)


def _write_owned(
    c: Any, assignments: str, state: str, args: dict[str, Any], *, returning: str = "1"
) -> dict[str, Any] | None:
    """UPDATE the job's attempt in ``state`` that this agent still owns (its queue job ``doing`` on
    the agent's worker); the service is woken (NOTIFY, sent at commit) when it did. None: not
    written, the attempt is no longer this agent's."""
    row: dict[str, Any] | None = c.execute(
        f"UPDATE jobs SET {assignments} WHERE id = %(id)s AND queue_job_id = %(qid)s "
        f"AND state = '{state}' AND {_OWNED} RETURNING {returning}",
        args,
    ).fetchone()
    if row is not None:
        c.execute("SELECT pg_notify(%s, %s)", (JOBS_CHANNEL, args["id"]))
    return row


# The same query as procrastinate's get_stalled_jobs (select_stalled_jobs_by_heartbeat), run inside
# the reaper's transaction so that it can lock what it takes.
_STALLED = """
SELECT q.id, q.worker_id, q.queue_name, q.lock FROM procrastinate_jobs q
LEFT JOIN procrastinate_workers w ON w.id = q.worker_id
WHERE q.status = 'doing' AND q.task_name = %(task)s
  AND (q.worker_id IS NULL OR w.last_heartbeat < now() - %(stalled)s)
FOR UPDATE OF q SKIP LOCKED
"""


@dataclass(frozen=True)
class Reaped:
    job_id: str
    outcome: str  # "requeued", "failed" or "cancelled"
    worker_id: int | None


@dataclass(frozen=True)
class TokenRequest:
    queue_job_id: int
    job: Job
    public_key: str


def interrupted(attempts: int) -> str:
    times = {1: "once", 2: "twice"}.get(attempts, f"{attempts} times")
    return f"the agent running it stopped answering {times}; comment `/retest-gpu` to run it again"


class FleetStore(PostgresStore):
    """The PostgreSQL store with the operations of agents, the reaper and the reporting loop."""

    # agents -----------------------------------------------------------------------------------------

    def register_agent(
        self,
        worker_id: int,
        host: str,
        name: str,
        labels: list[str],
        gpus: list[str],
        probe: dict[str, Any] | None,
    ) -> None:
        self._query(
            "INSERT INTO agents (worker_id, host, name, labels, gpus, probe) VALUES (%s, %s, %s, %s, %s, %s) "
            "ON CONFLICT (worker_id) DO UPDATE SET host = excluded.host, name = excluded.name, "
            "labels = excluded.labels, gpus = excluded.gpus, probe = excluded.probe RETURNING 1",
            (worker_id, host, name, labels, Jsonb(gpus), Jsonb(probe) if probe is not None else None),
        )

    def agent_heartbeat(self, worker_id: int, instance_id: str) -> bool:
        """Both heartbeats (procrastinate's and the agent's) in one transaction; False when the
        agent was given up meanwhile (the reaper gave its jobs away, or a starting worker pruned
        its procrastinate row): it must stop what it runs."""
        with self._tx() as c:
            # procrastinate_update_heartbeat_v1, saying whether the worker's row is still there.
            known = c.execute(
                "UPDATE procrastinate_workers SET last_heartbeat = now() WHERE id = %s RETURNING 1",
                (worker_id,),
            ).fetchone()
            alive = c.execute(
                "UPDATE agents SET last_heartbeat = now() WHERE worker_id = %s AND lost_at IS NULL RETURNING 1",
                (worker_id,),
            ).fetchone()
            # The instance's own heartbeat: what it started on its engine stays while it beats.
            c.execute("UPDATE instances SET last_heartbeat = now() WHERE id = %s", (instance_id,))
        return known is not None and alive is not None

    def agent_stopped(self, worker_id: int) -> None:
        self._query("UPDATE agents SET stopped_at = now() WHERE worker_id = %s RETURNING 1", (worker_id,))

    # attempts ---------------------------------------------------------------------------------------

    def start_attempt(self, job_id: str, queue_job_id: int, worker_id: int, host: str) -> Job | None:
        """The job, now ``running`` on this agent; None when the queue job is no longer its
        current attempt (cancelled, replaced, taken back)."""
        args = {"id": job_id, "qid": queue_job_id, "worker": worker_id, "host": host}
        with self._tx() as c:
            row = _write_owned(
                c,
                "state = 'running', attempts = attempts + 1, started_at = now(), finished_at = NULL, "
                "error = NULL, report = NULL, worker_id = %(worker)s, host = %(host)s",
                "queued",
                args,
                returning="*",
            )
        return _job(row) if row is not None else None

    def finish_attempt(self, job_id: str, queue_job_id: int, worker_id: int, report: RunReport) -> bool:
        """Record the attempt's result; False (nothing written) unless this agent still owns it."""
        args = {
            "id": job_id,
            "qid": queue_job_id,
            "worker": worker_id,
            "state": report.state.value,
            "error": report.error,
            "report": _report_json(report),
        }
        with self._tx() as c:
            row = _write_owned(
                c,
                "state = %(state)s, finished_at = now(), error = %(error)s, report = %(report)s, "
                f"report_due = {DUE}",
                "running",
                args,
            )
            c.execute("DELETE FROM job_tokens WHERE queue_job_id = %s", (queue_job_id,))
        return row is not None

    def save_attempt_progress(
        self, job_id: str, queue_job_id: int, worker_id: int, report: RunReport
    ) -> bool:
        """The attempt's results so far (a check finished while the others run), for the service to
        publish at once; False (nothing written) unless this agent still owns the attempt."""
        args = {"id": job_id, "qid": queue_job_id, "worker": worker_id, "report": _report_json(report)}
        with self._tx() as c:
            row = _write_owned(c, "report = %(report)s, progress = progress + 1", "running", args)
        return row is not None

    def requeue_attempt(self, job_id: str, queue_job_id: int, worker_id: int) -> bool:
        """The agent is shutting down: the job goes back to its queue as a new attempt of its own
        (it waits for the old one to end: same lock). False unless this agent still owns it."""
        args = {"id": job_id, "qid": queue_job_id, "worker": worker_id}
        with self._tx() as c:
            row = c.execute(
                f"SELECT * FROM jobs WHERE id = %(id)s AND queue_job_id = %(qid)s AND state = 'running' AND {_OWNED} "
                "FOR UPDATE",
                args,
            ).fetchone()
            if row is None:
                return False
            self._requeue(c, row)
            c.execute("DELETE FROM job_tokens WHERE queue_job_id = %s", (queue_job_id,))
        return True

    def _requeue(self, c: Any, row: dict[str, Any]) -> None:
        lock = queue_lock(row["repo"], row["pr_number"], row["environment"])
        # No queueing lock: a retry must not be refused because a newer run waits in the same place.
        # First in line: it had its turn already (TAKEN_BACK).
        new = self._defer(c, row["id"], row["queue"], lock, queueing=False, priority=TAKEN_BACK)
        c.execute(
            "UPDATE jobs SET state = 'queued', queue_job_id = %s, started_at = NULL, worker_id = NULL, "
            "host = NULL, report = NULL WHERE id = %s",
            (new, row["id"]),
        )
        c.execute("SELECT pg_notify(%s, %s)", (JOBS_CHANNEL, row["id"]))

    # the reaper -------------------------------------------------------------------------------------

    def reap(self, stalled_after_s: float, max_attempts: int) -> list[Reaped]:
        """Take back the jobs of agents whose heartbeat is older than ``stalled_after_s``.

        Each stalled queue job is ended (failed) and its run queued again as a new queue job, whose
        insert wakes the idle agents of its queue at once; past ``max_attempts`` the run fails,
        saying why. The agent is marked lost, so that if it comes back it stops what it runs.
        Several reapers at once are safe: each locks what it takes and skips what another holds.
        """
        reaped: list[Reaped] = []
        with self._tx() as c:
            stalled = c.execute(
                _STALLED.encode(),
                {"task": "paritybot.run", "stalled": timedelta(seconds=stalled_after_s)},
            ).fetchall()
            for q in stalled:
                if q["worker_id"] is not None:
                    c.execute(
                        "UPDATE agents SET lost_at = now() WHERE worker_id = %s AND lost_at IS NULL",
                        (q["worker_id"],),
                    )
                c.execute("SELECT procrastinate_finish_job_v1(%s, 'failed', false)", (q["id"],))
                c.execute("DELETE FROM job_tokens WHERE queue_job_id = %s", (q["id"],))
                row = c.execute(
                    "SELECT * FROM jobs WHERE queue_job_id = %s AND state IN ('queued', 'running') FOR UPDATE",
                    (q["id"],),
                ).fetchone()
                if row is None:
                    continue
                outcome = self._after_stall(c, row, max_attempts)
                reaped.append(Reaped(row["id"], outcome, q["worker_id"]))
            # A run whose queue job ended without the run's own end being written (its agent failed
            # between the two): taken back the same way.
            orphans = c.execute(
                "SELECT j.* FROM jobs j JOIN procrastinate_jobs q ON q.id = j.queue_job_id "
                "WHERE j.state IN ('queued', 'running') AND q.status NOT IN ('todo', 'doing') "
                "FOR UPDATE OF j SKIP LOCKED"
            ).fetchall()
            for row in orphans:
                reaped.append(Reaped(row["id"], self._after_stall(c, row, max_attempts), row["worker_id"]))
        return reaped

    def _after_stall(self, c: Any, row: dict[str, Any], max_attempts: int) -> str:
        if row["cancel_requested"]:
            state, error = "cancelled", "superseded by a newer commit"
        elif row["attempts"] >= max_attempts:
            state, error = "failed", interrupted(row["attempts"])
        else:
            self._requeue(c, row)
            return "requeued"
        c.execute(
            f"UPDATE jobs SET state = %s, error = %s, finished_at = now(), report_due = {DUE} WHERE id = %s",
            (state, error, row["id"]),
        )
        c.execute("SELECT pg_notify(%s, %s)", (JOBS_CHANNEL, row["id"]))
        return state

    # clone tokens -----------------------------------------------------------------------------------

    def request_token(self, job_id: str, queue_job_id: int, public_key: str) -> None:
        with self._tx() as c:
            c.execute(
                "INSERT INTO job_tokens (queue_job_id, job_id, public_key) VALUES (%s, %s, %s) "
                "ON CONFLICT (queue_job_id) DO NOTHING",
                (queue_job_id, job_id, public_key),
            )
            c.execute("SELECT pg_notify(%s, %s)", (TOKENS_CHANNEL, job_id))

    def sealed_token(self, queue_job_id: int) -> tuple[bytes | None, str | None]:
        """(the sealed token, the service's error); both None while it is not answered yet."""
        rows = self._query("SELECT sealed, error FROM job_tokens WHERE queue_job_id = %s", (queue_job_id,))
        if not rows:
            return None, "the token request is gone (the attempt was taken back)"
        sealed = rows[0]["sealed"]
        return (bytes(sealed) if sealed is not None else None), rows[0]["error"]

    def token_requests(self, limit: int = 20) -> list[TokenRequest]:
        rows = self._query(
            "SELECT t.queue_job_id, t.public_key, j.* FROM job_tokens t JOIN jobs j ON j.id = t.job_id "
            "WHERE t.sealed IS NULL AND t.error IS NULL AND j.queue_job_id = t.queue_job_id "
            "AND j.state = 'running' ORDER BY t.requested_at LIMIT %s",
            (limit,),
        )
        return [TokenRequest(r["queue_job_id"], _job(r), r["public_key"]) for r in rows]

    def answer_token(
        self, queue_job_id: int, sealed: bytes | None, expires_at: datetime | None, error: str | None
    ) -> None:
        with self._tx() as c:
            c.execute(
                "UPDATE job_tokens SET sealed = %s, expires_at = %s, error = %s "
                "WHERE queue_job_id = %s AND sealed IS NULL AND error IS NULL",
                (sealed, expires_at, error, queue_job_id),
            )
            c.execute("SELECT pg_notify(%s, %s)", (TOKEN_READY_CHANNEL, str(queue_job_id)))
