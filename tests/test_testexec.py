"""Running the selected tests for real: pytest in a subprocess on the sample project's git repo."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from gitrepo import GitRepo
from sample_repo import (
    BROKEN_TEST,
    FLAKY_TEST,
    SUITE_SIZE,
    SampleRepo,
    commit_all,
    git,
    make_sample_repo,
    tool_env,
)

from bot.core.config import TestSettings
from bot.core.models import TestCaseResult, TestOutcome
from runner.backends.host import HostRunner
from runner.checks.repro import ReproContext
from runner.checks.testexec import NoTestsCollected, TestRun, run_tests

NESTED = "tests/unit/test_nested.py::TestOuter::TestInner::test_mean_is_between"
PARAM = "tests/test_text.py::test_shout_ends_with_bang[x::y]"


@pytest.fixture
def sample(tmp_path: Path) -> SampleRepo:
    return make_sample_repo(tmp_path)


def _repro(sample: SampleRepo) -> ReproContext:
    """The commit checked out: a test may have committed on top of the sample's head."""
    return ReproContext(head_sha=git(sample.path, "rev-parse", "HEAD"), repo="octo/calc", pr_number=12)


async def _run(
    sample: SampleRepo,
    nodeids: list[str] | None,
    settings: TestSettings | None = None,
    env: dict[str, str] | None = None,
) -> dict[str, TestCaseResult]:
    run = await _test_run(sample, nodeids, settings, env)
    by_id = {r.nodeid: r for r in run.results}
    assert len(by_id) == len(run.results), "a test was reported twice"
    return by_id


async def _test_run(
    sample: SampleRepo,
    nodeids: list[str] | None,
    settings: TestSettings | None = None,
    env: dict[str, str] | None = None,
) -> TestRun:
    runner = HostRunner(env={**tool_env(), **(env or {})})
    return await run_tests(runner, sample.path, nodeids, settings or TestSettings(), _repro(sample))


async def test_whole_suite_tells_failed_from_flaky_from_passed(sample: SampleRepo) -> None:
    results = await _run(sample, None, TestSettings(reruns=2))

    assert len(results) == SUITE_SIZE
    broken = results[BROKEN_TEST]
    assert broken.outcome == TestOutcome.FAILED
    assert broken.attempts == 2  # the same error twice: deterministic, not rerun again
    assert broken.message.splitlines()[0] == "assert 2 == 2.5"
    assert "tests/test_stats.py:10: AssertionError" in broken.message
    flaky = results[FLAKY_TEST]
    assert flaky.outcome == TestOutcome.FLAKY
    assert flaky.attempts == 2
    assert "first attempt fails on purpose" in flaky.message
    others = [r for r in results.values() if r.nodeid not in (BROKEN_TEST, FLAKY_TEST)]
    assert {r.outcome for r in others} == {TestOutcome.PASSED}
    assert all(r.repro == [] for r in others)
    assert broken.repro[-1] == f"python -m pytest {BROKEN_TEST}"
    assert broken.repro[0].endswith(f"git fetch origin pull/12/head && git checkout {sample.head_sha}")


async def test_node_ids_map_back_exactly(sample: SampleRepo) -> None:
    results = await _run(sample, None)

    expected = {
        NESTED,
        PARAM,
        "tests/test_text.py::test_shout_ends_with_bang[dot.ted]",
        "tests/test_text.py::test_shout_ends_with_bang[a b]",
        "tests/test_stats.py::test_spread[values0-4]",
        "tests/unit/test_nested.py::TestOuter::test_initials_of_three",
        "tests/unit/test_nested.py::test_module_level",
    }
    assert expected <= set(results)


async def test_only_the_selected_ids_run(sample: SampleRepo) -> None:
    selected = [NESTED, PARAM, BROKEN_TEST]

    results = await _run(sample, selected, TestSettings(reruns=0))

    assert set(results) == set(selected)
    assert results[BROKEN_TEST].outcome == TestOutcome.FAILED
    assert results[BROKEN_TEST].attempts == 1
    assert results[NESTED].outcome == results[PARAM].outcome == TestOutcome.PASSED


