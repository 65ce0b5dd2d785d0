"""The sticky comment and the check runs, as users read them on GitHub.

Snapshot files in tests/snapshots/ hold the rendered Markdown of realistic runs; they are meant to
be read by eye. ``UPDATE_SNAPSHOTS=1 pytest tests/test_report.py`` rewrites them after a deliberate
change; otherwise a difference fails the test and shows the diff.
"""

from __future__ import annotations

import difflib
import itertools
import json
import os
import random
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import report_samples as samples
from fakegithub import FakeGitHub
from gidgethub.aiohttp import GitHubAPI
from gidgethub.apps import get_installation_access_token
from pydantic import ValidationError

from bot.core import limits
from bot.core.kinds import CHECK_KINDS, CheckKind, Stage
from bot.core.models import (
    CheckStatus,
    DocstringResult,
    Finding,
    Level,
    PrecommitResult,
    RfcItem,
    RfcReport,
    RunState,
    TestCaseResult,
    TestOutcome,
    TestsResult,
)
from bot.core.verdict import Verdict, verdict
from bot.render.annotations import annotation_batches, failure_line, nodeid_path
from bot.render.check_results import render_check_runs
from bot.render.check_runs import (
    CheckRunOutput,
    check_run_name,
    in_progress_title,
    render_awaiting_approval_output,
    render_config_error_output,
    render_in_progress_output,
    render_queued_output,
)
from bot.render.comment import STICKY_MARKER, needs_new_comment, render_comment
from bot.render.phrases import error_headline

SNAPSHOTS = Path(__file__).parent / "snapshots"
RUN_URL = f"https://github.com/{samples.REPO}/runs/26012345678"
APPROVAL_REASON = (
    "@newcomer is not yet trusted to run code from a fork on the GPU machines. To approve commit "
    "`3f9c2e1`, members of the organisation, collaborators or anyone with write access can comment "
    "`/retest-gpu`."
)


# --- Snapshots ----------------------------------------------------------------------------------------


def _checks_markdown(outputs: list[CheckRunOutput]) -> str:
    """The check runs as one Markdown page: what each run's page on GitHub shows, in order."""
    pages = []
    for out in outputs:
        head = f"# {out.name}\n\n`{out.status}` / `{out.conclusion}` — **{out.title}**"
        page = [head, "## Summary", out.summary]
        if out.text:
            page += ["## Text", out.text]
        if out.annotations:
            page += ["## Annotations", "```json\n" + json.dumps(out.annotations, indent=1) + "\n```"]
        pages.append("\n\n".join(page))
    return "\n\n---\n\n".join(pages) + "\n"


Case = Callable[[], tuple[str, str]]

