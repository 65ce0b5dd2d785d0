"""From rounds of base and head to a verdict that can say "no difference".

What disturbs a benchmark only ever adds time: a round a neighbour interrupted, or that waited for
the CPU, is several times slower, never a little faster (on a busy machine, often a third of the
rounds or more). The code's own cost is therefore in the *fastest* rounds of each side, and that is what is
compared (Chen & Revels, "Robust benchmarking in noisy environments", 2016, argue the same for the
minimum; the minimum alone has no interval, the fastest tenth has one):

* ``k`` is the lowest tenth of the pooled rounds of both sides, or the fewest that give an interval
  at the confidence asked for where that is more (4 to 6 at 95%);
* the estimate of head/base is the ratio of the medians of each side's ``k`` fastest rounds;
* its confidence interval inverts Mood's median test with the pooled ``k``-th smallest round in
  place of the pooled median (Mood, *Introduction to the Theory of Statistics*, 1950): for a
  ratio ``r``, divide the head's rounds by ``r``; under "head is base times ``r``" the number ``A``
  of head rounds among the ``k`` fastest of the pool is hypergeometric (``k`` drawn from ``n`` head
  and ``n`` base rounds), whatever the rounds' distribution. ``A >= a`` exactly when
  ``head(a) / r < base(k + 1 - a)`` (order statistics, 1-based), so the ratios not rejected at level
  ``1 - confidence`` run from ``head(c) / base(k + 1 - c)`` to ``head(k + 1 - c) / base(c)``, where
  ``c`` is the most values ``P(A < c) <= (1 - confidence) / 2`` allows.

Rounds above the pooled ``k``-th smallest never enter the verdict, so they may be disturbed by any
amount, on either side, unevenly: with 100 rounds a side, up to 80 of a side's rounds. No
resampling, so the same rounds always give the same verdict. The rounds were measured in pairs (base and head back to back, the
order alternating), so a machine that drifts visits both sides alike; that only concentrates ``A``
around ``k / 2`` and makes the interval err on the wide side.

The previous method (the Hodges–Lehmann estimate of the paired rounds' log-ratios with the interval
of the Wilcoxon signed-rank test), a paired sign test and a paired bootstrap were tried on the same
recorded rounds (``benchmarks/perf_detection.py --analyse --statistic ...``, docs/performance.md):
a round disturbed on one side ruins its pair, and with a third of the rounds disturbed their
intervals were 6–10 times as wide wherever there were more than 10 rounds. Kalibera & Jones,
"Rigorous benchmarking in reasonable time" (ISMM 2013), argue for ratios with intervals over single-number thresholds; Mytkowicz et al.,
"Producing wrong data without doing anything obviously wrong!" (ASPLOS 2009), for why a threshold
stays: layout effects between two processes are real differences of a few percent that no number of
rounds removes.

A regression is called only when the whole interval lies above ``1 + threshold``; an improvement
when it lies below ``1 / (1 + threshold)``; "within noise" when it lies between the two; otherwise
(the interval straddles a threshold, or there are fewer rounds than an interval needs) the answer
is "too few rounds". A benchmark that failed on either side is an error, never a regression.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from functools import cache

from bot.core.perf import BenchmarkSamples, Comparison, DriverReport, PerfThresholds, Verdict

FASTEST = 0.1  # the share of the pooled rounds compared; the rest may be disturbed at will

Interval = Callable[[list[float], list[float], float], tuple[float, float, float] | None]


@cache
def cut_count(n: int, k: int, confidence: float) -> int:
    """The most ``c`` with P(A < c) <= (1 - confidence) / 2, A ~ head rounds among k drawn of n + n."""
    alpha_half, total = (1 - confidence) / 2, math.comb(2 * n, k)
    below, c = 0, 0
    while c <= k and below + math.comb(n, c) * math.comb(n, k - c) <= alpha_half * total:
        below += math.comb(n, c) * math.comb(n, k - c)
        c += 1
    return c


@cache
def fastest_count(n: int, confidence: float) -> int | None:
    """How many of the 2n pooled rounds to compare: the lowest tenth, or the fewest with an interval."""
    for k in range(max(1, round(FASTEST * 2 * n)), n + 1):
        if cut_count(n, k, confidence) >= 1:
            return k
    return None


def ratio_interval(
    base: list[float], head: list[float], confidence: float
) -> tuple[float, float, float] | None:
    """(estimate, low, high) of head/base from the rounds' fastest; None when too few for an interval."""
    n = len(base)
    k = fastest_count(n, confidence) if n == len(head) and n else None
    if k is None:
        return None
    c = cut_count(n, k, confidence)
    x, y = sorted(map(math.log, base)), sorted(map(math.log, head))
    shift = statistics.median(y[:k]) - statistics.median(x[:k])
    return math.exp(shift), math.exp(y[c - 1] - x[k - c]), math.exp(y[k - c] - x[c - 1])


def compare(
    samples: BenchmarkSamples, limits: PerfThresholds, interval: Interval = ratio_interval
) -> Comparison:
    """The verdict on one benchmark's rounds; ``interval`` is how the ratio is estimated (benchmarks try others)."""
    common = {"kind": samples.kind, "name": samples.name, "rounds": len(samples.rounds)}
    if samples.error is not None:
        return Comparison(
            **common, verdict=Verdict.ERROR, reason=f"failed on {samples.error.side}: {samples.error.message}"
        )
    base = [r.base for r in samples.rounds]
    head = [r.head for r in samples.rounds]
    medians = {"base_median": statistics.median(base), "head_median": statistics.median(head)} if base else {}
    interval_found = interval(base, head, limits.confidence) if len(base) >= limits.min_rounds else None
    if interval_found is None:
        return Comparison(
            **common,
            **medians,
            verdict=Verdict.TOO_FEW_ROUNDS,
            reason=f"{len(base)} rounds; a verdict needs at least {limits.min_rounds}",
        )
    ratio, low, high = interval_found
    figures = {**common, **medians, "ratio": ratio, "low": low, "high": high}
    upper, lower = 1 + limits.threshold, 1 / (1 + limits.threshold)
    percent = f"{limits.threshold:.0%}"
    span = f"{low:.3f}–{high:.3f}"
    if low > upper:
        return Comparison(
            **figures, verdict=Verdict.REGRESSION, reason=f"slower by more than {percent}: {span}"
        )
    if high < lower:
        return Comparison(
            **figures, verdict=Verdict.IMPROVEMENT, reason=f"faster by more than {percent}: {span}"
        )
    if low >= lower and high <= upper:
        return Comparison(
            **figures, verdict=Verdict.WITHIN_NOISE, reason=f"any change is within {percent}: {span}"
        )
    return Comparison(
        **figures,
        verdict=Verdict.TOO_FEW_ROUNDS,
        reason=f"the interval {span} crosses the {percent} threshold: more rounds would tell",
    )


def compare_all(report: DriverReport, limits: PerfThresholds) -> list[Comparison]:
    return [compare(samples, limits) for samples in report.benchmarks]
