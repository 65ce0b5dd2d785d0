"""A run's steps as its log tells them (:mod:`bot.core.run_log`): each step's name, state, start,
duration and output, folded from the store's events. Only paritybot's own events make a step or a
state; the output is text, whatever it looks like."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from bot.core.run_log import LogEvent, LogKind, StepEnd


class StepView(BaseModel):
    model_config = ConfigDict(extra="forbid")

    index: int
    name: str
    state: str = Field("running", description="running, passed, failed, timed-out, cancelled, error")
    started_at: datetime
    duration_s: float | None = Field(None, description="None while it runs")
    exit_code: int | None = None
    reason: str = Field("", description="why it did not pass, in paritybot's words")
    output: str = Field("", exclude=True, description="the output kept, in order (head, then tail)")
    cut_chars: int = Field(0, description="characters of output the caps left out, between head and tail")
    cut_at: int | None = Field(None, exclude=True, description="where in ``output`` the cut is")
    held: str = Field("", exclude=True, description="while it runs: why its output stopped coming (the caps)")

    @property
    def failed(self) -> bool:
        return self.state not in ("running", "passed")


def latest_attempt(events: list[LogEvent]) -> list[LogEvent]:
    """The events of the run's latest attempt: an attempt taken back and run again starts afresh."""
    if not events:
        return []
    last = max(e.attempt for e in events)
    return [e for e in events if e.attempt == last]


def fold_steps(events: list[LogEvent], *, run_over: bool = False) -> list[StepView]:
    """The steps of the latest attempt, in order; with ``run_over``, a step that never ended
    (its process died) shows as an error rather than running for ever."""
    steps: dict[int, StepView] = {}
    parts: dict[int, list[str]] = {}
    for event in latest_attempt(events):
        step = steps.get(event.step)
        if event.kind == LogKind.STEP:
            steps[event.step] = StepView(index=event.step, name=event.text, started_at=event.at)
            parts[event.step] = []
            continue
        if step is None:
            continue  # its start was purged or never written: nothing to hang it on
        if event.kind == LogKind.OUT:
            parts[event.step].append(event.text)
        elif event.kind == LogKind.CUT:
            step.cut_at = sum(len(p) for p in parts[event.step])
            step.cut_chars += _count(event.text)
        elif event.kind == LogKind.HELD:
            step.held = event.text
        elif event.kind == LogKind.END:
            end = StepEnd.parse(event.text)
            step.state, step.exit_code, step.reason = end.state, end.exit_code, end.reason
            step.duration_s = end.duration_s
    for index, step in steps.items():
        step.output = "".join(parts[index])
        if run_over and step.state == "running":
            step.state, step.reason = "error", "the step never ended: its run stopped"
    return [steps[i] for i in sorted(steps)]


def _count(text: str) -> int:
    head = text.split(" ", 1)[0]
    return int(head) if head.isdigit() else 0
