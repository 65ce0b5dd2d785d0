"""First failure first: the selected tests run most-likely-to-fail first, and the same tests run.

Real pytest on the sample project (its suite of 18 tests): the order a run reports is the order
pytest ran them in.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from gitrepo import GitRepo
from sample_repo import BROKEN_TEST, SUITE_SIZE, SampleRepo, git, make_sample_repo, tool_env

from bot.core.config import TestSettings
from bot.core.models import SelectedTest, Selection
from runner.backends.host import HostRunner
from runner.checks.ordering import (
    changed_test_files,
    coverage_breadth,
    covering_tests,
    failure_first,
)
from runner.checks.repro import ReproContext
from runner.checks.testexec import TestRun, run_tests
from runner.selection.coverage_map import CoverageMap

PARAM = "tests/test_text.py::test_shout_ends_with_bang"


@pytest.fixture
def sample(tmp_path: Path) -> SampleRepo:
    return make_sample_repo(tmp_path)


async def _run(sample: SampleRepo, nodeids: list[str] | None, order: list[str] | None) -> TestRun:
    repro = ReproContext(head_sha=git(sample.path, "rev-parse", "HEAD"), repo="octo/calc", pr_number=1)
    runner = HostRunner(env=tool_env())
    return await run_tests(runner, sample.path, nodeids, TestSettings(reruns=0), repro, order=order)


async def test_the_ordered_tests_run_first_and_no_test_is_added_or_lost(sample: SampleRepo) -> None:
    plain = await _run(sample, None, None)
    ordered = await _run(sample, None, [BROKEN_TEST, PARAM, "tests/no_such_test.py::t"])

    ran = [r.nodeid for r in ordered.results]
    assert sorted(ran) == sorted(r.nodeid for r in plain.results) and len(ran) == SUITE_SIZE
    assert ran[0] == BROKEN_TEST  # the suite's last file, now first
    cases = [r.nodeid for r in plain.results if r.nodeid.startswith(PARAM + "[")]
    assert ran[1 : 1 + len(cases)] == cases  # a function's parameters, in pytest's order
    rest = ran[1 + len(cases) :]
    assert rest == [r.nodeid for r in plain.results if r.nodeid in rest]  # the others in pytest's order


async def test_ordering_a_selection_keeps_the_selection(sample: SampleRepo) -> None:
    selected = ["tests/unit/test_nested.py", BROKEN_TEST]
    plain = await _run(sample, selected, None)
    ordered = await _run(sample, selected, ["tests/unit/test_nested.py"])

    assert plain.results[0].nodeid == BROKEN_TEST  # pytest's order: tests/test_stats.py first
    assert ordered.results[0].nodeid.startswith("tests/unit/test_nested.py::")
    assert sorted(r.nodeid for r in ordered.results) == sorted(r.nodeid for r in plain.results)
    assert ordered.selected == plain.selected and ordered.deselected == plain.deselected


def test_changed_tests_and_recent_failures_first_always_run_last(tmp_path: Path) -> None:
    repo = GitRepo(tmp_path / "r")
    base = repo.commit({"tests/test_a.py": "def test_a(): pass\n", "tests/test_b.py": "def test_b(): pass\n"})
    head = repo.commit({"tests/test_b.py": "def test_b(): assert 0\n", "tests/helper.txt": "x", "lib.py": ""})
    changed = changed_test_files(repo.path, base, head, ["tests"])
    assert changed == {"tests/test_b.py"}
    selection = Selection(
        tests=[
            SelectedTest(
                nodeid="tests/test_smoke.py", reasons=["always run (tests.always_run: `tests/test_smoke.py`)"]
            ),
            SelectedTest(nodeid="tests/test_a.py::test_a", reasons=["runs `lib.f` (lib.py:1–2), changed"]),
            SelectedTest(nodeid="tests/test_b.py::test_b", reasons=["edited"]),
        ]
    )
    order = failure_first(selection, changed, {"tests/test_c.py::test_c"})
    assert order == [
        "tests/test_c.py::test_c",
        "tests/test_b.py",
        "tests/test_a.py::test_a",
        "tests/test_b.py::test_b",
        "tests/test_smoke.py",
    ]


def test_among_the_selection_the_narrowest_coverage_runs_first() -> None:
    cmap = CoverageMap(
        tests=["tests/test_e2e.py::test_all", "tests/test_unit.py::test_one"],
        files={"lib.py": {1: [0, 1], 2: [0], 3: [0]}, "cli.py": {1: [0]}},
    )
    breadth = coverage_breadth(cmap)
    assert breadth == {"tests/test_e2e.py::test_all": 4, "tests/test_unit.py::test_one": 1}
    selection = Selection(
        tests=[
            SelectedTest(nodeid="tests/test_e2e.py::test_all", reasons=["runs lib.py:1"]),
            SelectedTest(nodeid="tests/test_new.py::test_x", reasons=["imports lib"]),
            SelectedTest(nodeid="tests/test_unit.py::test_one", reasons=["runs lib.py:1"]),
        ]
    )
    assert failure_first(selection, set(), set(), breadth) == [
        "tests/test_unit.py::test_one",
        "tests/test_e2e.py::test_all",
        "tests/test_new.py::test_x",  # not in the map: after those it knows, in the selection's order
    ]


def test_changed_tests_are_found_by_pytests_default_names_without_test_roots(tmp_path: Path) -> None:
    repo = GitRepo(tmp_path / "r")
    base = repo.commit({"pkg/core.py": "A = 1\n", "tests/test_x.py": "X = 1\n", "src/pkg/y_test.py": ""})
    head = repo.commit(
        {"pkg/core.py": "A = 2\n", "tests/test_x.py": "X = 2\n", "src/pkg/y_test.py": "Y = 1\n"}
    )
    assert changed_test_files(repo.path, base, head, []) == {"tests/test_x.py", "src/pkg/y_test.py"}


def test_with_the_whole_suite_the_tests_that_run_the_changed_lines_go_first() -> None:
    cmap = CoverageMap(
        tests=["tests/test_a.py::test_wide", "tests/test_b.py::test_other", "tests/test_a.py::test_narrow"],
        files={"lib.py": {1: [0, 2], 2: [0], 5: [1]}},
    )
    covering = covering_tests(cmap, {"lib.py": {1}, "unknown.py": {3}})
    assert covering == {"tests/test_a.py::test_wide", "tests/test_a.py::test_narrow"}
    order = failure_first(
        Selection(whole_suite=True),
        {"tests/test_new.py"},
        set(),
        coverage_breadth(cmap),
        covering=covering,
    )
    # the changed test file, then the map's tests that ran the change, narrowest first; the rest
    # of the suite (test_other) keeps pytest's order after them
    assert order == ["tests/test_new.py", "tests/test_a.py::test_narrow", "tests/test_a.py::test_wide"]
