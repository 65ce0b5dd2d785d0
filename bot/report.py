"""What users read on GitHub: the one sticky PR comment and the check runs, rendered from a RunReport.

Everything here is a pure function of its arguments: no network, no clock, no randomness, and
every list is put in a stable order, so the same report always renders the same bytes (the lead
skips identical rewrites, and the snapshot tests can compare). GitHub's size limits live in
:mod:`bot.limits`; each renderer fits its output inside them by cutting the least important
parts first and saying what it cut and where the rest is.

Check-run design (argued in docs/reporting.md): one check run per check, named
``paritybot / <check> (<environment>)``, so a repository can require the tests but not the
docstrings, and a check that finished early can be completed while the tests still run.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any, Literal

import structlog
from pydantic import Field, field_validator, model_validator

from bot import limits
from bot import markdown as md
from bot.config import CONFIG_PATH
from bot.models import (
    CheckStatus,
    DocstringResult,
    Finding,
    HookResult,
    HookStatus,
    Level,
    Model,
    ParityReport,
    ParityRow,
    ParityVerdict,
    PrecommitResult,
    RfcReport,
    RunReport,
    RunState,
    Selection,
    TestCaseResult,
    TestOutcome,
    TestsResult,
)
from runner.parity import PASTE_ADVICE

log = structlog.get_logger(__name__)

STICKY_MARKER = "<!-- paritybot:sticky -->"
COMMAND = "/retest-gpu"


class Stage(StrEnum):
    """Where the PR's run stands; the comment's first line says it."""

    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    CANCELLED = "cancelled"
    AWAITING_APPROVAL = "awaiting_approval"
    CONFIG_ERROR = "config_error"


class Verdict(StrEnum):
    """The outcome of a finished run, as far as notifications care."""

    PASS = "pass"
    FAIL = "fail"
    FLAKY_ONLY = "flaky-only"
    ERROR = "error"  # the run itself broke (image missing, timeout): no verdict on the change
    CANCELLED = "cancelled"


class CheckKind(StrEnum):
    PRECOMMIT = "pre-commit"
    DOCSTRINGS = "docstrings"
    TESTS = "tests"
    PARITY = "parity"


CHECK_KINDS: tuple[CheckKind, ...] = (
    CheckKind.PRECOMMIT,
    CheckKind.DOCSTRINGS,
    CheckKind.TESTS,
    CheckKind.PARITY,
)

CheckRunStatus = Literal["queued", "in_progress", "completed"]
Conclusion = Literal["success", "failure", "neutral", "cancelled", "timed_out", "action_required", "skipped"]


def check_run_name(kind: CheckKind, environment: str) -> str:
    """The check run's name; stable per check and environment, so branch protection can require it."""
    return f"paritybot / {kind.value} ({environment})"


# --- Verdict and notifications ----------------------------------------------------------------------

_FAILING = (TestOutcome.FAILED, TestOutcome.ERROR)
_STOPPED = (RunState.CANCELLED, RunState.ABORTED)


def verdict(report: RunReport) -> Verdict:
    """Cancelled beats everything (a stopped run says nothing), then any failure, then a broken run."""
    if report.state in _STOPPED:
        return Verdict.CANCELLED
    checks = (report.precommit, report.docstrings, report.tests)
    if any(c is not None and _blocks(c) for c in checks):
        return Verdict.FAIL
    if report.error or any(
        c is not None and c.status in (CheckStatus.ERROR, CheckStatus.CANCELLED) for c in checks
    ):
        return Verdict.ERROR
    if report.tests is not None and report.tests.count(TestOutcome.FLAKY):
        return Verdict.FLAKY_ONLY
    return Verdict.PASS


def needs_new_comment(previous: Verdict | None, current: Verdict) -> bool:
    """Whether to post a fresh sticky comment (and retire the old one) instead of editing it.

    Only a new comment notifies people, so only news worth a notification gets one: a failure
    after anything that was not already a failure (``previous`` is None before the first verdict).
    Everything else, including fail → fail and fail → pass, edits in place.
    """
    return current == Verdict.FAIL and previous != Verdict.FAIL


def _blocks(check: PrecommitResult | DocstringResult | TestsResult) -> bool:
    """Whether a check's result fails the change (warnings alone do not)."""
    if isinstance(check, TestsResult) and _failing_tests(check):
        return True
    if check.status != CheckStatus.FAILED:
        return False
    if isinstance(check, DocstringResult) and check.findings:
        # Docstring findings are advice unless the checker raised one to failure level.
        return any(f.level == Level.FAILURE for f in check.findings)
    return True


def _failing_tests(tests: TestsResult) -> list[TestCaseResult]:
    return sorted((r for r in tests.results if r.outcome in _FAILING), key=lambda r: r.nodeid)


def _flaky_tests(tests: TestsResult) -> list[TestCaseResult]:
    return sorted((r for r in tests.results if r.outcome == TestOutcome.FLAKY), key=lambda r: r.nodeid)


# --- Markdown helpers -------------------------------------------------------------------------------


def _n(count: int, singular: str, plural: str | None = None) -> str:
    return f"{count:,} {singular if count == 1 else (plural or singular + 's')}"


def _details(summary: str, body: str, *, open_: bool = False) -> str:
    """A collapsible section; ``summary`` is HTML (GitHub does not render Markdown inside it)."""
    return (
        f"<details{' open' if open_ else ''}>\n<summary>{summary}</summary>\n\n{body.strip()}\n\n</details>"
    )


def _short_sha(sha: str) -> str:
    return sha[:7]


def _short_image(report: RunReport) -> str | None:
    """The image as people recognise it: repository and a 12-digit digest prefix."""
    ref = report.image_ref or report.image
    if not ref:
        return None
    name, sep, digest = ref.partition("@sha256:")
    return f"{name}@sha256:{digest[:12]}" if sep else ref


def _duration(report: RunReport) -> str | None:
    if report.started_at is None or report.finished_at is None:
        return None
    return _seconds(report.finished_at, report.started_at)


def _seconds(end: datetime, start: datetime) -> str:
    total = max(0, int((end - start).total_seconds()))
    minutes, seconds = divmod(total, 60)
    return f"{minutes} min {seconds} s" if minutes else f"{seconds} s"


def _first_lines(text: str, lines: int, chars: int) -> str:
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


# --- Fitting text inside a limit --------------------------------------------------------------------


@dataclass(frozen=True)
class _Part:
    """One cuttable section: ``render(k)`` shows its first k entries, ``render(None)`` all it would."""

    label: str  # how the cut note names it
    priority: int  # lower is cut first
    render: Callable[[int | None], str]
    entries: int = 0  # entries render(None) shows; more than one means it can be shortened
    total: int = 0  # entries the section has in all, for the cut note
    droppable: bool = True


