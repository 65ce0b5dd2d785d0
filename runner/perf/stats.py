"""From the rounds of base and head to verdicts a maintainer can leave on.

Four things make an interval trustworthy here, each in ``runner/perf/sequential.py`` (shared with
the driver, which stops measuring a benchmark once its answer is decisive):

* **Over processes.** Each process gives one summary, the log of its fastest rounds; the interval
  compares the two sides' processes with Yuen's trimmed-mean test, so the steady few-percent
  differences between two processes of the same code (layout, hash seeds, thread pools) are inside
  it, not mistaken for a change, and one process a busy machine slowed throughout is trimmed.
* **Within cycles.** Each round is first divided by the fastest round of its cycle (one turn of
  every pair), so a stretch in which a neighbour slows the whole machine falls out of both sides.
* **Repeated looks.** The driver looks up to ``looks`` times; each look is held to ``1 / looks`` of
  the benchmark's error (Bonferroni spending), so stopping early keeps the error rate.
* **Many benchmarks.** A run's comparisons are one family: the Benjamini–Hochberg procedure at
  ``q = 1 - confidence`` decides which are a change (a regression or an improvement), and every
  interval is shown at the level it implies, ``1 - q·R/m`` (Benjamini & Yekutieli's
  false-coverage-rate intervals; ``R`` changes among ``m`` benchmarks, ``R = 1`` when there is
  none). When nothing changed, BH's false-discovery rate is its family-wise error: a change that
  touches no benchmark is flagged at most ``1 - confidence`` of the time however many benchmarks
  the suite has (the benchmarks' tests are one-sided and positively dependent, where BH holds).

A regression is called when the whole interval lies above 1 (slower, at the error promised) and the
estimate is past ``1 + threshold`` (by more than the threshold), an improvement the same below,
"no change" when the whole interval is within ±threshold; any other interval is "inconclusive",
with the rounds and processes it rests on; "too few rounds" means just that.
A benchmark that failed on either side is an error, never a regression.
"""

from __future__ import annotations

import math
import statistics

from bot.core.perf import BenchmarkSamples, Comparison, DriverReport, PerfThresholds, Verdict
from runner.perf.sequential import MIN_PROCESSES, answer, change_p_value, estimate, log_interval


def estimate_of(samples: BenchmarkSamples) -> tuple[float, float, float] | None:
    return estimate([(r.process, r.base, r.head, r.cycle) for r in samples.rounds])


def compare(samples: BenchmarkSamples, limits: PerfThresholds, alpha: float | None = None) -> Comparison:
    """The verdict on one benchmark at error ``alpha`` (default: ``1 - confidence``, a family of one)."""
    alpha = 1 - limits.confidence if alpha is None else alpha
    common = {"kind": samples.kind, "name": samples.name, "rounds": len(samples.rounds)}
    if samples.error is not None:
        return Comparison(
            **common,
            verdict=Verdict.ERROR,
            reason=f"failed on {samples.error.side}: {samples.error.message}",
            failed_on=samples.error.side,
        )
    base = [r.base for r in samples.rounds]
    head = [r.head for r in samples.rounds]
    medians = {"base_median": statistics.median(base), "head_median": statistics.median(head)} if base else {}
    pairs = len({r.process for r in samples.rounds})
    where = f"{len(base)} rounds in {pairs} process pair{'' if pairs == 1 else 's'}"
    enough = len(base) >= limits.min_rounds
    estimated = estimate_of(samples) if enough else None
    found = log_interval(estimated, alpha / samples.looks)
    if found is None:
        return Comparison(
            **common,
            **medians,
            processes=pairs,
            verdict=Verdict.TOO_FEW_ROUNDS,
            reason=f"{where}; a verdict needs at least {limits.min_rounds} rounds in {MIN_PROCESSES} pairs",
        )
    ratio, low, high = (math.exp(v) for v in found)
    figures = {**common, **medians, "ratio": ratio, "low": low, "high": high, "processes": pairs}
    band = f"±{limits.threshold:.0%}"
    span = f"interval {low:.3f}–{high:.3f}"
    said = answer(estimated, alpha / samples.looks, limits.threshold)
    if said in ("regression", "improvement"):
        verdict = Verdict.REGRESSION if said == "regression" else Verdict.IMPROVEMENT
        return Comparison(
            **figures, verdict=verdict, reason=_why_a_change(ratio, low, high, limits.threshold)
        )
    if said == "no change":
        return Comparison(**figures, verdict=Verdict.NO_CHANGE, reason=f"{span} within {band}")
    return Comparison(
        **figures,
        verdict=Verdict.INCONCLUSIVE,
        reason=f"{span} straddles {band}{_what_it_may_be(low, high)}; {where}; "
        "rerun with a larger budget (`max_time_s`, `processes`)",
    )


def _why_a_change(ratio: float, low: float, high: float, threshold: float) -> str:
    span, band = f"interval {low:.3f}–{high:.3f}", f"{threshold:.0%}"
    if low > 1 + threshold:
        return f"{span}, wholly above +{band}"
    if high < 1 / (1 + threshold):
        return f"{span}, wholly below −{band}"
    # Certainly a change; past the threshold at the best estimate, not at every point of the interval.
    slower = ratio > 1
    size = ratio - 1 if slower else 1 - ratio
    return (
        f"{span}, wholly {'above' if slower else 'below'} 1: {'slower' if slower else 'faster'} "
        f"by {size:.1%} at the best estimate, past {'+' if slower else '−'}{band}"
    )


def _what_it_may_be(low: float, high: float) -> str:
    """An undecided interval that excludes 1 is a real change, of a size not known well enough."""
    if low > 1:
        return ", wholly above 1: slower, by less than the threshold at the best estimate"
    if high < 1:
        return ", wholly below 1: faster, by less than the threshold at the best estimate"
    return ""


def family_alpha(p_values: list[float], q: float) -> float:
    """The error each comparison is held to under Benjamini–Hochberg at ``q``: ``q·R/m``."""
    m = len(p_values)
    if not m:
        return q
    ordered = sorted(p_values)
    found = max((rank for rank in range(1, m + 1) if ordered[rank - 1] <= q * rank / m), default=0)
    return q * max(found, 1) / m


def compare_all(report: DriverReport, limits: PerfThresholds) -> list[Comparison]:
    """Every benchmark's verdict, the run's comparisons held together (Benjamini–Hochberg)."""
    measured = [s for s in report.benchmarks if s.error is None]
    # A look-adjusted p-value per benchmark: the interval of its final look is at alpha / looks.
    p_values = [min(1.0, s.looks * change_p_value(estimate_of(s))) for s in measured]
    alpha = family_alpha(p_values, 1 - limits.confidence)
    return [compare(samples, limits, alpha) for samples in report.benchmarks]
