"""Mutation benchmark for targeted test selection.

For a project with a pytest suite it:

1. copies the project into a scratch git repository (the base commit), collects the tests, runs
   the whole suite once for per-test durations, and builds the per-test coverage map through the
   same step the bot uses;
2. makes single-point mutations on source lines the suite executes (flip a comparison, negate a
   condition, replace a return value, change a constant, swap ``and``/``or``), sampled with a
   seed, one commit each;
3. runs the whole suite on each mutant: the failing tests are the truth;
4. asks each selector which tests to run, pytest-testmon among them (its data recorded on the
   same base commit, asked on the same mutant), and reports, per selector, the share of tests
   and of test time selected (over the mutations that leave the pytest session standing), and
   over the breaking mutations the share where at least one failing test was selected and where
   all were;
5. three harder cases: a map with a hole (the largest test module did not collect when it was
   recorded), a map of an older commit (another mutation landed on the base branch after it),
   and a PR that also renames a test the map selects (it must not be run, its new name must).

Usage::

    python benchmarks/selection.py PROJECT_DIR [--python PY] [--env PYTHONPATH=src]
        [--mutations 120] [--seed 1] [--budget-s 840] [--name NAME] [--cases 20]
        [--json RESULTS] [--from-json RESULTS] [--at PATH:LINE ...]

``--from-json`` takes an earlier run's results (same project, ``--mutations`` and ``--seed``):
it prints that run's table again and reruns only the renamed-test case on its mutations.

``--python`` is an interpreter with the project's dependencies, pytest, coverage and
pytest-testmon.
"""

from __future__ import annotations

import argparse
import ast
import asyncio
import json
import logging
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import structlog

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bot.core.config import TestSettings  # noqa: E402
from bot.core.models import CollectionError, CoverageMapHealth  # noqa: E402
from runner.backends.host import HostRunner  # noqa: E402
from runner.selection.coverage_map import CoverageMap, coverage_map_from_step, coverage_step  # noqa: E402
from runner.selection.import_graph import is_conftest, is_test_file, python_files  # noqa: E402
from runner.selection.pr import GivenMap, select_tests  # noqa: E402
from runner.selection.select import Signal, parse_collect_only, split_nodeid  # noqa: E402

_TIMING_PLUGIN = """
import json, os, time

_results = {}


def pytest_runtest_logreport(report):
    entry = _results.setdefault(report.nodeid, {"duration": 0.0, "failed": False})
    entry["duration"] += report.duration
    if report.failed:
        entry["failed"] = True


def pytest_sessionfinish(session, exitstatus):
    with open(os.environ["BENCH_TIMING_OUT"], "w") as f:
        json.dump(_results, f)
"""

SELECTORS: dict[str, tuple[bool, frozenset[Signal] | None]] = {
    "ours (coverage map + fallbacks)": (True, None),
    "ours without a map (static + names)": (False, None),
    "static import graph alone": (False, frozenset({Signal.STATIC})),
    "file-name match alone": (False, frozenset({Signal.NAME})),
}
TESTMON = "pytest-testmon"
PARTIAL = "ours, map with a hole"
# The same map without the origins of import-time lines: a line a shared module's import ran goes
# to every user of the code around it, as before attribution by use.
BY_IMPORT = "ours, import-time lines by import (before)"
FAILING = "the failing tests themselves"
SKIP_PARTS = {"tests", "test", "testing", "docs", "doc", "benchmarks", "examples", "scripts"}


