"""From paired rounds to a verdict that can say "no difference".

Each round timed base and head back to back (the order alternating), so the ratio ``head/base``
of one round is measured under the same machine state on both sides: drift, clock changes and
noisy neighbours that last longer than a round divide out. The rounds' log-ratios are therefore
what is compared, with distribution-free rank statistics, because benchmark noise is not normal
(it is skewed and has outliers: a round that lost the CPU is far off, never a little):

* the estimate is the Hodges–Lehmann estimator, the median of the Walsh averages
  ``(d_i + d_j) / 2`` of the log-ratios ``d`` (Hollander, Wolfe & Chicken, *Nonparametric
  Statistical Methods*, 3rd ed., 2014, §3.2);
* its confidence interval is the one that inverts the Wilcoxon signed-rank test: the k-th smallest
  and k-th largest Walsh averages, k from the exact null distribution of the signed-rank statistic
  (Hollander, Wolfe & Chicken §3.3; Bauer, "Constructing confidence sets using rank statistics",
  JASA 67, 1972). Its coverage holds for any continuous distribution symmetric about its centre,
  which the alternated order gives a no-op change by construction, and it needs no resampling, so
  the same rounds always give the same verdict.

A paired bootstrap of the ratio of medians (resampling whole rounds) was tried on the same rounds
(``benchmarks/perf_detection.py --analyse``): it found fewer of the slowdowns at the same threshold
and no fewer false alarms (docs/performance.md), and it needs a random generator, so the verdict
would depend on a seed. Kalibera & Jones, "Rigorous benchmarking in
reasonable time" (ISMM 2013), argue for ratios with intervals over single-number thresholds;
Mytkowicz et al., "Producing wrong data without doing anything obviously wrong!" (ASPLOS 2009), for
why a threshold stays: layout effects between two processes are real differences of a few percent
that no number of rounds removes.

A regression is called only when the whole interval lies above ``1 + threshold``; an improvement
when it lies below ``1 / (1 + threshold)``; "within noise" when it lies between the two; otherwise
(the interval straddles a threshold, or there are fewer rounds than a 95% interval needs) the
answer is "too few rounds". A benchmark that failed on either side is an error, never a regression.
"""

from __future__ import annotations

import math
import statistics
from functools import cache

from bot.core.perf import BenchmarkSamples, Comparison, DriverReport, PerfThresholds, Verdict

EXACT_UP_TO = 100  # rounds; beyond it the normal approximation of the signed-rank law is exact enough


@cache
def _signed_rank_counts(n: int) -> tuple[int, ...]:
    """counts[s]: how many of the 2**n sign patterns of ranks 1..n give a positive-rank sum of s."""
    counts = [1]
    for rank in range(1, n + 1):
        grown = counts + [0] * rank
        for total, ways in enumerate(counts):
            grown[total + rank] += ways
        counts = grown
    return tuple(counts)


def cut_count(n: int, confidence: float) -> int:
    """How many Walsh averages to cut at each end for a two-sided ``confidence`` interval; 0: none."""
    alpha_half = (1 - confidence) / 2
    if n <= EXACT_UP_TO:
        counts, total, below = _signed_rank_counts(n), 2**n, 0
        k = 0
        for ways in counts:
            below += ways
            if below / total > alpha_half:
                break
            k += 1
        return k
    z = statistics.NormalDist().inv_cdf(1 - alpha_half)
    mean, sd = n * (n + 1) / 4, math.sqrt(n * (n + 1) * (2 * n + 1) / 24)
    return max(0, math.floor(mean - z * sd + 0.5))


def walsh_averages(values: list[float]) -> list[float]:
    return sorted((a + b) / 2 for i, a in enumerate(values) for b in values[i:])


def ratio_interval(
    base: list[float], head: list[float], confidence: float
) -> tuple[float, float, float] | None:
    """(estimate, low, high) of head/base from paired rounds; None when too few rounds for an interval."""
    logs = [math.log(h / b) for b, h in zip(base, head, strict=True)]
    k = cut_count(len(logs), confidence)
    if k == 0:
        return None
    walsh = walsh_averages(logs)
    return math.exp(statistics.median(walsh)), math.exp(walsh[k - 1]), math.exp(walsh[-k])


def compare(samples: BenchmarkSamples, limits: PerfThresholds) -> Comparison:
    """The verdict on one benchmark's rounds."""
    common = {"kind": samples.kind, "name": samples.name, "rounds": len(samples.rounds)}
    if samples.error is not None:
        return Comparison(
            **common, verdict=Verdict.ERROR, reason=f"failed on {samples.error.side}: {samples.error.message}"
        )
    base = [r.base for r in samples.rounds]
    head = [r.head for r in samples.rounds]
    medians = {"base_median": statistics.median(base), "head_median": statistics.median(head)} if base else {}
    interval = ratio_interval(base, head, limits.confidence) if len(base) >= limits.min_rounds else None
    if interval is None:
        return Comparison(
            **common,
            **medians,
            verdict=Verdict.TOO_FEW_ROUNDS,
            reason=f"{len(base)} rounds; a verdict needs at least {limits.min_rounds}",
        )
    ratio, low, high = interval
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
