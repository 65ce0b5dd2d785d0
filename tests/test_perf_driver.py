"""The A/B benchmark driver on small real suites: what it finds, the order it times in, what it reports.

Each test lays out a base and a head checkout side by side in a workspace and runs the real step
(``runner.perf.step.perf_step``) through the host runner, or in the test image. Nothing here
asserts on a timing: the suites record what ran, in which process and in which order, and the
command suite prints fixed samples.
"""

from __future__ import annotations

import itertools
import json
import os
import textwrap
from pathlib import Path
from typing import Any

import pytest
from asv_runner.discovery import disc_benchmarks
from docker_support import docker_client, make_runner, test_image  # noqa: F401  (fixtures)

from bot.core.perf import DriverReport, PerfThresholds, Verdict
from runner.backends.base import StepResult
from runner.backends.host import HostRunner
from runner.perf.sequential import first_pairs
from runner.perf.stats import compare_all
from runner.perf.step import RESULTS_PATH, PerfPlan, PerfRunError, parse_results, perf_step
from runner.perf.worker import choose_clock, usable_cpus

FAST = {
    "processes": 2,
    "warmup": 1,
    "min_rounds": 6,
    "max_rounds": 8,
    "round_time_s": 0.001,
    "max_time_s": 0.05,
    "timeout_s": 60,
}


def write_tree(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))


def make_plan(kinds: list[dict[str, Any]], **overrides: Any) -> PerfPlan:
    sides = {"base": {"root": "base"}, "head": {"root": "head"}}
    return PerfPlan.model_validate({"sides": sides, "kinds": kinds, **FAST, **overrides})


async def run_perf(workspace: Path, plan: PerfPlan, runner: Any = None) -> DriverReport:
    runner = runner or HostRunner()
    try:
        result = await runner.run(perf_step(plan, timeout_s=300), workspace)
    finally:
        await runner.close()
    assert result.ok, result.output
    return parse_results(result)


# --- pytest-benchmark suites ---------------------------------------------------------------------

PYTEST_SUITE = {
    # The project's own config skips benchmarks in ordinary runs: paritybot must still find and run them.
    "pytest.ini": "[pytest]\naddopts = --benchmark-skip\n",
    "pkg/__init__.py": "def work(n=50):\n    return sum(i * i for i in range(n))\n",
    "tests/conftest.py": """
        import pytest

        @pytest.fixture
        def timed(benchmark):
            return benchmark
        """,
    "tests/test_b.py": """
        import pytest
        from pkg import work

        def test_call(benchmark):
            assert benchmark(work, 10) == 285

        def test_pedantic(benchmark):
            benchmark.pedantic(work, setup=lambda: ((20,), {}), rounds=3)

        @pytest.mark.parametrize("n", [1, 2])
        def test_param(benchmark, n):
            benchmark(work, n)

        def test_through_a_fixture(timed):
            timed(work)

        def test_not_a_benchmark():
            assert work() > 0
        """,
}


# An ordinary test whose parametrize argument happens to be named ``benchmark``: not a benchmark.
NAMED_LIKE_A_BENCHMARK = {
    "tests/test_cases.py": """
        import pytest

        @pytest.mark.parametrize("benchmark", ["small", "large"])
        def test_case(benchmark):
            assert benchmark in ("small", "large")
        """,
}