@dataclass
class Project:
    work: Path
    python: str
    env: dict[str, str]
    plugin_dir: Path
    pytest_args: list[str] = field(default_factory=list)
    all_tests: list[str] = field(default_factory=list)
    durations: dict[str, float] = field(default_factory=dict)
    baseline_failures: set[str] = field(default_factory=set)
    suite_s: float = 0.0
    testmon_data: Path | None = None

    def testmon(self, record: bool) -> tuple[set[str], float]:
        """Record testmon's data (the whole suite), or ask it which tests the checkout needs."""
        assert self.testmon_data is not None
        env = {**os.environ, **self.env, "TESTMON_DATAFILE": str(self.testmon_data)}
        cache = ["-o", f"cache_dir={self.plugin_dir / 'pytest-cache'}"]
        ask = [] if record else ["--testmon-nocollect", "--collect-only"]
        argv = [self.python, "-m", "pytest", "-q", *cache, "--testmon", *ask, *self.pytest_args]
        started = time.monotonic()
        proc = subprocess.run(argv, cwd=self.work, env=env, capture_output=True, text=True, timeout=600)
        return set(parse_collect_only(proc.stdout)), time.monotonic() - started

    def git(self, *args: str) -> str:
        ident = ["-c", "user.name=bench", "-c", "user.email=bench@example.com", "-c", "commit.gpgsign=false"]
        out = subprocess.run(["git", "-C", str(self.work), *ident, *args], capture_output=True, text=True)
        if out.returncode != 0:
            raise RuntimeError(f"git {' '.join(args)}: {out.stderr}")
        return out.stdout.strip()

    def pytest(self, args: list[str], timeout: float) -> tuple[dict[str, dict[str, object]] | None, str]:
        """Run pytest with the timing plugin; None when it timed out."""
        out_file = self.plugin_dir / "timing.json"
        out_file.unlink(missing_ok=True)
        pythonpath = os.pathsep.join(p for p in [str(self.plugin_dir), self.env.get("PYTHONPATH", "")] if p)
        env = {**os.environ, **self.env, "PYTHONPATH": pythonpath, "BENCH_TIMING_OUT": str(out_file)}
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        argv = [
            self.python,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "bench_timing",
            *self.pytest_args,
            *args,
        ]
        try:
            proc = subprocess.run(
                argv, cwd=self.work, env=env, capture_output=True, text=True, timeout=timeout
            )
        except subprocess.TimeoutExpired:
            return None, "timeout"
        if not out_file.exists():
            return {}, proc.stdout[-2000:] + proc.stderr[-2000:]
        return json.loads(out_file.read_text()), proc.stdout[-500:]


# --- Setting up ---------------------------------------------------------------------------------------


def copy_project(src: Path, dest: Path) -> None:
    """Tracked files of a git checkout, or the whole directory of an unpacked sdist."""
    if (src / ".git").exists():
        listed = subprocess.run(["git", "-C", str(src), "ls-files", "-z"], capture_output=True, check=True)
        for rel in listed.stdout.decode().split("\0"):
            if rel and (src / rel).is_file():
                (dest / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src / rel, dest / rel)
        return
    ignore = shutil.ignore_patterns(".git", "__pycache__", ".pytest_cache", "*.pyc", ".venv", ".tox")
    shutil.copytree(src, dest, dirs_exist_ok=True, ignore=ignore)


def prepare(args: argparse.Namespace) -> tuple[Project, str, CoverageMap]:
    scratch = Path(tempfile.mkdtemp(prefix="selbench-"))
    work, plugin_dir = scratch / "repo", scratch / "plugin"
    work.mkdir()
    plugin_dir.mkdir()
    (plugin_dir / "bench_timing.py").write_text(_TIMING_PLUGIN)
    copy_project(Path(args.project), work)
    env = dict(kv.split("=", 1) for kv in args.env)
    proj = Project(work=work, python=args.python, env=env, plugin_dir=plugin_dir, pytest_args=args.pytest_arg)
    proj.git("init", "-q", "-b", "main")
    proj.git("add", "-A")
    proj.git("commit", "-q", "-m", "base")
    base = proj.git("rev-parse", "HEAD")

    collected = subprocess.run(
        [args.python, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *args.pytest_arg],
        cwd=work,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
    )
    proj.all_tests = parse_collect_only(collected.stdout)
    started = time.monotonic()
    timing, output = proj.pytest([], timeout=args.suite_timeout)
    proj.suite_s = time.monotonic() - started
    if not timing:
        raise SystemExit(f"the suite did not run: {output}")
    proj.durations = {n: float(v["duration"]) for n, v in timing.items()}  # type: ignore[arg-type]
    proj.baseline_failures = {n for n, v in timing.items() if v["failed"]}

    pybin = str(Path(args.python).parent)
    runner = HostRunner(env={**env, "PATH": f"{pybin}{os.pathsep}{os.environ.get('PATH', '')}"})
    started = time.monotonic()
    settings = TestSettings(pytest_args=args.pytest_arg)
    result = asyncio.run(runner.run(coverage_step(settings), work))
    cmap = coverage_map_from_step(result, base)
    built_s = time.monotonic() - started
    print(
        f"coverage map: {len(cmap.tests)} tests, {len(cmap.files)} files, {built_s:.1f} s, "
        f"{built_s / proj.suite_s:.1f}× one suite run ({proj.suite_s:.1f} s)"
    )
    shutil.rmtree(work / ".paritybot", ignore_errors=True)
    proj.testmon_data = scratch / "testmondata"
    _, spent = proj.testmon(record=True)
    print(f"pytest-testmon data recorded in {spent:.1f} s")
    return proj, base, cmap