CASES: dict[str, Case] = {
    "all_green": lambda: (
        render_comment(samples.all_green(), stage=Stage.DONE, check_run_url=RUN_URL),
        _checks_markdown(render_check_runs(samples.all_green())),
    ),
    "failing": lambda: (
        render_comment(samples.failing_run(), stage=Stage.DONE, check_run_url=RUN_URL),
        _checks_markdown(render_check_runs(samples.failing_run())),
    ),
    "host_runner": lambda: (
        render_comment(samples.host_run(), stage=Stage.DONE),
        _checks_markdown(render_check_runs(samples.host_run())),
    ),
    "run_error": lambda: (
        render_comment(samples.run_error(), stage=Stage.DONE, check_run_url=RUN_URL),
        _checks_markdown(render_check_runs(samples.run_error())),
    ),
    "not_run": lambda: (
        render_comment(samples.refused_run(), stage=Stage.DONE, check_run_url=RUN_URL),
        _checks_markdown(render_check_runs(samples.refused_run())),
    ),
    "whole_suite_timeout": lambda: (
        render_comment(samples.whole_suite_timeout(), stage=Stage.DONE, check_run_url=RUN_URL),
        _checks_markdown(render_check_runs(samples.whole_suite_timeout())),
    ),
    "cancelled": lambda: (
        render_comment(
            samples.cancelled_run(),
            stage=Stage.CANCELLED,
            notice="Superseded by a push of `9e8d7c6`; a new run is queued.",
        ),
        _checks_markdown(render_check_runs(samples.cancelled_run())),
    ),
    "config_error": lambda: (
        render_comment(
            None, stage=Stage.CONFIG_ERROR, notice="\n".join(f"- {p}" for p in samples.CONFIG_PROBLEMS)
        ),
        _checks_markdown(render_config_error_output("cuda12", problems=samples.CONFIG_PROBLEMS)),
    ),
    "queued": lambda: (
        render_comment(None, stage=Stage.QUEUED, queue_position=3),
        _checks_markdown(render_queued_output("cuda12", queue_position=3)),
    ),
    "queued_after_failure": lambda: (
        render_comment(samples.failing_run(), stage=Stage.QUEUED, queue_position=1, check_run_url=RUN_URL),
        _checks_markdown(render_in_progress_output("cuda12", step="tests")),
    ),
    "running": lambda: (
        render_comment(samples.running_run(), stage=Stage.RUNNING, check_run_url=RUN_URL),
        _checks_markdown(render_check_runs(samples.running_run())),
    ),
    "awaiting_approval": lambda: (
        render_comment(None, stage=Stage.AWAITING_APPROVAL, notice=APPROVAL_REASON),
        _checks_markdown(render_awaiting_approval_output("cuda12", reason=APPROVAL_REASON)),
    ),
}


def _compare_snapshot(path: Path, rendered: str) -> None:
    if os.environ.get("UPDATE_SNAPSHOTS") == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(rendered, encoding="utf-8")
        return
    if not path.exists():
        pytest.fail(f"no snapshot {path.name}: run with UPDATE_SNAPSHOTS=1, then read it before committing")
    expected = path.read_text(encoding="utf-8")
    if rendered != expected:
        diff = "".join(
            difflib.unified_diff(
                expected.splitlines(keepends=True),
                rendered.splitlines(keepends=True),
                fromfile=f"{path.name} (snapshot)",
                tofile=f"{path.name} (rendered)",
            )
        )
        pytest.fail(f"{path.name} differs from its snapshot:\n{diff}")


@pytest.mark.parametrize("case", sorted(CASES))
def test_snapshot(case: str) -> None:
    comment, checks = CASES[case]()
    _compare_snapshot(SNAPSHOTS / f"{case}.md", comment)
    _compare_snapshot(SNAPSHOTS / f"{case}.checks.md", checks)


def test_every_snapshot_file_belongs_to_a_case() -> None:
    """A renamed case must not leave a stale snapshot behind for reviewers to read."""
    expected = {f"{c}.md" for c in CASES} | {f"{c}.checks.md" for c in CASES}
    assert {p.name for p in SNAPSHOTS.glob("*.md")} == expected


# --- The sticky comment -------------------------------------------------------------------------------


@pytest.mark.parametrize("stage", list(Stage))
def test_every_stage_starts_with_the_marker_and_ends_with_the_commands(stage: Stage) -> None:
    report = None if stage in (Stage.CONFIG_ERROR, Stage.AWAITING_APPROVAL) else samples.failing_run()
    body = render_comment(report, stage=stage)
    assert body.startswith(STICKY_MARKER + "\n")
    for command in (
        "`/retest-gpu`",
        "`/retest-gpu failed`",
        "`/retest-gpu all`",
        "`env=NAME`",
        "`/retest-gpu help`",
    ):
        assert command in body.rsplit("---", 1)[1]


