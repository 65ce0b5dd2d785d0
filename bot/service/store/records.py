"""The records the store keeps: webhook deliveries, jobs (runs) and what the bot remembers of a PR."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, Field

from bot.core.models import RunReport, RunRequest, RunState


class DeliveryStatus(StrEnum):
    """``received`` until its handlers finished (``dispatched``) or gave up (``failed``)."""

    RECEIVED = "received"
    DISPATCHED = "dispatched"
    FAILED = "failed"


class Delivery(BaseModel):
    """A webhook delivery committed before its 202, waiting for (or done with) its handlers."""

    delivery_id: str
    event: str
    body: bytes
    received_at: datetime
    attempts: int = 0
    status: DeliveryStatus = DeliveryStatus.RECEIVED
    error: str | None = Field(None, description="why its last attempt failed, in one line")


class Job(BaseModel):
    """A run of the pipeline for one PR head SHA in one environment."""

    id: str = Field(description="the run id: job id and run id are the same thing")
    queue: str = Field(description="environment label; a runner agent serves one or more queues")
    repo: str
    pr_number: int | None
    head_sha: str
    environment: str
    request: RunRequest
    state: RunState
    attempts: int = 0
    check_runs: dict[str, int] = Field(default_factory=dict, description="check kind → check run id")
    check_runs_intent_at: datetime | None = Field(
        None, description="when creating its check runs was first tried: a retry looks them up first"
    )
    check_run_sent: dict[str, str] = Field(
        default_factory=dict,
        description="check kind → digest of the last body sent for it; `KIND#annotated` → the ids "
        "of the annotations sent to it (JSON), each sent once",
    )
    report_due: bool = Field(False, description="final, and GitHub does not show it yet")
    heartbeat_at: datetime | None = None
    cancel_requested: bool = False
    created_at: datetime
    started_at: datetime | None = None
    finished_at: datetime | None = None
    error: str | None = None
    queue_job_id: int | None = Field(None, description="several hosts: the queue job of its current attempt")
    host: str | None = Field(None, description="several hosts: the agent's host running it")

    def external_id(self, kind: str) -> str:
        """The check run's ``external_id``: names the job and the check, so a retry finds it."""
        return f"{self.id}/{kind}"

    def final_report(self, stored: RunReport | None) -> RunReport:
        """What a final job's check runs and summary show: its report; for a run stopped part-way
        (a restart, a silent worker), the results it had so far and why it stopped; else why it
        has none."""
        if stored is not None and stored.state == self.state:
            return stored
        error = self.error or "the run ended without results"
        if stored is not None:
            return stored.model_copy(update={"state": self.state, "error": error})
        return self.report_without_results(self.state, error)

    def report_without_results(self, state: RunState, error: str) -> RunReport:
        """The report of a run that ended before producing results (cancelled, broken)."""
        return RunReport(
            run_id=self.id,
            repo=self.repo,
            pr_number=self.pr_number,
            head_sha=self.head_sha,
            environment=self.environment,
            state=state,
            error=error,
        )


class PullState(BaseModel):
    """What the bot remembers about one PR between events."""

    repo: str
    pr_number: int
    comment_id: int | None = None
    comment_body_hash: str | None = Field(None, description="skip identical rewrites of the comment")
    comment_pending: bool = Field(
        False, description="a new summary was being posted: look for it before posting another"
    )
    last_verdict: str | None = None
    failed_tests: dict[str, list[str]] = Field(
        default_factory=dict, description="environment → node ids that failed in its last run"
    )


def pr_key(body: bytes) -> str | None:
    """``owner/name#number`` of the pull request a delivery is about; None when it names none (or
    is not what it should be: it is then handled without an order to keep)."""
    try:
        data = json.loads(body)
        repo = data["repository"]["full_name"]
        item = data.get("pull_request") or data.get("issue")
        if item is None and isinstance(data.get("check_run"), dict):
            item = (data["check_run"].get("pull_requests") or [None])[0]
        number = item["number"] if isinstance(item, dict) else None
    except (ValueError, TypeError, KeyError, IndexError, AttributeError):
        return None
    if not isinstance(repo, str) or not isinstance(number, int) or len(repo) > 200:
        return None
    return f"{repo}#{number}"


@dataclass(frozen=True)
class TestRunRecord:
    """A finished run's failing and flaky tests, as the history keeps them."""

    __test__ = False
    job_id: str
    repo: str
    environment: str
    pr_number: int | None  # None: a run on the default branch
    head_sha: str
    url: str  # where a reader sees the run: its tests check run, the pull request or the commit
    outcomes: tuple[tuple[str, str, str], ...]  # (node id, outcome, error), outcome: failed or flaky


def links_by_test(rows: Iterable[Mapping[str, Any]], limit: int) -> dict[str, list[str]]:
    """(nodeid, url) rows, newest first, as node id → its first ``limit`` distinct links."""
    found: dict[str, list[str]] = {}
    for row in rows:
        links = found.setdefault(row["nodeid"], [])
        if len(links) < limit and row["url"] not in links:
            links.append(row["url"])
    return found


def commit_record(rows: Sequence[Mapping[str, Any]]) -> dict[str, str] | None:
    """A run's (job_id, nodeid, message) rows, outcomes left-joined: None when there is no run."""
    if not rows:
        return None
    return {row["nodeid"]: row["message"] for row in rows if row["nodeid"] is not None}


# The newest run on the default branch at a commit, and its failing tests (none: a row of NULLs).
COMMIT_RECORD_SQL = (
    "SELECT r.job_id, o.nodeid, o.message FROM (SELECT job_id FROM test_runs WHERE repo = {p} "
    "AND environment = {p} AND head_sha = {p} AND pr_number IS NULL ORDER BY recorded_at DESC LIMIT 1) r "
    "LEFT JOIN test_outcomes o ON o.job_id = r.job_id AND o.outcome = 'failed'"
)


# What GitHub was told of a job: the state, and the progress writes it was not shown yet.
TOLD_SQL = "SELECT reported_state, progress - progress_published AS unpublished FROM jobs WHERE id = {p}"


def told_record(rows: Sequence[Mapping[str, Any]]) -> tuple[RunState | None, int]:
    """:data:`TOLD_SQL`'s rows as (state told, progress writes unpublished); (None, 0): no job."""
    if not rows:
        return None, 0
    told = rows[0]["reported_state"]
    return (RunState(told) if told else None), int(rows[0]["unpublished"])
