"""`paritybot repro RUN`: from a red check into the run's own environment, with its failure in front of you.

It reads the run's record from the service (:mod:`bot.cli.repro_record`), checks out the run's head
in a fresh workspace (:func:`runner.workspace.prepare_workspace`, as a run does), starts the run's
image by digest with its GPUs, set-up and variables through the same runner a run uses
(:class:`runner.backends.docker.DockerRunner`; ``--runner host``: this machine, as `check` does),
prints the parity between the run and here, reruns the failing test once and says whether that
reproduced the failure; then it opens the session the user asked for (:mod:`bot.cli.repro_session`).
Everything it started goes when the user leaves; interrupted, it lists what it could not remove.
"""

from __future__ import annotations

import asyncio
import shlex
import sys
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import ValidationError

from bot.cli.checkout import UsageError, cache_root
from bot.cli.local_check import local_runners
from bot.cli.repro_outcome import (
    gpu_warning,
    outcome,
    parity_rows,
    parity_table,
    pull_hint,
    shell_rc,
    test_command,
)
from bot.cli.repro_record import ReproRecord, fetch_record, pick_test, record_url
from bot.cli.repro_session import RC_PATH, Session, leftovers, open_session
from bot.core.config import Environment, format_config_errors
from runner.backends.base import Runner, RunnerError, RunnerRequest, Step
from runner.backends.docker import WORKSPACE_DIR
from runner.probe.probe import parse_probe, probe_step
from runner.workspace import Workspace, WorkspaceError, prepare_workspace, remove_workspace

Mode = Literal["shell", "ssh", "jupyter", "none"]
Say = Callable[[str], None]


@dataclass(frozen=True)
class ReproOptions:
    run: str
    test: str | None = None
    mode: Mode = "shell"
    runner: Literal["docker", "host"] = "docker"
    server: str | None = None
    token: str | None = None
    python: str | None = None
    key: Path | None = None


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def run_environment(record: ReproRecord) -> Environment:
    """The run's environment as a config entry: its image by digest, GPUs, variables, set-up, user."""
    env = record.environment
    fields: dict[str, object] = {
        "name": env.name,
        "image": env.image_ref or env.image,
        "gpus": env.gpus,
        "env": env.env,
        "setup": env.setup,
        "user": env.user,
    }
    limits = {k: v for k, v in (("memory", env.memory), ("shm_size", env.shm_size)) if v}
    try:
        return Environment.model_validate(fields | ({"limits": limits} if limits else {}))
    except ValidationError as exc:
        raise UsageError(
            f"run {record.id}: its environment: {'; '.join(format_config_errors(exc))}"
        ) from None


async def repro_main(opts: ReproOptions, say: Say = _say) -> int:
    """0: the failure was reproduced (or the session ended after it); 1: it was not; 2: could not try."""
    record = await asyncio.to_thread(fetch_record, record_url(opts.run, opts.server), opts.token)
    test = pick_test(record, opts.test)
    if record.merged:
        raise UsageError(
            f"run {record.id} checked its head merged with its base; this paritybot reproduces heads only"
        )
    environment = run_environment(record)
    pr = f" PR #{record.pr_number}" if record.pr_number else ""
    say(
        f"repro: run {record.id} of {record.repository}{pr} at {record.head_sha[:12]}, environment {environment.name}"
    )
    if opts.mode in ("ssh", "jupyter") and opts.runner == "host":
        raise UsageError(f"--{opts.mode} needs the run's container; it cannot be used with --runner host")
    if opts.runner == "host":
        say(
            "repro: --runner host: the test runs ON THIS MACHINE, as you, without the run's container or image"
        )
    run_id = f"repro-{record.id}-{uuid.uuid4().hex[:6]}"
    factory = local_runners(opts.runner, opts.python)
    try:
        runner = await factory(RunnerRequest(environment=environment, run_id=run_id, trusted_code=True))
    except RunnerError as exc:
        raise UsageError(f"cannot reproduce here: {exc}") from None
    workspace: Workspace | None = None
    session: Session | None = None
    try:
        workspace = await _workspace(record, run_id, opts.token, say)
        try:
            reproduced = await _rerun(record, test.nodeid, runner, workspace, environment, say)
        except RunnerError as exc:
            raise UsageError(f"cannot reproduce here: {exc}") from None
        if opts.mode == "none":
            return 0 if reproduced else 1
        session = await open_session(opts.mode, runner, workspace, record, test.nodeid, opts.key, say)
        await session.wait()
        return 0
    finally:
        await _clean_up(runner, workspace, session, run_id, say)


