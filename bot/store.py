"""The store and queue interface, and the records it holds.

The embedded backend is SQLite (:mod:`bot.sqlite_store`). A multi-host backend (PostgreSQL with
procrastinate, one queue per environment label) implements the same protocol; the job states are
procrastinate's, so nothing above this layer changes.
"""

from __future__ import annotations

from datetime import datetime
from typing import Protocol

from pydantic import BaseModel, Field

from bot.models import RunReport, RunRequest, RunState


class Delivery(BaseModel):
    delivery_id: str
    event: str
    body: bytes
    received_at: datetime
    attempts: int = 0


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
    cancel_requested: bool = False
    created_at: datetime
    started_at: datetime | None = None
    finished_at: datetime | None = None
    error: str | None = None

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
    last_verdict: str | None = None
    failed_tests: dict[str, list[str]] = Field(
        default_factory=dict, description="environment → node ids that failed in its last run"
    )


class Store(Protocol):
    # deliveries -------------------------------------------------------------------------------
    def record_delivery(self, delivery_id: str, event: str, body: bytes) -> bool:
        """Commit a webhook delivery durably; False when its id was already recorded (a redelivery)."""

    def pending_deliveries(self, limit: int = 100) -> list[Delivery]: ...
    def finish_delivery(self, delivery_id: str, status: str, error: str | None = None) -> None: ...
    def delivery_status(self, delivery_id: str) -> str | None: ...

    # installations ----------------------------------------------------------------------------
    def record_installation(self, installation_id: int, account: str, action: str) -> None: ...

    # jobs ---------------------------------------------------------------------------------------
    def enqueue(self, request: RunRequest, environment: str, dedupe_key: str) -> Job | None:
        """Insert a queued job; None when a job with the same dedupe key exists (idempotency)."""

    def claim(self, queues: list[str] | None = None) -> Job | None: ...
    def get_job(self, job_id: str) -> Job | None: ...
    def set_check_runs(self, job_id: str, check_runs: dict[str, int]) -> None: ...
    def finish(self, job_id: str, state: RunState, report: RunReport | None, error: str | None) -> None: ...
    def request_cancel(self, repo: str, pr_number: int, *, keep_sha: str | None = None) -> list[Job]:
        """Cancel the PR's queued jobs and flag its running ones; returns the jobs affected."""

    def is_cancel_requested(self, job_id: str) -> bool: ...
    def queue_position(self, job_id: str) -> int | None: ...
    def recover(self, max_attempts: int) -> tuple[int, int]:
        """After a crash: running jobs are requeued, or failed past max_attempts. (requeued, failed)"""

    def jobs_for_pr(self, repo: str, pr_number: int) -> list[Job]: ...
    def report(self, job_id: str) -> RunReport | None: ...

    # pull requests ------------------------------------------------------------------------------
    def pull_state(self, repo: str, pr_number: int) -> PullState: ...
    def save_pull_state(self, state: PullState) -> None: ...
    def add_approval(self, repo: str, pr_number: int, sha: str, approver: str) -> None: ...
    def approvals(self, repo: str, pr_number: int) -> list[tuple[str, str]]: ...

    # CI reference: the probe of an environment on the default branch ------------------------------
    def save_baseline(self, repo: str, environment: str, facts_json: str) -> None: ...
    def baseline(self, repo: str, environment: str) -> str | None: ...
