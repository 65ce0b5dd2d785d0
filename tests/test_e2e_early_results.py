"""Each check's run completes as soon as its result is known: pre-commit and the docstrings while
the tests still run, with the summary saying so; and a check run of this App that nothing will
finish (its run unknown) is completed rather than left open."""

from __future__ import annotations

from pathlib import Path

from botharness import REPO, BotHarness
from fakegithub import FakeGitHub
from finishing import CHECK_RUN, FAST, finished, view
from serveproc import DOCSTRINGS, GATED_CONFIG, PARITY, PRECOMMIT, TESTS


async def test_pre_commit_and_docstrings_complete_before_the_tests(
    fake_github: FakeGitHub, tmp_path: Path
) -> None:
    marks = tmp_path / "marks"
    marks.mkdir()
    bot = await BotHarness.create(fake_github, tmp_path, settings=FAST)
    fake_github.set_file(REPO, ".github/paritybot.yml", GATED_CONFIG.format(marks=marks), ref="main")
    try:
        assert await bot.send("pull_request", bot.pr_event("opened")) == 202

        def early() -> bool:
            runs = view(fake_github, REPO, 7, bot.sample.head_sha).runs
            return all(
                name in runs and runs[name][-1]["status"] == "completed" for name in (PRECOMMIT, DOCSTRINGS)
            )

        await bot.wait_for("pre-commit and docstrings completed", early)
        seen = view(fake_github, REPO, 7, bot.sample.head_sha)
        assert seen.runs[TESTS][-1]["status"] == "in_progress"  # the tests wait at their set-up
        await bot.wait_for(
            "the summary to show them",
            lambda: (
                "pre-commit, docstrings done" in view(fake_github, REPO, 7, bot.sample.head_sha).summaries[0]
            ),
        )
        summary = view(fake_github, REPO, 7, bot.sample.head_sha).summaries[0]
        assert "🔄 Running: tests (pre-commit, docstrings done)" in summary and "❌ pre-commit" in summary
        (marks / "open").touch()
        await bot.wait_for(
            "the run to finish", lambda: finished(view(fake_github, REPO, 7, bot.sample.head_sha))
        )

        # In GitHub's own log of requests: the completing update of each check, in order.
        completing = [
            fake_github.check_run(int(c.path.rsplit("/", 1)[1])).name
            for c in fake_github.calls_to("PATCH", CHECK_RUN)
            if c.status == 200 and (c.json or {}).get("status") == "completed"
        ]
        first = {name: completing.index(name) for name in (PRECOMMIT, DOCSTRINGS, TESTS)}
        assert first[PRECOMMIT] < first[TESTS] and first[DOCSTRINGS] < first[TESTS]
        # Completed once, early: the final update does not send the same check again.
        assert completing.count(PRECOMMIT) == 1 and completing.count(DOCSTRINGS) == 1
    finally:
        (marks / "open").touch()
        await bot.stop()


async def test_an_open_check_run_of_an_unknown_run_is_completed(
    fake_github: FakeGitHub, tmp_path: Path
) -> None:
    # No periodic pass: the run's own publication, at its end, is what completes the stray.
    bot = await BotHarness.create(fake_github, tmp_path, settings={**FAST, "reconcile_interval_s": 3600})
    try:
        stray = fake_github.add_check_run(
            REPO, bot.sample.head_sha, TESTS, external_id="0123456789abcdef/tests"
        )
        assert await bot.send("pull_request", bot.pr_event("opened")) == 202
        await bot.wait_for(
            "the stray to be completed",
            lambda: fake_github.check_run(stray.id).states[-1]["status"] == "completed",
        )
        state = fake_github.check_run(stray.id).states[-1]
        assert (state["conclusion"], state["output"]["title"]) == ("cancelled", "Abandoned")
        runs = view(fake_github, REPO, 7, bot.sample.head_sha)
        assert runs.open_runs() == [] and len(runs.runs[TESTS]) == 2  # the stray, and the run's own
        assert dict(runs.names()) == {PRECOMMIT: 1, DOCSTRINGS: 1, TESTS: 2, PARITY: 1}
    finally:
        await bot.stop()
