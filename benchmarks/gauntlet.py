#!/usr/bin/env python3
"""The gauntlet: paritybot on real merged pull requests of real projects, against the whole suite.

    python benchmarks/gauntlet.py [--paritybot-src PATH] [--projects a,b] [--data-dir DIR]
        [--stage truth|check|all] [--label NAME] [--from-json RESULTS]

For each project (its own virtual environment, its test dependencies from PyPI, the paritybot
under test installed into it, so paritybot's interpreter is the project's) and each pull request
(a merge or squash commit of the default branch; base = its first parent, head = the commit):

1. **the truth**: the whole suite, ``python -m pytest`` with no arguments in a clean checkout of
   the project, at base and at head, after the project's build (an editable install, which also
   compiles an extension). Each test's outcome and duration is kept under
   ``DIR/truth/PROJECT/SHA.json``; a rerun reads it from there. The tests that fail at head but
   not at base are run once more; one that passes then is flaky and is left out.
2. **paritybot's verdict**: ``paritybot coverage-map`` of the base, then ``paritybot check --base
   BASE --head HEAD --runner host --json``, both with a config of the gauntlet's that names only
   the build (the project's own config, if any, is not read: none of these projects has one).
   The report is kept under ``DIR/verdicts/LABEL/PROJECT/HEAD.json``.
3. **the score** (``gauntlet_score.py``): false reds, silent drops, failing tests not selected,
   share of the suite's time.

The tables are printed as markdown, and every pull request's figures are written to
``DIR/results-LABEL.json``; ``--from-json`` prints that file's tables again.

Longer than most scripts: fetching, replaying and scoring real pull requests in one run.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gauntlet_score import changed_lines, render, score_pr, touched_definitions

BUILD = "pip install --no-deps --no-build-isolation -e ."
# Version files generated from git tags (setuptools-scm, hatch-vcs) need a version without the
# tags: paritybot's working tree is an export, without git's history.
BUILD_ENV = {"SETUPTOOLS_SCM_PRETEND_VERSION": "0.0.0"}
SUITE_TIMEOUT_S = 900
PARITYBOT_CODE = ("bot", "runner", "handlers", "pyproject.toml")


@dataclass(frozen=True)
class Project:
    name: str
    url: str
    shape: str  # what it brings to the gauntlet
    deps: tuple[str, ...]  # test and build dependencies, from PyPI
    prs: tuple[str, ...]  # merge or squash commits of the default branch


PROJECTS = (
    Project(
        "lightning-utilities",
        "https://github.com/Lightning-AI/utilities",
        "src layout, doctests collected (--doctest-modules in addopts), PyTorch ecosystem",
        (
            *("packaging", "typing_extensions", "setuptools<82", "wheel"),
            *("pytest", "pytest-timeout", "pytest-cov", "jsonargparse[signatures]", "tomlkit"),
        ),
        (
            "196f271a85f3050c2595415af219c6d985eb6aaf",
            "cfdb0e2729291f08eaa60943317c92f2e993ee25",
            "357ae123d1eeb406e6f09f2ec2fc94226c56a60f",
            "757ea65ceabed1a795895df7500f0fdc37d8d98f",
            "8aa3b34296e15cda73beefec8d4ae404be2704bc",
            "fc8f33e26fbadbf04684f3f99ad781d57977a977",
            "5e59791b259afcacfa0fc317ff1c103039600581",
        ),
    ),
    Project(
        "particle",
        "https://github.com/scikit-hep/particle",
        "src layout, a pytest-benchmark suite among the tests, hatch-vcs version file",
        (
            "attrs",
            "hepunits",
            "pandas",
            "pytest-benchmark",
            "tabulate",
            "pytest",
            "hatchling",
            "hatch-vcs",
            "editables",
        ),
        (
            "494e2ee5082b35fd383c858dbf645e06c5e88327",
            "f368e5f51ca68510b1f054c6539d6b68e5924964",
            "4c4de37bf08c769c068ad1865af547423e61c993",
            "bc59a98886e31c3c985b5cad328cf43e0c22b102",
            "423e55b1db1ebe2787d5c6204719a0815b2ce8c7",
            "54a76a98894facf63889ecfcddd09b8f6702c2e2",
        ),
    ),
    Project(
        "numpy-groupies",
        "https://github.com/ml31415/numpy-groupies",
        "flat layout, tests inside the package, no testpaths, benchmarks beside the tests",
        ("numpy", "pandas", "pytest", "setuptools", "setuptools-scm", "wheel"),
        (
            "8f50131102d7cff0a5376c10c4ec8e54c577be5e",
            "6c499fff1ee1cb2330347bf3586c72a5c84a07b3",
            "1dd8c3dfcc55235ae3753ce0db264da53bae4a80",
            "9bf8c446fa99cdfaf6409f9d5f8683c6b80f9843",
        ),
    ),
    Project(
        "uncertainties",
        "https://github.com/lmfit/uncertainties",
        "flat layout, tests/ beside the package, a pytest-codspeed benchmark test",
        ("numpy", "scipy", "pytest", "pytest-codspeed", "setuptools", "setuptools-scm", "wheel"),
        (
            "f1b7e4f4e3283c3c8c265610e2b91ae8b478c956",
            "3ec06dfbd6dfa0d62f0a0d3280d2872b79e77513",
            "a63baeeb302c05b54f414b2f2c9138947a06a062",
            "9b1844dc69e859559f0e5a3b10802ddbe9d88143",
            "a3199dc633f0544553d2ca7c02d18be0d65d027b",
            "19865cc0e87558d1d105c9d674ebace501e41395",
            "fe3461beaca0e3157a8f953389faed14410b744e",
            "ea1d66435b5de700f763f9a4cb828f2ef78fe731",
        ),
    ),
    Project(
        "pykdtree",
        "https://github.com/storpipfugl/pykdtree",
        "a compiled extension (Cython and C, OpenMP) built for each commit, test module inside the package",
        ("numpy", "Cython>=3.1", "setuptools", "wheel", "pytest"),
        (
            "8686f116b6797bde180e8676c4c983c47da7973a",
            "8a48f3e8d5907dd5bfeab4d4f0cf643b4fc3cdf1",
            "0fd5ce7101cc1dedc907432364ba1bc80bdb7894",
            "f2c9a7e26d70458c44d2cd1990bd13f215694a55",
            "76078153cedb436ad219aec086e2d457beaf51bc",
        ),
    ),
    Project(
        "hepunits",
        "https://github.com/scikit-hep/hepunits",
        "src layout, tests/ with testpaths, an optional pint integration",
        ("pint<0.25.1", "pytest", "hatchling", "hatch-vcs", "editables"),
        (
            "cfcdb3639aba1c3438e078c469386c22e90740c0",
            "504af7acd3276ae62a2cdfe01f9f1190b8bd1e22",
            "1b2cdeebb53c04ed307075f1842bcc8d2dcfd93a",
            "190a2f4a23e87a50a9119a064061409877699c37",
        ),
    ),
)

# Loaded into the truth runs with -p: every test's outcome and summed phase durations, as JSON.
TRUTH_PLUGIN = """
import json, os
_tests = {}
def pytest_runtest_logreport(report):
    t = _tests.setdefault(report.nodeid, {"outcome": "passed", "duration": 0.0})
    t["duration"] += report.duration
    if report.failed:
        t["outcome"] = "failed" if report.when == "call" else "error"
    elif report.skipped and t["outcome"] == "passed":
        t["outcome"] = "xfailed" if hasattr(report, "wasxfail") else "skipped"
