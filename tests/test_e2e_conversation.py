"""The PR conversation end to end: `/retest-gpu`, trust and approvals, superseded runs, re-runs,
closing, config errors — real payloads over HTTP, the real bot, the fake GitHub checking the spec.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import payloads
from botharness import REPO, BotHarness, Gate, bot
from fakegithub import FakeGitHub

from bot.core.models import RunScope, RunState


async def comment(
    bot: BotHarness, body: str, *, user: str = "maintainer", association: str = "MEMBER"
) -> int:
    """Post a comment as a user on the fake, then deliver GitHub's webhook for it."""
    posted = bot.fake.add_comment(REPO, 7, body, user=user, author_association=association)
    payload = payloads.issue_comment_event(
        "created",
        body=body,
        commenter=user,
        author_association=association,
        comment_id=posted.id,
        number=7,
        repo_full_name=REPO,
        clone_url=bot.clone_url,
        installation_id=1,
        api_url=bot.fake.url,
    )
    assert await bot.send("issue_comment", payload) == 202
    return posted.id


async def handled(bot: BotHarness, count: int) -> None:
    await bot.wait_for(
        f"{count} deliveries handled",
        lambda: bot.store.delivery_status_count("dispatched") >= count,
    )


def reactions(bot: BotHarness, comment_id: int) -> list[str]:
    return [r.content for r in bot.fake.reactions(comment_id)]


def replies(bot: BotHarness) -> list[str]:
    from bot.render.comment import STICKY_MARKER

    return [c.body for c in bot.bot_comments() if STICKY_MARKER not in c.body]


__all__ = ["bot"]  # the fixture, imported for pytest


async def test_retest_gpu_by_a_member_reruns_with_reactions(bot: BotHarness) -> None:
    assert await bot.send("pull_request", bot.pr_event("opened")) == 202
    await bot.wait_runs_done()
    comment_id = await comment(bot, "Looks flaky to me.\n\n/retest-gpu\n")
    await bot.wait_runs_done(count=2)
    jobs = bot.store.jobs_for_pr(REPO, 7)
    assert len(jobs) == 2 and jobs[1].request.trigger == "/retest-gpu by @maintainer"
    # 👀 at once, then 👎 because the sample PR breaks a test; 😕 is only ever a rejected command.
    assert reactions(bot, comment_id) == ["eyes", "-1"]
    assert len(bot.bot_comments()) == 1


async def test_retest_failed_reruns_only_the_failed_tests(bot: BotHarness) -> None:
    assert await bot.send("pull_request", bot.pr_event("opened")) == 202
    await bot.wait_runs_done()
    await comment(bot, "/retest-gpu failed")
    await bot.wait_runs_done(count=2)
    rerun = bot.store.jobs_for_pr(REPO, 7)[1]
    assert rerun.request.scope == RunScope.FAILED
    report = bot.store.report(rerun.id)
    assert report is not None and report.tests is not None
    assert [r.nodeid for r in report.tests.results] == ["tests/test_stats.py::TestMean::test_mean_of_halves"]


async def test_bad_command_gets_usage_reply_and_no_run(bot: BotHarness) -> None:
    comment_id = await comment(bot, "/retest-gpu everything please")
    await handled(bot, 1)
    assert reactions(bot, comment_id) == ["confused"]
    [reply] = replies(bot)
    assert "/retest-gpu" in reply and "everything" in reply
    assert bot.store.jobs_for_pr(REPO, 7) == []


async def test_command_in_code_block_or_quote_is_not_a_command(bot: BotHarness) -> None:
    await comment(bot, "To rerun, type:\n\n```\n/retest-gpu\n```\n\n> /retest-gpu\n")
    await handled(bot, 1)
    assert bot.store.jobs_for_pr(REPO, 7) == []
    assert replies(bot) == []


async def test_help_replies_with_usage(bot: BotHarness) -> None:
    await comment(bot, "/retest-gpu help")
    await handled(bot, 1)
    [reply] = replies(bot)
    assert "/retest-gpu failed" in reply and "/retest-gpu all" in reply


async def test_bots_own_comment_is_ignored(bot: BotHarness) -> None:
    await comment(bot, "/retest-gpu", user=bot.fake.bot_login, association="NONE")
    await handled(bot, 1)
    assert bot.store.jobs_for_pr(REPO, 7) == []
    assert bot.fake.calls_to("POST", f"/repos/{REPO}/issues/comments/{{comment_id}}/reactions") == []


def untrusted_fork_event(
    bot: BotHarness, action: str = "opened", head_sha: str | None = None
) -> dict[str, Any]:
    return bot.pr_event(
        action,
        author="stranger",
        author_association="FIRST_TIME_CONTRIBUTOR",
        fork_owner="stranger",
        head_clone_url=bot.clone_url,
        head_sha=head_sha or bot.sample.head_sha,
    )


