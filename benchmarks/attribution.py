"""First failure first, and whose failure it is: measured on a real project's mutations.

1. **Ordering.** On seeded single-line mutations of the project (the selection benchmark's
   machinery: ``benchmarks/selection.py``), the tests the selection chooses are ordered three ways:
   paritybot's failure-first order (``runner/checks/ordering.py``, applied as the pytest plugin
   applies it), pytest's own order, and a random order (the mean of 20 seeded shuffles). For each
   breaking mutation the APFD (average percentage of faults detected; one fault per mutation, so
   ``1 - TF/n + 1/(2n)`` with TF the position of the first failing test among n) and the test
   time spent before the first failure are reported.
2. **An already-broken base.** The base commit gets a mutation that breaks some tests and a flaky
   test; then pull requests (more mutations, breaking or not, and changes to nothing the tests
   run) are checked by the real pipeline on the host runner. A *false red* is a red verdict for a
   change that broke nothing new; a *missed new failure* is a change that broke a test that
   passed on the base with a verdict that is not red. Today's behaviour (every failing test is
   the change's) is read from the same runs' reports, so both judge the same test results.

Usage::

    python benchmarks/attribution.py PROJECT_DIR [--mutations 40] [--prs 10] [--seed 1]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import selection as sel  # noqa: E402  (the selection benchmark: projects, maps, mutations)

from bot.core.config import RepoConfig, TestSettings  # noqa: E402
from bot.core.models import RunRequest, RunScope, Selection, TestOutcome  # noqa: E402
from bot.core.verdict import Verdict, verdict  # noqa: E402
from runner.backends.base import RunnerRequest  # noqa: E402
from runner.backends.host import HostRunner  # noqa: E402
from runner.checks.ordering import coverage_breadth, covering_tests, failure_first  # noqa: E402
from runner.checks.pytest_plugin import _names  # noqa: E402
from runner.gitdiff import changed_lines  # noqa: E402
from runner.pipeline import Pipeline, PipelineDeps  # noqa: E402
from runner.selection.coverage_map import coverage_map_from_step, coverage_step  # noqa: E402
from runner.selection.pr import GivenMap, select_tests  # noqa: E402
from runner.selection.select import parse_collect_only  # noqa: E402

SHUFFLES = 20
FLAKY_TEST = """\
import os, pathlib

import {package}  # noqa: F401  (so that a change to the package selects it)

_MARK = pathlib.Path(os.environ.get("BENCH_FLAKY_MARK", "/nonexistent")) / "flaky-{n}"


def test_flaky_{n}():
    # Fails on the first attempt of each run (a fresh mark directory per run), passes on a rerun.
    if not _MARK.exists():
        _MARK.parent.mkdir(parents=True, exist_ok=True)
        _MARK.write_text("x")
        raise AssertionError("flaky on purpose")
"""


def apfd(order: list[str], failing: set[str]) -> float:
    n = len(order)
    first = next(i for i, t in enumerate(order, 1) if t in failing)
    return 1 - first / n + 1 / (2 * n)


def time_to_first(order: list[str], failing: set[str], durations: dict[str, float]) -> float:
    spent = 0.0
    for t in order:
        spent += durations.get(t, 0.0)
        if t in failing:
            return spent
    return spent


def items_of(selected: list[str], all_tests: list[str]) -> list[str]:
    """The pytest items a selection keeps, in pytest's order (as the plugin keeps them)."""
    chosen = set(selected)
    return [t for t in all_tests if any(n in chosen for n in _names(t))]


def plugin_order(items: list[str], order: list[str]) -> list[str]:
    """The items as the plugin sorts them with this order file."""
    place = {n: i for i, n in reversed(list(enumerate(order)))}

    def key(t: str) -> int:
        found = [place[n] for n in _names(t) if n in place]
        return min(found) if found else len(place)

    return sorted(items, key=key)


