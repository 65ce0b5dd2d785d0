"""The one sticky PR comment: its head (stage, where and what ran, notices) and its assembly.

Everything here is a pure function of its arguments: no network, no clock, no randomness, and
every list is put in a stable order, so the same report always renders the same bytes (the
reporter skips identical rewrites, and the snapshot tests can compare). The sections below the
head are in :mod:`bot.render.comment_sections`; the fitting is :mod:`bot.render.fit`.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import Field

from bot.core import limits
from bot.core.config import CONFIG_PATH
from bot.core.kinds import COMMAND, Stage
from bot.core.models import (
    CheckStatus,
    Finding,
    Level,
    Model,
    RunReport,
    RunState,
    TestOutcome,
    TestsResult,
)
from bot.core.verdict import Verdict, failing_tests, pre_existing_failures
from bot.render import markdown as md
from bot.render.comment_sections import comment_parts
from bot.render.failure_groups import so_far
from bot.render.fit import fit
from bot.render.phrases import (
    about_line,
    capitalised,
    counted,
    parity_differences,
    test_counts,
    tests_notes,
    tests_ran,
)

STICKY_MARKER = "<!-- paritybot:sticky -->"


def needs_new_comment(previous: Verdict | None, current: Verdict) -> bool:
    """Whether to post a fresh sticky comment (and retire the old one) instead of editing it.

    Only a new comment notifies people, so only news worth a notification gets one: a failure
    after anything that was not already a failure (``previous`` is None before the first verdict).
    Everything else, including fail → fail and fail → pass, edits in place.
    """
    return current == Verdict.FAIL and previous != Verdict.FAIL


COMMENT_LIMIT = limits.COMMENT_BODY_MAX - limits.SAFETY_MARGIN


def render_comment(
    report: RunReport | None,
    *,
    stage: Stage,
    queue_position: int | None = None,
    check_run_url: str | None = None,
    app_slug: str = "paritybot",
    notice: str | None = None,
    local: bool = False,
    run_url: str | None = None,
) -> str:
    """The sticky comment's body for ``stage``; ``report`` is the run's results so far, if any.

    For ``queued`` a report is the previous run's, still worth reading while the next one waits;
    for ``running`` it holds the checks finished so far. ``notice`` is a line from the caller
    (why a run was cancelled, who may approve it); for ``config_error`` it holds the problems.
    The body always starts with :data:`STICKY_MARKER` and stays under GitHub's comment limit.
    ``local``: the run is `paritybot check`'s, which is tried again by running it again, not by
    a comment.
    """
    if stage == Stage.DONE and report is None:
        raise ValueError("a finished run's comment needs its report")
    if queue_position is not None and queue_position < 1:
        raise ValueError(f"queue_position counts from 1 (next up), got {queue_position}")
    where = (
        f"the [check runs]({check_run_url})" if check_run_url else "the paritybot check runs of this commit"
    )
    head = _with_run_link(
        _comment_head(report, stage, queue_position, check_run_url, notice, local=local), run_url
    )
    parts = (
        comment_parts(report, where, local=local)
        if report is not None and stage != Stage.CONFIG_ERROR
        else []
    )
    footer = "" if local else _footer(app_slug)  # the commands are the App's, not the command line's

    def assemble(rendered: list[str], cut_note: str) -> str:
        blocks = [STICKY_MARKER, head, *rendered, cut_note, footer]
        return "\n\n".join(b for b in blocks if b) + "\n"

    return fit(parts, COMMENT_LIMIT, assemble, where)


class CommentSection(Model):
    """One environment's part of the PR's summary comment."""

    environment: str
    stage: Stage
    report: RunReport | None = None
    queue_position: int | None = None
    notice: str | None = None
    run_url: str | None = Field(None, description="the run's page: its whole log and results")


def _with_run_link(head: str, run_url: str | None) -> str:
    """The heading, then the link to the run's page (paritybot's own address, never the run's text)."""
    return f"{head}\n\n📜 [The whole log and every result]({run_url})" if run_url else head


def render_pr_comment(
    sections: Sequence[CommentSection], *, check_run_url: str | None = None, app_slug: str = "paritybot"
) -> str:
    """The PR's one summary comment: one section per environment the PR runs in.

    With one environment it is exactly :func:`render_comment`. With several, each environment gets
    an equal share of GitHub's size limit and is cut within it, so a huge failure in one
    environment never hides the others.
    """
    if not sections:
        raise ValueError("a summary needs at least one environment")
    if len(sections) == 1:
        s = sections[0]
        return render_comment(
            s.report,
            stage=s.stage,
            queue_position=s.queue_position,
            check_run_url=check_run_url,
            app_slug=app_slug,
            notice=s.notice,
            run_url=s.run_url,
        )
    where = (
        f"the [check runs]({check_run_url})" if check_run_url else "the paritybot check runs of this commit"
    )
    footer = _footer(app_slug)
    budget = (COMMENT_LIMIT - len(STICKY_MARKER) - len(footer) - 16) // len(sections)
    bodies = []
    for s in sections:
        if s.stage == Stage.DONE and s.report is None:
            raise ValueError("a finished run's comment needs its report")
        head = _with_run_link(
            _comment_head(s.report, s.stage, s.queue_position, check_run_url, s.notice), s.run_url
        )
        parts = (
            comment_parts(s.report, where) if s.report is not None and s.stage != Stage.CONFIG_ERROR else []
        )
        title = f"## Environment {md.code(s.environment)}"

        def assemble(rendered: list[str], cut_note: str, head: str = head, title: str = title) -> str:
            return "\n\n".join(b for b in [title, head, *rendered, cut_note] if b)

        bodies.append(fit(parts, budget, assemble, where))
    return "\n\n".join([STICKY_MARKER, *bodies, footer]) + "\n"