async def test_untrusted_fork_pr_waits_for_approval_of_that_sha(bot: BotHarness) -> None:
    bot.seed_pull(
        bot.sample.head_sha,
        author="stranger",
        author_association="FIRST_TIME_CONTRIBUTOR",
        head_repo="stranger/calc",
    )
    assert await bot.send("pull_request", untrusted_fork_event(bot)) == 202
    await handled(bot, 1)
    assert bot.store.jobs_for_pr(REPO, 7) == []
    [summary] = bot.bot_comments()
    assert "approve" in summary.body.lower()
    waiting = bot.fake.check_runs(REPO, head_sha=bot.sample.head_sha)
    assert waiting and {r.states[-1]["conclusion"] for r in waiting} == {"action_required"}

    # The untrusted author cannot approve themselves.
    await comment(bot, "/retest-gpu", user="stranger", association="FIRST_TIME_CONTRIBUTOR")
    await handled(bot, 2)
    assert bot.store.jobs_for_pr(REPO, 7) == []
    assert any("maintainer" in r.lower() or "approve" in r.lower() for r in replies(bot))

    # A maintainer approves this head SHA by asking for a run.
    await comment(bot, "/retest-gpu")
    await bot.wait_runs_done()
    assert bot.store.approvals(REPO, 7) == [(bot.sample.head_sha, "maintainer")]

    # A new push by the untrusted author needs a new approval: no run.
    new_sha = bot.commit_on_feature("README.md", "more\n", "docs")
    bot.seed_pull(
        new_sha, author="stranger", author_association="FIRST_TIME_CONTRIBUTOR", head_repo="stranger/calc"
    )
    assert await bot.send("pull_request", untrusted_fork_event(bot, "synchronize", new_sha)) == 202
    await handled(bot, 4)
    assert [j.head_sha for j in bot.store.jobs_for_pr(REPO, 7)] == [bot.sample.head_sha]


async def test_push_during_a_run_cancels_it(fake_github: FakeGitHub, tmp_path: Path) -> None:
    gate = Gate(times=1)
    bot = await BotHarness.create(fake_github, tmp_path, runner=gate.factory())
    try:
        assert await bot.send("pull_request", bot.pr_event("opened")) == 202
        await gate.wait_started()
        new_sha = bot.commit_on_feature("README.md", "pushed\n", "docs")
        assert await bot.send("pull_request", bot.pr_event("synchronize", head_sha=new_sha)) == 202
        await bot.wait_for(
            "the old run to be flagged",
            lambda: bot.store.jobs_for_pr(REPO, 7)[0].cancel_requested,
        )
        gate.open()
        await bot.wait_runs_done(count=2)
        old, new = bot.store.jobs_for_pr(REPO, 7)
        assert old.state == RunState.CANCELLED and new.state == RunState.SUCCEEDED
        for check_id in old.check_runs.values():
            assert bot.fake.check_run(check_id).states[-1]["conclusion"] == "cancelled"
        assert new_sha[:7] in bot.bot_comments()[0].body
    finally:
        gate.open()
        await bot.stop()


async def test_closing_the_pr_cancels_queued_runs(fake_github: FakeGitHub, tmp_path: Path) -> None:
    gate = Gate()
    bot = await BotHarness.create(fake_github, tmp_path, runner=gate.factory())
    try:
        assert await bot.send("pull_request", bot.pr_event("opened")) == 202
        await gate.wait_started()
        assert await bot.send("pull_request", bot.pr_event("closed")) == 202
        await bot.wait_for(
            "the run to be flagged",
            lambda: bot.store.jobs_for_pr(REPO, 7)[0].cancel_requested,
        )
        gate.open()
        await bot.wait_runs_done()
        [job] = bot.store.jobs_for_pr(REPO, 7)
        assert job.state == RunState.CANCELLED
    finally:
        gate.open()
        await bot.stop()


async def test_rerequested_check_run_reruns(bot: BotHarness) -> None:
    assert await bot.send("pull_request", bot.pr_event("opened")) == 202
    await bot.wait_runs_done()
    check_id = next(iter(bot.store.jobs_for_pr(REPO, 7)[0].check_runs.values()))
    payload = payloads.check_run_event(
        "rerequested",
        head_sha=bot.sample.head_sha,
        check_run_id=check_id,
        app_id=bot.fake.app_id,
        app_slug="paritybot",
        repo_full_name=REPO,
        clone_url=bot.clone_url,
        installation_id=1,
        api_url=bot.fake.url,
    )
    assert await bot.send("check_run", payload) == 202
    await bot.wait_runs_done(count=2)
    assert len(bot.store.jobs_for_pr(REPO, 7)) == 2


