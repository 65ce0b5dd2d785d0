"""A run's results as check runs: the prologue every check shares, then each check's own output.

The prologue (stopped, still running, never ran, not configured, could not run) is written once,
in :func:`_check_run`; only a check with a result of its own reaches its renderer.

Longer than most modules: each check's renderer is short; they share the prologue above.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from bot.core import limits
from bot.core.kinds import CHECK_KINDS, COMMAND, CheckKind
from bot.core.models import (
    CheckStatus,
    DocstringResult,
    HookStatus,
    ParityReport,
    PrecommitResult,
    RunReport,
    RunState,
    TestCaseResult,
    TestOutcome,
    TestsResult,
)
from bot.core.verdict import failing_tests, fails_the_change, flaky_tests, pre_existing_failures
from bot.render import markdown as md
from bot.render.annotations import (
    annotation,
    capped,
    early_test_annotation,
    hook_annotations,
    test_annotation,
)
from bot.render.check_runs import (
    CheckRunOutput,
    CheckRunStatus,
    Conclusion,
    check_run_name,
    in_progress_title,
)
from bot.render.failure_groups import detail, grouped_lines, so_far
from bot.render.fit import fit_blocks
from bot.render.performance import result_outcome, result_section
from bot.render.phrases import (
    about_line,
    capitalised,
    counted,
    failure_name_line,
    finding_line,
    hook_label,
    one_line,
    parity_compared,
    parity_differences,
    parity_table,
    selection_summary,
    sorted_findings,
    test_counts,
    tests_notes,
    tests_ran,
)


def render_check_runs(report: RunReport) -> list[CheckRunOutput]:
    """One output per check, in :data:`CHECK_KINDS` order.

    A check with a result is ``completed`` even while the run goes on, so the executor can
    complete it early; one without a result is ``in_progress`` while the run runs. A cancelled run
    completes every check as ``cancelled``, whatever finished before.
    """
    return [_check_run(report, kind) for kind in CHECK_KINDS]


def render_performance_check(report: RunReport) -> CheckRunOutput | None:
    """The ``paritybot / performance`` check run, completed, when the run compared benchmarks."""
    result = report.performance
    if result is None or report.state == RunState.CANCELLED:
        return None
    decided = result_outcome(result)
    return _check_output(
        report,
        CheckKind.PERFORMANCE,
        _Outcome("completed", decided.conclusion, decided.title),
        _run_header(report) + "\n\n" + result_section(result),
    )


def render_coverage_map_check(report: RunReport) -> CheckRunOutput:
    """The ``paritybot / coverage map`` check run of a default-branch run: whether the commit's
    per-test coverage map was recorded (how many tests, how many files) or why not."""
    health = report.coverage_map
    if report.state == RunState.CANCELLED:
        outcome = _Outcome("completed", "cancelled", "Cancelled: the run was stopped")
    elif report.error or report.state != RunState.SUCCEEDED:
        why = (report.error or report.state.value).strip().splitlines()[0]
        outcome = _Outcome("completed", "failure", f"Not recorded: {why}")
    elif health is None:
        outcome = _Outcome(
            "completed", "neutral", "Not recorded: tests.use_coverage_map is off in the config"
        )
    else:
        outcome = _Outcome(
            "completed", "success", f"{counted(health.tests_ran, 'test')}, {counted(health.files, 'file')}"
        )
    summary = [_run_header(report)]
    if health is not None:
        summary.append(md.prose(capitalised(health.describe())) + ".")
        if health.holes and not report.error:
            holes = ", ".join(md.code(h) for h in health.holes[:10])
            summary.append(
                f"The map knows nothing of {holes}: selections use the static signals for the tests there."
            )
    if report.error:
        summary.append(md.fence(limits.truncate(report.error, limits.COMMENT_RUN_ERROR_CHARS), "text"))
    else:
        summary.append(
            "Pull requests based on this commit, or on a later one, select their tests with this map."
        )
    return _check_output(report, CheckKind.COVERAGE_MAP, outcome, "\n\n".join(summary))


def _check_run(report: RunReport, kind: CheckKind) -> CheckRunOutput:
    """The prologue every check shares, then the check's own renderer when it has a result to show."""
    result = _result_of(report, kind)
    outcome = _parity_outcome(report) if kind == CheckKind.PARITY else _common_outcome(report, kind, result)
    # Tests that broke or were stopped part-way still show what had finished.
    partial = kind == CheckKind.TESTS and report.tests is not None and bool(report.tests.results)
    if outcome is not None and not partial:
        return _plain_output(report, kind, outcome, result)
    if kind == CheckKind.PRECOMMIT and report.precommit is not None:
        return _precommit_run(report, report.precommit)
    if kind == CheckKind.DOCSTRINGS and report.docstrings is not None:
        return _docstrings_run(report, report.docstrings)
    if kind == CheckKind.TESTS and report.tests is not None:
        return _tests_run(report, report.tests, outcome)
    assert report.parity is not None  # _parity_outcome answered for every other case
    return _parity_run(report, report.parity)


