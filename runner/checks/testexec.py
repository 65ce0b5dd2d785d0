"""Run the selected tests with pytest, rerun failures to tell flaky from failed, attach repro commands.

Each attempt is one step: ``python -m pytest`` with a JUnit report in the scratch directory,
paritybot's plugin (:mod:`runner.checks.pytest_plugin`) injected with ``-p`` (no conftest is
touched), no cache provider (the workspace stays as checked out), ``--continue-on-collection-errors``
(one broken test file must not hide the results of all others; its error becomes an ERROR result)
and a per-test timeout when pytest-timeout is importable *in the target environment*, which the
plugin finds out in pytest's own interpreter.

The first attempt collects the suite's test roots and the plugin keeps the selected tests, so every
count is in pytest's items (a selected class or function counts as the tests it holds) and the
rest of the suite is counted as deselected, as pytest itself counts it. Selected ids the suite no
longer has (a test renamed or removed, a ``/retest-gpu failed`` after a rename) are listed as not
found, never run and never failures. Reruns name the failing tests on the command line; a test
whose rerun fails with the same error as its attempt before is not rerun again (it is deterministic:
another attempt would only cost its time again).

Longer than most modules: the attempts, the reruns and the repro commands share one step's state.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from pathlib import Path

import structlog
from pydantic import BaseModel, Field, ValidationError

from bot.core.config import TestSettings
from bot.core.models import CollectionError, TestCaseResult, TestOutcome
from runner import gitdiff
from runner.backends.base import PYTEST_BASETEMP, SCRATCH_DIR, Runner, RunnerError, Step
from runner.checks.failure_text import same_error
from runner.checks.junit import JUnitCase, JUnitError, parse_junit
from runner.checks.pytest_plugins import plugin_hint
from runner.checks.repro import ReproContext, repro_commands
from runner.hints import collection_fix, missing_modules

log = structlog.get_logger(__name__)

JUNIT_PATH = f"{SCRATCH_DIR}/junit.xml"
PLUGIN_MODULE = "paritybot_pytest"
PLUGIN_PATH = f"{SCRATCH_DIR}/{PLUGIN_MODULE}.py"
SELECTION_PATH = f"{SCRATCH_DIR}/selection.txt"
ORDER_PATH = f"{SCRATCH_DIR}/order.txt"
LIVE_PATH = f"{SCRATCH_DIR}/live.jsonl"  # results as they happen: runner/checks/streaming.py
COUNTS_PATH = f"{SCRATCH_DIR}/counts.json"
COUNTS_MAX_BYTES = 1_000_000
# With runner.checks.junit.MAX_CASES, this keeps the bot under 400 MiB for one report (measured:
# benchmarks/collect_memory.py); a real report of 64 MB is some 250,000 passing tests.
JUNIT_MAX_BYTES = 64_000_000
NO_TESTS_EXIT = 5
USAGE_ERROR_EXIT = 4
MAX_USAGE_RETRIES = 3

# $1 the JUnit path, then pytest's arguments. The plugin directory is put in front of PYTHONPATH
# (not instead of it: images set their own).
_SCRIPT = f"""
junit=$1
shift
py=python
command -v python >/dev/null 2>&1 || py=python3
rm -f "$junit"
PYTHONPATH="$PWD/{SCRATCH_DIR}${{PYTHONPATH:+:$PYTHONPATH}}" exec "$py" -m pytest "$@"
"""

_NOT_FOUND = re.compile(r"^ERROR: not found: (.+)$", re.MULTILINE)
_NO_COLLECTORS = re.compile(r"^ERROR: found no collectors for (.+)$", re.MULTILINE)


class TestRunError(RunnerError):
    """pytest did not produce results (crash, timeout, usage error, nothing collected)."""

    __test__ = False

    def __init__(self, message: str, output: str = ""):
        super().__init__(message)
        self.message = message
        self.output = output


class NoTestsCollected(TestRunError):
    """pytest exited with code 5: the suite holds no test."""


@cache
def plugin_source() -> str:
    """The plugin injected into every run (``runner/checks/pytest_plugin.py``), as shipped."""
    return resources.files("runner.checks").joinpath("pytest_plugin.py").read_text(encoding="utf-8")


class _Counts(BaseModel):
    """What the plugin wrote once collection was done. The run's own code could rewrite it, as it
    could the JUnit report: it feeds the counts shown, never the verdict."""

    selected: int = Field(ge=0)
    deselected: int = Field(ge=0)
    not_found: list[str] = Field(default_factory=list, max_length=1000)
    not_collected: list[CollectionError] = Field(default_factory=list, max_length=1000)


@dataclass
class TestRun:
    """One test run's results, one per test item, and what the counts need besides."""

    __test__ = False

    results: list[TestCaseResult]
    selected: int | None = None  # test items pytest kept from the selection (all, for the suite)
    deselected: int | None = None  # test items of the suite left out: unaffected, or by -m/-k
    not_found: list[str] = field(default_factory=list)  # selected ids the suite does not have
    not_collected: list[CollectionError] = field(default_factory=list)  # unselected, not importable
    collection_fix: str = ""  # the likely fix when modules did not collect


