#!/usr/bin/env python3
"""How often paritybot's A/B finds a slowdown, how often it cries wolf, and how long it takes,
against two separate pytest-benchmark runs compared with ``--benchmark-compare-fail``.

    python benchmarks/perf_detection.py [--trials 15] [--raw perf-trials.json] [--minutes 30]
        [--levels 0.05] [--projects loops,arrays] [--changes mixed,A/A]
    python benchmarks/perf_detection.py --analyse perf-trials.json     # the tables again, no run

The corpus is generated here, never seen by paritybot before: two small projects of three
pytest-benchmark tests each, of different sizes —

* ``loops`` (pure Python): about 3 µs, 0.5 ms and 20 ms of arithmetic loops;
* ``arrays`` (numpy): a dot product of a few µs, a cumulative sum of about 0.5 ms and a sort of
  about 15 ms.

A *slowdown* makes one benchmark 2, 5, 10 or 20% slower on head by more work (more loop iterations,
longer arrays: work, not a sleep), sized at the start by timing base and head interleaved in one
process (:func:`calibrate`: time is not proportional to work), the effect so measured saved with
each case. Per trial and project there are three cases, in random order: a
*mixed* change slows the three benchmarks by three different levels (0 among them, rotating, so
each benchmark gets each level in turn), a *no-op* change edits a comment, and an *A/A* case
compares base with itself. Every case gets fresh checkouts and is measured both ways, the order
alternating: paritybot's step (``runner/perf``, through the host runner, with its defaults) and
``pytest --benchmark-only --benchmark-save`` on base then ``--benchmark-compare
--benchmark-compare-fail=mean:5%`` on head. The load average is recorded with every case.

A detection is a slowed benchmark called a regression; a false alarm is an unchanged benchmark
called a regression *or an improvement* (and, per change, a no-op or A/A case with any). The raw
reports are saved (``--raw``) so the tables can be printed again (``--analyse``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
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
from runner.perf.stats import compare_all
from runner.perf.step import PerfPlan, parse_results, perf_step

SLOWDOWNS = [0.02, 0.05, 0.10, 0.20]
LEVELS = [0.0, *SLOWDOWNS]
COMPARE_FAIL = "mean:5%"
FLAGGED = (Verdict.REGRESSION, Verdict.IMPROVEMENT)

# name → (work per call, the statement); sizes chosen for the figures in the module's docstring.
PROJECTS: dict[str, dict[str, tuple[int, str]]] = {
    "loops": {"tiny": (60, "spin({n})"), "medium": (12_000, "spin({n})"), "large": (450_000, "spin({n})")},
    "arrays": {
        "dot": (2_000, "float(np.dot(VEC[:{n}], VEC[:{n}]))"),
        "cumsum": (150_000, "float(np.cumsum(VEC[:{n}])[-1])"),
        "sort": (400_000, "float(np.sort(VEC[:{n}])[0])"),
    },
}
MODULE = '''"""A sample project: {note}."""
import numpy as np

VEC = np.random.default_rng(0).random(600_000)


def spin(n):
    total = 0
    for i in range(n):
        total += i * i % 7
    return total


{functions}
'''


def write_project(root: Path, project: str, work: dict[str, int], note: str) -> None:
    """The project with each benchmark doing ``work`` (its size; the base's where not named)."""
    (root / "tests").mkdir(parents=True)
    functions = []
    for name, (n, statement) in PROJECTS[project].items():
        functions.append(f"def {name}():\n    return {statement.format(n=work.get(name, n))}")
    (root / "sample.py").write_text(MODULE.format(note=note, functions="\n\n\n".join(functions)))
    tests = "\n\n".join(
        f"def test_{name}(benchmark):\n    assert benchmark(sample.{name}) is not None"
        for name in PROJECTS[project]
    )
    (root / "tests" / "test_sample.py").write_text(f"import sample\n\n\n{tests}\n")


def _function(project: str, name: str, n: int) -> Any:
    statement = PROJECTS[project][name][1].format(n=n)
    namespace: dict[str, Any] = {}
    exec(MODULE.format(note="calibrated", functions=f"def f():\n    return {statement}"), namespace)
    return namespace["f"]


def interleaved_ratio(base: Any, head: Any, seconds: float = 3.0) -> float:
    """head/base in one process, blocks of calls alternating (the side first alternating too):
    the true effect of a change, with no between-process variance in it. Each side's fastest
    block is its time (as timeit reads its repeats): a block another process interrupted is only
    ever slower, so the minimum is what the code costs even on a busy machine."""
    started = time.perf_counter()
    base()
    calls = max(1, int(0.003 / max(time.perf_counter() - started, 1e-7)))
    timed: dict[str, list[float]] = {"base": [], "head": []}
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline or len(timed["base"]) < 30:
        first_head = len(timed["base"]) % 2 == 0
        for side, f in (("head", head), ("base", base)) if first_head else (("base", base), ("head", head)):
            began = time.perf_counter()
            for _ in range(calls):
                f()
            timed[side].append(time.perf_counter() - began)
    return min(timed["head"]) / min(timed["base"])


def calibrate(project: str, levels: list[float]) -> dict[str, dict[float, tuple[int, float]]]:
    """Per benchmark and slowdown level, the work that makes head that much slower, and the
    effect measured: time is not proportional to work (a call's fixed cost, a dot product's
    slicing, a sort's n log n), so "5% more work" is not a 5% slowdown — the effect is what the
    detection is about. Fitted on an affine model of time in work, then measured."""
    out: dict[str, dict[float, tuple[int, float]]] = {}
    for name, (n, _) in PROJECTS[project].items():
        base = _function(project, name, n)
        # The share of the time that scales with the work: 20% more work adds 20% of that share.
        scaling = max(0.05, (interleaved_ratio(base, _function(project, name, round(1.2 * n))) - 1) / 0.2)
        out[name] = {0.0: (n, 1.0)}
        for level in (x for x in levels if x):
            work = round(n * (1 + level / scaling))
            effect = interleaved_ratio(base, _function(project, name, work))
            for _ in range(3):
                if abs(effect - 1 - level) <= 0.2 * level or effect <= 1:
                    break
                # Not affine this far (a sort's n log n, caches): a secant step, measured again.
                work = round(n + (work - n) * level / (effect - 1))
                effect = interleaved_ratio(base, _function(project, name, work))
            out[name][level] = (work, effect)
    return out


def bench_name(name: str) -> str:
    return f"tests/test_sample.py::test_{name}"


async def run_ab(workspace: Path) -> tuple[dict[str, Any], float]:
    plan = PerfPlan.model_validate(
        {
            "sides": {"base": {"root": "base"}, "head": {"root": "head"}},
            "kinds": [{"kind": "pytest", "args": ["tests"]}],
            "timeout_s": 120,
        }
    )
    runner = HostRunner()
    started = time.perf_counter()
    result = await runner.run(perf_step(plan), workspace)
    wall = time.perf_counter() - started
    await runner.close()
    return parse_results(result).model_dump(mode="json"), wall


_REGRESSED = re.compile(r"^\s+(test_\w+) \(")


def run_separate(workspace: Path) -> tuple[list[str], float]:
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
    regressed = sorted({m.group(1) for line in text.splitlines() if (m := _REGRESSED.match(line))})
    return [f"tests/test_sample.py::{n}" for n in regressed], wall


CHANGES = ("mixed", "no-op", "A/A")


def cases(
    trials: int,
    seed: int = 1,
    levels: list[float] = LEVELS,
    projects: list[str] | None = None,
    changes: tuple[str, ...] = CHANGES,
) -> list[dict[str, Any]]:
    """Per trial and project: a mixed change (the benchmarks' slowdowns rotating through
    ``levels``), a no-op change and an A/A case (those of ``changes``), shuffled."""
    out = []
    for trial in range(trials):
        for project in projects or list(PROJECTS):
            benches = PROJECTS[project]
            mixed = {name: levels[(trial + j) % len(levels)] for j, name in enumerate(benches)}
            kinds = {
                "mixed": mixed,
                "no-op": dict.fromkeys(benches, 0.0),
                "A/A": dict.fromkeys(benches, 0.0),
            }
            out += [{"project": project, "change": c, "slow": kinds[c]} for c in changes]
    random.Random(seed).shuffle(out)
    return out


Calibration = dict[
    str, dict[str, dict[float, tuple[int, float]]]
]  # project → benchmark → level → (work, effect)


async def measure(case: dict[str, Any], index: int, calibration: Calibration) -> dict[str, Any]:
    sizes = calibration[case["project"]]
    work = {name: sizes[name][level][0] for name, level in case["slow"].items() if level}
    workspace = Path(tempfile.mkdtemp(prefix="perf-case-"))
    try:
        write_project(workspace / "base", case["project"], {}, "measured")
        note = "measured, a comment changed" if case["change"] == "no-op" else "measured"
        write_project(workspace / "head", case["project"], work, note)
        load_before = os.getloadavg()[0]
        if index % 2:
            separate, separate_wall = run_separate(workspace)
        report, ab_wall = await run_ab(workspace)
        if not index % 2:
            separate, separate_wall = run_separate(workspace)
        load = (load_before + os.getloadavg()[0]) / 2
    finally:
        shutil.rmtree(workspace, ignore_errors=True)
    return case | {
        "effect": {name: sizes[name][level][1] for name, level in case["slow"].items()},
        "report": report,
        "ab_wall": ab_wall,
        "separate": separate,
        "separate_wall": separate_wall,
        "load": load,
    }


def rate(hits: int, total: int) -> str:
    return f"{hits}/{total} = {hits / total:.0%}" if total else "–"


def analyse(records: list[dict[str, Any]]) -> None:
    limits = PerfThresholds()
    rows: list[tuple[str, str, float, str, bool, bool]] = []  # project, bench, level, verdict, sep, change
    verdict_counts: dict[str, int] = {}
    widths: dict[str, list[float]] = {}
    for r in records:
        comparisons = {c.name: c for c in compare_all(DriverReport.model_validate(r["report"]), limits)}
        for bench, level in r["slow"].items():
            c = comparisons.get(bench_name(bench))
            verdict = c.verdict.value if c else "missing"
            rows.append(
                (r["project"], bench, level, verdict, bench_name(bench) in r["separate"], r["change"])
            )
            if not level:
                verdict_counts[verdict] = verdict_counts.get(verdict, 0) + 1
            if c and c.low and c.high:
                widths.setdefault(bench, []).append(c.high / c.low - 1)
    loads = [r["load"] for r in records]
    for level in SLOWDOWNS:
        effects = [e for r in records for b, e in r.get("effect", {}).items() if r["slow"][b] == level]
        if effects:
            print(f"+{level:.0%}: effect measured in one process {min(effects):.3f}–{max(effects):.3f}")
    print(
        f"\n{len(records)} cases ({sum(r['change'] == 'A/A' for r in records)} A/A, "
        f"{sum(r['change'] == 'no-op' for r in records)} no-op), {len(rows)} benchmark comparisons; "
        f"load average median {statistics.median(loads):.1f} (range {min(loads):.1f}–{max(loads):.1f})\n"
    )
    header = " | ".join(f"+{s:.0%} detected" for s in SLOWDOWNS)
    print(
        f"| method | {header} | false alarms, unaffected benchmarks | false alarms, no-op and A/A changes |"
    )
    print("|---|" + "---|" * (len(SLOWDOWNS) + 2))
    quiet = [r for r in records if r["change"] != "mixed"]
    for label, hit in (
        ("paritybot (defaults)", lambda row: row[3] in ("regression",)),
        (f"separate, {COMPARE_FAIL}", lambda row: row[4]),
    ):
        cells = [
            rate(sum(hit(x) for x in rows if x[2] == s), sum(x[2] == s for x in rows)) for s in SLOWDOWNS
        ]
        if label.startswith("paritybot"):
            wrong = [x for x in rows if not x[2] and x[3] in ("regression", "improvement")]
            changes = sum(
                any(
                    c.verdict in FLAGGED
                    for c in compare_all(DriverReport.model_validate(r["report"]), limits)
                )
                for r in quiet
            )
        else:
            wrong = [x for x in rows if not x[2] and x[4]]
            changes = sum(bool(r["separate"]) for r in quiet)
        print(
            f"| {label} | "
            + " | ".join(cells)
            + f" | {rate(len(wrong), sum(not x[2] for x in rows))} | {rate(changes, len(quiet))} |"
        )
    print("\nBy benchmark (paritybot; separate), detected at each level and false alarms when unaffected:")
    for project, benches in PROJECTS.items():
        for bench in benches:
            mine = [x for x in rows if x[0] == project and x[1] == bench]
            cells = []
            for level in LEVELS:
                at = [x for x in mine if x[2] == level]
                if level:
                    cells.append(f"+{level:.0%} {rate(sum(x[3] == 'regression' for x in at), len(at))}")
                else:
                    flagged = sum(x[3] in ("regression", "improvement") for x in at)
                    cells.append(
                        f"unaffected {rate(flagged, len(at))}; separate {rate(sum(x[4] for x in at), len(at))}"
                    )
            width = statistics.median(widths[bench]) if widths.get(bench) else float("nan")
            print(f"- {project}/{bench} (interval width median {width:.1%}): " + ", ".join(cells))
    print(
        "Verdicts on unaffected benchmarks: "
        + ", ".join(f"{k} {v}" for k, v in sorted(verdict_counts.items()))
    )
    phases = [r["report"].get("phases") or {} for r in records]
    if any(phases):
        spent = {k: statistics.median(p.get(k, 0.0) for p in phases) for k in phases[-1]}
        print(
            "Where paritybot's time went (median s per case): "
            + ", ".join(f"{k} {v:.1f}" for k, v in spent.items())
        )
    pairs = [
        b.get("rounds") and len({x["process"] for x in b["rounds"]})
        for r in records
        for b in r["report"]["benchmarks"]
    ]
    print(
        f"Process pairs per benchmark: {', '.join(f'{n}: {pairs.count(n)}' for n in sorted(set(pairs) - {0, None}))}"
    )
    ab = [r["ab_wall"] for r in records]
    sep = [r["separate_wall"] for r in records]
    print(
        f"Wall time per case (median): paritybot {statistics.median(ab):.1f} s, two separate runs "
        f"{statistics.median(sep):.1f} s; total {sum(ab):.0f} s against {sum(sep):.0f} s "
        f"({sum(ab) / sum(sep):.2f}×)"
    )


async def run(
    plan: list[dict[str, Any]], calibration: Calibration, raw: Path | None, minutes: float
) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = []
    deadline = time.monotonic() + minutes * 60
    for index, case in enumerate(plan):
        if time.monotonic() > deadline:
            print(f"stopped at the time limit after {index} of {len(plan)} cases", file=sys.stderr)
            break
        record = await measure(case, index, calibration)
        records.append(record)
        slow = ", ".join(f"{k} +{v:.0%}" for k, v in case["slow"].items() if v) or case["change"]
        print(
            f"{index + 1}/{len(plan)} {case['project']} {slow}: A/B {record['ab_wall']:.1f} s, "
            f"separate {record['separate_wall']:.1f} s, load {record['load']:.1f}",
            file=sys.stderr,
            flush=True,
        )
        if raw:
            raw.write_text(json.dumps({"trials": records}))
    return records


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=15, help="trials per project (3 cases each)")
    parser.add_argument("--raw", type=Path, help="save every case's report here (JSON)")
    parser.add_argument("--analyse", type=Path, help="print the tables of a saved --raw file and stop")
    parser.add_argument("--minutes", type=float, default=30.0, help="stop starting cases after this")
    parser.add_argument("--levels", help="slowdowns of the mixed changes, e.g. 0.05 (0 is always among them)")
    parser.add_argument("--projects", help=f"of {', '.join(PROJECTS)} (default: all)")
    parser.add_argument("--changes", help=f"of {', '.join(CHANGES)} (default: all)")
    args = parser.parse_args()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(40))
    if args.analyse:
        analyse(json.loads(args.analyse.read_text())["trials"])
        return
    print(f"machine: {os.cpu_count()} CPUs; paritybot's defaults; separate: {COMPARE_FAIL}", flush=True)
    levels = [0.0, *(float(x) for x in args.levels.split(","))] if args.levels else LEVELS
    projects = args.projects.split(",") if args.projects else None
    changes = tuple(args.changes.split(",")) if args.changes else CHANGES
    plan = cases(args.trials, levels=levels, projects=projects, changes=changes)
    calibration = {project: calibrate(project, levels) for project in projects or PROJECTS}
    for project, sizes in calibration.items():
        for name, by_level in sizes.items():
            effects = ", ".join(
                f"+{level:.0%}: {effect:.3f}" for level, (_, effect) in by_level.items() if level
            )
            print(f"calibrated {project}/{name}: {effects}", flush=True)
    records = asyncio.run(run(plan, calibration, args.raw, args.minutes))
    analyse(records)


if __name__ == "__main__":
    main()
