"""`paritybot serve` as an operator runs it: a real process, its settings in the environment, its
database on disk, killed with SIGKILL and started again on the same files.

Runs use the host runner on the demo project, held at its set-up command until the test opens a
gate: each attempt that reaches the set-up writes ``started.N`` (its shell's pid) into ``marks``,
so a test knows the run is under way, and which process a kill -9 leaves behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import payloads
from botharness import REPO, SECRET
from fakegithub import FakeGitHub
from finishing import CHECK_RUN, FAST, finished, view
from sample_repo import SampleRepo, make_sample_repo

from bot.core.kinds import CHECK_KINDS
from bot.render.check_runs import check_run_name

PRECOMMIT, DOCSTRINGS, TESTS, PARITY = (check_run_name(k, "default") for k in CHECK_KINDS)

# The run stops at its set-up command until `marks/open` exists; pre-commit and the docstrings
# have finished by then (early results).
GATED_CONFIG = """\
environments:
  - name: default
    setup:
      - 'n=$(ls "$MARKS" | grep -c started); echo $$ > "$MARKS/started.$((n + 1))"; while [ ! -e "$MARKS/open" ]; do sleep 0.1; done'
    env:
      MARKS: {marks}
tests:
  reruns: 0
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie waiting for its parent to reap it does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


@dataclass
class ServeProcess:
    fake: FakeGitHub
    tmp: Path
    sample: SampleRepo
    clone_url: str
    settings: dict[str, str] = field(default_factory=dict)
    port: int = field(default_factory=free_port)
    proc: asyncio.subprocess.Process | None = None
    starts: int = 0

    @classmethod
    def create(cls, fake: FakeGitHub, tmp: Path, **settings: Any) -> ServeProcess:
        sample = make_sample_repo(tmp)
        bare = tmp / "remote.git"
        subprocess.run(["git", "clone", "-q", "--bare", str(sample.path), str(bare)], check=True)
        fake.add_repo(REPO, installation_id=1, clone_url=bare.as_uri())
        fake.add_pull(
            REPO,
            7,
            head_sha=sample.head_sha,
            base_ref="main",
            base_sha=sample.base_sha,
            author="octocat",
            author_association="OWNER",
        )
        (tmp / "marks").mkdir()
        fake.set_file(REPO, ".github/paritybot.yml", GATED_CONFIG.format(marks=tmp / "marks"), ref="main")
        return cls(fake, tmp, sample, bare.as_uri(), {k: str(v) for k, v in (FAST | settings).items()})

    def environment(self) -> dict[str, str]:
        base = {k: v for k, v in os.environ.items() if not k.startswith("PARITYBOT_")}
        ours = {
            "APP_ID": str(self.fake.app_id),
            "PRIVATE_KEY": self.fake.private_key_pem,
            "WEBHOOK_SECRET": SECRET,
            "GITHUB_API_URL": self.fake.url,
            "DATABASE_URL": f"sqlite:///{self.tmp / 'bot.db'}",
            "WORKSPACE_ROOT": str(self.tmp / "workspaces"),
            "CACHE_ROOT": str(self.tmp / "cache"),
            "RUNNER": "host",
            "ALLOW_HOST_RUNNER": "trusted-code-only",
            "HOST": "127.0.0.1",
            "PORT": str(self.port),
            "WORKERS": "1",
            "LOG_FORMAT": "json",
            "LOG_LEVEL": "info",
        } | {k.upper(): v for k, v in self.settings.items()}
        return (
            base | {f"PARITYBOT_{k}": v for k, v in ours.items()} | {"XDG_CACHE_HOME": str(self.tmp / "xdg")}
        )

    async def start(self, timeout: float = 90) -> None:
        self.starts += 1
        log = (self.tmp / f"serve.{self.starts}.log").open("wb")
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "bot.cli.main",
            "serve",
            env=self.environment(),
            cwd=self.tmp,
            stdout=log,
            stderr=log,
        )
        log.close()
        proc = self.proc
        await wait_healthy(
            self.port,
            timeout,
            lambda: None if proc.returncode is None else f"serve exited with {proc.returncode}",
            self.log,
        )

    def log(self) -> str:
        return (self.tmp / f"serve.{self.starts}.log").read_text(errors="replace")

    async def kill(self) -> None:
        """kill -9: no handler runs, nothing is cleaned up."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        await self.proc.wait()

    async def stop(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(self.proc.wait(), 30)
            except TimeoutError:
                await self.kill()

    async def send(self, event: str, payload: dict[str, Any]) -> int:
        body, headers = payloads.delivery(event, payload, SECRET)
        async with (
            aiohttp.ClientSession() as session,
            session.post(f"http://127.0.0.1:{self.port}/webhook", data=body, headers=headers) as resp,
        ):
            return resp.status

    def pr_opened(self) -> dict[str, Any]:
        return payloads.sample_pr_event(
            "opened", self.sample, repo=REPO, clone_url=self.clone_url, api_url=self.fake.url
        )

    def started_attempts(self) -> list[int]:
        """The set-up shells' pids, one per attempt that reached the set-up, in order."""
        marks = sorted(self.tmp.joinpath("marks").glob("started.*"), key=lambda p: int(p.suffix[1:]))
        return [int(p.read_text()) for p in marks if p.read_text().strip()]

    def open_gate(self) -> None:
        (self.tmp / "marks" / "open").touch()


