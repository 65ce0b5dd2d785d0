"""Verdicts a maintainer can trust: base against itself says no change, an untouched numpy benchmark
is never a regression, and a head cannot make base its own reference."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest
from test_perf_driver import make_plan, run_perf, write_tree

from bot.core.perf import PerfThresholds, Verdict
from runner.perf.guard import closed_on_the_way
from runner.perf.sequential import first_pairs
from runner.perf.stats import compare_all
from runner.perf.step import PerfRunError
from runner.perf.worker import usable_cpus

# The defaults, with a short budget per benchmark: the interval is over the process pairs.
TRUSTED = {"processes": 8, "min_rounds": 10, "max_rounds": 200, "max_time_s": 0.4, "round_time_s": 0.002}

SUITE = {
    "pkg/__init__.py": "",
    "pkg/work.py": "def work(n):\n    total = 0\n    for i in range(n):\n        total += i * i % 7\n    return total\n",
    "tests/test_w.py": """\
from pkg.work import work


def test_small(benchmark):
    benchmark(work, 50)


def test_larger(benchmark):
    benchmark(work, 3000)
""",
}


async def test_a_a_base_against_itself_is_no_change(tmp_path):
    write_tree(tmp_path / "base", SUITE)
    write_tree(tmp_path / "head", SUITE)

    report = await run_perf(tmp_path, make_plan([{"kind": "pytest", "args": ["tests"]}], **TRUSTED))

    comparisons = compare_all(report, PerfThresholds())
    assert [c.name for c in comparisons] == ["tests/test_w.py::test_small", "tests/test_w.py::test_larger"]
    for c in comparisons:
        # Decided, or honestly undecided on a busy machine; never a change.
        assert c.verdict in (Verdict.NO_CHANGE, Verdict.INCONCLUSIVE), c
        # Over the processes: on a machine so busy that the budget ran out, a pair may have none.
        assert 2 <= c.processes <= 8 and c.rounds >= 10
    assert {r.process for r in report.benchmarks[0].rounds} <= set(range(8))


NUMPY_SUITE = {
    "bench/test_arrays.py": """\
import numpy as np

DATA = np.random.default_rng(0).random(400_000)


def test_sort(benchmark):
    benchmark(np.sort, DATA)
""",
    "bench/test_other.py": """\
from other import value


def test_other(benchmark):
    benchmark(value)
""",
}


async def test_an_untouched_numpy_benchmark_of_15_ms_is_not_called_a_regression(tmp_path):
    # The change only makes another benchmark crash; a verdict on the numpy one must say so, or say
    # it cannot tell, never "regression" (its rounds are few and slow, its processes differ).
    pytest.importorskip("numpy")
    write_tree(tmp_path / "base", NUMPY_SUITE | {"other.py": "def value():\n    return 1\n"})
    write_tree(tmp_path / "head", NUMPY_SUITE | {"other.py": "def value():\n    return 1 / 0\n"})

    plan = make_plan([{"kind": "pytest", "args": ["bench"]}], **(TRUSTED | {"max_time_s": 1.2}))
    report = await run_perf(tmp_path, plan)

    verdicts = {c.name: c for c in compare_all(report, PerfThresholds())}
    assert verdicts["bench/test_other.py::test_other"].verdict is Verdict.ERROR
    numpy_verdict = verdicts["bench/test_arrays.py::test_sort"]
    assert numpy_verdict.verdict in (Verdict.NO_CHANGE, Verdict.INCONCLUSIVE), numpy_verdict


TAMPERING_CONFTEST = """\
import os

# Make base's copy of the measured function nine times slower, so that a head three times slower
# looks three times faster.
base = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "..", "base", "pkg", "work.py")
os.chmod(base, 0o644)
with open(base, "w") as fh:
    fh.write("def work(n):\\n    total = 0\\n    for i in range(9 * n):\\n        total += i * i % 7\\n    return total\\n")
