"""A run's log as the store keeps it and the run page reads it: ordered events, one step at a time.

A run's log is a sequence of events: a step starts (``step``, its name), prints (``out``, a piece
of its output, secrets already hidden), has part of its output cut by the caps (``cut``, saying how
much), and ends (``end``, its state as JSON); ``held`` says, while it runs, that its head is full and the rest
waits in memory as its tail. The events come from paritybot, never from the
step's output: a line of output that looks like a step header is only output. ``seq`` orders the
events of every run in one store; the run page resumes a live log from the last one it saw.
"""

from __future__ import annotations

import json
from datetime import datetime
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field

# The caps on what is kept of a step's output (characters): its first STEP_HEAD and last STEP_TAIL;
# and of a run's: RUN_MAX in all. A step that starts once the run's budget is spent keeps its last
# SPENT_TAIL characters only, so every step still shows how it ended.
STEP_HEAD = 1_000_000
STEP_TAIL = 1_000_000
RUN_MAX = 16_000_000
SPENT_TAIL = 64_000


class LogKind(StrEnum):
    STEP = "step"
    OUT = "out"
    CUT = "cut"
    END = "end"
    HELD = "held"  # the step's head is full: what follows is kept as its tail, written when it ends


class NewLogEvent(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    step: int = Field(ge=0, description="the step's index in the run, from 0")
    kind: LogKind
    text: str


class LogEvent(NewLogEvent):
    seq: int = Field(description="orders every run's events in one store")
    attempt: int
    at: datetime


class StepEnd(BaseModel):
    """What an ``end`` event says."""

    model_config = ConfigDict(extra="forbid")

    state: str
    exit_code: int | None = None
    duration_s: float = 0.0
    reason: str = Field("", description="why it did not pass, in one line (paritybot's words)")

    def text(self) -> str:
        return self.model_dump_json()

    @classmethod
    def parse(cls, text: str) -> StepEnd:
        try:
            return cls.model_validate(json.loads(text))
        except (ValueError, TypeError):
            return cls(state="error", reason="unreadable end of step")


class LogCaps(BaseModel):
    model_config = ConfigDict(frozen=True)

    step_head: int = STEP_HEAD
    step_tail: int = STEP_TAIL
    run_max: int = RUN_MAX
    spent_tail: int = SPENT_TAIL
