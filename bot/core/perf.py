"""Performance: what the benchmark driver reports and what paritybot concludes from it.

:class:`DriverReport` is the driver's output file (``runner/perf/driver_script.py``), validated
with caps, since the pull request's code ran beside the driver; :class:`Comparison` is the verdict
for one benchmark (``runner/perf/stats.py``), which the report renders.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from bot.core.config import PerformanceSettings, PerfTrigger

MAX_BENCHMARKS = 500
MAX_ROUNDS = 1000
MAX_NAME = 300
MAX_MESSAGE = 2000

BenchmarkKind = Literal["pytest", "asv", "command"]


class Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Side(StrEnum):
    BASE = "base"
    HEAD = "head"


class Round(Model):
    """One round: the time per call on each side, and which side ran first."""

    base: float = Field(gt=0, allow_inf_nan=False)
    head: float = Field(gt=0, allow_inf_nan=False)
    first: Side
    process: int = Field(0, ge=0, description="which pair of processes (one per side) ran it")
    cycle: int | None = Field(
        None, ge=0, le=1_000_000, description="the turn of every pair it was part of: see within_cycles"
    )


class BenchmarkError(Model):
    side: Side
    message: str = Field(max_length=MAX_MESSAGE)


class BenchmarkSamples(Model):
    """One benchmark's rounds, both sides, as measured in one run."""

    kind: BenchmarkKind
    name: str = Field(min_length=1, max_length=MAX_NAME)
    unit: Literal["s"] = "s"
    rounds: list[Round] = Field(default_factory=list, max_length=MAX_ROUNDS)
    warmup: int = Field(0, ge=0, description="rounds run first and discarded")
    iterations: int | None = Field(None, ge=1, description="calls per round on each side")
    preempted: int = Field(
        0, ge=0, description="round pairs run again because the scheduler took the CPU from a side"
    )
    clock: Literal["wall", "cpu", "cuda"] = Field(
        "wall", description="what the rounds were timed with: see choose_clock in runner/perf/worker.py"
    )
    looks: int = Field(
        1, ge=1, le=16, description="looks the driver planned; each is held to 1/looks of the error"
    )
    error: BenchmarkError | None = None


class KindError(Model):
    """A kind of benchmark that could not be listed on one side (the suite does not import)."""

    kind: BenchmarkKind
    side: Side
    message: str = Field(max_length=MAX_MESSAGE)


class Discovered(Model):
    only_base: list[str] = Field(default_factory=list, max_length=MAX_BENCHMARKS)
    only_head: list[str] = Field(default_factory=list, max_length=MAX_BENCHMARKS)


class DriverReport(Model):
    version: Literal[1]
    cpus: list[int] | None = Field(None, description="the CPUs the run was pinned to")
    pin_error: str | None = Field(None, max_length=MAX_MESSAGE, description="why pinning failed")
    gpu: str | None = Field(None, description="the device the run was pinned to, if any")
    wall_s: float = Field(ge=0)
    benchmarks: list[BenchmarkSamples] = Field(default_factory=list, max_length=MAX_BENCHMARKS)
    errors: list[KindError] = Field(default_factory=list, max_length=10)
    discovered: dict[BenchmarkKind, Discovered] = Field(default_factory=dict)
    warnings: list[str] = Field(
        default_factory=list,
        max_length=20,
        description="what makes the comparison doubtful: a side that imported its code from elsewhere",
    )
    phases: dict[Literal["start", "set_up", "measure", "grow", "finish"], float] = Field(
        default_factory=dict, description="where the run's wall time went, seconds per phase"
    )
    users: dict[Side, int] = Field(
        default_factory=dict, description="the user each side's processes ran as, when each had its own"
    )
    same_user: str | None = Field(
        None, max_length=MAX_MESSAGE, description="why both sides ran as the run's own user"
    )
    tampered: str | None = Field(
        None, max_length=MAX_MESSAGE, description="why the comparison is refused: the reference changed"
    )


class Verdict(StrEnum):
    REGRESSION = "regression"
    IMPROVEMENT = "improvement"
    NO_CHANGE = "no change"
    INCONCLUSIVE = "inconclusive"
    TOO_FEW_ROUNDS = "too few rounds"
    ERROR = "error"


class PerfThresholds(Model):
    """How sure and how large a change must be before it is called one."""

    threshold: float = Field(
        0.03,
        gt=0,
        lt=10,
        description="a regression is a ratio head/base whose whole interval is above 1 and whose "
        "estimate is above 1 + threshold; an improvement the same below 1 and 1 / (1 + threshold)",
    )
    confidence: float = Field(
        0.99,
        gt=0.5,
        lt=1,
        description="of the run's verdicts together: a change that touches no benchmark is called a "
        "regression or an improvement at most 1 - confidence of the time",
    )
    min_rounds: int = Field(
        6, ge=6, description="fewer paired rounds than this give no verdict, whatever the interval"
    )


