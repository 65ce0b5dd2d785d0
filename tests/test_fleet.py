"""Several hosts against real PostgreSQL, real `serve` and `agent` processes and the fake GitHub."""

from __future__ import annotations

import asyncio
import hashlib
import signal
import time
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import docker
import pytest
from docker_support import docker_client, test_image
from fakegithub import FakeGitHub
from fleet_agent import STUB_LABEL
from fleet_harness import ONE_ENVIRONMENT, REPO, Fleet
from postgres_support import pg_url

from bot.core.kinds import CheckKind
from bot.core.models import RunState
from bot.render.check_runs import check_run_name
from bot.service.fleet.agent import FENCED_EXIT
from bot.service.store.records import DeliveryStatus, Job

__all__ = ["docker_client", "pg_url", "test_image"]  # fixtures, imported for pytest
pytestmark = pytest.mark.postgres


@pytest.fixture
async def fleet(fake_github: FakeGitHub, tmp_path: Path, pg_url: str) -> AsyncIterator[Fleet]:
    harness = await Fleet.create(fake_github, tmp_path, pg_url)
    try:
        yield harness
    finally:
        await harness.close()


async def test_each_environment_runs_only_on_agents_of_its_label(fleet: Fleet) -> None:
    serve = await fleet.start_serve()
    await fleet.start_agent("gpu-121", "cuda12.1")
    await fleet.start_agent("gpu-118", "cuda11.8,h100")
    assert await fleet.send(serve, "pull_request", fleet.pr_event("opened")) == 202
    jobs = await fleet.wait_settled(2)

    by_env = {j.environment: j for j in jobs}
    assert {env: j.state for env, j in by_env.items()} == {
        "cuda12": RunState.SUCCEEDED,
        "cuda11": RunState.SUCCEEDED,
    }
    ran_on = {e["job"]: e["agent"] for e in fleet.events() if e["event"] == "start"}
    assert ran_on == {by_env["cuda12"].id: "gpu-121", by_env["cuda11"].id: "gpu-118"}
    assert len(fleet.bot_comments()) == 1
    report = fleet.store.report(by_env["cuda11"].id)
    assert report is not None and report.runner == "stub@gpu-118"


async def test_an_agent_runs_as_many_jobs_at_once_as_its_workers_setting(fleet: Fleet) -> None:
    serve = await fleet.start_serve()
    # Each run lasts until both have started, 40 s at most: one worker would end the first run
    # (after 40 s) before starting the second, whatever the machine's speed.
    await fleet.start_agent(
        "gpu-both", "cuda12.1,cuda11.8", step_s=40, mode="together:2", PARITYBOT_WORKERS="2"
    )
    assert await fleet.send(serve, "pull_request", fleet.pr_event("opened")) == 202
    await fleet.wait_settled(2, timeout=120)

    order = [e["event"] for e in fleet.events() if e["event"] in ("start", "end")]
    assert order[:2] == ["start", "start"]  # the second began before the first ended


async def test_the_clone_token_an_agent_gets_is_scoped_to_the_repository_and_read_only(fleet: Fleet) -> None:
    serve = await fleet.start_serve()
    await fleet.start_agent("gpu-121", "cuda12.1")
    await fleet.start_agent("gpu-118", "cuda11.8")
    assert await fleet.send(serve, "pull_request", fleet.pr_event("opened")) == 202
    await fleet.wait_settled(2)

    digests = {e["token_sha256"] for e in fleet.events() if e["event"] == "start"}
    issued = {hashlib.sha256(t.encode()).hexdigest(): grant for t, grant in fleet.fake.tokens.items()}
    assert len(digests) == 2 and digests <= set(issued)  # one token per run, each from the service
    for digest in digests:
        grant = issued[digest]
        assert grant.repositories == frozenset({"calc"}) and grant.permissions == {"contents": "read"}
    token = next(t for t in fleet.fake.tokens if hashlib.sha256(t.encode()).hexdigest() in digests)
    headers = {"Authorization": f"token {token}", "Accept": "application/vnd.github+json"}
    async with aiohttp.ClientSession(headers=headers) as s:
        async with s.get(f"{fleet.fake.url}/repos/{REPO}/contents/.github/paritybot.yml?ref=main") as r:
            assert r.status == 200
        async with s.post(f"{fleet.fake.url}/repos/{REPO}/issues/7/comments", json={"body": "x"}) as r:
            assert r.status == 403
        async with s.get(f"{fleet.fake.url}/repos/octo-org/other/contents/README.md") as r:
            assert r.status == 404