async def test_pytest_benchmarks_are_found_on_both_sides_and_run_in_rounds(tmp_path):
    write_tree(
        tmp_path / "base",
        PYTEST_SUITE
        | NAMED_LIKE_A_BENCHMARK
        | {"tests/test_old.py": "def test_old(benchmark):\n    benchmark(len, [])\n"},
    )
    write_tree(
        tmp_path / "head",
        PYTEST_SUITE
        | NAMED_LIKE_A_BENCHMARK
        | {"tests/test_new.py": "def test_new(benchmark):\n    benchmark(len, [])\n"},
    )

    report = await run_perf(tmp_path, make_plan([{"kind": "pytest", "args": ["tests"]}]))

    names = [b.name for b in report.benchmarks]
    assert names == [
        "tests/test_b.py::test_call",
        "tests/test_b.py::test_pedantic",
        "tests/test_b.py::test_param[1]",
        "tests/test_b.py::test_param[2]",
        "tests/test_b.py::test_through_a_fixture",
    ]
    assert report.discovered["pytest"].only_base == ["tests/test_old.py::test_old"]
    assert report.discovered["pytest"].only_head == ["tests/test_new.py::test_new"]
    for bench in report.benchmarks:
        assert bench.error is None, bench.error
        assert 6 <= len(bench.rounds) <= 8
        assert bench.warmup == 2  # one per pair of processes
    assert report.errors == []


ORDER_TEST = """
    import os

    def record(benchmark):
        def call():
            with open({log!r}, "a") as fh:
                fh.write("{side} %d\\n" % os.getpid())
        benchmark.pedantic(call, iterations=1)

    def test_order(benchmark):
        record(benchmark)
    """


async def test_rounds_alternate_sides_and_process_pairs_and_each_side_runs_its_own_code(tmp_path):
    log = tmp_path / "calls.log"
    for side in ("base", "head"):
        write_tree(tmp_path / side, {"tests/test_o.py": ORDER_TEST.format(log=str(log), side=side)})

    report = await run_perf(tmp_path, make_plan([{"kind": "pytest", "args": ["tests"]}], processes=2))

    (bench,) = report.benchmarks
    calls = [line.split() for line in log.read_text().splitlines()]
    # Each side's code ran only in that side's processes: two of each.
    pids = {side: {pid for s, pid in calls if s == side} for side in ("base", "head")}
    assert len(pids["base"]) == 2 and len(pids["head"]) == 2
    assert not pids["base"] & pids["head"]
    # Calibration: three calls in one process a side, one process at a time; then the turns,
    # warm-up first.
    calibration, timed = calls[:6], calls[6:]
    assert [len({pid for _, pid in calibration[i : i + 3]}) for i in range(0, 6, 3)] == [1, 1]
    assert sorted(side for side, _ in calibration[::3]) == ["base", "head"]
    # A turn: one process's calls back to back; base and head take turns in twos, with as many calls.
    turns = [(side, pid, len(list(run))) for (side, pid), run in itertools.groupby(timed, key=tuple)]
    twos = [turns[i : i + 2] for i in range(0, len(turns), 2)]
    assert all({a[0], b[0]} == {"base", "head"} and a[2] == b[2] for a, b in twos)
    # Process pairs take turns and so does the side that goes first: base, base, head, head, …
    assert [a[0] for a, _ in twos] == [("base", "base", "head", "head")[i % 4] for i in range(len(twos))]
    processes = [frozenset((a[1], b[1])) for a, b in twos]
    assert processes[0] != processes[1]
    assert processes[0::2] == [processes[0]] * len(processes[0::2])
    assert processes[1::2] == [processes[1]] * len(processes[1::2])
    # The first turn of each pair is one warm-up round; rounds the scheduler interrupted are dropped.
    assert [a[2] for a, _ in twos[:2]] == [1, 1] and bench.warmup == 2
    planned = [(a[0], i % 2) for i, (a, _) in enumerate(twos[2:], start=2) for _ in range(a[2])]
    assert len(planned) == len(bench.rounds) + bench.preempted
    reported = [(r.first.value, r.process) for r in bench.rounds]
    assert all(reported.count(x) <= planned.count(x) for x in set(reported))
    if bench.preempted == 0:
        assert reported == planned