async def _workspace(record: ReproRecord, run_id: str, token: str | None, say: Say) -> Workspace:
    root = cache_root() / "repro"
    try:
        ws = await prepare_workspace(
            clone_url=record.clone_url,
            repo=record.repository,
            head_sha=record.head_sha,
            base_ref=None,
            run_id=run_id,
            workspace_root=root / "workspaces",
            cache_root=root,
            token=token,
        )
    except WorkspaceError as exc:
        raise UsageError(f"could not check out {record.head_sha[:12]} of {record.clone_url}: {exc}") from None
    say(
        f"repro: workspace {ws.path} at {record.head_sha[:12]} (the head as pushed, not merged with its base, as the run)"
    )
    return ws


async def _rerun(
    record: ReproRecord, nodeid: str, runner: Runner, ws: Workspace, environment: Environment, say: Say
) -> bool:
    try:
        await runner.prepare()
    except RunnerError as exc:
        raise UsageError(pull_hint(str(exc), environment.image or "")) from None
    info = runner.info
    if info.kind == "docker":
        say(f"repro: image {info.image_ref or info.image} (gpus: {info.gpus or 'none'})")
    here = parse_probe(await runner.run(probe_step([]), ws.path))
    rows = parity_rows(record.environment.probe, here)
    say("parity between the run and here:")
    for line in parity_table(rows):
        say(f"  {line}")
    if warning := gpu_warning(environment.gpus, record.environment.probe, here):
        say(warning)
    if hidden := record.environment.env_hidden:
        say(f"note: not set here, the record does not show their values: {', '.join(hidden)}")
    networked = any(s.startswith("setup") for s in record.environment.networked_steps)
    for i, line in enumerate(environment.setup, 1):
        say(f"repro: set-up {i}/{len(environment.setup)}: {line}")
        step = Step(name=f"setup-{i}", argv=["sh", "-c", line], network=networked, env=environment.env)
        done = await runner.run(step, ws.path)
        if not done.ok:
            print(done.output, flush=True)
            raise UsageError(f"the run's set-up failed here: {done.describe_failure()}")
    command = test_command(record, nodeid)
    say(f"repro: rerunning {nodeid} once: {shlex.join(command)}")
    workdir = WORKSPACE_DIR if info.kind == "docker" else str(ws.path)
    step = Step(
        name="tests",
        argv=command,
        env=environment.env,
        network="tests" in record.environment.networked_steps,
        timeout_s=environment.step_timeout_minutes * 60,
        inject={RC_PATH: shell_rc(record, nodeid, workdir)},
    )
    result = await runner.run(step, ws.path)
    print(result.output, end="" if result.output.endswith("\n") else "\n", flush=True)
    test = pick_test(record, nodeid)
    line, reproduced = outcome(test, result.exit_code, result.output, rows)
    say(line)
    return reproduced


async def _clean_up(
    runner: Runner, workspace: Workspace | None, session: Session | None, run_id: str, say: Say
) -> None:
    """Remove what this repro started; say what is left if that could not finish."""
    try:
        if session is not None:
            await session.close()
        await runner.close()
        if workspace is not None:
            await asyncio.to_thread(remove_workspace, workspace)
    finally:
        left = await asyncio.to_thread(leftovers, run_id, workspace, session)
        for line in left:
            say(f"repro: left behind: {line}")
        if not left:
            say("repro: removed everything it started (containers, volumes, the workspace)")