async def wait_healthy(
    port: int, timeout: float, gone: Callable[[], str | None], log: Callable[[], str], poll_s: float = 0.1
) -> None:
    """Until `serve` on ``port`` answers /healthz with 200; fails at once when ``gone`` says why it
    stopped, or after ``timeout``, with the end of its ``log``."""
    deadline = time.monotonic() + timeout
    async with aiohttp.ClientSession() as session:
        while time.monotonic() < deadline:
            if (why := gone()) is not None:
                raise AssertionError(f"{why}: {log()[-3000:]}")
            with contextlib.suppress(aiohttp.ClientError):
                async with session.get(f"http://127.0.0.1:{port}/healthz") as resp:
                    if resp.status == 200:
                        return
            await asyncio.sleep(poll_s)
    raise AssertionError(f"serve did not answer within {timeout} s: {log()[-3000:]}")


async def until(what: str, predicate: Callable[[], bool], timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def _completed(fake: FakeGitHub, head: str, *names: str) -> bool:
    runs = view(fake, REPO, 7, head).runs
    return all(n in runs and runs[n][-1]["status"] == "completed" for n in names)


@dataclass
class KillReport:
    orphans_outlived_serve: list[bool] = field(default_factory=list)
    orphans_killed_at_start: list[bool] = field(default_factory=list)
    tests_open_while_early_done: bool = False
    seconds_after_last_kill: float = 0.0


async def kill_during_run(serve: ServeProcess, kills: int) -> KillReport:
    """Open the PR; kill -9 the service ``kills`` times: at the set-up of its first and second
    attempts, and the third time while it tells GitHub the run failed (GitHub failing then).
    Returns when GitHub shows the run finished."""
    fake, head = serve.fake, serve.sample.head_sha
    report = KillReport()
    await serve.start()
    assert await serve.send("pull_request", serve.pr_opened()) == 202
    for attempt in range(1, min(kills, 2) + 1):
        await until(f"attempt {attempt} at its set-up", lambda a=attempt: len(serve.started_attempts()) == a)
        if attempt == 1:
            await until(
                "pre-commit and docstrings completed", lambda: _completed(fake, head, PRECOMMIT, DOCSTRINGS)
            )
            report.tests_open_while_early_done = not _completed(fake, head, TESTS)
        orphan = serve.started_attempts()[-1]
        await serve.kill()
        report.orphans_outlived_serve.append(alive(orphan))
        if kills == 3 and attempt == 2:
            fake.fail("PATCH", CHECK_RUN, 502, times=100_000)  # GitHub down as it restarts
        killed_at = time.monotonic()
        await serve.start()
        await until("the leftover step killed at start-up", lambda o=orphan: not alive(o), timeout=30)
        report.orphans_killed_at_start.append(True)
    if kills == 1:
        serve.open_gate()
    if kills == 3:
        await until(
            "an attempt to complete the check runs",
            lambda: any(c.status == 502 for c in fake.calls_to("PATCH", CHECK_RUN)),
        )
        await serve.kill()
        fake.clear_failures()
        killed_at = time.monotonic()
        await serve.start()
    await until("GitHub to show the run finished", lambda: finished(view(fake, REPO, 7, head)))
    report.seconds_after_last_kill = time.monotonic() - killed_at
    return report