async def test_each_round_says_its_cycle_a_turn_of_every_pair(tmp_path):
    # Rounds are read against the fastest of their cycle (runner/perf/sequential.py), so the
    # driver must say which turn of every pair each round was part of.
    for side in ("base", "head"):
        write_tree(
            tmp_path / side, {"tests/test_x.py": "def test_x(benchmark):\n    benchmark(sum, range(50))\n"}
        )

    report = await run_perf(tmp_path, make_plan([{"kind": "pytest"}], processes=2, max_rounds=40))

    (bench,) = report.benchmarks
    cycles = [r.cycle for r in bench.rounds]
    assert None not in cycles and cycles == sorted(cycles)
    # Each cycle is one turn of each pair (the last may be cut short), one side first throughout.
    by_cycle = {c: [r for r in bench.rounds if r.cycle == c] for c in sorted(set(cycles))}
    assert all(len({r.first for r in rounds}) == 1 for rounds in by_cycle.values())
    if bench.preempted == 0:
        assert all({r.process for r in rounds} == {0, 1} for rounds in list(by_cycle.values())[:-1])


BUSY_NEIGHBOUR = """
    import subprocess, sys, time

    neighbour = []

    def spin():
        if not neighbour:
            # Started from the pinned benchmark process, so it shares its one CPU; it stops by itself.
            code = "import time\\nend = time.time() + 20\\nwhile time.time() < end: pass"
            neighbour.append(subprocess.Popen([sys.executable, "-c", code]))
            time.sleep(0.2)
        end = time.perf_counter() + 0.03
        while time.perf_counter() < end:
            pass
        time.sleep(0.01)  # it waits too: read on the wall clock, where a cut round is the neighbour's

    def test_busy(benchmark):
        try:
            benchmark.pedantic(spin, iterations=1)
        finally:
            neighbour[0].kill()
    """


async def test_rounds_the_scheduler_interrupted_are_dropped(tmp_path):
    for side in ("base", "head"):
        write_tree(tmp_path / side, {"tests/test_busy.py": BUSY_NEIGHBOUR})
    # Time enough for 30 ms rounds to be dropped before the benchmark's wall-time limit.
    plan = make_plan([{"kind": "pytest", "args": ["tests"]}], processes=1, max_time_s=1.0)

    report = await run_perf(tmp_path, plan)

    (bench,) = report.benchmarks
    assert bench.error is None
    assert bench.clock == "wall"
    # A process busy on the same CPU takes it from a 30 ms round: such rounds are dropped (no more
    # than are kept, within twice the benchmark's time), then kept, so the benchmark still ends.
    assert bench.preempted > 0
    assert len(bench.rounds) >= 6


CRASHES = """
    import os
    import pytest

    calls = {{"n": 0}}

    def flaky():
        calls["n"] += 1
        if {broken} and calls["n"] > 2:
            raise RuntimeError("boom on call %d" % calls["n"])

    def dies():
        if {broken}:
            os._exit(3)

    @pytest.fixture
    def resource():
        if {broken}:
            raise OSError("no such device")
        return 1

    def test_a_raises(benchmark):
        benchmark.pedantic(flaky, iterations=1)

    def test_b_kills_its_process(benchmark):
        benchmark(dies)

    def test_c_fine(benchmark):
        benchmark(len, "abc")

    def test_d_setup_fails(benchmark, resource):
        benchmark(len, "abc")

    def test_e_fine_after_all(benchmark):
        benchmark(len, "abc")
    """


