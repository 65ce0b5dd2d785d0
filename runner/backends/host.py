"""The host runner: each step is a subprocess on the runner's own machine, with a timeout.

It gives no isolation, so it is never a fallback: `serve` uses it only when the operator asks
(``PARITYBOT_RUNNER=host`` with ``PARITYBOT_ALLOW_HOST_RUNNER=trusted-code-only``) and only for
trusted code, and ``paritybot check`` on a developer's own checkout says when it runs here.

What a step sees of this process's environment is an allow-list (:data:`PASSED_THROUGH`): the
variables a shell and the tools need, never the service's settings, engine address or tokens.

A step's ``network`` is not enforced here, and a store (``Step.store``) is a plain directory under
``store_root`` (default: the user's cache directory), writable whatever the step asked.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import os
import signal
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

import platformdirs
import structlog

from bot.core.secrets import redact
from runner.backends.base import (
    ProcessLedger,
    RunnerInfo,
    Step,
    StepProcess,
    StepResult,
    ToolStore,
    cap_output,
)
from runner.backends.collect import collect_files, read_host_file

log = structlog.get_logger(__name__)

# Variables of this process that steps inherit; everything else (PARITYBOT_*, DOCKER_HOST, tokens,
# cloud credentials) stays out of reach of the code under test. Besides what a shell needs, the
# GPUs and libraries the machine's operator chose for its runs; an environment's `env:` adds more.
PASSED_THROUGH = frozenset(
    {
        *("PATH", "HOME", "LANG", "LANGUAGE", "TMPDIR", "TZ", "USER", "LOGNAME"),
        *("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "LD_LIBRARY_PATH"),
    }
)
PASSED_THROUGH_PREFIXES = ("LC_",)

# Set to a new value for each step: a process that left the step's process group (a server
# started in a session of its own) still carries it, and is killed when the step ends.
FOLLOW_S = 0.1  # how often a running step's output file is read for the live log
STEP_MARKER = "STEP_MARK"


def minimal_environment(environ: dict[str, str] | os._Environ[str]) -> dict[str, str]:
    """The allow-listed part of ``environ``."""
    return {
        key: value
        for key, value in environ.items()
        if key in PASSED_THROUGH or key.startswith(PASSED_THROUGH_PREFIXES)
    }


def default_store_root() -> Path:
    """Where stores live on the host: the user's cache directory."""
    return platformdirs.user_cache_path("paritybot") / "stores"


