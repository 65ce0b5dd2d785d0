#!/usr/bin/env python3
"""How often paritybot's interleaved A/B finds a slowdown, and how often it cries wolf, against
two separate pytest-benchmark runs compared with ``--benchmark-compare-fail``.

    python benchmarks/perf_detection.py [--trials 50] [--raw perf-trials.json]
    python benchmarks/perf_detection.py --analyse perf-trials.json     # tables again, no run
    python benchmarks/perf_detection.py --analyse perf-trials.json --statistic hodges-lehmann
    python benchmarks/perf_detection.py --raw perf-trials.json --resume  # finish a stopped run

A sample project has three pytest-benchmark tests of different sizes (a few microseconds, about
half a millisecond, about 20 ms), each a loop of arithmetic. A *slowdown* makes a benchmark do 2,
5, 10 or 20 % more loop iterations on head: injected work, not a sleep. A *no-op change* changes a
comment and a docstring only. A *mixed change* slows the three benchmarks by three different levels
(0 among them), rotating so that each benchmark gets each level in turn: the benchmarks are
compared independently, so one run gives three samples. ``--trials N`` makes N no-op changes and
enough mixed changes for N samples of each slowdown; they alternate. Every change gets fresh base
and head checkouts, measured both ways, in alternating order from change to change:

* **A/B**: paritybot's step (``runner/perf``) through the host runner: both sides' pytest
  processes, interleaved rounds, then the verdict (``runner/perf/stats.py``).
* **separate**: ``pytest --benchmark-only --benchmark-save`` on base, then on head
  ``--benchmark-compare --benchmark-compare-fail=mean:5%`` (pytest-benchmark's defaults otherwise).

A detection is a slowed benchmark reported as a regression; a false alarm is an unchanged benchmark
reported as one (and, per change, a no-op change with any benchmark reported). A slowdown is
nominal: a call's fixed cost dilutes it a little; the median of the A/B estimates over all changes
says what it really was. The raw rounds of every run are saved (``--raw``), so other statistics can
be tried on the same data (``--analyse``, ``--statistic``): ``fastest`` is paritybot's
(``runner/perf/stats.py``), ``hodges-lehmann`` the one it used before, ``sign`` the median of the
paired log-ratios with the sign test's interval.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import structlog

from bot.core.perf import DriverReport, PerfThresholds, Verdict
from runner.backends.host import HostRunner
from runner.perf.stats import Interval, compare, ratio_interval
from runner.perf.step import PerfPlan, parse_results, perf_step

# Loop iterations per call: ~3 µs, ~0.5 ms, ~20 ms on this machine's CPython 3.11.
SIZES = {"tiny": 60, "medium": 12_000, "large": 450_000}
SLOWDOWNS = [0.02, 0.05, 0.10, 0.20]
THRESHOLDS = [0.01, 0.02, 0.025, 0.03, 0.05]
COMPARE_FAIL = "mean:5%"
BENCH_NAME = "tests/test_sample.py::test_{}"

SAMPLE = '''"""A sample project: {note}."""


def spin(n):
    total = 0
    for i in range(n):
        total += i * i % 7
    return total


{functions}
'''
TESTS = """import sample