"""


async def test_a_head_that_rewrites_the_base_side_is_refused_not_an_improvement(tmp_path):
    write_tree(tmp_path / "base", SUITE)
    slower = SUITE["pkg/work.py"].replace("range(n)", "range(3 * n)")
    write_tree(tmp_path / "head", SUITE | {"pkg/work.py": slower, "tests/conftest.py": TAMPERING_CONFTEST})

    with pytest.raises(PerfRunError) as refused:
        await run_perf(tmp_path, make_plan([{"kind": "pytest", "args": ["tests"]}], **TRUSTED))

    assert str(refused.value).startswith(
        "the base checkout changed while the benchmarks ran (`pkg/work.py`): a process of the run "
        "wrote to it, so base is no longer the reference; not compared"
    )


async def test_the_files_a_change_edits_that_run_during_the_measurement_are_named(tmp_path):
    write_tree(tmp_path / "base", SUITE | {"pytest.ini": "[pytest]\n"})
    write_tree(
        tmp_path / "head",
        SUITE
        | {
            "tests/conftest.py": "import gc\ngc.disable()\n",  # runs inside every measurement
            "tests/test_w.py": SUITE["tests/test_w.py"] + "\n# the benchmarks' own code\n",
            "pkg/work.py": SUITE["pkg/work.py"] + "\n# the measured code: not named\n",
        },
    )

    report = await run_perf(tmp_path, make_plan([{"kind": "pytest", "args": ["tests"]}]))

    assert report.warnings == [
        "this change edits files that run during the measurement besides the measured code (they can "
        "bias it; review them): pytest.ini, tests/conftest.py, tests/test_w.py"
    ]


# --- a user of its own per side ------------------------------------------------------------------

CLAIMING_COMMAND = """\
import json, os

# From either checkout, try to rewrite the base's copy of the measured code.
target = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "base", "pkg", "work.py")
try:
    with open(target, "a") as fh:
        fh.write("# rewritten\\n")
    wrote = "wrote it"
except OSError as exc:
    wrote = type(exc).__name__
name = "uid %d, base %s" % (os.getuid(), wrote)
print(json.dumps({"benchmarks": [{"name": name, "unit": "s", "samples": [0.001]}]}))
"""


def python_open_to_others() -> str:
    for candidate in (sys.executable, "/usr/bin/python3"):
        if Path(candidate).exists() and closed_on_the_way(os.path.realpath(candidate)) is None:
            return candidate
    pytest.skip("no interpreter other users can run")


async def test_where_the_run_is_root_each_side_runs_as_its_own_user_and_head_cannot_write_base():
    if os.geteuid() != 0:
        pytest.skip("only a root run can give each side its own user")
    python = python_open_to_others()
    # A workspace other users can enter (a test's own tmp_path lies under a directory closed to them).
    workspace = Path(tempfile.mkdtemp(prefix="paritybot-users-"))
    try:
        workspace.chmod(0o755)
        for side in ("base", "head"):
            write_tree(workspace / side, SUITE | {"bench.py": CLAIMING_COMMAND})
        command = {"kind": "command", "argv": [python, "bench.py"], "rounds": 2}

        report = await run_perf(workspace, make_plan([command], warmup=0))

        assert report.users == {"base": 65532, "head": 65533} and report.same_user is None
        assert report.discovered["command"].only_base == ["uid 65532, base PermissionError"]
        assert report.discovered["command"].only_head == ["uid 65533, base PermissionError"]
        assert (workspace / "base" / "pkg" / "work.py").read_text() == SUITE["pkg/work.py"]
        assert report.tampered is None
    finally:
        shutil.rmtree(workspace, ignore_errors=True)


async def test_where_the_checkouts_are_closed_to_other_users_both_sides_run_as_the_run_s_user(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("a run that is not root has one user")
    for side in ("base", "head"):
        write_tree(tmp_path / side, SUITE)

    report = await run_perf(tmp_path, make_plan([{"kind": "pytest", "args": ["tests"]}]))

    assert report.users == {}
    assert report.same_user is not None and "is closed to other users" in report.same_user


async def test_a_benchmark_the_first_pairs_decide_starts_no_more_processes(tmp_path):
    # Ten times slower: decided by the pairs started first (four on a machine of few CPUs), at the
    # first looks. (Three times slower was undecided at the second look in about a third of runs on
    # a noisy 2-CPU machine, with four pairs and a 0.4 s budget; ten times, in none of 25.) Starting
    # all eight per side up front on two CPUs cost more wall time than the measuring itself on small
    # suites.
    write_tree(tmp_path / "base", SUITE)
    write_tree(
        tmp_path / "head", SUITE | {"pkg/work.py": SUITE["pkg/work.py"].replace("range(n)", "range(10 * n)")}
    )

    report = await run_perf(tmp_path, make_plan([{"kind": "pytest", "args": ["tests"]}], **TRUSTED))

    verdicts = compare_all(report, PerfThresholds())
    assert [c.verdict for c in verdicts] == [Verdict.REGRESSION, Verdict.REGRESSION]
    first = first_pairs(8, usable_cpus())
    assert first >= 4
    assert all({r.process for r in b.rounds} == set(range(first)) for b in report.benchmarks)
    assert set(report.phases) == {"start", "set_up", "measure", "grow", "finish"}
    assert report.phases["grow"] == 0  # no pair was started for later