@pytest.fixture
async def one_env(fake_github: FakeGitHub, tmp_path: Path, pg_url: str) -> AsyncIterator[Fleet]:
    harness = await Fleet.create(fake_github, tmp_path, pg_url, ONE_ENVIRONMENT)
    try:
        yield harness
    finally:
        await harness.close()


def starts(fleet: Fleet, job_id: str) -> list[dict[str, object]]:
    return [e for e in fleet.events() if e["event"] == "start" and e["job"] == job_id]


async def test_an_agent_killed_mid_run_has_its_run_rerun_on_another_agent_once(one_env: Fleet) -> None:
    fleet = one_env
    serve = await fleet.start_serve()
    doomed = await fleet.start_agent("gpu-a", "cuda12.1", step_s=600)
    assert await fleet.send(serve, "pull_request", fleet.pr_event("opened")) == 202
    await fleet.wait_for(
        "the run to start on gpu-a", lambda: any(e["agent"] == "gpu-a" for e in fleet.events())
    )
    await fleet.start_agent("gpu-b", "cuda12.1", step_s=0.2)
    status = fleet.status()
    (running,) = status["running"]
    agents = {a["name"]: a for a in status["agents"]}
    assert (running["repo"], running["pr_number"], running["environment"]) == (REPO, 7, "cuda12")
    assert agents["gpu-a"]["current_job"] == running["id"] and agents["gpu-b"]["current_job"] is None
    assert agents["gpu-a"]["labels"] == ["cuda12.1"] and agents["gpu-a"]["state"] == "alive"
    doomed.kill()
    killed_at = time.time()

    (job,) = await fleet.wait_settled(1)
    assert job.state == RunState.SUCCEEDED and job.attempts == 2
    first, second = starts(fleet, job.id)
    assert (first["agent"], second["agent"]) == ("gpu-a", "gpu-b")
    # Nothing ran twice at once: the rerun started only after the first agent was dead.
    assert float(second["t"]) > killed_at  # type: ignore[arg-type]
    report = fleet.store.report(job.id)
    assert report is not None and report.runner == "stub@gpu-b"
    assert len(fleet.bot_comments()) == 1
    assert fleet.all_check_runs_completed([job])
    assert "run taken back from a silent agent" in "".join(p.output() for p in fleet.procs)


async def test_what_an_agent_finished_while_github_failed_is_published_by_the_reconciler(
    one_env: Fleet,
) -> None:
    fleet = one_env
    serve = await fleet.start_serve(
        PARITYBOT_RECONCILE_INTERVAL_S="0.5",
        PARITYBOT_GITHUB_RETRY_ATTEMPTS="2",
        PARITYBOT_GITHUB_RETRY_WAIT_S="0.05",
    )
    await fleet.start_agent("gpu-a", "cuda12.1", step_s=1.0)
    assert await fleet.send(serve, "pull_request", fleet.pr_event("opened")) == 202
    await fleet.wait_for(
        "the run to start on gpu-a", lambda: any(e["agent"] == "gpu-a" for e in fleet.events())
    )
    # GitHub refuses every check run update for a while: more than one publish's retries.
    fleet.fake.fail("PATCH", "/repos/{owner}/{repo}/check-runs/{check_run_id}", 502, times=8)

    (job,) = await fleet.wait_settled(1)
    assert job.state == RunState.SUCCEEDED and not job.report_due
    assert fleet.all_check_runs_completed([job])
    assert "publishing a run failed; the next pass sends it again" in serve.output()
    assert len(fleet.bot_comments()) == 1