def test_failing_run_top_line_counts_and_where_it_ran() -> None:
    lines = render_comment(samples.failing_run(), stage=Stage.DONE).splitlines()
    assert lines[2] == (
        "### ❌ 2 tests failed · ⚠️ 1 flaky · ❌ pre-commit · ⚠️ 3 docstrings · ⚠️ 5 environment differences"
    )
    assert "as of commit `3f9c2e1` in image `ghcr.io/acme/fastconv-ci@sha256:9a1b2c3d4e5f`" in lines[4]


def test_failures_come_first_and_carry_copy_pasteable_repro() -> None:
    body = render_comment(samples.failing_run(), stage=Stage.DONE)
    order = [
        "failing tests",
        "pre-commit: 3 hooks failed",
        "flaky test",
        "docstring findings",
        "RFC",
        "Environment parity",
        "🎯 Tests",
    ]
    positions = [body.index(marker) for marker in order]
    assert positions == sorted(positions)
    repro = "\n".join(samples.repro("tests/test_conv.py::test_conv2d_matches_reference[float16-3x3]"))
    assert f"```sh\n{repro}\n```" in body


def test_host_run_says_so_and_names_no_image() -> None:
    body = render_comment(samples.host_run(), stage=Stage.DONE)
    assert (
        "on the runner's host (environment `host`: `PARITYBOT_RUNNER=host`, and the code's author is trusted)"
        in body
    )
    assert "sha256" not in body
    not_run = "Not run: pre-commit (no .pre-commit-config.yaml in the repository) · docstrings (disabled"
    assert not_run in body


def test_a_refused_run_says_nothing_ran_and_why_in_the_comment_and_every_check_run() -> None:
    report = samples.refused_run()
    body = render_comment(report, stage=Stage.DONE)
    assert "### ⛔ Not run" in body and "no runner started" in body
    assert "on the runner's host" not in body and "machine's fault" not in body
    assert "PARITYBOT_DEFAULT_IMAGE" in body
    outputs = render_check_runs(report)
    for out in outputs:
        assert "PARITYBOT_DEFAULT_IMAGE" in out.summary
        if out.kind != CheckKind.PARITY:  # parity is information, never a failure
            assert out.conclusion == "failure"  # a required check must not pass
            assert out.title.startswith("Did not run: no environment image configured")


def test_missing_contributor_environment_explains_how_to_paste_it() -> None:
    body = render_comment(samples.all_green(), stage=Stage.DONE)
    assert "python -m torch.utils.collect_env" in body
    pasted = render_comment(samples.failing_run(), stage=Stage.DONE)
    assert "torch.utils.collect_env" not in pasted


def test_rfc_checklist_all_done_state() -> None:
    report = samples.failing_run()
    report.rfc = RfcReport(
        triggered=True,
        reasons=["adds a dependency: triton"],
        items=[RfcItem(text="Motivation", done=True), RfcItem(text="Link to the RFC", done=True)],
        rfc_link="https://github.com/acme/fastconv/discussions/77",
    )
    body = render_comment(report, stage=Stage.DONE)
    assert "✅ <b>RFC checklist: all 2 items done</b>" in body
    assert "- ☑ Link to the RFC" in body
    assert "RFC: <https://github.com/acme/fastconv/discussions/77>" in body
    assert "- [ ]" not in body  # nothing left to copy


def test_queue_position_and_what_runs_now() -> None:
    assert "#\u200b1 in line (next up)" in render_comment(None, stage=Stage.QUEUED, queue_position=1)
    assert "#\u200b4 in line (3 ahead)" in render_comment(None, stage=Stage.QUEUED, queue_position=4)
    running = render_comment(samples.running_run(), stage=Stage.RUNNING)
    assert "### 🔄 Running: tests (pre-commit, docstrings done)" in running
    assert "### 🔄 Running: preparing the environment" in render_comment(None, stage=Stage.RUNNING)


def test_bad_arguments_are_refused_with_a_reason() -> None:
    with pytest.raises(ValueError, match="needs its report"):
        render_comment(None, stage=Stage.DONE)
    with pytest.raises(ValueError, match="counts from 1"):
        render_comment(None, stage=Stage.QUEUED, queue_position=0)


