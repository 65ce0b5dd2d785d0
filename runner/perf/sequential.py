"""The interval of head/base over processes and rounds, and when to stop measuring a benchmark.

Standard library only, valid on Python 3.8: the driver imports it (injected as
``paritybot_perf_sequential.py``) to decide when a benchmark's answer is decisive, and paritybot's
verdict (``runner/perf/stats.py``) uses the same functions, so both read the rounds alike.

**Over processes.** Two processes running the same code differ steadily by a few percent (memory
layout, hash seeds, thread pools, CPU frequency); no number of rounds inside one process sees that.
So each *process* gives one summary, the log of its fastest rounds (the median of its fastest
quarter: what disturbs a round only ever adds time), and the interval compares the two sides'
processes: Yuen's two-sample test of trimmed means (the slowest and fastest ``TRIM`` of each
side's processes set aside, the spread taken from the winsorized rest, Welch's degrees of
freedom). Between-process variance is inside it because each summary carries its process's layout;
the rounds' own noise is inside it too; and a process a busy machine slowed in every one of its
few rounds is trimmed, not allowed to blow the interval wide.

**Within cycles.** A machine whose cores a neighbour shares runs the same code up to twice as
slowly for stretches of seconds, and no clock subtracts that. Such a stretch slows both sides
alike, but not every process alike: a pair that joined late, or whose turns fell in it, has its
fastest rounds in the slow stretch where another's are not. So where the driver says which
*cycle* (one turn of every pair taking turns, both sides) each round belongs to, every round is
first divided by the fastest round of its cycle: what lasts longer than a cycle falls out of
both sides, and a round's ratio to the other side's in the same cycle is kept.

**Repeated looks.** The driver looks at a benchmark's interval after a doubling schedule of
measured time (:func:`look_budgets`) and stops as soon as it is decisive. Each of the ``looks``
planned looks is held to ``alpha / looks`` (Bonferroni spending over the looks), so the chance
that *any* look's interval misses the true ratio stays at most ``alpha``, however the stopping
went — more processes joining after a look included: the interval reported, that of the look the
driver stopped at, misses it at most that often.
"""

from __future__ import annotations

import math

FASTEST = 0.25  # of each process's rounds: the rest may be disturbed at will
TRIM = 0.2  # of each side's processes, the slowest and the fastest: one disturbed process is no outlier
MIN_PROCESSES = 2  # a side, for a spread between processes
LOOKS = 4  # looks per benchmark: at 1/8, 1/4, 1/2 and all of its budget (the last may be extended)
FIRST_PAIRS = 4  # process pairs started at once where the run has few CPUs: see first_pairs


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


def within_cycles(rounds):
    """Each round divided by the fastest round (either side) of its cycle, where every round says
    its cycle (``(process, base, head, cycle)``); the rounds as they are otherwise."""
    if not rounds or any(len(r) < 4 or r[3] is None for r in rounds):
        return rounds
    fastest: dict = {}
    for _, base, head, cycle in rounds:
        fastest[cycle] = min(fastest.get(cycle, base), base, head)
    return [(p, base / fastest[c], head / fastest[c], c) for p, base, head, c in rounds]


def process_summaries(rounds):
    """Per side, per process, the log of its fastest rounds (the median of its fastest quarter),
    within their cycles (:func:`within_cycles`); ``rounds`` are ``(process, base seconds, head
    seconds[, cycle])``, base and head process ``k`` taking turns."""
    by_process: dict = {}
    for process, base, head, *_ in within_cycles(rounds):
        by_process.setdefault(process, ([], []))
        by_process[process][0].append(base)
        by_process[process][1].append(head)
    ordered = [by_process[p] for p in sorted(by_process)]
    return (
        [math.log(_fastest_median(bases)) for bases, _ in ordered],
        [math.log(_fastest_median(heads)) for _, heads in ordered],
    )