class _Cutter:
    """Fits parts inside a limit: drop whole low-priority parts first, then shorten what is left.

    ``assemble(rendered_parts, cut_note)`` builds the full text; the cut note names what was left
    out and ``where`` the rest is. Kept parts are always the highest-priority ones, so a reader
    never finds the test selection while the pre-commit failure went missing.
    """

    def __init__(
        self, parts: Sequence[_Part], limit: int, assemble: Callable[[list[str], str], str], where: str
    ):
        self.parts = parts
        self.limit = limit
        self.assemble = assemble
        self.where = where
        self.shown: list[int | None] = [None] * len(parts)
        self.dropped = [False] * len(parts)
        self.order = sorted(range(len(parts)), key=lambda i: (parts[i].priority, i))

    def text(self) -> str:
        rendered = [
            "" if self.dropped[i] else part.render(self.shown[i]) for i, part in enumerate(self.parts)
        ]
        return self.assemble(rendered, self.note())

    def fits(self) -> bool:
        return limits.fits(self.text(), self.limit)

    def fit(self) -> str:
        if self.fits():
            return self.text()
        if not (self._drop() or self._shorten()):
            text = self.text()
            # Only when one entry alone is larger than the limit, which the per-entry caps prevent.
            log.warning("report cut by plain truncation", limit=self.limit, length=limits.github_len(text))
            return limits.truncate(text, self.limit, where=self.where)
        log.info("report cut to fit", note=self.note())
        return self.text()

    def _drop(self) -> bool:
        for i in self.order:
            if self.parts[i].droppable:
                self.dropped[i] = True
                if self.fits():
                    return True
        return False

    def _shorten(self) -> bool:
        for i in self.order:
            if self.dropped[i] or self.parts[i].entries <= 1:
                continue
            low, high = 1, self.parts[i].entries - 1  # the largest count that fits, by bisection
            self.shown[i] = low
            if not self.fits():
                continue  # even one entry is too many while the rest stays; shorten the next part
            while low < high:
                mid = (low + high + 1) // 2
                self.shown[i] = mid
                if self.fits():
                    low = mid
                else:
                    high = mid - 1
            self.shown[i] = low
            return True
        return False

    def note(self) -> str:
        left_out = [p.label for p, d in zip(self.parts, self.dropped, strict=True) if d]
        shortened = [
            f"{p.label} (first {k:,} of {max(p.total, p.entries):,})"
            for p, k, d in zip(self.parts, self.shown, self.dropped, strict=True)
            if k is not None and not d
        ]
        bits = []
        if left_out:
            bits.append("left out " + ", ".join(left_out))
        if shortened:
            bits.append("shortened " + ", ".join(shortened))
        if not bits:
            return ""
        return f"✂️ Cut to fit GitHub's size limit: {'; '.join(bits)}. The rest is in {self.where}."


def _fit(parts: Sequence[_Part], limit: int, assemble: Callable[[list[str], str], str], where: str) -> str:
    return _Cutter(parts, limit, assemble, where).fit()


# --- The sticky comment -----------------------------------------------------------------------------

_COMMENT_LIMIT = limits.COMMENT_BODY_MAX - limits.SAFETY_MARGIN


def render_comment(
    report: RunReport | None,
    *,
    stage: Stage,
    queue_position: int | None = None,
    check_run_url: str | None = None,
    app_slug: str = "paritybot",
    notice: str | None = None,
) -> str:
    """The sticky comment's body for ``stage``; ``report`` is the run's results so far, if any.

    For ``queued`` a report is the previous run's, still worth reading while the next one waits;
    for ``running`` it holds the checks finished so far. ``notice`` is a line from the caller
    (why a run was cancelled, who may approve it); for ``config_error`` it holds the problems.
    The body always starts with :data:`STICKY_MARKER` and stays under GitHub's comment limit.
    """
    if stage == Stage.DONE and report is None:
        raise ValueError("a finished run's comment needs its report")
    if queue_position is not None and queue_position < 1:
        raise ValueError(f"queue_position counts from 1 (next up), got {queue_position}")
    where = (
        f"the [check runs]({check_run_url})" if check_run_url else "the paritybot check runs of this commit"
    )
    head = _comment_head(report, stage, queue_position, check_run_url, notice)
    parts = _comment_parts(report, where) if report is not None and stage != Stage.CONFIG_ERROR else []
    footer = _footer(app_slug)

    def assemble(rendered: list[str], cut_note: str) -> str:
        blocks = [STICKY_MARKER, head, *rendered, cut_note, footer]
        return "\n\n".join(b for b in blocks if b) + "\n"

    return _fit(parts, _COMMENT_LIMIT, assemble, where)


class CommentSection(Model):
    """One environment's part of the PR's summary comment."""

    environment: str
    stage: Stage
    report: RunReport | None = None
    queue_position: int | None = None
    notice: str | None = None


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
        )
    where = (
        f"the [check runs]({check_run_url})" if check_run_url else "the paritybot check runs of this commit"
    )
    footer = _footer(app_slug)
    budget = (_COMMENT_LIMIT - len(STICKY_MARKER) - len(footer) - 16) // len(sections)
    bodies = []
    for s in sections:
        if s.stage == Stage.DONE and s.report is None:
            raise ValueError("a finished run's comment needs its report")
        head = _comment_head(s.report, s.stage, s.queue_position, check_run_url, s.notice)
        parts = (
            _comment_parts(s.report, where) if s.report is not None and s.stage != Stage.CONFIG_ERROR else []
        )
        title = f"## Environment {md.code(s.environment)}"

        def assemble(rendered: list[str], cut_note: str, head: str = head, title: str = title) -> str:
            return "\n\n".join(b for b in [title, head, *rendered, cut_note] if b)

        bodies.append(_fit(parts, budget, assemble, where))
    return "\n\n".join([STICKY_MARKER, *bodies, footer]) + "\n"