def _result_of(report: RunReport, kind: CheckKind) -> PrecommitResult | DocstringResult | TestsResult | None:
    return {
        CheckKind.PRECOMMIT: report.precommit,
        CheckKind.DOCSTRINGS: report.docstrings,
        CheckKind.TESTS: report.tests,
        CheckKind.PARITY: None,  # parity has no status of its own: _parity_outcome decides
    }[kind]


CHECK_LIMIT = limits.CHECK_TEXT_MAX - limits.SAFETY_MARGIN


@dataclass(frozen=True)
class _Outcome:
    status: CheckRunStatus
    conclusion: Conclusion | None
    title: str


# Neutral, never success: nothing was checked. A required check that is neutral lets the pull
# request merge, as an empty change should.
_NOTHING_TO_CHECK = _Outcome("completed", "neutral", "Nothing to check")


def _common_outcome(report: RunReport, kind: CheckKind, result: Any) -> _Outcome | None:
    """The outcome shared by every check: stopped, still running, never ran, not configured."""
    if report.state == RunState.CANCELLED:
        return _Outcome("completed", "cancelled", "Cancelled: the run was stopped")
    if report.nothing_to_check:
        return _NOTHING_TO_CHECK
    if result is None:
        if report.state in (RunState.QUEUED, RunState.RUNNING) and not report.error:
            return _Outcome("in_progress", None, in_progress_title(kind.value))
        if report.error:
            # A required check must not pass when the run broke before it.
            why = one_line(report.error)
            return _Outcome("completed", "failure", f"Did not run: {why}")
        return _Outcome("completed", "neutral", "Did not run")
    status = getattr(result, "status", None)
    message = getattr(result, "message", "")
    if status == CheckStatus.NOT_CONFIGURED:
        return _Outcome("completed", "neutral", one_line(message) or "Not configured")
    if status == CheckStatus.DISABLED:
        return _Outcome("completed", "skipped", "Disabled in the config")
    if status == CheckStatus.CANCELLED:
        return _Outcome("completed", "cancelled", "Cancelled")
    if status == CheckStatus.ERROR:
        # The runner words a timeout "timed out" (StepResult.describe_failure); people asked to tell
        # a timeout from a failure, and GitHub has a conclusion for it.
        timed_out = re.search(r"\btimed out\b", message or "", re.IGNORECASE) is not None
        return _Outcome(
            "completed", "timed_out" if timed_out else "failure", one_line(message) or "Could not run"
        )
    return None


def _check_output(
    report: RunReport,
    kind: CheckKind,
    outcome: _Outcome,
    summary: str,
    text: str = "",
    annotations: list[dict[str, Any]] | None = None,
) -> CheckRunOutput:
    return CheckRunOutput(
        kind=kind,
        name=check_run_name(kind, report.environment),
        status=outcome.status,
        conclusion=outcome.conclusion,
        title=capitalised(one_line(md.plain(outcome.title), limits.CHECK_TITLE_MAX)),
        summary=limits.truncate(summary, CHECK_LIMIT),
        text=limits.truncate(text, CHECK_LIMIT),
        annotations=annotations or [],
    )


def _run_header(report: RunReport) -> str:
    line = about_line(report, None).removeprefix("<sub>").removesuffix("</sub>")
    return line[0].upper() + line[1:]


def _plain_output(report: RunReport, kind: CheckKind, outcome: _Outcome, result: Any) -> CheckRunOutput:
    summary = _run_header(report)
    if report.nothing_to_check:
        summary += "\n\n" + md.prose(capitalised(report.nothing_to_check)) + "."
    if report.error and result is None:
        summary += "\n\n" + md.fence(limits.truncate(report.error, limits.COMMENT_RUN_ERROR_CHARS), "text")
    message = getattr(result, "message", "")
    if message:
        summary += "\n\n" + md.prose(message)
    output = getattr(result, "output", "")
    text = md.fence(limits.truncate(output, limits.CHECK_HOOK_OUTPUT_CHARS), "text") if output else ""
    return _check_output(report, kind, outcome, summary, text)


