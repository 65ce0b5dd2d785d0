"""What a finished run means for the change: pass, fail, flaky only, broken or cancelled.

One decision, used wherever a run is judged: the summary's heading, whether a new comment notifies
people, the reaction on a ``/retest-gpu`` comment and the exit code of ``paritybot check``.
"""

from __future__ import annotations

from enum import StrEnum

from bot.core.models import (
    CheckStatus,
    DocstringResult,
    FailureCause,
    Level,
    PrecommitResult,
    RunReport,
    RunState,
    TestCaseResult,
    TestOutcome,
    TestsResult,
)


class Verdict(StrEnum):
    """The outcome of a finished run, as far as notifications care."""

    PASS = "pass"
    FAIL = "fail"
    FLAKY_ONLY = "flaky-only"
    NOTHING_TO_CHECK = "nothing-to-check"  # an empty change: neither a pass nor a failure
    ERROR = "error"  # the run itself broke (image missing, timeout): no verdict on the change
    CANCELLED = "cancelled"


FAILING = (TestOutcome.FAILED, TestOutcome.ERROR)


def verdict(report: RunReport) -> Verdict:
    """Cancelled beats everything (a stopped run says nothing), then an empty change, then any
    failure, then a broken run."""
    if report.state == RunState.CANCELLED:
        return Verdict.CANCELLED
    if report.nothing_to_check:
        return Verdict.NOTHING_TO_CHECK
    checks = (report.precommit, report.docstrings, report.tests)
    if any(c is not None and fails_the_change(c) for c in checks):
        return Verdict.FAIL
    if report.error or any(
        c is not None and c.status in (CheckStatus.ERROR, CheckStatus.CANCELLED) for c in checks
    ):
        return Verdict.ERROR
    if report.tests is not None and report.tests.count(TestOutcome.FLAKY):
        return Verdict.FLAKY_ONLY
    return Verdict.PASS


def fails_the_change(check: PrecommitResult | DocstringResult | TestsResult) -> bool:
    """Whether a check's result fails the change (warnings alone do not)."""
    if isinstance(check, TestsResult) and (
        failing_tests(check) or (check.pre_existing_fails and pre_existing_failures(check))
    ):
        return True
    if check.status != CheckStatus.FAILED:
        return False
    if isinstance(check, DocstringResult) and check.findings:
        # Docstring findings are advice unless the checker raised one to failure level.
        return any(f.level == Level.FAILURE for f in check.findings)
    return True


# Failures measured as not this change's: they fail it only with ``tests.pre_existing: failure``.
NOT_CAUSED = (FailureCause.ON_BASE, FailureCause.ON_BASE_DIFFERENTLY, FailureCause.KNOWN_FLAKY)


def failing_tests(tests: TestsResult) -> list[TestCaseResult]:
    """The failures this change caused, or that could not be attributed (no base to run them on)."""
    return sorted(
        (r for r in tests.results if r.outcome in FAILING and r.cause not in NOT_CAUSED),
        key=lambda r: r.nodeid,
    )


def pre_existing_failures(tests: TestsResult) -> list[TestCaseResult]:
    """Failures measured as not caused by this change: already failing on the base, or known flaky."""
    return sorted(
        (r for r in tests.results if r.outcome in FAILING and r.cause in NOT_CAUSED),
        key=lambda r: (NOT_CAUSED.index(r.cause) if r.cause else 0, r.nodeid),
    )


def flaky_tests(tests: TestsResult) -> list[TestCaseResult]:
    return sorted((r for r in tests.results if r.outcome == TestOutcome.FLAKY), key=lambda r: r.nodeid)
