"""The store's protocol, as the service uses it, against both backends: the embedded SQLite file and
PostgreSQL (several hosts). Each test runs once per backend, with the same expectations."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from postgres_support import pg_url

from bot.core.models import EnvFacts, RunReport, RunRequest, RunState
from bot.service.scheduler import dedupe_key
from bot.service.store.postgres import PostgresStore
from bot.service.store.protocol import Store
from bot.service.store.records import DeliveryStatus, PullState, TestRunRecord
from bot.service.store.sqlite import SQLiteStore
from runner.backends.base import StepProcess

__all__ = ["pg_url"]  # the fixture, imported for pytest
REPO = "octo-org/calc"


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    if request.param == "sqlite":
        backend: Store = SQLiteStore(tmp_path / "bot.db")
    else:
        backend = PostgresStore(request.getfixturevalue("pg_url"))
    try:
        yield backend
    finally:
        backend.close()


def run_request(sha: str = "a" * 40, pr: int | None = 7) -> RunRequest:
    return RunRequest(
        installation_id=1, repo=REPO, clone_url="https://example.invalid/calc.git", pr_number=pr, head_sha=sha
    )


def test_a_delivery_is_recorded_once_and_handed_out_until_it_is_finished(store: Store) -> None:
    assert store.record_delivery("d1", "pull_request", b'{"a": 1}') is True
    assert store.record_delivery("d1", "pull_request", b'{"a": 1}') is False  # a redelivery
    assert store.record_delivery("d2", "issue_comment", b"{}") is True
    first = store.pending_deliveries()[0]  # oldest first (PostgreSQL hands out one at a time)
    assert (first.delivery_id, first.event, first.body) == ("d1", "pull_request", b'{"a": 1}')
    store.finish_delivery("d1", DeliveryStatus.DISPATCHED)
    assert [(d.delivery_id, d.body) for d in store.pending_deliveries()] == [("d2", b"{}")]
    store.retry_delivery_later("d2", "GitHub answered 502", delay_s=3600)
    assert store.delivery_status("d1") == DeliveryStatus.DISPATCHED
    assert store.delivery_status("d2") == DeliveryStatus.RECEIVED
    assert store.pending_deliveries() == []  # d2 waits for its delay
    assert store.delivery_count() == 2
    assert store.delivery_status_count(DeliveryStatus.RECEIVED) == 1
    assert store.delivery_status("nope") is None


@pytest.mark.postgres
def test_a_prs_later_delivery_waits_for_its_earlier_one_on_postgresql(pg_url: str) -> None:
    store = PostgresStore(pg_url)
    try:
        for n, pr in enumerate((7, 7, 8)):
            body = b'{"repository": {"full_name": "octo-org/calc"}, "pull_request": {"number": %d}}' % pr
            store.record_delivery(f"d{n}", "pull_request", body)
        assert [d.delivery_id for d in store.pending_deliveries()] == ["d0"]
        # d1 is PR 7's too: it waits while d0 is being handled; PR 8's goes ahead.
        assert [d.delivery_id for d in store.pending_deliveries()] == ["d2"]
        assert store.pending_deliveries() == []
        store.finish_delivery("d0", DeliveryStatus.DISPATCHED)
        assert [d.delivery_id for d in store.pending_deliveries()] == ["d1"]
    finally:
        store.close()


def test_installations_keep_their_last_action(store: Store) -> None:
    store.record_installation(5, "octo-org", "created")
    store.record_installation(5, "octo-org", "suspend")
    assert store.installation(5) == ("octo-org", "suspend")
    assert store.installation(6) is None


def test_a_run_is_queued_once_per_dedupe_key_in_its_queue(store: Store) -> None:
    req = run_request()
    job = store.enqueue(req, "cuda12", dedupe_key(req, "cuda12", "opened"), "gpu-h100")
    assert job is not None and job.state == RunState.QUEUED
    assert (job.queue, job.environment, job.head_sha) == ("gpu-h100", "cuda12", "a" * 40)
    assert store.enqueue(req, "cuda12", dedupe_key(req, "cuda12", "opened"), "gpu-h100") is None
    assert store.queue_position(job.id) == 1
    store.set_check_runs(job.id, {"tests": 3})
    fetched = store.get_job(job.id)
    assert fetched is not None and fetched.check_runs == {"tests": 3} and fetched.request == req


def test_queue_positions_count_within_one_queue(store: Store) -> None:
    first = store.enqueue(run_request("a" * 40, 1), "cuda12", "k1")
    other_queue = store.enqueue(run_request("b" * 40, 2), "cuda11", "k2")
    second = store.enqueue(run_request("c" * 40, 3), "cuda12", "k3")
    assert first and other_queue and second
    assert [store.queue_position(j.id) for j in (first, other_queue, second)] == [1, 1, 2]


def test_cancelling_a_pr_ends_its_queued_runs_of_other_commits(store: Store) -> None:
    old = store.enqueue(run_request("a" * 40), "cuda12", "k-old")
    other_env = store.enqueue(run_request("a" * 40), "cuda11", "k-old-11")
    assert old and other_env
    cancelled = store.request_cancel(REPO, 7, keep_sha="b" * 40)
    assert {j.id for j in cancelled} == {old.id, other_env.id}
    assert all(j.state == RunState.CANCELLED for j in cancelled)
    assert store.queue_position(old.id) is None
    new = store.enqueue(run_request("b" * 40), "cuda12", "k-new")
    assert new is not None
    assert store.request_cancel(REPO, 7, keep_sha="b" * 40) == []
    assert [j.id for j in store.jobs_for_pr(REPO, 7)] == [old.id, other_env.id, new.id]
    assert [j.id for j in store.jobs_in_state(RunState.QUEUED)] == [new.id]


def test_a_finished_run_keeps_its_report(store: Store) -> None:
    job = store.enqueue(run_request(), "cuda12", "k")
    assert job is not None
    report = RunReport(
        run_id=job.id,
        repo=REPO,
        pr_number=7,
        head_sha=job.head_sha,
        environment="cuda12",
        state=RunState.FAILED,
        error="boom",
    )
    store.finish(job.id, RunState.FAILED, report, "boom")
    done = store.get_job(job.id)
    assert done is not None and done.state == RunState.FAILED and done.error == "boom"
    assert done.finished_at is not None
    assert store.report(job.id) == report


def test_pull_state_approvals_and_baselines_are_kept(store: Store) -> None:
    assert store.pull_state(REPO, 7) == PullState(repo=REPO, pr_number=7)
    state = PullState(
        repo=REPO,
        pr_number=7,
        comment_id=55,
        comment_body_hash="h",
        last_verdict="fail",
        failed_tests={"cuda12": ["tests/test_a.py::test_b"]},
    )
    store.save_pull_state(state)
    assert store.pull_state(REPO, 7) == state
    store.add_approval(REPO, 7, "a" * 40, "maintainer")
    store.add_approval(REPO, 7, "a" * 40, "maintainer")
    assert store.approvals(REPO, 7) == [("a" * 40, "maintainer")]
    facts = EnvFacts(source="probe", python="3.11.7", torch="2.3.0")
    store.save_baseline(REPO, "cuda12", facts)
    assert store.baseline(REPO, "cuda12") == facts
    assert store.baseline(REPO, "cuda11") is None


def test_a_final_state_is_due_on_github_in_the_same_write_until_it_is_published(store: Store) -> None:
    pr_run = store.enqueue(run_request(), "cuda12", "k-pr")
    default_branch = store.enqueue(run_request("c" * 40, pr=None), "cuda12", "k-main")
    superseded = store.enqueue(run_request("d" * 40), "cuda11", "k-old")
    assert pr_run and default_branch and superseded
    store.finish(pr_run.id, RunState.SUCCEEDED, None, None)
    store.finish(default_branch.id, RunState.SUCCEEDED, None, None)  # its coverage map's check run
    store.request_cancel(REPO, 7, keep_sha=pr_run.head_sha)
    assert [j.id for j in store.jobs_due_for_report()] == [pr_run.id, default_branch.id, superseded.id]
    store.mark_reported(pr_run.id)
    store.mark_reported(default_branch.id)
    assert [j.id for j in store.jobs_due_for_report()] == [superseded.id]
    done = store.get_job(pr_run.id)
    assert done is not None and done.state == RunState.SUCCEEDED and not done.report_due


def test_a_result_is_written_only_while_its_attempt_still_runs_the_job(store: Store) -> None:
    job = store.enqueue(run_request(), "cuda12", "k")
    assert job is not None
    report = job.report_without_results(RunState.SUCCEEDED, "")
    assert store.finish(job.id, RunState.SUCCEEDED, report, None, attempt=1) is False  # not running
    assert store.save_progress(job.id, 1, report) is False
    assert store.finish(job.id, RunState.FAILED, None, "refused") is True  # unfenced: the service's own


def test_check_run_creation_is_intended_once_and_each_sent_body_remembered(store: Store) -> None:
    job = store.enqueue(run_request(), "cuda12", "k")
    assert job is not None
    assert store.intend_check_runs(job.id) is False  # the first time: nothing can exist yet
    assert store.intend_check_runs(job.id) is True  # a retry: look them up first
    assert store.intend_check_runs("no-such-job") is False
    store.set_check_runs(job.id, {"tests": 11})
    store.set_check_runs(job.id, {"lint": 12})
    store.set_check_run_sent(job.id, "tests", "d1")
    store.set_check_run_sent(job.id, "lint", "d2")
    store.set_check_run_sent(job.id, "tests", "d3")
    again = store.get_job(job.id)
    assert again is not None and again.check_runs_intent_at is not None
    assert again.check_runs == {"tests": 11, "lint": 12}
    assert again.check_run_sent == {"tests": "d3", "lint": "d2"}


def test_a_pending_summary_a_delivery_and_step_processes_are_kept(store: Store) -> None:
    store.save_pull_state(PullState(repo=REPO, pr_number=8, comment_pending=True))
    assert store.pull_state(REPO, 8).comment_pending is True
    store.record_delivery("d9", "pull_request", b"{}")
    store.retry_delivery_later("d9", "GitHub answered 502", delay_s=3600)
    delivery = store.delivery("d9")
    assert delivery is not None and (delivery.attempts, delivery.error) == (1, "GitHub answered 502")
    assert store.delivery("nope") is None
    first, second = StepProcess(101, "boot", 5, "tests"), StepProcess(102, "boot", 6, "lint")
    store.record_step_process("job", 1, first)
    store.record_step_process("job", 1, second)
    assert store.step_processes() == [first, second]
    store.forget_step_process(first)
    assert store.step_processes() == [second]


def test_an_instance_lives_while_it_beats_and_until_it_stops(store: Store) -> None:
    store.register_instance("agent-a", "agent", "gpu-a", 11)
    store.register_instance("agent-b", "agent", "gpu-b", 12)
    alive = store.instances_alive(["agent-a", "agent-b", "unknown"], stalled_after_s=60)
    assert "unknown" not in alive  # another deployment's: not this store's to judge
    if isinstance(store, SQLiteStore):
        # One machine: one `serve` per database, so a new start means the earlier one is over.
        assert alive == {"agent-a": False, "agent-b": True}
        assert not store.instance_heartbeat("agent-a")
    else:
        assert alive == {"agent-a": True, "agent-b": True}
        assert store.instance_heartbeat("agent-a")
        time.sleep(0.2)
        assert store.instances_alive(["agent-a"], stalled_after_s=0.1) == {"agent-a": False}
    store.instance_stopped("agent-b")
    assert store.instances_alive(["agent-b"], stalled_after_s=60) == {"agent-b": False}
    assert not store.instance_heartbeat("agent-b")


def test_the_runs_over_are_those_that_ended(store: Store) -> None:
    waiting = store.enqueue(run_request("a" * 40), "default", "k-waiting")
    ended = store.enqueue(run_request("b" * 40, pr=8), "default", "k-ended")
    assert waiting is not None and ended is not None
    store.request_cancel(REPO, 8)
    assert store.runs_over({waiting.id, ended.id, "unknown"}) == {ended.id}
    assert store.runs_over(set()) == set()


def _test_run(job_id: str, pr: int | None, sha: str, *outcomes: tuple[str, str, str]) -> TestRunRecord:
    url = f"https://github.com/{REPO}/runs/{job_id}"
    return TestRunRecord(job_id, REPO, "cuda12", pr, sha, url, tuple(outcomes))


def test_the_tests_history_names_tests_flaky_elsewhere_and_keeps_the_default_branchs_record(
    store: Store,
) -> None:
    flaky, broken = "tests/test_io.py::test_retry", "tests/test_io.py::test_open[a::b]"
    store.record_test_run(_test_run("own", 7, "a" * 40, (flaky, "flaky", "timeout")))
    store.record_test_run(
        _test_run("other", 8, "b" * 40, (flaky, "flaky", "timeout"), (broken, "failed", "E"))
    )
    store.record_test_run(_test_run("main-1", None, "c" * 40, (broken, "failed", "ImportError: no numpy")))
    store.record_test_run(_test_run("main-2", None, "d" * 40))  # a clean run: no failure

    # The pull request's own runs do not count; another change's flaky run does, with its link.
    seen = store.flaky_elsewhere(REPO, [flaky, broken, "tests/x.py::t"], pr_number=7)
    assert seen == {flaky: [f"https://github.com/{REPO}/runs/other"]}
    assert store.flaky_elsewhere(REPO, [flaky], pr_number=8) == {
        flaky: [f"https://github.com/{REPO}/runs/own"]
    }
    assert store.flaky_elsewhere("octo-org/other", [flaky], pr_number=None) == {}

    assert store.failing_at(REPO, "cuda12", "c" * 40) == {broken: "ImportError: no numpy"}
    assert store.failing_at(REPO, "cuda12", "d" * 40) == {}  # recorded, nothing failed
    assert store.failing_at(REPO, "cuda12", "b" * 40) is None  # a pull request's head: no record
    assert store.failing_at(REPO, "rocm", "c" * 40) is None  # another environment's record
    store.record_test_run(_test_run("main-1", None, "c" * 40))  # recorded again: replaced
    assert store.failing_at(REPO, "cuda12", "c" * 40) == {}


def test_a_viewer_session_lives_in_the_store_until_it_is_ended(store: Store) -> None:
    start = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
    store.start_session("k1", "alice", start, start + timedelta(hours=8))
    session = store.viewer_session("k1")
    assert session is not None and (session.login, session.started_at, session.seen_at) == (
        "alice",
        start,
        start,
    )
    store.session_seen("k1", start + timedelta(minutes=10))
    seen = store.viewer_session("k1")
    assert seen is not None and seen.seen_at == start + timedelta(minutes=10)
    assert store.viewer_session("k2") is None
    assert store.end_session("k1") is True
    assert store.end_session("k1") is False
    assert store.viewer_session("k1") is None
    # A new sign-in forgets the sessions already past their expiry.
    store.start_session("old", "bob", start, start + timedelta(hours=8))
    store.start_session("new", "carol", start + timedelta(hours=9), start + timedelta(hours=17))
    assert store.viewer_session("old") is None and store.viewer_session("new") is not None