def _comment_head(
    report: RunReport | None,
    stage: Stage,
    queue_position: int | None,
    check_run_url: str | None,
    notice: str | None,
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
        info = [_about_line(report, check_run_url), _not_run_line(report)]
        if stage != Stage.DONE:
            info.insert(0, _results_caption(report, stage) + " " + _verdict_line(report, stage))
        blocks.append("<br>\n".join(line for line in info if line))
    if notice:
        notice = limits.truncate(notice.strip(), limits.COMMENT_NOTICE_CHARS)
        blocks.append("\n".join("> " + line for line in notice.splitlines()))
    if report is not None and report.error:
        blocks.append(_run_error_block(report))
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
    return _capitalised(_verdict_line(report))


def _capitalised(line: str) -> str:
    """Upper-case the first letter after the leading emoji: a heading reads as a sentence."""
    return re.sub(r"^(\W*)(\w)", lambda m: m[1] + m[2].upper(), line, count=1)


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


def _results_caption(report: RunReport, stage: Stage) -> str:
    if stage == Stage.QUEUED:
        return "**Last run:**"
    if stage == Stage.CANCELLED:
        return "**Results before it stopped:**"
    return "**So far:**"


def _verdict_line(report: RunReport, stage: Stage = Stage.DONE) -> str:
    """Verdict and counts, most serious first: ``❌ 2 tests failed · ⚠️ 1 flaky · ✅ pre-commit``."""
    bits: list[str] = []
    if report.state in _STOPPED and stage != Stage.CANCELLED:  # the heading says it already
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
        differs = _parity_differences(report.parity)
        if differs:
            bits.append(f"⚠️ {_n(len(differs), 'environment difference')}")
    return " · ".join(bits) or "➖ nothing ran"


def _tests_bits(tests: TestsResult) -> list[str]:
    failing = len(_failing_tests(tests))
    flaky = tests.count(TestOutcome.FLAKY)
    passed = tests.count(TestOutcome.PASSED)
    bits = []
    if failing:
        bits.append(f"❌ {_n(failing, 'test')} failed")
    elif tests.status == CheckStatus.FAILED:
        bits.append("❌ tests failed")
    if flaky:
        bits.append(f"⚠️ {flaky:,} flaky")
    if tests.status == CheckStatus.ERROR:
        bits.append("❗ tests could not finish")
    elif tests.status == CheckStatus.CANCELLED:
        bits.append("⏹️ tests cancelled")
    elif not failing and tests.status == CheckStatus.PASSED:
        bits.append(f"✅ {_n(passed, 'test')} passed" if passed else "➖ no tests selected")
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


def _about_line(report: RunReport, check_run_url: str | None) -> str:
    where = f"as of commit {md.code(_short_sha(report.head_sha))}"
    image = _short_image(report)
    if report.runner == "host":
        reason = f": {md.prose(report.runner_reason)}" if report.runner_reason else ""
        where += f" on the runner's host (environment {md.code(report.environment)}{reason})"
    elif image is not None:
        where += f" in image {md.code(image)} (environment {md.code(report.environment)})"
    else:
        where += f" (environment {md.code(report.environment)}, no runner started)"
    if report.networked_steps:
        where += f" · network allowed for {md.prose(', '.join(report.networked_steps))}"
    took = _duration(report)
    if took:
        where += f" · took {took}"
    if check_run_url:
        where += f" · [details]({check_run_url})"
    return f"<sub>{where}</sub>"


def _not_run_line(report: RunReport) -> str:
    checks = [("pre-commit", report.precommit), ("docstrings", report.docstrings), ("tests", report.tests)]
    words = {CheckStatus.NOT_CONFIGURED: "not configured", CheckStatus.DISABLED: "disabled in the config"}
    skipped = [
        f"{name} ({md.prose(result.message) if result.message else words[result.status]})"
        for name, result in checks
        if result is not None and result.status in words
    ]
    return f"<sub>Not run: {' · '.join(skipped)}</sub>" if skipped else ""


def _run_error_block(report: RunReport) -> str:
    assert report.error is not None
    text = limits.truncate(report.error.strip(), limits.COMMENT_RUN_ERROR_CHARS)
    if report.refused:
        return (
            "**⛔ Not run:** nothing of this change ran, for the reason below. It names a setting "
            f"to change, not a fault of your change; `{COMMAND}` tries again once it is changed.\n\n"
            + md.fence(text, "text")
        )
    checked = any(c is not None for c in (report.precommit, report.docstrings, report.tests))
    consequence = "so the results below are incomplete" if checked else "before any check ran"
    return (
        f"**💥 The run itself broke**, {consequence}. This is usually the machine's fault, not your "
        f"change's; `{COMMAND}` tries again.\n\n" + md.fence(text, "text")
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


def _comment_parts(report: RunReport, where: str) -> list[_Part]:
    parts: list[_Part] = []
    tests = report.tests
    if tests is not None:
        failing = _failing_tests(tests)
        if failing:
            parts.append(_failures_part(failing, where))
        if tests.status in (CheckStatus.ERROR, CheckStatus.FAILED) and not failing:
            parts.append(_part_text("the tests' error", 85, _tests_error_section(tests)))
    if report.precommit is not None and report.precommit.status in (CheckStatus.FAILED, CheckStatus.ERROR):
        parts.append(_part_text("pre-commit", 60, _precommit_section(report.precommit)))
    if tests is not None and _flaky_tests(tests):
        parts.append(_flaky_part(_flaky_tests(tests), where))
    if report.docstrings is not None and (
        report.docstrings.findings or report.docstrings.status in (CheckStatus.FAILED, CheckStatus.ERROR)
    ):
        parts.append(_findings_part(report.docstrings, where))
    if report.rfc is not None and report.rfc.triggered:
        parts.append(_part_text("RFC checklist", 40, _rfc_section(report.rfc)))
    if report.parity is not None and report.parity.rows:
        parts.append(_part_text("environment parity", 30, _parity_section(report.parity)))
    if tests is not None and (tests.selection.tests or tests.selection.whole_suite):
        parts.append(_selection_part(tests.selection, where))
    return parts


def _part_text(label: str, priority: int, text: str) -> _Part:
    return _Part(label=label, priority=priority, render=lambda _k: text)


# --- Comment sections -------------------------------------------------------------------------------


def _failures_part(failing: list[TestCaseResult], where: str) -> _Part:
    cap = min(len(failing), limits.COMMENT_DETAILED_FAILURES + limits.COMMENT_LISTED_FAILURES)

    def render(k: int | None) -> str:
        shown = cap if k is None else min(k, cap)
        detailed = failing[: min(shown, limits.COMMENT_DETAILED_FAILURES)]
        listed = failing[len(detailed) : shown]
        blocks = [_failure_entry(r) for r in detailed]
        if listed:
            blocks.append(
                f"{_n(len(listed), 'more failing test')}, by name:\n\n"
                + "\n".join(_failure_name_line(r) for r in listed)
            )
        if len(failing) > shown:
            blocks.append(f"…and {_n(len(failing) - shown, 'more failing test')}: see {where}.")
        blocks.append(f"Rerun only these with `{COMMAND} failed`.")
        summary = f"❌ <b>{_n(len(failing), 'failing test')}</b>"
        return _details(summary, "\n\n".join(blocks), open_=len(failing) <= 3)

    return _Part(
        label="failing tests", priority=100, render=render, entries=cap, total=len(failing), droppable=False
    )


def _failure_name_line(result: TestCaseResult) -> str:
    headline = error_headline(result.message)
    return f"- {md.code(result.nodeid)}" + (f": {md.prose(_one_line(headline, 160))}" if headline else "")


def _failure_entry(result: TestCaseResult) -> str:
    what = "failed" if result.outcome == TestOutcome.FAILED else "errored (setup, teardown or collection)"
    if result.attempts > 1:
        what += f" on all {result.attempts} attempts"
    took = f", {result.duration_s:.1f} s" if result.duration_s else ""
    lines = [f"**{md.code(result.nodeid)}** {what}{took}"]
    if result.message.strip():
        lines.append(
            md.fence(_first_lines(result.message, limits.COMMENT_ERROR_LINES, limits.COMMENT_ERROR_CHARS))
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
    return _details(f"{icon} <b>The tests {verb}</b>", body, open_=True)


def _precommit_section(pc: PrecommitResult) -> str:
    failed = [h for h in pc.hooks if h.status == HookStatus.FAILED]
    if pc.status == CheckStatus.ERROR:
        summary = "❗ <b>pre-commit could not run</b>"
        body = md.prose(pc.message) if pc.message else "pre-commit stopped before reporting its hooks."
        if pc.output.strip():
            body += "\n\n" + md.fence(_first_lines(pc.output, 40, limits.COMMENT_HOOK_OUTPUT_CHARS), "text")
        return _details(summary, body)
    names = ", ".join(md.html_text(h.id) for h in failed)
    summary = f"❌ <b>pre-commit: {_n(len(failed), 'hook')} failed</b>" + (f" ({names})" if names else "")
    blocks = []
    if pc.fix_command:
        blocks.append("Fix it locally, then commit and push:\n" + md.fence(pc.fix_command, "sh"))
    if failed:
        listed = []
        for number, hook in enumerate(failed):
            note = " — changed files" if hook.files_modified else ""
            item = f"- {_hook_label(hook)}{note}"
            if hook.output.strip() and number < limits.COMMENT_HOOK_OUTPUTS:
                out = _first_lines(hook.output, 15, limits.COMMENT_HOOK_OUTPUT_CHARS)
                item += "\n\n" + _indent(md.fence(out, "text"), "  ")
            listed.append(item)
        blocks.append("\n".join(listed))
    elif pc.message:
        blocks.append(md.prose(pc.message))
    if pc.diff.strip():
        diff = limits.truncate(pc.diff.rstrip("\n"), limits.COMMENT_DIFF_CHARS, what="characters of the diff")
        lines = pc.diff.count("\n") + 1
        blocks.append(
            _details(f"The fixes pre-commit made ({_n(lines, 'line')} of diff)", md.fence(diff, "diff"))
        )
    return _details(summary, "\n\n".join(blocks))


def _hook_label(hook: HookResult, *, in_table: bool = False) -> str:
    """The hook's name, and its id (what ``SKIP=`` and the config use) when that differs."""
    label = f"**{md.text(hook.name)}**"
    return label if hook.name == hook.id else f"{label} {md.code(hook.id, in_table=in_table)}"


def _indent(text: str, prefix: str) -> str:
    return "\n".join(prefix + line if line else line for line in text.splitlines())


def _flaky_part(flaky: list[TestCaseResult], where: str) -> _Part:
    cap = min(len(flaky), limits.COMMENT_FLAKY)

    def render(k: int | None) -> str:
        shown = flaky[: cap if k is None else min(k, cap)]
        items = []
        for r in shown:
            first = error_headline(r.message)
            item = f"- {md.code(r.nodeid)} passed on attempt {r.attempts}"
            items.append(item + (f": {md.code(_one_line(first, 200))}" if first else ""))
        if len(flaky) > len(shown):
            items.append(f"- …and {_n(len(flaky) - len(shown), 'more')}: see {where}.")
        summary = f"⚠️ <b>{_n(len(flaky), 'flaky test')}</b>: failed, then passed on a rerun"
        return _details(summary, "\n".join(items))

    return _Part(label="flaky tests", priority=50, render=render, entries=cap, total=len(flaky))


def _findings_part(d: DocstringResult, where: str) -> _Part:
    findings = _sorted_findings(d.findings)
    cap = min(len(findings), limits.COMMENT_FINDINGS)

    def render(k: int | None) -> str:
        if d.status == CheckStatus.ERROR:
            return _details(
                "❗ <b>The docstring check could not run</b>", md.prose(d.message or "no reason given")
            )
        shown = findings[: cap if k is None else min(k, cap)]
        items = [_finding_line(f) for f in shown]
        if len(findings) > len(shown):
            items.append(f"- …and {_n(len(findings) - len(shown), 'more')}: see {where}.")
        if not items:
            items.append(md.prose(d.message or "The docstring check failed without findings."))
        icon = "❌" if any(f.level == Level.FAILURE for f in findings) else "⚠️"
        checked = f" in {_n(d.checked, 'changed public object')}" if d.checked else ""
        style = f" ({md.html_text(d.style)} style)" if d.style else ""
        summary = f"{icon} <b>{_n(len(findings), 'docstring finding')}</b>{checked}{style}"
        return _details(summary, "\n".join(items))

    return _Part(label="docstring findings", priority=45, render=render, entries=cap, total=len(findings))


def _sorted_findings(findings: Iterable[Finding]) -> list[Finding]:
    return sorted(findings, key=lambda f: (f.path, f.line, f.title, f.message))


def _finding_line(f: Finding) -> str:
    title = f"**{md.text(f.title)}**: " if f.title else ""
    return f"- {md.code(f'{f.path}:{f.line}')} — {title}{md.prose(_one_line(f.message, 300))}"


def _parity_differences(parity: ParityReport) -> list[ParityRow]:
    return [
        r
        for r in parity.rows
        if r.verdict == ParityVerdict.DIFFERS or r.contributor_verdict == ParityVerdict.DIFFERS
    ]


def _parity_icon(row: ParityRow) -> str:
    if ParityVerdict.DIFFERS in (row.verdict, row.contributor_verdict):
        return "❌"
    return "✅" if row.verdict == ParityVerdict.MATCH else "❔"


def _parity_compared(parity: ParityReport) -> int:
    """How many fields were compared at all: known to CI and this run, or to this run and you."""
    unknown = ParityVerdict.UNKNOWN
    return sum(1 for r in parity.rows if r.verdict != unknown or r.contributor_verdict != unknown)


def _parity_summary(parity: ParityReport) -> str:
    differs = _parity_differences(parity)
    if differs:
        fields = ", ".join(md.html_text(r.label) for r in differs)
        return f"⚠️ <b>Environment parity: {_n(len(differs), 'difference')}</b> ({fields})"
    compared = _parity_compared(parity)
    if not compared:
        return "❔ <b>Environment parity</b>: nothing to compare with (no CI reference)"
    return f"✅ <b>Environment parity</b>: no difference in {_n(compared, 'field')} compared"


def _parity_table(parity: ParityReport) -> str:
    rows = ["| Field | CI reference | this run | yours | |", "|---|---|---|---|:-:|"]
    for r in parity.rows:
        rows.append(
            f"| {md.cell(r.label)} | {md.cell(r.reference)} | {md.cell(r.this_run)} | {md.cell(r.contributor)} "
            f"| {_parity_icon(r)} |"
        )
    return "\n".join(rows)


def _parity_section(parity: ParityReport) -> str:
    blocks = [_parity_table(parity)]
    # The paragraph below says how to paste, with more context than the advice line.
    advice = [a for a in parity.advice if a != PASTE_ADVICE]
    if advice:
        blocks.append("\n".join(f"- {md.prose(a)}" for a in advice))
    if not parity.contributor_pasted:
        blocks.append(
            "The **yours** column is empty because the PR description has no environment in it. To "
            "compare your machine too, run `python -m torch.utils.collect_env` and paste its output "
            "into the PR description; the next run picks it up."
        )
    blocks.append("<sub>✅ same · ❌ differs · ❔ not known on one side</sub>")
    return _details(_parity_summary(parity), "\n\n".join(blocks))


def _rfc_section(rfc: RfcReport) -> str:
    done = sum(item.done for item in rfc.items)
    if rfc.complete:
        summary = f"✅ <b>RFC checklist: all {_n(len(rfc.items), 'item')} done</b>"
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
    return _details(summary, "\n\n".join(blocks))


def _selection_part(selection: Selection, where: str) -> _Part:
    groups = _selection_groups(selection)
    cap = min(len(groups), limits.COMMENT_SELECTION_REASONS)

    def render(k: int | None) -> str:
        shown = groups[: cap if k is None else min(k, cap)]
        blocks = []
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
            blocks.append(f"…and {_n(len(groups) - len(shown), 'more reason')}: see {where}.")
        if selection.budget_dropped:
            dropped = sorted(selection.budget_dropped)
            names = ", ".join(md.code(n) for n in dropped[:10]) + (" …" if len(dropped) > 10 else "")
            blocks.append(
                f"{_n(len(dropped), 'selected test')} did not run because of the `tests.max_tests` "
                f"budget: {names}"
            )
        if not selection.whole_suite:
            blocks.append(f"Run everything with `{COMMAND} all`.")
        return _details(_selection_summary(selection), "\n\n".join(blocks))

    return _Part(label="test selection", priority=20, render=render, entries=cap, total=len(groups))


def _selection_summary(selection: Selection) -> str:
    ran = len(selection.tests)
    if selection.whole_suite:
        size = f" ({selection.total_tests:,} tests)" if selection.total_tests else ""
        return f"🎯 Tests: the whole suite{size}"
    if selection.total_tests:
        skipped = max(0, selection.total_tests - ran)
        return f"🎯 Tests: {ran:,} of {selection.total_tests:,} selected ({skipped:,} skipped as unaffected)"
    return f"🎯 Tests: {_n(ran, 'test')} selected"


def _selection_groups(selection: Selection) -> list[tuple[str, list[str]]]:
    """Selected tests grouped by why they were picked; biggest group first, then by name."""
    groups: dict[str, list[str]] = {}
    for test in selection.tests:
        groups.setdefault("; ".join(test.reasons) or "no reason recorded", []).append(test.nodeid)
    return sorted(((r, sorted(ids)) for r, ids in groups.items()), key=lambda g: (-len(g[1]), g[0]))


# --- Check runs -------------------------------------------------------------------------------------


class CheckRunOutput(Model):
    """One check run's state and output, in the shape GitHub's create/update endpoints take."""

    kind: CheckKind
    name: str
    status: CheckRunStatus
    conclusion: Conclusion | None = None
    title: str = Field(max_length=limits.CHECK_TITLE_MAX)
    summary: str
    text: str = ""
    annotations: list[dict[str, Any]] = Field(default_factory=list)

    @field_validator("summary", "text")
    @classmethod
    def _within_limit(cls, value: str) -> str:
        if not limits.fits(value, limits.CHECK_SUMMARY_MAX):
            raise ValueError(f"longer than GitHub's {limits.CHECK_SUMMARY_MAX:,} characters")
        return value

    @model_validator(mode="after")
    def _conclusion_iff_completed(self) -> CheckRunOutput:
        if (self.status == "completed") != (self.conclusion is not None):
            raise ValueError("a conclusion is given exactly when the status is completed")
        return self

    def request_body(self, annotations: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        """The JSON for POST /check-runs or PATCH /check-runs/{id}, with one batch of annotations.

        The caller adds ``head_sha``, ``details_url`` and the timestamps (the clock lives there).
        """
        output: dict[str, Any] = {"title": self.title, "summary": self.summary}
        if self.text:
            output["text"] = self.text
        if annotations:
            output["annotations"] = annotations
        body: dict[str, Any] = {"name": self.name, "status": self.status, "output": output}
        if self.conclusion is not None:
            body["conclusion"] = self.conclusion
        return body


def annotation_batches(annotations: Sequence[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Split annotations into GitHub's 50-per-request batches, in order.

    The first batch goes with the create (or completing) call, each later one in a PATCH of its
    own: GitHub appends annotations on every update. No annotations, no batches.
    """
    size = limits.ANNOTATIONS_PER_REQUEST
    return [list(annotations[i : i + size]) for i in range(0, len(annotations), size)]


def in_progress_title(step: str | None = None) -> str:
    """The title of a check run whose run has started: what it is doing now."""
    return f"Running {step}…" if step else "Preparing the environment…"


def render_queued_output(
    environment: str,
    *,
    queue_position: int | None = None,
    kinds: Sequence[CheckKind] = CHECK_KINDS,
) -> list[CheckRunOutput]:
    """The check runs created when a run is queued, one per check, status ``queued``."""
    place = f"#{md.ZWSP}{queue_position:,} in the GPU queue" if queue_position else "Waiting for a GPU runner"
    summary = f"Queued in environment {md.code(environment)}. This check updates when the run starts."
    return [
        CheckRunOutput(
            kind=k, name=check_run_name(k, environment), status="queued", title=place, summary=summary
        )
        for k in kinds
    ]


def render_in_progress_output(
    environment: str,
    *,
    step: str | None = None,
    kinds: Sequence[CheckKind] = CHECK_KINDS,
) -> list[CheckRunOutput]:
    """The check runs once the run has started, before any check has a result."""
    summary = f"Running in environment {md.code(environment)}."
    return [
        CheckRunOutput(
            kind=k,
            name=check_run_name(k, environment),
            status="in_progress",
            title=in_progress_title(step),
            summary=summary,
        )
        for k in kinds
    ]


def render_awaiting_approval_output(
    environment: str, *, reason: str, kinds: Sequence[CheckKind] = CHECK_KINDS
) -> list[CheckRunOutput]:
    """``action_required``: nothing runs until someone trusted approves this commit."""
    summary = limits.truncate(reason, limits.CHECK_SUMMARY_MAX - limits.SAFETY_MARGIN)
    return _completed_before_running(environment, kinds, "action_required", "Waiting for approval", summary)


def render_config_error_output(
    environment: str,
    *,
    problems: Sequence[str],
    path: str = CONFIG_PATH,
    kinds: Sequence[CheckKind] = CHECK_KINDS,
) -> list[CheckRunOutput]:
    """``failure`` on every check: a broken config runs nothing, and must not look like a pass."""
    listed = "\n".join(f"- {md.prose(p)}" for p in problems) or "- the file could not be read"
    summary = limits.truncate(
        f"paritybot could not read {md.code(path)}, so nothing ran:\n\n{listed}",
        limits.CHECK_SUMMARY_MAX - limits.SAFETY_MARGIN,
    )
    return _completed_before_running(environment, kinds, "failure", f"Invalid {path}", summary)


def _completed_before_running(
    environment: str, kinds: Sequence[CheckKind], conclusion: Conclusion, title: str, summary: str
) -> list[CheckRunOutput]:
    """Every check completed the same way, without a run: nothing ran, and each check says why."""
    return [
        CheckRunOutput(
            kind=k,
            name=check_run_name(k, environment),
            status="completed",
            conclusion=conclusion,
            title=title,
            summary=summary,
        )
        for k in kinds
    ]


def render_check_runs(report: RunReport) -> list[CheckRunOutput]:
    """One output per check, in :data:`CHECK_KINDS` order.

    A check with a result is ``completed`` even while the run goes on, so the lead can finish it
    early; one without a result is ``in_progress`` while the run runs. A stopped run (cancelled,
    aborted) completes every check as ``cancelled``, whatever finished before.
    """
    renderers = {
        CheckKind.PRECOMMIT: _precommit_run,
        CheckKind.DOCSTRINGS: _docstrings_run,
        CheckKind.TESTS: _tests_run,
        CheckKind.PARITY: _parity_run,
    }
    return [renderers[kind](report) for kind in CHECK_KINDS]


_CHECK_LIMIT = limits.CHECK_TEXT_MAX - limits.SAFETY_MARGIN


@dataclass(frozen=True)
class _Outcome:
    status: CheckRunStatus
    conclusion: Conclusion | None
    title: str


def _common_outcome(report: RunReport, kind: CheckKind, result: Any) -> _Outcome | None:
    """The outcome shared by every check: stopped, still running, never ran, not configured."""
    if report.state in _STOPPED:
        return _Outcome("completed", "cancelled", "Cancelled: the run was stopped")
    if result is None:
        if report.state in (RunState.QUEUED, RunState.RUNNING) and not report.error:
            return _Outcome("in_progress", None, in_progress_title(kind.value))
        if report.error:
            # A required check must not pass when the run broke before it.
            why = _one_line(report.error) if report.refused else "the run broke"
            return _Outcome("completed", "failure", f"Did not run: {why}")
        return _Outcome("completed", "neutral", "Did not run")
    status = getattr(result, "status", None)
    message = getattr(result, "message", "")
    if status == CheckStatus.NOT_CONFIGURED:
        return _Outcome("completed", "neutral", _one_line(message) or "Not configured")
    if status == CheckStatus.DISABLED:
        return _Outcome("completed", "skipped", "Disabled in the config")
    if status == CheckStatus.CANCELLED:
        return _Outcome("completed", "cancelled", "Cancelled")
    if status == CheckStatus.ERROR:
        # The runner words a timeout "timed out" (StepResult.describe_failure); people asked to tell
        # a timeout from a failure, and GitHub has a conclusion for it.
        timed_out = re.search(r"\btimed out\b", message or "", re.IGNORECASE) is not None
        return _Outcome(
            "completed", "timed_out" if timed_out else "failure", _one_line(message) or "Could not run"
        )
    return None


def _one_line(text: str, width: int = 120) -> str:
    line = " ".join(text.split())
    return line if len(line) <= width else line[: width - 1] + "…"


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
        title=_capitalised(_one_line(md.plain(outcome.title), limits.CHECK_TITLE_MAX)),
        summary=limits.truncate(summary, _CHECK_LIMIT),
        text=limits.truncate(text, _CHECK_LIMIT),
        annotations=annotations or [],
    )


def _run_header(report: RunReport) -> str:
    line = _about_line(report, None).removeprefix("<sub>").removesuffix("</sub>")
    return line[0].upper() + line[1:]


def _plain_output(report: RunReport, kind: CheckKind, outcome: _Outcome, result: Any) -> CheckRunOutput:
    summary = _run_header(report)
    if report.error and result is None:
        summary += "\n\n" + md.fence(limits.truncate(report.error, limits.COMMENT_RUN_ERROR_CHARS), "text")
    message = getattr(result, "message", "")
    if message:
        summary += "\n\n" + md.prose(message)
    output = getattr(result, "output", "")
    text = md.fence(limits.truncate(output, limits.CHECK_HOOK_OUTPUT_CHARS), "text") if output else ""
    return _check_output(report, kind, outcome, summary, text)


# --- pre-commit run ---------------------------------------------------------------------------------

# "path:LINE: message" or "path:LINE:COL: message", as ruff, flake8, mypy and pytest print them.
_LOCATION = re.compile(r"^(?P<path>[\w./+-][^\s:]*\.\w+):(?P<line>\d+):(?:(?P<col>\d+):)?\s*(?P<msg>.*)$")


def _precommit_run(report: RunReport) -> CheckRunOutput:
    pc = report.precommit
    outcome = _common_outcome(report, CheckKind.PRECOMMIT, pc)
    if outcome is not None:
        return _plain_output(report, CheckKind.PRECOMMIT, outcome, pc)
    assert pc is not None
    failed = [h for h in pc.hooks if h.status == HookStatus.FAILED]
    ran = [h for h in pc.hooks if h.status != HookStatus.SKIPPED]
    if pc.status == CheckStatus.FAILED:
        names = ", ".join(h.id for h in failed)
        title = f"{len(failed)} of {_n(len(ran), 'hook')} failed" + (f": {names}" if names else "")
        outcome = _Outcome("completed", "failure", title)
    else:
        outcome = _Outcome("completed", "success", f"All {_n(len(ran), 'hook')} passed")
    rows = ["| Hook | Result |", "|---|---|"]
    icons = {HookStatus.PASSED: "✅ passed", HookStatus.FAILED: "❌ failed", HookStatus.SKIPPED: "➖ skipped"}
    for h in pc.hooks:
        changed = " (changed files)" if h.files_modified else ""
        label = _hook_label(h, in_table=True)
        rows.append(f"| {label} | {icons[h.status]}{changed} |")
    summary = [_run_header(report), "\n".join(rows) if pc.hooks else md.prose(pc.message)]
    if pc.fix_command and failed:
        summary.append("Fix it locally, then commit and push:\n" + md.fence(pc.fix_command, "sh"))
    text = []
    for h in failed:
        if h.output.strip():
            out = limits.truncate(h.output.strip(), limits.CHECK_HOOK_OUTPUT_CHARS)
            text.append(f"### {_hook_label(h)}\n\n" + md.fence(out, "text"))
    if pc.diff.strip():
        text.append("### The fixes pre-commit made\n\n" + md.fence(pc.diff.rstrip("\n"), "diff"))
    annotations = [a for h in failed for a in _output_annotations(h.output, h.id)]
    return _check_output(
        report,
        CheckKind.PRECOMMIT,
        outcome,
        "\n\n".join(summary),
        _fit_blocks(text, "hook outputs and diff", "the runner's log"),
        _cap_annotations(annotations),
    )


def _output_annotations(output: str, hook_id: str) -> list[dict[str, Any]]:
    """Annotations from a failed hook's ``path:LINE[:COL]: message`` lines; other lines are ignored."""
    found = []
    for raw in output.splitlines():
        m = _LOCATION.match(raw.strip())
        if m is None or m["path"].startswith("/"):
            continue  # an absolute path is outside the repository; GitHub could not place it
        line = int(m["line"])
        if line < 1:
            continue
        found.append(
            _annotation(m["path"].removeprefix("./"), line, line, "failure", m["msg"] or raw, hook_id)
        )
    return found


def _annotation(path: str, start: int, end: int, level: str, message: str, title: str) -> dict[str, Any]:
    ann: dict[str, Any] = {
        "path": path,
        "start_line": start,
        "end_line": max(start, end),
        "annotation_level": level,
        "message": limits.truncate(
            md.plain(message.strip("\n").rstrip() or title), limits.ANNOTATION_MESSAGE_SOFT_MAX
        ),
    }
    if title:
        ann["title"] = _one_line(md.plain(title), limits.ANNOTATION_TITLE_MAX)
    return ann


def _cap_annotations(annotations: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return annotations[: limits.ANNOTATIONS_PER_RUN_MAX]


def _fit_blocks(blocks: list[str], label: str, where: str, sep: str = "\n\n") -> str:
    """Join blocks into a check run's text, keeping whole blocks from the front while they fit."""
    part = _Part(
        label=label,
        priority=0,
        render=lambda k: sep.join(blocks if k is None else blocks[:k]),
        entries=len(blocks),
        droppable=False,
    )

    def assemble(rendered: list[str], note: str) -> str:
        return "\n\n".join(x for x in [*rendered, note] if x)

    return _fit([part], _CHECK_LIMIT, assemble, where)


# --- docstrings run ---------------------------------------------------------------------------------


def _docstrings_run(report: RunReport) -> CheckRunOutput:
    d = report.docstrings
    outcome = _common_outcome(report, CheckKind.DOCSTRINGS, d)
    if outcome is not None:
        return _plain_output(report, CheckKind.DOCSTRINGS, outcome, d)
    assert d is not None
    findings = _sorted_findings(d.findings)
    checked = f"{_n(d.checked, 'changed public object')}"
    if findings:
        conclusion: Conclusion = "failure" if _blocks(d) else "neutral"
        outcome = _Outcome("completed", conclusion, f"{_n(len(findings), 'finding')} in {checked}")
    elif d.status == CheckStatus.FAILED:
        outcome = _Outcome("completed", "failure", _one_line(d.message) or "Failed")
    elif d.checked == 0:
        outcome = _Outcome("completed", "neutral", "No changed public objects to check")
    else:
        outcome = _Outcome("completed", "success", f"{checked} checked, all documented")
    header = _run_header(report)
    if d.style:
        header += f"\n\nDocstring style: {md.text(d.style)}."
    lines = [_finding_line(f) for f in findings]
    summary = (
        _fit_blocks([header + "\n", *lines], "findings", "the annotations", sep="\n") if findings else header
    )
    annotations = [
        _annotation(f.path, f.line, f.end_line or f.line, f.level.value, f.message, f.title) for f in findings
    ]
    text = ""
    if len(annotations) > limits.ANNOTATIONS_PER_RUN_MAX:
        text = f"Only the first {limits.ANNOTATIONS_PER_RUN_MAX:,} findings are annotated on the files."
    if d.message and findings:
        summary += "\n\n" + md.prose(d.message)
    return _check_output(report, CheckKind.DOCSTRINGS, outcome, summary, text, _cap_annotations(annotations))


# --- tests run --------------------------------------------------------------------------------------


def _tests_run(report: RunReport) -> CheckRunOutput:
    tests = report.tests
    outcome = _common_outcome(report, CheckKind.TESTS, tests)
    if outcome is not None and not (tests is not None and tests.results):
        return _plain_output(report, CheckKind.TESTS, outcome, tests)
    assert tests is not None
    failing = _failing_tests(tests)
    flaky = _flaky_tests(tests)
    counts = _test_counts(tests)
    if outcome is None:
        if failing or tests.status == CheckStatus.FAILED:
            outcome = _Outcome("completed", "failure", counts)
        elif not tests.results:
            outcome = _Outcome("completed", "neutral", "No tests selected")
        else:
            outcome = _Outcome("completed", "success", counts)
    else:
        # It broke or was stopped part-way: keep its conclusion, say what had finished.
        outcome = _Outcome(outcome.status, outcome.conclusion, f"{outcome.title} ({counts})")
    summary = [_run_header(report), "**" + _selection_summary(tests.selection).removeprefix("🎯 ") + "**"]
    if tests.message:
        summary.append(md.prose(tests.message))
    if failing:
        summary.append("Failing:\n" + _name_list(failing, headlines=True))
    if flaky:
        summary.append("Flaky (failed, then passed on a rerun):\n" + _name_list(flaky))
    if failing:
        summary.append(f"Rerun only the failures with `{COMMAND} failed`.")
    blocks = [_failure_detail(r) for r in failing] + [_failure_detail(r) for r in flaky]
    if tests.status == CheckStatus.ERROR and tests.output.strip():
        tail = "\n".join(tests.output.strip().splitlines()[-60:])
        blocks.insert(
            0, "### Last lines of the output\n\n" + md.fence(limits.truncate(tail, limits.CHECK_ERROR_CHARS))
        )
    annotations = [a for r in [*failing, *flaky] if (a := _test_annotation(r)) is not None]
    return _check_output(
        report,
        CheckKind.TESTS,
        outcome,
        _fit_blocks(summary, "this summary", "the details below"),
        _fit_blocks(blocks, "test details", "the annotations on the test files"),
        _cap_annotations(annotations),
    )


def _name_list(results: list[TestCaseResult], *, headlines: bool = False) -> str:
    shown = results[: limits.CHECK_LISTED_TESTS]
    lines = [_failure_name_line(r) if headlines else f"- {md.code(r.nodeid)}" for r in shown]
    if len(results) > len(shown):
        lines.append(f"- …and {len(results) - len(shown):,} more, annotated on their files")
    return "\n".join(lines)


def _test_counts(tests: TestsResult) -> str:
    parts = [
        (len(_failing_tests(tests)), "failed"),
        (tests.count(TestOutcome.FLAKY), "flaky"),
        (tests.count(TestOutcome.PASSED), "passed"),
        (tests.count(TestOutcome.SKIPPED), "skipped"),
    ]
    shown = [f"{n:,} {word}" for n, word in parts if n]
    return ", ".join(shown) if shown else "no test results"


def _failure_detail(r: TestCaseResult) -> str:
    word = {TestOutcome.FAILED: "failed", TestOutcome.ERROR: "error", TestOutcome.FLAKY: "flaky"}[r.outcome]
    lines = [f"### {md.code(r.nodeid)}", f"{word} · {_n(r.attempts, 'attempt')} · {r.duration_s:.1f} s"]
    if r.message.strip():
        lines.append(md.fence(limits.truncate(r.message.strip("\n"), limits.CHECK_ERROR_CHARS), "text"))
    if r.repro:
        lines.append(
            "Reproduce:\n" + md.fence(limits.truncate("\n".join(r.repro), limits.COMMENT_REPRO_CHARS), "sh")
        )
    return "\n\n".join(lines)


def nodeid_path(nodeid: str) -> str | None:
    """The file of a pytest node id (``tests/test_x.py::Test::test[p]`` → ``tests/test_x.py``).

    None when the id names no Python file (a unittest-style dotted name, a JUnit class name):
    such a failure cannot be placed on a file.
    """
    path = nodeid.split("::", 1)[0].split("[", 1)[0]
    if not path.endswith(".py") or path.startswith("/"):
        return None
    return path.removeprefix("./")


# Where a traceback names a frame: pytest's ``path:LINE:`` and Python's ``File "path", line N``.
_FRAMES = (
    re.compile(r"(?P<path>[^\s:\"'()\[\]]+\.py):(?P<line>\d+)\b"),
    re.compile(r"File \"(?P<path>[^\"]+\.py)\", line (?P<line>\d+)"),
)


def failure_line(path: str, message: str) -> int:
    """The line in ``path`` a traceback points at: its last frame in that file, else line 1.

    The last frame in the test's own file is the one nearest the failure. A frame's path is
    either the same relative path or an absolute one ending in it (``/workspace/tests/x.py``, as
    a container prints it); ``sub/test_x.py`` is NOT ``test_x.py``.
    """
    best: tuple[int, int] | None = None  # (position in the message, line)
    for pattern in _FRAMES:
        for m in pattern.finditer(message):
            found, number = m["path"], int(m["line"])
            same = found == path or (found.startswith("/") and found.endswith("/" + path))
            if same and number >= 1 and (best is None or m.start() > best[0]):
                best = (m.start(), number)
    return best[1] if best else 1


def _test_annotation(r: TestCaseResult) -> dict[str, Any] | None:
    path = nodeid_path(r.nodeid)
    if path is None:
        return None
    line = failure_line(path, r.message)
    level = "warning" if r.outcome == TestOutcome.FLAKY else "failure"
    # The hover box is small: the headline first, then the error as pytest printed it.
    headline = error_headline(r.message) or r.outcome.value
    if r.outcome == TestOutcome.FLAKY:
        headline = f"Flaky, passed on attempt {r.attempts}: {headline}"
    message = headline + ("\n\n" + r.message.strip("\n") if r.message.strip() else "")
    if r.repro:
        message += "\n\nReproduce:\n" + "\n".join(r.repro)
    return _annotation(path, line, line, level, message, r.nodeid)


# --- parity run -------------------------------------------------------------------------------------


def _parity_run(report: RunReport) -> CheckRunOutput:
    # Parity is information, never a failure: a contributor's other driver must not block a merge,
    # and a probe that saw nothing is the machine's problem, not the change's.
    parity = report.parity
    if report.state in _STOPPED:
        outcome = _Outcome("completed", "cancelled", "Cancelled: the run was stopped")
        return _plain_output(report, CheckKind.PARITY, outcome, None)
    if parity is None or not parity.rows:
        if parity is None and report.state in (RunState.QUEUED, RunState.RUNNING) and not report.error:
            outcome = _Outcome("in_progress", None, in_progress_title("the environment probe"))
        else:
            outcome = _Outcome("completed", "neutral", "No environment facts to compare")
        return _plain_output(report, CheckKind.PARITY, outcome, None)
    differs = _parity_differences(parity)
    if differs:
        labels = ", ".join(r.label for r in differs)
        outcome = _Outcome("completed", "neutral", f"{_n(len(differs), 'difference')}: {labels}")
    elif _parity_compared(parity):
        outcome = _Outcome(
            "completed", "success", f"No difference in {_n(_parity_compared(parity), 'field')}"
        )
    else:
        outcome = _Outcome("completed", "neutral", "Nothing to compare with: no CI reference")
    summary = [_run_header(report), _parity_table(parity)]
    if parity.advice:
        summary.append("\n".join(f"- {md.prose(a)}" for a in parity.advice))
    if not parity.contributor_pasted:
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
    return _fit_blocks(rows, "packages", "the probe's output", sep="\n")
