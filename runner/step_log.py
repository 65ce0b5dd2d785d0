"""Each step's whole output, told as it comes to whoever keeps the run's log (the run page).

:class:`LoggedRunner` wraps any runner: it says when a step starts and ends, and the backends pass
what the step prints while it runs (``RunnerRequest.output``). A runner that printed nothing live
(the host runner reads its output file once the step ended) has its captured output told at the
end instead, so every step's output reaches the log either way.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Protocol

from bot.core.models import CheckStatus, DocstringResult
from runner.backends.base import Runner, RunnerInfo, Step, StepResult


class StepLogSink(Protocol):
    """Where a run's steps and their output go. ``output`` may be called from a thread."""

    def step_started(self, name: str) -> None: ...
    def output(self, text: str) -> None: ...
    def step_ended(self, result: StepResult) -> None: ...


def step_state(result: StepResult) -> str:
    """One word for how a step ended: passed, failed, timed-out, cancelled, error."""
    if result.ok:
        return "passed"
    if result.cancelled:
        return "cancelled"
    if result.timed_out:
        return "timed-out"
    if result.error or result.exit_code is None:
        return "error"
    return "failed"


class LiveOutput:
    """The ``output`` callback a backend gets: counts what it told, so the end knows whether the
    step's output still has to be told."""

    def __init__(self, sink: StepLogSink) -> None:
        self._sink = sink
        self._lock = threading.Lock()
        self.told = 0

    def __call__(self, text: str) -> None:
        with self._lock:
            self.told += len(text)
            self._sink.output(text)


class LoggedRunner:
    """A runner whose steps are told to ``sink``; everything else is the inner runner's."""

    def __init__(self, inner: Runner, sink: StepLogSink, live: LiveOutput) -> None:
        self._inner = inner
        self._sink = sink
        self._live = live

    @property
    def inner(self) -> Runner:
        """The runner it tells of (which may read a running step's files, say)."""
        return self._inner

    @property
    def info(self) -> RunnerInfo:
        return self._inner.info

    async def prepare(self) -> None:
        await self._inner.prepare()

    async def run(self, step: Step, workspace: Path) -> StepResult:
        self._sink.step_started(step.name)
        before = self._live.told
        try:
            result = await self._inner.run(step, workspace)
        except BaseException as exc:
            self._sink.step_ended(
                StepResult(name=step.name, exit_code=None, error=f"{step.name}: {type(exc).__name__}: {exc}")
            )
            raise
        if self._live.told == before and result.output:
            self._sink.output(result.output)
        self._sink.step_ended(result)
        return result

    async def cancel(self) -> None:
        await self._inner.cancel()

    async def close(self) -> None:
        await self._inner.close()


def log_docstrings(sink: StepLogSink, result: DocstringResult) -> None:
    """The docstring check reads git's objects, not a step of the runner: its findings are its output."""
    sink.step_started("docstrings")
    lines = [
        f"{f.path}:{f.line}: {f.level.value}: {f.title or 'docstring'}: {f.message}" for f in result.findings
    ]
    summary = result.message or f"{result.checked} changed public objects checked"
    sink.output("\n".join([*lines, summary]) + "\n")
    failed = result.status in (CheckStatus.FAILED, CheckStatus.ERROR)
    sink.step_ended(StepResult(name="docstrings", exit_code=1 if failed else 0))