async def test_a_benchmark_that_crashes_on_head_is_an_error_and_the_others_still_run(tmp_path):
    write_tree(tmp_path / "base", {"tests/test_c.py": CRASHES.format(broken=False)})
    write_tree(tmp_path / "head", {"tests/test_c.py": CRASHES.format(broken=True)})

    report = await run_perf(tmp_path, make_plan([{"kind": "pytest", "args": ["tests"]}], processes=1))

    by_name = {b.name.split("::")[1]: b for b in report.benchmarks}
    assert list(by_name) == [
        "test_a_raises",
        "test_b_kills_its_process",
        "test_c_fine",
        "test_d_setup_fails",
        "test_e_fine_after_all",
    ]
    for name in ("test_a_raises", "test_b_kills_its_process", "test_d_setup_fails"):
        error = by_name[name].error
        assert error is not None and error.side == "head", name
    assert "RuntimeError: boom on call 3" in by_name["test_a_raises"].error.message  # type: ignore[union-attr]
    assert "exit code 3" in by_name["test_b_kills_its_process"].error.message  # type: ignore[union-attr]
    assert "OSError: no such device" in by_name["test_d_setup_fails"].error.message  # type: ignore[union-attr]
    for name in ("test_c_fine", "test_e_fine_after_all"):
        assert by_name[name].error is None and len(by_name[name].rounds) >= 6
    verdicts = {c.name.split("::")[1]: c.verdict for c in compare_all(report, PerfThresholds())}
    assert verdicts["test_a_raises"] is Verdict.ERROR
    assert verdicts["test_b_kills_its_process"] is Verdict.ERROR


async def test_a_pull_request_cannot_stand_in_for_the_driver_or_its_plugin(tmp_path):
    impostor = "raise SystemExit('the pull request replaced paritybot\\'s module')\n"
    write_tree(tmp_path / "base", {"tests/test_x.py": "def test_x(benchmark):\n    benchmark(len, [])\n"})
    write_tree(
        tmp_path / "head",
        {
            "tests/test_x.py": "def test_x(benchmark):\n    benchmark(len, [])\n",
            "paritybot_perf_pytest.py": impostor,
            "paritybot_perf_driver.py": impostor,
        },
    )

    report = await run_perf(tmp_path, make_plan([{"kind": "pytest", "args": ["tests"]}], processes=1))

    assert report.errors == []
    (bench,) = report.benchmarks
    assert bench.error is None and len(bench.rounds) >= 6


async def test_a_suite_that_does_not_import_on_head_is_reported_for_that_side(tmp_path):
    write_tree(tmp_path / "base", {"tests/test_x.py": "def test_x(benchmark):\n    benchmark(len, [])\n"})
    write_tree(tmp_path / "head", {"tests/conftest.py": "raise ImportError('conftest broke')\n"})

    report = await run_perf(tmp_path, make_plan([{"kind": "pytest", "args": ["tests"]}], processes=1))

    assert report.benchmarks == []
    (error,) = report.errors
    assert (error.kind, error.side) == ("pytest", "head")
    assert "conftest broke" in error.message


async def test_a_side_that_imports_its_package_from_elsewhere_is_warned_about(tmp_path):
    installed = tmp_path / "site"
    write_tree(installed, {"pkg/__init__.py": "def work():\n    return 1\n"})
    shadowed = {
        "pkg/__init__.py": "def work():\n    return 2\n",
        # An installed copy ahead of the checkout: the benchmark would time it on both sides.
        "tests/conftest.py": f"import sys\nsys.path.insert(0, {str(installed)!r})\n",
        "tests/test_w.py": "from pkg import work\n\ndef test_w(benchmark):\n    benchmark(work)\n",
    }
    write_tree(tmp_path / "base", shadowed)
    write_tree(tmp_path / "head", shadowed)

    report = await run_perf(tmp_path, make_plan([{"kind": "pytest", "args": ["tests"]}], processes=1))

    expected = f"imported pkg from {installed / 'pkg' / '__init__.py'}, not from its checkout"
    assert [w.split(" ", 1)[0] for w in report.warnings] == ["base", "head"]
    assert all(expected in w for w in report.warnings)


# --- asv suites ----------------------------------------------------------------------------------