def test_report_text_cannot_break_the_markdown_or_ping_people() -> None:
    report = samples.failing_run()
    assert report.tests is not None and report.docstrings is not None
    hostile = "```\n</details>\n@octocat see <script>alert(1)</script>\n```"
    report.tests.results[0].message = hostile
    report.docstrings.findings[0].message = "ask @octocat about <b>this</b> | pipe"
    body = render_comment(report, stage=Stage.DONE)
    # The error sits in a fence longer than any backtick run inside it, so it cannot close early.
    assert "````\n" + hostile + "\n````" in body
    assert "ask @\u200boctocat about &lt;b&gt;this&lt;/b&gt; \\| pipe" in body
    outside_code = body.replace(hostile, "")
    assert "@octocat" not in outside_code


def test_output_is_deterministic_whatever_the_input_order() -> None:
    report = samples.failing_run()
    shuffled = samples.failing_run()
    assert shuffled.tests is not None and shuffled.docstrings is not None
    rng = random.Random(7)
    rng.shuffle(shuffled.tests.results)
    rng.shuffle(shuffled.tests.selection.tests)
    rng.shuffle(shuffled.docstrings.findings)
    assert render_comment(report, stage=Stage.DONE) == render_comment(shuffled, stage=Stage.DONE)
    assert render_check_runs(report) == render_check_runs(shuffled)


# --- Size limits --------------------------------------------------------------------------------------


def test_500_failing_tests_make_one_comment_within_the_limit_with_a_cut_note() -> None:
    report = samples.many_failures(500)
    body = render_comment(report, stage=Stage.DONE, check_run_url=RUN_URL)
    assert limits.github_len(body) < limits.COMMENT_BODY_MAX
    assert body.startswith(STICKY_MARKER)
    assert "❌ 501 tests failed" in body
    assert "see the [check runs](" + RUN_URL + ")" in body  # where the rest is
    assert "`/retest-gpu failed`" in body
    first = sorted(r.nodeid for r in report.tests.results if r.outcome != TestOutcome.PASSED)[0]  # type: ignore[union-attr]
    assert f"**`{first}`**" in body  # the most important entries survive


def test_huge_sections_are_cut_lowest_priority_first_and_named() -> None:
    report = samples.many_failures(500)
    assert report.tests is not None
    # Failures so large that the per-entry caps alone cannot keep the comment small: long node ids.
    for r in report.tests.results:
        r.nodeid = r.nodeid.replace("x" * 40, "y" * 900)
    body = render_comment(report, stage=Stage.DONE)
    assert limits.github_len(body) < limits.COMMENT_BODY_MAX
    note = next(line for line in body.splitlines() if line.startswith("✂️"))
    assert "left out " in note and "test selection" in note
    assert "🎯 Tests" not in body  # the lowest-priority section went first
    assert "shortened failing tests (first " in note and " of 501)" in note
    assert note.endswith("The rest is in the paritybot check runs of this commit.")
    # What was cut is not there; what was kept is whole.
    markers = {
        "pre-commit": "pre-commit: 3 hooks failed",
        "docstring findings": "docstring findings</b>",
        "RFC checklist": "RFC checklist:",
        "environment parity": "Environment parity",
    }
    for label, marker in markers.items():
        assert (label in note.split(";")[0]) == (marker not in body), label


def test_a_notice_of_any_size_still_fits() -> None:
    body = render_comment(None, stage=Stage.CONFIG_ERROR, notice="- `x`: bad\n" * 100_000)
    assert limits.github_len(body) < limits.COMMENT_BODY_MAX
    assert "characters cut" in body