def _comment_head(
    report: RunReport | None,
    stage: Stage,
    queue_position: int | None,
    check_run_url: str | None,
    notice: str | None,
    *,
    local: bool = False,
) -> str:
    """The heading, where and what ran, the caller's notice, and the run's error: all above the fold."""
    heading = f"### {_stage_heading(report, stage, queue_position)}"
    if stage == Stage.CONFIG_ERROR:
        problems = notice or (report.error if report else None) or "the file could not be read"
        return "\n\n".join(
            [
                heading,
                f"paritybot could not read {md.code(CONFIG_PATH)}, so nothing ran:",
                _config_problems(limits.truncate(problems.strip(), limits.COMMENT_NOTICE_CHARS)),
                f"Fix the file and push, or comment `{COMMAND}` once it is fixed on the base branch.",
            ]
        )
    blocks = [heading]
    if stage == Stage.AWAITING_APPROVAL:
        blocks.append(
            notice
            or "This pull request's author is not yet trusted to run code on the GPU machines. "
            f"A maintainer approves this commit by commenting `{COMMAND}`; a new push needs a new approval."
        )
        notice = None
    if report is not None:
        # One paragraph, one line each: Markdown would otherwise run them together.
        info = [about_line(report, check_run_url), _counts_line(report), _not_run_line(report)]
        if stage != Stage.DONE:
            info.insert(0, _results_caption(stage) + " " + verdict_line(report, stage))
        blocks.append("<br>\n".join(line for line in info if line))
    if notice:
        notice = limits.truncate(notice.strip(), limits.COMMENT_NOTICE_CHARS)
        blocks.append("\n".join("> " + line for line in notice.splitlines()))
    if report is not None and report.tests is not None:
        blocks.extend(tests_notes(report.tests))
    if report is not None and report.nothing_to_check:
        blocks.append(md.prose(capitalised(report.nothing_to_check)) + ".")
    if report is not None and report.error:
        blocks.append(_run_error_block(report, local))
    return "\n\n".join(blocks)


def _config_problems(problems: str) -> str:
    """The config's problems as a list; they quote the file, so each is neutralised like a run's text."""
    lines = [line.removeprefix("- ") for line in problems.splitlines() if line.strip()]
    return "\n".join(f"- {md.prose(line)}" for line in lines)


def _stage_heading(report: RunReport | None, stage: Stage, queue_position: int | None) -> str:
    if stage == Stage.QUEUED:
        if queue_position is None:
            return "⏳ Queued for a GPU runner"
        ahead = "next up" if queue_position == 1 else f"{queue_position - 1:,} ahead"
        # "#2" alone would link issue 2 of the repository; the zero-width space keeps it a number.
        return f"⏳ Queued for a GPU runner: #{md.ZWSP}{queue_position:,} in line ({ahead})"
    if stage == Stage.RUNNING:
        return f"🔄 Running: {_running_now(report)}"
    if stage == Stage.CANCELLED:
        return "⏹️ Cancelled"
    if stage == Stage.AWAITING_APPROVAL:
        return "⏸️ Waiting for approval to run on the GPU machines"
    if stage == Stage.CONFIG_ERROR:
        return f"⚠️ Invalid {md.code(CONFIG_PATH)}"
    assert report is not None  # checked by render_comment
    return capitalised(verdict_line(report))


def _running_now(report: RunReport | None) -> str:
    """The step in progress: the first check in pipeline order that has no result yet."""
    if report is None:
        return "preparing the environment"
    steps = [("pre-commit", report.precommit), ("docstrings", report.docstrings), ("tests", report.tests)]
    pending = next((name for name, result in steps if result is None), None)
    if pending is None:
        return "finishing up"
    done = [name for name, result in steps if result is not None]
    return pending + (f" ({', '.join(done)} done)" if done else "")


def _results_caption(stage: Stage) -> str:
    if stage == Stage.QUEUED:
        return "**Last run:**"
    if stage == Stage.CANCELLED:
        return "**Results before it stopped:**"
    return "**So far:**"


