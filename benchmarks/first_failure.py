"""How soon a breaking change's first failure is reported, against when the run's result is.

A generated project of ``--files`` × ``--tests`` tests (each a few milliseconds, all importing the
changed module) where the pull request breaks one test in the middle of pytest's order. The real
pipeline runs it on the host runner with a progress callback, as the service's EarlyResults is:
the figure is the time from the run's start to the first progress report naming the failure
(the tests check run's "1 failed so far"), against the time to the final result (which also reruns
the failure and runs it on the merge base). Without streaming the first is the second.

    python benchmarks/first_failure.py [--files 30] [--tests 100] [--sleep-ms 5] [--github]

``--github``: instead, the real bot against the fake GitHub on the demo project. Its first run
fails one test; then a push adds ``--files × --tests`` slow tests, and the figure is the time from
that push's webhook to the fake GitHub's record of (a) the tests check run saying "1 failed so
far" and (b) the final result. The test that failed in the previous run runs first.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import structlog  # noqa: E402

from bot.core.config import parse_repo_config  # noqa: E402
from bot.core.models import RunReport, RunRequest  # noqa: E402
from runner.backends.base import RunnerRequest  # noqa: E402
from runner.backends.host import HostRunner  # noqa: E402
from runner.pipeline import Pipeline, PipelineDeps  # noqa: E402

CONFIG = "checks: {precommit: false, docstrings: false}\ntests: {paths: [tests], use_coverage_map: false}\n"
TEST = """
def test_{k}():
    time.sleep({sleep})
    assert lib.double({k}) == {k} * 2
"""


def git(repo: Path, *args: str) -> str:
    ident = ["-c", "user.name=b", "-c", "user.email=b@e", "-c", "commit.gpgsign=false"]
    return subprocess.run(
        ["git", "-C", str(repo), *ident, *args], check=True, capture_output=True, text=True
    ).stdout.strip()


def make_project(root: Path, files: int, tests: int, sleep_s: float) -> tuple[Path, str, str, str]:
    repo = root / "repo"
    (repo / "tests").mkdir(parents=True)
    (repo / ".github").mkdir()
    (repo / ".github/paritybot.yml").write_text(CONFIG)
    (repo / "pyproject.toml").write_text('[tool.pytest.ini_options]\npythonpath = ["."]\n')
    (repo / "lib.py").write_text("def double(x):\n    return x * 2\n")
    for f in range(files):
        body = "import time\n\nimport lib\n" + "".join(
            TEST.format(k=f * tests + t, sleep=sleep_s) for t in range(tests)
        )
        (repo / "tests" / f"test_part_{f:03d}.py").write_text(body)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "base")
    base = git(repo, "rev-parse", "HEAD")
    broken = (files // 2) * tests + tests // 2  # the middle of pytest's order
    (repo / "lib.py").write_text(f"def double(x):\n    return x * 2 + (x == {broken})\n")
    git(repo, "commit", "-qam", "break one")
    return repo, base, git(repo, "rev-parse", "HEAD"), f"tests/test_part_{files // 2:03d}.py::test_{broken}"


async def measure(repo: Path, base: str, head: str, scratch: Path) -> tuple[float | None, float, RunReport]:
    started = time.monotonic()
    first: list[float] = []

    async def progress(report: RunReport) -> None:
        if (
            not first
            and report.tests is not None
            and report.tests.in_progress is not None
            and report.tests.results
        ):
            first.append(time.monotonic() - started)

    async def host(request: RunnerRequest) -> HostRunner:
        path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
        return HostRunner(env={"PATH": path})

    deps = PipelineDeps(
        runner_factory=host, workspace_root=scratch / "ws", cache_root=scratch / "cache", progress=progress
    )
    config = parse_repo_config(CONFIG)
    request = RunRequest(repo="bench/many", pr_number=1, clone_url=str(repo), head_sha=head, base_sha=base)
    report = await Pipeline(request, config, config.default_environment(), "bench", deps).execute()
    return (first[0] if first else None), time.monotonic() - started, report


async def on_github(files: int, tests: int, sleep_s: float) -> tuple[float, float]:
    from botharness import REPO, BotHarness
    from fakegithub import FakeGitHub
    from finishing import FAST, finished, view
    from serveproc import TESTS

    body = "import time\n\nfrom calc import stats\n" + "".join(
        f"\n\ndef test_{k}():\n    time.sleep({sleep_s})\n    assert stats\n" for k in range(files * tests)
    )
    with tempfile.TemporaryDirectory(prefix="firstfail-gh-") as tmp:
        async with FakeGitHub() as fake:
            bot = await BotHarness.create(fake, Path(tmp), settings=FAST)
            fake.set_file(
                REPO, ".github/paritybot.yml", "tests:\n  reruns: 0\n  use_coverage_map: false\n", ref="main"
            )
            try:
                await bot.send("pull_request", bot.pr_event("opened"))
                await bot.wait_for(
                    "the first run", lambda: finished(view(fake, REPO, 7, bot.sample.head_sha)), timeout=300
                )
                head = bot.commit_on_feature("tests/test_zz_many.py", body, "many slow tests")
                started = time.monotonic()
                await bot.send("pull_request", bot.pr_event("synchronize", head_sha=head))

                def streamed() -> bool:
                    runs = view(fake, REPO, 7, head).runs.get(TESTS, [])
                    return any("failed so far" in (s.get("output") or {}).get("title", "") for s in runs) or (
                        bool(runs) and runs[-1].get("conclusion") == "failure"
                    )

                await bot.wait_for("the first failure", streamed, timeout=600)
                first = time.monotonic() - started
                await bot.wait_for("the result", lambda: finished(view(fake, REPO, 7, head)), timeout=600)
                return first, time.monotonic() - started
            finally:
                await bot.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=30)
    parser.add_argument("--tests", type=int, default=100)
    parser.add_argument("--sleep-ms", type=float, default=5.0)
    parser.add_argument("--github", action="store_true")
    args = parser.parse_args()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    if args.github:
        first_gh, final_gh = asyncio.run(on_github(args.files, args.tests, args.sleep_ms / 1000))
        print(
            f"{args.files * args.tests:,} slow tests added by the push; from its webhook to the fake GitHub's record:"
        )
        print("| first failure visible | final result | ratio |")
        print("|---|---|---|")
        print(f"| {first_gh:.1f} s | {final_gh:.1f} s | {first_gh / final_gh:.2f} |")
        return 0
    with tempfile.TemporaryDirectory(prefix="firstfail-") as tmp:
        repo, base, head, broken = make_project(Path(tmp), args.files, args.tests, args.sleep_ms / 1000)
        first, final, report = asyncio.run(measure(repo, base, head, Path(tmp)))
    assert report.tests is not None, report.error
    failing = [r.nodeid for r in report.tests.results if r.outcome.value in ("failed", "error")]
    total = args.files * args.tests
    print(
        f"{total:,} tests, the change breaks {broken} (in the middle of pytest's order); failing: {failing}"
    )
    shown = f"{first:.1f} s" if first is not None else "never (no progress report named it)"
    print("| first failure reported | final result | ratio |")
    print("|---|---|---|")
    ratio = f"{first / final:.2f}" if first is not None else "—"
    print(f"| {shown} | {final:.1f} s | {ratio} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
