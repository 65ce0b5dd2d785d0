"""How both surfaces (the sticky comment and the check runs) say the same things.

Counts, collapsible sections, the line that says where and what ran, a failing test's headline,
a hook's label, a docstring finding, the parity table and the selection's summary: written once,
so the comment and the check runs never describe one run in two ways.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import datetime

from bot.core import limits
from bot.core.models import (
    Finding,
    HookResult,
    ParityReport,
    ParityRow,
    ParityVerdict,
    RunReport,
    Selection,
    TestCaseResult,
    TestOutcome,
    TestsResult,
)
from bot.render import markdown as md


def counted(count: int, singular: str, plural: str | None = None) -> str:
    return f"{count:,} {singular if count == 1 else (plural or singular + 's')}"


def details(summary: str, body: str, *, open_: bool = False) -> str:
    """A collapsible section; ``summary`` is HTML (GitHub does not render Markdown inside it)."""
    return (
        f"<details{' open' if open_ else ''}>\n<summary>{summary}</summary>\n\n{body.strip()}\n\n</details>"
    )


def short_sha(sha: str) -> str:
    return sha[:7]


def short_image(report: RunReport) -> str | None:
    """The image as people recognise it: repository and a 12-digit digest prefix."""
    ref = report.image_ref or report.image
    if not ref:
        return None
    name, sep, digest = ref.partition("@sha256:")
    return f"{name}@sha256:{digest[:12]}" if sep else ref


def duration(report: RunReport) -> str | None:
    if report.started_at is None or report.finished_at is None:
        return None
    return seconds(report.finished_at, report.started_at)


def seconds(end: datetime, start: datetime) -> str:
    total = max(0, int((end - start).total_seconds()))
    minutes, seconds = divmod(total, 60)
    return f"{minutes} min {seconds} s" if minutes else f"{seconds} s"


def first_lines(text: str, lines: int, chars: int) -> str:
    return limits.truncate_lines(text.strip("\n"), lines, chars)


# pytest marks the exception's own lines with "E"; the first one names it.
_PYTEST_E_LINE = re.compile(r"^E\s+(?P<text>\S.*)$", re.MULTILINE)


_EXCEPTION_LINE = re.compile(r"^(?P<text>[\w.]*(?:Error|Exception|Failed|Interrupt|Exit)\b.*)$", re.MULTILINE)


def error_headline(message: str) -> str:
    """The one line that says what went wrong: pytest's first ``E`` line, else an exception line."""
    for pattern in (_PYTEST_E_LINE, _EXCEPTION_LINE):
        m = pattern.search(message)
        if m:
            return m["text"].strip()
    return next((line.strip() for line in message.splitlines() if line.strip()), "")


def capitalised(line: str) -> str:
    """Upper-case the first letter after the leading emoji: a heading reads as a sentence."""
    return re.sub(r"^(\W*)(\w)", lambda m: m[1] + m[2].upper(), line, count=1)