def tests_step(
    nodeids: list[str] | None,
    settings: TestSettings,
    junit_path: str = JUNIT_PATH,
    timeout_s: float = 1800,
    network: bool = False,
    env: dict[str, str] | None = None,
    *,
    paths: list[str] | None = None,
    selection: list[str] | None = None,
    order: list[str] | None = None,
) -> Step:
    """One pytest invocation of ``nodeids``, or of ``paths`` keeping the ``selection`` (counted);
    neither: what the project's own configuration collects (counted)."""
    counted = nodeids is None
    args = [
        *settings.pytest_args,
        # Ours come after the project's options so that they win where both set the same option.
        "-p",
        PLUGIN_MODULE,
        "-p",
        "no:cacheprovider",
        f"--junitxml={junit_path}",
        "-o",
        "junit_family=xunit1",
        "--continue-on-collection-errors",
        "--color=no",
        f"--ignore={SCRATCH_DIR}",  # where the project's settings would collect paritybot's own files
        f"--basetemp={PYTEST_BASETEMP}",
        f"--paritybot-timeout={settings.per_test_timeout_s}",
        *(["--paritybot-counts", COUNTS_PATH] if counted else []),
        *(["--paritybot-selection", SELECTION_PATH] if selection is not None else []),
        *(["--paritybot-order", ORDER_PATH] if order else []),
        *(["--paritybot-live", LIVE_PATH] if counted else []),
        *(nodeids if nodeids is not None else paths or []),
    ]
    inject = {PLUGIN_PATH: plugin_source()}
    if selection is not None:
        inject[SELECTION_PATH] = "".join(f"{nodeid}\n" for nodeid in selection)
    if order:
        inject[ORDER_PATH] = "".join(f"{nodeid}\n" for nodeid in order)
    return Step(
        name="tests",
        argv=["sh", "-c", _SCRIPT, "tests-step", junit_path, *args],
        env=dict(env or {}),
        timeout_s=timeout_s,
        network=network,
        inject=inject,
        collect=[junit_path, *([COUNTS_PATH] if counted else [])],
        collect_max_bytes=JUNIT_MAX_BYTES,
    )


@dataclass
class _Attempt:
    cases: list[JUnitCase]
    counts: _Counts | None = None  # the first attempt's


async def run_tests(
    runner: Runner,
    workspace: Path,
    nodeids: list[str] | None,
    settings: TestSettings,
    repro: ReproContext,
    *,
    timeout_s: float = 1800,
    network: bool = False,
    env: dict[str, str] | None = None,
    order: list[str] | None = None,
) -> TestRun:
    """Run ``nodeids`` (``None``: the whole suite), rerun failures, return one result per test.

    Raises :class:`TestRunError` when pytest produced no results, :class:`NoTestsCollected` when
    the suite holds no test. A cancelled run returns the results it has so far.
    """
    if nodeids is not None and not nodeids:
        return TestRun([], selected=0)
    paths = _whole_suite_paths(workspace, repro.head_sha, settings)
    selection: list[str] | None = None
    refused: list[TestCaseResult] = []
    not_found: list[str] = []
    if nodeids is not None:
        selection, refused = _existing(workspace, repro.head_sha, nodeids)
        told = set(selection) | {r.nodeid for r in refused}
        not_found = [n for n in nodeids if n not in told]  # no such file in the commit
        if not selection:
            return TestRun(refused, selected=0, not_found=not_found)
        paths += _outside(paths, selection)

    def step_for(ids: list[str] | None, junit: str) -> Step:
        # The first attempt collects the test roots and keeps the selection; reruns name their tests.
        chosen, first = (selection, order) if ids is None else (None, None)
        return tests_step(
            ids, settings, junit, timeout_s, network, env, paths=paths, selection=chosen, order=first
        )

    first = await _run_attempt(runner, workspace, step_for, None, JUNIT_PATH, selected=selection is not None)
    if first is None:
        return TestRun(refused, not_found=not_found)
    results = [_to_result(c) for c in first.cases]
    last = {r.nodeid: r.message for r in results}  # each test's error on its latest attempt
    settled: set[str] = set()
    for attempt in range(1, settings.reruns + 1):
        failing = [r for r in results if r.outcome in (TestOutcome.FAILED, TestOutcome.ERROR)]
        retry = [
            r.nodeid for r in failing if r.nodeid not in settled and not _is_collection_error(r, first.cases)
        ]
        if not retry:
            break
        log.info("rerunning failed tests", attempt=attempt, count=len(retry))
        junit = f"{SCRATCH_DIR}/junit-rerun-{attempt}.xml"
        rerun = await _run_attempt(runner, workspace, step_for, retry, junit, selected=True)
        if rerun is None:
            break
        _merge_rerun(results, rerun.cases, set(retry), attempt)
        settled |= repeated_failures(last, rerun.cases)
    counts = first.counts
    not_collected = counts.not_collected if counts else []
    errors = [r.message for r in results if r.collection_error] + [e.message for e in not_collected]
    return TestRun(
        refused + _finish(results, repro),
        selected=counts.selected if counts else None,
        deselected=counts.deselected if counts else None,
        not_found=_dedupe(not_found + (counts.not_found if counts else [])),
        not_collected=not_collected,
        collection_fix=collection_fix(errors, _own_roots(workspace, repro.head_sha, errors))
        if errors
        else "",
    )


