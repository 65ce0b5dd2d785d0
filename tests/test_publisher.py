"""The one publisher: GitHub shows what the store holds of a run, whoever wrote it, and a publish a
crash or GitHub interrupted is completed by the next pass without a second check run or comment.

Real stores (SQLite; PostgreSQL with its NOTIFY), the App's real client against the fake GitHub.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest
from fakegithub import FakeGitHub
from finishing import CHECK_RUN
from postgres_support import pg_url
from report_samples import running_run
from report_samples import tests_failed as failed_tests

from bot.core.kinds import CHECK_KINDS, CheckKind
from bot.core.models import (
    CheckStatus,
    RunReport,
    RunRequest,
    RunState,
    TestCaseResult,
    TestOutcome,
    TestsProgress,
)
from bot.render.check_runs import check_run_name
from bot.render.comment import STICKY_MARKER
from bot.service.fleet.notify import listen
from bot.service.github import GitHubApp
from bot.service.locks import PrLocks
from bot.service.publisher.publisher import Publisher
from bot.service.store.postgres import JOBS_CHANNEL
from bot.service.store.postgres_fleet import FleetStore
from bot.service.store.protocol import Store
from bot.service.store.records import Job
from bot.service.store.sqlite import SQLiteStore

__all__ = ["pg_url"]

REPO = "octo-org/calc"
PR = 7
HEAD = "1" * 40


def request() -> RunRequest:
    return RunRequest(
        installation_id=1,
        repo=REPO,
        clone_url="https://example.invalid/calc.git",
        pr_number=PR,
        head_sha=HEAD,
    )


def so_far(job: Job) -> RunReport:
    """Half-way: pre-commit and docstrings done, the tests still running."""
    return running_run().model_copy(
        update={
            "run_id": job.id,
            "repo": REPO,
            "pr_number": PR,
            "head_sha": HEAD,
            "environment": job.environment,
        }
    )


@dataclass
class GitHubSide:
    fake: FakeGitHub
    app: GitHubApp

    def check_runs(self) -> dict[str, list[dict[str, object]]]:
        """Check run name → the state of each check run of that name."""
        runs: dict[str, list[dict[str, object]]] = {}
        for run in self.fake.check_runs(REPO, head_sha=HEAD):
            runs.setdefault(run.name, []).append(run.states[-1])
        return runs

    def summaries(self) -> list[str]:
        return [c.body for c in self.fake.comments(REPO, PR) if STICKY_MARKER in c.body]

    def writes(self) -> int:
        return sum(1 for call in self.fake.calls if call.method != "GET")


@pytest.fixture
async def github(fake_github: FakeGitHub) -> AsyncIterator[GitHubSide]:
    fake_github.add_repo(REPO, installation_id=1, clone_url="https://example.invalid/calc.git")
    fake_github.add_pull(REPO, PR, head_sha=HEAD, base_ref="main", base_sha="0" * 40)
    async with aiohttp.ClientSession() as session:
        yield GitHubSide(
            fake_github, GitHubApp(session, fake_github.app_id, fake_github.private_key_pem, fake_github.url)
        )


@pytest.fixture
def sqlite_store(tmp_path: Path) -> Iterator[SQLiteStore]:
    store = SQLiteStore(tmp_path / "bot.db")
    try:
        yield store
    finally:
        store.close()


def started(store: Store) -> Job:
    job = store.enqueue(request(), "cuda12", "key")
    assert job is not None
    claimed = store.claim() if isinstance(store, SQLiteStore) else None
    return claimed or job


def kinds_completed(github: GitHubSide, job: Job) -> dict[CheckKind, object]:
    runs = github.check_runs()
    return {k: runs[check_run_name(k, job.environment)][-1]["status"] for k in CHECK_KINDS}


async def test_results_so_far_written_before_a_crash_are_published_by_the_next_start_once(
    github: GitHubSide, sqlite_store: SQLiteStore
) -> None:
    publisher = Publisher(sqlite_store, github.app, PrLocks())
    job = started(sqlite_store)
    assert await publisher.publish(job.id)  # GitHub shows the run in progress
    # The pipeline's early results reach the store; the process dies before the publisher is woken.
    assert sqlite_store.save_progress(job.id, job.attempts, so_far(job))

    restarted = Publisher(sqlite_store, github.app, PrLocks())
    await restarted.publish_pending()  # the first pass of the next start

    assert kinds_completed(github, job) == {
        CheckKind.PRECOMMIT: "completed",
        CheckKind.DOCSTRINGS: "completed",
        CheckKind.TESTS: "in_progress",
        CheckKind.PARITY: "completed",
    }
    assert all(len(states) == 1 for states in github.check_runs().values())
    (summary,) = github.summaries()
    assert "pre-commit" in summary
    # Published twice, the same stored state sends nothing more.
    before = github.writes()
    await restarted.publish_pending()
    assert await restarted.publish(job.id)
    assert github.writes() == before


async def test_an_end_whose_publish_github_broke_off_is_completed_by_the_next_wake_with_nothing_twice(
    github: GitHubSide, sqlite_store: SQLiteStore
) -> None:
    publisher = Publisher(sqlite_store, github.app, PrLocks())
    job = started(sqlite_store)
    assert await publisher.publish(job.id)
    report = so_far(job).model_copy(update={"state": RunState.SUCCEEDED})
    assert sqlite_store.finish(job.id, RunState.SUCCEEDED, report, None, attempt=job.attempts)
    # GitHub takes the first check run's completion, then refuses the rest (more than the retries).
    github.fake.fail("PATCH", CHECK_RUN, 500, times=1_000)
    assert not await publisher.publish(job.id)
    assert sqlite_store.get_job(job.id).report_due  # type: ignore[union-attr]
    assert [j.id for j in sqlite_store.jobs_to_announce()] == [job.id]

    github.fake.clear_failures()
    publisher.wake(job.id)
    await publisher.publish_pending()
    assert set(kinds_completed(github, job).values()) == {"completed"}
    assert all(len(states) == 1 for states in github.check_runs().values())
    assert len(github.summaries()) == 1
    assert not sqlite_store.get_job(job.id).report_due  # type: ignore[union-attr]
    assert sqlite_store.jobs_to_announce() == []


async def test_each_failure_is_annotated_at_once_and_once_however_often_the_run_is_published(
    github: GitHubSide, sqlite_store: SQLiteStore
) -> None:
    publisher = Publisher(sqlite_store, github.app, PrLocks())
    job = started(sqlite_store)
    failed = failed_tests()
    first, second = (r for r in failed.results if r.outcome == TestOutcome.FAILED)

    def tests_so_far(done: int, failures: list[TestCaseResult]) -> RunReport:
        running = failed.model_copy(
            update={
                "status": CheckStatus.FAILED,
                "results": failures,
                "in_progress": TestsProgress(done=done, total=7),
            }
        )
        return so_far(job).model_copy(update={"tests": running})

    for done, failures in ((1, [first]), (2, [first]), (4, [first, second])):
        assert sqlite_store.save_progress(job.id, job.attempts, tests_so_far(done, failures))
        assert await publisher.publish(job.id)
    ended = so_far(job).model_copy(update={"state": RunState.FAILED, "tests": failed})
    assert sqlite_store.finish(job.id, RunState.FAILED, ended, None, attempt=job.attempts)
    assert await publisher.publish(job.id)

    (tests_run,) = [
        r
        for r in github.fake.check_runs(REPO, head_sha=HEAD)
        if r.name == check_run_name(CheckKind.TESTS, job.environment)
    ]
    placed = sorted((a["title"], a["annotation_level"]) for a in tests_run.annotations)
    # While running: a warning per failure, each once though the run was published three times;
    # at the end, the final annotations (the flaky test's a warning).
    assert placed == sorted(
        [
            (first.nodeid, "warning"),
            (second.nodeid, "warning"),
            (first.nodeid, "failure"),
            (second.nodeid, "failure"),
            (failed.results[2].nodeid, "warning"),
        ]
    )


async def follow(publisher: Publisher, run_id: str, seen: list[RunState]) -> None:
    async for job in publisher.changes(run_id):
        seen.append(job.state)


async def until(what: str, done: object, timeout: float = 20.0) -> None:
    async with asyncio.timeout(timeout):
        while not done():  # type: ignore[operator]
            await asyncio.sleep(0.02)


async def test_a_runs_change_feed_follows_it_until_it_is_published_over_one_machine(
    sqlite_store: SQLiteStore,
) -> None:
    publisher = Publisher(sqlite_store, None, PrLocks())
    publisher.feed.poll_s = 3600.0  # only a wake moves it
    job = sqlite_store.enqueue(request(), "cuda12", "key")
    assert job is not None
    seen: list[RunState] = []
    following = asyncio.create_task(follow(publisher, job.id, seen))
    await until("the queued run", lambda: seen == [RunState.QUEUED])
    claimed = sqlite_store.claim()
    assert claimed is not None
    publisher.wake(job.id)
    await until("the running run", lambda: seen[-1] == RunState.RUNNING)
    sqlite_store.finish(job.id, RunState.FAILED, None, "broke", attempt=claimed.attempts)
    assert await publisher.publish(job.id)
    await asyncio.wait_for(following, 20)
    assert seen[0] == RunState.QUEUED and seen[-1] == RunState.FAILED
    assert publisher.feed.following(job.id) == 0


@pytest.mark.postgres
async def test_a_runs_change_feed_moves_with_what_an_agent_writes_through_notify(pg_url: str) -> None:
    replica, agent = FleetStore(pg_url), FleetStore(pg_url)
    try:
        publisher = Publisher(replica, None, PrLocks())
        publisher.feed.poll_s = 3600.0  # only the NOTIFY moves it
        listening = asyncio.create_task(listen(pg_url, {}, heard={JOBS_CHANNEL: publisher.wake}))
        await asyncio.sleep(0.5)
        job = replica.enqueue(request(), "cuda12", "key", "cuda12.1")
        assert job is not None and job.queue_job_id is not None
        seen: list[RunState] = []
        following = asyncio.create_task(follow(publisher, job.id, seen))
        await until("the queued run", lambda: seen == [RunState.QUEUED])
        worker = int(agent._query("SELECT worker_id FROM procrastinate_register_worker_v1()")[0]["worker_id"])
        agent._query("SELECT id FROM procrastinate_fetch_job_v2(%s::varchar[], %s)", (["cuda12.1"], worker))
        assert agent.start_attempt(job.id, job.queue_job_id, worker, "gpu-host") is not None
        await until("the run the agent started", lambda: seen[-1] == RunState.RUNNING)
        following.cancel()
        listening.cancel()
        for task in (following, listening):
            with contextlib.suppress(asyncio.CancelledError):
                await task
    finally:
        replica.close()
        agent.close()


async def test_the_run_pages_hear_of_each_change_the_publisher_is_woken_with(
    sqlite_store: SQLiteStore,
) -> None:
    """`serve` hands the feed its run pages' wake (bot/service/app.py): an open page looks at the
    run when the publisher learns it changed, not at its next periodic look."""
    publisher = Publisher(sqlite_store, None, PrLocks())
    heard: list[str] = []
    publisher.feed.listeners.append(heard.append)
    publisher.wake("run-1")
    publisher.wake(None)  # "some runs": nothing to tell a page of one run
    assert heard == ["run-1"]
