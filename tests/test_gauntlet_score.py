"""The gauntlet's scores mean what docs/test-selection.md says they mean.

`benchmarks/gauntlet_score.py` turns paritybot's report and the whole suite's outcomes into false
reds, silent drops and failing tests not selected; these are the definitions, on real git diffs.
"""

from __future__ import annotations

import importlib.util
import subprocess
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

SCORE = Path(__file__).resolve().parent.parent / "benchmarks" / "gauntlet_score.py"


@pytest.fixture(scope="module")
def score() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gauntlet_score", SCORE)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


BASE_TESTS = """\
import pytest


def helper():
    return 1


def test_kept():
    assert helper() == 1


class TestBox:
    size = 2

    def test_size(self):
        assert self.size == 2
"""

BASE_SOURCE = '''\
def scale(x):
    """Scale.

    >>> scale(2)
    4
    """
    return 2 * x


def other(x):
    return x
'''


def changed(tmp_path: Path, files: dict[str, tuple[str, str]]) -> Path:
    """A real repository with a base and a head commit of these files."""
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    for path, (base, _) in files.items():
        (repo / path).write_text(base)
    git(repo, "add", ".")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "base")
    for path, (_, head) in files.items():
        (repo / path).write_text(head)
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "head")
    return repo


def touched(score: ModuleType, repo: Path, path: str) -> list[str]:
    diff = git(repo, "diff", "-U0", "HEAD~1", "HEAD", "--", path)
    return list(score.touched_definitions((repo / path).read_text(), score.changed_lines(diff)))


def test_an_edited_test_a_class_attribute_and_a_functions_body_are_what_the_change_touches(
    score: ModuleType, tmp_path: Path
) -> None:
    new_tests = BASE_TESTS.replace("assert helper() == 1", "assert helper() >= 1").replace(
        "size = 2", "size = 3"
    )
    new_source = BASE_SOURCE.replace("return 2 * x", "return x + x")
    repo = changed(tmp_path, {"test_m.py": (BASE_TESTS, new_tests), "m.py": (BASE_SOURCE, new_source)})

    assert touched(score, repo, "test_m.py") == ["test_kept", "TestBox"]
    assert touched(score, repo, "m.py") == ["scale"]


def test_a_change_inside_a_method_touches_the_method_not_every_test_of_its_class(
    score: ModuleType, tmp_path: Path
) -> None:
    new_tests = BASE_TESTS.replace("assert self.size == 2", "assert self.size >= 2")
    repo = changed(tmp_path, {"test_m.py": (BASE_TESTS, new_tests)})

    assert touched(score, repo, "test_m.py") == ["TestBox.test_size"]


KEPT, SIZE, OTHER, FAR = (
    "test_m.py::test_kept",
    "test_m.py::TestBox::test_size",
    "test_m.py::test_other",
    "test_x.py::test_far",
)


def truth(outcomes: dict[str, str]) -> dict[str, Any]:
    """The whole suite's outcomes, each test taking one second."""
    return {"tests": {nodeid: {"outcome": o, "duration": 1.0} for nodeid, o in outcomes.items()}}


def report(status: str, results: dict[str, str], **tests: Any) -> dict[str, Any]:
    """The part of `paritybot check --json` the scores read."""
    rows = [{"nodeid": nodeid, "outcome": o} for nodeid, o in results.items()]
    return {"tests": {"status": status, "results": rows, **tests}}


PR = {"changed": ["test_m.py"], "touched": {"test_m.py": ["test_kept", "TestBox"]}}


def test_a_reported_failure_that_passes_in_the_whole_suite_is_a_false_red(score: ModuleType) -> None:
    head = truth({KEPT: "passed", SIZE: "passed"})
    found = score.score_pr(PR, head, head, report("failed", {KEPT: "failed"}))

    assert found["false_red"] is True
    assert found["contradicted"] == [KEPT]


def test_a_failure_the_base_has_too_is_true_and_counted_apart(score: ModuleType) -> None:
    both = truth({KEPT: "failed", SIZE: "passed"})
    ran = {KEPT: "failed", SIZE: "passed"}
    found = score.score_pr(PR, both, both, report("failed", ran))

    assert (found["false_red"], found["red_on_base_failures"]) == (False, True)


def test_a_touched_test_neither_run_nor_named_is_a_silent_drop_and_one_named_is_not(
    score: ModuleType,
) -> None:
    head = truth({KEPT: "passed", SIZE: "passed", OTHER: "passed"})
    silent = score.score_pr(PR, head, head, report("passed", {KEPT: "passed"}))
    named = score.score_pr(
        PR,
        head,
        head,
        report("passed", {KEPT: "passed"}, not_found=[SIZE]),
    )

    assert silent["silent_drops"] == [SIZE]
    assert named["silent_drops"] == []


def test_a_test_the_change_breaks_that_did_not_run_is_a_head_failure_not_selected(score: ModuleType) -> None:
    base = truth({KEPT: "passed", FAR: "passed"})
    head = truth({KEPT: "passed", FAR: "failed"})
    found = score.score_pr(PR, base, head, report("passed", {KEPT: "passed"}))

    assert found["head_failures_not_selected"] == [FAR]
    assert found["share_of_suite_time"] == 0.5


def test_a_test_that_passes_when_run_again_is_flaky_and_left_out(score: ModuleType) -> None:
    base = truth({KEPT: "passed", FAR: "passed"})
    head = {**truth({KEPT: "passed", FAR: "failed"}), "rerun": {FAR: "passed"}}
    found = score.score_pr(PR, base, head, report("passed", {KEPT: "passed"}))

    assert found["head_failures_not_selected"] == []
    assert found["flaky_excluded"] == [FAR]
