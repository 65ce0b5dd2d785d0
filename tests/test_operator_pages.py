"""The operators' pages: `/status` and `/metrics`, from the store in both modes (SQLite on one
machine, PostgreSQL with agents), closed to anyone without the operators' token."""

from __future__ import annotations

import base64
import json
import re
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from botharness import BotHarness
from fakegithub import FakeGitHub
from postgres_support import pg_url
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from bot.core.models import RunReport, RunRequest, RunState
from bot.core.verdict import verdict
from bot.service.metrics import METRIC_NAMES, Metrics
from bot.service.operators import OperatorAccess, OperatorPages
from bot.service.pages import add_static_routes
from bot.service.store.postgres_fleet import FleetStore
from bot.service.store.protocol import Store
from bot.service.store.records import Job
from bot.service.store.sqlite import SQLiteStore

__all__ = ["pg_url"]  # the fixture, imported for pytest
REPO = "octo-org/calc"
ROOT = Path(__file__).resolve().parent.parent
TOKEN = "operators-token-for-tests"
HOSTILE = "<b>cuda</b>"  # an environment's name comes from the repository's config


def request(sha: str, pr: int) -> RunRequest:
    return RunRequest(
        installation_id=1, repo=REPO, clone_url="https://example.invalid/c.git", pr_number=pr, head_sha=sha
    )


def report(job: Job, state: RunState, error: str | None = None) -> RunReport:
    return RunReport(
        run_id=job.id, repo=REPO, pr_number=job.pr_number, head_sha=job.head_sha,
        environment=job.environment, state=state, error=error,
    )  # fmt: skip


def enqueue(store: Store, n: int, environment: str = "cuda12") -> Job:
    job = store.enqueue(request(f"{n:040x}", n), environment, f"key-{n}", "cuda12.1")
    assert job is not None
    return job


def fill_sqlite(store: SQLiteStore) -> dict[str, Job]:
    """PR 1 passed, PR 2 broke, PR 3 runs, PR 4 waits: as the in-process workers leave them."""
    store.register_instance("serve-1", "serve", "gpu-box", 4242)
    jobs = {}
    for n, name in ((1, "passed"), (2, "broken"), (3, "running")):
        enqueue(store, n, HOSTILE if name == "running" else "cuda12")
        claimed = store.claim()
        assert claimed is not None
        jobs[name] = claimed
    store.finish(jobs["passed"].id, RunState.SUCCEEDED, report(jobs["passed"], RunState.SUCCEEDED), None)
    broken = report(jobs["broken"], RunState.FAILED, "image ghcr.io/acme/ci:cuda12 not found")
    store.finish(jobs["broken"].id, RunState.FAILED, broken, broken.error)
    jobs["queued"] = enqueue(store, 4)
    return jobs


def fill_postgres(store: FleetStore) -> dict[str, Job]:
    """The same, run by an agent with two GPUs."""
    worker = int(store._query("SELECT worker_id FROM procrastinate_register_worker_v1()")[0]["worker_id"])
    store.register_agent(worker, "gpu-a", "agent-a", ["cuda12.1"], ["NVIDIA H100", "NVIDIA H100"], None)
    jobs = {}
    for n, name in ((1, "passed"), (2, "broken"), (3, "running")):
        job = enqueue(store, n, HOSTILE if name == "running" else "cuda12")
        rows = store._query(
            "SELECT id FROM procrastinate_fetch_job_v2(%s::varchar[], %s)", (["cuda12.1"], worker)
        )
        started = store.start_attempt(job.id, int(rows[0]["id"]), worker, "gpu-a")
        assert started is not None
        jobs[name] = started
    for name, state, error in (
        ("passed", RunState.SUCCEEDED, None),
        ("broken", RunState.FAILED, "image not found"),
    ):
        job = jobs[name]
        assert job.queue_job_id is not None
        assert store.finish_attempt(job.id, job.queue_job_id, worker, report(job, state, error))
    jobs["queued"] = enqueue(store, 4)
    return jobs