def test_500_failures_check_runs_stay_within_limits_and_annotate_every_failure() -> None:
    report = samples.many_failures(500)
    outputs = {o.kind: o for o in render_check_runs(report)}
    for out in outputs.values():
        assert limits.github_len(out.summary) <= limits.CHECK_SUMMARY_MAX
        assert limits.github_len(out.text) <= limits.CHECK_TEXT_MAX
        assert len(out.title) <= limits.CHECK_TITLE_MAX
        for ann in out.annotations:
            assert len(ann["title"]) <= limits.ANNOTATION_TITLE_MAX
            assert len(ann["message"].encode()) <= limits.ANNOTATION_MESSAGE_MAX
    tests = outputs[CheckKind.TESTS]
    # 500 node ids with a file; the unittest-style id has none and gets no annotation.
    assert len(tests.annotations) == 500
    assert {a["start_line"] for a in tests.annotations} == {10 + i for i in range(500)}
    assert "✂️" in tests.text
    batches = annotation_batches(tests.annotations)
    assert all(1 <= len(b) <= limits.ANNOTATIONS_PER_REQUEST for b in batches)
    assert list(itertools.chain.from_iterable(batches)) == tests.annotations
    assert len(outputs[CheckKind.DOCSTRINGS].annotations) == 300


@pytest.mark.parametrize("count", [0, 1, 49, 50, 51, 100, 101])
def test_annotation_batches_boundaries(count: int) -> None:
    anns = [{"path": "a.py", "start_line": i + 1} for i in range(count)]
    batches = annotation_batches(anns)
    assert [len(b) for b in batches] == [min(50, count - i) for i in range(0, count, 50)]
    assert [a for b in batches for a in b] == anns


def test_check_run_output_refuses_what_github_would_refuse() -> None:
    with pytest.raises(ValidationError, match="65,535"):
        CheckRunOutput(kind=CheckKind.TESTS, name="t", status="in_progress", title="t", summary="x" * 65_536)
    with pytest.raises(ValidationError, match="exactly when the status is completed"):
        CheckRunOutput(kind=CheckKind.TESTS, name="t", status="completed", title="t", summary="s")


# --- Check-run conclusions ----------------------------------------------------------------------------


def _conclusions(report: Any) -> dict[CheckKind, str | None]:
    return {o.kind: o.conclusion for o in render_check_runs(report)}


@pytest.mark.parametrize(
    "build",
    [samples.all_green, samples.failing_run, samples.host_run, samples.running_run, samples.run_error],
)
def test_a_stopped_run_is_cancelled_never_success(build: Callable[[], Any]) -> None:
    report = build()
    report.state = RunState.CANCELLED
    assert set(_conclusions(report).values()) == {"cancelled"}
    assert verdict(report) == Verdict.CANCELLED


def test_conclusions_of_a_failing_run() -> None:
    assert _conclusions(samples.failing_run()) == {
        CheckKind.PRECOMMIT: "failure",
        CheckKind.DOCSTRINGS: "neutral",  # warnings only: advice, not a block
        CheckKind.TESTS: "failure",
        CheckKind.PARITY: "neutral",  # parity informs, never blocks
    }


def test_all_green_is_success_everywhere() -> None:
    assert set(_conclusions(samples.all_green()).values()) == {"success"}


def test_nothing_configured_is_neutral_not_success() -> None:
    report = samples.all_green()
    report.precommit = PrecommitResult(status=CheckStatus.NOT_CONFIGURED)
    report.docstrings = DocstringResult(status=CheckStatus.NOT_CONFIGURED)
    report.tests = TestsResult(status=CheckStatus.PASSED)  # nothing selected, nothing ran
    report.parity = None
    assert set(_conclusions(report).values()) == {"neutral"}
    disabled = samples.host_run()
    assert _conclusions(disabled)[CheckKind.DOCSTRINGS] == "skipped"


def test_a_broken_run_fails_the_checks_it_never_reached() -> None:
    outputs = render_check_runs(samples.run_error())
    assert {o.kind: o.conclusion for o in outputs} == {
        CheckKind.PRECOMMIT: "failure",
        CheckKind.DOCSTRINGS: "failure",
        CheckKind.TESTS: "failure",
        CheckKind.PARITY: "neutral",
    }
    assert all("pull access denied" in o.summary or "denied" in o.summary for o in outputs)


