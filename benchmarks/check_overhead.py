#!/usr/bin/env python3
"""`paritybot check`'s fixed overhead: its wall time against running the selected tests with pytest.

    python benchmarks/check_overhead.py [-n 5] [--runner host|docker] [--image IMAGE] [--profile]

Real git repositories with a base commit and a change: the built-in demo (18 tests, two
pre-commit hooks, the change fails a test; with its default two reruns of the failing test, and
without), a generated project of 300 tests in 10 modules (two pre-commit hooks, the change
passes), and the same with 30 MB of git history (``--history-mb``), as a real project has. For
each, in the same script run:

- **paritybot**: ``paritybot check --repo P --base main --runner R`` as a user types it (a new
  process each time, its cached clone warm after the first run, which is reported apart);
- **bare pytest**: ``python -m pytest -p no:cacheprovider <the ids paritybot selected>`` in a
  checkout of the change, with the same interpreter (for ``--runner docker``: ``docker run`` of it
  in the same image);
- the difference of the medians: paritybot's fixed cost per run on top of the tests themselves.

Each side is timed in wall-clock seconds and in CPU seconds (user + system of its processes): on a
machine shared with other work, wall time grows with the neighbours' load and CPU time hardly does.
The two sides alternate, so load on the machine hits both alike. ``--profile`` adds where
paritybot's time goes, from one in-process run per project: start-up (interpreter and imports),
preparing the working tree, each step the runner ran, and the bot's own work between them.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run as a script from a checkout: the project must be importable

from bot.cli.demo import commit_all, git, make_demo_repo  # noqa: E402

CLI = [sys.executable, "-m", "bot.cli.main"]
MODULES = 10
TESTS_PER_MODULE = 30  # 300 tests in all: 20 functions and one parametrized over 10 cases per module
PRE_COMMIT = """repos:
  - repo: local
    hooks:
      - id: no-print
        name: forbid print calls in library code
        language: pygrep
        entry: 'print\\('
        files: ^src/
      - id: no-tabs
        name: no tabs
        language: pygrep
        entry: '\\t'
        types: [python]