async def test_a_frozen_agent_that_comes_back_is_fenced_and_its_late_result_discarded(one_env: Fleet) -> None:
    fleet = one_env
    serve = await fleet.start_serve()
    frozen = await fleet.start_agent("gpu-a", "cuda12.1", step_s=3)
    assert await fleet.send(serve, "pull_request", fleet.pr_event("opened")) == 202
    await fleet.wait_for(
        "the run to start on gpu-a", lambda: any(e["agent"] == "gpu-a" for e in fleet.events())
    )
    frozen.kill(signal.SIGSTOP)
    await fleet.start_agent("gpu-b", "cuda12.1", step_s=0.2)
    (job,) = await fleet.wait_settled(1)  # rerun and finished on gpu-b while gpu-a is frozen
    assert job.attempts == 2

    frozen.kill(signal.SIGCONT)  # its step is over by now: it comes back with a result
    await fleet.wait_for("gpu-a to stop", lambda: frozen.popen.poll() is not None)
    assert frozen.popen.returncode == FENCED_EXIT
    assert "agent fenced" in frozen.output()
    after = fleet.store.get_job(job.id)
    report = fleet.store.report(job.id)
    assert after is not None and after.state == RunState.SUCCEEDED and after.attempts == 2
    assert report is not None and report.runner == "stub@gpu-b"  # gpu-a's result never landed
    assert len(fleet.bot_comments()) == 1


@pytest.mark.docker
async def test_a_push_stops_the_old_container_on_its_agent_and_runs_the_new_head(
    one_env: Fleet, docker_client: docker.DockerClient, test_image: str
) -> None:
    fleet = one_env
    serve = await fleet.start_serve()
    await fleet.start_agent("gpu-a", "cuda12.1", mode="docker", step_s=600, STUB_IMAGE=test_image)
    await fleet.start_agent("gpu-b", "cuda12.1", mode="docker", step_s=600, STUB_IMAGE=test_image)
    assert await fleet.send(serve, "pull_request", fleet.pr_event("opened")) == 202
    await fleet.wait_for("the first run to start", lambda: len(fleet.events()) == 1)
    (old,) = fleet.jobs()
    old_agent = fleet.events()[0]["agent"]

    def containers(job_id: str) -> list[object]:
        return docker_client.containers.list(all=True, filters={"label": f"{STUB_LABEL}={job_id}"})

    # The stub says "start" before its container is created: wait for the container itself.
    await fleet.wait_for("the first run's container", lambda: len(containers(old.id)) == 1)
    new_sha = fleet.new_head(2)
    fleet.step_for(new_sha, 0.5)
    assert await fleet.send(serve, "pull_request", fleet.pr_event("synchronize", head_sha=new_sha)) == 202
    jobs = await fleet.wait_settled(2)

    old_done, new_done = jobs
    assert (old_done.id, old_done.state, new_done.state) == (old.id, RunState.CANCELLED, RunState.SUCCEEDED)
    assert containers(old.id) == []  # stopped and removed on the agent that ran it
    events = fleet.events()
    stopped = next(e for e in events if e["event"] == "stopped" and e["job"] == old.id)
    started = next(e for e in events if e["event"] == "start" and e["job"] == new_done.id)
    assert stopped["agent"] == old_agent
    assert float(started["t"]) >= float(stopped["t"])  # type: ignore[arg-type]  # one running per PR and environment
    assert len(fleet.bot_comments()) == 1
    statuses = {r.states[-1]["conclusion"] for r in fleet.fake.check_runs(REPO, head_sha=old.head_sha)}
    assert statuses == {"cancelled"}


async def test_a_serve_replica_killed_mid_delivery_loses_no_acknowledged_delivery(one_env: Fleet) -> None:
    fleet = one_env
    doomed = await fleet.start_serve("serve-1")
    await fleet.start_serve("serve-2")
    numbers = range(100, 140)
    for n in numbers:
        fleet.seed_pull(fleet.sample.head_sha, number=n)

    async def deliver(n: int) -> tuple[str, int | None]:
        delivery_id = f"delivery-{n}"
        try:
            return delivery_id, await fleet.send(
                doomed, "pull_request", fleet.pr_event("opened", number=n), delivery_id
            )
        except aiohttp.ClientError:
            return delivery_id, None

    sending = [asyncio.create_task(deliver(n)) for n in numbers]

    def some_acknowledged() -> bool:
        # Killed once a 202 reached its sender, while the rest are still in flight: on a busy
        # machine rows can be committed well before any answer gets back.
        return any(t.done() and t.result()[1] == 202 for t in sending)

    await fleet.wait_for("some deliveries to be acknowledged", some_acknowledged)
    doomed.kill()
    answers = dict(await asyncio.gather(*sending))
    acknowledged = {d for d, status in answers.items() if status == 202}
    assert acknowledged and set(answers.values()) <= {202, None}

    def all_handled() -> bool:
        return fleet.store.delivery_status_count(DeliveryStatus.RECEIVED) == 0

    await fleet.wait_for("every recorded delivery to be handled by serve-2", all_handled)
    for delivery_id in acknowledged:
        assert fleet.store.delivery_status(delivery_id) == DeliveryStatus.DISPATCHED
    for n in numbers:
        recorded = fleet.store.delivery_status(f"delivery-{n}")
        assert recorded in (None, DeliveryStatus.DISPATCHED)
        # Handled means the run was queued with its check runs: exactly once per recorded delivery.
        assert len(fleet.store.jobs_for_pr(REPO, n)) == (0 if recorded is None else 1)


