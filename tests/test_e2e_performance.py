"""End to end: a pull request whose config asks for the benchmarks' comparison gets the Performance
section in its summary and a completed ``paritybot / performance`` check run — the real bot, a real
git repository with pytest-benchmark tests, base against head on the host runner, the fake GitHub.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from botharness import REPO, BotHarness
from fakegithub import FakeGitHub
from sample_repo import SampleRepo, commit_all, git

from bot.core.config import PerformanceSettings
from bot.core.perf import perf_trigger

CONFIG = """\
checks: {precommit: false, docstrings: false}
performance:
  pytest: [benches]
  when: [label, command]
  label: ciflow/perf
  blocking: true
  # Six pairs and 90% for the run: a twenty-fold slowdown is decided even on a machine at load 15.
  processes: 6
  confidence: 0.9
  max_time_s: 1.0
"""
BENCH = """\
import spin


def test_slowed(benchmark):
    assert benchmark(spin.work, 2000) >= 0


def test_same(benchmark):
    assert benchmark(spin.same, 2000) >= 0


def test_crashes_on_head(benchmark):
    assert benchmark(spin.fragile) == 1
"""
SPIN = """\
def loop(n):
    total = 0
    for i in range(n):
        total += i * i % 7
    return total


def work(n):
    return loop(n * {factor})


def same(n):
    return loop(n)


def fragile():
    {fragile}
