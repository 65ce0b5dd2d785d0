"""Whose failure is it: the tests still failing at the head, run once more on the merge base.

A test that fails at the head after its reruns is run on the merge base's tree, in the same
container and run (the base is exported next to the checkout, as for the performance comparison,
before any step copies the workspace). Failing there too, it is *already failing on the base
branch*, with the base's error beside the head's, and "fails differently" when the two errors
differ; passing there, or absent from the base, it is *new*: this change broke it. A test the
change moved (``runner/checks/moved_tests.py``) is run by its base node id, and is already failing
only when it fails there with the same error. The default
branch's record (a run on the merge base itself, :class:`BaseRecord`) answers without a run, and
the store's history of other runs can name a still-failing test *known flaky*.

Deciding is :func:`attribute`, a plain function; :func:`run_on_base` is the one step.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import structlog

from bot.core.config import TestSettings
from bot.core.models import CheckStatus, FailureCause, TestCaseResult, TestOutcome, TestsResult
from runner import gitdiff
from runner.backends.base import SCRATCH_DIR, Runner, Step, StepResult
from runner.checks.failure_text import same_error
from runner.checks.junit import JUnitError, parse_junit
from runner.checks.testexec import TestRunError, run_ids, tests_step

log = structlog.get_logger(__name__)

FAILING = (TestOutcome.FAILED, TestOutcome.ERROR)
RECORD_JUNIT = f"{SCRATCH_DIR}/junit-record.xml"  # the default branch's run: which tests fail there
BASE_JUNIT = f"{SCRATCH_DIR}/junit-base.xml"  # relative to the base's checkout, where pytest runs
MAX_ON_BASE = 500  # more failures than this: a broken head, the first ones are measured
_IMPORT_ERROR = re.compile(r"\b(ModuleNotFoundError|ImportError)\b")


class TestHistory(Protocol):
    """What the service's store knows of other runs of this repository (None in a local check)."""

    async def flaky_elsewhere(self, nodeids: list[str]) -> dict[str, list[str]]:
        """Node id → links to runs of other changes, or the default branch, where it was flaky."""
        ...

    async def failing_at(self, sha: str) -> dict[str, str] | None:
        """The default branch's record of ``sha``: failing node id → error; None: no record."""
        ...

    async def recently_failed(self) -> set[str]:
        """The tests that failed in this pull request's previous run (they are run first)."""
        ...


@dataclass
class BaseOutcomes:
    """What the base said of the head's failing tests: node id → its result there."""

    results: dict[str, TestCaseResult] = field(default_factory=dict)
    absent: set[str] = field(default_factory=set)  # not in the base's tree: added by the change
    moved: set[str] = field(default_factory=set)  # results of the test where it was on the base
    note: str = ""  # why some were not run on the base


def attribute(
    results: list[TestCaseResult],
    base: BaseOutcomes | None,
    seen_failing: Mapping[str, list[str]] | None = None,
) -> list[TestCaseResult]:
    """Each failing result with its cause; the others as they are.

    ``base``: None when there was no base to run on (the failures stay unattributed, which counts
    as new). ``seen_failing``: node id → links to other runs where it failed and passed elsewhere.
    """
    seen = seen_failing or {}
    out = []
    for r in results:
        if r.outcome not in FAILING or (base is None and not seen.get(r.nodeid)):
            out.append(r)
            continue
        base = base or BaseOutcomes()
        on_base = base.results.get(r.nodeid)
        same = on_base is not None and same_error(r.message, on_base.message)
        # A moved test is taken for its base counterpart only when it fails there the same way.
        differs = on_base is not None and not _cannot_import(on_base.message) and r.nodeid not in base.moved
        if on_base is not None and on_base.outcome in FAILING and (same or differs):
            cause = FailureCause.ON_BASE if same else FailureCause.ON_BASE_DIFFERENTLY
            out.append(r.model_copy(update={"cause": cause, "base_message": on_base.message}))
        elif r.nodeid not in base.absent and seen.get(r.nodeid):
            out.append(
                r.model_copy(update={"cause": FailureCause.KNOWN_FLAKY, "seen_failing": seen[r.nodeid]})
            )
        else:
            out.append(r.model_copy(update={"cause": FailureCause.NEW}))
    return out


def _cannot_import(message: str) -> bool:
    """Whether the base's error is that something did not import: on the base's tree that is often
    the run's own doing (no compiled extension there, only the head's build), so it says nothing of
    the test unless the head fails the same way."""
    return _IMPORT_ERROR.search(message) is not None


