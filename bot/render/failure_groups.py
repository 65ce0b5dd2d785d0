"""Failures grouped by whose they are: new first, then already failing on the base, then flaky.

The new failures are rendered where they always were (the failing tests' section); this module
renders the failures this change did not cause, measured on the merge base or known from other
runs, with the base's error beside the head's (docs/reporting.md, "Whose failure is it").
"""

from __future__ import annotations

from bot.core import limits
from bot.core.models import FailureCause, TestCaseResult, TestsResult
from bot.core.verdict import pre_existing_failures
from bot.render import markdown as md
from bot.render.fit import Part
from bot.render.phrases import counted, details, error_headline, first_lines, one_line

CAUSE_WORDS = {
    FailureCause.ON_BASE: "already failing on the base branch — not caused by this change",
    FailureCause.ON_BASE_DIFFERENTLY: "fails differently on the base branch — already failing, with another error",
    FailureCause.KNOWN_FLAKY: "known flaky — seen failing on other changes or the default branch",
}
GROUP_TITLES = {
    FailureCause.ON_BASE: "Already failing on the base branch (same error), not caused by this change",
    FailureCause.ON_BASE_DIFFERENTLY: "Fails differently on the base branch (already failing, another error)",
    FailureCause.KNOWN_FLAKY: "Known flaky (seen failing on other changes or the default branch)",
}


def decides_word(tests: TestsResult) -> str:
    return (
        "they fail this change (`tests.pre_existing: failure`)"
        if tests.pre_existing_fails
        else ("they do not decide the check (`tests.pre_existing: neutral`)")
    )


def grouped_lines(tests: TestsResult) -> list[str]:
    """The check run summary's groups of failures this change did not cause, one block each."""
    pre = pre_existing_failures(tests)
    blocks = []
    for cause, title in GROUP_TITLES.items():
        group = [r for r in pre if r.cause == cause]
        if group:
            shown = group[: limits.CHECK_LISTED_TESTS]
            lines = [name_line(r) for r in shown]
            if len(group) > len(shown):
                lines.append(f"- …and {len(group) - len(shown):,} more")
            blocks.append(f"{title}:\n" + "\n".join(lines))
    if blocks:
        blocks.append(f"{counted(len(pre), 'failure')} this change did not cause: {decides_word(tests)}.")
    if tests.attribution_note:
        blocks.append(md.prose(tests.attribution_note) + "; those failures count as new.")
    return blocks


def name_line(r: TestCaseResult) -> str:
    headline = error_headline(r.message)
    line = f"- {md.code(r.nodeid)}" + (f": {md.prose(one_line(headline, 160))}" if headline else "")
    if r.cause == FailureCause.ON_BASE_DIFFERENTLY:
        base = error_headline(r.base_message)
        line += f" (on the base: {md.prose(one_line(base, 120))})" if base else ""
    if r.seen_failing:
        line += " — seen failing in " + ", ".join(
            f"[run {i + 1}]({url})" for i, url in enumerate(r.seen_failing[:3])
        )
    return line


def detail(r: TestCaseResult) -> str:
    """One pre-existing failure in full: the head's error and the base's beside it."""
    lines = [f"**{md.code(r.nodeid)}** {CAUSE_WORDS[r.cause] if r.cause else 'failed'}"]
    head = first_lines(r.message, limits.COMMENT_ERROR_LINES, limits.COMMENT_ERROR_CHARS)
    if r.base_message.strip():
        base = first_lines(r.base_message, limits.COMMENT_ERROR_LINES, limits.COMMENT_ERROR_CHARS)
        lines.append(
            "At the head:\n" + md.fence(head, "text") + "\nOn the merge base:\n" + md.fence(base, "text")
        )
    elif head.strip():
        lines.append(md.fence(head, "text"))
    if r.seen_failing:
        lines.append(
            "Seen failing in: " + ", ".join(f"[run {i + 1}]({u})" for i, u in enumerate(r.seen_failing))
        )
    return "\n".join(lines)


def pre_existing_part(tests: TestsResult, where: str) -> Part | None:
    """The comment's section of failures this change did not cause; None when there is none."""
    pre = pre_existing_failures(tests)
    if not pre:
        return None
    cap = min(len(pre), limits.COMMENT_DETAILED_FAILURES)

    def render(k: int | None) -> str:
        shown = cap if k is None else min(k, cap)
        blocks = [detail(r) for r in pre[:shown]]
        if len(pre) > shown:
            blocks.append(f"…and {counted(len(pre) - shown, 'more')}: see {where}.")
        blocks.append(f"{counted(len(pre), 'failure')} this change did not cause: {decides_word(tests)}.")
        summary = f"🟠 <b>{counted(len(pre), 'failing test')} not caused by this change</b>"
        return details(summary, "\n\n".join(blocks), open_=False)

    return Part(
        label="failures not caused by this change", priority=90, render=render, entries=cap, total=len(pre)
    )


def so_far(tests: TestsResult) -> str:
    """A running test step's line: ``1 failed so far, 140 of 200 still running``."""
    progress = tests.in_progress
    assert progress is not None
    failed = f"{len(tests.results):,} failed so far"
    if progress.total is None:
        return f"{failed}, the rest still running"
    left = max(progress.total - progress.done, 0)
    return f"{failed}, {left:,} of {progress.total:,} still running"