ASV_SUITE = {
    "asv.conf.json": """
        {
            // asv allows comments on their own lines
            "version": 1,
            "benchmark_dir": "bench"
        }
        """,
    "bench/__init__.py": "",
    "bench/suite.py": """
        def time_function():
            sum(range(100))

        def mem_list():
            return [0] * 100

        def track_value():
            return 42

        class TimeSuite:
            params = [[10, 20], ["a"]]
            param_names = ["n", "s"]

            def setup(self, n, s):
                self.data = list(range(n))

            def time_sum(self, n, s):
                sum(self.data)

            def peakmem_data(self, n, s):
                pass

        class Cached:
            def setup_cache(self):
                return list(range(50))

            def time_cached(self, data):
                sum(data)
        """,
    "bench/sub/__init__.py": "",
    "bench/sub/more.py": """
        class TimeMore:
            def time_more(self):
                pass
        """,
}


def asv_runner_time_names(bench_dir: Path) -> set[str]:
    import sys

    sys.path.insert(0, str(bench_dir.parent))
    try:
        return {b.name for b in disc_benchmarks(str(bench_dir)) if b.name.split(".")[-1].startswith("time_")}
    finally:
        sys.path.remove(str(bench_dir.parent))
        for module in [m for m in sys.modules if m == "bench" or m.startswith("bench.")]:
            del sys.modules[module]


async def test_asv_benchmarks_are_found_as_asv_names_them_and_run(tmp_path):
    write_tree(tmp_path / "base", ASV_SUITE)
    write_tree(tmp_path / "head", ASV_SUITE)

    report = await run_perf(tmp_path, make_plan([{"kind": "asv"}]))

    names = [b.name for b in report.benchmarks]
    assert {n.split("(")[0] for n in names} == asv_runner_time_names(tmp_path / "head" / "bench")
    assert "suite.TimeSuite.time_sum(10, 'a')" in names
    assert "suite.TimeSuite.time_sum(20, 'a')" in names
    assert not [n for n in names if "mem_" in n or "track_" in n]
    for bench in report.benchmarks:
        assert bench.error is None, (bench.name, bench.error)
        assert len(bench.rounds) >= 6


# --- a command that prints the JSON shape --------------------------------------------------------

COMMAND = """
    import json
    print("warming up…")  # anything before the last JSON line is ignored
    print(json.dumps({{"benchmarks": [
        {{"name": "matmul", "unit": "ms", "samples": [{a}, {b}, {c}]}},
        {{"name": "conv", "unit": "us", "samples": [500, 500]}},
        {{"name": "broken", "error": "{error}"}},
        {{"name": "{extra}", "unit": "s", "samples": [1]}},
    ]}}))
    """


async def test_a_command_printing_the_json_shape_is_paired_round_by_round(tmp_path):
    write_tree(tmp_path / "base", {"bench.py": COMMAND.format(a=3, b=1, c=2, error="", extra="old")})
    write_tree(
        tmp_path / "head",
        {"bench.py": COMMAND.format(a=4, b=6, c=2, error="CUDA out of memory", extra="new")},
    )
    # The base command reports "broken" with an empty error: an error all the same.
    plan = make_plan([{"kind": "command", "argv": ["python3", "bench.py"], "rounds": 6}])

    report = await run_perf(tmp_path, plan)

    by_name = {b.name: b for b in report.benchmarks}
    assert list(by_name) == ["matmul", "conv", "broken"]
    matmul = by_name["matmul"]
    assert len(matmul.rounds) == 6 and matmul.warmup == 1
    assert {(r.base, r.head) for r in matmul.rounds} == {(0.002, 0.004)}  # medians, in seconds
    assert [r.first.value for r in matmul.rounds] == ["head", "base"] * 3  # the warm-up went base first
    assert all(r.base == r.head == pytest.approx(0.0005) for r in by_name["conv"].rounds)
    assert by_name["broken"].error is not None
    assert report.discovered["command"].only_base == ["old"]
    assert report.discovered["command"].only_head == ["new"]
    verdicts = {c.name: c for c in compare_all(report, PerfThresholds())}
    assert verdicts["matmul"].verdict is Verdict.REGRESSION and verdicts["matmul"].ratio == pytest.approx(2.0)
    assert verdicts["conv"].verdict is Verdict.NO_CHANGE
    assert [r.process for r in matmul.rounds] == list(range(6))  # each run its own process
    assert verdicts["broken"].verdict is Verdict.ERROR


