#!/usr/bin/env python3
"""How often paritybot's interleaved A/B finds a slowdown, and how often it cries wolf, against
two separate pytest-benchmark runs compared with ``--benchmark-compare-fail``.

    python benchmarks/perf_detection.py [--trials 50] [--raw perf-trials.json]
    python benchmarks/perf_detection.py --analyse perf-trials.json     # tables again, no run

A sample project has three pytest-benchmark tests of different sizes (a few microseconds, about
half a millisecond, about 20 ms), each a loop of arithmetic. A *slowdown* case makes one of them
(turn by turn) do 2, 5, 10 or 20 % more loop iterations on head: injected work, not a sleep. A
*no-op* case changes a comment and a docstring only. Every trial builds fresh base and head
checkouts and measures them both ways, in alternating order from trial to trial:

* **A/B**: paritybot's step (``runner/perf``) through the host runner: discovery, both sides'
  pytest processes, interleaved rounds, then the verdict (``runner/perf/stats.py``).
* **separate**: ``pytest --benchmark-only --benchmark-save`` on base, then on head
  ``--benchmark-compare --benchmark-compare-fail=mean:5%`` (pytest-benchmark's defaults otherwise).

A detection is the slowed benchmark reported as a regression; a false alarm is any unchanged
benchmark (in no-op trials, and the two untouched ones in slowdown trials) reported as one. The
slowdowns are nominal: a call's fixed cost dilutes them a little, so the script also measures the
true ratio of each slowed variant once, with many interleaved rounds. The raw rounds of every trial
are saved (``--raw``), so other statistics can be tried on the same data (``--analyse``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
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

from runner.host import HostRunner
from runner.perf.models import DriverReport, PerfThresholds, Verdict
from runner.perf.stats import compare
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


def make_trial(workspace: Path, case: dict[str, Any]) -> None:
    write_project(workspace / "base", SIZES, "measured")
    head = dict(SIZES)
    if case["slow"]:
        head[case["target"]] = round(SIZES[case["target"]] * (1 + case["slow"]))
        note = "measured"
    else:
        note = "measured, with a comment changed"  # the no-op change
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


def cases() -> list[dict[str, Any]]:
    out = [{"case": "no-op", "slow": 0.0, "target": None}]
    for slow in SLOWDOWNS:
        out += [{"case": f"+{slow:.0%}", "slow": slow, "target": None}]
    return out


async def trials(count: int, perf_plan: PerfPlan, raw_path: Path | None) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = []
    targets = list(SIZES)
    all_cases = cases()
    for index in range(count * len(all_cases)):
        case = dict(all_cases[index % len(all_cases)])
        if case["slow"]:
            case["target"] = targets[(index // len(all_cases)) % len(targets)]
        workspace = Path(tempfile.mkdtemp(prefix="perf-trial-"))
        try:
            make_trial(workspace, case)
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
                **case,
                "ab_wall": ab_wall,
                "separate_wall": separate_wall,
                "separate_regressed": sorted(regressed),
                "report": report.model_dump(mode="json"),
            }
        )
        print(
            f"{index + 1}/{count * len(all_cases)} {case['case']:>6} {case['target'] or '':>6} "
            f"A/B {ab_wall:5.1f} s, separate {separate_wall:5.1f} s",
            file=sys.stderr,
            flush=True,
        )
        if raw_path:
            raw_path.write_text(json.dumps({"plan": perf_plan.model_dump(mode="json"), "trials": records}))
    return records


def ab_regressed(report: dict[str, Any], limits: PerfThresholds) -> tuple[set[str], int]:
    """Names called regressions, and how many benchmarks ended in an error."""
    parsed = DriverReport.model_validate(report)
    verdicts = [compare(b, limits) for b in parsed.benchmarks]
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


def analyse(records: list[dict[str, Any]], true_ratios: dict[str, float] | None = None) -> None:
    names = [BENCH_NAME.format(n) for n in SIZES]
    methods: dict[str, Any] = {}
    for t in THRESHOLDS:
        methods[f"A/B, threshold {t:.1%}"] = lambda r, t=t: ab_regressed(
            r["report"], PerfThresholds(threshold=t)
        )[0]
    methods["A/B, paired bootstrap 2%"] = lambda r: bootstrap_regressed(r["report"], 0.02)
    methods[f"separate, {COMPARE_FAIL}"] = lambda r: set(r["separate_regressed"])
    print(
        "\n| method | "
        + " | ".join(f"{c['case']} detected" for c in cases()[1:])
        + " | false alarms (benchmarks) | false alarms (no-op changes) |"
    )
    print("|---|" + "---|" * (len(cases()) + 1))
    for label, method in methods.items():
        detected = {c["case"]: [0, 0] for c in cases()[1:]}
        false_bench = [0, 0]
        false_change = [0, 0]
        for record in records:
            flagged = method(record)
            target = BENCH_NAME.format(record["target"]) if record["target"] else None
            if target:
                detected[record["case"]][0] += target in flagged
                detected[record["case"]][1] += 1
            else:
                false_change[0] += bool(flagged)
                false_change[1] += 1
            for name in names:
                if name != target:
                    false_bench[0] += name in flagged
                    false_bench[1] += 1
        cells = [rate(*detected[c["case"]]) for c in cases()[1:]]
        print(f"| {label} | " + " | ".join(cells) + f" | {rate(*false_bench)} | {rate(*false_change)} |")
    print("\nDetection by benchmark size (A/B at the default threshold, 2%):")
    limits = PerfThresholds(threshold=0.02)
    for size in SIZES:
        row = []
        for c in cases()[1:]:
            chosen = [r for r in records if r["case"] == c["case"] and r["target"] == size]
            hits = sum(BENCH_NAME.format(size) in ab_regressed(r["report"], limits)[0] for r in chosen)
            sep = sum(BENCH_NAME.format(size) in r["separate_regressed"] for r in chosen)
            row.append(f"{c['case']}: A/B {rate(hits, len(chosen))}, separate {rate(sep, len(chosen))}")
        print(f"- {size}: " + "; ".join(row))
    ab = [r["ab_wall"] for r in records]
    sep = [r["separate_wall"] for r in records]
    print(
        f"\nWall time per trial (median, 90th percentile): A/B {statistics.median(ab):.1f} s, "
        f"{statistics.quantiles(ab, n=10)[-1]:.1f} s; separate {statistics.median(sep):.1f} s, "
        f"{statistics.quantiles(sep, n=10)[-1]:.1f} s"
    )
    errors = sum(ab_regressed(r["report"], limits)[1] for r in records)
    rounds = [len(b["rounds"]) for r in records for b in r["report"]["benchmarks"]]
    widths = {}
    for size in SIZES:
        spans = []
        for r in records:
            for b in DriverReport.model_validate(r["report"]).benchmarks:
                c = compare(b, limits)
                if b.name == BENCH_NAME.format(size) and c.low and c.high:
                    spans.append(c.high / c.low - 1)
        widths[size] = statistics.median(spans) if spans else float("nan")
    print(
        f"Benchmarks ended in an error: {errors}; rounds per benchmark: median {statistics.median(rounds)}, "
        f"range {min(rounds)}–{max(rounds)}"
    )
    print(
        "Median width of the 95% interval (high/low - 1): "
        + ", ".join(f"{k} {v:.1%}" for k, v in widths.items())
    )
    if true_ratios:
        print(
            "True slowdowns (one long interleaved run each): "
            + ", ".join(f"{k} {v:.3f}" for k, v in true_ratios.items())
        )


async def true_ratios(perf_plan: PerfPlan) -> dict[str, float]:
    """Each slowed variant against base, with ten times the rounds: what the nominal slowdowns are."""
    out = {}
    long_plan = perf_plan.model_copy(update={"max_rounds": 300, "max_time_s": perf_plan.max_time_s * 10})
    for slow in SLOWDOWNS:
        workspace = Path(tempfile.mkdtemp(prefix="perf-true-"))
        try:
            write_project(workspace / "base", SIZES, "measured")
            write_project(
                workspace / "head", {k: round(v * (1 + slow)) for k, v in SIZES.items()}, "measured"
            )
            report, _ = await run_ab(workspace, long_plan)
        finally:
            shutil.rmtree(workspace, ignore_errors=True)
        for bench in report.benchmarks:
            ratios = [r.head / r.base for r in bench.rounds]
            size = bench.name.rsplit("_", 1)[-1]
            out[f"{size} +{slow:.0%}"] = statistics.median(ratios)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=50, help="per case (default 50)")
    parser.add_argument("--raw", type=Path, help="save every trial's rounds here (JSON)")
    parser.add_argument("--analyse", type=Path, help="print the tables of a saved --raw file and stop")
    parser.add_argument("--processes", type=int, help="A/B processes per side (default: paritybot's)")
    parser.add_argument("--max-time", type=float, help="A/B seconds per benchmark, both sides")
    args = parser.parse_args()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(40))
    if args.analyse:
        data = json.loads(args.analyse.read_text())
        analyse(data["trials"], data.get("true_ratios"))
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
    started = time.perf_counter()
    records = asyncio.run(trials(args.trials, perf_plan, args.raw))
    ratios = asyncio.run(true_ratios(perf_plan))
    if args.raw:
        args.raw.write_text(
            json.dumps({"plan": perf_plan.model_dump(mode="json"), "trials": records, "true_ratios": ratios})
        )
    analyse(records, ratios)
    print(f"\n{len(records)} trials in {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