@pytest.fixture(params=["sqlite", "postgres"])
def filled(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Store, dict[str, Job]]]:
    if request.param == "sqlite":
        store: Store = SQLiteStore(tmp_path / "bot.db")
        jobs = fill_sqlite(store)  # type: ignore[arg-type]
    else:
        store = FleetStore(request.getfixturevalue("pg_url"))
        jobs = fill_postgres(store)  # type: ignore[arg-type]
    try:
        yield store, jobs
    finally:
        store.close()


async def serve_pages(store: Store, access: OperatorAccess) -> AsyncIterator[TestServer]:
    app = web.Application()
    OperatorPages(store, Metrics(store), access, github_url="https://github.com", mode="test").add_routes(
        app.router
    )
    add_static_routes(app.router)
    server = TestServer(app)
    await server.start_server()
    try:
        yield server
    finally:
        await server.close()


def test_the_overview_has_the_queues_the_hosts_what_runs_and_what_ran(
    filled: tuple[Store, dict[str, Job]],
) -> None:
    store, jobs = filled
    view = store.overview(recent=10)
    assert [(q.queue, q.depth) for q in view.queues] == [("cuda12.1", 1)]
    assert [r.id for r in view.running] == [jobs["running"].id]
    assert [(r.pr_number, r.state) for r in view.recent] == [(2, "failed"), (1, "succeeded")]
    for row, name in zip(view.recent, ("broken", "passed"), strict=True):
        assert row.outcome == verdict(store.report(jobs[name].id)).value  # type: ignore[arg-type]
    assert view.jobs_by_state == {"queued": 1, "running": 1, "succeeded": 1, "failed": 1}
    (host,) = view.agents
    if isinstance(store, FleetStore):
        assert (host.host, host.gpus, host.current_job) == (
            "gpu-a",
            ("NVIDIA H100", "NVIDIA H100"),
            jobs["running"].id,
        )
        assert view.running[0].host == "gpu-a"
    else:
        assert (host.host, host.state) == ("gpu-box", "alive")


async def test_the_status_page_shows_it_to_operators_only(filled: tuple[Store, dict[str, Job]]) -> None:
    store, jobs = filled
    async for server in serve_pages(store, OperatorAccess(TOKEN)):
        async with aiohttp.ClientSession() as s:
            async with s.get(server.make_url("/status")) as r:
                assert r.status == 401  # a browser asks for the token
                assert r.headers["WWW-Authenticate"] == 'Basic realm="paritybot operators"'
            async with s.get(server.make_url("/status"), headers={"Authorization": "Bearer wrong"}) as r:
                assert r.status == 404
            basic = base64.b64encode(f"ops:{TOKEN}".encode()).decode()
            async with s.get(server.make_url("/status"), headers={"Authorization": f"Basic {basic}"}) as r:
                assert r.status == 200
                html = await r.text()
                csp = r.headers["Content-Security-Policy"]
    assert "script-src" not in csp and "default-src 'none'" in csp and "style-src 'self'" in csp
    assert f'href="https://github.com/{REPO}/pull/3"' in html  # the running job's PR
    assert jobs["running"].id in html
    assert '<td class="outcome outcome-error">error</td>' in html  # PR 2's run broke
    assert "<code>&lt;b&gt;cuda&lt;/b&gt;</code>" in html
    assert "<b>" not in html  # an environment's name is text, never markup
    if isinstance(store, FleetStore):
        assert "NVIDIA H100, NVIDIA H100" in html


async def test_metrics_read_the_store_at_each_scrape(filled: tuple[Store, dict[str, Job]]) -> None:
    store, _ = filled
    async for server in serve_pages(store, OperatorAccess(TOKEN)):
        headers = {"Authorization": f"Bearer {TOKEN}"}
        async with aiohttp.ClientSession(headers=headers) as s, s.get(server.make_url("/metrics")) as r:
            assert r.status == 200
            text = await r.text()
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    assert samples[("paritybot_jobs", (("state", "running"),))] == 1
    assert samples[("paritybot_jobs", (("state", "failed"),))] == 1
    assert samples[("paritybot_queue_depth", (("queue", "cuda12.1"),))] == 1
    assert samples[("paritybot_agents", (("state", "alive"),))] == 1
    # Finished runs are due to be shown on GitHub: the reconciler's lag counts from the oldest end.
    assert samples[("paritybot_reconciler_lag_seconds", ())] >= 0