def pytest_collectreport(report):
    if report.failed:
        _tests[report.nodeid or "<session>"] = {"outcome": "collect-error", "duration": 0.0}
def pytest_sessionfinish(session, exitstatus):
    with open(os.environ["GAUNTLET_TRUTH_OUT"], "w") as out:
        json.dump({"exit_code": int(exitstatus), "tests": _tests}, out)
"""

CONFIG = """\
environments:
  - name: host
    gpus: none
    env: {SETUPTOOLS_SCM_PRETEND_VERSION: "0.0.0"}
    setup: ["pip install --no-deps --no-build-isolation -e ."]
checks: {precommit: false, docstrings: false}
"""


def sh(
    argv: list[str], cwd: Path | None = None, env: dict[str, str] | None = None, timeout: float = 600
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )


def git(repo: Path, *args: str) -> str:
    done = sh(["git", "-C", str(repo), *args])
    if done.returncode:
        raise RuntimeError(f"git {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout.strip()


class Workbench:
    """A project's clone and virtual environment under the data directory."""

    def __init__(self, project: Project, data: Path, paritybot_src: Path):
        self.project, self.data, self.src = project, data, paritybot_src
        self.repo = data / "repos" / project.name
        self.venv = data / "venvs" / project.name
        self.python = self.venv / "bin" / "python"

    def env(self, **extra: str) -> dict[str, str]:
        path = f"{self.venv / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"
        return {**os.environ, "PATH": path, "VIRTUAL_ENV": str(self.venv), **BUILD_ENV, **extra}

    def prepare(self) -> None:
        if not self.repo.exists():
            sh(["git", "clone", "-q", self.project.url, str(self.repo)], timeout=1800)
        if not self.python.exists():
            sh([sys.executable, "-m", "venv", str(self.venv)])
            self.pip("install", "-q", *self.project.deps)
        marker = self.venv / ".paritybot-src"
        if not marker.exists() or marker.read_text() != str(self.src):
            self.pip("install", "-q", "-e", str(self.src))
            marker.write_text(str(self.src))

    def config(self) -> Path:
        """The gauntlet's config for this project: its build, and the tests check alone."""
        path = self.data / "configs" / f"{self.project.name}.yml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(CONFIG)
        return path

    def pip(self, *args: str) -> None:
        done = sh([str(self.python), "-m", "pip", *args], env=self.env(), timeout=1800)
        if done.returncode:
            raise RuntimeError(f"pip {' '.join(args[:3])}: {done.stderr.strip()[-500:]}")

    def checkout(self, sha: str) -> None:
        git(self.repo, "checkout", "-q", "-f", sha)
        git(self.repo, "clean", "-q", "-ffdx")
        done = sh(["bash", "-c", BUILD], cwd=self.repo, env=self.env(), timeout=1800)
        if done.returncode:
            raise RuntimeError(f"build of {sha[:12]} failed: {done.stderr.strip()[-500:]}")

    def pytest(self, out: Path, *ids: str) -> dict[str, Any]:
        plugin = self.data / "plugin"
        plugin.mkdir(exist_ok=True)
        (plugin / "gauntlet_truth.py").write_text(TRUTH_PLUGIN)
        env = self.env(GAUNTLET_TRUTH_OUT=str(out), PYTHONPATH=str(plugin))
        argv = [
            str(self.python),
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-p",
            "gauntlet_truth",
            "-q",
            *ids,
        ]
        started = time.monotonic()
        try:
            sh(argv, cwd=self.repo, env=env, timeout=SUITE_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            return {"exit_code": -1, "tests": {}, "timeout": True}
        result: dict[str, Any] = (
            json.loads(out.read_text()) if out.exists() else {"exit_code": -2, "tests": {}}
        )
        result["wall_s"] = time.monotonic() - started
        return result


def truth(bench: Workbench, sha: str, recheck: frozenset[str] = frozenset()) -> dict[str, Any]:
    """The whole suite at ``sha``, from the cache when it was run before."""
    cache = bench.data / "truth" / bench.project.name / f"{sha}.json"
    if cache.exists():
        result: dict[str, Any] = json.loads(cache.read_text())
    else:
        cache.parent.mkdir(parents=True, exist_ok=True)
        bench.checkout(sha)
        result = bench.pytest(cache.with_suffix(".raw"))
        result["sha"] = sha
        cache.write_text(json.dumps(result))
    todo = sorted(recheck - set(result.get("rerun", {})))
    if todo:
        bench.checkout(sha)
        again = bench.pytest(cache.with_suffix(".rerun"), *todo)
        rerun = result.setdefault("rerun", {})
        for nodeid in todo:
            rerun[nodeid] = again["tests"].get(nodeid, {"outcome": "failed"})["outcome"]
        cache.write_text(json.dumps(result))
    return result


def describe_pr(repo: Path, head: str) -> dict[str, Any]:
    base = git(repo, "rev-parse", f"{head}^1")
    subject = git(repo, "log", "-1", "--format=%s", head)
    date = git(repo, "log", "-1", "--format=%cI", head)
    number = re.search(r"#(\d+)", subject)
    changed = git(repo, "diff", "--name-only", "--no-renames", base, head).splitlines()
    touched = {}
    for path in (p for p in changed if p.endswith(".py")):
        lines = changed_lines(git(repo, "diff", "-U0", "--no-renames", base, head, "--", path))
        source = sh(["git", "-C", str(repo), "show", f"{head}:{path}"]).stdout  # empty when removed
        if names := touched_definitions(source, lines):
            touched[path] = names
    return {
        "head": head,
        "base": base,
        "pr": f"#{number.group(1)}" if number else "—",
        "title": subject,
        "date": date,
        "changed": changed,
        "touched": touched,
    }


def record_map(bench: Workbench, rev: str, label: str) -> dict[str, Any]:
    """paritybot's coverage map of ``rev`` (once per project and label), as a user records it."""
    cache = bench.data / "verdicts" / label / bench.project.name / f"map-{rev}.json"
    if cache.exists():
        stored: dict[str, Any] = json.loads(cache.read_text())
        return stored
    cache.parent.mkdir(parents=True, exist_ok=True)
    paritybot = str(bench.venv / "bin" / "paritybot")
    env = bench.env(XDG_CACHE_HOME=str(bench.data / "cache" / label))
    argv = [paritybot, "coverage-map", "--repo", str(bench.repo), "--runner", "host", "--rev", rev]
    if "--config" in sh([paritybot, "coverage-map", "--help"], env=env).stdout:
        argv += ["--config", str(bench.config())]
    else:  # an older paritybot: the same call `coverage-map --config` makes
        argv = [str(bench.python), "-c", MAP_WITH_CONFIG, str(bench.repo), rev, str(bench.config())]
    started = time.monotonic()
    done = sh(argv, env=env, timeout=SUITE_TIMEOUT_S * 2)
    result = {"rev": rev, "exit": done.returncode, "output": (done.stdout + done.stderr)[-3000:]}
    result["wall_s"] = time.monotonic() - started
    cache.write_text(json.dumps(result))
    return result


def verdict(bench: Workbench, pr: dict[str, Any], label: str) -> dict[str, Any]:
    """paritybot's check of the change, with the coverage maps recorded so far."""
    cache = bench.data / "verdicts" / label / bench.project.name / f"{pr['head']}.json"
    if cache.exists():
        stored: dict[str, Any] = json.loads(cache.read_text())
        return stored
    cache.parent.mkdir(parents=True, exist_ok=True)
    env = bench.env(XDG_CACHE_HOME=str(bench.data / "cache" / label))
    argv = [str(bench.venv / "bin" / "paritybot"), "check", "--repo", str(bench.repo), "--runner", "host"]
    argv += ["--base", pr["base"], "--head", pr["head"], "--config", str(bench.config()), "--json"]
    started = time.monotonic()
    checked = sh(argv, env=env, timeout=SUITE_TIMEOUT_S * 2)
    try:
        report = json.loads(checked.stdout)
    except json.JSONDecodeError:
        report = None
    result = {
        "exit": checked.returncode,
        "stderr": checked.stderr[-3000:],
        "wall_s": time.monotonic() - started,
        "report": report,
    }
    cache.write_text(json.dumps(result))
    return result


MAP_WITH_CONFIG = """
import asyncio, sys
from pathlib import Path
from bot.cli.local_check import run_local_check
from bot.cli.main import _local_runners
from bot.core.models import RunKind
report = asyncio.run(run_local_check(Path(sys.argv[1]), base=None, head=sys.argv[2],
    runner_factory=_local_runners("host"), config_file=Path(sys.argv[3]), kind=RunKind.BASELINE))
print(report.coverage_map.describe() if report.coverage_map else report.error or report.state)
"""


def run_project(bench: Workbench, stage: str, label: str, maps: str) -> list[dict[str, Any]]:
    bench.prepare()
    prs = sorted((describe_pr(bench.repo, head) for head in bench.project.prs), key=lambda pr: pr["date"])
    rows = []
    for pr in prs:
        head = pr["head"]
        base_truth = truth(bench, pr["base"])
        head_truth = truth(bench, head)
        suspects = {t for t, v in head_truth["tests"].items() if v["outcome"] in ("failed", "error")} - {
            t for t, v in base_truth["tests"].items() if v["outcome"] in ("failed", "error")
        }
        head_truth = truth(bench, head, frozenset(suspects))
        log(
            f"{bench.project.name} {pr['pr']} truth: {len(head_truth['tests'])} tests, {len(suspects)} new failures"
        )
        if stage == "truth":
            continue
        mapped = record_map(bench, pr["base"] if maps == "each" else prs[0]["base"], label)
        found = {**verdict(bench, pr, label), "map": mapped}
        row = {"project": bench.project.name, **pr, "verdict": found}
        row["score"] = score_pr(pr, base_truth, head_truth, found["report"])
        log(f"{bench.project.name} {pr['pr']} paritybot: {row['score']['status']}, ran {row['score']['ran']}")
        rows.append(row)
    return rows


def rescore(stored: dict[str, Any], data: Path) -> list[dict[str, Any]]:
    """The stored rows, scored again from the truth and verdicts kept in ``data`` (when it has them)."""
    rows: list[dict[str, Any]] = stored["rows"]
    for row in rows:
        truths = data / "truth" / row["project"]
        found = data / "verdicts" / stored["label"] / row["project"] / f"{row['head']}.json"
        paths = [truths / f"{row['base']}.json", truths / f"{row['head']}.json", found]
        if all(p.exists() for p in paths):
            base, head, verdict_ = (json.loads(p.read_text()) for p in paths)
            row["score"] = score_pr(row, base, head, verdict_["report"])
    return rows


def log(line: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {line}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--paritybot-src", type=Path, default=Path(__file__).resolve().parent.parent)
    parser.add_argument("--projects", default=",".join(p.name for p in PROJECTS))
    parser.add_argument("--data-dir", type=Path, default=Path("gauntlet-data"))
    parser.add_argument("--stage", choices=["truth", "check", "all"], default="all")
    parser.add_argument(
        "--maps",
        choices=["first", "each"],
        default="first",
        help="first: one coverage map per project, of the oldest PR's base (later PRs use it as an older map); "
        "each: a map of every PR's base",
    )
    parser.add_argument("--label", default="", help="names the verdicts (default: the source's commit)")
    parser.add_argument("--from-json", type=Path, help="print the tables of a stored results file")
    args = parser.parse_args(argv)
    if args.from_json:
        stored = json.loads(args.from_json.read_text())
        print(render(rescore(stored, args.data_dir.resolve()), stored["title"]))
        return 0
    src = args.paritybot_src.resolve()
    # The code under test: the last commit that changed it, not this script's own.
    commit = git(src, "log", "-1", "--format=%h", "--abbrev=12", "--", *PARITYBOT_CODE)
    label = args.label or commit
    data = args.data_dir.resolve()
    wanted = set(args.projects.split(","))
    rows: list[dict[str, Any]] = []
    for project in PROJECTS:
        if project.name in wanted:
            rows += run_project(Workbench(project, data, src), args.stage, label, args.maps)
    if args.stage == "truth":
        return 0
    changed = git(src, "status", "--porcelain", "--untracked-files=no", "--", *PARITYBOT_CODE)
    dirty = " (with uncommitted changes)" if changed else ""
    title = f"paritybot {commit}{dirty}"
    for row in rows:
        row.pop("verdict")
    path = data / f"results-{label}.json"
    # Projects run apart under the same label add up to one table.
    previous = json.loads(path.read_text())["rows"] if path.exists() else []
    done = {row["project"] for row in rows}
    rows = [row for row in previous if row["project"] not in done] + rows
    path.write_text(json.dumps({"title": title, "label": label, "rows": rows}, indent=1))
    print(render(rows, title))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