def with_hole(proj: Project, cmap: CoverageMap) -> tuple[CoverageMap, str]:
    """The map as it would be had the largest test module failed to import while it was recorded."""
    sizes: dict[str, int] = {}
    for nodeid in proj.all_tests:
        sizes[split_nodeid(nodeid)[0]] = sizes.get(split_nodeid(nodeid)[0], 0) + 1
    hole = max(sizes, key=lambda f: sizes[f])
    keep = [i for i, t in enumerate(cmap.tests) if split_nodeid(t)[0] != hole]
    renumber = {old: new for new, old in enumerate(keep)}
    files = {
        path: {line: [renumber[i] for i in ids if i in renumber] for line, ids in by_line.items()}
        for path, by_line in cmap.files.items()
    }
    imported_by = {
        path: {line: [t for t in ts if t != hole] for line, ts in by_line.items()}
        for path, by_line in cmap.imported_by.items()
    }
    health = CoverageMapHealth(
        tests_collected=len(proj.all_tests) - sizes[hole],
        tests_ran=len(keep),
        collection_errors=[CollectionError(path=hole, message="ImportError (made up by the benchmark)")],
    )
    partial = cmap.model_copy(
        update={
            "tests": [cmap.tests[i] for i in keep],
            "files": {p: {n: ids for n, ids in b.items() if ids} for p, b in files.items()},
            "imported_by": {p: {n: ts for n, ts in b.items() if ts} for p, b in imported_by.items()},
            "fixture_users": {
                f: [renumber[i] for i in ids if i in renumber] for f, ids in cmap.fixture_users.items()
            },
            "health": health,
        }
    )
    return partial, hole


# --- Mutations ---------------------------------------------------------------------------------------

_FLIP = {
    ast.Lt: ast.GtE,
    ast.GtE: ast.Lt,
    ast.Gt: ast.LtE,
    ast.LtE: ast.Gt,
    ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq,
    ast.Is: ast.IsNot,
    ast.IsNot: ast.Is,
    ast.In: ast.NotIn,
    ast.NotIn: ast.In,
}


@dataclass
class Mutation:
    path: str
    line: int
    kind: str
    source: str  # the whole mutated file


def _mutants_of(node: ast.AST) -> list[tuple[str, ast.expr, ast.expr]]:
    """(kind, original expression, mutated expression) for one node."""
    out: list[tuple[str, ast.expr, ast.expr]] = []
    if isinstance(node, ast.Compare) and type(node.ops[0]) in _FLIP:
        new = ast.Compare(
            left=node.left, ops=[_FLIP[type(node.ops[0])](), *node.ops[1:]], comparators=node.comparators
        )
        out.append(("flip comparison", node, new))
    if isinstance(node, ast.If | ast.While | ast.IfExp | ast.Assert):
        out.append(("negate condition", node.test, ast.UnaryOp(op=ast.Not(), operand=node.test)))
    if isinstance(node, ast.Return) and node.value is not None:
        is_none = isinstance(node.value, ast.Constant) and node.value.value is None
        out.append(("replace return value", node.value, ast.Constant(value=0 if is_none else None)))
    if isinstance(node, ast.Constant) and type(node.value) in (int, bool, str):
        value = node.value
        new_value: object = (
            (not value) if isinstance(value, bool) else value + 1 if isinstance(value, int) else value + "x"
        )
        out.append(("change constant", node, ast.Constant(value=new_value)))
    if isinstance(node, ast.BoolOp):
        swapped = ast.Or() if isinstance(node.op, ast.And) else ast.And()
        out.append(("swap and/or", node, ast.BoolOp(op=swapped, values=node.values)))
    return out