def test_a_timeout_is_told_apart_from_a_failure() -> None:
    tests = next(o for o in render_check_runs(samples.whole_suite_timeout()) if o.kind == CheckKind.TESTS)
    assert tests.conclusion == "timed_out"
    assert (
        tests.title
        == "Tests: timed out after 1800 s and was killed (1 passed · 0 failed · 0 skipped · 0 deselected)"
    )


def test_a_running_report_completes_finished_checks_early() -> None:
    outputs = {o.kind: o for o in render_check_runs(samples.running_run())}
    assert outputs[CheckKind.PRECOMMIT].conclusion == "success"
    assert (outputs[CheckKind.TESTS].status, outputs[CheckKind.TESTS].conclusion) == ("in_progress", None)
    assert outputs[CheckKind.TESTS].title == in_progress_title("tests") == "Running tests…"


def test_lifecycle_outputs_name_every_check_consistently() -> None:
    names = [check_run_name(k, "cuda12") for k in CHECK_KINDS]
    assert names == [
        "paritybot / pre-commit (cuda12)",
        "paritybot / docstrings (cuda12)",
        "paritybot / tests (cuda12)",
        "paritybot / parity (cuda12)",
    ]
    for outputs in (
        render_queued_output("cuda12", queue_position=2),
        render_in_progress_output("cuda12", step="pre-commit"),
        render_awaiting_approval_output("cuda12", reason=APPROVAL_REASON),
        render_config_error_output("cuda12", problems=["`x`: unknown key"]),
        render_check_runs(samples.failing_run()),
    ):
        assert [o.name for o in outputs] == names
    assert {o.status for o in render_queued_output("cuda12")} == {"queued"}
    assert render_queued_output("cuda12", queue_position=2)[0].title == "#\u200b2 in the GPU queue"
    assert {o.conclusion for o in render_awaiting_approval_output("cuda12", reason="x")} == {
        "action_required"
    }
    assert {o.conclusion for o in render_config_error_output("cuda12", problems=[])} == {"failure"}


# --- Annotations --------------------------------------------------------------------------------------


def _tests_annotations(results: list[TestCaseResult]) -> list[dict[str, Any]]:
    report = samples.all_green()
    report.tests = TestsResult(status=CheckStatus.FAILED, results=results)
    return next(o for o in render_check_runs(report) if o.kind == CheckKind.TESTS).annotations


def test_failing_test_annotation_points_at_the_traceback_line() -> None:
    failed = TestCaseResult(
        nodeid="tests/test_conv.py::test_a[1]", outcome=TestOutcome.FAILED, message=samples.CONV_FAILURE
    )
    no_line = TestCaseResult(
        nodeid="tests/test_b.py::TestB::test_b", outcome=TestOutcome.ERROR, message="fixture 'gpu' not found"
    )
    no_file = TestCaseResult(
        nodeid="test_ops.TestOps.test_add", outcome=TestOutcome.FAILED, message="x.py:3: boom"
    )
    anns = _tests_annotations([failed, no_line, no_file])
    assert [(a["path"], a["start_line"], a["annotation_level"]) for a in anns] == [
        ("tests/test_b.py", 1, "failure"),
        ("tests/test_conv.py", 57, "failure"),
    ]
    assert anns[1]["title"] == "tests/test_conv.py::test_a[1]"
    assert anns[1]["message"].startswith("AssertionError: Tensor-likes are not close!\n\n")


def test_flaky_test_annotation_is_a_warning() -> None:
    flaky = TestCaseResult(
        nodeid="tests/test_dist.py::test_allreduce_two_gpus",
        outcome=TestOutcome.FLAKY,
        attempts=2,
        message=samples.FLAKY_FAILURE,
    )
    (ann,) = _tests_annotations([flaky])
    assert (ann["start_line"], ann["annotation_level"]) == (41, "warning")
    assert ann["message"].startswith("Flaky, passed on attempt 2: torch.distributed.DistNetworkError")


