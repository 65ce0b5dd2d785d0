"""The performance section, the check run's outcome and the repository config's `performance:` part."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from gitrepo import GitRepo
from markdown_check import inspect

from bot.core.config import ConfigError, parse_repo_config
from bot.core.perf import (
    BenchmarkError,
    BenchmarkSamples,
    Comparison,
    PerformanceResult,
    PerfThresholds,
    Round,
    Side,
    Verdict,
    outcome,
)
from bot.render.performance import check_text, duration, performance_section, result_outcome, result_section
from runner.perf.stats import compare
from runner.perf.step import SIDES_DIR, PerfRunError, export_sides

LIMITS = PerfThresholds(threshold=0.05)
HOSTILE = "tests/test_x.py::test_y[@org/team #12 <img src=x> `|` </details>]"


def rounds(base: float, head: float, count: int = 12) -> list[Round]:
    # A little spread, so the interval has a width; alternate which side went first.
    return [
        Round(
            base=base * (1 + i % 3 / 1000),
            head=head * (1 + (i + 1) % 3 / 1000 + i % 4 / 1000),
            first=Side.BASE if i % 2 else Side.HEAD,
            process=i % 4,
        )
        for i in range(count)
    ]


def samples(name: str, base: float, head: float, **kw: object) -> BenchmarkSamples:
    return BenchmarkSamples.model_validate(
        {"kind": "pytest", "name": name, "rounds": rounds(base, head), **kw}
    )


def make_results() -> tuple[list[Comparison], list[BenchmarkSamples]]:
    measured = [
        samples("tests/test_a.py::test_same", 2e-6, 2e-6),
        samples(HOSTILE, 1e-3, 1.3e-3),
        samples("tests/test_a.py::test_faster", 20e-3, 10e-3),
        samples(
            "tests/test_a.py::test_crash",
            1e-3,
            1e-3,
            error=BenchmarkError(side=Side.HEAD, message="RuntimeError: boom @someone"),
        ),
    ]
    return [compare(s, LIMITS) for s in measured], measured


def test_the_section_lists_regressions_first_with_ratio_interval_verdict_and_rounds():
    comparisons, measured = make_results()
    body = performance_section(comparisons, measured, threshold=0.05, confidence=0.95)

    rows = [line for line in body.splitlines() if line.startswith("| ") and not line.startswith("| #")]
    assert [row.split(" | ")[5].split(":")[0] for row in rows] == [
        "❌ regression",
        "⚠️ error",
        "✅ improvement",
        "no change (within ±5%)",
    ]
    regression = rows[0]
    assert regression.endswith("| 1 ms | 1.3 ms | 1.302 (1.297–1.307) | ❌ regression | 12 (4) |")
    assert "| 2 µs | 2 µs | 1.001 (0.998–1.005) | no change (within ±5%) | 12 (4) |" in rows[3]
    assert "whole interval is above 1.05" in body
    assert "hold together at 95% for the run's 4 benchmarks" in body


def test_a_regression_gets_a_chart_of_its_rounds_with_numbers_only():
    comparisons, measured = make_results()
    body = performance_section(comparisons, measured, threshold=0.05, confidence=0.95)

    assert body.count("```mermaid") == 1  # only the regression is charted
    chart = body.split("```mermaid", 1)[1].split("```", 1)[0]
    assert "Rounds of benchmark 1" in body
    assert "xychart-beta" in chart and chart.count("line [") == 2
    assert "test_y" not in chart and "@" not in chart


def test_names_and_messages_from_the_run_are_inert():
    comparisons, measured = make_results()
    body = performance_section(
        comparisons, measured, threshold=0.05, confidence=0.95, rerun="paritybot perf --base main --head HEAD"
    )
    shown = inspect(body)

    assert shown.live == []
    assert shown.count("img") == 0 and shown.unbalanced == []
    assert shown.count("table") == 1
    _, summary = check_text(outcome(comparisons, threshold=0.05, blocking=False), comparisons)
    assert inspect(summary).live == []


def test_an_empty_selection_says_why_and_compares_nothing():
    result = PerformanceResult(
        trigger="every pull request",
        threshold=0.03,
        confidence=0.95,
        blocking=False,
        selected=True,
        why=[
            "no benchmark can be affected by this change (`pkg/a.py`: only comments, docstrings or formatting changed)",
            "The benchmarks lie outside the test roots (tests), where coverage maps are recorded.",
        ],
    )
    section = result_section(result)
    assert section.startswith(
        "### Performance\n\nNo benchmark to compare: no benchmark can be affected by this change "
        "(`pkg/a.py`: only comments"
    )
    assert "\n- The benchmarks lie outside the test roots" in section
    assert "| # |" not in section and result_outcome(result).conclusion == "neutral"


@pytest.mark.parametrize(
    ("verdicts", "blocking", "conclusion", "title"),
    [
        ([Verdict.REGRESSION, Verdict.IMPROVEMENT], True, "failure", "1 benchmark slower by more than 5%"),
        ([Verdict.REGRESSION], False, "neutral", "1 benchmark slower by more than 5% (not blocking)"),
        ([Verdict.IMPROVEMENT, Verdict.IMPROVEMENT], True, "success", "2 benchmarks faster by more than 5%"),
        (
            [Verdict.NO_CHANGE, Verdict.TOO_FEW_ROUNDS],
            True,
            "neutral",
            "no change beyond 5%; 1 benchmark too few rounds",
        ),
        ([Verdict.ERROR], True, "neutral", "no change beyond 5%; 1 benchmark error"),
        ([], True, "neutral", "no benchmark to compare"),
    ],
)
def test_the_check_run_fails_only_for_a_blocking_regression(verdicts, blocking, conclusion, title):
    comparisons = [
        Comparison(kind="pytest", name=f"b{i}", verdict=v, reason="r") for i, v in enumerate(verdicts)
    ]
    result = outcome(comparisons, threshold=0.05, blocking=blocking)
    assert (result.conclusion, result.title) == (conclusion, title)


@pytest.mark.parametrize(
    ("side", "blocking", "conclusion"),
    [(Side.HEAD, True, "failure"), (Side.HEAD, False, "neutral"), (Side.BASE, True, "success")],
)
def test_a_benchmark_that_crashes_on_head_fails_the_check_naming_its_error(side, blocking, conclusion):
    crash = Comparison(
        kind="pytest", name="b0", verdict=Verdict.ERROR, reason=f"failed on {side}: boom", failed_on=side
    )
    faster = Comparison(kind="pytest", name="b1", verdict=Verdict.IMPROVEMENT, reason="r")
    result = outcome([crash, faster], threshold=0.05, blocking=blocking)
    assert result.conclusion == conclusion
    if side is Side.HEAD:
        assert result.title.startswith("1 benchmark crashed on head: b0 (failed on head: boom)")


def test_durations_keep_three_figures_in_a_readable_unit():
    assert [duration(x) for x in (2.5, 0.0123, 4.56e-5, 7.8e-8, None)] == [
        "2.5 s",
        "12.3 ms",
        "45.6 µs",
        "78 ns",
        "–",
    ]


def test_the_config_names_the_benchmarks_and_when_they_run():
    config = parse_repo_config(
        """