def measure_ordering(proj: sel.Project, base: str, cmap: sel.CoverageMap, args: argparse.Namespace) -> None:
    mutations = sel.make_mutations(proj.work, cmap, args.mutations, args.seed)
    rng = random.Random(args.seed)
    rows: dict[str, list[float]] = {
        "failure-first": [],
        "failure-first without coverage breadth": [],
        "pytest order": [],
        "random order": [],
        "oracle (a failing test first: the ceiling)": [],
        "whole suite, failure-first": [],
        "whole suite, pytest order": [],
        "whole suite, random order": [],
    }
    breadth = coverage_breadth(cmap)
    first_s: dict[str, list[float]] = {k: [] for k in rows}
    sizes: list[int] = []
    deadline = time.monotonic() + args.budget_s
    for m in mutations:
        if time.monotonic() > deadline:
            break
        proj.git("checkout", "-q", "-B", "mutant", base)
        (proj.work / m.path).write_text(m.source)
        proj.git("commit", "-q", "-am", f"mutate {m.path}:{m.line}")
        head = proj.git("rev-parse", "HEAD")
        selection = select_tests(proj.work, base, head, TestSettings(), GivenMap(cmap), proj.all_tests)
        found = sel.truth(proj, 120, proj.baseline_failures)
        proj.git("checkout", "-q", "main")
        if found is None or found[1] or not found[0]:
            continue  # not breaking, or pytest itself broke: nothing to order
        failing = found[0]
        items = (
            proj.all_tests
            if selection.whole_suite
            else items_of([t.nodeid for t in selection.tests], proj.all_tests)
        )
        if not failing & set(items):
            continue  # the selection missed it (the selection benchmark counts those)
        ours = plugin_order(items, failure_first(selection, set(), set(), breadth))
        plain = plugin_order(items, failure_first(selection, set(), set()))
        orders = {
            "failure-first": [ours],
            "failure-first without coverage breadth": [plain],
            "pytest order": [items],
        }
        orders["random order"] = [rng.sample(items, len(items)) for _ in range(SHUFFLES)]
        orders["oracle (a failing test first: the ceiling)"] = [sorted(items, key=lambda t: t not in failing)]
        # The same change when the whole suite runs (a conftest.py or packaging change, `all`).
        covering = covering_tests(cmap, changed_lines(proj.work, base, head, include_deletions=True))
        whole = Selection(whole_suite=True)
        suite = proj.all_tests
        orders["whole suite, failure-first"] = [
            plugin_order(suite, failure_first(whole, set(), set(), breadth, covering=covering))
        ]
        orders["whole suite, pytest order"] = [suite]
        orders["whole suite, random order"] = [rng.sample(suite, len(suite)) for _ in range(SHUFFLES)]
        for name, variants in orders.items():
            rows[name].append(statistics.mean(apfd(o, failing) for o in variants))
            first_s[name].append(statistics.mean(time_to_first(o, failing, proj.durations) for o in variants))
        sizes.append(len(items))
    print(
        f"\n### Ordering: {len(sizes)} breaking mutations, {statistics.mean(sizes):.1f} selected tests on average\n"
    )
    print("| order | mean APFD | median APFD | test time before the first failure (mean) |")
    print("|---|---|---|---|")
    for name, values in rows.items():
        print(
            f"| {name} | {statistics.mean(values):.3f} | {statistics.median(values):.3f} | "
            f"{statistics.mean(first_s[name]) * 1000:.1f} ms |"
        )


async def check_pr(
    work: Path, base: str, head: str, env: dict[str, str], scratch: Path
) -> tuple[Verdict, Verdict]:
    """The verdict with attribution, and today's (every failing test the change's), of one run."""
    mark = Path(tempfile.mkdtemp(dir=scratch))

    async def host(request: RunnerRequest) -> HostRunner:
        return HostRunner(env={**env, "BENCH_FLAKY_MARK": str(mark)})

    deps = PipelineDeps(runner_factory=host, workspace_root=scratch / "ws", cache_root=scratch / "cache")
    config = RepoConfig.model_validate(
        {
            "checks": {"precommit": False, "docstrings": False},
            "tests": {"use_coverage_map": False, "pytest_args": ["-p", "no:asyncio"]},
        }
    )
    # The whole suite, as a project without a coverage map runs it for a change to a module every test imports.
    request = RunRequest(
        repo="bench/project",
        pr_number=1,
        clone_url=str(work),
        head_sha=head,
        base_sha=base,
        scope=RunScope.ALL,
    )
    report = await Pipeline(request, config, config.default_environment(), "bench", deps).execute()
    ours = verdict(report)
    assert report.tests is not None, report.error
    if ours == Verdict.ERROR:
        print(f"  the run broke: {report.error or report.tests.message}"[:400])
    failing = any(r.outcome in (TestOutcome.FAILED, TestOutcome.ERROR) for r in report.tests.results)
    today = Verdict.FAIL if failing else ours
    return ours, today