@pytest.mark.parametrize(
    ("message", "line"),
    [
        ("tests/test_x.py:42: AssertionError", 42),
        ("tests/test_x.py:10: in test\n    check()\ntests/test_x.py:88: in check\nE  assert 0", 88),
        ("/workspace/tests/test_x.py:17: in test_y", 17),
        ('  File "/home/ci/repo/tests/test_x.py", line 23, in test_y', 23),
        ("src/tests/test_x.py:5: in other", 1),  # a different file with the same tail
        ("fastconv/ops.py:90: RuntimeError", 1),  # the frame is outside the test file
        ("no traceback at all", 1),
        ("tests/test_x.py:0: weird", 1),
    ],
)
def test_failure_line_reads_path_line_frames(message: str, line: int) -> None:
    assert failure_line("tests/test_x.py", message) == line


@pytest.mark.parametrize(
    ("nodeid", "path"),
    [
        ("tests/test_x.py::TestA::test_b[p::q]", "tests/test_x.py"),
        ("tests/test_x.py", "tests/test_x.py"),
        ("./tests/test_x.py::t", "tests/test_x.py"),
        ("test_ops.TestOps.test_add", None),
        ("/abs/tests/test_x.py::t", None),
    ],
)
def test_nodeid_path(nodeid: str, path: str | None) -> None:
    assert nodeid_path(nodeid) == path


def test_hook_output_locations_become_annotations() -> None:
    pre = next(o for o in render_check_runs(samples.failing_run()) if o.kind == CheckKind.PRECOMMIT)
    assert [(a["path"], a["start_line"], a["title"]) for a in pre.annotations] == [
        ("fastconv/ops.py", 91, "ruff"),
        ("fastconv/ops.py", 7, "ruff"),
    ]


def test_docstring_findings_become_annotations_with_their_level() -> None:
    report = samples.all_green()
    report.docstrings = DocstringResult(
        status=CheckStatus.FAILED,
        findings=[
            Finding(path="a.py", line=9, end_line=4, level=Level.FAILURE, message="bad", title="t"),
            Finding(path="a.py", line=3, level=Level.NOTICE, message="meh"),
        ],
    )
    out = next(o for o in render_check_runs(report) if o.kind == CheckKind.DOCSTRINGS)
    assert out.conclusion == "failure"  # a failure-level finding blocks
    assert out.annotations == [
        {"path": "a.py", "start_line": 3, "end_line": 3, "annotation_level": "notice", "message": "meh"},
        {
            "path": "a.py",
            "start_line": 9,
            "end_line": 9,
            "annotation_level": "failure",
            "message": "bad",
            "title": "t",
        },
    ]
    assert verdict(report) == Verdict.FAIL


def test_error_headline() -> None:
    assert error_headline(samples.CONV_FAILURE) == "AssertionError: Tensor-likes are not close!"
    assert error_headline("Traceback:\nValueError: no GPU") == "ValueError: no GPU"
    assert error_headline("\n\nsomething odd\n") == "something odd"


# --- Verdicts and notifications -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("build", "expected"),
    [
        (samples.all_green, Verdict.PASS),
        (samples.failing_run, Verdict.FAIL),
        (samples.host_run, Verdict.PASS),
        (samples.run_error, Verdict.ERROR),
        (samples.whole_suite_timeout, Verdict.ERROR),
        (samples.cancelled_run, Verdict.CANCELLED),
    ],
)
def test_verdict_of_each_sample(build: Callable[[], Any], expected: Verdict) -> None:
    assert verdict(build()) == expected