class Comparison(Model):
    """The verdict on one benchmark, with the figures it rests on."""

    kind: BenchmarkKind
    name: str
    verdict: Verdict
    reason: str = Field(description="one line a user understands: why this verdict")
    rounds: int = Field(0, description="paired rounds measured (warm-up excluded)")
    processes: int = Field(0, description="process pairs the rounds came from")
    base_median: float | None = Field(None, description="seconds per call, median over rounds")
    head_median: float | None = None
    ratio: float | None = Field(
        None, description="head/base: over the process pairs, of each side's fastest rounds"
    )
    low: float | None = Field(None, description="the interval's lower end, as a ratio")
    high: float | None = None
    failed_on: Side | None = Field(None, description="with an error: the side whose benchmark crashed")


class Outcome(Model):
    """What the ``paritybot / performance`` check run concludes, and its title."""

    conclusion: Literal["success", "neutral", "failure"]
    title: str


def outcome(comparisons: list[Comparison], *, threshold: float, blocking: bool) -> Outcome:
    """Failure only for a significant regression past the threshold or a crash on the head, and only when it blocks.

    A regression or crash that does not block is neutral, named in the title; significant
    improvements with neither are a success; anything else (no change, inconclusive, too few rounds,
    a crash on the base) is neutral.
    """
    count = {v: sum(c.verdict is v for c in comparisons) for v in Verdict}
    percent = f"{threshold:.0%}"
    crashed = crashed_on_head(comparisons)
    # A benchmark the change breaks is worse than a slower one: it must never pass as "an error".
    blocking_ones = [_crash_title(crashed)] if crashed else []
    if count[Verdict.REGRESSION]:
        blocking_ones.append(f"{_n(count[Verdict.REGRESSION], 'benchmark')} slower by more than {percent}")
    if blocking_ones:
        title = "; ".join(blocking_ones)
        if blocking:
            return Outcome(conclusion="failure", title=title)
        return Outcome(conclusion="neutral", title=f"{title} (not blocking)")
    notes = [
        f"{_n(count[v], 'benchmark')} {v.value}"
        for v in (Verdict.INCONCLUSIVE, Verdict.TOO_FEW_ROUNDS, Verdict.ERROR)
        if count[v]
    ]
    if count[Verdict.IMPROVEMENT]:
        faster = f"{_n(count[Verdict.IMPROVEMENT], 'benchmark')} faster by more than {percent}"
        return Outcome(conclusion="success", title="; ".join([faster, *notes]))
    if not comparisons:
        return Outcome(conclusion="neutral", title="no benchmark to compare")
    return Outcome(conclusion="neutral", title="; ".join([f"no change beyond {percent}", *notes]))


def crashed_on_head(comparisons: list[Comparison]) -> list[Comparison]:
    """The benchmarks that ran on the base but crashed on the head: the change broke them."""
    return [c for c in comparisons if c.verdict is Verdict.ERROR and c.failed_on is Side.HEAD]


def _crash_title(crashed: list[Comparison]) -> str:
    first = crashed[0]
    more = f" and {_n(len(crashed) - 1, 'other')}" if len(crashed) > 1 else ""
    return f"{_n(len(crashed), 'benchmark')} crashed on head: {first.name}{more} ({first.reason[:200]})"


def _n(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


class PerformanceResult(Model):
    """A run's comparison, as the summary and the ``paritybot / performance`` check run show it."""

    trigger: str = Field(description="why it ran: the label, the command, or every pull request")
    threshold: float
    confidence: float
    blocking: bool
    comparisons: list[Comparison] = Field(default_factory=list, max_length=MAX_BENCHMARKS)
    charted: list[BenchmarkSamples] = Field(
        default_factory=list, max_length=10, description="the rounds of the regressions, for their charts"
    )
    problems: list[str] = Field(
        default_factory=list, description="a kind that could not be listed on a side, doubtful imports"
    )
    error: str | None = Field(None, description="why no comparison came back, in one line")
    rerun: str = Field("", description="the command that repeats the comparison locally")
    selected: bool = Field(False, description="only the benchmarks the change can affect ran")
    why: list[str] = Field(
        default_factory=list,
        max_length=30,
        description="with `selected`: why these benchmarks (or none) were chosen, a line per file or note",
    )


def perf_trigger(
    settings: PerformanceSettings, environment: str, labels: list[str], asked: bool
) -> tuple[PerfTrigger, str] | None:
    """Which of the config's ``when`` makes this run compare benchmarks, and why in words; or None.

    ``asked`` is ``/retest-gpu perf``. A command or a label asks for every benchmark; every-pr
    runs only the benchmarks the change can affect (the pipeline narrows it).
    """
    if not settings.enabled():
        return None
    if settings.environments and environment not in settings.environments:
        return None
    if asked and "command" in settings.when:
        return "command", "asked for with `/retest-gpu perf`"
    if settings.label in labels and "label" in settings.when:
        return "label", f"the pull request has the label `{settings.label}`"
    if "every-pr" in settings.when:
        return "every-pr", "every pull request: the benchmarks the change can affect"
    return None