def verdict_line(report: RunReport, stage: Stage = Stage.DONE) -> str:
    """Verdict and counts, most serious first: ``❌ 2 tests failed · ⚠️ 1 flaky · ✅ pre-commit``."""
    bits: list[str] = []
    if report.nothing_to_check:
        return "➖ nothing to check"
    if report.state == RunState.CANCELLED and stage != Stage.CANCELLED:  # the heading says it already
        bits.append("⏹️ cancelled")
    elif report.error:
        bits.append("⛔ not run" if report.refused else "💥 the run broke")
    if report.tests is not None:
        bits += _tests_bits(report.tests)
    if report.precommit is not None:
        bits += _check_bit("pre-commit", report.precommit.status, [])
    if report.docstrings is not None:
        d = report.docstrings
        bits += _check_bit("docstrings", d.status, d.findings)
    if report.parity is not None:
        differs = parity_differences(report.parity)
        if differs:
            bits.append(f"⚠️ {counted(len(differs), 'environment difference')}")
    return " · ".join(bits) or "➖ nothing ran"


def _tests_bits(tests: TestsResult) -> list[str]:
    if tests.in_progress is not None:
        return [f"❌ {so_far(tests)}"]
    new = failing_tests(tests)
    uncollected = sum(1 for r in new if r.collection_error)
    failing = len(new) - uncollected
    flaky = tests.count(TestOutcome.FLAKY)
    passed = tests.count(TestOutcome.PASSED)
    bits = []
    if uncollected:
        bits.append(f"❌ {counted(uncollected, 'test module')} did not collect")
    if failing:
        bits.append(f"❌ {counted(failing, 'test')} failed")
    elif tests.status == CheckStatus.FAILED and not uncollected:
        bits.append("❌ tests failed")
    if pre := len(pre_existing_failures(tests)):
        bits.append(f"🟠 {pre:,} failing not caused by this change")
    if flaky:
        bits.append(f"⚠️ {flaky:,} flaky")
    if tests.status == CheckStatus.ERROR:
        bits.append("❗ tests could not finish")
    elif tests.status == CheckStatus.CANCELLED:
        bits.append("⏹️ tests cancelled")
    elif not failing and not uncollected and not pre and tests.status == CheckStatus.PASSED:
        bits.append(f"✅ {counted(passed, 'test')} passed" if passed else "➖ no tests selected")
    return bits


def _check_bit(name: str, status: CheckStatus, findings: list[Finding]) -> list[str]:
    if status == CheckStatus.PASSED:
        return [f"✅ {name}"]
    if status == CheckStatus.FAILED:
        if findings:
            icon = "❌" if any(f.level == Level.FAILURE for f in findings) else "⚠️"
            return [f"{icon} {len(findings):,} {name}"]
        return [f"❌ {name}"]
    if status == CheckStatus.ERROR:
        return [f"❗ {name} could not run"]
    if status == CheckStatus.CANCELLED:
        return [f"⏹️ {name} cancelled"]
    return []  # not configured or disabled: said once, on the "not run" line


def _counts_line(report: RunReport) -> str:
    """The tests' counts, in test items: the same four on every run that ran pytest."""
    tests = report.tests
    return f"<sub>Tests: {test_counts(tests)}</sub>" if tests is not None and tests_ran(tests) else ""


def _not_run_line(report: RunReport) -> str:
    checks = [("pre-commit", report.precommit), ("docstrings", report.docstrings), ("tests", report.tests)]
    words = {CheckStatus.NOT_CONFIGURED: "not configured", CheckStatus.DISABLED: "disabled in the config"}
    skipped = [
        f"{name} ({md.prose(result.message) if result.message else words[result.status]})"
        for name, result in checks
        if result is not None and result.status in words
    ]
    return f"<sub>Not run: {' · '.join(skipped)}</sub>" if skipped else ""


def _run_error_block(report: RunReport, local: bool) -> str:
    assert report.error is not None
    text = limits.truncate(report.error.strip(), limits.COMMENT_RUN_ERROR_CHARS)
    again = "running `paritybot check` again tries again" if local else f"`{COMMAND}` tries again"
    if report.refused:
        return (
            "**⛔ Not run:** nothing of this change ran, for the reason below. It names a setting "
            f"to change, not a fault of your change; {again} once it is changed.\n\n" + md.fence(text, "text")
        )
    checked = any(c is not None for c in (report.precommit, report.docstrings, report.tests))
    consequence = "so the results below are incomplete" if checked else "before any check ran"
    return (
        f"**💥 The run itself broke**, {consequence}. This is usually the machine's fault, not your "
        f"change's; {again}.\n\n" + md.fence(text, "text")
    )


def _footer(app_slug: str) -> str:
    commands = " · ".join(
        [
            f"`{COMMAND}` reruns the selected tests",
            f"`{COMMAND} failed` only the failed ones",
            f"`{COMMAND} all` the whole suite",
            "add `env=NAME` to pick an environment",
            f"`{COMMAND} help`",
        ]
    )
    app = f"[{md.text(app_slug)}](https://github.com/apps/{app_slug})"
    return f"---\n<sub>{commands}. This comment is kept up to date by {app}.</sub>"