def _replace(source: str, old: ast.expr, new: ast.expr) -> str | None:
    """Replace the exact source span of ``old`` (byte offsets, as ast reports them)."""
    if old.end_lineno is None or old.end_col_offset is None:
        return None
    lines = source.splitlines(keepends=True)
    raw = [ln.encode() for ln in lines]
    start = sum(len(x) for x in raw[: old.lineno - 1]) + old.col_offset
    end = sum(len(x) for x in raw[: old.end_lineno - 1]) + old.end_col_offset
    data = "".join(lines).encode()
    text = f"({ast.unparse(new)})"
    mutated = (data[:start] + text.encode() + data[end:]).decode()
    try:
        compile(mutated, "<mutant>", "exec")
    except SyntaxError:
        return None
    return mutated


def candidates(work: Path, cmap: CoverageMap) -> list[tuple[str, int]]:
    """Executed lines of source (not test) files: by a test, or while importing."""
    out = []
    for path in python_files(cmap.files.keys() | cmap.import_lines.keys()):
        parts = set(Path(path).parts[:-1])
        if is_test_file(path) or is_conftest(path) or parts & SKIP_PARTS or Path(path).name == "setup.py":
            continue
        if not (work / path).is_file():
            continue
        lines = set(cmap.files.get(path, {})) | set(cmap.import_lines.get(path, []))
        out.extend((path, n) for n in sorted(lines))
    return out


def make_mutations(
    work: Path, cmap: CoverageMap, count: int, seed: int, at: list[tuple[str, int]] | None = None
) -> list[Mutation]:
    """``count`` mutations of lines the suite runs, sampled with ``seed``; or one for each line ``at``."""
    rng = random.Random(seed)
    lines = at or candidates(work, cmap)
    if not at:
        rng.shuffle(lines)
    trees: dict[str, tuple[str, ast.Module]] = {}
    out: list[Mutation] = []
    for path, line in lines:
        if len(out) >= count:
            break
        if path not in trees:
            text = (work / path).read_text()
            trees[path] = (text, ast.parse(text))
        text, tree = trees[path]
        # Offsets inside f-strings are not reliable before Python 3.12: leave them alone.
        in_fstring = {id(n) for j in ast.walk(tree) if isinstance(j, ast.JoinedStr) for n in ast.walk(j)}
        options = [
            m
            for node in ast.walk(tree)
            if getattr(node, "lineno", None) == line
            and not _is_docstring_node(node)
            and id(node) not in in_fstring
            for m in _mutants_of(node)
        ]
        rng.shuffle(options)
        for kind, old, new in options:
            mutated = _replace(text, old, new)
            if mutated is not None and mutated != text:
                out.append(Mutation(path=path, line=line, kind=kind, source=mutated))
                break
    return out


def _is_docstring_node(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str) and len(node.value) > 40


# --- Running -----------------------------------------------------------------------------------------


@dataclass
class Outcome:
    mutation: Mutation
    failing: set[str]
    selected: dict[str, set[str] | None]  # selector → node ids (None = whole suite)
    select_s: dict[str, float]
    session_broken: bool = False  # pytest itself could not run the suite (every test fails, or none ran)


@dataclass
class Maps:
    full: CoverageMap
    partial: CoverageMap
    by_import: CoverageMap
    skip: frozenset[str] = frozenset()  # selectors not asked (--map-only)


def select_all(
    proj: Project, base: str, head: str, maps: Maps, all_tests: list[str] | None
) -> tuple[dict[str, set[str] | None], dict[str, float]]:
    """Every selector's answer for the commit checked out (testmon reads the checkout)."""
    settings = TestSettings()
    selected: dict[str, set[str] | None] = {}
    select_s: dict[str, float] = {}
    asked: dict[str, tuple[CoverageMap | None, frozenset[Signal] | None]] = {
        name: (maps.full if use_map else None, signals) for name, (use_map, signals) in SELECTORS.items()
    }
    asked |= {PARTIAL: (maps.partial, None), BY_IMPORT: (maps.by_import, None)}
    for name, (cmap, signals) in asked.items():
        if name in maps.skip:
            continue
        started = time.monotonic()
        given = GivenMap(cmap) if cmap is not None else None
        sel = select_tests(proj.work, base, head, settings, given, all_tests, signals)
        select_s[name] = time.monotonic() - started
        selected[name] = None if sel.whole_suite else {t.nodeid for t in sel.tests}
    selected[TESTMON], select_s[TESTMON] = proj.testmon(record=False)
    return selected, select_s