async def test_a_command_that_fails_on_head_is_reported_for_head(tmp_path):
    write_tree(tmp_path / "base", {"bench.py": COMMAND.format(a=1, b=1, c=1, error="", extra="x")})
    write_tree(tmp_path / "head", {"bench.py": "raise SystemExit(2)\n"})

    report = await run_perf(tmp_path, make_plan([{"kind": "command", "argv": ["python3", "bench.py"]}]))

    (error,) = report.errors
    assert (error.kind, error.side) == ("command", "head")
    assert "exited with code 2" in error.message


# --- the run as a whole ----------------------------------------------------------------------------


async def test_the_run_is_pinned_to_one_cpu_unless_told_otherwise(tmp_path):
    import os

    for side in ("base", "head"):
        write_tree(tmp_path / side, {"tests/test_x.py": "def test_x(benchmark):\n    benchmark(len, [])\n"})

    report = await run_perf(tmp_path, make_plan([{"kind": "pytest"}], processes=1))

    assert report.cpus == [sorted(os.sched_getaffinity(0))[-1]]
    assert report.pin_error is None


@pytest.mark.docker
async def test_the_driver_runs_in_the_image_without_pytest_benchmark_installed(
    tmp_path,
    make_runner,  # noqa: F811
):
    for side in ("base", "head"):
        write_tree(tmp_path / side, PYTEST_SUITE | {"pytest.ini": "[pytest]\n"})
    runner = make_runner()
    await runner.prepare()

    report = await run_perf(tmp_path, make_plan([{"kind": "pytest", "args": ["tests"]}], processes=1), runner)

    assert len(report.benchmarks) == 5
    assert all(b.error is None and len(b.rounds) >= 6 for b in report.benchmarks)
    assert report.cpus is not None and len(report.cpus) == 1


# --- reading the results back ----------------------------------------------------------------------


def test_results_the_bot_cannot_trust_are_refused_with_a_reason():
    too_big = StepResult(
        name="performance", exit_code=0, refused={RESULTS_PATH: "is 9 MB, more than the 8 MB paritybot reads"}
    )
    with pytest.raises(PerfRunError, match="results file is 9 MB"):
        parse_results(too_big)
    garbage = StepResult(name="performance", exit_code=0, collected={RESULTS_PATH: "{not json"})
    with pytest.raises(PerfRunError, match="could not be read"):
        parse_results(garbage)
    long_name = {
        "version": 1,
        "wall_s": 1,
        "benchmarks": [{"kind": "pytest", "name": "x" * 301, "rounds": []}],
    }
    forged = StepResult(name="performance", exit_code=0, collected={RESULTS_PATH: json.dumps(long_name)})
    with pytest.raises(PerfRunError, match="could not be read"):
        parse_results(forged)
    nothing = StepResult(name="performance", exit_code=None, timed_out=True, duration_s=3600)
    with pytest.raises(PerfRunError, match="wrote no results"):
        parse_results(nothing)


# --- the clock a benchmark is read with ----------------------------------------------------------

CLOCKS = """
    import time

    def compute():
        return sum(i * i for i in range(300))

    def wait():
        time.sleep(0.001)

    def test_computes(benchmark):
        benchmark(compute)

    def test_waits(benchmark):
        benchmark(wait)
    """


async def test_code_that_computes_is_read_on_the_cpu_clock_and_code_that_waits_on_the_wall_clock(tmp_path):
    # On a busy machine the scheduler takes the CPU from a round now and then; the process's CPU
    # time does not count the wait, so a computing benchmark's rounds stay its own. A sleep (or
    # I/O, or waiting on another process) is not CPU time: what it costs is read on the wall clock.
    for side in ("base", "head"):
        write_tree(tmp_path / side, {"tests/test_clocks.py": CLOCKS})

    report = await run_perf(tmp_path, make_plan([{"kind": "pytest", "args": ["tests"]}]))

    clocks = {b.name.rsplit("::", 1)[1]: b.clock for b in report.benchmarks}
    assert clocks == {"test_computes": "cpu", "test_waits": "wall"}