async def test_two_replicas_writing_one_prs_summary_at_once_keep_one_comment(one_env: Fleet) -> None:
    fleet = one_env
    replicas = [await fleet.start_serve("serve-1"), await fleet.start_serve("serve-2")]
    await fleet.start_agent("gpu-a", "cuda12.1", step_s=0.3)
    # One replica handles the event and writes the summary ("queued") while the other reports the
    # run its agent started at once ("running"). A slow GitHub keeps both between "is there a
    # summary?" and "post one": without a lock shared by the replicas, both would post one.
    fleet.fake.slow("GET", "/repos/{owner}/{repo}/issues/{issue_number}/comments", 0.5)
    numbers = range(20, 26)
    for n in numbers:
        fleet.seed_pull(fleet.sample.head_sha, number=n)
        assert await fleet.send(replicas[n % 2], "pull_request", fleet.pr_event("opened", number=n)) == 202
        await fleet.wait_settled(1, pr=n)
    assert {n: len(fleet.bot_comments(n)) for n in numbers} == {n: 1 for n in numbers}


async def test_a_prs_events_are_handled_in_order_whichever_replica_takes_them(one_env: Fleet) -> None:
    fleet = one_env
    first = await fleet.start_serve("serve-1")
    second = await fleet.start_serve("serve-2")
    # A slow GitHub: the first event's handling takes a while, and the second, sent to the other
    # replica, must wait for it rather than overtake it (it would be superseded by the older head).
    fleet.fake.slow("GET", "/repos/{owner}/{repo}/contents/{path}", 1.0)
    pushed = fleet.new_head(2)
    assert await fleet.send(first, "pull_request", fleet.pr_event("opened")) == 202
    assert await fleet.send(second, "pull_request", fleet.pr_event("synchronize", head_sha=pushed)) == 202

    def handled() -> bool:
        return fleet.store.delivery_status_count(DeliveryStatus.DISPATCHED) == 2

    await fleet.wait_for("both events handled", handled)
    jobs = fleet.jobs()
    assert [(j.head_sha, j.state) for j in jobs] == [
        (fleet.sample.head_sha, RunState.CANCELLED),
        (pushed, RunState.QUEUED),
    ]


async def test_an_agent_stopped_mid_run_gives_its_run_back_to_the_queue(one_env: Fleet) -> None:
    fleet = one_env
    serve = await fleet.start_serve()
    leaving = await fleet.start_agent("gpu-a", "cuda12.1", step_s=600)
    assert await fleet.send(serve, "pull_request", fleet.pr_event("opened")) == 202
    await fleet.wait_for(
        "the run to start on gpu-a", lambda: any(e["agent"] == "gpu-a" for e in fleet.events())
    )
    await fleet.start_agent("gpu-b", "cuda12.1", step_s=0.2)
    leaving.kill(signal.SIGTERM)  # a deploy, a reboot: the agent stops its container and says so

    (job,) = await fleet.wait_settled(1)
    assert leaving.popen.wait(30) == 0
    assert job.state == RunState.SUCCEEDED and job.attempts == 2
    assert [(e["agent"], e["event"]) for e in fleet.events()] == [
        ("gpu-a", "start"),
        ("gpu-a", "stopped"),
        ("gpu-b", "start"),
        ("gpu-b", "end"),
    ]
    assert "run queued again for another agent" in leaving.output()
    assert len(fleet.bot_comments()) == 1


