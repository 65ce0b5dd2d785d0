"""What operators look at (`/status`, `/metrics`): the queues, who runs jobs, what runs, what ran.

The same questions in both backends: the SQL here takes the backend's placeholder (``{p}``) and
its truth value (``{true}``); each backend runs it on its own connection and hands the rows to
:func:`build_overview`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from bot.core.models import RunReport
from bot.core.verdict import verdict

QUEUES_SQL = (
    "SELECT queue, count(*) AS depth, min(created_at) AS oldest FROM jobs WHERE state = 'queued' "
    "GROUP BY queue ORDER BY queue"
)
RUNNING_SQL = (
    "SELECT id, repo, pr_number, environment, queue, head_sha, attempts, started_at, {host} AS host "
    "FROM jobs WHERE state = 'running' ORDER BY started_at"
)
# The last finished runs: chosen on narrow columns first, so the sort does not carry each row's
# report; only those few rows' reports are read.
RECENT_SQL = (
    "SELECT id, repo, pr_number, environment, state, error, created_at, started_at, finished_at, report "
    "FROM jobs WHERE id IN (SELECT id FROM jobs WHERE finished_at IS NOT NULL "
    "ORDER BY finished_at DESC LIMIT {p}) ORDER BY finished_at DESC"
)
JOBS_BY_STATE_SQL = "SELECT state, count(*) AS n FROM jobs GROUP BY state"
DELIVERIES_BY_STATUS_SQL = "SELECT status, count(*) AS n FROM deliveries GROUP BY status"
OLDEST_DUE_SQL = "SELECT min(finished_at) AS oldest FROM jobs WHERE report_due = {true}"
# One machine: the `serve` that runs the jobs itself. Several hosts: the agents, from their table.
SERVE_INSTANCES_SQL = (
    "SELECT host, kind, started_at, last_heartbeat FROM instances WHERE stopped_at IS NULL "
    "AND kind = 'serve' ORDER BY started_at"
)
AGENTS_SQL = (
    "SELECT a.host, a.name, a.labels, a.gpus, a.last_heartbeat, a.lost_at, "
    "(SELECT j.id FROM jobs j WHERE j.state = 'running' AND j.worker_id = a.worker_id LIMIT 1) AS current_job "
    "FROM agents a WHERE a.stopped_at IS NULL ORDER BY a.host, a.worker_id"
)


@dataclass(frozen=True)
class QueueRow:
    queue: str
    depth: int
    oldest: datetime | None


@dataclass(frozen=True)
class AgentRow:
    host: str
    name: str
    labels: tuple[str, ...]
    gpus: tuple[str, ...]
    last_heartbeat: datetime | None
    state: str  # alive or lost
    current_job: str | None


@dataclass(frozen=True)
class RunRow:
    id: str
    repo: str
    pr_number: int | None
    environment: str
    state: str
    started_at: datetime | None
    finished_at: datetime | None = None
    outcome: str | None = None  # the verdict of a finished run (pass, fail, error…)
    host: str | None = None
    error: str | None = None


@dataclass(frozen=True)
class Overview:
    queues: list[QueueRow]
    agents: list[AgentRow]
    running: list[RunRow]
    recent: list[RunRow]
    jobs_by_state: dict[str, int] = field(default_factory=dict)
    deliveries_by_status: dict[str, int] = field(default_factory=dict)
    oldest_due: datetime | None = None  # the oldest final job GitHub does not show yet


Query = Callable[[str, tuple[Any, ...]], Sequence[Any]]  # rows: sqlite3.Row or dict


def read_overview(query: Query, *, placeholder: str, true: str, fleet: bool, recent: int) -> Overview:
    """The overview, asked with ``query`` (one backend's ``_query``)."""

    def sql(text: str) -> str:
        return text.format(p=placeholder, true=true, host="host" if fleet else "NULL")

    due = query(sql(OLDEST_DUE_SQL), ())
    return Overview(
        queues=[QueueRow(r["queue"], int(r["depth"]), _time(r["oldest"])) for r in query(QUEUES_SQL, ())],
        agents=[_agent(r) for r in query(AGENTS_SQL, ())]
        if fleet
        else [_serve(r) for r in query(SERVE_INSTANCES_SQL, ())],
        running=[_run(r) for r in query(sql(RUNNING_SQL), ())],
        recent=[_run(r) for r in query(sql(RECENT_SQL), (recent,))],
        jobs_by_state={str(r["state"]): int(r["n"]) for r in query(JOBS_BY_STATE_SQL, ())},
        deliveries_by_status={str(r["status"]): int(r["n"]) for r in query(DELIVERIES_BY_STATUS_SQL, ())},
        oldest_due=_time(due[0]["oldest"]) if due else None,
    )


def _time(value: Any) -> datetime | None:
    """SQLite keeps ISO text, PostgreSQL timestamps."""
    if value is None or isinstance(value, datetime):
        return value
    moment = datetime.fromisoformat(str(value))
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def _agent(r: Mapping[str, Any]) -> AgentRow:
    gpus = r["gpus"] if isinstance(r["gpus"], list) else json.loads(r["gpus"] or "[]")
    return AgentRow(
        host=r["host"],
        name=r["name"],
        labels=tuple(r["labels"] or ()),
        gpus=tuple(str(g) for g in gpus),
        last_heartbeat=_time(r["last_heartbeat"]),
        state="lost" if r["lost_at"] is not None else "alive",
        current_job=r["current_job"],
    )


def _serve(r: Mapping[str, Any]) -> AgentRow:
    return AgentRow(
        host=r["host"],
        name="serve (runs its jobs itself)",
        labels=("all environments",),
        gpus=(),
        last_heartbeat=_time(r["last_heartbeat"]),
        state="alive",
        current_job=None,
    )


def _run(row: Mapping[str, Any]) -> RunRow:
    r = dict(row)
    return RunRow(
        id=r["id"],
        repo=r["repo"],
        pr_number=r["pr_number"],
        environment=r["environment"],
        state=r.get("state", "running"),
        started_at=_time(r["started_at"]),
        finished_at=_time(r.get("finished_at")),
        outcome=_outcome(r.get("report")),
        host=r.get("host"),
        error=r.get("error"),
    )


def _outcome(report: Any) -> str | None:
    """The verdict of a finished run's report; None when it has none (or one no longer readable)."""
    if report is None:
        return None
    try:
        data = report if isinstance(report, dict) else json.loads(report)
        return verdict(RunReport.model_validate(data)).value
    except ValueError:
        return None
