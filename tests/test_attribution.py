"""Whose failure is it: each test failing at the head is run on the merge base in the same run.

A real repository, real pytest on the host runner, through `paritybot check`: a failure the change
caused is new and fails the change; one the base already had (with the same error, or another) is
named as such, shown with the base's error, and leaves the exit code at 0; a flaky test stays flaky.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from cli_run import run_cli
from gitrepo import GitRepo
from sample_repo import tool_env

from bot.core.config import parse_repo_config
from bot.core.kinds import CheckKind, Stage
from bot.core.models import (
    FailureCause,
    RunKind,
    RunReport,
    RunRequest,
    RunState,
    TestCaseResult,
    TestOutcome,
)
from bot.render.check_results import render_check_runs
from bot.render.comment import render_comment
from bot.service.store.records import Job, TestRunRecord
from bot.service.store.sqlite import SQLiteStore
from bot.service.test_history import StoreHistory, record_tests
from runner.backends.base import RunnerRequest
from runner.backends.host import HostRunner
from runner.checks.attribution import BaseOutcomes, attribute, same_error
from runner.pipeline import Pipeline, PipelineDeps

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


async def _pipeline_run(tmp_path: Path, repo: GitRepo, store: SQLiteStore) -> RunReport:
    async def host(request: RunnerRequest) -> HostRunner:
        return HostRunner(env=tool_env())

    deps = PipelineDeps(
        runner_factory=host,
        workspace_root=tmp_path / "ws",
        cache_root=tmp_path / "cache",
        history=StoreHistory(store, "octo/lib", "default", 12),
    )
    base, head = repo.git("rev-parse", "main"), repo.git("rev-parse", "feature")
    request = RunRequest(
        repo="octo/lib", pr_number=12, clone_url=str(repo.path), head_sha=head, base_sha=base
    )
    config = parse_repo_config(CONFIG)
    return await Pipeline(request, config, config.default_environment(), "run-1", deps).execute()


async def test_a_test_flaky_on_other_changes_is_known_flaky_with_links(tmp_path: Path) -> None:
    repo = _repo(tmp_path, breaks=True)
    store = SQLiteStore(tmp_path / "bot.db")
    elsewhere = "https://github.com/octo/lib/runs/99"
    store.record_test_run(
        TestRunRecord("j-99", "octo/lib", "default", 3, "f" * 40, elsewhere, ((NEW, "flaky", "E"),))
    )
    # This pull request's own flaky runs never make a test known flaky.
    own = "https://github.com/octo/lib/runs/98"
    store.record_test_run(
        TestRunRecord("j-98", "octo/lib", "default", 12, "e" * 40, own, ((ADDED, "flaky", "E"),))
    )

    report = await _pipeline_run(tmp_path, repo, store)

    assert report.tests is not None, report.error
    by_id = {r.nodeid: r for r in report.tests.results}
    assert by_id[NEW].cause == FailureCause.KNOWN_FLAKY and by_id[NEW].seen_failing == [elsewhere]
    assert by_id[ADDED].cause == FailureCause.NEW
    [tests_run] = [o for o in render_check_runs(report) if o.kind == CheckKind.TESTS]
    assert "Known flaky" in tests_run.summary and f"[run 1]({elsewhere})" in tests_run.summary


async def test_the_default_branchs_record_of_the_merge_base_answers_without_a_rerun(tmp_path: Path) -> None:
    repo = _repo(tmp_path, breaks=True)
    store = SQLiteStore(tmp_path / "bot.db")
    base = repo.git("rev-parse", "main")
    # The record says test_double fails on the base (a run there would say it passes): it is believed.
    recorded = "assert 3 == 4"
    url = "https://github.com/octo/lib/commit/" + base
    store.record_test_run(
        TestRunRecord("j-1", "octo/lib", "default", None, base, url, ((NEW, "failed", recorded),))
    )

    report = await _pipeline_run(tmp_path, repo, store)

    assert report.tests is not None, report.error
    by_id = {r.nodeid: r for r in report.tests.results}
    # Its error there is the record's: another error than the head's (assert 6 == 4).
    assert by_id[NEW].cause == FailureCause.ON_BASE_DIFFERENTLY and by_id[NEW].base_message == recorded
    assert by_id[SAME].cause == FailureCause.ON_BASE  # not in the record: run on the base as before


async def test_a_run_on_the_default_branch_records_which_tests_fail_there(tmp_path: Path) -> None:
    repo = _repo(tmp_path, breaks=False)
    base = repo.git("rev-parse", "main")
    store = SQLiteStore(tmp_path / "bot.db")

    async def host(request: RunnerRequest) -> HostRunner:
        return HostRunner(env=tool_env())

    deps = PipelineDeps(runner_factory=host, workspace_root=tmp_path / "ws", cache_root=tmp_path / "cache")
    request = RunRequest(repo="octo/lib", kind=RunKind.BASELINE, clone_url=str(repo.path), head_sha=base)
    config = parse_repo_config(CONFIG.replace("use_coverage_map: false", "use_coverage_map: true"))
    report = await Pipeline(request, config, config.default_environment(), "run-1", deps).execute()
    job = Job(
        id="j-main",
        queue="q",
        repo="octo/lib",
        pr_number=None,
        head_sha=base,
        environment="default",
        request=request,
        state=RunState.SUCCEEDED,
        created_at=datetime.now(UTC),
    )
    await record_tests(store, job, report)

    record = store.failing_at("octo/lib", "default", base)
    # One attempt each: the flaky test's first attempt fails there too.
    assert record is not None and set(record) == {SAME, DIFFERENT, FLAKY_ID}, report.error
    assert "the base is broken here" in record[SAME]


def test_a_base_that_cannot_import_what_the_head_fails_on_is_no_proof_of_an_old_failure() -> None:
    head = TestCaseResult(nodeid="t.py::t", outcome=TestOutcome.FAILED, message="assert 3 == 2")
    no_build = TestCaseResult(
        nodeid="t.py::t", outcome=TestOutcome.ERROR, message="ImportError: cannot import _C"
    )
    missing_dependency = "ModuleNotFoundError: No module named 'scipy'"
    [changed] = attribute([head], BaseOutcomes(results={"t.py::t": no_build}))
    assert changed.cause == FailureCause.NEW  # the base's tree lacks the build: not measured
    both = head.model_copy(update={"message": missing_dependency})
    on_base = no_build.model_copy(update={"message": missing_dependency})
    [same] = attribute([both], BaseOutcomes(results={"t.py::t": on_base}))
    assert same.cause == FailureCause.ON_BASE  # the same import error on both sides: already failing


def test_a_src_layout_failure_is_run_on_the_bases_own_code_on_the_host(tmp_path: Path) -> None:
    # A local run puts the head's `src/` first on the path; the failing test's run on the merge base
    # must import the base's code, or every new failure of a src layout reads "already failing".
    repo = GitRepo(tmp_path / "project")
    repo.commit(
        {
            "pyproject.toml": '[tool.pytest.ini_options]\ntestpaths = ["tests"]\n',
            "src/calc/__init__.py": "",
            "src/calc/stats.py": "def mean(values):\n    return sum(values) / len(values)\n",
            "tests/test_stats.py": "from calc.stats import mean\n\n\ndef test_mean():\n    assert mean([1, 2]) == 1.5\n",
        }
    )
    repo.git("checkout", "-q", "-b", "feature")
    repo.commit({"src/calc/stats.py": "def mean(values):\n    return sum(values) // len(values)\n"})

    done = run_cli("check", "--repo", str(repo.path), "--base", "main", "--runner", "host", home=tmp_path)

    assert done.returncode == 1, done.stdout + done.stderr
    assert "❌ 1 test failed" in done.stdout
    assert "already failing" not in done.stdout and "not caused by this change" not in done.stdout