def one_line(text: str, width: int = 120) -> str:
    """``text`` on one line of at most ``width`` characters; a longer one ends after its last whole
    sentence that fits, else its last whole word, never inside a word ("… Could " said nothing)."""
    line = " ".join(text.split())
    if len(line) <= width:
        return line
    head = line[: width - 2]
    end = head.rfind(". ")
    if end >= width // 2:
        return head[: end + 1] + " …"
    space = head.rfind(" ")
    return (head[:space].rstrip(" ,;:") if space >= width // 2 else line[: width - 1]) + "…"


def about_line(report: RunReport, check_run_url: str | None) -> str:
    where = f"as of commit {md.code(short_sha(report.head_sha))}"
    image = short_image(report)
    if report.runner == "host":
        reason = f": {md.prose(report.runner_reason)}" if report.runner_reason else ""
        where += f" on the runner's host (environment {md.code(report.environment)}{reason})"
    elif image is not None:
        where += f" in image {md.code(image)} (environment {md.code(report.environment)})"
    else:
        where += f" (environment {md.code(report.environment)}, no runner started)"
    if report.networked_steps:
        where += f" · network allowed for {md.prose(', '.join(report.networked_steps))}"
    took = duration(report)
    if took:
        where += f" · took {took}"
    if check_run_url:
        where += f" · [details]({check_run_url})"
    return f"<sub>{where}</sub>"


def hook_label(hook: HookResult, *, in_table: bool = False) -> str:
    """The hook's name, and its id (what ``SKIP=`` and the config use) when that differs."""
    label = f"**{md.text(hook.name)}**"
    return label if hook.name == hook.id else f"{label} {md.code(hook.id, in_table=in_table)}"


def indented(text: str, prefix: str) -> str:
    return "\n".join(prefix + line if line else line for line in text.splitlines())


def failure_name_line(result: TestCaseResult) -> str:
    headline = error_headline(result.message)
    return f"- {md.code(result.nodeid)}" + (f": {md.prose(one_line(headline, 160))}" if headline else "")


def sorted_findings(findings: Iterable[Finding]) -> list[Finding]:
    return sorted(findings, key=lambda f: (f.path, f.line, f.title, f.message))


def finding_line(f: Finding) -> str:
    title = f"**{md.text(f.title)}**: " if f.title else ""
    return f"- {md.code(f'{f.path}:{f.line}')} — {title}{md.prose(one_line(f.message, 300))}"


def parity_differences(parity: ParityReport) -> list[ParityRow]:
    return [
        r
        for r in parity.rows
        if r.verdict == ParityVerdict.DIFFERS or r.contributor_verdict == ParityVerdict.DIFFERS
    ]


def parity_icon(row: ParityRow) -> str:
    if ParityVerdict.DIFFERS in (row.verdict, row.contributor_verdict):
        return "❌"
    return "✅" if row.verdict == ParityVerdict.MATCH else "❔"


def parity_compared(parity: ParityReport) -> int:
    """How many fields were compared at all: known to CI and this run, or to this run and you."""
    unknown = ParityVerdict.UNKNOWN
    return sum(1 for r in parity.rows if r.verdict != unknown or r.contributor_verdict != unknown)


def parity_table(parity: ParityReport) -> str:
    rows = ["| Field | CI reference | this run | yours | |", "|---|---|---|---|:-:|"]
    for r in parity.rows:
        rows.append(
            f"| {md.cell(r.label)} | {md.cell(r.reference)} | {md.cell(r.this_run)} | {md.cell(r.contributor)} "
            f"| {parity_icon(r)} |"
        )
    return "\n".join(rows)


def selection_summary(selection: Selection, tests: TestsResult | None = None) -> str:
    """What was selected, in test items as pytest counted them once it ran; before that, in the
    selection's own node ids (a class or a file is one id, and many tests)."""
    counted_run = tests is not None and tests.selected is not None
    if selection.whole_suite:
        size = tests.selected if tests is not None and counted_run else None
        return "🎯 Tests: the whole suite" + (f" ({counted(size, 'test')})" if size is not None else "")
    if tests is not None and tests.selected is not None:
        left_out = f", {tests.deselected:,} deselected" if tests.deselected is not None else ""
        uncollected = uncollected_ids(tests)
        # The ids listed below the count: those in modules that did not collect are not in it.
        held = (
            f"; {counted(len(uncollected), 'selected id')} in modules that did not collect"
            if uncollected
            else ""
        )
        return f"🎯 Tests: {tests.selected:,} selected{left_out}{held}"
    return f"🎯 Tests: {counted(len(selection.tests), 'test id')} selected"


def test_counts(tests: TestsResult) -> str:
    """A run's counts in pytest's test items, the same four every time (flaky when there are):
    ``9 passed · 1 failed · 0 skipped · 8 deselected``. Errors count as failed; a selected module
    that did not collect is no test, and is counted apart: ``· 2 modules did not collect``."""
    failed = sum(
        1
        for r in tests.results
        if r.outcome in (TestOutcome.FAILED, TestOutcome.ERROR) and not r.collection_error
    )
    parts = [f"{tests.count(TestOutcome.PASSED):,} passed", f"{failed:,} failed"]
    if tests.count(TestOutcome.FLAKY):
        parts.append(f"{tests.count(TestOutcome.FLAKY):,} flaky")
    parts.append(f"{tests.count(TestOutcome.SKIPPED):,} skipped")
    if tests.deselected is not None:
        parts.append(f"{tests.deselected:,} deselected")
    if tests.collection_errors:
        parts.append(f"{counted(len(tests.collection_errors), 'module')} did not collect")
    return " · ".join(parts)


def uncollected_ids(tests: TestsResult) -> list[str]:
    """The selected ids whose module did not collect: listed as selected, and never run."""
    places = [r.nodeid.rstrip("/") for r in tests.collection_errors]
    return [
        t.nodeid
        for t in tests.selection.tests
        if any(t.nodeid == p or t.nodeid.startswith((p + "::", p + "/")) for p in places)
    ]


def tests_ran(tests: TestsResult) -> bool:
    """Whether pytest ran for these results: only then are there counts to show."""
    return bool(tests.results) or tests.selected is not None


def tests_notes(tests: TestsResult) -> list[str]:
    """What the counts leave out: modules that did not collect (with the likely fix), selected tests
    the head does not have."""
    notes = []
    errors = tests.collection_errors
    if errors:
        first = error_headline(errors[0].message)
        why = f" (first error: {md.code(one_line(first, 160))})" if first else ""
        modules = ", ".join(md.code(r.nodeid) for r in errors[:5]) + (" …" if len(errors) > 5 else "")
        fix = f" {md.prose(tests.collection_fix)}" if tests.collection_fix else ""
        notes.append(
            f"**Collection error:** {counted(len(errors), 'selected test module')} did not collect, "
            f"so none of their tests ran: {modules}{why}.{fix}"
        )
    if tests.not_found:
        names = ", ".join(md.code(n) for n in tests.not_found[:5]) + (
            " …" if len(tests.not_found) > 5 else ""
        )
        notes.append(
            f"Not run, not in this commit (renamed or removed): {counted(len(tests.not_found), 'selected test')}: "
            f"{names}"
        )
    if tests.not_collected:
        shown = "; ".join(
            f"{md.code(e.path)}" + (f" ({md.text(one_line(e.message, 120))})" if e.message else "")
            for e in tests.not_collected[:3]
        )
        more = " …" if len(tests.not_collected) > 3 else ""
        fix = f" {md.prose(tests.collection_fix)}" if tests.collection_fix and not errors else ""
        notes.append(
            f"Not selected, and could not be collected: {counted(len(tests.not_collected), 'test module')}: "
            f"{shown}{more}{fix}"
        )
    return notes
