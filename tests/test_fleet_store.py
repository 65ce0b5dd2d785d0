"""The PostgreSQL side of several hosts, statement by statement: the fence on an agent's results, the
stalled-job reaper (several at once), one queued job per PR and environment, the agents' role, the
sealed clone tokens and the schema command."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import psycopg
import pytest
from postgres_support import pg_url

from bot.core.models import RunReport, RunRequest, RunState
from bot.service.fleet.sealing import Opener, SealError, seal
from bot.service.store import postgres_schema
from bot.service.store.postgres_fleet import FleetStore
from bot.service.store.protocol import StoreError
from bot.service.store.records import Job

__all__ = ["pg_url"]  # the fixture, imported for pytest
pytestmark = pytest.mark.postgres

REPO = "octo-org/calc"
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def store(pg_url: str) -> Iterator[FleetStore]:
    backend = FleetStore(pg_url)
    try:
        yield backend
    finally:
        backend.close()


def request(sha: str = "a" * 40, pr: int = 7) -> RunRequest:
    return RunRequest(
        installation_id=1, repo=REPO, clone_url="https://example.invalid/c.git", pr_number=pr, head_sha=sha
    )


def enqueue(store: FleetStore, sha: str = "a" * 40, key: str = "k", pr: int = 7) -> Job:
    job = store.enqueue(request(sha, pr), "cuda12", key, "cuda12.1")
    assert job is not None and job.queue_job_id is not None
    return job


def register(store: FleetStore) -> int:
    return int(store._query("SELECT worker_id FROM procrastinate_register_worker_v1()")[0]["worker_id"])


def fetch(store: FleetStore, worker: int, queue: str = "cuda12.1") -> int | None:
    """What procrastinate's worker does to take a job: its fetch function."""
    rows = store._query("SELECT id FROM procrastinate_fetch_job_v2(%s::varchar[], %s)", ([queue], worker))
    return rows[0]["id"] if rows and rows[0]["id"] is not None else None


def stale(store: FleetStore, worker: int) -> None:
    store._query(
        "UPDATE procrastinate_workers SET last_heartbeat = now() - interval '1 hour' WHERE id = %s RETURNING 1",
        (worker,),
    )


def report(job: Job, runner: str) -> RunReport:
    return RunReport(
        run_id=job.id,
        repo=REPO,
        pr_number=7,
        head_sha=job.head_sha,
        environment="cuda12",
        state=RunState.SUCCEEDED,
        runner=runner,
    )


def queue_status(store: FleetStore, queue_job: int) -> str:
    return str(store._query("SELECT status FROM procrastinate_jobs WHERE id = %s", (queue_job,))[0]["status"])


def test_only_the_agent_that_still_owns_a_run_can_record_its_result(store: FleetStore) -> None:
    job = enqueue(store)
    old_worker, new_worker = register(store), register(store)
    first = fetch(store, old_worker)
    assert first == job.queue_job_id
    assert store.start_attempt(job.id, first, old_worker, "gpu-a") is not None
    store.register_agent(old_worker, "gpu-a", "gpu-a", ["cuda12.1"], [], None)

    stale(store, old_worker)
    (reaped,) = store.reap(stalled_after_s=5, max_attempts=3)
    assert (reaped.job_id, reaped.outcome) == (job.id, "requeued")
    assert queue_status(store, first) == "failed"
    second = fetch(store, new_worker)
    assert second is not None and second != first
    assert store.start_attempt(job.id, first, old_worker, "gpu-a") is None  # the old attempt cannot restart
    assert store.start_attempt(job.id, second, new_worker, "gpu-b") is not None

    # The frozen agent comes back with its result: refused; its heartbeat tells it it was given up.
    assert store.finish_attempt(job.id, first, old_worker, report(job, "stub@gpu-a")) is False
    assert store.agent_heartbeat(old_worker, "an-instance") is False
    assert store.finish_attempt(job.id, second, new_worker, report(job, "stub@gpu-b")) is True
    done = store.get_job(job.id)
    kept = store.report(job.id)
    assert done is not None and done.state == RunState.SUCCEEDED and done.attempts == 2
    assert kept is not None and kept.runner == "stub@gpu-b"


def test_an_agent_whose_worker_row_was_pruned_learns_it_at_its_next_heartbeat(store: FleetStore) -> None:
    worker = register(store)
    store.register_agent(worker, "gpu-a", "gpu-a", ["cuda12.1"], [], None)
    assert store.agent_heartbeat(worker, "an-instance") is True
    # What procrastinate does to workers silent past its timeout when another worker starts.
    store._query("SELECT * FROM procrastinate_prune_stalled_workers_v1(-1)")
    assert store.agent_heartbeat(worker, "an-instance") is False


