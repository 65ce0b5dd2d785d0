"""The records the store keeps: webhook deliveries, jobs (runs) and what the bot remembers of a PR."""

from __future__ import annotations

import json
from datetime import datetime
from enum import StrEnum

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
        default_factory=dict, description="check kind → digest of the last body sent for it"
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