def _precommit_run(report: RunReport, pc: PrecommitResult) -> CheckRunOutput:
    failed = [h for h in pc.hooks if h.status == HookStatus.FAILED]
    ran = [h for h in pc.hooks if h.status != HookStatus.SKIPPED]
    if pc.status == CheckStatus.FAILED:
        names = ", ".join(h.id for h in failed)
        title = f"{len(failed)} of {counted(len(ran), 'hook')} failed" + (f": {names}" if names else "")
        outcome = _Outcome("completed", "failure", title)
    else:
        outcome = _Outcome("completed", "success", f"All {counted(len(ran), 'hook')} passed")
    rows = ["| Hook | Result |", "|---|---|"]
    icons = {HookStatus.PASSED: "✅ passed", HookStatus.FAILED: "❌ failed", HookStatus.SKIPPED: "➖ skipped"}
    for h in pc.hooks:
        changed = " (changed files)" if h.files_modified else ""
        label = hook_label(h, in_table=True)
        rows.append(f"| {label} | {icons[h.status]}{changed} |")
    summary = [_run_header(report), "\n".join(rows) if pc.hooks else md.prose(pc.message)]
    if pc.fix_command and failed:
        summary.append("Fix it locally, then commit and push:\n" + md.fence(pc.fix_command, "sh"))
    text = []
    for h in failed:
        if h.output.strip():
            out = limits.truncate(h.output.strip(), limits.CHECK_HOOK_OUTPUT_CHARS)
            text.append(f"### {hook_label(h)}\n\n" + md.fence(out, "text"))
    if pc.diff.strip():
        text.append("### The fixes pre-commit made\n\n" + md.fence(pc.diff.rstrip("\n"), "diff"))
    annotations = [a for h in failed for a in hook_annotations(h.output, h.id)]
    return _check_output(
        report,
        CheckKind.PRECOMMIT,
        outcome,
        "\n\n".join(summary),
        fit_blocks(text, "hook outputs and diff", "the runner's log", limit=CHECK_LIMIT),
        capped(annotations),
    )


def _docstrings_run(report: RunReport, d: DocstringResult) -> CheckRunOutput:
    findings = sorted_findings(d.findings)
    checked = f"{counted(d.checked, 'changed public object')}"
    if findings:
        conclusion: Conclusion = "failure" if fails_the_change(d) else "neutral"
        outcome = _Outcome("completed", conclusion, f"{counted(len(findings), 'finding')} in {checked}")
    elif d.status == CheckStatus.FAILED:
        outcome = _Outcome("completed", "failure", one_line(d.message) or "Failed")
    elif d.checked == 0:
        outcome = _Outcome("completed", "neutral", "No changed public objects to check")
    else:
        outcome = _Outcome("completed", "success", f"{checked} checked, all documented")
    header = _run_header(report)
    if d.style:
        header += f"\n\nDocstring style: {md.text(d.style)}."
    lines = [finding_line(f) for f in findings]
    summary = (
        fit_blocks([header + "\n", *lines], "findings", "the annotations", limit=CHECK_LIMIT, sep="\n")
        if findings
        else header
    )
    annotations = [
        annotation(f.path, f.line, f.end_line or f.line, f.level.value, f.message, f.title) for f in findings
    ]
    text = ""
    if len(annotations) > limits.ANNOTATIONS_PER_RUN_MAX:
        text = f"Only the first {limits.ANNOTATIONS_PER_RUN_MAX:,} findings are annotated on the files."
    if d.message and findings:
        summary += "\n\n" + md.prose(d.message)
    return _check_output(report, CheckKind.DOCSTRINGS, outcome, summary, text, capped(annotations))


def _tests_run(report: RunReport, tests: TestsResult, outcome: _Outcome | None) -> CheckRunOutput:
    failing = failing_tests(tests)
    flaky = flaky_tests(tests)
    counts = test_counts(tests) if tests_ran(tests) else "no test results"
    if tests.in_progress is not None:
        outcome = _Outcome("in_progress", None, so_far(tests))  # replaced by the final result
    elif outcome is None:
        if failing or tests.status == CheckStatus.FAILED:
            outcome = _Outcome("completed", "failure", counts)
        elif pre_existing_failures(tests):
            outcome = _Outcome("completed", "neutral", f"No new failure ({counts})")
        elif not tests.results:
            outcome = _Outcome("completed", "neutral", "No tests selected")
        else:
            outcome = _Outcome("completed", "success", counts)
    else:
        # It broke or was stopped part-way: keep its conclusion, say what had finished.
        outcome = _Outcome(outcome.status, outcome.conclusion, f"{outcome.title} ({counts})")
    summary = [
        _run_header(report),
        "**" + selection_summary(tests.selection, tests).removeprefix("🎯 ") + "**",
    ]
    summary.extend(tests_notes(tests))
    if tests.message:
        summary.append(md.prose(tests.message))
    if failing:
        summary.append("Failing:\n" + _name_list(failing, headlines=True))
    summary.extend(grouped_lines(tests))  # new first, then the failures this change did not cause
    if flaky:
        summary.append("Flaky (failed, then passed on a rerun):\n" + _name_list(flaky))
    if failing:
        summary.append(f"Rerun only the failures with `{COMMAND} failed`.")
    pre = pre_existing_failures(tests)
    blocks = (
        [_failure_detail(r) for r in failing] + [detail(r) for r in pre] + [_failure_detail(r) for r in flaky]
    )
    if tests.status == CheckStatus.ERROR and tests.output.strip():
        tail = "\n".join(tests.output.strip().splitlines()[-60:])
        blocks.insert(
            0, "### Last lines of the output\n\n" + md.fence(limits.truncate(tail, limits.CHECK_ERROR_CHARS))
        )
    if tests.in_progress is None:
        annotations = [a for r in [*failing, *pre, *flaky] if (a := test_annotation(r)) is not None]
    else:
        # The first failures at once, each sent once (the reporter keeps what GitHub was sent).
        early = failing[: limits.EARLY_ANNOTATIONS_MAX]
        annotations = [a for r in early if (a := early_test_annotation(r)) is not None]
    return _check_output(
        report,
        CheckKind.TESTS,
        outcome,
        fit_blocks(summary, "this summary", "the details below", limit=CHECK_LIMIT),
        fit_blocks(blocks, "test details", "the annotations on the test files", limit=CHECK_LIMIT),
        capped(annotations),
    )


