"""The one runner interface: run a step in a workspace, cancel what is running.

Two backends implement it: the host runner (subprocesses) and the container runner (Docker).
Checks build :class:`Step` objects and read :class:`StepResult` objects; they never know which
backend ran them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field, model_validator

from bot.core.config import Environment

# Where injected helper files (the probe, report paths) live inside a workspace.
SCRATCH_DIR = ".paritybot"
# pytest's temporary directories (``tmp_path``), given with ``--basetemp`` so that they go with the
# run's workspace instead of piling up as ``pytest-of-USER/`` in the machine's temp directory.
PYTEST_BASETEMP = f"{SCRATCH_DIR}/pytest-tmp"
# The most of one collected file the bot reads unless a step sets its own cap (see runner.backends.collect).
COLLECT_MAX_BYTES = 64_000_000


class ToolStore(BaseModel):
    """A directory kept across runs for a tool's installed environments (pre-commit's hooks).

    ``key`` names what the store was built from (a digest of those inputs), so runs whose inputs
    differ never share one. Only a scratch step, which sees nothing of the run, may write it: every
    step that runs a pull request's code gets it read-only, so one pull request cannot change what
    another one runs.
    """

    model_config = ConfigDict(extra="forbid")

    key: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
    env: str = Field(description="the variable that receives the store's path, e.g. PRE_COMMIT_HOME")
    writable: bool = False


class Step(BaseModel):
    """One command of a run."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(description="short name for logs and reports: probe, pre-commit, tests")
    argv: list[str]
    env: dict[str, str] = Field(default_factory=dict)
    timeout_s: float = Field(1800, gt=0)
    network: bool = Field(False, description="whether the step may reach the network")
    scratch: bool = Field(
        False,
        description="run in a new empty directory outside the workspace instead of the workspace: "
        "for steps that must not see the pull request's files (the probe, installing pre-commit's "
        "hook environments); nothing of the run is reachable from it, and workdir, inject and "
        "collect are relative to that directory",
    )
    workdir: str = Field(".", description="relative to the workspace root")
    inject: dict[str, str] = Field(
        default_factory=dict,
        description="files (workspace-relative path → text) written before the step runs",
    )
    collect: list[str] = Field(
        default_factory=list,
        description="workspace-relative files read back after the step (e.g. a JUnit report)",
    )
    collect_max_bytes: int = Field(
        COLLECT_MAX_BYTES,
        gt=0,
        description="a collected file larger than this is not read; StepResult.refused says so",
    )
    store: ToolStore | None = None

    @model_validator(mode="after")
    def _store_written_only_from_scratch(self) -> Step:
        if self.store is not None and self.store.writable and not self.scratch:
            raise ValueError(
                "a step that sees the workspace gets a store read-only; only a scratch step writes it"
            )
        return self


