"""Each step's whole output in the store, as the run page reads it: redacted, capped, in order,
kept for the retention period; on PostgreSQL written by an agent that may only add to it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import pytest
from docker_support import docker_client, make_runner, sh, test_image, workspace
from postgres_support import pg_url

from bot.core.run_log import LogCaps, LogEvent, LogKind, NewLogEvent, StepEnd
from bot.service.run_log import RunLogRecorder
from bot.service.store.postgres import PostgresStore
from bot.service.store.run_logs import LOG_CHANNEL
from bot.service.store.sqlite import SQLiteStore
from runner.backends.base import StepResult
from runner.step_log import LiveOutput, LoggedRunner

__all__ = ["docker_client", "make_runner", "pg_url", "test_image", "workspace"]

TOKEN = "ghs_" + "A" * 36


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SQLiteStore]:
    s = SQLiteStore(tmp_path / "db.sqlite")
    yield s
    s.close()


def output_of(events: list[LogEvent], step: int) -> str:
    return "".join(e.text for e in events if e.step == step and e.kind == LogKind.OUT)


@pytest.mark.docker
async def test_each_steps_whole_output_is_stored_as_the_container_printed_it_redacted(
    store, make_runner, workspace
):
    recorder = RunLogRecorder(store, "job-1", 1, secrets=[TOKEN])
    live = LiveOutput(recorder)
    runner = LoggedRunner(make_runner(on_output=live), recorder, live)
    async with recorder.flushing():
        await runner.run(sh("setup", "for i in $(seq 1 300); do echo line $i; done"), workspace)
        await runner.run(
            sh("tests", f"printf '\\033[31mred\\033[0m\\n'; echo token {TOKEN}; echo ghp_{'b' * 36}; exit 3"),
            workspace,
        )
    events = store.log_events("job-1")
    assert [(e.step, e.text) for e in events if e.kind == LogKind.STEP] == [(0, "setup"), (1, "tests")]
    assert output_of(events, 0) == "".join(f"line {i}\n" for i in range(1, 301))
    tests = output_of(events, 1)
    assert "\x1b[31mred\x1b[0m" in tests  # colours kept for the page to render
    assert TOKEN not in tests and "ghp_" not in tests and "token ***" in tests
    ends = [StepEnd.parse(e.text) for e in events if e.kind == LogKind.END]
    assert [(e.state, e.exit_code) for e in ends] == [("passed", 0), ("failed", 3)]
    assert [e.seq for e in events] == sorted(e.seq for e in events)


@pytest.mark.docker
async def test_a_line_is_in_the_store_while_the_step_still_runs(store, make_runner, workspace):
    recorder = RunLogRecorder(store, "job-live", 1)
    live = LiveOutput(recorder)
    runner = LoggedRunner(make_runner(on_output=live), recorder, live)
    async with recorder.flushing():
        step = asyncio.create_task(runner.run(sh("slow", "echo first; sleep 4; echo second"), workspace))
        seen = ""
        for _ in range(300):
            seen = output_of(store.log_events("job-live"), 0)
            if "first" in seen or step.done():
                break
            await asyncio.sleep(0.02)
        assert seen == "first\n" and not step.done()
        await step
    assert output_of(store.log_events("job-live"), 0) == "first\nsecond\n"


async def test_a_long_step_keeps_its_head_and_tail_and_says_what_was_cut(store):
    recorder = RunLogRecorder(store, "job-cap", 1, caps=LogCaps(step_head=100, step_tail=60, run_max=1000))
    async with recorder.flushing():
        recorder.step_started("tests")
        for i in range(1000):
            recorder.output(f"{i:04d}\n")  # 5 characters a line
        recorder.step_ended(StepResult(name="tests", exit_code=1))
    events = store.log_events("job-cap")
    text = output_of(events, 0)
    assert text.startswith("".join(f"{i:04d}\n" for i in range(20)))
    assert text.endswith("".join(f"{i:04d}\n" for i in range(988, 1000)))
    assert len(text) == 160
    cuts = [e.text for e in events if e.kind == LogKind.CUT]
    assert cuts == [f"{5000 - 160} characters cut"]
    kinds = [e.kind for e in events]
    # Once the head is full, the log says so at once (a live page would otherwise fall silent).
    assert kinds.count(LogKind.HELD) == 1
    assert kinds.index(LogKind.HELD) < kinds.index(LogKind.CUT) < kinds.index(LogKind.END)


async def test_a_run_past_its_budget_keeps_only_the_end_of_each_later_step(store):
    caps = LogCaps(step_head=100, step_tail=100, run_max=150, spent_tail=10)
    recorder = RunLogRecorder(store, "job-run-cap", 1, caps=caps)
    async with recorder.flushing():
        for name in ("a", "b", "c"):
            recorder.step_started(name)
            recorder.output("x" * 99 + "\n" + "y" * 99 + "\n")
            recorder.step_ended(StepResult(name=name, exit_code=0))
    events = store.log_events("job-run-cap")
    assert output_of(events, 0) == "x" * 99 + "\n" + "y" * 99 + "\n"  # head 100 + tail 100
    # The budget is spent after the first step: the next ones keep their last 10 characters.
    assert output_of(events, 1) == output_of(events, 2) == "y" * 9 + "\n"
    assert [e.text for e in events if e.kind == LogKind.CUT] == ["190 characters cut"] * 2


async def test_logs_older_than_the_retention_are_forgotten_whole(store):
    store.append_log("old", 1, [NewLogEvent(step=0, kind=LogKind.OUT, text="old\n")])
    store.append_log("new", 1, [NewLogEvent(step=0, kind=LogKind.OUT, text="new\n")])
    store._conn.execute("UPDATE run_log SET at = ? WHERE job_id = 'old'", ("2000-01-01T00:00:00+00:00",))
    assert store.purge_logs(datetime.now(UTC) - timedelta(days=1)) == 1
    assert store.log_events("old") == [] and len(store.log_events("new")) == 1
    assert store.log_size() == 4


@pytest.mark.postgres
def test_on_postgresql_an_agent_adds_to_a_log_and_notifies_but_reads_none(pg_url):
    store = PostgresStore(pg_url)
    role = f"agent_{int(time.time() * 1000) % 10**9}"
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {role} LOGIN IN ROLE paritybot_agent")
    try:
        agent = PostgresStore(
            pg_url.replace("postgresql://postgres@", f"postgresql://{role}@"), migrate_schema=False
        )
        try:
            with psycopg.connect(pg_url, autocommit=True) as listener:
                listener.execute(f"LISTEN {LOG_CHANNEL}")
                agent.append_log("job-pg", 2, [NewLogEvent(step=0, kind=LogKind.OUT, text="hello\x00\n")])
                notices = [n.payload for n in listener.notifies(timeout=5, stop_after=1)]
            assert notices == ["job-pg"]
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                agent.log_events("job-pg")
        finally:
            agent.close()
        events = store.log_events("job-pg")
        assert [(e.attempt, e.text) for e in events] == [(2, "hello\ufffd\n")]
        assert store.purge_logs(datetime.now(UTC) + timedelta(seconds=1)) == 1
    finally:
        store.close()
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(f"DROP OWNED BY {role}")
            conn.execute(f"DROP ROLE {role}")


async def test_the_reconcilers_pass_removes_logs_past_the_retention(store):
    from bot.service.locks import PrLocks
    from bot.service.publisher.publisher import Publisher
    from bot.service.reconciler import Reconciler

    store.append_log("old", 1, [NewLogEvent(step=0, kind=LogKind.OUT, text="old\n")])
    store.append_log("recent", 1, [NewLogEvent(step=0, kind=LogKind.OUT, text="recent\n")])
    store._conn.execute("UPDATE run_log SET at = ? WHERE job_id = 'old'", ("2000-01-01T00:00:00+00:00",))
    await Reconciler(Publisher(store, None, PrLocks()), log_retention=timedelta(days=30)).run_once()
    assert store.log_events("old") == [] and len(store.log_events("recent")) == 1
