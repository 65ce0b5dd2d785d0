"""An agent process for the several-hosts tests: the real `paritybot agent` (procrastinate's worker,
heartbeat, fencing, reaper, sealed clone tokens) with a stub step in place of the pipeline, so that
what the tests measure is the bot's own doing.

    python tests/fleet_agent.py --labels cuda12.1 --name gpu-a

The stub appends one JSON line per event to $STUB_EVENTS (start, end, stopped), waits $STUB_STEP_S
seconds (in-process; with STUB_MODE=docker in a real container of $STUB_IMAGE, stopped when the
run is cancelled; with STUB_MODE=runner in a container of the real container runner, owned by the
agent's instance; with STUB_MODE=early the docstrings check's result is reported at once, the rest
after $STUB_STEP_S; with STUB_MODE=together:N it ends as soon as N runs have started, so a test of
concurrency does not hang on the machine's speed), and returns a report naming the agent that ran it.
With STUB_MODE=pipeline there is no stub: the agent runs the real pipeline, as `paritybot agent` does.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bot.core.config import Environment
from bot.core.models import CheckStatus, DocstringResult, EnvFacts, RunReport, RunState
from bot.service.fleet.agent import Progress
from bot.service.fleet.run import run_agent
from bot.service.logs import configure_logging
from bot.service.settings import load_settings
from bot.service.store.records import Job
from runner.backends.base import RunnerError, Step
from runner.backends.ownership import Owner

STUB_LABEL = "paritybot.test-stub"


def event(kind: str, job: Job, name: str, **extra: object) -> None:
    line = json.dumps(
        {"event": kind, "job": job.id, "sha": job.head_sha, "agent": name, "t": time.time(), **extra}
    )
    # One write of a short line to a file opened for appending: lines of several agents never mix.
    fd = os.open(os.environ["STUB_EVENTS"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def step_seconds(job: Job, default: float) -> float:
    """$STUB_STEPS (a JSON file: "SHA/environment" or head SHA → seconds) overrides $STUB_STEP_S."""
    path = os.environ.get("STUB_STEPS")
    if path and Path(path).exists():
        steps = json.loads(Path(path).read_text())
        return float(steps.get(f"{job.head_sha}/{job.environment}", steps.get(job.head_sha, default)))
    return default


def stub_runner(name: str, default_s: float, mode: str, owner: Owner):  # type: ignore[no-untyped-def]
    async def run(
        job: Job, cancel: asyncio.Event, token: str | None, baseline: EnvFacts | None, progress: Progress
    ) -> RunReport:
        digest = hashlib.sha256(token.encode()).hexdigest() if token else None
        step_s = step_seconds(job, default_s)
        event("start", job, name, pid=os.getpid(), token_sha256=digest)
        error = None
        if mode == "early":
            # The docstrings check finishes first; the rest runs on for step_s.
            await progress(stub_report(job, name, RunState.RUNNING, docstrings=FOUND_NOTHING))
            stopped = await in_process(cancel, step_s)
        elif mode == "docker":
            stopped = await in_container(job, cancel, step_s)
        elif mode == "runner":
            stopped, error = await in_runner(job, cancel, step_s, owner)
        elif mode.startswith("together:"):
            stopped = await until_started(int(mode.split(":")[1]), cancel, step_s)
        else:
            stopped = await in_process(cancel, step_s)
        event("stopped" if stopped else "end", job, name, error=error)
        state = RunState.CANCELLED if stopped else RunState.FAILED if error else RunState.SUCCEEDED
        return stub_report(job, name, state, error="stopped: superseded" if stopped else error)

    return run


FOUND_NOTHING = DocstringResult(status=CheckStatus.PASSED, checked=1)


def stub_report(job: Job, name: str, state: RunState, **results: Any) -> RunReport:
    return RunReport(
        run_id=job.id,
        repo=job.repo,
        pr_number=job.pr_number,
        head_sha=job.head_sha,
        environment=job.environment,
        state=state,
        runner=f"stub@{name}",
        **results,
    )


async def in_process(cancel: asyncio.Event, step_s: float) -> bool:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(cancel.wait(), step_s)
    return cancel.is_set()


async def until_started(count: int, cancel: asyncio.Event, limit_s: float) -> bool:
    """Wait until ``count`` runs have started (on any agent), at most ``limit_s`` seconds."""
    events = Path(os.environ["STUB_EVENTS"])
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline and not cancel.is_set():
        started = sum(json.loads(line)["event"] == "start" for line in events.read_text().splitlines())
        if started >= count:
            break
        await asyncio.sleep(0.05)
    return cancel.is_set()


async def in_container(job: Job, cancel: asyncio.Event, step_s: float) -> bool:
    import docker

    client = docker.from_env()
    container = await asyncio.to_thread(
        client.containers.run,
        os.environ["STUB_IMAGE"],
        ["sleep", str(step_s)],
        detach=True,
        labels={STUB_LABEL: job.id},
        network_mode="none",
    )
    done = asyncio.create_task(asyncio.to_thread(container.wait))
    stop = asyncio.create_task(cancel.wait())
    try:
        await asyncio.wait({done, stop}, return_when=asyncio.FIRST_COMPLETED)
        if stop.done() and not done.done():
            await asyncio.to_thread(container.remove, force=True)
            return True
        return False
    finally:
        stop.cancel()
        with contextlib.suppress(Exception):
            await asyncio.to_thread(container.remove, force=True)
        client.close()


async def in_runner(job: Job, cancel: asyncio.Event, step_s: float, owner: Owner) -> tuple[bool, str | None]:
    """The step in a container of the real container runner, owned by this agent's instance:
    (stopped, the error that ended it)."""
    from runner.backends.docker import DockerRunner

    environment = Environment(name=job.environment, image=os.environ["STUB_IMAGE"], gpus="none")
    runner = DockerRunner(environment, job.id, owner=owner)
    with tempfile.TemporaryDirectory() as workspace:
        Path(workspace, "f.txt").write_text("x")
        step = asyncio.create_task(
            runner.run(Step(name="stub", argv=["sleep", str(step_s)]), Path(workspace))
        )
        stop = asyncio.create_task(cancel.wait())
        try:
            await asyncio.wait({step, stop}, return_when=asyncio.FIRST_COMPLETED)
            if stop.done() and not step.done():
                await runner.cancel()
            try:
                result = await step
            except RunnerError as exc:
                return False, str(exc)
            if result.cancelled:
                return True, None
            return False, None if result.exit_code == 0 else f"exit {result.exit_code}: {result.error or ''}"
        finally:
            stop.cancel()
            await runner.close()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--labels", required=True)
    parser.add_argument("--name", required=True)
    args = parser.parse_args()
    settings = load_settings()
    settings.require_agent()
    configure_logging(settings.log_format, settings.log_level)
    step_s, mode = float(os.environ.get("STUB_STEP_S", "0")), os.environ.get("STUB_MODE", "sleep")
    return asyncio.run(
        run_agent(
            settings,
            args.labels.split(","),
            args.name,
            # STUB_MODE=pipeline: no stub, the real pipeline (the run page's test of several hosts).
            job_runner=None
            if mode == "pipeline"
            else lambda owner: stub_runner(args.name, step_s, mode, owner),
        )
    )


if __name__ == "__main__":
    raise SystemExit(main())
