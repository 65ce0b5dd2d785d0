"""Whose failure is it: each test failing at the head is run on the merge base in the same run.

A real repository, real pytest on the host runner, through `paritybot check`: a failure the change
caused is new and fails the change; one the base already had (with the same error, or another) is
named as such, shown with the base's error, and leaves the exit code at 0; a flaky test stays flaky.
"""

from __future__ import annotations

from pathlib import Path

from cli_run import run_cli
from gitrepo import GitRepo

from bot.core.kinds import CheckKind, Stage
from bot.core.models import FailureCause, RunReport, TestOutcome
from bot.render.check_results import render_check_runs
from bot.render.comment import render_comment
from runner.checks.attribution import same_error

CONFIG = """\
checks: {precommit: false, docstrings: false}
tests: {paths: [tests], use_coverage_map: false, always_run: [tests/test_lib.py]}
"""
PYPROJECT = """\
[tool.pytest.ini_options]
testpaths = ["tests"]
pythonpath = ["."]
"""
LIB = """\
def double(x):
    return x * 2


def broken():
    raise ValueError("the base is broken here")


def label():
    return "{label}"
"""
TESTS = """\
import mylib


def test_double():
    assert mylib.double(2) == 4


def test_already_broken():
    mylib.broken()


def test_label():
    assert mylib.label() == "expected"
"""
# Fails on its first attempt in a run, passes after: the marker lives beside it, in the run's copy.
FLAKY = """\
from pathlib import Path

import mylib

MARK = Path(__file__).with_name(".flaky-mark")


def test_flaky():
    if not MARK.exists():
        MARK.write_text("seen")
        raise AssertionError("first attempt fails on purpose")
    assert mylib.double(1) in (2, 3)
"""

NEW = "tests/test_lib.py::test_double"
SAME = "tests/test_lib.py::test_already_broken"
DIFFERENT = "tests/test_lib.py::test_label"
ADDED = "tests/test_added.py::test_added"
FLAKY_ID = "tests/test_flaky.py::test_flaky"


def _repo(tmp_path: Path, *, breaks: bool) -> GitRepo:
    repo = GitRepo(tmp_path / "repo")
    repo.commit(
        {
            ".github/paritybot.yml": CONFIG,
            "pyproject.toml": PYPROJECT,
            "mylib.py": LIB.format(label="base"),
            "tests/test_lib.py": TESTS,
            "tests/test_flaky.py": FLAKY,
            ".gitignore": ".flaky-mark\n",
        },
        "base",
    )
    repo.git("checkout", "-q", "-b", "feature")
    lib = LIB.format(label="head")
    files: dict[str, str | bytes | None] = {"mylib.py": lib}
    if breaks:
        files["mylib.py"] = lib.replace("x * 2", "x * 3")
        files["tests/test_added.py"] = (
            "import mylib\n\n\ndef test_added():\n    assert mylib.double(1) == 2\n"
        )
    repo.commit(files, "head")
    return repo


def _check(repo: GitRepo, home: Path, *extra: str) -> tuple[int, RunReport, str]:
    done = run_cli(
        "check", "--repo", str(repo.path), "--base", "main", "--runner", "host", "--json", *extra, home=home
    )
    assert done.returncode in (0, 1), done.stderr
    return done.returncode, RunReport.model_validate_json(done.stdout), done.stderr


def test_each_failure_is_new_already_failing_on_base_or_flaky(tmp_path: Path) -> None:
    code, report, _ = _check(_repo(tmp_path, breaks=True), tmp_path)

    assert report.tests is not None
    by_id = {r.nodeid: r for r in report.tests.results}
    assert by_id[NEW].cause == FailureCause.NEW  # passes on the base
    assert by_id[ADDED].cause == FailureCause.NEW  # the base has no such test
    same = by_id[SAME]
    assert same.cause == FailureCause.ON_BASE
    assert "the base is broken here" in same.base_message
    different = by_id[DIFFERENT]
    assert different.cause == FailureCause.ON_BASE_DIFFERENTLY
    assert "'head'" in different.message and "'base'" in different.base_message
    flaky = by_id[FLAKY_ID]
    assert flaky.outcome == TestOutcome.FLAKY and flaky.cause is None
    assert code == 1  # the new failures fail the change

    [tests_run] = [o for o in render_check_runs(report) if o.kind == CheckKind.TESTS]
    assert tests_run.conclusion == "failure"
    summary = tests_run.summary
    # New first, then the failures this change did not cause, then the flaky one.
    assert summary.index(NEW) < summary.index("Already failing on the base branch") < summary.index(SAME)
    assert (
        summary.index(SAME) < summary.index("Fails differently on the base branch") < summary.index(DIFFERENT)
    )
    assert summary.index(DIFFERENT) < summary.index("Flaky (failed, then passed on a rerun)")
    assert "On the merge base:" in tests_run.text
    comment = render_comment(report, stage=Stage.DONE)
    assert "❌ 2 tests failed" in comment and "🟠 2 failing not caused by this change" in comment
    assert comment.index(NEW) < comment.index("not caused by this change</b>") < comment.index(SAME)


def test_only_failures_the_base_already_had_leave_the_change_passing(tmp_path: Path) -> None:
    repo = _repo(tmp_path, breaks=False)

    code, report, stderr = _check(repo, tmp_path)

    assert report.tests is not None
    causes = {r.nodeid: r.cause for r in report.tests.results if r.cause is not None}
    assert causes == {SAME: FailureCause.ON_BASE, DIFFERENT: FailureCause.ON_BASE_DIFFERENTLY}
    assert code == 0
    assert "2 failing tests not caused by this change" in stderr and "exit code 0" in stderr
    [tests_run] = [o for o in render_check_runs(report) if o.kind == CheckKind.TESTS]
    assert tests_run.conclusion == "neutral" and tests_run.title.startswith("No new failure")

    config = tmp_path / "strict.yml"
    config.write_text(
        CONFIG.replace("use_coverage_map: false", "use_coverage_map: false, pre_existing: failure")
    )
    code, report, _ = _check(repo, tmp_path, "--config", str(config))
    assert code == 1  # tests.pre_existing: failure — the base's failures fail the change too
    [tests_run] = [o for o in render_check_runs(report) if o.kind == CheckKind.TESTS]
    assert tests_run.conclusion == "failure"


def test_an_error_is_the_same_when_only_addresses_and_line_numbers_moved() -> None:
    head = "ValueError: <Thing at 0x7f3a2c>\ntests/test_x.py:12: ValueError"
    base = "ValueError: <Thing at 0x55aa01>\ntests/test_x.py:9: ValueError"
    assert same_error(head, base)
    assert not same_error("assert 'head' == 'expected'", "assert 'base' == 'expected'")