def test_a_result_is_refused_once_procrastinate_no_longer_shows_the_job_doing_for_that_worker(
    store: FleetStore,
) -> None:
    job = enqueue(store)
    worker, other = register(store), register(store)
    queue_job = fetch(store, worker)
    assert queue_job is not None and store.start_attempt(job.id, queue_job, worker, "gpu-a") is not None
    assert store.finish_attempt(job.id, queue_job, other, report(job, "stub@other")) is False
    assert store.finish_attempt(job.id, queue_job, worker, report(job, "stub@gpu-a")) is True


def test_the_reaper_leaves_live_agents_alone_and_fails_a_run_past_its_attempts(store: FleetStore) -> None:
    alive, dead = enqueue(store, "a" * 40, "k1", pr=1), enqueue(store, "b" * 40, "k2", pr=2)
    live_worker, dead_worker = register(store), register(store)
    for job, worker in ((alive, live_worker), (dead, dead_worker)):
        queue_job = fetch(store, worker)
        assert queue_job is not None and store.start_attempt(job.id, queue_job, worker, "h") is not None
    stale(store, dead_worker)
    (reaped,) = store.reap(stalled_after_s=5, max_attempts=1)
    assert (reaped.job_id, reaped.outcome) == (dead.id, "failed")
    failed = store.get_job(dead.id)
    assert failed is not None and failed.state == RunState.FAILED
    assert (
        failed.error == "the agent running it stopped answering once; comment `/retest-gpu` to run it again"
    )
    still = store.get_job(alive.id)
    assert still is not None and still.state == RunState.RUNNING
    assert [j.id for j in store.jobs_to_announce()] == [alive.id, dead.id]
    # The failed run is due to be published (the reconciler completes its check runs), in the
    # same transaction that failed it; the running one is not.
    assert [j.id for j in store.jobs_due_for_report()] == [dead.id]


def test_a_run_whose_queue_job_ended_without_it_is_taken_back(store: FleetStore) -> None:
    job = enqueue(store)
    worker = register(store)
    queue_job = fetch(store, worker)
    assert queue_job is not None and store.start_attempt(job.id, queue_job, worker, "gpu-a") is not None
    # The agent's task failed before it wrote the run's end; procrastinate ended the queue job.
    store._query("SELECT procrastinate_finish_job_v1(%s, 'failed', false)", (queue_job,))
    (reaped,) = store.reap(stalled_after_s=60, max_attempts=3)
    assert (reaped.job_id, reaped.outcome) == (job.id, "requeued")
    again = store.get_job(job.id)
    assert again is not None and again.state == RunState.QUEUED and again.queue_job_id != queue_job