async def test_without_reruns_a_flaky_test_is_failed(sample: SampleRepo) -> None:
    results = await _run(sample, [FLAKY_TEST], TestSettings(reruns=0))

    assert results[FLAKY_TEST].outcome == TestOutcome.FAILED


async def test_a_test_file_that_fails_to_import_is_an_error_and_the_rest_still_runs(
    sample: SampleRepo,
) -> None:
    (sample.path / "tests/test_broken_import.py").write_text("import calc.missing_module\n")
    commit_all(sample.path, "broken test file")

    results = await _run(sample, None)

    broken_file = results["tests/test_broken_import.py"]
    assert broken_file.outcome == TestOutcome.ERROR
    assert "ModuleNotFoundError: No module named 'calc.missing_module'" in broken_file.message
    assert broken_file.repro[-1] == "python -m pytest tests/test_broken_import.py"
    assert results[NESTED].outcome == TestOutcome.PASSED
    assert len(results) == SUITE_SIZE + 1


async def test_a_selected_id_in_a_file_that_fails_to_import_reports_the_import_error(
    sample: SampleRepo,
) -> None:
    (sample.path / "tests/test_broken_import.py").write_text(
        "import calc.missing_module\n\n\ndef test_x():\n    pass\n"
    )
    commit_all(sample.path, "broken test file")

    results = await _run(sample, ["tests/test_broken_import.py::test_x", NESTED])

    assert results["tests/test_broken_import.py"].outcome == TestOutcome.ERROR
    assert "calc.missing_module" in results["tests/test_broken_import.py"].message
    assert results[NESTED].outcome == TestOutcome.PASSED


async def test_ids_the_suite_no_longer_has_are_listed_never_run_never_failures(sample: SampleRepo) -> None:
    gone_test = "tests/test_stats.py::TestMean::test_renamed_away"
    gone_file = "tests/test_deleted.py::test_x"

    run = await _test_run(sample, [gone_test, NESTED, gone_file])

    assert [(r.nodeid, r.outcome) for r in run.results] == [(NESTED, TestOutcome.PASSED)]
    assert sorted(run.not_found) == [gone_file, gone_test]
    assert (run.selected, run.deselected) == (1, SUITE_SIZE - 1)


async def test_a_selection_the_head_has_none_of_runs_nothing_and_says_so(sample: SampleRepo) -> None:
    (sample.path / "tests/test_empty.py").write_text('"""No tests yet."""\n')
    commit_all(sample.path, "empty test file")

    run = await _test_run(sample, ["tests/test_empty.py", "tests/test_stats.py::test_gone"])

    assert run.results == [] and run.selected == 0
    assert run.not_found == ["tests/test_empty.py", "tests/test_stats.py::test_gone"]


async def test_a_suite_without_tests_is_an_explicit_error(sample: SampleRepo) -> None:
    for test_file in (sample.path / "tests").rglob("test_*.py"):
        test_file.write_text('"""No tests yet."""\n')
    commit_all(sample.path, "no tests")

    with pytest.raises(NoTestsCollected, match=re.escape("pytest collected no tests in the suite")):
        await _run(sample, None)


async def test_counts_are_in_test_items_a_class_or_function_counting_as_its_tests(
    sample: SampleRepo,
) -> None:
    # A class of four tests, a function of three parametrized cases, one nested test.
    selected = ["tests/test_stats.py::TestMean", "tests/test_stats.py::test_spread", NESTED]

    run = await _test_run(sample, selected, TestSettings(reruns=0))

    assert run.selected == 8 == len(run.results)
    assert run.deselected == SUITE_SIZE - 8
    assert {r.nodeid for r in run.results} >= {"tests/test_stats.py::test_spread[values0-4]", BROKEN_TEST}


async def test_a_module_outside_the_selection_that_cannot_be_collected_is_listed_not_failed(
    sample: SampleRepo,
) -> None:
    (sample.path / "tests/test_needs_gym.py").write_text(
        "import gym_not_installed\n\n\ndef test_x():\n    pass\n"
    )
    commit_all(sample.path, "a test module needing an optional dependency")

    run = await _test_run(sample, [NESTED])

    assert [(r.nodeid, r.outcome) for r in run.results] == [(NESTED, TestOutcome.PASSED)]
    [error] = run.not_collected
    assert error.path == "tests/test_needs_gym.py"
    assert "No module named 'gym_not_installed'" in error.message


