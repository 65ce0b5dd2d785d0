"""Several hosts against real PostgreSQL, real `serve` and `agent` processes and the fake GitHub."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from fakegithub import FakeGitHub
from fleet_harness import REPO, Fleet
from postgres_support import pg_url  # noqa: F401 - a fixture

from bot.core.models import RunState

pytestmark = pytest.mark.postgres


@pytest.fixture
async def fleet(fake_github: FakeGitHub, tmp_path: Path, pg_url: str) -> AsyncIterator[Fleet]:  # noqa: F811
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
    assert {env: j.state for env, j in by_env.items()} == {"cuda12": RunState.SUCCEEDED, "cuda11": RunState.SUCCEEDED}
    ran_on = {e["job"]: e["agent"] for e in fleet.events() if e["event"] == "start"}
    assert ran_on == {by_env["cuda12"].id: "gpu-121", by_env["cuda11"].id: "gpu-118"}
    assert len(fleet.bot_comments()) == 1
    report = fleet.store.report(by_env["cuda11"].id)
    assert report is not None and report.runner == "stub@gpu-118"