def test_several_reapers_at_once_take_each_stalled_run_once(store: FleetStore, pg_url: str) -> None:
    jobs = [enqueue(store, f"{n:040x}", f"k{n}", pr=n) for n in range(1, 13)]
    worker = register(store)
    for job in jobs:
        queue_job = fetch(store, worker)
        assert queue_job is not None and store.start_attempt(job.id, queue_job, worker, "h") is not None
    stale(store, worker)
    reapers = [FleetStore(pg_url, migrate_schema=False) for _ in range(4)]
    results: list[list[str]] = [[] for _ in reapers]
    errors: list[str] = []
    barrier = threading.Barrier(len(reapers))

    def reap(i: int) -> None:
        barrier.wait()
        try:
            results[i] = [r.job_id for r in reapers[i].reap(stalled_after_s=5, max_attempts=3)]
        except Exception as exc:  # a reaper that trips over another's work fails its whole pass
            errors.append(f"{type(exc).__name__}: {exc}")

    threads = [threading.Thread(target=reap, args=(i,)) for i in range(len(reapers))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for r in reapers:
        r.close()
    assert errors == []
    taken = [job_id for result in results for job_id in result]
    assert sorted(taken) == sorted(j.id for j in jobs)  # each once, none twice
    waiting = store._query("SELECT count(*) AS n FROM procrastinate_jobs WHERE status = 'todo'")[0]["n"]
    assert waiting == len(jobs)


def test_a_second_request_for_a_pr_and_environment_replaces_the_queued_one(store: FleetStore) -> None:
    first = enqueue(store, key="opened")
    second = enqueue(store, key="retest")  # same PR, head and environment: AlreadyEnqueued underneath
    replaced = store.get_job(first.id)
    assert replaced is not None and replaced.state == RunState.CANCELLED
    assert replaced.error == "replaced by a newer request for the same environment before it started"
    assert queue_status(store, first.queue_job_id or 0) == "cancelled"
    assert queue_status(store, second.queue_job_id or 0) == "todo"


def test_one_run_at_a_time_per_pr_and_environment(store: FleetStore) -> None:
    job = enqueue(store, "a" * 40, "k1")
    a, b = register(store), register(store)
    queue_job = fetch(store, a)
    assert queue_job is not None and store.start_attempt(job.id, queue_job, a, "gpu-a") is not None
    newer = enqueue(store, "b" * 40, "k2")  # a push while the first runs (its cancel not sent yet)
    assert fetch(store, b) is None  # waits for the lock
    assert store.finish_attempt(job.id, queue_job, a, report(job, "a"))
    store._query("SELECT procrastinate_finish_job_v1(%s, 'succeeded', false)", (queue_job,))
    assert fetch(store, b) == newer.queue_job_id


def test_the_agents_role_runs_jobs_but_reads_no_delivery_pull_request_or_approval(
    store: FleetStore, pg_url: str
) -> None:
    store.record_delivery("d1", "pull_request", b"{}")
    role = f"agent_{int(time.time() * 1000) % 10**9}"
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {role} LOGIN IN ROLE paritybot_agent")
    try:
        agent_url = pg_url.replace("postgresql://postgres@", f"postgresql://{role}@")
        agent = FleetStore(agent_url, migrate_schema=False)
        try:
            job = enqueue(store)
            worker = int(
                agent._query("SELECT worker_id FROM procrastinate_register_worker_v1()")[0]["worker_id"]
            )
            agent.register_agent(worker, "gpu-a", "gpu-a", ["cuda12.1"], ["NVIDIA H100"], {"cpus": 8})
            assert agent.agent_heartbeat(worker, "an-instance")
            queue_job = fetch(agent, worker)
            assert queue_job is not None
            assert agent.start_attempt(job.id, queue_job, worker, "gpu-a") is not None
            agent.request_token(job.id, queue_job, Opener().public_pem)
            assert agent.finish_attempt(job.id, queue_job, worker, report(job, "stub@gpu-a"))
            assert agent.reap(stalled_after_s=5, max_attempts=2) == []
            for table in ("deliveries", "pulls", "approvals", "installations"):
                with pytest.raises(psycopg.errors.InsufficientPrivilege):
                    agent._query(f"SELECT * FROM {table}")
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                agent._query("UPDATE jobs SET reported_state = 'succeeded' RETURNING 1")
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                agent._query("UPDATE jobs SET request = '{}' RETURNING 1")
        finally:
            agent.close()
    finally:
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(f"DROP OWNED BY {role}")
            conn.execute(f"DROP ROLE {role}")


def test_a_clone_token_opens_only_with_the_key_of_the_agent_that_asked(store: FleetStore) -> None:
    job = enqueue(store)
    worker = register(store)
    queue_job = fetch(store, worker)
    assert queue_job is not None and store.start_attempt(job.id, queue_job, worker, "gpu-a") is not None
    asking, other = Opener(), Opener()
    store.request_token(job.id, queue_job, asking.public_pem)
    (pending,) = store.token_requests()
    store.answer_token(queue_job, seal(pending.public_key, "ghs_secret"), None, None)
    sealed, error = store.sealed_token(queue_job)
    assert error is None and sealed is not None and b"ghs_secret" not in sealed
    assert asking.open(sealed) == "ghs_secret"
    with pytest.raises(SealError):
        other.open(sealed)
    assert store.finish_attempt(job.id, queue_job, worker, report(job, "a"))
    assert store.sealed_token(queue_job) == (None, "the token request is gone (the attempt was taken back)")


def test_the_schema_command_applies_nothing_twice_and_refuses_a_newer_database(pg_url: str) -> None:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        assert postgres_schema.migrate(conn, "db") == (len(postgres_schema.migrations()), ["schema.sql"])
        assert postgres_schema.migrate(conn, "db") == (len(postgres_schema.migrations()), [])
        done = {r[0] for r in conn.execute("SELECT name FROM paritybot_procrastinate_migrations")}
        assert done == {name for name, _ in postgres_schema.procrastinate_migrations()}
        conn.execute("INSERT INTO paritybot_schema_migrations (version, name) VALUES (999, 'future.sql')")
        with pytest.raises(StoreError, match="newer than this paritybot's"):
            postgres_schema.migrate(conn, "db")


def test_a_missing_procrastinate_migration_is_applied_by_the_next_upgrade(pg_url: str) -> None:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        postgres_schema.migrate(conn, "db")
        last, _ = postgres_schema.procrastinate_migrations()[-1]
        # As if the database was made by an older procrastinate: its last migration not yet applied.
        conn.execute("DELETE FROM paritybot_procrastinate_migrations WHERE name = %s", (last,))
        assert postgres_schema.migrate(conn, "db")[1] == [last]


def test_db_upgrade_makes_both_schemas_then_finds_nothing_to_do(pg_url: str, tmp_path: Path) -> None:
    env = {"PATH": os.environ["PATH"], "PARITYBOT_DATABASE_URL": pg_url}

    def upgrade() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "bot.cli.main", "db", "upgrade"],
            capture_output=True,
            text=True,
            env=env,
            cwd=ROOT,
            timeout=120,
        )

    first, second = upgrade(), upgrade()
    assert first.returncode == 0 and second.returncode == 0, first.stderr + second.stderr
    version = len(postgres_schema.migrations())
    assert first.stdout.endswith(
        f"paritybot schema {version}; procrastinate migrations applied: schema.sql\n"
    )
    assert second.stdout.endswith(
        f"paritybot schema {version}; procrastinate migrations applied: none needed\n"
    )
    assert "@" in first.stdout and "password" not in first.stdout