@pytest.mark.parametrize(
    ("access", "status"), [(OperatorAccess(None), 404), (OperatorAccess(None, public=True), 200)]
)
async def test_without_a_token_the_pages_answer_nobody_unless_opened(
    access: OperatorAccess, status: int, tmp_path: Path
) -> None:
    store = SQLiteStore(tmp_path / "bot.db")
    try:
        async for server in serve_pages(store, access):
            async with aiohttp.ClientSession() as s:
                for path in ("/status", "/metrics"):
                    async with s.get(server.make_url(path), headers={"Authorization": "Bearer "}) as r:
                        assert r.status == status, path
    finally:
        store.close()


async def test_a_pull_requests_run_shows_in_the_metrics_of_the_service(
    fake_github: FakeGitHub, tmp_path: Path
) -> None:
    token_file = tmp_path / "operator-token"
    token_file.write_text(TOKEN + "\n")
    bot = await BotHarness.create(fake_github, tmp_path, settings={"operator_token_file": token_file})
    try:
        assert await bot.send("pull_request", bot.pr_event(), delivery_id="d-1") == 202
        assert await bot.send("pull_request", bot.pr_event(), delivery_id="d-1") == 202  # redelivered
        await bot.wait_runs_done()
        await bot.wait_for("the run published", lambda: not bot.store.jobs_due_for_report())
        (job,) = bot.store.jobs_for_pr(REPO, 7)
        assert bot.server is not None and bot.session is not None
        headers = {"Authorization": f"Bearer {TOKEN}"}
        async with bot.session.get(bot.server.make_url("/metrics"), headers=headers) as r:
            text = await r.text()
        async with bot.session.get(bot.server.make_url("/metrics")) as r:
            assert r.status == 401
    finally:
        await bot.stop()
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    env = (("environment", job.environment),)
    assert samples[("paritybot_deliveries_total", (("outcome", "accepted"),))] == 1
    assert samples[("paritybot_deliveries_total", (("outcome", "redelivered"),))] == 1
    assert samples[("paritybot_run_duration_seconds_count", env)] == 1
    assert samples[("paritybot_queue_wait_seconds_count", env)] == 1
    assert samples[("paritybot_reconciler_lag_seconds", ())] == 0
    sent = sum(v for (name, _), v in samples.items() if name == "paritybot_github_requests_total")
    assert 0 < sent <= len(fake_github.calls)
    remaining = samples[("paritybot_github_rate_limit_remaining", (("resource", "core"),))]
    assert 5000 - len(fake_github.calls) <= remaining < 5000  # what the fake's last answers said


def exported_names(tmp_path: Path) -> set[str]:
    """Every sample name the service's /metrics carries once each metric has a value."""
    store = SQLiteStore(tmp_path / "names.db")
    try:
        fill_sqlite(store)
        store.record_delivery("d1", "pull_request", b"{}")
        metrics = Metrics(store)
        metrics.deliveries.labels("accepted").inc()
        metrics.github_response("GET", 200, {"x-ratelimit-remaining": "4999", "x-ratelimit-limit": "5000"})
        job = store.jobs_in_state(RunState.SUCCEEDED)[0]
        metrics.run_published(job)
        text = generate_latest(metrics.registry).decode()
    finally:
        store.close()
    return {s.name for family in text_string_to_metric_families(text) for s in family.samples}


def test_the_grafana_dashboard_queries_only_metrics_the_service_exports_and_shows_each(
    tmp_path: Path,
) -> None:
    dashboard = json.loads((ROOT / "deploy" / "grafana-dashboard.json").read_text())
    exprs = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    used = {name for expr in exprs for name in re.findall(r"\bparitybot_[a-z_]+", expr)}
    exported = exported_names(tmp_path)
    assert used - exported == set(), "the dashboard queries metrics /metrics does not have"
    families = {re.sub(r"_(bucket|sum|count|total|created)$", "", n) for n in exported}
    shown = {re.sub(r"_(bucket|sum|count|total)$", "", n) for n in used}
    assert families - shown == set(), "a metric the service exports is on no panel"
    assert {m.removesuffix("_total") for m in METRIC_NAMES} == families
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))