{tests}
"""


def write_project(root: Path, sizes: dict[str, int], note: str) -> None:
    (root / "tests").mkdir(parents=True)
    functions = "\n\n".join(f"def {name}():\n    return spin({n})" for name, n in sizes.items())
    (root / "sample.py").write_text(SAMPLE.format(note=note, functions=functions))
    tests = "\n\n".join(
        f"def test_{name}(benchmark):\n    assert benchmark(sample.{name}) >= 0" for name in sizes
    )
    (root / "tests" / "test_sample.py").write_text(TESTS.format(tests=tests))


def make_trial(workspace: Path, slow: dict[str, float]) -> None:
    """Base, and a head whose benchmarks do ``slow[name]`` more work (all 0: the no-op change)."""
    write_project(workspace / "base", SIZES, "measured")
    head = {name: round(n * (1 + slow[name])) for name, n in SIZES.items()}
    note = "measured" if any(slow.values()) else "measured, with a comment changed"
    write_project(workspace / "head", head, note)


def plan(**overrides: Any) -> PerfPlan:
    settings: dict[str, Any] = {
        "sides": {"base": {"root": "base"}, "head": {"root": "head"}},
        "kinds": [{"kind": "pytest", "args": ["tests"]}],
        "timeout_s": 120,
    }
    return PerfPlan.model_validate(settings | overrides)


async def run_ab(workspace: Path, perf_plan: PerfPlan) -> tuple[DriverReport, float]:
    runner = HostRunner()
    started = time.perf_counter()
    result = await runner.run(perf_step(perf_plan), workspace)
    wall = time.perf_counter() - started
    await runner.close()
    return parse_results(result), wall


_REGRESSED = re.compile(r"^\s+(test_\w+) \(")


def run_separate(workspace: Path) -> tuple[set[str], float]:
    """Two pytest-benchmark runs; the names --benchmark-compare-fail reports as regressed."""
    storage = f"file://{workspace / 'storage'}"
    common = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--benchmark-only"]
    common += [f"--benchmark-storage={storage}", "tests"]
    started = time.perf_counter()
    subprocess.run(
        [*common, "--benchmark-save=base"], cwd=workspace / "base", capture_output=True, check=True
    )
    head = subprocess.run(
        [*common, "--benchmark-compare=0001", f"--benchmark-compare-fail={COMPARE_FAIL}"],
        cwd=workspace / "head",
        capture_output=True,
        text=True,
    )
    wall = time.perf_counter() - started
    text = head.stdout + head.stderr
    if head.returncode not in (0, 1) or "benchmark" not in text:
        raise SystemExit(f"pytest-benchmark failed ({head.returncode}):\n{text[-2000:]}")
    regressed = {m.group(1) for line in text.splitlines() if (m := _REGRESSED.match(line))}
    return {BENCH_NAME.format(n.removeprefix("test_")) for n in regressed}, wall


LEVELS = [0.0, *SLOWDOWNS]


def schedule(count: int) -> list[dict[str, float]]:
    """``count`` no-op changes, and enough mixed changes for ``count`` samples of each slowdown.

    A mixed change slows the three benchmarks by three different levels (one may be 0), rotating
    so that over five changes each benchmark gets each level once: each A/B run is then three
    independent samples. No-op and mixed changes alternate, three to five.
    """
    mixed_needed = -(-count * len(LEVELS) // len(SIZES))  # ceil(count / 3 per 5 changes)
    no_op = [dict.fromkeys(SIZES, 0.0) for _ in range(count)]
    mixed = [
        {name: LEVELS[(t + j) % len(LEVELS)] for j, name in enumerate(SIZES)} for t in range(mixed_needed)
    ]
    out = []
    while no_op or mixed:
        for take_no_op in (True, False, False, True, False, False, True, False):
            source = no_op if take_no_op else mixed
            if source:
                out.append(source.pop(0))
    return out


async def trials(
    count: int, perf_plan: PerfPlan, raw_path: Path | None, done: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """Run the changes of the schedule after the ``done`` ones (a run resumed from its raw file)."""
    records = list(done)
    plan_of_changes = schedule(count)
    for index, slow in enumerate(plan_of_changes):
        if index < len(records):
            continue
        workspace = Path(tempfile.mkdtemp(prefix="perf-trial-"))
        try:
            make_trial(workspace, slow)
            ab_first = index % 2 == 0
            if not ab_first:
                regressed, separate_wall = run_separate(workspace)
            report, ab_wall = await run_ab(workspace, perf_plan)
            if ab_first:
                regressed, separate_wall = run_separate(workspace)
        finally:
            shutil.rmtree(workspace, ignore_errors=True)
        records.append(
            {
                "slow": slow,
                "ab_wall": ab_wall,
                "separate_wall": separate_wall,
                "separate_regressed": sorted(regressed),
                "report": report.model_dump(mode="json"),
            }
        )
        change = ", ".join(f"{k} +{v:.0%}" for k, v in slow.items() if v) or "no-op"
        print(
            f"{index + 1}/{len(plan_of_changes)} {change}: A/B {ab_wall:5.1f} s, separate {separate_wall:5.1f} s",
            file=sys.stderr,
            flush=True,
        )
        if raw_path:
            raw_path.write_text(json.dumps({"plan": perf_plan.model_dump(mode="json"), "trials": records}))
    return records


def _tail_count(weights: list[int], confidence: float) -> int:
    """The most c with weights[0] + ... + weights[c - 1] <= (1 - confidence) / 2 of their sum."""
    allowed, below, c = (1 - confidence) / 2 * sum(weights), 0, 0
    while c < len(weights) and below + weights[c] <= allowed:
        below += weights[c]
        c += 1
    return c


def hodges_lehmann(
    base: list[float], head: list[float], confidence: float
) -> tuple[float, float, float] | None:
    """paritybot's previous method: the median of the Walsh averages of the paired log-ratios, with
    the interval of the Wilcoxon signed-rank test (exact null law; the recorded runs have <= 200 rounds)."""
    d = [math.log(h / b) for b, h in zip(base, head, strict=True)]
    counts = [1]  # counts[s]: sign patterns of the ranks 1..n whose positive ranks sum to s
    for rank in range(1, len(d) + 1):
        grown = counts + [0] * rank
        for total, ways in enumerate(counts):
            grown[total + rank] += ways
        counts = grown
    k = _tail_count(counts, confidence)
    if k == 0:
        return None
    walsh = sorted((a + b) / 2 for i, a in enumerate(d) for b in d[i:])
    return math.exp(statistics.median(walsh)), math.exp(walsh[k - 1]), math.exp(walsh[-k])


def sign_median(base: list[float], head: list[float], confidence: float) -> tuple[float, float, float] | None:
    """The median of the paired log-ratios, with the sign test's (binomial order statistics) interval."""
    d = sorted(math.log(h / b) for b, h in zip(base, head, strict=True))
    c = _tail_count([math.comb(len(d), i) for i in range(len(d) + 1)], confidence)
    if c == 0:
        return None
    return math.exp(statistics.median(d)), math.exp(d[c - 1]), math.exp(d[-c])


