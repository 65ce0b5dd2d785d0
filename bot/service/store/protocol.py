"""The store and queue, as the service uses it: one protocol, whatever the backend.

The service types against :class:`Store` only; ``bot.service.app`` picks the backend: the
embedded SQLite one (:mod:`bot.service.store.sqlite`, one machine, also an :class:`EmbeddedQueue`)
or PostgreSQL (:mod:`bot.service.store.postgres`, several hosts). Everything here is backend-neutral: plain values and the records of
:mod:`bot.service.store.records` in, the same out. Calls are synchronous and short; async callers
run them with ``asyncio.to_thread``. Each method is one transaction.
"""

from __future__ import annotations

from typing import Protocol

from bot.core.models import EnvFacts, RunReport, RunRequest, RunState
from bot.service.store.overview import Overview
from bot.service.store.records import Delivery, DeliveryStatus, Job, PullState, TestRunRecord
from bot.service.store.run_logs import RunLogStore
from bot.service.store.sessions import SessionStore
from runner.backends.base import StepProcess


class StoreError(Exception):
    """The database cannot be used by this code (newer than it, or a schema it does not know);
    the message says why in one line, and what to do."""


class Store(RunLogStore, SessionStore, Protocol):
    def close(self) -> None: ...

    # deliveries: committed before the 202, dispatched afterwards ---------------------------------

    def record_delivery(self, delivery_id: str, event: str, body: bytes) -> bool:
        """Commit a delivery durably; False when its id was already recorded (a redelivery)."""
        ...

    def pending_deliveries(self, limit: int = 100) -> list[Delivery]:
        """Deliveries still ``received`` and due (past their retry delay), oldest first, at most
        ``limit``. A store shared by several replicas hands each to one replica at a time, and a
        PR's next delivery only once its previous one is finished."""
        ...

    def finish_delivery(self, delivery_id: str, status: DeliveryStatus, error: str | None = None) -> None:
        """Its handlers finished (``dispatched``) or gave up (``failed``, with the error)."""
        ...

    def retry_delivery_later(self, delivery_id: str, error: str, delay_s: float) -> None:
        """Count a failed attempt; the delivery is pending again once ``delay_s`` has passed."""
        ...

    def delivery_status(self, delivery_id: str) -> DeliveryStatus | None: ...
    def delivery(self, delivery_id: str) -> Delivery | None:
        """A delivery as recorded: its status, attempts and last error."""
        ...

    def delivery_count(self) -> int: ...
    def delivery_status_count(self, status: DeliveryStatus) -> int: ...

    # installations -------------------------------------------------------------------------------

    def record_installation(self, installation_id: int, account: str, action: str) -> None: ...
    def installation(self, installation_id: int) -> tuple[str, str] | None:
        """(account, last action) of an installation the App was told about."""
        ...

    # jobs: one run of one PR head in one environment ---------------------------------------------

    def enqueue(
        self, request: RunRequest, environment: str, dedupe_key: str, queue: str | None = None
    ) -> Job | None:
        """Insert a job queued in ``queue`` (default: the environment's name); None when a job with
        the same dedupe key exists (idempotency)."""
        ...

    def get_job(self, job_id: str) -> Job | None: ...
    def set_check_runs(self, job_id: str, check_runs: dict[str, int]) -> None:
        """Add check run ids (check kind → id) to those the job has."""
        ...

    def intend_check_runs(self, job_id: str) -> bool:
        """Record, before the first request, that the job's check runs are being created; True when
        it was recorded before (some may exist whose ids were never saved: look them up first)."""
        ...

    def set_check_run_sent(self, job_id: str, kind: str, digest: str) -> None:
        """The digest of the last body sent for the job's check run of ``kind``."""
        ...

    def finish(
        self,
        job_id: str,
        state: RunState,
        report: RunReport | None,
        error: str | None,
        *,
        attempt: int | None = None,
    ) -> bool:
        """A final state, due to be reported on GitHub. With ``attempt``: only while that attempt
        still runs the job (fencing); False when it does not."""
        ...

    def save_progress(self, job_id: str, attempt: int, report: RunReport) -> bool:
        """The results so far of a running attempt; False when the job is no longer its."""
        ...

    def jobs_due_for_report(self) -> list[Job]:
        """Final jobs whose state GitHub does not show yet, oldest first."""
        ...

    def mark_reported(self, job_id: str) -> None: ...

    def jobs_to_announce(self, limit: int = 50) -> list[Job]:
        """Jobs whose state, or results so far, GitHub was not told yet (the publisher's to do),
        oldest first. A final one is also ``report_due`` until it was published."""
        ...

    def told(self, job_id: str) -> tuple[RunState | None, int]:
        """What GitHub was told of the job: the state, and how many progress writes it was not
        shown yet."""
        ...

    def mark_announced(self, job_id: str, state: RunState, progress_seen: int = 0) -> None:
        """GitHub shows ``state``, and the progress writes seen before it was told (never later ones)."""
        ...

    def request_cancel(self, repo: str, pr_number: int, *, keep_sha: str | None = None) -> list[Job]:
        """Cancel the PR's queued jobs and flag its running ones (not those of ``keep_sha``)."""
        ...

    def is_cancel_requested(self, job_id: str) -> bool: ...
    def queue_position(self, job_id: str) -> int | None:
        """1 for the next job of its queue to start; None when it is not queued."""
        ...

    def jobs_for_pr(self, repo: str, pr_number: int) -> list[Job]:
        """Every job of the PR, oldest first."""
        ...

    def jobs_in_state(self, state: RunState) -> list[Job]:
        """Every job in ``state``, oldest first."""
        ...

    def report(self, job_id: str) -> RunReport | None: ...

    # pull requests -------------------------------------------------------------------------------

    def pull_state(self, repo: str, pr_number: int) -> PullState: ...
    def save_pull_state(self, state: PullState) -> None: ...
    def add_approval(self, repo: str, pr_number: int, sha: str, approver: str) -> None: ...
    def approvals(self, repo: str, pr_number: int) -> list[tuple[str, str]]:
        """(head SHA, approver) pairs: who asked for a run of which commit."""
        ...

    # process groups the host runner started ------------------------------------------------------

    def record_step_process(self, job_id: str, attempt: int, process: StepProcess) -> None: ...
    def forget_step_process(self, process: StepProcess) -> None: ...
    def step_processes(self) -> list[StepProcess]:
        """Every step process group recorded and not yet seen to end, oldest first."""
        ...

    # instances: each start of `serve` or of an agent, with a heartbeat -----------------------------

    def register_instance(self, instance_id: str, kind: str, host: str, pid: int) -> None:
        """Record one start of `serve` (``kind`` "serve") or an agent ("agent"). On one machine the
        database serves one `serve` at a time: every earlier instance is marked stopped."""
        ...

    def instance_heartbeat(self, instance_id: str) -> bool:
        """The instance is alive; False when it was recorded stopped (it must not act as alive)."""
        ...

    def instance_stopped(self, instance_id: str) -> None: ...
    def runs_over(self, run_ids: set[str]) -> set[str]:
        """Of these runs (job ids), those that ended (succeeded, failed, cancelled); one this store
        does not know is not among them."""
        ...

    def instances_alive(self, instance_ids: list[str], stalled_after_s: float) -> dict[str, bool]:
        """Of the instances this store knows, which are alive: not stopped, and a heartbeat younger
        than ``stalled_after_s``. An id it does not know is left out (another deployment's)."""
        ...

    # the CI reference: the probe of an environment on the default branch -------------------------

    def save_baseline(self, repo: str, environment: str, facts: EnvFacts) -> None: ...
    # the tests' history: which failed or were flaky in each finished run (docs/reporting.md)
    def record_test_run(self, run: TestRunRecord) -> None:
        """Keep a finished run's failing and flaky tests; recording the same run again replaces it."""
        ...

    def flaky_elsewhere(
        self, repo: str, nodeids: list[str], *, pr_number: int | None, limit: int = 3
    ) -> dict[str, list[str]]:
        """Node id → links to the latest ``limit`` runs, of other pull requests or the default
        branch, where it failed and then passed on a rerun."""
        ...

    def failing_at(self, repo: str, environment: str, sha: str) -> dict[str, str] | None:
        """The default branch's record of commit ``sha``: node id → error of each test that failed
        there; None when no run on the default branch recorded it."""
        ...

    def baseline(self, repo: str, environment: str) -> EnvFacts | None: ...

    # what operators look at: /status and /metrics ------------------------------------------------
    def overview(self, recent: int = 20) -> Overview:
        """The queues, who runs jobs, the running jobs, the ``recent`` last finished ones, and the
        counts of jobs by state and deliveries by status."""
        ...


class EmbeddedQueue(Store, Protocol):
    """The store as the in-process workers of one machine use it (SQLite). With several hosts,
    procrastinate hands jobs to agents instead (:mod:`bot.service.fleet`)."""

    def claim(self, queues: list[str] | None = None) -> Job | None:
        """The oldest queued job of ``queues`` (all when None), now ``running``; None when none waits."""
        ...

    def heartbeat(self, job_id: str, attempt: int) -> bool:
        """The worker of ``attempt`` is alive; False when the job is no longer its."""
        ...

    def recover(self, max_attempts: int, *, stale_after_s: float | None = None) -> tuple[int, int]:
        """Running jobs whose process is gone (all at start-up; with ``stale_after_s``, those whose
        heartbeat is older) are requeued, or failed past max_attempts and due to be reported.
        Returns (requeued, failed). With several hosts the reaper does this instead
        (:mod:`bot.service.fleet.reaper`), from procrastinate's heartbeats of the agents."""
        ...
