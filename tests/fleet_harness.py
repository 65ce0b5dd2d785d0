"""Several hosts, for real: `paritybot serve` replicas and `paritybot agent` processes (with a stub
step, tests/fleet_agent.py) on one fresh PostgreSQL database, talking to the fake GitHub that runs in
the test's own event loop. Tests send GitHub's real payloads to a replica over HTTP, kill and freeze
processes, and read the outcome from the fake GitHub, the database and the agents' event log.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import aiohttp
import payloads
import psycopg
from fakegithub import FakeGitHub
from sample_repo import SampleRepo, make_sample_repo

from bot.core.models import RunState
from bot.service.store.postgres_fleet import FleetStore
from bot.service.store.records import Job

ROOT = Path(__file__).resolve().parent.parent
SECRET = "webhook-secret-for-fleet-tests"
REPO = "octo-org/calc"
# Short heartbeats: an agent silent for STALLED_S has its runs taken back.
HEARTBEAT_S = 0.5
STALLED_S = 3.0
CONFIG = """\
environments:
  - name: cuda12
    runs_on: cuda12.1
    image: python:3.11-slim
    branches: ["main"]
  - name: cuda11
    runs_on: cuda11.8
    image: python:3.11-slim
    branches: ["main"]
"""
ONE_ENVIRONMENT = """\
environments:
  - name: cuda12
    runs_on: cuda12.1
    image: python:3.11-slim
    branches: ["main"]
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Proc:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path
    port: int | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/webhook"

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def kill(self, sig: int = signal.SIGKILL) -> None:
        self.popen.send_signal(sig)