async def _run_attempt(
    runner: Runner,
    workspace: Path,
    step_for: Callable[[list[str] | None, str], Step],
    ids: list[str] | None,
    junit: str,
    *,
    selected: bool,
) -> _Attempt | None:
    """One pytest run; retried when pytest refused node ids it cannot find. ``None``: cancelled.

    ``selected``: the run is of chosen tests, so finding none of them is no error.
    """
    for _ in range(MAX_USAGE_RETRIES + 1):
        result = await runner.run(step_for(ids, junit), workspace)
        if result.cancelled:
            return None
        if result.error or result.timed_out or result.oom_killed or result.stopped_by_limit:
            raise TestRunError(result.describe_failure(), result.output)
        refused = result.refusal(junit, "the JUnit report")
        if refused:
            raise TestRunError(refused, result.output)
        if result.exit_code == USAGE_ERROR_EXIT and ids:
            gone, no_collectors = _unresolved(result.output, ids)
            if gone or no_collectors:
                # An id whose file fails to import: run the file, so its collection error is reported.
                ids = _dedupe([i.split("::")[0] if i in no_collectors else i for i in ids if i not in gone])
                if not ids:
                    return _Attempt([])
                continue
        counts = _read_counts(result.collected.get(COUNTS_PATH)) if ids is None else None
        if result.exit_code == NO_TESTS_EXIT and not selected:
            raise NoTestsCollected("pytest collected no tests in the suite (exit code 5)", result.output)
        text = result.collected.get(junit)
        if text is None:
            raise TestRunError(
                f"pytest exited with code {result.exit_code} and wrote no report:\n{_tail(result.output)}"
                + plugin_hint(result.output),
                result.output,
            )
        try:
            return _Attempt(parse_junit(text), counts)
        except JUnitError as exc:
            raise TestRunError(str(exc), result.output) from None
    raise TestRunError(f"pytest kept refusing the node ids:\n{_tail(result.output)}", result.output)


async def run_ids(
    runner: Runner,
    workspace: Path,
    step_for: Callable[[list[str] | None, str], Step],
    ids: list[str],
    junit: str,
) -> list[JUnitCase] | None:
    """One run of the named tests (``step_for`` builds the step), as :func:`run_tests` makes each
    attempt: ids pytest cannot find are dropped and it is retried. ``None``: cancelled."""
    attempt = await _run_attempt(runner, workspace, step_for, ids, junit, selected=True)
    return None if attempt is None else attempt.cases


def _read_counts(text: str | None) -> _Counts | None:
    """The plugin's counts; none when pytest stopped before collection ended, or they are garbled."""
    if text is None:
        return None
    try:
        return _Counts.model_validate_json(text)
    except ValidationError:
        log.warning("the test run's counts are unreadable; not shown")
        return None


def _outside(roots: list[str], selection: list[str]) -> list[str]:
    """The files of selected ids outside the test roots, which pytest must be given as well. With
    no roots (the project's own testpaths decide) pytest is given nothing more."""
    if not roots:
        return []
    files = _dedupe([n.split("::")[0] for n in selection])
    return [
        f for f in files if not any(f == r.rstrip("/") or f.startswith(r.rstrip("/") + "/") for r in roots)
    ]


def _unresolved(output: str, ids: list[str]) -> tuple[list[str], list[str]]:
    """Which requested ids pytest said it could not find; it prints them as absolute paths."""

    def match(printed: list[str]) -> list[str]:
        return [i for i in ids if any(p.strip() == i or p.strip().endswith("/" + i) for p in printed)]

    return match(_NOT_FOUND.findall(output)), match(_NO_COLLECTORS.findall(output))