async def test_bad_config_names_the_key_in_the_comment(bot: BotHarness) -> None:
    bot.fake.set_file(REPO, ".github/paritybot.yml", "tests:\n  reruns: lots\n", ref="main")
    assert await bot.send("pull_request", bot.pr_event("opened")) == 202
    await handled(bot, 1)
    [summary] = bot.bot_comments()
    assert "tests.reruns" in summary.body and "lots" in summary.body
    assert bot.store.jobs_for_pr(REPO, 7) == []


TWO_ENVIRONMENTS = """\
environments:
  - name: default
    default: true
  - name: cpu-extra
    labels: ["ciflow/extra"]
    env: {CALC_MODE: "extra"}
"""


async def test_a_label_adds_an_environment_and_the_summary_has_one_section_each(bot: BotHarness) -> None:
    bot.fake.set_file(REPO, ".github/paritybot.yml", TWO_ENVIRONMENTS, ref="main")
    assert await bot.send("pull_request", bot.pr_event("opened", labels=["ciflow/extra"])) == 202
    await bot.wait_runs_done(count=2)
    assert sorted(j.environment for j in bot.store.jobs_for_pr(REPO, 7)) == [
        "cpu-extra",
        "default",
    ]
    assert len(bot.fake.check_runs(REPO, head_sha=bot.sample.head_sha)) == 8
    [summary] = bot.bot_comments()
    assert "## Environment `default`" in summary.body and "## Environment `cpu-extra`" in summary.body

    await comment(bot, "/retest-gpu env=cpu-extra")
    await bot.wait_runs_done(count=3)
    assert bot.store.jobs_for_pr(REPO, 7)[-1].environment == "cpu-extra"


async def test_unknown_environment_gets_a_reply(bot: BotHarness) -> None:
    comment_id = await comment(bot, "/retest-gpu env=nope")
    await handled(bot, 1)
    assert reactions(bot, comment_id) == ["confused"]
    [reply] = replies(bot)
    assert "nope" in reply and "`default`" in reply
    assert bot.store.jobs_for_pr(REPO, 7) == []


async def test_a_queued_run_superseded_before_it_starts_ends_cancelled(
    fake_github: FakeGitHub, tmp_path: Path
) -> None:
    gate = Gate()
    bot = await BotHarness.create(fake_github, tmp_path, runner=gate.factory())
    try:
        bot.fake.set_file(
            REPO,
            ".github/paritybot.yml",
            "environments:\n  - name: a\n  - name: b\n    labels: [b]\n",
            ref="main",
        )
        # One worker: run a holds it while run b waits in the queue.
        assert await bot.send("pull_request", bot.pr_event("opened", labels=["b"])) == 202
        await gate.wait_started()
        new_sha = bot.commit_on_feature("README.md", "newer\n", "docs")
        assert (
            await bot.send("pull_request", bot.pr_event("synchronize", head_sha=new_sha, labels=["b"])) == 202
        )
        await bot.wait_for("the old runs to be superseded", lambda: len(bot.store.jobs_for_pr(REPO, 7)) == 4)
        queued_then_cancelled = next(
            j
            for j in bot.store.jobs_for_pr(REPO, 7)
            if j.head_sha == bot.sample.head_sha and j.environment == "b"
        )
        assert queued_then_cancelled.state == RunState.CANCELLED and queued_then_cancelled.attempts == 0
        for check_id in queued_then_cancelled.check_runs.values():
            assert bot.fake.check_run(check_id).states[-1]["conclusion"] == "cancelled"
        gate.open()
        await bot.wait_runs_done(count=4)
    finally:
        gate.open()
        await bot.stop()


async def test_queue_positions_in_waiting_summaries_move_up(fake_github: FakeGitHub, tmp_path: Path) -> None:
    gate = Gate(times=1)
    bot = await BotHarness.create(fake_github, tmp_path, runner=gate.factory())
    try:
        for number in (8, 9):
            bot.seed_pull(bot.sample.head_sha, number=number)
        assert await bot.send("pull_request", bot.pr_event("opened")) == 202  # PR 7 takes the one worker
        await gate.wait_started()
        assert await bot.send("pull_request", bot.pr_event("opened", number=8)) == 202
        assert await bot.send("pull_request", bot.pr_event("opened", number=9)) == 202
        await bot.wait_for("PR 9 to be queued", lambda: len(bot.bot_comments(9)) == 1)
        [waiting] = bot.bot_comments(9)
        assert "#\u200b2 in line" in waiting.body
        gate.open()
        await bot.wait_runs_done(pr_number=9)
        # When PR 8's run started, PR 9 moved up to next in line, and its summary said so. (Its
        # failure later came as a new comment, which notifies; the waiting one was then removed.)
        headings = [body.splitlines()[2] for body in waiting.bodies]
        assert any("#\u200b1 in line (next up)" in h for h in headings), headings
    finally:
        gate.open()
        await bot.stop()