def base_step(
    nodeids: list[str],
    settings: TestSettings,
    base_root: str,
    timeout_s: float,
    network: bool,
    env: dict[str, str],
) -> Step:
    """The head's test step pointed at the base's checkout: pytest runs there, the base's package
    first on the path (a flat layout's, or ``src/``'s), its report collected from there."""
    step = tests_step(nodeids, settings, BASE_JUNIT, timeout_s, network, _base_env(env))
    return step.model_copy(
        update={
            "name": "tests-on-base",
            "workdir": base_root,
            "argv": [*step.argv[: -len(nodeids)], "--rootdir=.", *nodeids] if nodeids else step.argv,
            "inject": {f"{base_root}/{path}": text for path, text in step.inject.items()},
            "collect": [f"{base_root}/{path}" for path in step.collect],
        }
    )


def _base_env(env: dict[str, str]) -> dict[str, str]:
    paths = [".", "src"] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])
    return {**env, "PYTHONPATH": ":".join(paths)}


async def run_on_base(
    runner: Runner,
    workspace: Path,
    base_sha: str,
    base_root: str,
    failing: list[str],
    settings: TestSettings,
    *,
    timeout_s: float,
    network: bool,
    env: dict[str, str],
    moved: Mapping[str, str] | None = None,
) -> BaseOutcomes:
    """The failing tests' results on the merge base, each run there by its base node id (``moved``:
    head id → base id, for the tests the change moved), kept under its head id. A test whose file
    the base lacks is absent; a run that produced no results says so in ``note`` (its tests stay
    unattributed: new)."""
    where = {n: (moved or {}).get(n, n) for n in failing}
    files = gitdiff.tree_entries(workspace, base_sha, sorted({where[n].split("::")[0] for n in failing}))
    present = [
        n
        for n in failing
        if (e := files.get(where[n].split("::")[0])) is not None and e.refusal(None) is None
    ]
    outcome = BaseOutcomes(
        absent={n for n in failing if where[n].split("::")[0] not in files}, moved=set(moved or {})
    )
    chosen = present[:MAX_ON_BASE]
    if len(present) > len(chosen):
        outcome.note = f"only the first {MAX_ON_BASE:,} failing tests were run on the merge base"
    if not chosen:
        return outcome
    root = base_root

    on_base = list(dict.fromkeys(where[n] for n in chosen))

    def step_for(ids: list[str] | None, junit: str) -> Step:
        return base_step(ids or on_base, settings, root, timeout_s, network, env)

    try:
        cases = await run_ids(runner, workspace, step_for, on_base, f"{root}/{BASE_JUNIT}")
    except TestRunError as exc:
        log.info("the failing tests did not run on the merge base", error=exc.message[:200])
        outcome.note = (
            f"the failing tests could not be run on the merge base: {exc.message.splitlines()[0][:200]}"
        )
        return outcome
    ran = {case.nodeid: case for case in cases or []}
    for n in chosen:
        if (case := ran.get(where[n])) is not None:
            outcome.results[n] = TestCaseResult(
                nodeid=case.nodeid, outcome=case.outcome, message=case.message
            )
    return outcome


def from_record(
    record: Mapping[str, str], failing: list[str], moved: Mapping[str, str] | None = None
) -> BaseOutcomes:
    """The default branch's record of the merge base, for the failing tests it saw fail there
    (a moved test by its base node id)."""
    where = {n: (moved or {}).get(n, n) for n in failing}
    return BaseOutcomes(
        results={
            n: TestCaseResult(nodeid=where[n], outcome=TestOutcome.FAILED, message=record[where[n]])
            for n in failing
            if where[n] in record
        },
        moved=set(moved or {}),
    )


def merged(first: BaseOutcomes, second: BaseOutcomes) -> BaseOutcomes:
    return BaseOutcomes(
        results={**second.results, **first.results},
        absent=first.absent | second.absent,
        moved=first.moved | second.moved,
        note="; ".join(n for n in (first.note, second.note) if n),
    )


def recording(step: Step) -> Step:
    """The default branch's coverage step, also writing which tests failed (a JUnit report)."""
    return step.model_copy(
        update={
            "argv": [*step.argv, f"--junitxml={RECORD_JUNIT}", "-o", "junit_family=xunit1"],
            "collect": [*step.collect, RECORD_JUNIT],
        }
    )


def recorded(result: StepResult) -> TestsResult | None:
    """The tests that failed in the default branch's run, as its record; None: no readable report."""
    if result.refusal(RECORD_JUNIT, "the JUnit report") or result.collected.get(RECORD_JUNIT) is None:
        return None
    try:
        cases = parse_junit(result.collected[RECORD_JUNIT])
    except JUnitError:
        return None
    failing = [
        TestCaseResult(nodeid=c.nodeid, outcome=c.outcome, message=c.message)
        for c in cases
        if c.outcome in FAILING
    ]
    return TestsResult(
        status=CheckStatus.FAILED if failing else CheckStatus.PASSED, results=failing, selected=len(cases)
    )
