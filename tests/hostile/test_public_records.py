"""What a public run's page and records say about the machines behind the service: nothing.

The runner writes its reasons for the operator — ``environment default runs its image (engine at
unix:///…/docker.sock)`` — and a run's error and output may name the engine's address, the
service's paths, its host's name, a private address or a secret. Every public response of a run
(its page, its JSON, the pull request's latest.json, the live log, a step's lines) is searched for
each of them.

Before: a public run's JSON and latest.json carried ``runner_reason: "… (engine at
unix:///…/docker.sock)"``.
"""

from __future__ import annotations

import json
from pathlib import Path

import aiohttp
import pytest
from botharness import SECRET
from fakegithub import FakeGitHub
from run_page_support import REPO, add_step, failing_report, running_job
from service_pages import service_pages

from bot.core.models import RunState
from bot.core.run_log import StepEnd
from bot.service.run_page import redaction

ENGINE = "unix:///run/user/1000/docker.sock"
REMOTE_ENGINE = "tcp://gpu3.corp.internal:2376"
HOST = "buildhost-7"


def leaks(tmp: Path, client_secret: str) -> list[str]:
    return [
        "unix://",
        "docker.sock",
        "tcp://",
        "gpu3.corp.internal",
        HOST,
        str(tmp / "workspaces"),
        str(tmp / "cache"),
        str(tmp / "data"),
        "10.0.3.7",
        SECRET,
        client_secret,
        "ghs_",
    ]


def internal_run(pages_store: object, tmp: Path, client_secret: str) -> str:
    from bot.service.store.sqlite import SQLiteStore

    assert isinstance(pages_store, SQLiteStore)
    job_id = running_job(pages_store, private=False)
    output = (
        f"cloning into {tmp / 'workspaces' / job_id / 'src'}\n"
        f"cache at {tmp / 'cache' / 'hooks'}, data in {tmp / 'data'}\n"
        f"running on {HOST} ({HOST}.example.org), database at 10.0.3.7:5432\n"
        f"git remote: https://x-access-token:ghs_{'a' * 36}@github.com/{REPO}.git\n"
        f"the webhook secret is {SECRET}, the App's client secret {client_secret}\n"
        f"DOCKER_HOST={REMOTE_ENGINE} docker ps\n"
    )
    reason = f"killed: the engine at {ENGINE} stopped answering"
    add_step(pages_store, job_id, 0, "tests", output, StepEnd(state="failed", exit_code=137, reason=reason))
    report = failing_report(job_id)
    report.runner = "docker"
    report.runner_reason = f"environment default runs its image (engine at {ENGINE})"
    report.error = f"no container engine reachable at {REMOTE_ENGINE} (connection refused)"
    pages_store.finish(job_id, RunState.FAILED, report, f"engine at {ENGINE} gone")
    return job_id


async def test_no_public_response_of_a_run_names_the_service_s_machines(
    fake_github: FakeGitHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DOCKER_HOST", REMOTE_ENGINE)
    monkeypatch.setattr(redaction.socket, "gethostname", lambda: HOST)
    fake_github.add_repo(REPO, installation_id=1)  # public
    async with service_pages(fake_github, tmp_path) as pages:
        run = internal_run(pages.store, tmp_path, fake_github.web.client_secret)
        routes = [
            f"/runs/{run}",
            f"/runs/{run}.json",
            f"/runs/{run}/events",
            f"/runs/{run}/steps/0/lines?from=1&to=100",
            f"/repos/{REPO}/pulls/7/latest.json",
        ]
        bodies = {}
        async with aiohttp.ClientSession() as anyone:
            for route in routes:
                async with anyone.get(pages.url + route, allow_redirects=False) as r:
                    assert r.status == 200, route
                    bodies[route] = await r.text()
    for route, body in bodies.items():
        found = [leak for leak in leaks(tmp_path, fake_github.web.client_secret) if leak in body]
        assert found == [], f"{route} shows {found}"
    # What was hidden is said to be hidden, and the rest of the record is intact.
    record = json.loads(bodies[f"/runs/{run}.json"])
    assert (
        record["environment"]["runner_reason"] == "environment default runs its image (engine at [internal])"
    )
    assert record["error"] == "engine at [internal] gone"
    assert record["report"]["error"] == "no container engine reachable at [internal] (connection refused)"
    assert record["steps"][0]["reason"] == "killed: the engine at [internal] stopped answering"
    assert record["failing_tests"][0]["nodeid"] == "tests/test_add.py::test_add"
    assert (
        "running on [internal] ([internal].example.org)" in bodies[f"/runs/{run}/steps/0/lines?from=1&to=100"]
    )