performance:
  pytest: [benchmarks/, -k, "not slow"]
  asv: asv.conf.json
  command: [python, benchmarks/torch_benchmarks.py]
  when: [label, every-pr]
  label: ciflow/perf
  threshold: 0.03
  blocking: true
"""
    )
    perf = config.performance
    assert perf.enabled()
    assert perf.pytest == ["benchmarks/", "-k", "not slow"]
    assert (perf.when, perf.threshold, perf.blocking, perf.processes) == (
        ["label", "every-pr"],
        0.03,
        True,
        8,
    )
    assert not parse_repo_config("tests: {paths: [tests]}\n").performance.enabled()


def test_a_mistyped_performance_key_is_a_clear_error():
    with pytest.raises(ConfigError) as caught:
        parse_repo_config("performance:\n  treshold: 0.1\n")
    assert any("treshold" in line for line in caught.value.problems)


@pytest.mark.parametrize("processes", [1, 0])
def test_fewer_processes_than_an_interval_needs_is_a_clear_error_naming_the_key(processes):
    # One process a side always ended in "too few rounds": the interval is over the processes.
    with pytest.raises(ConfigError) as caught:
        parse_repo_config(f"performance:\n  pytest: [benchmarks]\n  processes: {processes}\n")
    assert caught.value.problems == [
        f"`performance.processes` = {processes}: Value error, at least 2: the interval is over the "
        "processes of each side, and one process has no spread to measure"
    ]
    assert parse_repo_config("performance:\n  processes: 2\n").performance.processes == 2


# --- `paritybot perf` on a local checkout ----------------------------------------------------------

BENCH_TEST = "import pkg\n\n\ndef test_work(benchmark):\n    benchmark(pkg.work)\n"


def perf_cli(repo: Path, base: str, *extra: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    argv = [
        sys.executable,
        "-m",
        "bot.cli.main",
        "perf",
        "--repo",
        str(repo),
        "--base",
        base,
        "--runner",
        "host",
    ]
    return subprocess.run([*argv, *extra], capture_output=True, text=True, timeout=timeout)


def test_paritybot_perf_compares_a_local_change_and_reports_a_crash_on_head(tmp_path):
    repo = GitRepo(tmp_path / "repo")
    base = repo.commit(
        {
            ".github/paritybot.yml": "performance:\n  pytest: [tests]\n  processes: 2\n  max_time_s: 0.1\n",
            "pkg/__init__.py": "def work():\n    return sum(range(10))\n",
            "tests/test_bench.py": BENCH_TEST,
            "tests/test_other.py": "def test_other(benchmark):\n    benchmark(len, [])\n",
        }
    )
    repo.commit({"pkg/__init__.py": "def work():\n    raise ValueError('broken on head')\n"})

    done = perf_cli(repo.path, base)

    # The change broke the benchmark: the comparison fails, naming it and its error.
    assert done.returncode == 1, done.stderr
    assert "### Performance" in done.stdout
    crash = next(line for line in done.stdout.splitlines() if "test_work" in line)
    assert "⚠️ error: failed on head: call failed: ValueError: broken on head" in crash
    assert "tests/test_other.py::test_other" in done.stdout
    assert "1 benchmark crashed on head: tests/test_bench.py::test_work" in done.stdout
    assert "test_work crashed on head: failed on head: call failed: ValueError: broken on head" in done.stderr


def test_each_side_of_a_src_layout_measures_its_own_code(tmp_path):
    # A local run's environment puts the head's tree (its src/ first) on the path: the base side's
    # processes must still import the base's package, or both sides measure the head.
    repo = GitRepo(tmp_path / "repo")
    base = repo.commit(
        {
            ".github/paritybot.yml": "performance:\n  pytest: [tests]\n  processes: 2\n  max_time_s: 0.1\n",
            "src/pkg/__init__.py": "def work():\n    return sum(range(10))\n",
            "tests/test_bench.py": BENCH_TEST,
        }
    )
    repo.commit({"src/pkg/__init__.py": "def work():\n    raise ValueError('broken on head')\n"})

    done = perf_cli(repo.path, base)

    assert done.returncode == 1, done.stderr  # the head's own code ran, and crashed
    crash = next(line for line in done.stdout.splitlines() if "test_work" in line)
    assert "⚠️ error: failed on head: call failed: ValueError: broken on head" in crash


def test_paritybot_perf_affected_runs_only_the_benchmarks_the_change_can_reach_and_says_why(tmp_path):
    repo = GitRepo(tmp_path / "repo")
    base = repo.commit(
        {
            ".github/paritybot.yml": "performance:\n  pytest: [tests]\n  processes: 2\n  max_time_s: 0.1\n",
            "pkg/__init__.py": "",
            "pkg/a.py": "def work():\n    return 1\n",
            "pkg/b.py": "def work():\n    return 2\n",
            "tests/test_a.py": "from pkg import a\n\n\ndef test_a(benchmark):\n    benchmark(a.work)\n",
            "tests/test_b.py": "from pkg import b\n\n\ndef test_b(benchmark):\n    benchmark(b.work)\n",
        }
    )
    repo.commit({"pkg/a.py": "def work():\n    return sum(range(3))\n"})

    done = perf_cli(repo.path, base, "--affected")

    assert done.returncode in (0, 1), done.stderr
    assert "tests/test_a.py::test_a" in done.stdout
    assert "test_b" not in done.stdout  # pkg/b.py did not change and nothing it imports did
    why = done.stdout.split("Why these benchmarks:", 1)[1]
    assert why.strip().startswith("- tests/test_a.py::test_a: ") and "pkg/a.py" in why.splitlines()[1]


def bench_outside_the_tests(repo: GitRepo) -> str:
    """A project whose benchmarks live in ``bench/``, beside its tests, as many projects keep them;
    one benchmark module needs an optional dependency that is not installed."""
    return repo.commit(
        {
            ".github/paritybot.yml": "performance:\n  pytest: [bench/]\n  processes: 2\n  max_time_s: 0.1\n",
            "pkg/__init__.py": "",
            "pkg/a.py": "def work():\n    # one\n    return 1\n",
            "pkg/b.py": "def work():\n    return 2\n",
            "tests/test_a.py": "from pkg import a\n\n\ndef test_a():\n    assert a.work() == 1\n",
            "bench/test_a.py": "from pkg import a\n\n\ndef test_a(benchmark):\n    benchmark(a.work)\n",
            "bench/test_b.py": "from pkg import b\n\n\ndef test_b(benchmark):\n    benchmark(b.work)\n",
            "bench/test_extra.py": "import not_installed_anywhere\n\n\ndef test_x(benchmark):\n    benchmark(len, [])\n",
        }
    )


def test_paritybot_perf_affected_finds_benchmarks_outside_the_test_roots(tmp_path):
    repo = GitRepo(tmp_path / "repo")
    base = bench_outside_the_tests(repo)
    repo.commit({"pkg/a.py": "def work():\n    # one\n    return sum(range(3))\n"})

    done = perf_cli(repo.path, base, "--affected")

    assert done.returncode in (0, 1), done.stderr
    assert "bench/test_a.py::test_a" in done.stdout
    assert "test_b" not in done.stdout
    why = done.stdout.split("Why these benchmarks:", 1)[1]
    assert why.strip().startswith("- bench/test_a.py::test_a: ") and "pkg/a.py" in why


def test_paritybot_perf_affected_compares_nothing_for_a_comment_and_says_why(tmp_path):
    repo = GitRepo(tmp_path / "repo")
    base = bench_outside_the_tests(repo)
    repo.commit({"pkg/a.py": "def work():\n    # the one and only\n    return 1\n"})

    done = perf_cli(repo.path, base, "--affected")

    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("No benchmark to compare: no benchmark can be affected by this change")
    assert "pkg/a.py: only comments, docstrings or formatting changed" in done.stdout
    assert (
        "Looked for tests that take pytest-benchmark's `benchmark` fixture in bench/ (performance.pytest)"
        in done.stdout
    )
    assert "| # |" not in done.stdout  # no empty table


def test_a_benchmark_module_that_does_not_collect_is_named_not_dropped_unseen(tmp_path):
    repo = GitRepo(tmp_path / "repo")
    base = bench_outside_the_tests(repo)
    repo.commit({"pkg/b.py": "def work():\n    return 3\n"})

    done = perf_cli(repo.path, base)

    assert done.returncode in (0, 1), done.stderr
    assert "bench/test_b.py::test_b" in done.stdout
    assert (
        "bench/test_extra.py could not be collected on either side, its benchmarks not compared: "
        "ModuleNotFoundError: No module named 'not_installed_anywhere'"
    ) in done.stderr


@pytest.mark.parametrize("planted", ["link", "tree"])
def test_a_pull_request_cannot_choose_where_the_sides_are_written(tmp_path, planted):
    outside = tmp_path / "outside"
    outside.mkdir()
    repo = GitRepo(tmp_path / "repo")
    base = repo.commit({"pkg.py": "x = 1\n"})
    if planted == "link":
        (repo.path / ".paritybot").symlink_to(outside)
        repo.git("add", ".paritybot")
    else:
        repo.commit({".paritybot/perf/base/pkg.py": "x = 'forged base'\n"})
    head = repo.commit({"pkg.py": "x = 2\n"})

    with pytest.raises(PerfRunError, match=r"the pull request has its own `\.paritybot"):
        export_sides(repo.path, base, head)
    assert list(outside.iterdir()) == []


def test_the_sides_are_the_two_commits_side_by_side(tmp_path):
    repo = GitRepo(tmp_path / "repo")
    base = repo.commit({"pkg.py": "x = 1\n"})
    head = repo.commit({"pkg.py": "x = 2\n"})
    export_sides(repo.path, base, head)
    assert (repo.path / SIDES_DIR / "base" / "pkg.py").read_text() == "x = 1\n"
    assert (repo.path / SIDES_DIR / "head" / "pkg.py").read_text() == "x = 2\n"


def test_paritybot_perf_that_finds_no_benchmark_says_where_it_looked_and_how_to_look_elsewhere(tmp_path):
    repo = GitRepo(tmp_path / "repo")
    base = repo.commit(
        {
            ".github/paritybot.yml": "performance:\n  pytest: [tests]\n  processes: 2\n  max_time_s: 0.1\n",
            "pkg/__init__.py": "def work():\n    return 1\n",
            # Parametrized with an argument named like the fixture: an ordinary test, not a benchmark.
            "tests/test_cases.py": (
                "import pytest\n\n\n"
                '@pytest.mark.parametrize("benchmark", ["small", "large"])\n'
                "def test_case(benchmark):\n    assert benchmark\n"
            ),
        }
    )
    repo.commit({"pkg/__init__.py": "def work():\n    return 2\n"})

    done = perf_cli(repo.path, base)

    assert done.returncode == 0, done.stderr
    assert "error" not in done.stdout
    assert (
        "No benchmark found. Looked for tests that take pytest-benchmark's `benchmark` fixture in tests "
        "(performance.pytest); to look elsewhere, set `performance.pytest` to your benchmarks' paths"
    ) in done.stdout


def test_errors_regressions_and_improvements_are_never_behind_and_n_more():
    def made(i: int, verdict: Verdict) -> Comparison:
        return Comparison(kind="asv", name=f"bench.b{i:03}", verdict=verdict, reason=f"why {i}")

    comparisons = [made(i, Verdict.NO_CHANGE) for i in range(120)]
    comparisons += [made(200 + i, Verdict.ERROR) for i in range(94)]
    comparisons += [made(400 + i, Verdict.INCONCLUSIVE) for i in range(3)]
    body = performance_section(comparisons, [], threshold=0.03, confidence=0.99)

    rows = [line for line in body.splitlines() if line.startswith("| ") and not line.startswith("| #")]
    assert sum("⚠️ error: why " in row for row in rows) == 94
    assert body.endswith("… and 123 more benchmarks: 3 inconclusive, 120 no change.")
    _, summary = check_text(outcome(comparisons, threshold=0.03, blocking=False), comparisons)
    assert summary.count("⚠️ error") == 94
    assert summary.endswith("- 3 more inconclusive or too few rounds\n- 120 more with no change")


def test_inconclusive_and_no_change_say_what_they_rest_on():
    rounds = [
        Round(base=1e-3, head=1e-3 * (1.05 if i % 2 else 0.98), first=Side.BASE, process=i % 2)
        for i in range(12)
    ]
    straddles = compare(BenchmarkSamples(kind="pytest", name="x", rounds=rounds), PerfThresholds())
    assert straddles.verdict is Verdict.INCONCLUSIVE
    body = performance_section([straddles], [], threshold=0.03, confidence=0.99)
    assert (
        "| inconclusive: interval " in body
        and "straddles ±3%; 12 rounds in 2 process pairs; rerun with a larger budget" in body
    )