def truth(proj: Project, timeout: float, baseline: set[str]) -> tuple[set[str], bool] | None:
    """The tests the checked-out commit fails (that ``baseline`` passed), and whether pytest broke."""
    timing, _ = proj.pytest([], timeout=timeout)
    if timing is None:
        return None  # an endless loop: no truth to compare with
    failing = {n for n, v in timing.items() if v["failed"]} - baseline
    ran = {n for n in timing if n in set(proj.all_tests)}
    broken = not ran or ran <= failing | baseline
    return failing, broken


def evaluate(proj: Project, base: str, maps: Maps, mutation: Mutation, timeout: float) -> Outcome | None:
    proj.git("checkout", "-q", "-B", "mutant", base)
    (proj.work / mutation.path).write_text(mutation.source)
    proj.git("commit", "-q", "-am", f"mutate {mutation.path}:{mutation.line}")
    head = proj.git("rev-parse", "HEAD")
    selected, select_s = select_all(proj, base, head, maps, proj.all_tests)
    found = truth(proj, timeout, proj.baseline_failures)
    proj.git("checkout", "-q", "main")
    if found is None:
        return None
    failing, broken = found
    return Outcome(mutation, failing, selected, select_s, session_broken=broken)


# --- Harder cases -------------------------------------------------------------------------------------


def older_map_cases(
    proj: Project, base: str, maps: Maps, outcomes: list[Outcome], count: int, timeout: float
) -> list[Outcome]:
    """A breaking mutation proposed on top of another (harmless) one that landed after the map.

    The map is the base commit's; the other mutation is the base branch's change since then. The
    truth is the whole suite on the PR's head; testmon's data is also the base commit's.
    """
    landed = [o.mutation for o in outcomes if not o.session_broken]
    breaking = [o for o in outcomes if o.failing and not o.session_broken]
    cases: list[Outcome] = []
    for i, o in enumerate(breaking[:count]):
        others = landed[i + 1 :] + landed[:i]
        other = next((m for m in others if m.path != o.mutation.path), None)
        if other is None:
            break
        proj.git("checkout", "-q", "-B", "trunk", base)
        (proj.work / other.path).write_text(other.source)
        proj.git("commit", "-q", "-am", "another PR")
        trunk = proj.git("rev-parse", "HEAD")
        before = truth(proj, timeout, proj.baseline_failures)  # what the other PR broke is not ours
        proj.git("checkout", "-q", "-B", "pr", trunk)
        (proj.work / o.mutation.path).write_text(o.mutation.source)
        proj.git("commit", "-q", "-am", "this PR")
        head = proj.git("rev-parse", "HEAD")
        selected, select_s = select_all(proj, trunk, head, maps, proj.all_tests)
        found = truth(proj, timeout, proj.baseline_failures | (before[0] if before else set()))
        proj.git("checkout", "-q", "main")
        if found is not None and before is not None and not before[1]:
            cases.append(Outcome(o.mutation, found[0], selected, select_s, session_broken=found[1]))
    return cases


def _renamable(proj: Project, failing: set[str]) -> tuple[str, str, str] | None:
    """A failing test whose ``def`` can be renamed with one unambiguous edit: (node id, file, name)."""
    for nodeid in sorted(failing):
        path, names, param = split_nodeid(nodeid)
        if param or not names or not (proj.work / path).is_file():
            continue
        text = (proj.work / path).read_text()
        if len(re.findall(rf"\bdef {re.escape(names[-1])}\(", text)) == 1:
            return nodeid, path, names[-1]
    return None


def renamed_test_cases(
    proj: Project, base: str, maps: Maps, outcomes: list[Outcome], count: int
) -> list[str]:
    """A breaking mutation whose PR also renames a failing test: the old id must not be selected
    (it would be a red for a test that does not exist), the new one must. Selected as the bot
    does, without collecting the head."""
    lines = []
    tried = dropped = picked = 0
    key = next(iter(SELECTORS))
    for o in outcomes:
        found = _renamable(proj, o.failing) if o.failing and not o.session_broken else None
        if tried >= count or found is None:
            continue
        target, path, name = found
        tried += 1
        text = (proj.work / path).read_text()
        proj.git("checkout", "-q", "-B", "renamed", base)
        (proj.work / o.mutation.path).write_text(o.mutation.source)
        (proj.work / path).write_text(text.replace(f"def {name}(", f"def {name}_renamed("))
        proj.git("commit", "-q", "-am", "rename")
        head = proj.git("rev-parse", "HEAD")
        sel = select_tests(proj.work, base, head, TestSettings(), GivenMap(maps.full), None)
        proj.git("checkout", "-q", "main")
        ids = {t.nodeid for t in sel.tests}
        dropped += target not in ids and target in sel.removed
        new = f"{target}_renamed"  # selected itself, or through its class (a mixin's test, say)
        picked += any(i == new or i.startswith(f"{new}[") or new.startswith(f"{i}::") for i in ids)
        if target in ids:
            lines.append(f"- a red to come: {target} selected though the PR renamed it")
    lines.insert(
        0,
        f"renamed-test case ({key}): {tried} PRs; the renamed test dropped and listed in {dropped}, "
        f"its new name selected in {picked}",
    )
    return lines