class HostRunner:
    def __init__(
        self,
        reason: str = "",
        env: dict[str, str] | None = None,
        output_limit: int = 200_000,
        *,
        redact: list[str] | tuple[str, ...] = (),
        store_root: Path | None = None,
        processes: ProcessLedger | None = None,
        on_output: Callable[[str], None] | None = None,
    ):
        env = dict(env or {})
        self._on_output = on_output
        # The tools the checks call (python, pytest, pre-commit) are the ones installed beside
        # paritybot, even when its virtual environment is not activated.
        env.setdefault("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
        self._info = RunnerInfo(kind="host", reason=reason, env=env)
        self._proc: asyncio.subprocess.Process | None = None
        self._cancelled = False
        self._output_limit = output_limit
        self._secrets = [s for s in redact if s]
        self._store_root = store_root or default_store_root()
        self._ledger = processes

    @property
    def info(self) -> RunnerInfo:
        return self._info

    async def prepare(self) -> None:
        return None

    async def run(self, step: Step, workspace: Path) -> StepResult:
        if self._cancelled:
            return StepResult(name=step.name, exit_code=None, cancelled=True)
        if step.scratch:
            # A fresh directory elsewhere: the step never has the pull request's files beside it.
            with tempfile.TemporaryDirectory(prefix="paritybot-step-") as scratch:
                return await self._run_in(step, Path(scratch))
        return await self._run_in(step, workspace)

    def _store_env(self, store: ToolStore | None) -> dict[str, str]:
        if store is None:
            return {}
        path = self._store_root / store.key
        path.mkdir(parents=True, exist_ok=True)
        return {store.env: str(path)}

    async def _run_in(self, step: Step, workspace: Path) -> StepResult:
        for rel, text in step.inject.items():
            target = workspace / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
        marker = uuid.uuid4().hex
        env = {
            **minimal_environment(os.environ),
            **self._info.env,
            **step.env,
            **self._store_env(step.store),
            STEP_MARKER: marker,
        }
        started = time.monotonic()
        # The output goes to a file, not a pipe: the step ends when its leader does, even if a
        # process it left behind (a server in a session of its own) still holds the output open.
        with tempfile.TemporaryFile(prefix="paritybot-output-") as output:
            try:
                # A new session, so a timeout or cancel kills the whole process group, not just its leader.
                self._proc = await asyncio.create_subprocess_exec(
                    *step.argv,
                    cwd=workspace / step.workdir,
                    env=env,
                    stdin=asyncio.subprocess.DEVNULL,
                    stdout=output,
                    stderr=asyncio.subprocess.STDOUT,
                    start_new_session=True,
                )
            except OSError as exc:
                return StepResult(
                    name=step.name,
                    exit_code=None,
                    error=f"{step.name}: could not start {step.argv[0]}: {exc}",
                )
            proc = self._proc
            group = await self._record(proc.pid, step.name)
            timed_out = False
            follow = asyncio.create_task(self._follow(output.fileno(), proc))
            try:
                await asyncio.wait_for(proc.wait(), timeout=step.timeout_s)
            except TimeoutError:
                timed_out = True
                self._kill(proc)
                await proc.wait()
            except asyncio.CancelledError:
                # The task running us was cancelled (shutdown): leave no process behind.
                self._kill(proc)
                kill_marked(marker)
                await proc.wait()
                raise
            finally:
                self._proc = None
                await follow
            # Whatever the step started in the background ends with it: its process group (the
            # leader is reaped, so the id names our group only while a member lives and no new
            # process has taken the id), and what left the group but still carries the step's mark.
            if start_ticks(proc.pid) is None and group_members(proc.pid):
                self._kill(proc)
            escaped = kill_marked(marker)
            if escaped:
                log.info("killed what the step left running", step=step.name, processes=len(escaped))
            await self._forget(group)
            duration = time.monotonic() - started
            text = read_output(output, self._output_limit, self._secrets)
        collected, refused = collect_files(
            step.collect, lambda rel: self._read_collected(workspace, rel, step.collect_max_bytes)
        )
        log.debug("step finished", step=step.name, exit_code=proc.returncode, duration_s=round(duration, 3))
        return StepResult(
            name=step.name,
            exit_code=proc.returncode,
            output=text,
            duration_s=duration,
            timed_out=timed_out,
            cancelled=self._cancelled and not timed_out,
            collected=collected,
            refused=refused,
        )

    async def _follow(self, fd: int, proc: asyncio.subprocess.Process) -> None:
        """Tell ``on_output`` what the step writes to its output file while it runs (every
        FOLLOW_S), and the rest once it ended: the run page's live log."""
        if self._on_output is None:
            return
        decoder = codecs.getincrementaldecoder("utf-8")("replace")
        offset = 0
        while True:
            ended = proc.returncode is not None
            while chunk := await asyncio.to_thread(os.pread, fd, 1 << 16, offset):
                offset += len(chunk)
                if text := decoder.decode(chunk):
                    self._on_output(redact(text, self._secrets))
            if ended:
                if rest := decoder.decode(b"", final=True):
                    self._on_output(redact(rest, self._secrets))
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(proc.wait()), FOLLOW_S)

    async def _record(self, pgid: int, step: str) -> StepProcess | None:
        """Record the step's new process group (its leader started a session), so that a restart
        after this process dies can kill what it left running."""
        if self._ledger is None:
            return None
        boot, ticks = boot_id(), group_start_ticks(pgid)
        if boot is None or ticks is None:
            return None
        group = StepProcess(pgid=pgid, boot_id=boot, start_ticks=ticks, step=step)
        try:
            await asyncio.to_thread(self._ledger.started, group)
        except Exception:
            log.exception("could not record a step's process group", step=step)
            return None
        return group

    async def _forget(self, group: StepProcess | None) -> None:
        if self._ledger is None or group is None:
            return
        try:
            await asyncio.to_thread(self._ledger.ended, group)
        except Exception:
            log.exception("could not forget a step's process group", step=group.step)

    def _read_collected(self, workspace: Path, rel: str, limit: int) -> str | None:
        text = read_host_file(workspace, rel, limit)
        return None if text is None else redact(text, self._secrets)

    @staticmethod
    def _kill(proc: asyncio.subprocess.Process) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)

    async def cancel(self) -> None:
        self._cancelled = True
        if self._proc is not None:
            self._kill(self._proc)

    async def close(self) -> None:
        await self.cancel()