"""


def benchmark_project(tmp: Path) -> SampleRepo:
    """main: four benchmarks in ``benches/``, a test in ``tests/``; feature: one benchmark does twenty
    times the work, one raises."""
    path = tmp / "bench-project"
    (path / "benches").mkdir(parents=True)
    (path / "benches" / "test_bench.py").write_text(BENCH)
    (path / "spin.py").write_text(SPIN.format(factor=1, fragile="return 1"))
    (path / "other.py").write_text("def add(a, b):\n    return a + b\n")
    (path / "benches" / "test_other.py").write_text(
        "import other\n\n\ndef test_add(benchmark):\n    assert benchmark(other.add, 1, 2) == 3\n"
    )
    # The tests live apart from the benchmarks, in the test roots the tests' selection reads.
    (path / "tests").mkdir()
    (path / "tests" / "test_spin.py").write_text(
        "import spin\n\n\ndef test_same():\n    assert spin.same(3) >= 0\n"
    )
    git(path, "init", "-q", "-b", "main")
    base = commit_all(path, "Benchmarks")
    git(path, "checkout", "-q", "-b", "feature")
    (path / "spin.py").write_text(SPIN.format(factor=20, fragile="raise RuntimeError('broken on head')"))
    head = commit_all(path, "Slower work, a broken benchmark")
    return SampleRepo(path=path, base_sha=base, head_sha=head)


async def start_bot(fake: FakeGitHub, tmp: Path, config: str = CONFIG) -> BotHarness:
    sample = benchmark_project(tmp)
    bare = tmp / "remote.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(sample.path), str(bare)], check=True)
    harness = BotHarness(fake=fake, tmp=tmp, sample=sample, clone_url=bare.as_uri())
    fake.add_repo(REPO, installation_id=1, clone_url=harness.clone_url)
    fake.set_file(REPO, ".github/paritybot.yml", config, ref="main")
    harness.seed_pull(sample.head_sha)
    await harness.start()
    return harness


async def test_a_labelled_pr_gets_the_performance_section_and_check_run(
    fake_github: FakeGitHub, tmp_path: Path
) -> None:
    bot = await start_bot(fake_github, tmp_path)
    try:
        assert await bot.send("pull_request", bot.pr_event("opened", labels=["ciflow/perf"])) == 202
        await bot.wait_runs_done()
        runs = {r.name: r for r in bot.fake.check_runs(REPO, head_sha=bot.sample.head_sha)}
        perf = runs["paritybot / performance (default)"]
        # Created completed: nothing is left for a run that breaks later to finish.
        assert [s["status"] for s in perf.states] == ["completed"]
        final = perf.states[-1]
        assert final["conclusion"] == "failure"  # blocking: true, and twenty times the work
        # The slowed benchmark for sure; on a loaded machine an unchanged one may cross 3% too.
        # A benchmark the change broke fails it too, named first with its error.
        assert re.fullmatch(
            r"1 benchmark crashed on head: benches/test_bench.py::test_crashes_on_head \(failed on head: .*"
            r"broken on head.*\); [12] benchmarks? slower by more than 3%",
            final["output"]["title"],
        )
        [summary] = [c.body for c in bot.bot_comments()]
        section = summary[summary.index("### Performance") :]
        rows = {
            line.split("|")[2].strip(" `"): line for line in section.splitlines() if line.startswith("| ")
        }
        slowed = rows["benches/test_bench.py::test_slowed"]
        assert "❌ regression" in slowed
        assert float(slowed.split("|")[5].split()[0]) > 5  # head/base, about 20
        # Unchanged: no change, or inconclusive on a busy machine; compared, never an error.
        assert "error" not in rows["benches/test_bench.py::test_same"]
        # A benchmark that crashes on head is an error on head, never a regression.
        crashed = rows["benches/test_bench.py::test_crashes_on_head"]
        assert "⚠️ error" in crashed and "regression" not in crashed and "broken on head" in crashed
        assert "```mermaid" in section  # the regression's rounds, charted
        assert f"paritybot perf --base {bot.sample.base_sha} --head {bot.sample.head_sha}" in section
        assert "label `ciflow/perf`" in section
        assert "benches/test_other.py::test_add" in rows  # asked for by label: every benchmark
    finally:
        await bot.stop()


async def test_every_pr_compares_only_the_benchmarks_the_change_can_affect(
    fake_github: FakeGitHub, tmp_path: Path
) -> None:
    bot = await start_bot(fake_github, tmp_path, CONFIG.replace("[label, command]", "[every-pr]"))
    try:
        assert await bot.send("pull_request", bot.pr_event("opened")) == 202
        await bot.wait_runs_done()
        runs = {r.name: r.states[-1] for r in bot.fake.check_runs(REPO, head_sha=bot.sample.head_sha)}
        assert runs["paritybot / performance (default)"]["conclusion"] == "failure"
        section = bot.bot_comments()[0].body.split("### Performance", 1)[1]
        assert "benches/test_bench.py::test_slowed" in section  # imports the changed module
        assert "test_other.py" not in section  # imports nothing the change touched
        assert "--affected" in section
        why = section.split("<summary>Why these benchmarks</summary>", 1)[1].split("</details>", 1)[0]
        assert why.strip().startswith("- `benches/test_bench.py`: ") and "spin" in why
    finally:
        await bot.stop()


async def test_without_the_label_nothing_is_compared(fake_github: FakeGitHub, tmp_path: Path) -> None:
    bot = await start_bot(fake_github, tmp_path)
    try:
        assert await bot.send("pull_request", bot.pr_event("opened")) == 202
        await bot.wait_runs_done()
        names = {r.name for r in bot.fake.check_runs(REPO, head_sha=bot.sample.head_sha)}
        assert "paritybot / performance (default)" not in names
        assert "### Performance" not in bot.bot_comments()[0].body
    finally:
        await bot.stop()


def test_when_the_config_asks_for_the_comparison() -> None:
    settings = PerformanceSettings(pytest=["benches"], environments=["gpu"])
    assert perf_trigger(settings, "gpu", [], asked=False) is None
    assert perf_trigger(settings, "gpu", [], asked=True) == ("command", "asked for with `/retest-gpu perf`")
    assert perf_trigger(settings, "gpu", ["ciflow/perf"], asked=False) is not None
    assert perf_trigger(settings, "cpu", ["ciflow/perf"], asked=True) is None  # not this environment
    assert perf_trigger(PerformanceSettings(), "gpu", ["ciflow/perf"], asked=True) is None  # no kind
    every = PerformanceSettings(pytest=["benches"], when=["every-pr"])
    assert perf_trigger(every, "default", [], asked=False) == (
        "every-pr",
        "every pull request: the benchmarks the change can affect",
    )
    assert perf_trigger(every, "default", [], asked=True) is not None  # every-pr covers the command too
