"""The sections of the sticky comment below its head, most important first.

Each is a :class:`~bot.render.fit.Part` with a priority, so when the comment is too long the test
selection goes before the pre-commit failure, and the failing tests go last of all.
"""

from __future__ import annotations

from bot.core import limits
from bot.core.kinds import COMMAND
from bot.core.models import (
    AdviceKind,
    CheckStatus,
    DocstringResult,
    HookStatus,
    Level,
    ParityReport,
    PrecommitResult,
    RfcReport,
    RunReport,
    Selection,
    TestCaseResult,
    TestOutcome,
    TestsResult,
)
from bot.core.verdict import failing_tests, flaky_tests
from bot.render import markdown as md
from bot.render.failure_groups import pre_existing_part
from bot.render.fit import Part, text_part
from bot.render.performance import result_section
from bot.render.phrases import (
    counted,
    details,
    error_headline,
    failure_name_line,
    finding_line,
    first_lines,
    hook_label,
    indented,
    one_line,
    parity_compared,
    parity_differences,
    parity_table,
    selection_summary,
    sorted_findings,
)


def comment_parts(report: RunReport, where: str, *, local: bool = False) -> list[Part]:
    """The comment's sections; ``local``: for `paritybot check`, which no comment reruns."""
    parts: list[Part] = []
    tests = report.tests
    if tests is not None:
        failing = failing_tests(tests)
        if failing:
            parts.append(_failures_part(failing, where, local))
        if (pre := pre_existing_part(tests, where)) is not None:
            parts.append(pre)  # after the new failures: new first
        if tests.status in (CheckStatus.ERROR, CheckStatus.FAILED) and not failing and pre is None:
            parts.append(text_part("the tests' error", 85, _tests_error_section(tests)))
    if report.precommit is not None and report.precommit.status in (CheckStatus.FAILED, CheckStatus.ERROR):
        parts.append(text_part("pre-commit", 60, _precommit_section(report.precommit)))
    if tests is not None and flaky_tests(tests):
        parts.append(_flaky_part(flaky_tests(tests), where))
    if report.docstrings is not None and (
        report.docstrings.findings or report.docstrings.status in (CheckStatus.FAILED, CheckStatus.ERROR)
    ):
        parts.append(_findings_part(report.docstrings, where))
    if report.performance is not None:
        parts.append(text_part("performance", 50, result_section(report.performance)))
    if report.rfc is not None and report.rfc.triggered:
        parts.append(text_part("RFC checklist", 40, _rfc_section(report.rfc)))
    if report.parity is not None and report.parity.rows:
        parts.append(text_part("environment parity", 30, _parity_section(report.parity)))
    if tests is not None and (tests.selection.tests or tests.selection.whole_suite or _said(tests)):
        parts.append(_selection_part(tests.selection, where, tests, local))
    return parts


def _failures_part(failing: list[TestCaseResult], where: str, local: bool = False) -> Part:
    cap = min(len(failing), limits.COMMENT_DETAILED_FAILURES + limits.COMMENT_LISTED_FAILURES)

    def render(k: int | None) -> str:
        shown = cap if k is None else min(k, cap)
        detailed = failing[: min(shown, limits.COMMENT_DETAILED_FAILURES)]
        listed = failing[len(detailed) : shown]
        blocks = [_failure_entry(r) for r in detailed]
        if listed:
            blocks.append(
                f"{counted(len(listed), 'more failing test')}, by name:\n\n"
                + "\n".join(failure_name_line(r) for r in listed)
            )
        if len(failing) > shown:
            blocks.append(f"…and {counted(len(failing) - shown, 'more failing test')}: see {where}.")
        if not local:
            blocks.append(f"Rerun only these with `{COMMAND} failed`.")
        summary = f"❌ <b>{failing_summary(failing)}</b>"
        return details(summary, "\n\n".join(blocks), open_=len(failing) <= 3)

    return Part(
        label="failing tests", priority=100, render=render, entries=cap, total=len(failing), droppable=False
    )