# Whether a path exists is asked of the commit's tree, not of the checkout: a PR's symbolic link
# there would make the bot stat (and pytest, on the host runner, read) a file of the host.


def _whole_suite_paths(workspace: Path, rev: str, settings: TestSettings) -> list[str]:
    """The configured test roots the commit has, as directories or regular files; none means the
    project's own testpaths decide."""
    entries = gitdiff.tree_entries(workspace, rev, [p.rstrip("/") for p in settings.paths])
    return [
        p
        for p in settings.paths
        if (e := entries.get(p.rstrip("/"))) is not None and (e.type == "tree" or e.refusal(None) is None)
    ]


def _existing(workspace: Path, rev: str, nodeids: list[str]) -> tuple[list[str], list[TestCaseResult]]:
    """Ids whose file is a regular file of the commit (pytest stops at the first missing file
    without naming the rest), and an error result for each id whose file is a link or a submodule."""
    entries = gitdiff.tree_entries(workspace, rev, _dedupe([n.split("::")[0] for n in nodeids]))
    found, refused = [], []
    for n in nodeids:
        entry = entries.get(n.split("::")[0])
        reason = entry.refusal(None) if entry is not None else None
        if entry is None:
            continue  # listed as not found
        if reason is None:
            found.append(n)
        else:
            message = f"not run: {entry.path} {reason}; only regular files of the commit are run"
            refused.append(TestCaseResult(nodeid=n, outcome=TestOutcome.ERROR, message=message))
    return found, refused


def _to_result(case: JUnitCase) -> TestCaseResult:
    return TestCaseResult(
        nodeid=case.nodeid,
        outcome=case.outcome,
        duration_s=case.duration_s,
        message=case.message,
        traceback=case.traceback,
        collection_error=case.collection_error,
        line=case.line,
    )


def _own_roots(workspace: Path, rev: str, errors: list[str]) -> dict[str, str]:
    """Which of the modules the errors miss are the project's own (a package or module at the top of
    the commit or under ``src/``), with the directory each is in."""
    names = missing_modules(errors)
    places = {
        f"{root}/{name}{end}": (name, root)
        for name in names
        for root in ("src", ".")
        for end in ("/__init__.py", ".py")
    }
    found = gitdiff.tree_entries(workspace, rev, [p.removeprefix("./") for p in places])
    own: dict[str, str] = {}
    for path, (name, root) in places.items():
        if path.removeprefix("./") in found:
            own.setdefault(name, root)
    return own


def _is_collection_error(result: TestCaseResult, cases: list[JUnitCase]) -> bool:
    return any(c.nodeid == result.nodeid and c.collection_error for c in cases)


def _merge_rerun(
    results: list[TestCaseResult], cases: list[JUnitCase], retried: set[str], attempt: int
) -> None:
    """Update the failing results after rerun ``attempt``: passed now → FLAKY, else still failing."""
    by_id = {c.nodeid: c for c in cases}
    for i, res in enumerate(results):
        if res.nodeid not in retried:
            continue
        case = by_id.get(res.nodeid)
        if case is not None and case.outcome == TestOutcome.PASSED:
            # Keep the first failure's message: it is what a reader needs to chase the flake.
            results[i] = res.model_copy(update={"outcome": TestOutcome.FLAKY, "attempts": attempt + 1})
        else:
            results[i] = res.model_copy(update={"attempts": attempt + 1})


def repeated_failures(last: dict[str, str], cases: list[JUnitCase]) -> set[str]:
    """The tests this attempt failed with the same error as their attempt before: deterministic, so
    another rerun would only repeat it (reruns are for failures that may be flaky). ``last`` is
    updated to this attempt's errors."""
    repeated = set()
    for case in cases:
        if case.outcome not in (TestOutcome.FAILED, TestOutcome.ERROR):
            continue
        if case.nodeid in last and same_error(case.message, last[case.nodeid]):
            repeated.add(case.nodeid)
        last[case.nodeid] = case.message
    return repeated


def _finish(results: list[TestCaseResult], repro: ReproContext) -> list[TestCaseResult]:
    return [
        r.model_copy(update={"repro": repro_commands(repro, r.nodeid)})
        if r.outcome in (TestOutcome.FAILED, TestOutcome.ERROR, TestOutcome.FLAKY)
        else r
        for r in results
    ]


def _tail(text: str, lines: int = 15) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def _dedupe(items: list[str]) -> list[str]:
    return list(dict.fromkeys(items))