def test_flaky_only_and_docstring_warnings_do_not_fail() -> None:
    report = samples.failing_run()
    assert report.tests is not None
    report.precommit = samples.precommit_passed()
    report.tests.results = [r for r in report.tests.results if r.outcome != TestOutcome.FAILED]
    report.tests.status = CheckStatus.PASSED
    assert verdict(report) == Verdict.FLAKY_ONLY


_PREVIOUS: list[Verdict | None] = [None, *Verdict]


@pytest.mark.parametrize(("previous", "current"), list(itertools.product(_PREVIOUS, list(Verdict))))
def test_needs_new_comment_truth_table(previous: Verdict | None, current: Verdict) -> None:
    # A new comment (a notification) only when a failure is news: first failure, or pass → fail.
    expected = current == Verdict.FAIL and previous in (
        None,
        Verdict.PASS,
        Verdict.FLAKY_ONLY,
        Verdict.ERROR,
        Verdict.CANCELLED,
        Verdict.NOTHING_TO_CHECK,
    )
    assert needs_new_comment(previous, current) is expected


def test_needs_new_comment_named_cases() -> None:
    assert needs_new_comment(Verdict.PASS, Verdict.FAIL)
    assert needs_new_comment(None, Verdict.FAIL)
    assert not needs_new_comment(Verdict.FAIL, Verdict.FAIL)
    assert not needs_new_comment(Verdict.FAIL, Verdict.PASS)
    assert not needs_new_comment(None, Verdict.PASS)


# --- Against GitHub's API description -----------------------------------------------------------------


@pytest.fixture
async def gh(fake_github: FakeGitHub) -> AsyncIterator[tuple[GitHubAPI, str]]:
    fake_github.add_repo(samples.REPO, installation_id=5)
    fake_github.add_pull(samples.REPO, samples.PR, head_sha=samples.HEAD_SHA, author="contributor")
    async with aiohttp.ClientSession() as session:
        api = GitHubAPI(session, "paritybot-tests", base_url=fake_github.url)
        token = await get_installation_access_token(
            api, installation_id="5", app_id=str(fake_github.app_id), private_key=fake_github.private_key_pem
        )
        yield api, token["token"]


async def test_check_runs_lifecycle_is_accepted_and_annotations_accumulate(
    fake_github: FakeGitHub, gh: tuple[GitHubAPI, str]
) -> None:
    """queued → in_progress → completed with every annotation, as GitHub's schema checks them."""
    api, token = gh
    report = samples.many_failures(120)
    ids = {}
    for out in render_queued_output(report.environment, queue_position=2):
        run = await api.post(
            f"/repos/{samples.REPO}/check-runs",
            data={**out.request_body(), "head_sha": report.head_sha},
            oauth_token=token,
        )
        ids[out.kind] = run["url"]
    for out in render_in_progress_output(report.environment, step="pre-commit"):
        await api.patch(ids[out.kind], data=out.request_body(), oauth_token=token)
    for out in render_check_runs(report):
        batches = annotation_batches(out.annotations) or [[]]
        await api.patch(ids[out.kind], data=out.request_body(batches[0]), oauth_token=token)
        for batch in batches[1:]:
            await api.patch(ids[out.kind], data=out.request_body(batch), oauth_token=token)
    by_name = {r.name: r for r in fake_github.check_runs(samples.REPO)}
    for out in render_check_runs(report):
        stored = by_name[out.name]
        assert stored.conclusion == out.conclusion
        assert stored.annotations == out.annotations
    assert len(by_name[check_run_name(CheckKind.TESTS, "cuda12")].annotations) == 120


async def test_comment_is_accepted_by_github(fake_github: FakeGitHub, gh: tuple[GitHubAPI, str]) -> None:
    api, token = gh
    body = render_comment(samples.many_failures(500), stage=Stage.DONE)
    posted = await api.post(
        f"/repos/{samples.REPO}/issues/{samples.PR}/comments", data={"body": body}, oauth_token=token
    )
    assert posted["body"] == body