STATISTICS: dict[str, Interval] = {
    "fastest": ratio_interval,
    "hodges-lehmann": hodges_lehmann,
    "sign": sign_median,
}


def ab_regressed(report: dict[str, Any], limits: PerfThresholds, statistic: Interval) -> tuple[set[str], int]:
    """Names called regressions, and how many benchmarks ended in an error."""
    parsed = DriverReport.model_validate(report)
    verdicts = [compare(b, limits, statistic) for b in parsed.benchmarks]
    return {c.name for c in verdicts if c.verdict is Verdict.REGRESSION}, sum(
        c.verdict is Verdict.ERROR for c in verdicts
    )


def bootstrap_regressed(report: dict[str, Any], threshold: float, resamples: int = 2000) -> set[str]:
    """The alternative weighed: a paired bootstrap percentile interval of the ratio of medians."""
    import random

    rng = random.Random(1)
    out = set()
    for bench in DriverReport.model_validate(report).benchmarks:
        rounds = bench.rounds
        if bench.error or len(rounds) < 6:
            continue
        ratios = []
        for _ in range(resamples):
            pick = [rounds[rng.randrange(len(rounds))] for _ in rounds]
            ratios.append(statistics.median(r.head for r in pick) / statistics.median(r.base for r in pick))
        ratios.sort()
        if ratios[int(0.025 * resamples)] > 1 + threshold:
            out.add(bench.name)
    return out


def rate(hits: int, total: int) -> str:
    return f"{hits}/{total} = {hits / total:.0%}" if total else "–"