def _name_list(results: list[TestCaseResult], *, headlines: bool = False) -> str:
    shown = results[: limits.CHECK_LISTED_TESTS]
    lines = [failure_name_line(r) if headlines else f"- {md.code(r.nodeid)}" for r in shown]
    if len(results) > len(shown):
        lines.append(f"- …and {len(results) - len(shown):,} more, annotated on their files")
    return "\n".join(lines)


def _failure_detail(r: TestCaseResult) -> str:
    word = {TestOutcome.FAILED: "failed", TestOutcome.ERROR: "error", TestOutcome.FLAKY: "flaky"}[r.outcome]
    lines = [f"### {md.code(r.nodeid)}", f"{word} · {counted(r.attempts, 'attempt')} · {r.duration_s:.1f} s"]
    if r.message.strip():
        lines.append(md.fence(limits.truncate(r.message.strip("\n"), limits.CHECK_ERROR_CHARS), "text"))
    if r.repro:
        lines.append(
            "Reproduce:\n" + md.fence(limits.truncate("\n".join(r.repro), limits.COMMENT_REPRO_CHARS), "sh")
        )
    return "\n\n".join(lines)


def _parity_outcome(report: RunReport) -> _Outcome | None:
    """Parity's prologue. Parity is information, never a failure: a contributor's other driver must
    not block a merge, and a probe that saw nothing is the machine's problem, not the change's."""
    parity = report.parity
    if report.state == RunState.CANCELLED:
        return _Outcome("completed", "cancelled", "Cancelled: the run was stopped")
    if report.nothing_to_check:
        return _NOTHING_TO_CHECK
    if parity is None or not parity.rows:
        if parity is None and report.state in (RunState.QUEUED, RunState.RUNNING) and not report.error:
            return _Outcome("in_progress", None, in_progress_title("the environment probe"))
        return _Outcome("completed", "neutral", "No environment facts to compare")
    return None


def _parity_run(report: RunReport, parity: ParityReport) -> CheckRunOutput:
    differs = parity_differences(parity)
    if differs:
        labels = ", ".join(r.label for r in differs)
        outcome = _Outcome("completed", "neutral", f"{counted(len(differs), 'difference')}: {labels}")
    elif parity_compared(parity):
        outcome = _Outcome(
            "completed", "success", f"No difference in {counted(parity_compared(parity), 'field')}"
        )
    else:
        outcome = _Outcome("completed", "neutral", "Nothing to compare with: no CI reference")
    summary = [_run_header(report), parity_table(parity)]
    if parity.advice:
        summary.append("\n".join(f"- {md.prose(a.text)}" for a in parity.advice))
    if not parity.contributor_pasted and parity.uses_torch:
        summary.append(
            "No environment in the PR description: paste the output of `python -m torch.utils.collect_env` "
            "there to compare your machine too."
        )
    text = _probe_packages(report)
    return _check_output(report, CheckKind.PARITY, outcome, "\n\n".join(summary), text)


def _probe_packages(report: RunReport) -> str:
    """Every package the probe saw in this run, for comparisons the table does not make."""
    if report.probe is None or not report.probe.packages:
        return ""
    rows = ["### Packages in this run\n\n| Package | Version in this run |\n|---|---|"]
    rows += [f"| {md.cell(name)} | {md.cell(v)} |" for name, v in sorted(report.probe.packages.items())]
    return fit_blocks(rows, "packages", "the probe's output", limit=CHECK_LIMIT, sep="\n")
