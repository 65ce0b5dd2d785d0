"""A test the change moves keeps its history: failing on the base the same way, it is pre-existing."""

from __future__ import annotations

from pathlib import Path

from cli_run import run_cli
from gitrepo import GitRepo

from bot.core.models import FailureCause, RunReport, TestCaseResult, TestOutcome
from runner.checks.attribution import BaseOutcomes, attribute, same_error
from runner.checks.moved_tests import counterparts
from runner.gitdiff import ChangedFile, FileStatus

CONFIG = """\
checks: {precommit: false, docstrings: false}
tests: {paths: [tests], use_coverage_map: false, always_run: [tests/test_mixtures.py, tests/test_renamed.py]}
"""
PYPROJECT = '[tool.pytest.ini_options]\ntestpaths = ["tests"]\npythonpath = ["."]\n'
LIB = "def fit(kind):\n    raise ValueError(f'{kind} does not converge')\n"
TEST_X = """

@pytest.mark.parametrize("kind", ["GMM"])
def test_x(kind):
    mylib.fit(kind)
"""
HEADER = "import pytest\n\nimport mylib\n"
STAYS = "\n\ndef test_stays():\n    assert mylib.fit\n"
OLD = "\n\ndef test_old():\n    mylib.fit('old')\n"


def _check(repo: GitRepo, home: Path) -> tuple[int, RunReport]:
    done = run_cli(
        "check", "--repo", str(repo.path), "--base", "main", "--runner", "host", "--json", home=home
    )
    assert done.returncode in (0, 1), done.stderr
    return done.returncode, RunReport.model_validate_json(done.stdout)


def test_a_moved_test_failing_on_the_base_the_same_way_is_pre_existing(tmp_path: Path) -> None:
    repo = GitRepo(tmp_path / "repo")
    repo.commit(
        {
            ".github/paritybot.yml": CONFIG,
            "pyproject.toml": PYPROJECT,
            "mylib.py": LIB,
            "tests/test_flows.py": HEADER + TEST_X + STAYS,
            "tests/test_legacy.py": HEADER + OLD,
        },
        "base",
    )
    repo.git("checkout", "-q", "-b", "feature")
    # test_x moves to another module (test_flows.py stays); test_legacy.py is renamed whole.
    repo.commit(
        {
            "tests/test_flows.py": HEADER + STAYS,
            "tests/test_mixtures.py": HEADER + TEST_X,
            "tests/test_legacy.py": None,
            "tests/test_renamed.py": HEADER + OLD,
        },
        "move",
    )

    code, report = _check(repo, tmp_path)

    assert report.tests is not None
    causes = {r.nodeid: r.cause for r in report.tests.results if r.outcome in (TestOutcome.FAILED,)}
    assert causes == {
        "tests/test_mixtures.py::test_x[GMM]": FailureCause.ON_BASE,
        "tests/test_renamed.py::test_old": FailureCause.ON_BASE,
    }
    assert code == 0  # nothing this change broke


def test_a_moved_test_is_matched_by_its_source_or_by_gits_rename_and_never_guessed() -> None:
    test = HEADER + TEST_X
    changes = [
        ChangedFile(path="tests/test_flows.py"),
        ChangedFile(path="tests/test_mixtures.py", status=FileStatus.ADDED),
        ChangedFile(path="tests/b.py", status=FileStatus.RENAMED, old_path="tests/a.py"),
    ]
    failing = ["tests/test_mixtures.py::test_x[GMM]", "tests/b.py::T::test_y", "tests/test_flows.py::test_z"]
    base = {
        "tests/test_flows.py": test + "\n\ndef test_z():\n    pass\n",
        "tests/a.py": "class T:\n    def test_y(self): 1\n",
    }
    head = {"tests/test_mixtures.py": test, "tests/b.py": "class T:\n    def test_y(self): 2\n"}
    assert counterparts(failing, changes, base, head) == {
        "tests/test_mixtures.py::test_x[GMM]": "tests/test_flows.py::test_x[GMM]",
        "tests/b.py::T::test_y": "tests/a.py::T::test_y",
    }
    # Another body under the same name is another test; two sources alike are ambiguous.
    edited = {"tests/test_mixtures.py": test.replace("mylib.fit(kind)", "mylib.fit(kind + '!')")}
    assert counterparts(failing[:1], changes, base, edited) == {}
    twice = {**base, "tests/test_other.py": test}
    changes.append(ChangedFile(path="tests/test_other.py", status=FileStatus.DELETED))
    assert counterparts(failing[:1], changes, twice, head) == {}


def test_a_moved_test_failing_differently_on_the_base_is_new() -> None:
    head = TestCaseResult(nodeid="b.py::t", outcome=TestOutcome.FAILED, message="assert 3 == 2")
    there = TestCaseResult(nodeid="a.py::t", outcome=TestOutcome.FAILED, message="assert 4 == 2")
    [moved] = attribute([head], BaseOutcomes(results={"b.py::t": there}, moved={"b.py::t"}))
    assert moved.cause == FailureCause.NEW
    [same] = attribute(
        [head],
        BaseOutcomes(
            results={"b.py::t": there.model_copy(update={"message": head.message})}, moved={"b.py::t"}
        ),
    )
    assert same.cause == FailureCause.ON_BASE


def test_the_location_lines_of_a_moved_test_are_not_its_error() -> None:
    head = "ValueError: GMM does not converge\ntests/test_mixtures.py:8\nmylib.py:2: ValueError"
    base = "ValueError: GMM does not converge\ntests/test_flows.py:12\nmylib.py:2: ValueError"
    assert same_error(head, base)
    assert not same_error(head, base.replace("GMM", "KDE"))