def _trimmed(values):
    """Yuen's trimmed mean of one side's process summaries, its squared error and kept count."""
    count = len(values)
    cut = int(TRIM * count)
    ordered = sorted(values)
    kept = ordered[cut : count - cut]
    winsorized = [kept[0]] * cut + kept + [kept[-1]] * cut
    centre = sum(winsorized) / count
    spread = sum((w - centre) ** 2 for w in winsorized) / (count - 1)
    return sum(kept) / len(kept), spread * (count - 1) / (len(kept) * (len(kept) - 1)), len(kept)


def estimate(rounds):
    """(log head/base, its standard error, degrees of freedom): Yuen's two-sample trimmed-mean
    comparison of the processes' summaries; None under 2 processes a side."""
    base, head = process_summaries(rounds)
    if len(base) < MIN_PROCESSES or len(head) < MIN_PROCESSES:
        return None
    (base_mean, base_var, base_kept), (head_mean, head_var, head_kept) = _trimmed(base), _trimmed(head)
    variance = base_var + head_var
    if variance <= 0:
        return head_mean - base_mean, 0.0, float(base_kept + head_kept - 2)
    # Welch–Satterthwaite over the trimmed samples.
    df = variance**2 / (base_var**2 / (base_kept - 1) + head_var**2 / (head_kept - 1))
    return head_mean - base_mean, math.sqrt(variance), df


def log_interval(found, alpha):
    """(estimate, low, high) of log head/base, two-sided at level ``1 - alpha``, from
    :func:`estimate`'s answer; None for None."""
    if found is None:
        return None
    mean, error, df = found
    half = t_quantile(alpha / 2.0, df) * error if error > 0 else 0.0
    return mean, mean - half, mean + half


def change_p_value(found):
    """Two-sided p-value of "no change" (a ratio of 1), from :func:`estimate`'s answer. The
    interval at level ``1 - alpha`` excludes 1 exactly when this is at most ``alpha``."""
    if found is None:
        return 1.0
    mean, error, df = found
    if error == 0:
        return 0.0 if mean != 0 else 1.0
    return min(1.0, 2.0 * t_tail(abs(mean) / error, df))


def answer(found, alpha, threshold):
    """What the interval at ``1 - alpha`` says, or None while it is undecided:

    * ``"regression"``: the whole interval is above 1 (slower, at the error promised) and the
      estimate is past ``1 + threshold`` (by more than the threshold) — as pyperf's ``compare_to``
      calls a change significant and at least ``--min-speed``;
    * ``"improvement"``: the same below;
    * ``"no change"``: the whole interval is within ±threshold.

    An interval that excludes 1 with the estimate inside the threshold, or that includes 1 and
    reaches past a threshold, is undecided: more rounds can still move it either way."""
    interval = log_interval(found, alpha)
    if interval is None:
        return None
    mean, low, high = interval
    bound = math.log1p(threshold)
    if low > 0 and mean >= bound:
        return "regression"
    if high < 0 and mean <= -bound:
        return "improvement"
    if -bound <= low and high <= bound:
        return "no change"
    return None


def decisive(found, alpha, threshold):
    """Whether the interval at ``1 - alpha`` gives an answer (:func:`answer`)."""
    return answer(found, alpha, threshold) is not None


def first_pairs(processes, cpus):
    """The process pairs started at once, of at most ``processes``: one process per CPU the run
    may use, and at least ``FIRST_PAIRS`` pairs. Where there are CPUs for them, the processes start
    side by side and the interval over processes is narrower from the first look (8 pairs against
    4 on the same cases: the median width narrower for five benchmarks of six, about halved for
    three); where there are few, each process more is a wait (on two CPUs, sixteen processes took
    2 s longer to start than eight), so more pairs start only for a benchmark the first leave
    undecided."""
    return max(1, min(processes, max(FIRST_PAIRS, cpus // 2)))


def look_budgets(max_time_s, looks=LOOKS):
    """Measured time (both sides) after which the driver looks: doubling up to ``max_time_s``."""
    return [max_time_s / 2 ** (looks - 1 - k) for k in range(looks)]
