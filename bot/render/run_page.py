"""What the run page shows of each step's log: pure, from the steps folded out of the store.

A long log's first view is its first ``HEAD_LINES`` and last ``TAIL_LINES`` lines, with the lines
between a click away (served ``LINES_BATCH`` at a time), so a 100,000-line log opens fast. Lines
keep their numbers (a link per line), the first error line of a failed step is marked, and where
the caps left output out the page says how much.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from bot.core.perf import BenchmarkSamples
from bot.render.run_steps import StepView
from bot.render.terminal import Line, LogText

HEAD_LINES = 300
TAIL_LINES = 700
LINES_BATCH = 5000


@dataclass
class StepLog:
    step: StepView
    head: list[Line] = field(default_factory=list)
    hidden: tuple[int, int] | None = None  # first and last line numbers not in the first view
    tail: list[Line] = field(default_factory=list)
    total_lines: int = 0
    cut_after: int | None = None  # the line after which the caps cut output out
    error_line: int | None = None  # the first error line, marked when the step failed

    @property
    def anchor(self) -> str:
        return f"step-{self.step.index}"


def log_text(step: StepView) -> tuple[LogText, int | None]:
    """The step's kept output as one text, and the line after which the caps cut output out."""
    final = step.state != "running"
    if step.cut_at is None:
        return LogText(step.output, final=final), None
    head = step.output[: step.cut_at]
    if head and not head.endswith("\n"):
        head += "\n"  # what the caps cut ends the line they cut into
    return LogText(head + step.output[step.cut_at :], final=final), head.count("\n")


def step_log(step: StepView, head: int = HEAD_LINES, tail: int = TAIL_LINES) -> StepLog:
    text, cut_after = log_text(step)
    total = text.count
    view = StepLog(step=step, total_lines=total, cut_after=cut_after)
    view.error_line = text.first_error() if step.failed else None
    if total <= head + tail:
        view.head = text.lines(1, total)
        return view
    tail_start = total - tail + 1
    if view.error_line is not None and head < view.error_line < tail_start:
        # The error line must be on the page to be scrolled to: the tail starts just before it.
        tail_start = max(view.error_line - 20, head + 1)
    view.head, view.tail = text.lines(1, head), text.lines(tail_start, total)
    view.hidden = (head + 1, tail_start - 1) if tail_start > head + 1 else None
    return view


def lines_between(step: StepView, first: int, last: int) -> list[Line]:
    """Lines ``first`` to ``last`` (1-based, inclusive, at most LINES_BATCH) of the step's log."""
    text, _ = log_text(step)
    return text.lines(first, min(last, first + LINES_BATCH - 1))


@dataclass
class Chart:
    """One benchmark's rounds as two polylines (base, head) in a WIDTH × HEIGHT box."""

    name: str
    base: str
    head: str
    top: float  # seconds at the top of the box


CHART_WIDTH, CHART_HEIGHT = 480, 120


def rounds_chart(samples: BenchmarkSamples) -> Chart | None:
    rounds = samples.rounds
    if not rounds:
        return None
    top = max(max(r.base, r.head) for r in rounds) * 1.1
    step = CHART_WIDTH / max(len(rounds) - 1, 1)

    def points(values: list[float]) -> str:
        return " ".join(
            f"{i * step:.1f},{CHART_HEIGHT - v / top * CHART_HEIGHT:.1f}" for i, v in enumerate(values)
        )

    return Chart(samples.name, points([r.base for r in rounds]), points([r.head for r in rounds]), top)


def run_page_url(public_url: str | None, job_id: str) -> str | None:
    """``{public_url}/runs/{job_id}``; None when `serve` has no public URL."""
    return None if not public_url else f"{public_url.rstrip('/')}/runs/{job_id}"