"""


def _module(i: int) -> str:
    funcs = "\n\n".join(
        f'def f{j}(x: int) -> int:\n    """Return x scaled by {j}."""\n    return x * {j} + {i}'
        for j in range(20)
    )
    return f'"""Module {i} of the generated project."""\n\n\n{funcs}\n'


def _tests(i: int) -> str:
    body = "\n\n\n".join(
        f"def test_f{j}() -> None:\n    assert m.f{j}(2) == 2 * {j} + {i}" for j in range(20)
    )
    param = (
        "@pytest.mark.parametrize('x', range(10))\n"
        f"def test_f1_many(x: int) -> None:\n    assert m.f1(x) == x + {i}\n"
    )
    return f"import pytest\n\nimport proj.mod{i} as m\n\n\n{body}\n\n\n{param}"


def make_project(root: Path, history_mb: int = 0, name: str = "proj300") -> Path:
    """A 300-test project on `main`, and a `feature` branch that changes one function of one module.

    ``history_mb``: that much incompressible data committed and removed again before the base, so
    the repository weighs what a real one does (einops' is some 10 MB, ignite's some 40 MB).
    """
    path = root / name
    (path / "src" / "proj").mkdir(parents=True)
    (path / "tests").mkdir()
    (path / "src" / "proj" / "__init__.py").write_text('"""The generated project."""\n')
    for i in range(MODULES):
        (path / "src" / "proj" / f"mod{i}.py").write_text(_module(i))
        (path / "tests" / f"test_mod{i}.py").write_text(_tests(i))
    (path / "pyproject.toml").write_text(
        '[project]\nname = "proj"\nversion = "0"\n\n[tool.pytest.ini_options]\n'
        'testpaths = ["tests"]\npythonpath = ["src"]\n'
    )
    (path / ".pre-commit-config.yaml").write_text(PRE_COMMIT)
    git(path, "init", "-q", "-b", "main")
    if history_mb:
        (path / "data").mkdir()
        for i in range(history_mb):
            (path / "data" / f"blob{i}.bin").write_bytes(os.urandom(1 << 20))
        commit_all(path, f"history: {history_mb} MB of data")
        shutil.rmtree(path / "data")
    commit_all(path, "base: 300 tests")
    git(path, "checkout", "-q", "-b", "feature")
    mod = path / "src" / "proj" / "mod3.py"
    mod.write_text(mod.read_text().replace("return x * 5 + 3", "return 5 * x + 3"))
    commit_all(path, "change: mod3.f5")
    return path


@dataclass
class Side:
    times: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)

    @property
    def median(self) -> float:
        return statistics.median(self.times)

    @property
    def median_cpu(self) -> float:
        return statistics.median(self.cpu)

    def describe(self) -> str:
        return (
            f"wall median {self.median:6.2f} s (min {min(self.times):5.2f}, max {max(self.times):5.2f})"
            f"   CPU median {self.median_cpu:5.2f} s   n={len(self.times)}"
        )


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed(
    argv: Sequence[str], cwd: Path | None = None, env: dict[str, str] | None = None, side: Side | None = None
) -> tuple[float, str]:
    """Wall time of one command; with ``side``, its wall and CPU time (its processes' user + system)
    are added there. CPU time is what a busy machine's neighbours do not inflate."""
    cpu = children_cpu()
    started = time.perf_counter()
    done = subprocess.run(list(argv), cwd=cwd, env=env, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - started
    if side is not None:
        side.times.append(elapsed)
        side.cpu.append(children_cpu() - cpu)
    return elapsed, done.stdout


@dataclass(frozen=True)
class Project:
    name: str
    repo: Path
    config: Path | None = None  # --config FILE, else the defaults


def check_argv(project: Project, runner: str, image: str | None, *extra: str) -> list[str]:
    argv = [*CLI, "check", "--repo", str(project.repo), "--base", "main", "--head", "feature"]
    argv += ["--runner", runner]
    if image:
        argv += ["--image", image, "--gpus", "none"]
    if project.config:
        argv += ["--config", str(project.config)]
    return argv + list(extra)


def bare_argv(ids: list[str], head: Path, image: str | None) -> list[str]:
    """pytest on the selected ids, on the host or, for the container runner, in the same image."""
    pytest = ["-m", "pytest", "-q", "-p", "no:cacheprovider", *ids]
    if image is None:
        return [sys.executable, *pytest]
    mount = ["-v", f"{head}:/workspace", "-w", "/workspace", "-e", "HOME=/tmp"]
    return ["docker", "run", "--rm", "--network", "none", *mount, image, "python", *pytest]


def selected_ids(project: Project, runner: str, image: str | None, env: dict[str, str]) -> list[str]:
    """The ids paritybot ran: what bare pytest is then given."""
    _, out = timed(check_argv(project, runner, image, "--json"), env=env)
    report = json.loads(out)
    selection = report["tests"]["selection"]
    if selection["whole_suite"]:
        return []
    return [t["nodeid"] for t in selection["tests"]]


def measure(project: Project, args: argparse.Namespace, env: dict[str, str]) -> None:
    ids = selected_ids(project, args.runner, args.image, env)  # also warms the cached clone
    head = Path(tempfile.mkdtemp(prefix="bench-head-"))
    try:
        subprocess.run(["git", "clone", "-q", str(project.repo), str(head)], check=True)
        git(head, "checkout", "-q", "feature")
        bare = bare_argv(ids, head, args.image)
        ours, theirs = Side(), Side()
        for _ in range(args.n):
            timed(check_argv(project, args.runner, args.image), env=env, side=ours)
            timed(bare, cwd=head, env=env, side=theirs)
    finally:
        shutil.rmtree(head, ignore_errors=True)
    where = f"runner {args.runner}" + (
        f" ({args.image}); CPU: this machine's processes, not the engine's" if args.image else ""
    )
    print(f"\n{project.name}: {len(ids)} selected ids, {where}")
    bare = theirs
    print(f"  paritybot check          {ours.describe()}")
    print(f"  bare pytest <selected>   {bare.describe()}")
    if ours.median - bare.median < 0 or not ids:
        print("  (the two sides did not run the same tests)")
    print(
        f"  fixed overhead           wall {ours.median - bare.median:6.2f} s (ratio {ours.median / bare.median:.1f}×)"
        f"   CPU {ours.median_cpu - bare.median_cpu:5.2f} s"
    )


def profile(project: Project, args: argparse.Namespace) -> None:
    """One in-process run, timed phase by phase through a runner that times each step."""
    from bot.cli.local_check import check_policy, run_local_check
    from runner.backends.base import Runner, RunnerInfo, RunnerRequest, Step, StepResult
    from runner.backends.choice import runner_factory

    marks: list[tuple[str, float, float]] = []  # label, wall seconds, CPU seconds of its processes
    started, started_cpu = time.perf_counter(), children_cpu() + time.process_time()
    made: list[tuple[float, float]] = []

    class Timed:
        def __init__(self, inner: Runner) -> None:
            self.inner = inner

        @property
        def info(self) -> RunnerInfo:
            return self.inner.info

        async def prepare(self) -> None:
            t, c = time.perf_counter(), children_cpu()
            await self.inner.prepare()
            marks.append(("runner: prepare", time.perf_counter() - t, children_cpu() - c))

        async def run(self, step: Step, workspace: Path) -> StepResult:
            t, c = time.perf_counter(), children_cpu()
            result = await self.inner.run(step, workspace)
            marks.append((f"step: {step.name}", time.perf_counter() - t, children_cpu() - c))
            return result

        async def cancel(self) -> None:
            await self.inner.cancel()

        async def close(self) -> None:
            t, c = time.perf_counter(), children_cpu()
            await self.inner.close()
            marks.append(("runner: close", time.perf_counter() - t, children_cpu() - c))

    inner_factory = runner_factory(check_policy(args.runner))

    async def factory(request: RunnerRequest) -> Runner:
        made.append((time.perf_counter() - started, children_cpu() + time.process_time() - started_cpu))
        return Timed(await inner_factory(request))

    report = asyncio.run(
        run_local_check(
            project.repo,
            base="main",
            head="feature",
            runner_factory=factory,
            config_file=project.config,
            image=args.image,
            gpus="none" if args.image else None,
        )
    )
    total = time.perf_counter() - started
    total_cpu = children_cpu() + time.process_time() - started_cpu
    print(
        f"\nprofile of one run, {project.name} (in-process, {report.state.value}): wall {total:.2f} s, CPU {total_cpu:.2f} s"
    )
    first = made[0] if made else (0.0, 0.0)
    rows = [("config, cached clone and working tree (until the runner is made)", *first)]
    rows += marks
    between = (total - first[0] - sum(m[1] for m in marks), total_cpu - first[1] - sum(m[2] for m in marks))
    rows.append(("the bot's own work between steps (checks, selection, report)", *between))
    print(f"  {'wall':>7} {'CPU':>7}")
    for label, wall, cpu in rows:
        print(f"  {wall:6.2f}s {cpu:6.2f}s  {label}")
    startup = Side()
    for _ in range(3):
        timed(
            [sys.executable, "-c", "import bot.cli.main, bot.cli.local_check, runner.pipeline"], side=startup
        )
    print(
        f"  {startup.median:6.2f}s {startup.median_cpu:6.2f}s  start-up of a `paritybot` process (interpreter, imports)"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("-n", type=int, default=5, help="measured runs of each side (default 5)")
    parser.add_argument("--runner", choices=["host", "docker"], default="host")
    parser.add_argument("--image", help="with --runner docker: the image (default: the test image)")
    parser.add_argument("--profile", action="store_true", help="also show where paritybot's time goes")
    parser.add_argument(
        "--history-mb", type=int, default=30, help="a fourth project: the 300 tests with this much history"
    )
    args = parser.parse_args()
    logging.disable(logging.WARNING)  # the in-process profile logs nothing but its figures
    import structlog

    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.ERROR))
    if args.runner == "docker" and not args.image:
        args.image = os.environ.get("PARITYBOT_TEST_IMAGE", "paritybot-test/python:bookworm")
    with tempfile.TemporaryDirectory(prefix="bench-check-") as tmp:
        root = Path(tmp)
        # paritybot's cache, and its pre-commit environments, in the scratch directory: a cold
        # start, then warm runs, as on a user's machine.
        env = {**os.environ, "XDG_CACHE_HOME": str(root / "cache")}
        os.environ["XDG_CACHE_HOME"] = env["XDG_CACHE_HOME"]
        no_reruns = root / "no-reruns.yml"
        no_reruns.write_text("tests:\n  reruns: 0\n")
        demo = make_demo_repo(root / "demo").path
        projects = [
            Project("demo (18 tests; its failing test rerun twice, the default)", demo),
            Project("demo (18 tests; --config with tests.reruns: 0)", demo, no_reruns),
            Project("generated project (300 tests; the change passes)", make_project(root)),
        ]
        if args.history_mb:
            repo = make_project(root, args.history_mb, "proj300-history")
            projects.append(Project(f"the same with {args.history_mb} MB of git history", repo))
        load = os.getloadavg()[0]
        print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load average {load:.1f} at the start")
        for project in projects:
            cold, _ = timed(check_argv(project, args.runner, args.image), env=env)
            print(f"\n{project.name}: first run (empty cache: clone, pre-commit's environments) {cold:.2f} s")
            measure(project, args, env)
            if args.profile:
                profile(project, args)
        print(f"\nload average at the end {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