def test_a_run_taken_back_from_a_dead_agent_goes_before_the_runs_waiting(store: FleetStore) -> None:
    taken = enqueue(store, "a" * 40, "k-taken", pr=1)
    dead, alive = register(store), register(store)
    first = fetch(store, dead)
    assert first == taken.queue_job_id
    assert store.start_attempt(taken.id, first, dead, "gpu-a") is not None
    # A backlog: other PRs' runs queued after it, waiting for a free agent.
    waiting = [enqueue(store, f"{n:040x}", f"k-{n}", pr=10 + n) for n in range(3)]

    stale(store, dead)
    (reaped,) = store.reap(stalled_after_s=5, max_attempts=3)
    assert reaped.outcome == "requeued"
    rerun = store.get_job(taken.id)
    assert rerun is not None and rerun.queue_job_id is not None
    # The summaries say so, and the next free agent takes the rerun, not the oldest run waiting.
    assert [store.queue_position(j.id) for j in (rerun, *waiting)] == [1, 2, 3, 4]
    assert fetch(store, alive) == rerun.queue_job_id
    assert [fetch(store, alive) for _ in waiting] == [w.queue_job_id for w in waiting]


def test_a_silent_replicas_deliveries_are_taken_over_before_their_lease_ends(pg_url: str) -> None:
    lease, stalled = timedelta(minutes=10), timedelta(seconds=5)
    one, other = (FleetStore(pg_url, delivery_lease=lease, stalled_after=stalled) for _ in range(2))
    try:
        one.register_instance("replica-1", "serve", "control", 1)
        other.register_instance("replica-2", "serve", "control", 2)
        assert one.record_delivery("d-1", "ping", b"{}")
        (held,) = one.pending_deliveries()
        assert held.delivery_id == "d-1"
        # replica-1 beats: its delivery stays its own, however long it takes.
        assert one.instance_heartbeat("replica-1")
        assert other.pending_deliveries() == []
        # replica-1 died: silent past the stalled rule, long before its lease would end.
        one._query(
            "UPDATE instances SET last_heartbeat = now() - interval '6 seconds' WHERE id = 'replica-1' RETURNING 1"
        )
        (taken,) = other.pending_deliveries()
        assert taken.delivery_id == "d-1"
        assert one.pending_deliveries() == []  # now replica-2's, which beats
    finally:
        one.close()
        other.close()


async def test_an_agent_reads_the_tests_history_as_one_machine_does(store: FleetStore, pg_url: str) -> None:
    """Known flaky tests, the default branch's record and the last run's failures reach an agent's
    pipeline: its role reads the history (and still nothing of the pull request's own row)."""
    from bot.service.store.records import TestRunRecord
    from bot.service.test_history import AgentHistory

    store.record_test_run(
        TestRunRecord("j-1", "octo/lib", "cuda", 3, "a" * 40, "u1", (("t::flaky", "flaky", "E"),))
    )
    store.record_test_run(
        TestRunRecord("j-2", "octo/lib", "cuda", None, "b" * 40, "u2", (("t::old", "failed", "E2"),))
    )
    store.record_test_run(
        TestRunRecord("j-3", "octo/lib", "cuda", 7, "c" * 40, "u3", (("t::mine", "failed", "E3"),))
    )
    role = f"agent_{int(time.time() * 1000) % 10**9}"
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {role} LOGIN IN ROLE paritybot_agent")
    try:
        agent = FleetStore(
            pg_url.replace("postgresql://postgres@", f"postgresql://{role}@"), migrate_schema=False
        )
        try:
            history = AgentHistory(agent, "octo/lib", "cuda", 7)
            assert await history.flaky_elsewhere(["t::flaky", "t::mine"]) == {"t::flaky": ["u1"]}
            assert await history.failing_at("b" * 40) == {"t::old": "E2"}
            assert await history.recently_failed() == {"t::mine"}
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                agent._query(
                    "INSERT INTO test_runs (job_id, repo, environment, head_sha, url) VALUES ('x','r','e','s','u')"
                )
        finally:
            agent.close()
    finally:
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(f"DROP OWNED BY {role}")
            conn.execute(f"DROP ROLE {role}")