# --- leftovers of dead runs ---------------------------------------------------------------------

_PROC = Path("/proc")


def boot_id() -> str | None:
    """This boot's id (Linux); process ids mean nothing across boots."""
    try:
        return (_PROC / "sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return None


def _stat_fields(pid: int) -> list[str] | None:
    """/proc/PID/stat's fields after the command name (which may hold spaces and parentheses)."""
    try:
        text = (_PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    return text[text.rindex(")") + 2 :].split()


def start_ticks(pid: int) -> int | None:
    """When the process started, in clock ticks since boot: with the pid, it names one process."""
    fields = _stat_fields(pid)
    return int(fields[19]) if fields is not None and len(fields) > 19 else None


def group_start_ticks(pgid: int) -> int | None:
    """The start time that names group ``pgid``: its leader's, or, when a quick leader has already
    exited and been reaped, its oldest member's — still earlier than any process that could take
    the id once the group is gone. None when nothing of the group is left."""
    leader = start_ticks(pgid)
    if leader is not None:
        return leader
    members = [t for t in map(start_ticks, group_members(pgid)) if t is not None]
    return min(members, default=None)


def kill_marked(marker: str) -> list[int]:
    """Kill the processes whose environment holds ``STEP_MARKER=marker``; their ids are returned.

    A process can clear its own environment and escape this; the host runner runs trusted code."""
    needle = f"{STEP_MARKER}={marker}".encode()
    killed = []
    for entry in _PROC.iterdir() if _PROC.is_dir() else []:
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if needle in environ.split(b"\0"):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(int(entry.name), signal.SIGKILL)
                killed.append(int(entry.name))
    return killed


def read_output(output: BinaryIO, limit: int, secrets: list[str]) -> str:
    """A step's output file as text, secrets redacted, its head and tail kept when it is longer than
    ``limit`` characters; a huge log is never read whole."""
    size = output.seek(0, os.SEEK_END)
    window = 4 * limit  # bytes: `limit` characters each way, with room for a secret across the edge
    output.seek(0)
    if size <= 2 * window:
        # Redacted before the cap, so no cut can leave half a secret behind.
        return cap_output(redact(output.read().decode("utf-8", "replace"), secrets), limit)
    head = redact(output.read(window).decode("utf-8", "replace"), secrets)
    output.seek(size - window)
    tail = redact(output.read(window).decode("utf-8", "replace"), secrets)
    half = limit // 2
    return f"{head[:half]}\n\n… about {size - 2 * half} bytes cut …\n\n{tail[-half:]}"


def group_members(pgid: int) -> list[int]:
    """The processes in process group ``pgid``."""
    members = []
    for entry in _PROC.iterdir() if _PROC.is_dir() else []:
        if entry.name.isdigit():
            fields = _stat_fields(int(entry.name))
            if fields is not None and len(fields) > 2 and fields[2] == str(pgid):
                members.append(int(entry.name))
    return members


def kill_leftovers(groups: list[StepProcess]) -> list[StepProcess]:
    """Kill the process groups of steps whose run died with the process that ran them; the killed
    ones are returned. Call it at start-up, before any step runs.

    A group is ours while this is the boot it ran in and its id is not now some other process's:
    the kernel never reuses an id while a group of that id has a member, so a live leader with
    another start time means the group ended and the id was given out again.
    """
    boot = boot_id()
    killed = []
    for group in groups:
        if boot is None or group.boot_id != boot:
            continue  # a reboot ended it
        leader = start_ticks(group.pgid)
        if leader is not None and leader != group.start_ticks:
            continue
        if not group_members(group.pgid):
            continue
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(group.pgid, signal.SIGKILL)
            killed.append(group)
            log.warning("killed a dead run's leftover step", step=group.step, pgid=group.pgid)
    return killed