@pytest.mark.parametrize(
    ("shares", "cpus", "cuda", "clock"),
    [
        ({"base": 0.99, "head": 0.97}, [1], False, "cpu"),
        ({"base": 0.99, "head": 0.4}, [1], False, "wall"),  # head waits: what it waits for counts
        ({"base": 0.99}, [1], False, "wall"),  # a side that never calibrated
        ({"base": 0.99, "head": 0.99}, [0, 1], False, "wall"),  # several CPUs: CPU time is not latency
        ({"base": 0.99, "head": 0.99}, None, False, "wall"),  # not pinned
        ({"base": 0.2, "head": 0.2}, [1], True, "cuda"),  # a process initialised CUDA: its events
        ({"base": 0.99, "head": 0.99}, [0, 1], True, "cuda"),
    ],
)
def test_the_clock_is_chosen_from_what_the_benchmark_does_where(shares, cpus, cuda, clock):
    assert choose_clock(shares, cpus, cuda) == clock


@pytest.mark.parametrize(
    ("processes", "cpus", "pairs"),
    [
        (8, 2, 4),  # few CPUs: four pairs, more only for a benchmark they leave undecided
        (8, 8, 4),
        (8, 10, 5),  # a process per CPU
        (8, 16, 8),
        (8, 64, 8),  # never more than asked for
        (2, 16, 2),
        (3, 1, 3),
    ],
)
def test_a_machine_with_cpus_to_spare_starts_a_process_pair_per_two_cpus(processes, cpus, pairs):
    assert first_pairs(processes, cpus) == pairs


@pytest.mark.parametrize(
    ("files", "cpus"),
    [
        ({"cpu.max": "50000 100000\n"}, 1),  # a container's --cpus=0.5: one CPU at a time
        ({"cpu/cpu.cfs_quota_us": "100000\n", "cpu/cpu.cfs_period_us": "100000\n"}, 1),  # cgroup v1
    ],
)
def test_a_cpu_quota_limits_the_cpus_a_run_may_use(tmp_path, files, cpus):
    write_tree(tmp_path, files)

    assert usable_cpus(str(tmp_path)) == cpus


@pytest.mark.parametrize(
    "files",
    [
        {},  # no cgroup files at all
        {"cpu.max": "max 100000\n"},  # no quota
        {"cpu/cpu.cfs_quota_us": "-1\n", "cpu/cpu.cfs_period_us": "100000\n"},
        {"cpu.max": "garbage\n"},
    ],
)
def test_without_a_quota_a_run_may_use_every_cpu_it_may_be_scheduled_on(tmp_path, files):
    write_tree(tmp_path, files)

    assert usable_cpus(str(tmp_path)) == len(os.sched_getaffinity(0))


RESULT_CHECKED = """
    def work():
        return sum(range(100))

    def test_checks_its_result(benchmark):
        assert benchmark(work) == 4950
    """


async def test_a_process_the_benchmark_ended_before_its_turn_still_gives_the_test_its_result(tmp_path):
    # Two rounds end the benchmark within the first pair's first turn: the other pairs' processes
    # never calibrate nor time it, and the test's check on the result must pass there too.
    for side in ("base", "head"):
        write_tree(tmp_path / side, {"tests/test_r.py": RESULT_CHECKED})
    plan = make_plan(
        [{"kind": "pytest", "args": ["tests"]}], processes=3, warmup=0, min_rounds=1, max_rounds=2
    )

    report = await run_perf(tmp_path, plan)

    (bench,) = report.benchmarks
    assert bench.error is None, bench.error
    assert {r.process for r in bench.rounds} == {0}