@dataclass
class Fleet:
    fake: FakeGitHub
    tmp: Path
    database_url: str
    sample: SampleRepo
    clone_url: str
    store: FleetStore
    procs: list[Proc] = field(default_factory=list)
    events_file: Path = field(init=False)
    agent_role: str = field(default_factory=lambda: f"agent_{uuid.uuid4().hex[:12]}")

    @property
    def agent_url(self) -> str:
        """The database as an agent reaches it: logged in as its own role."""
        parts = urlsplit(self.database_url)
        return urlunsplit(parts._replace(netloc=f"{self.agent_role}@{parts.netloc.rpartition('@')[2]}"))

    def __post_init__(self) -> None:
        self.events_file = self.tmp / "events.jsonl"
        self.steps_file = self.tmp / "steps.json"

    def step_for(self, sha: str, seconds: float) -> None:
        """Runs of ``sha`` take ``seconds`` on every agent."""
        steps = json.loads(self.steps_file.read_text()) if self.steps_file.exists() else {}
        self.steps_file.write_text(json.dumps(steps | {sha: seconds}))

    @classmethod
    async def create(cls, fake: FakeGitHub, tmp: Path, database_url: str, config: str = CONFIG) -> Fleet:
        sample = make_sample_repo(tmp / "sample")
        bare = tmp / "remote.git"
        subprocess.run(["git", "clone", "-q", "--bare", str(sample.path), str(bare)], check=True)
        fake.add_repo(REPO, installation_id=1, clone_url=bare.as_uri())
        fake.add_repo("octo-org/other", installation_id=1, clone_url=bare.as_uri())
        fake.set_file(REPO, ".github/paritybot.yml", config, ref="main")
        # The schema, as `paritybot db upgrade` makes it before anything starts.
        store = await asyncio.to_thread(FleetStore, database_url)
        fleet = cls(fake, tmp, database_url, sample, bare.as_uri(), store)
        # Agents log in as operators set them up: a role of their own, a member of paritybot_agent
        # (never the schema's owner, never a superuser), so what they do is what the grants allow.
        with psycopg.connect(database_url, autocommit=True) as conn:
            conn.execute(f"CREATE ROLE {fleet.agent_role} LOGIN IN ROLE paritybot_agent")
        fleet.seed_pull(sample.head_sha)
        return fleet

    async def close(self) -> None:
        for proc in self.procs:
            if proc.popen.poll() is None:
                with _suppress_lookup():
                    os.kill(proc.popen.pid, signal.SIGCONT)
                proc.popen.kill()
            proc.popen.wait()
        self.store.close()
        with contextlib.suppress(psycopg.Error), psycopg.connect(self.database_url, autocommit=True) as conn:
            conn.execute(f"DROP OWNED BY {self.agent_role}")
            conn.execute(f"DROP ROLE {self.agent_role}")

    def seed_pull(self, head_sha: str, number: int = 7) -> None:
        self.fake.add_pull(
            REPO,
            number,
            head_sha=head_sha,
            base_ref="main",
            base_sha=self.sample.base_sha,
            author_association="OWNER",
            author="octocat",
        )

    def env(self, **extra: str) -> dict[str, str]:
        return {
            "PATH": os.environ.get("PATH", ""),
            "HOME": os.environ.get("HOME", "/tmp"),
            "PARITYBOT_DATABASE_URL": self.database_url,
            "PARITYBOT_GITHUB_API_URL": self.fake.url,
            "PARITYBOT_HEARTBEAT_S": str(HEARTBEAT_S),
            "PARITYBOT_STALLED_AFTER_S": str(STALLED_S),
            "PARITYBOT_DELIVERY_LEASE_S": "3",
            "PARITYBOT_WORKERS": "1",
            "PARITYBOT_LOG_FORMAT": "json",
            "PARITYBOT_WORKSPACE_ROOT": str(self.tmp / "ws"),
            "PARITYBOT_CACHE_ROOT": str(self.tmp / "cache"),
            **({"DOCKER_HOST": os.environ["DOCKER_HOST"]} if "DOCKER_HOST" in os.environ else {}),
            **extra,
        }

    def _spawn(self, name: str, argv: list[str], env: dict[str, str], port: int | None = None) -> Proc:
        log = self.tmp / f"{name}.log"
        out = log.open("ab")
        popen = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
        out.close()
        proc = Proc(name, popen, log, port)
        self.procs.append(proc)
        return proc

    async def start_serve(self, name: str = "serve-1", *, port: int | None = None, **extra: str) -> Proc:
        port = port or free_port()
        env = self.env(
            **extra,
            PARITYBOT_APP_ID=str(self.fake.app_id),
            PARITYBOT_PRIVATE_KEY=self.fake.private_key_pem,
            PARITYBOT_WEBHOOK_SECRET=SECRET,
            PARITYBOT_HOST="127.0.0.1",
            PARITYBOT_PORT=str(port),
        )
        proc = self._spawn(name, [sys.executable, "-m", "bot.cli.main", "serve"], env, port)
        health = proc.url.replace("/webhook", "/healthz")

        async def up() -> bool:
            if proc.popen.poll() is not None:
                raise AssertionError(f"{name} exited: {proc.output()[-2000:]}")
            try:
                async with aiohttp.ClientSession() as s, s.get(health) as r:
                    return r.status == 200
            except aiohttp.ClientError:
                return False

        await self.wait_for(f"{name} to answer", up, timeout=60)
        return proc

    async def start_agent(
        self,
        name: str,
        labels: str,
        *,
        step_s: float = 0.2,
        mode: str = "sleep",
        database_url: str | None = None,
        **extra: str,
    ) -> Proc:
        env = self.env(
            STUB_EVENTS=str(self.events_file),
            STUB_STEPS=str(self.steps_file),
            STUB_STEP_S=str(step_s),
            STUB_MODE=mode,
            **extra,
        )
        env["PARITYBOT_DATABASE_URL"] = database_url or self.agent_url
        proc = self._spawn(
            name, [sys.executable, "tests/fleet_agent.py", "--labels", labels, "--name", name], env
        )

        def registered() -> bool:
            if proc.popen.poll() is not None:
                raise AssertionError(f"{name} exited: {proc.output()[-2000:]}")
            rows = self.store._query("SELECT 1 FROM agents WHERE name = %s AND stopped_at IS NULL", (name,))
            return bool(rows)

        await self.wait_for(f"{name} to register", registered, timeout=60)
        return proc

    async def send(
        self, serve: Proc, event: str, payload: dict[str, Any], delivery_id: str | None = None
    ) -> int:
        body, headers = payloads.delivery(event, payload, SECRET, delivery_id=delivery_id)
        async with aiohttp.ClientSession() as s, s.post(serve.url, data=body, headers=headers) as r:
            await r.read()
            return r.status

    def pr_event(self, action: str = "opened", **overrides: Any) -> dict[str, Any]:
        return payloads.sample_pr_event(
            action, self.sample, repo=REPO, clone_url=self.clone_url, api_url=self.fake.url, **overrides
        )

    def new_head(self, n: int) -> str:
        """A made-up head SHA for PR #7 (the stub step never checks it out)."""
        sha = f"{n:040x}"
        self.seed_pull(sha)
        return sha

    def status(self) -> dict[str, Any]:
        """`paritybot status --json`, as an operator runs it."""
        done = subprocess.run(
            [sys.executable, "-m", "bot.cli.main", "status", "--json"],
            cwd=ROOT,
            env=self.env(),
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        )
        text = subprocess.run(
            [sys.executable, "-m", "bot.cli.main", "status"],
            cwd=ROOT,
            env=self.env(),
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        )
        assert "Queues:" in text.stdout and "Agents:" in text.stdout and "Running:" in text.stdout
        return dict(json.loads(done.stdout))

    def events(self) -> list[dict[str, Any]]:
        if not self.events_file.exists():
            return []
        return [json.loads(line) for line in self.events_file.read_text().splitlines() if line.strip()]

    def jobs(self, pr: int = 7) -> list[Job]:
        return self.store.jobs_for_pr(REPO, pr)

    def bot_comments(self, pr: int = 7) -> list[Any]:
        return [c for c in self.fake.comments(REPO, pr) if c.user == self.fake.bot_login]

    def all_check_runs_completed(self, jobs: list[Job]) -> bool:
        ids = [cid for job in jobs for cid in job.check_runs.values()]
        return bool(ids) and all(self.fake.check_run(cid).states[-1]["status"] == "completed" for cid in ids)

    async def wait_settled(self, count: int, pr: int = 7, timeout: float = 60) -> list[Job]:
        """Until ``count`` jobs of the PR ended and GitHub shows each of them finished."""

        def settled() -> bool:
            jobs = self.jobs(pr)
            ended = [j for j in jobs if j.state not in (RunState.QUEUED, RunState.RUNNING)]
            if len(ended) < count or len(ended) != len(jobs):
                return False
            reported = self.store._query(
                "SELECT count(*) AS n FROM jobs WHERE reported_state IS DISTINCT FROM state OR report_due"
            )[0]["n"]
            return reported == 0 and self.all_check_runs_completed(ended)

        await self.wait_for(f"{count} settled run(s) of PR #{pr}", settled, timeout=timeout)
        return self.jobs(pr)

    async def wait_for(
        self, what: str, predicate: Callable[[], bool | Awaitable[bool]], timeout: float = 60
    ) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            result = predicate()
            if isinstance(result, Awaitable):
                result = await result
            if result:
                return
            await asyncio.sleep(0.05)
        logs = "\n".join(f"--- {p.name}\n{p.output()[-3000:]}" for p in self.procs)
        raise AssertionError(f"timed out waiting for {what}\n{logs}")


class _suppress_lookup:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> bool:
        return exc[0] is ProcessLookupError