def measure_broken_base(
    proj: sel.Project, base: str, cmap: sel.CoverageMap, args: argparse.Namespace
) -> None:
    """PRs on a base that already fails some tests and has flaky ones."""
    mutations = sel.make_mutations(proj.work, cmap, args.mutations + args.prs + 20, args.seed + 1)
    # The bot's runs load the interpreter's plugins as a CI image would; pytest-asyncio stays out.
    env = {"PATH": f"{Path(args.python).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    proj.git("checkout", "-q", "-B", "broken", base)
    breaker = None
    for m in mutations:  # the base's own breakage: a mutation that fails a few tests
        (proj.work / m.path).write_text(m.source)
        found = sel.truth(proj, 120, set())
        if found and not found[1] and 0 < len(found[0] - proj.baseline_failures) <= 10:
            breaker = m
            break
        proj.git("checkout", "-q", "--", m.path)
    assert breaker is not None, "no mutation breaks a few tests"
    tests_dir = (proj.work / proj.all_tests[0].split("::")[0]).parent
    package = breaker.path.split("/")[0].removesuffix(".py")
    for n in range(2):
        (tests_dir / f"test_bench_flaky_{n}.py").write_text(FLAKY_TEST.format(n=n, package=package))
    proj.git("add", "-A")
    proj.git("commit", "-q", "-m", "the base: broken and flaky")
    broken_base = proj.git("rev-parse", "HEAD")
    base_failing = (sel.truth(proj, 120, set()) or (set(), False))[0]
    scratch = Path(tempfile.mkdtemp(prefix="attrbench-"))
    counts = {"ours": {"false red": 0, "missed": 0}, "today": {"false red": 0, "missed": 0}}
    kinds = {"breaking": 0, "harmless": 0}
    # A mutation's text is of the clean file: in the broken module it would undo the base's breakage.
    candidates = [m for m in mutations if m.path != breaker.path]
    for i, m in enumerate(candidates[: args.prs]):
        proj.git("checkout", "-q", "-B", f"pr-{i}", broken_base)
        harmless = i % 3 == 2  # every third PR changes only a comment in a module the tests run
        if harmless:
            target = proj.work / m.path
            target.write_text(target.read_text() + "\n# a comment\n")
        else:
            (proj.work / m.path).write_text(m.source)
        proj.git("commit", "-q", "-am", f"pr {i}")
        head = proj.git("rev-parse", "HEAD")
        found = sel.truth(proj, 120, set())
        if found is None or found[1]:
            continue
        new = {t for t in found[0] - base_failing if "flaky" not in t}
        kinds["breaking" if new else "harmless"] += 1
        ours, today = asyncio.run(check_pr(proj.work, broken_base, head, env, scratch))
        print(f"PR {i}: {len(new)} new failing tests; verdict {ours.value} (before: {today.value})")
        for name, v in (("ours", ours), ("today", today)):
            if not new and v == Verdict.FAIL:
                counts[name]["false red"] += 1
            if new and v != Verdict.FAIL:
                counts[name]["missed"] += 1
    proj.git("checkout", "-q", "main")
    shutil.rmtree(scratch, ignore_errors=True)
    print(
        f"\n### A broken base: {len(base_failing)} tests failing on it ({breaker.path}:{breaker.line}), 2 flaky; "
        f"{kinds['breaking']} PRs breaking a passing test, {kinds['harmless']} breaking none\n"
    )
    print("| behaviour | false reds | missed new failures |")
    print("|---|---|---|")
    print(
        f"| attribution (tests.pre_existing: neutral) | {counts['ours']['false red']} | {counts['ours']['missed']} |"
    )
    print(
        f"| every failing test the change's (before) | {counts['today']['false red']} | {counts['today']['missed']} |"
    )


def prepare(args: argparse.Namespace) -> tuple[sel.Project, str, sel.CoverageMap]:
    scratch = Path(tempfile.mkdtemp(prefix="attrbench-"))
    work, plugin_dir = scratch / "repo", scratch / "plugin"
    work.mkdir()
    plugin_dir.mkdir()
    (plugin_dir / "bench_timing.py").write_text(sel._TIMING_PLUGIN)
    sel.copy_project(Path(args.project), work)
    # Only the plugins each run names: the interpreter's own (pytest-asyncio…) stay out of the project.
    quiet = {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    proj = sel.Project(work=work, python=args.python, env=quiet, plugin_dir=plugin_dir)
    proj.git("init", "-q", "-b", "main")
    proj.git("add", "-A")
    proj.git("commit", "-q", "-m", "base")
    base = proj.git("rev-parse", "HEAD")
    collected = subprocess.run(
        [args.python, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"],
        cwd=work,
        env={**os.environ, **quiet},
        capture_output=True,
        text=True,
    )
    proj.all_tests = parse_collect_only(collected.stdout)
    timing, output = proj.pytest([], timeout=300)
    if not timing:
        raise SystemExit(f"the suite did not run: {output}")
    proj.durations = {n: float(v["duration"]) for n, v in timing.items()}  # type: ignore[arg-type]
    proj.baseline_failures = {n for n, v in timing.items() if v["failed"]}
    runner = HostRunner(
        env={"PATH": f"{Path(args.python).parent}{os.pathsep}{os.environ.get('PATH', '')}", **quiet}
    )
    cmap = coverage_map_from_step(asyncio.run(runner.run(coverage_step(TestSettings()), work)), base)
    shutil.rmtree(work / ".paritybot", ignore_errors=True)
    print(f"{len(proj.all_tests)} tests, coverage map of {len(cmap.tests)} tests")
    return proj, base, cmap


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("project")
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--mutations", type=int, default=40)
    parser.add_argument("--prs", type=int, default=9)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--budget-s", type=float, default=360.0, help="for the ordering part")
    parser.add_argument("--only", choices=["ordering", "broken-base"], default=None)
    args = parser.parse_args()
    import logging

    import structlog

    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    proj, base, cmap = prepare(args)
    if args.only != "broken-base":
        measure_ordering(proj, base, cmap, args)
    if args.only != "ordering":
        measure_broken_base(proj, base, cmap, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