class StepResult(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    exit_code: int | None = Field(description="None when the step never produced one")
    output: str = Field("", description="stdout and stderr together, capped (head and tail kept)")
    duration_s: float = 0.0
    timed_out: bool = False
    oom_killed: bool = False
    cancelled: bool = False
    error: str | None = Field(None, description="why the step could not run at all")
    stopped_by_limit: str | None = Field(
        None, description="the limit that stopped the step, in words: the run wrote more than …"
    )
    collected: dict[str, str] = Field(default_factory=dict, description="path → text of collected files")
    refused: dict[str, str] = Field(
        default_factory=dict,
        description="path → why a collected file was not read: 'is 312 MB, more than the 64 MB paritybot reads'",
    )

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not (
            self.timed_out or self.oom_killed or self.cancelled or self.stopped_by_limit
        )

    def refusal(self, path: str, what: str) -> str | None:
        """Why the collected file ``path`` was not read, as a sentence about ``what`` it is; else None."""
        reason = self.refused.get(path)
        return f"{what} {reason}" if reason else None

    def describe_failure(self) -> str:
        """One line a user understands: why the step did not succeed."""
        if self.error:
            return self.error
        if self.cancelled:
            return f"{self.name}: cancelled"
        if self.timed_out:
            return f"{self.name}: timed out after {self.duration_s:.0f} s and was killed"
        if self.oom_killed:
            return f"{self.name}: killed: out of memory (exit {self.exit_code})"
        if self.stopped_by_limit:
            return f"{self.name}: stopped: {self.stopped_by_limit}"
        return f"{self.name}: exit code {self.exit_code}"


class RunnerInfo(BaseModel):
    kind: str = Field(description="host or docker")
    reason: str = Field("", description="why this backend was chosen")
    image: str | None = None
    image_digest: str | None = None
    image_ref: str | None = Field(None, description="how a repro command names the image")
    gpus: str | None = Field(None, description="the --gpus value a repro command needs")
    env: dict[str, str] = Field(default_factory=dict)
    memory: str | None = Field(None, description="the step containers' memory limit (docker syntax)")
    shm_size: str | None = Field(None, description="the step containers' /dev/shm size (docker syntax)")
    build: list[str] = Field(
        default_factory=list, description="commands the runner ran to build the commit's compiled code"
    )


class Runner(Protocol):
    """Runs steps of one run. One instance serves one run, then is closed."""

    @property
    def info(self) -> RunnerInfo: ...

    async def prepare(self) -> None:
        """Resolve the image and anything else needed before the first step; may raise RunnerError."""

    async def run(self, step: Step, workspace: Path) -> StepResult: ...

    async def cancel(self) -> None:
        """Stop the step in progress within seconds; later steps return cancelled results."""

    async def close(self) -> None: ...


@runtime_checkable
class ReadsRunningStep(Protocol):
    """A runner whose steps' workspace is not this machine's directory (a container's volume):
    it reads a workspace file while the step runs (the test step's live results)."""

    def read_running(self, rel: str, limit: int) -> str | None:
        """The file ``rel`` of the workspace of the step now running, up to ``limit`` bytes; None
        when no step runs, or the file is not there or not a plain file. Blocking (a thread)."""


class RunnerError(Exception):
    """The runner could not do its job (image missing, no GPU runtime); the message says why."""


class RunRefused(RunnerError):
    """No runner may take this run (no engine, no image, the host refused); the message says why."""


@dataclass(frozen=True)
class StepProcess:
    """A step's process group as the host runner started it: enough to find it again after a crash.

    A process id alone may be reused; the group's id, the boot it ran in and its leader's start
    time (clock ticks since boot) name one group for good.
    """

    pgid: int
    boot_id: str
    start_ticks: int
    step: str


class ProcessLedger(Protocol):
    """Where a runner records the process groups it starts, so a restart can kill what a dead
    process left running (the service keeps them in its store)."""

    def started(self, process: StepProcess) -> None: ...
    def ended(self, process: StepProcess) -> None: ...


@dataclass(frozen=True)
class RunnerRequest:
    """What a runner factory is told about the run it serves."""

    environment: Environment
    run_id: str
    trusted_code: bool = False
    """The code's author is trusted (a PR by a trusted author, or the default branch's own code);
    never true for a commit run because a maintainer approved it. Only such code may use the host."""
    redact: tuple[str, ...] = ()
    """Values (the run's installation token) never to show in output, beside the service's own."""
    processes: ProcessLedger | None = None
    """Where the host runner records each step's process group (None: nowhere)."""
    output: Callable[[str], None] | None = None
    """Told each piece of a step's output as the step prints it, secrets hidden (the run page's
    live log); may be called from a thread. None: nobody listens."""


RunnerFactory = Callable[[RunnerRequest], Awaitable[Runner]]


def cap_output(text: str, limit: int = 200_000) -> str:
    """Keep the head and the tail of a long log; the middle rarely explains a failure."""
    if len(text) <= limit:
        return text
    half = limit // 2
    cut = len(text) - 2 * half
    return f"{text[:half]}\n\n… {cut} characters cut …\n\n{text[-half:]}"