def summarise(proj: Project, outcomes: list[Outcome]) -> list[dict[str, object]]:
    total_time = sum(proj.durations.values()) or 1.0
    total_tests = len(proj.all_tests) or 1
    breaking = [o for o in outcomes if o.failing]
    standing = [o for o in outcomes if not o.session_broken]

    def chosen(o: Outcome, name: str) -> set[str]:
        if name == FAILING:
            return o.failing
        sel = None if name == "full suite" else o.selected[name]
        return set(proj.all_tests) if sel is None else sel

    def seconds(o: Outcome, name: str) -> float:
        return sum(proj.durations.get(n, 0.0) for n in chosen(o, name))

    testmon_s = statistics.mean(seconds(o, TESTMON) for o in standing) if standing else 0.0
    rows = []
    names = [*SELECTORS, BY_IMPORT, PARTIAL, TESTMON, FAILING, "full suite"]
    for name in [n for n in names if n in (FAILING, "full suite") or all(n in o.selected for o in outcomes)]:
        any_hit = sum(bool(o.failing & chosen(o, name)) for o in breaking)
        all_hit = sum(o.failing <= chosen(o, name) for o in breaking)
        mean_s = statistics.mean(seconds(o, name) for o in standing) if standing else 0.0
        rows.append(
            {
                "selector": name,
                "tests": statistics.mean(len(chosen(o, name)) / total_tests for o in standing)
                if standing
                else 0.0,
                "time": mean_s / total_time,
                "vs_testmon": mean_s / testmon_s if testmon_s else float("nan"),
                "any": any_hit / len(breaking) if breaking else 0.0,
                "all": all_hit / len(breaking) if breaking else 0.0,
                "select_s": statistics.mean(o.select_s.get(name, 0.0) for o in outcomes) if outcomes else 0.0,
            }
        )
    return rows


def table(title: str, outcomes: list[Outcome], skipped: int, rows: list[dict[str, object]]) -> str:
    breaking = sum(1 for o in outcomes if o.failing)
    broken = sum(1 for o in outcomes if o.session_broken)
    head = (
        f"**{title}**: {len(outcomes)} mutations evaluated ({skipped} timed out, left out), {breaking} breaking, "
        f"{broken} breaking the whole pytest session (left out of the time shares).\n\n"
        "| selector | tests selected | test time selected | time vs testmon | breaking caught (≥1 failing test) "
        "| breaking caught (all failing tests) | selection cost |\n|---|---|---|---|---|---|---|\n"
    )
    body = "".join(
        f"| {r['selector']} | {r['tests']:.1%} | {r['time']:.1%} | {r['vs_testmon']:.2f}× | {r['any']:.1%} "
        f"| {r['all']:.1%} | {r['select_s']:.2f} s |\n"
        for r in rows
    )
    return head + body


def misses(outcomes: list[Outcome], key: str = next(iter(SELECTORS))) -> str:
    lines = []
    for o in outcomes:
        if key not in o.selected:
            continue  # not asked (--map-only)
        chosen = o.selected[key]
        if o.failing and chosen is not None and not o.failing & chosen:
            m = o.mutation
            lines.append(f"- missed: {m.path}:{m.line} ({m.kind}); failing: {sorted(o.failing)[:3]}")
    return "\n".join(lines)


def _selected(recorded: dict[str, list[str] | None]) -> dict[str, set[str] | None]:
    return {k: None if v is None else set(v) for k, v in recorded.items()}