def analyse(records: list[dict[str, Any]], statistic: Interval) -> None:
    methods: dict[str, Any] = {}
    for t in THRESHOLDS:
        methods[f"A/B, threshold {t:.1%}"] = lambda r, t=t: ab_regressed(
            r["report"], PerfThresholds(threshold=t), statistic
        )[0]
    methods["A/B, paired bootstrap 2%"] = lambda r: bootstrap_regressed(r["report"], 0.02)
    methods[f"separate, {COMPARE_FAIL}"] = lambda r: set(r["separate_regressed"])
    no_op_changes = [r for r in records if not any(r["slow"].values())]
    print(
        f"\n{len(records)} changes ({len(no_op_changes)} no-op), {len(records) * len(SIZES)} benchmark comparisons\n"
    )
    header = " | ".join(f"+{s:.0%} detected" for s in SLOWDOWNS)
    print(f"| method | {header} | false alarms (unchanged benchmarks) | false alarms (no-op changes) |")
    print("|---|" + "---|" * (len(SLOWDOWNS) + 2))
    for label, method in methods.items():
        detected = {s: [0, 0] for s in SLOWDOWNS}
        false_bench = [0, 0]
        for record in records:
            flagged = method(record)
            for size, level in record["slow"].items():
                hit = BENCH_NAME.format(size) in flagged
                cell = detected[level] if level else false_bench
                cell[0] += hit
                cell[1] += 1
        false_change = sum(bool(method(r)) for r in no_op_changes)
        cells = [rate(*detected[s]) for s in SLOWDOWNS]
        print(
            f"| {label} | "
            + " | ".join(cells)
            + f" | {rate(*false_bench)} | {rate(false_change, len(no_op_changes))} |"
        )
    limits = PerfThresholds()
    print(f"\nBy benchmark size (A/B at the default threshold, {limits.threshold:.0%}; separate):")
    for size in SIZES:
        row = []
        for level in LEVELS:
            chosen = [r for r in records if r["slow"][size] == level]
            hits = sum(
                BENCH_NAME.format(size) in ab_regressed(r["report"], limits, statistic)[0] for r in chosen
            )
            sep = sum(BENCH_NAME.format(size) in r["separate_regressed"] for r in chosen)
            what = f"+{level:.0%}" if level else "unchanged (false alarms)"
            row.append(f"{what}: A/B {rate(hits, len(chosen))}, separate {rate(sep, len(chosen))}")
        print(f"- {size}: " + "; ".join(row))
    verdicts: dict[str, dict[str, int]] = {size: {} for size in SIZES}
    for r in records:
        for b in DriverReport.model_validate(r["report"]).benchmarks:
            v = compare(b, limits, statistic).verdict.value
            size = b.name.rsplit("_", 1)[-1]
            verdicts[size][v] = verdicts[size].get(v, 0) + 1
    print("Verdicts by size: " + "; ".join(f"{k}: {v}" for k, v in verdicts.items()))
    ab = [r["ab_wall"] for r in records]
    sep = [r["separate_wall"] for r in records]
    print(
        f"\nWall time per change (median, 90th percentile): A/B {statistics.median(ab):.1f} s, "
        f"{statistics.quantiles(ab, n=10)[-1]:.1f} s; separate {statistics.median(sep):.1f} s, "
        f"{statistics.quantiles(sep, n=10)[-1]:.1f} s; total A/B {sum(ab):.0f} s, separate {sum(sep):.0f} s"
    )
    errors = sum(ab_regressed(r["report"], limits, statistic)[1] for r in records)
    benches = [b for r in records for b in DriverReport.model_validate(r["report"]).benchmarks]
    for size in SIZES:
        mine = [b for b in benches if b.name == BENCH_NAME.format(size)]
        rounds = [len(b.rounds) for b in mine]
        spans = [c.high / c.low - 1 for b in mine if (c := compare(b, limits, statistic)).low and c.high]
        print(
            f"- {size}: rounds median {statistics.median(rounds)} (range {min(rounds)}–{max(rounds)}), "
            f"pairs run again median {statistics.median(b.preempted for b in mine)}, "
            f"95% interval width median {statistics.median(spans):.1%}"
        )
    print(f"Benchmarks ended in an error: {errors}")
    print("Measured slowdown (median over the changes of the A/B estimate for the slowed benchmark):")
    for size in SIZES:
        cells = []
        for level in SLOWDOWNS:
            ratios = [
                c.ratio
                for r in records
                if r["slow"][size] == level
                for b in DriverReport.model_validate(r["report"]).benchmarks
                if b.name == BENCH_NAME.format(size) and (c := compare(b, limits, statistic)).ratio
            ]
            cells.append(f"+{level:.0%} {statistics.median(ratios):.3f}" if ratios else f"+{level:.0%} –")
        print(f"- {size}: " + ", ".join(cells))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=50, help="samples per case (default 50)")
    parser.add_argument("--raw", type=Path, help="save every trial's rounds here (JSON)")
    parser.add_argument("--analyse", type=Path, help="print the tables of a saved --raw file and stop")
    parser.add_argument(
        "--resume", action="store_true", help="keep the changes already in --raw and run the rest"
    )
    parser.add_argument(
        "--statistic",
        choices=STATISTICS,
        default="fastest",
        help="how rounds become a ratio (default: paritybot's)",
    )
    parser.add_argument("--processes", type=int, help="A/B processes per side (default: paritybot's)")
    parser.add_argument("--max-time", type=float, help="A/B seconds per benchmark, both sides")
    args = parser.parse_args()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(40))
    statistic = STATISTICS[args.statistic]
    if args.analyse:
        data = json.loads(args.analyse.read_text())
        analyse(data["trials"], statistic)
        return
    overrides = {"processes": args.processes, "max_time_s": args.max_time}
    perf_plan = plan(**{k: v for k, v in overrides.items() if v is not None})
    print(
        f"machine: {os.cpu_count()} CPUs; A/B: {perf_plan.processes} processes per side, "
        f"{perf_plan.max_time_s} s per benchmark, "
        f"rounds of {perf_plan.round_time_s * 1000:.0f} ms, {perf_plan.warmup} warm-up; "
        f"separate: pytest-benchmark defaults, {COMPARE_FAIL}",
        flush=True,
    )
    done: list[dict[str, Any]] = []
    if args.resume and args.raw and args.raw.exists():
        saved = json.loads(args.raw.read_text())
        if saved["plan"] != perf_plan.model_dump(mode="json"):
            raise SystemExit(f"{args.raw} was measured with other settings; not resumed")
        done = saved["trials"]
    started = time.perf_counter()
    records = asyncio.run(trials(args.trials, perf_plan, args.raw, done))
    analyse(records, statistic)
    print(f"\n{len(records)} trials in {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