@pytest.mark.parametrize(
    "autoload", [True, False], ids=["plugins autoloaded", "PYTEST_DISABLE_PLUGIN_AUTOLOAD"]
)
async def test_a_hanging_test_is_stopped_by_the_per_test_timeout(sample: SampleRepo, autoload: bool) -> None:
    (sample.path / "tests/test_hang.py").write_text(
        "import time\n\n\ndef test_hangs():\n    time.sleep(60)\n"
    )
    commit_all(sample.path, "hanging test")

    results = await _run(
        sample,
        ["tests/test_hang.py::test_hangs"],
        TestSettings(per_test_timeout_s=1, reruns=0),
        env={} if autoload else {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"},
    )

    assert results["tests/test_hang.py::test_hangs"].outcome == TestOutcome.FAILED
    assert "Timeout" in results["tests/test_hang.py::test_hangs"].message


async def test_an_environment_without_pytest_timeout_still_runs(sample: SampleRepo, tmp_path: Path) -> None:
    # Make pytest-timeout unimportable in the target environment; passing --timeout would be a
    # usage error there, so the step must notice and leave it out.
    shadow = tmp_path / "shadow"
    shadow.mkdir()
    (shadow / "pytest_timeout.py").write_text("raise ImportError('not installed here')\n")
    env = {"PYTHONPATH": str(shadow), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}

    results = await _run(sample, [NESTED, BROKEN_TEST], TestSettings(reruns=0), env=env)

    assert results[NESTED].outcome == TestOutcome.PASSED
    assert results[BROKEN_TEST].outcome == TestOutcome.FAILED


async def test_project_pytest_args_apply(sample: SampleRepo) -> None:
    results = await _run(sample, None, TestSettings(pytest_args=["-k", "initials"]))

    assert set(results) == {
        "tests/test_text.py::test_initials",
        "tests/test_text.py::test_initials_single",
        "tests/unit/test_nested.py::TestOuter::test_initials_of_three",
    }


async def test_an_empty_selection_runs_nothing(sample: SampleRepo) -> None:
    assert await _run(sample, []) == {}


# Each attempt appends a line to a counter beside the test (in the run's copy, ignored by git).
COUNTED = """\
from pathlib import Path

COUNT = Path(__file__).with_name(".count-{name}")


def attempt():
    with COUNT.open("a") as f:
        f.write("x")
    return len(COUNT.read_text())


def test_{name}():
    n = attempt()
    {body}
"""


async def test_a_failure_repeated_with_the_same_error_is_not_rerun_again(tmp_path: Path) -> None:
    repo = GitRepo(tmp_path / "repo")
    repo.commit(
        {
            ".gitignore": ".count-*\n",
            "pyproject.toml": '[tool.pytest.ini_options]\ntestpaths = ["tests"]\n',
            # The same error on every attempt: rerun once (it could have been flaky), then no more.
            "tests/test_same.py": COUNTED.format(name="same", body="raise ValueError('always')"),
            # Another error each time: it may still pass, so it gets every rerun.
            "tests/test_changing.py": COUNTED.format(
                name="changing", body="raise ValueError(f'attempt {n}')"
            ),
            # Another error, then a pass: flaky, as before.
            "tests/test_late.py": COUNTED.format(name="late", body="assert n == 3, f'attempt {n}'"),
        }
    )
    runner = HostRunner(env=tool_env())
    repro = ReproContext(head_sha=repo.git("rev-parse", "HEAD"), repo="octo/calc", pr_number=12)

    run = await run_tests(runner, repo.path, None, TestSettings(reruns=4), repro)

    by_id = {r.nodeid: r for r in run.results}
    same = by_id["tests/test_same.py::test_same"]
    assert (same.outcome, same.attempts) == (TestOutcome.FAILED, 2)
    assert (repo.path / "tests/.count-same").read_text() == "xx"  # ran twice, not five times
    changing = by_id["tests/test_changing.py::test_changing"]
    assert (changing.outcome, changing.attempts) == (TestOutcome.FAILED, 5)
    late = by_id["tests/test_late.py::test_late"]
    assert (late.outcome, late.attempts) == (TestOutcome.FLAKY, 3)