def failing_summary(failing: list[TestCaseResult]) -> str:
    """``2 failing tests · 1 collection error``: a module that did not collect is no test."""
    errors = sum(1 for r in failing if r.collection_error)
    tests = len(failing) - errors
    parts = [counted(tests, "failing test")] if tests else []
    return " · ".join([*parts, *([counted(errors, "collection error")] if errors else [])])


def _failure_entry(result: TestCaseResult) -> str:
    what = (
        "did not collect (collection error: none of its tests ran)"
        if result.collection_error
        else "failed"
        if result.outcome == TestOutcome.FAILED
        else "errored (setup or teardown)"
    )
    if result.attempts > 1:
        what += f" on all {result.attempts} attempts"
    took = f", {result.duration_s:.1f} s" if result.duration_s else ""
    lines = [f"**{md.code(result.nodeid)}** {what}{took}"]
    if result.message.strip():
        lines.append(
            md.fence(first_lines(result.message, limits.COMMENT_ERROR_LINES, limits.COMMENT_ERROR_CHARS))
        )
    if result.repro:
        repro = limits.truncate("\n".join(result.repro), limits.COMMENT_REPRO_CHARS)
        lines.append("Reproduce:\n" + md.fence(repro, "sh"))
    return "\n".join(lines)


def _tests_error_section(tests: TestsResult) -> str:
    icon, verb = ("❗", "could not finish") if tests.status == CheckStatus.ERROR else ("❌", "failed")
    body = md.prose(tests.message) if tests.message else "No failing test was reported."
    if tests.output.strip():
        tail = tests.output.strip().splitlines()[-limits.COMMENT_ERROR_LINES :]
        body += "\n\nLast lines of the output:\n" + md.fence(
            limits.truncate("\n".join(tail), limits.COMMENT_ERROR_CHARS), "text"
        )
    return details(f"{icon} <b>The tests {verb}</b>", body, open_=True)


def _precommit_section(pc: PrecommitResult) -> str:
    failed = [h for h in pc.hooks if h.status == HookStatus.FAILED]
    if pc.status == CheckStatus.ERROR:
        summary = "❗ <b>pre-commit could not run</b>"
        body = md.prose(pc.message) if pc.message else "pre-commit stopped before reporting its hooks."
        if pc.output.strip():
            body += "\n\n" + md.fence(first_lines(pc.output, 40, limits.COMMENT_HOOK_OUTPUT_CHARS), "text")
        return details(summary, body)
    names = ", ".join(md.html_text(h.id) for h in failed)
    summary = f"❌ <b>pre-commit: {counted(len(failed), 'hook')} failed</b>" + (
        f" ({names})" if names else ""
    )
    blocks = []
    if pc.fix_command:
        blocks.append("Fix it locally, then commit and push:\n" + md.fence(pc.fix_command, "sh"))
    if failed:
        listed = []
        for number, hook in enumerate(failed):
            note = " — changed files" if hook.files_modified else ""
            item = f"- {hook_label(hook)}{note}"
            if hook.output.strip() and number < limits.COMMENT_HOOK_OUTPUTS:
                out = first_lines(hook.output, 15, limits.COMMENT_HOOK_OUTPUT_CHARS)
                item += "\n\n" + indented(md.fence(out, "text"), "  ")
            listed.append(item)
        blocks.append("\n".join(listed))
    elif pc.message:
        blocks.append(md.prose(pc.message))
    if pc.diff.strip():
        diff = limits.truncate(pc.diff.rstrip("\n"), limits.COMMENT_DIFF_CHARS, what="characters of the diff")
        lines = pc.diff.count("\n") + 1
        blocks.append(
            details(f"The fixes pre-commit made ({counted(lines, 'line')} of diff)", md.fence(diff, "diff"))
        )
    return details(summary, "\n\n".join(blocks))


