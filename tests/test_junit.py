"""JUnit parsing: real reports written by pytest, with and without the node-id plugin."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from sample_repo import BROKEN_TEST, SUITE_SIZE, make_sample_repo, tool_env

from bot.core.models import TestOutcome
from runner.checks.junit import JUnitError, parse_junit, summarize_failure
from runner.checks.testexec import PLUGIN_MODULE, plugin_source


def _pytest_junit(repo: Path, *extra: str, plugin: bool) -> str:
    """Run pytest in ``repo`` and return its JUnit report (xunit1, like the test step)."""
    report = repo / "report.xml"
    args = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-o", "junit_family=xunit1"]
    env = dict(tool_env())
    if plugin:
        (repo / ".paritybot").mkdir(exist_ok=True)
        (repo / ".paritybot" / f"{PLUGIN_MODULE}.py").write_text(plugin_source())
        args += ["-p", PLUGIN_MODULE]
        env["PYTHONPATH"] = str(repo / ".paritybot")
    subprocess.run(
        [*args, f"--junitxml={report}", *extra], cwd=repo, env=env, capture_output=True, check=False
    )
    return report.read_text()


@pytest.fixture
def sample_repo_path(tmp_path: Path) -> Path:
    return make_sample_repo(tmp_path).path


def test_plugin_ids_and_fallback_ids_agree_for_classes_dirs_and_brackets(sample_repo_path: Path) -> None:
    with_plugin = parse_junit(_pytest_junit(sample_repo_path, plugin=True))
    (sample_repo_path / "tests" / ".flaky_attempted").unlink()
    without_plugin = parse_junit(_pytest_junit(sample_repo_path, plugin=False))

    assert len(with_plugin) == SUITE_SIZE
    assert [c.nodeid for c in with_plugin] == [c.nodeid for c in without_plugin]
    assert "tests/unit/test_nested.py::TestOuter::TestInner::test_mean_is_between" in {
        c.nodeid for c in with_plugin
    }
    assert "tests/test_text.py::test_shout_ends_with_bang[x::y]" in {c.nodeid for c in with_plugin}


def test_outcomes_durations_and_messages(sample_repo_path: Path) -> None:
    (sample_repo_path / "tests" / "test_more.py").write_text(
        "import pytest\n\n\n"
        "@pytest.fixture\ndef broken():\n    raise RuntimeError('fixture exploded')\n\n\n"
        "def test_uses_broken(broken):\n    pass\n\n\n"
        "@pytest.mark.skip(reason='not today')\ndef test_skipped():\n    pass\n"
    )
    cases = {c.nodeid: c for c in parse_junit(_pytest_junit(sample_repo_path, plugin=True))}

    assert cases[BROKEN_TEST].outcome == TestOutcome.FAILED
    assert cases[BROKEN_TEST].duration_s >= 0
    errored = cases["tests/test_more.py::test_uses_broken"]
    assert errored.outcome == TestOutcome.ERROR and not errored.collection_error
    assert "RuntimeError: fixture exploded" in errored.message
    assert cases["tests/test_more.py::test_skipped"].outcome == TestOutcome.SKIPPED
    assert "not today" in cases["tests/test_more.py::test_skipped"].message


def test_a_collection_error_is_kept_under_the_file_id(sample_repo_path: Path) -> None:
    (sample_repo_path / "tests" / "unit" / "test_bad.py").write_text("import nowhere_to_be_found\n")

    cases = {
        c.nodeid: c
        for c in parse_junit(_pytest_junit(sample_repo_path, "--continue-on-collection-errors", plugin=True))
    }

    bad = cases["tests/unit/test_bad.py"]
    assert bad.outcome == TestOutcome.ERROR and bad.collection_error
    assert "No module named 'nowhere_to_be_found'" in bad.message


def test_a_malformed_report_is_an_error_not_an_empty_result() -> None:
    with pytest.raises(JUnitError, match="not valid XML"):
        parse_junit("<testsuites><testcase name='x'>")


def test_a_report_of_too_many_cases_is_an_error_not_a_partial_result() -> None:
    cases = "".join(f'<testcase classname="t" name="test_{i}" file="t.py"/>' for i in range(4))
    xml = f"<testsuites><testsuite>{cases}</testsuite></testsuites>"
    assert len(parse_junit(xml, max_cases=4)) == 4
    with pytest.raises(JUnitError) as err:
        parse_junit(xml, max_cases=3)
    assert str(err.value) == "the JUnit report has more than 3 test cases, more than paritybot reads"


def test_cases_in_nested_suites_are_all_read() -> None:
    xml = (
        '<testsuites><testsuite name="outer"><testcase name="a" file="a.py" classname="a"/>'
        '<testsuite name="inner"><testcase name="b" file="b.py" classname="b"/></testsuite>'
        '<testcase name="c" file="c.py" classname="c"/></testsuite></testsuites>'
    )
    assert [c.nodeid for c in parse_junit(xml)] == ["a.py::a", "b.py::b", "c.py::c"]


def test_the_worse_outcome_wins_when_an_id_repeats() -> None:
    xml = (
        "<testsuites><testsuite>"
        '<testcase classname="tests.test_a" name="test_x" file="tests/test_a.py" time="0.5"/>'
        '<testcase classname="tests.test_a" name="test_x" file="tests/test_a.py" time="0.7">'
        '<failure message="boom">E   boom</failure></testcase>'
        "</testsuite></testsuites>"
    )

    [case] = parse_junit(xml)

    assert case.nodeid == "tests/test_a.py::test_x"
    assert case.outcome == TestOutcome.FAILED and case.message == "boom"


def test_long_failures_are_cut_to_fifteen_lines() -> None:
    text = "\n".join(
        [*(f"    line {i}" for i in range(40)), *(f"E   detail {i}" for i in range(30)), "t.py:3: Boom"]
    )

    summary = summarize_failure("Boom: it broke", text)

    lines = summary.splitlines()
    assert len(lines) == 15
    assert lines[0] == "Boom: it broke" and lines[1] == "E   detail 0"
    assert lines[-1] == "… 18 more lines"