def main() -> int:
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("project", help="directory of the project (an unpacked sdist or a git checkout)")
    parser.add_argument(
        "--python", default=sys.executable, help="interpreter with the project's dependencies"
    )
    parser.add_argument("--env", action="append", default=[], help="KEY=VALUE for the test runs")
    parser.add_argument("--mutations", type=int, default=120)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--budget-s", type=float, default=840, help="stop evaluating after this long")
    parser.add_argument("--suite-timeout", type=float, default=300)
    parser.add_argument("--name", default=None)
    parser.add_argument(
        "--pytest-arg", action="append", default=[], help="passed to every pytest run (e.g. --ignore=PATH)"
    )
    parser.add_argument("--json", default=None, help="also write the per-mutation results here")
    parser.add_argument(
        "--map-only", action="store_true", help="ask only the selectors that use the whole map, and testmon"
    )
    parser.add_argument("--cases", type=int, default=20, help="PRs for each of the harder cases")
    parser.add_argument(
        "--at",
        action="append",
        default=[],
        metavar="PATH:LINE",
        help="mutate these lines instead of sampling (say, constructor lines test modules run at import)",
    )
    parser.add_argument(
        "--from-json",
        default=None,
        help="a --json file of an earlier run: its table again, and the renamed-test case on its mutations",
    )
    args = parser.parse_args()
    started = time.monotonic()
    proj, base, cmap = prepare(args)
    partial, hole = with_hole(proj, cmap)
    # The static selectors and the map with a hole do not depend on the map's attribution: left out
    # with --map-only, so a loaded machine still evaluates enough mutations.
    skip = frozenset([*list(SELECTORS)[1:], PARTIAL]) if args.map_only else frozenset()
    maps = Maps(full=cmap, partial=partial, by_import=cmap.model_copy(update={"built_by": {}}), skip=skip)
    at = [(p, int(n)) for p, _, n in (a.rpartition(":") for a in args.at)]
    mutations = make_mutations(proj.work, cmap, args.mutations, args.seed, at)
    print(f"{len(proj.all_tests)} tests, suite {proj.suite_s:.1f} s wall; {len(mutations)} mutations")
    name = args.name or Path(args.project).resolve().name
    if args.from_json:
        earlier = {(r["path"], r["line"], r["kind"]): r for r in json.loads(Path(args.from_json).read_text())}
        known = [
            Outcome(m, set(r["failing"]), _selected(r["selected"]), {}, session_broken=r["session_broken"])
            for m in mutations
            if (r := earlier.get((m.path, m.line, m.kind))) is not None
        ]
        print(table(f"{name} (selections of {args.from_json})", known, 0, summarise(proj, known)))
        print("\n".join(renamed_test_cases(proj, base, maps, known, args.cases)))
        shutil.rmtree(proj.work.parent, ignore_errors=True)
        return 0
    outcomes: list[Outcome] = []
    skipped = 0
    timeout = max(30.0, proj.suite_s * 4)
    for i, mutation in enumerate(mutations, 1):
        if time.monotonic() - started > args.budget_s:
            print(f"time budget reached after {i - 1} mutations")
            break
        outcome = evaluate(proj, base, maps, mutation, timeout)
        if outcome is None:
            skipped += 1
            continue
        outcomes.append(outcome)
        if i % 10 == 0:
            print(f"  {i}/{len(mutations)} mutations, {time.monotonic() - started:.0f} s")
    older = older_map_cases(proj, base, maps, outcomes, args.cases, timeout)
    renamed = renamed_test_cases(proj, base, maps, outcomes, args.cases)
    suite = sum(proj.durations.values())
    print(f"\n{name}: {len(proj.all_tests)} tests, suite {suite:.1f} s of test time; the hole: {hole}\n")
    print(table(name, outcomes, skipped, summarise(proj, outcomes)))
    for label, missed in (("map", misses(outcomes)), ("map with a hole", misses(outcomes, PARTIAL))):
        if missed:
            print(f"missed with the {label}:\n{missed}")
    if older:
        print()
        print(table(f"{name}, map of an older commit", older, 0, summarise(proj, older)))
        missed = misses(older)
        if missed:
            print(missed)
    if args.cases:
        print()
        print("\n".join(renamed))
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                [
                    {
                        "path": o.mutation.path,
                        "line": o.mutation.line,
                        "kind": o.mutation.kind,
                        "failing": sorted(o.failing),
                        "session_broken": o.session_broken,
                        "selected": {k: None if v is None else sorted(v) for k, v in o.selected.items()},
                    }
                    for o in outcomes
                ],
                indent=1,
            )
        )
    shutil.rmtree(proj.work.parent, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