def _flaky_part(flaky: list[TestCaseResult], where: str) -> Part:
    cap = min(len(flaky), limits.COMMENT_FLAKY)

    def render(k: int | None) -> str:
        shown = flaky[: cap if k is None else min(k, cap)]
        items = []
        for r in shown:
            first = error_headline(r.message)
            item = f"- {md.code(r.nodeid)} passed on attempt {r.attempts}"
            items.append(item + (f": {md.code(one_line(first, 200))}" if first else ""))
        if len(flaky) > len(shown):
            items.append(f"- …and {counted(len(flaky) - len(shown), 'more')}: see {where}.")
        summary = f"⚠️ <b>{counted(len(flaky), 'flaky test')}</b>: failed, then passed on a rerun"
        return details(summary, "\n".join(items))

    return Part(label="flaky tests", priority=50, render=render, entries=cap, total=len(flaky))


def _findings_part(d: DocstringResult, where: str) -> Part:
    findings = sorted_findings(d.findings)
    cap = min(len(findings), limits.COMMENT_FINDINGS)

    def render(k: int | None) -> str:
        if d.status == CheckStatus.ERROR:
            return details(
                "❗ <b>The docstring check could not run</b>", md.prose(d.message or "no reason given")
            )
        shown = findings[: cap if k is None else min(k, cap)]
        items = [finding_line(f) for f in shown]
        if len(findings) > len(shown):
            items.append(f"- …and {counted(len(findings) - len(shown), 'more')}: see {where}.")
        if not items:
            items.append(md.prose(d.message or "The docstring check failed without findings."))
        icon = "❌" if any(f.level == Level.FAILURE for f in findings) else "⚠️"
        checked = f" in {counted(d.checked, 'changed public object')}" if d.checked else ""
        style = f" ({md.html_text(d.style)} style)" if d.style else ""
        summary = f"{icon} <b>{counted(len(findings), 'docstring finding')}</b>{checked}{style}"
        return details(summary, "\n".join(items))

    return Part(label="docstring findings", priority=45, render=render, entries=cap, total=len(findings))


def _parity_summary(parity: ParityReport) -> str:
    differs = parity_differences(parity)
    if differs:
        fields = ", ".join(md.html_text(r.label) for r in differs)
        return f"⚠️ <b>Environment parity: {counted(len(differs), 'difference')}</b> ({fields})"
    compared = parity_compared(parity)
    if not compared:
        return "❔ <b>Environment parity</b>: nothing to compare with (no CI reference)"
    return f"✅ <b>Environment parity</b>: no difference in {counted(compared, 'field')} compared"


def _parity_section(parity: ParityReport) -> str:
    blocks = [parity_table(parity)]
    # The paragraph below says how to paste, with more context than the advice line.
    advice = [a for a in parity.advice if a.kind != AdviceKind.PASTE]
    if advice:
        blocks.append("\n".join(f"- {md.prose(a.text)}" for a in advice))
    if not parity.contributor_pasted and parity.uses_torch:
        blocks.append(
            "The **yours** column is empty because the PR description has no environment in it. To "
            "compare your machine too, run `python -m torch.utils.collect_env` and paste its output "
            "into the PR description; the next run picks it up."
        )
    blocks.append("<sub>✅ same · ❌ differs · ❔ not known on one side</sub>")
    return details(_parity_summary(parity), "\n\n".join(blocks))