@pytest.mark.docker
async def test_an_agent_restarting_on_the_engine_of_a_running_neighbour_leaves_its_run_alone(
    one_env: Fleet, docker_client: docker.DockerClient, test_image: str
) -> None:
    """Two agents share one engine (an agent per GPU); one restarts while the other runs a job: the
    restarted agent removes what it left itself, never its live neighbour's containers or volume."""
    fleet = one_env
    serve = await fleet.start_serve()
    await fleet.start_agent("gpu-a", "cuda12.1", mode="runner", step_s=8, STUB_IMAGE=test_image)
    assert await fleet.send(serve, "pull_request", fleet.pr_event("opened")) == 202
    (job,) = await wait_jobs(fleet, 1)

    def containers() -> list[object]:
        return docker_client.containers.list(filters={"label": f"paritybot.run-id={job.id}"})

    await fleet.wait_for("the run's container", lambda: len(containers()) == 1)
    neighbour = await fleet.start_agent("gpu-b", "cuda12.1", mode="runner", STUB_IMAGE=test_image)
    neighbour.kill()
    neighbour.popen.wait()
    restarted = await fleet.start_agent("gpu-b", "cuda12.1", mode="runner", STUB_IMAGE=test_image)
    await fleet.wait_for(
        "the restarted agent's start-up clean-up",
        lambda: "container runner" not in restarted.output() and "agent ready" in restarted.output(),
    )
    assert containers(), "the restarted agent removed its neighbour's running container"

    (done,) = await fleet.wait_settled(1)
    assert done.state == RunState.SUCCEEDED, done.error
    assert done.attempts == 1
    (end,) = [e for e in fleet.events() if e["event"] == "end"]
    assert end["agent"] == "gpu-a" and end["error"] is None
    assert docker_client.volumes.list(filters={"label": f"paritybot.run-id={job.id}"}) == []


async def wait_jobs(fleet: Fleet, count: int) -> list[Job]:
    await fleet.wait_for(f"{count} job(s)", lambda: len(fleet.jobs()) >= count)
    return fleet.jobs()


async def test_a_check_an_agent_finished_early_is_completed_on_github_while_the_run_goes_on(
    one_env: Fleet,
) -> None:
    """Early results as on one machine: the agent writes the results so far to the store, and the
    service completes the finished check's run at once, not when the whole run ends."""
    fleet = one_env
    serve = await fleet.start_serve()
    await fleet.start_agent("gpu-a", "cuda12.1", mode="early", step_s=600)
    assert await fleet.send(serve, "pull_request", fleet.pr_event("opened")) == 202
    (job,) = await wait_jobs(fleet, 1)

    docstrings, tests = (check_run_name(k, "cuda12") for k in (CheckKind.DOCSTRINGS, CheckKind.TESTS))

    def status_of(name: str) -> str | None:
        runs = [r for r in fleet.fake.check_runs(REPO, head_sha=job.head_sha) if r.name == name]
        return runs[-1].states[-1]["status"] if runs else None

    await fleet.wait_for("the docstrings check run completed", lambda: status_of(docstrings) == "completed")
    running = fleet.store.get_job(job.id)
    assert running is not None and running.state == RunState.RUNNING
    assert status_of(tests) == "in_progress"
    await fleet.wait_for(
        "the summary to show it",
        lambda: any("docstrings done" in c.body for c in fleet.bot_comments()),
    )


async def test_waiting_prs_summaries_move_up_when_an_agent_starts_the_run_before_them(one_env: Fleet) -> None:
    fleet = one_env
    serve = await fleet.start_serve()
    for number in (8, 9):
        fleet.seed_pull(fleet.sample.head_sha, number=number)
    fleet.step_for(fleet.sample.head_sha, 3)
    await fleet.start_agent("gpu-a", "cuda12.1")
    assert await fleet.send(serve, "pull_request", fleet.pr_event("opened")) == 202  # PR 7 takes the agent
    await fleet.wait_for("PR 7's run to start", lambda: len(fleet.events()) == 1)
    assert await fleet.send(serve, "pull_request", fleet.pr_event("opened", number=8)) == 202
    assert await fleet.send(serve, "pull_request", fleet.pr_event("opened", number=9)) == 202
    await fleet.wait_for("PR 9 to be queued", lambda: len(fleet.bot_comments(9)) == 1)
    [waiting] = fleet.bot_comments(9)
    assert "#\u200b2 in line" in waiting.body
    # PR 7's run ends, PR 8's starts on the agent: PR 9 is next, and its summary says so.
    await fleet.wait_settled(1, pr=7)
    await fleet.wait_for(
        "PR 9's summary to move up",
        lambda: any("#\u200b1 in line (next up)" in body for body in waiting.bodies),
        timeout=30,
    )
