"""The interval of head/base over processes and rounds, and when to stop measuring a benchmark.

Standard library only, valid on Python 3.8: the driver imports it (injected as
``paritybot_perf_sequential.py``) to decide when a benchmark's answer is decisive, and paritybot's
verdict (``runner/perf/stats.py``) uses the same functions, so both read the rounds alike.

**Over processes.** Two processes running the same code differ steadily by a few percent (memory
layout, hash seeds, thread pools, CPU frequency); no number of rounds inside one process pair sees
that. So each *pair of processes* (one base, one head, taking turns) gives one summary, the log of
the ratio of its sides' fastest rounds (the median of each side's fastest quarter: what disturbs a
round only ever adds time), and the interval is Student's t over those summaries: a per-cluster
summary, then a t interval across clusters. Between-process variance is inside it because each
summary carries its pair's layout; the rounds' own noise is inside it too.

**Repeated looks.** The driver looks at a benchmark's interval after a doubling schedule of
measured time (:func:`look_budgets`) and stops as soon as it is decisive. Each of the ``looks``
planned looks is held to ``alpha / looks`` (Bonferroni spending over the looks), so the chance
that *any* look's interval misses the true ratio stays at most ``alpha``, however the stopping
went: the interval reported, that of the look the driver stopped at, misses it at most that often.
"""

from __future__ import annotations

import math

FASTEST = 0.25  # of each side's rounds in one process pair: the rest may be disturbed at will
LOOKS = 4  # looks per benchmark: at 1/8, 1/4, 1/2 and all of its budget (the last may be extended)


def _betacf(a, b, x):
    """Continued fraction of the regularised incomplete beta function (Lentz's method)."""
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        for numerator in (
            m * (b - m) * x / ((a + m2 - 1.0) * (a + m2)),
            -(a + m) * (a + b + m) * x / ((a + m2) * (a + m2 + 1.0)),
        ):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-14:
            break
    return h


def _beta_inc(a, b, x):
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _betacf(a, b, x) / a
    return 1.0 - math.exp(log_front) * _betacf(b, a, 1.0 - x) / b


def t_tail(t, df):
    """P(T >= t) for Student's t with ``df`` degrees of freedom."""
    tail = 0.5 * _beta_inc(df / 2.0, 0.5, df / (df + t * t))
    return tail if t >= 0 else 1.0 - tail


def t_quantile(upper, df):
    """The ``t`` with P(T >= t) = ``upper`` (0 < upper < 1/2), by bisection."""
    low, high = 0.0, 1.0
    while t_tail(high, df) > upper:
        high *= 2.0
    for _ in range(200):
        middle = (low + high) / 2.0
        if t_tail(middle, df) > upper:
            low = middle
        else:
            high = middle
    return high


def _fastest_median(values):
    ordered = sorted(values)
    fastest = ordered[: max(1, round(FASTEST * len(ordered)))]
    middle = len(fastest) // 2
    return fastest[middle] if len(fastest) % 2 else (fastest[middle - 1] + fastest[middle]) / 2.0


def pair_summaries(rounds):
    """Per process pair, the log of head/base of its fastest rounds; ``rounds`` are
    ``(process, base seconds, head seconds)``."""
    by_pair: dict = {}
    for process, base, head in rounds:
        by_pair.setdefault(process, ([], []))
        by_pair[process][0].append(base)
        by_pair[process][1].append(head)
    return [
        math.log(_fastest_median(heads)) - math.log(_fastest_median(bases))
        for bases, heads in (by_pair[p] for p in sorted(by_pair))
    ]


def _spread(summaries):
    count = len(summaries)
    mean = sum(summaries) / count
    variance = sum((s - mean) ** 2 for s in summaries) / (count - 1)
    return mean, math.sqrt(variance / count)


def log_interval(summaries, alpha):
    """(estimate, low, high) of log head/base, two-sided at level ``1 - alpha``; None under 2 pairs."""
    if len(summaries) < 2:
        return None
    mean, error = _spread(summaries)
    half = t_quantile(alpha / 2.0, len(summaries) - 1) * error if error > 0 else 0.0
    return mean, mean - half, mean + half


def change_p_value(summaries, threshold):
    """Two-sided p-value of "the change is past the threshold" (a regression or an improvement):
    twice the smaller of the one-sided p-values of log ratio <= log(1 + threshold) and of
    log ratio >= -log(1 + threshold). The interval at level ``1 - alpha`` lies wholly past one
    threshold exactly when this is at most ``alpha``."""
    if len(summaries) < 2:
        return 1.0
    mean, error = _spread(summaries)
    bound = math.log1p(threshold)
    if error == 0:
        return 0.0 if abs(mean) > bound else 1.0
    df = len(summaries) - 1
    slower = t_tail((mean - bound) / error, df)
    faster = t_tail((-bound - mean) / error, df)
    return min(1.0, 2.0 * min(slower, faster))


def decisive(summaries, alpha, threshold):
    """Whether the interval at ``1 - alpha`` is wholly inside ±threshold or wholly past one."""
    found = log_interval(summaries, alpha)
    if found is None:
        return False
    _, low, high = found
    bound = math.log1p(threshold)
    return (-bound <= low and high <= bound) or low > bound or high < -bound


def look_budgets(max_time_s, looks=LOOKS):
    """Measured time (both sides) after which the driver looks: doubling up to ``max_time_s``."""
    return [max_time_s / 2 ** (looks - 1 - k) for k in range(looks)]