def _rfc_section(rfc: RfcReport) -> str:
    done = sum(item.done for item in rfc.items)
    if rfc.complete:
        summary = f"✅ <b>RFC checklist: all {counted(len(rfc.items), 'item')} done</b>"
    else:
        summary = f"📝 <b>RFC checklist: {done} of {len(rfc.items)} done</b>"
    blocks = []
    if rfc.reasons:
        blocks.append(
            "This change needs design review because:\n" + "\n".join(f"- {md.prose(r)}" for r in rfc.reasons)
        )
    blocks.append("\n".join(f"- {'☑' if i.done else '☐'} {md.text(i.text)}" for i in rfc.items))
    if rfc.rfc_link:
        blocks.append(f"RFC: {md.url(rfc.rfc_link)}")
    if not rfc.complete:
        todo = "\n".join(f"- [{'x' if i.done else ' '}] {i.text}" for i in rfc.items)
        blocks.append(
            "Items tick themselves off from the PR description. Copy this in, then tick each one as "
            "you address it:\n" + md.fence(todo, "markdown")
        )
    return details(summary, "\n\n".join(blocks))


def _said(tests: TestsResult) -> bool:
    """Whether the selection has something to say beyond its tests (why none, what it dropped)."""
    selection = tests.selection
    return bool(selection.notes or selection.removed or selection.unchanged_behaviour) or (
        not selection.tests and bool(tests.message) and tests.status == CheckStatus.PASSED
    )


def _selection_notes(selection: Selection, why_none: str) -> list[str]:
    blocks = [md.prose(n) for n in selection.notes]
    if selection.removed:
        names = ", ".join(md.code(n) for n in selection.removed[:10]) + (
            " …" if len(selection.removed) > 10 else ""
        )
        blocks.append(f"Not run, renamed or removed by this PR ({len(selection.removed):,}): {names}")
    if not selection.tests and not selection.whole_suite and why_none:
        blocks.append(md.prose(why_none[:1].upper() + why_none[1:]) + ".")
    elif selection.unchanged_behaviour:
        files = ", ".join(md.code(f) for f in selection.unchanged_behaviour[:10])
        blocks.append(
            f"Only comments, docstrings or formatting changed in {files}: no test was selected for them."
        )
    return blocks


def _selection_part(selection: Selection, where: str, tests: TestsResult, local: bool = False) -> Part:
    groups = _selection_groups(selection)
    cap = min(len(groups), limits.COMMENT_SELECTION_REASONS)

    def render(k: int | None) -> str:
        shown = groups[: cap if k is None else min(k, cap)]
        blocks = _selection_notes(selection, tests.message)
        if selection.whole_suite:
            why = "; ".join(md.prose(r) for r in selection.whole_suite_reasons) or "requested"
            blocks.append(f"The whole suite ran: {why}.")
        for reason, nodeids in shown:
            listed = nodeids[: limits.COMMENT_SELECTED_PER_REASON]
            more = len(nodeids) - len(listed)
            lines = [f"**{md.prose(reason)}** ({len(nodeids):,})"]
            lines += [f"- {md.code(n)}" for n in listed]
            if more:
                lines.append(f"- …and {more:,} more")
            blocks.append("\n".join(lines))
        if len(groups) > len(shown):
            blocks.append(f"…and {counted(len(groups) - len(shown), 'more reason')}: see {where}.")
        if selection.budget_dropped:
            dropped = sorted(selection.budget_dropped)
            names = ", ".join(md.code(n) for n in dropped[:10]) + (" …" if len(dropped) > 10 else "")
            blocks.append(
                f"{counted(len(dropped), 'selected test')} did not run because of the `tests.max_tests` "
                f"budget: {names}"
            )
        if not selection.whole_suite and not local:
            blocks.append(f"Run everything with `{COMMAND} all`.")
        return details(selection_summary(selection, tests), "\n\n".join(blocks))

    return Part(label="test selection", priority=20, render=render, entries=cap, total=len(groups))


def _selection_groups(selection: Selection) -> list[tuple[str, list[str]]]:
    """Selected tests grouped by why they were picked; biggest group first, then by name."""
    groups: dict[str, list[str]] = {}
    for test in selection.tests:
        groups.setdefault("; ".join(test.reasons) or "no reason recorded", []).append(test.nodeid)
    return sorted(((r, sorted(ids)) for r, ids in groups.items()), key=lambda g: (-len(g[1]), g[0]))
