"""The real bot, in-process, wired to the fake GitHub and a real local git remote.

`BotHarness` starts what `paritybot serve` starts (store, dispatcher, workers, web app on a
real loopback port), with the host runner using this interpreter's tools (or, with
``service_runner=True``, the runner choice `serve` itself makes from its settings). Tests send
GitHub's real payloads over HTTP and read the results from the fake GitHub.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import payloads
import pytest
from aiohttp.test_utils import TestServer
from fakegithub import FakeGitHub
from sample_repo import SampleRepo, make_sample_repo, tool_env

from bot.core.models import RunState
from bot.service.app import Service, build_service, start_service
from bot.service.settings import Settings
from runner.backends.base import Runner, RunnerFactory, RunnerInfo, RunnerRequest, Step, StepResult
from runner.backends.host import HostRunner

SECRET = "webhook-secret-for-tests"
REPO = "octo-org/calc"


def host_runner_factory() -> RunnerFactory:
    async def make(request: RunnerRequest) -> Runner:
        return HostRunner(reason="tests use the host runner", env={**tool_env(), **request.environment.env})

    return make


class Gate:
    """Holds runs at their first step until the test opens it (all runs, or only the first ``times``)."""

    def __init__(self, times: int | None = None):
        self._open, self._started = asyncio.Event(), asyncio.Event()
        self._left = times

    def factory(self) -> RunnerFactory:
        host = host_runner_factory()

        async def make(request: RunnerRequest) -> Runner:
            runner = await host(request)
            if self._left is not None:
                if self._left == 0:
                    return runner
                self._left -= 1
            return _GatedRunner(runner, self)

        return make

    def open(self) -> None:
        self._open.set()

    async def wait_started(self, timeout: float = 60) -> None:
        await asyncio.wait_for(self._started.wait(), timeout)


class _GatedRunner:
    """The real host runner, held at its first step until the gate opens."""

    def __init__(self, inner: Runner, gate: Gate):
        self._inner, self._gate = inner, gate

    @property
    def info(self) -> RunnerInfo:
        return self._inner.info

    async def prepare(self) -> None:
        await self._inner.prepare()

    async def run(self, step: Step, workspace: Path) -> StepResult:
        self._gate._started.set()
        await self._gate._open.wait()
        return await self._inner.run(step, workspace)

    async def cancel(self) -> None:
        await self._inner.cancel()

    async def close(self) -> None:
        await self._inner.close()


@dataclass
class BotHarness:
    fake: FakeGitHub
    tmp: Path
    sample: SampleRepo
    clone_url: str
    runner: RunnerFactory | None = field(default_factory=host_runner_factory)
    """None: the runner choice of `serve` itself, from the settings."""
    overrides: dict[str, Any] = field(default_factory=dict)
    """Settings that differ from :meth:`settings`' defaults."""
    service: Service | None = None
    server: TestServer | None = None
    session: aiohttp.ClientSession | None = None

    @classmethod
    async def create(
        cls,
        fake: FakeGitHub,
        tmp: Path,
        runner: RunnerFactory | None = None,
        *,
        service_runner: bool = False,
        settings: dict[str, Any] | None = None,
    ) -> BotHarness:
        sample = make_sample_repo(tmp)
        bare = tmp / "remote.git"
        subprocess.run(["git", "clone", "-q", "--bare", str(sample.path), str(bare)], check=True)
        harness = cls(fake=fake, tmp=tmp, sample=sample, clone_url=bare.as_uri(), overrides=settings or {})
        if runner is not None:
            harness.runner = runner
        if service_runner:
            harness.runner = None
        fake.add_repo(REPO, installation_id=1, clone_url=harness.clone_url)
        harness.seed_pull(sample.head_sha)
        await harness.start()
        return harness

    def settings(self) -> Settings:
        values: dict[str, Any] = dict(
            app_id=self.fake.app_id,
            private_key=self.fake.private_key_pem,
            webhook_secret=SECRET,
            github_api_url=self.fake.url,
            database_url=f"sqlite:///{self.tmp / 'bot.db'}",
            workspace_root=self.tmp / "workspaces",
            cache_root=self.tmp / "cache",
            runner="host",
            allow_host_runner="trusted-code-only",
            workers=1,
        )
        return Settings(**(values | self.overrides))

    async def start(self) -> None:
        self.service = await build_service(self.settings(), runner=self.runner)
        # Tests need not wait a second per poll, nor seconds before a retry.
        self.service.workers._poll = self.service.workers._cancel_poll = 0.1
        self.service.dispatcher._poll = 0.1
        self.service.dispatcher.retry_base_delay_s = 0.2
        self.service.supervisor.first_delay_s, self.service.supervisor.max_delay_s = 0.1, 0.5
        await start_service(self.service)
        self.server = TestServer(self.service.web_app)
        await self.server.start_server()
        self.session = aiohttp.ClientSession()

    async def stop(self) -> None:
        if self.session is not None:
            await self.session.close()
        if self.server is not None:
            await self.server.close()
        if self.service is not None:
            await self.service.stop()
        self.service = self.server = self.session = None

    @property
    def url(self) -> str:
        assert self.server is not None
        return str(self.server.make_url("/webhook"))

    async def health(self) -> tuple[int, dict[str, Any]]:
        """``GET /healthz``: its status and JSON answer."""
        assert self.server is not None and self.session is not None
        async with self.session.get(self.server.make_url("/healthz")) as resp:
            return resp.status, await resp.json()

    async def post(self, body: bytes, headers: dict[str, str]) -> aiohttp.ClientResponse:
        assert self.session is not None
        async with self.session.post(self.url, data=body, headers=headers) as resp:
            await resp.read()
            return resp

    async def send(self, event: str, payload: dict[str, Any], *, delivery_id: str | None = None) -> int:
        body, headers = payloads.delivery(event, payload, SECRET, delivery_id=delivery_id)
        return (await self.post(body, headers)).status

    def seed_pull(self, head_sha: str, number: int = 7, **kwargs: Any) -> None:
        """The PR as GitHub's API shows it (the webhook payload only tells the bot about it)."""
        kwargs.setdefault("author_association", "OWNER")
        kwargs.setdefault("author", "octocat")
        self.fake.add_pull(
            REPO, number, head_sha=head_sha, base_ref="main", base_sha=self.sample.base_sha, **kwargs
        )

    def pr_event(self, action: str = "opened", **overrides: Any) -> dict[str, Any]:
        return payloads.sample_pr_event(
            action, self.sample, repo=REPO, clone_url=self.clone_url, api_url=self.fake.url, **overrides
        )

    @property
    def store(self) -> Any:
        assert self.service is not None
        return self.service.store

    async def wait_for(
        self, what: str, predicate: Callable[[], bool | Awaitable[bool]], timeout: float = 120
    ) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            result = predicate()
            if isinstance(result, Awaitable):
                result = await result
            if result:
                return
            await asyncio.sleep(0.05)
        raise AssertionError(f"timed out waiting for {what}")

    async def wait_runs_done(self, pr_number: int = 7, count: int = 1) -> None:
        """Until `count` runs of the PR ended and their check runs were completed on the fake."""

        def done() -> bool:
            jobs = self.store.jobs_for_pr(REPO, pr_number)
            ended = [j for j in jobs if j.state not in (RunState.QUEUED, RunState.RUNNING)]
            if len(ended) < count or self.service is None or self.service.workers.busy:
                return False
            return all(
                self.fake.check_run(cid).states[-1]["status"] == "completed"
                for j in ended
                for cid in j.check_runs.values()
            )

        await self.wait_for(f"{count} finished run(s) of PR #{pr_number}", done)

    def bot_comments(self, pr_number: int = 7) -> list[Any]:
        return [c for c in self.fake.comments(REPO, pr_number) if c.user == self.fake.bot_login]

    def commit_on_feature(self, path: str, text: str, message: str) -> str:
        """A new commit pushed to the remote's feature branch (a PR `synchronize`)."""
        repo = self.sample.path
        (repo / path).write_text(text)
        env = {
            **os.environ,
            "GIT_AUTHOR_NAME": "a",
            "GIT_AUTHOR_EMAIL": "a@b",
            "GIT_COMMITTER_NAME": "a",
            "GIT_COMMITTER_EMAIL": "a@b",
        }

        def run(*args: str) -> str:
            done = subprocess.run(
                ["git", *args], cwd=repo, check=True, capture_output=True, text=True, env=env
            )
            return done.stdout.strip()

        run("add", path)
        run("commit", "-qm", message)
        run("push", "-q", str(self.tmp / "remote.git"), "HEAD:feature")
        sha = run("rev-parse", "HEAD")
        self.seed_pull(sha)
        return sha


@pytest.fixture
async def bot(fake_github: FakeGitHub, tmp_path: Path) -> AsyncIterator[BotHarness]:
    """The bot under test, started, with the demo project as its repository."""
    harness = await BotHarness.create(fake_github, tmp_path)
    try:
        yield harness
    finally:
        await harness.stop()
