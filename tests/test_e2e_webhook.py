"""End to end: GitHub's real payloads over HTTP → the real bot → runs on a real git repository →
check runs and one sticky comment on the fake GitHub (which checks every request against the spec).
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import payloads
from botharness import REPO, SECRET, BotHarness, Gate, bot, host_runner_factory
from fakegithub import FakeGitHub
from sample_repo import BROKEN_TEST

from bot.core.models import RunState
from bot.render.comment import STICKY_MARKER

__all__ = ["bot"]  # the fixture, imported for pytest


async def test_opened_pr_gets_completed_check_runs_and_one_sticky_comment(bot: BotHarness) -> None:
    assert await bot.send("pull_request", bot.pr_event("opened")) == 202
    await bot.wait_runs_done()

    runs = bot.fake.check_runs(REPO, head_sha=bot.sample.head_sha)
    by_name = {r.name: r.states[-1] for r in runs}
    assert set(by_name) == {
        "paritybot / pre-commit (default)",
        "paritybot / docstrings (default)",
        "paritybot / tests (default)",
        "paritybot / parity (default)",
    }
    # Every check run went queued → in_progress → completed.
    for run in runs:
        statuses = [s["status"] for s in run.states]
        assert statuses[0] == "queued" and "in_progress" in statuses and statuses[-1] == "completed"
    assert by_name["paritybot / tests (default)"]["conclusion"] == "failure"
    assert by_name["paritybot / pre-commit (default)"]["conclusion"] == "failure"

    comments = bot.bot_comments()
    assert len(comments) == 1
    body = comments[0].body
    assert STICKY_MARKER in body
    assert BROKEN_TEST in body
    assert "python -m pytest" in body  # the repro command
    assert bot.sample.head_sha[:7] in body


async def test_synchronize_edits_the_same_comment(bot: BotHarness) -> None:
    assert await bot.send("pull_request", bot.pr_event("opened")) == 202
    await bot.wait_runs_done()
    first = bot.bot_comments()[0]
    edits_before = len(first.bodies)

    new_sha = bot.commit_on_feature("README.md", "changed\n", "docs: readme")
    assert await bot.send("pull_request", bot.pr_event("synchronize", head_sha=new_sha)) == 202
    await bot.wait_runs_done(count=2)

    comments = bot.bot_comments()
    assert [c.id for c in comments] == [first.id]
    assert len(comments[0].bodies) > edits_before
    assert new_sha[:7] in comments[0].body


async def test_redelivery_changes_nothing(bot: BotHarness) -> None:
    payload = bot.pr_event("opened")
    assert await bot.send("pull_request", payload, delivery_id="delivery-1") == 202
    await bot.wait_runs_done()
    calls_before = len(bot.fake.calls)

    assert await bot.send("pull_request", payload, delivery_id="delivery-1") == 202
    await bot.wait_for("the redelivery to be read", lambda: bot.store.delivery_count() == 1)
    await asyncio.sleep(0.5)
    assert len(bot.store.jobs_for_pr(REPO, 7)) == 1
    assert len(bot.fake.calls) == calls_before


async def test_bad_signature_gets_401_and_records_nothing(bot: BotHarness) -> None:
    body, headers = payloads.delivery("pull_request", bot.pr_event("opened"), "not-the-secret")
    assert (await bot.post(body, headers)).status == 401
    del headers["X-Hub-Signature-256"]
    assert (await bot.post(body, headers)).status == 401
    await asyncio.sleep(0.3)
    assert bot.store.delivery_count() == 0
    assert bot.fake.calls == []


async def test_malformed_requests_get_400_and_ping_200(bot: BotHarness) -> None:
    body = b'{"zen": "truncated'
    headers = payloads.webhook_headers("pull_request", body, SECRET)
    assert (await bot.post(body, headers)).status == 400
    body = b"[1, 2]"
    assert (await bot.post(body, payloads.webhook_headers("push", body, SECRET))).status == 400
    good = payloads.encode(bot.pr_event("opened"))
    headers = payloads.webhook_headers("pull_request", good, SECRET)
    del headers["X-GitHub-Event"]
    assert (await bot.post(good, headers)).status == 400
    assert await bot.send("ping", payloads.example("ping")) == 200
    assert bot.store.delivery_count() == 0


async def test_draft_pr_is_skipped(bot: BotHarness) -> None:
    assert await bot.send("pull_request", bot.pr_event("opened", draft=True)) == 202
    await bot.wait_for(
        "the delivery to be handled",
        lambda: bot.store.delivery_status_count("dispatched") == 1,
    )
    assert bot.store.jobs_for_pr(REPO, 7) == []
    assert bot.fake.check_runs(REPO) == []


async def test_killing_the_worker_mid_run_loses_no_job(fake_github: FakeGitHub, tmp_path: Path) -> None:
    gate = Gate()
    bot = await BotHarness.create(fake_github, tmp_path, runner=gate.factory())
    try:
        assert await bot.send("pull_request", bot.pr_event("opened")) == 202
        await gate.wait_started()
        [job] = bot.store.jobs_for_pr(REPO, 7)
        assert job.state == RunState.RUNNING
        await bot.stop()  # the process stops: the run is abandoned mid-step, and nothing of it goes on
        assert [t for t in asyncio.all_tasks() if "Pipeline.execute" in repr(t.get_coro())] == []

        bot.runner = host_runner_factory()  # the restarted process has a healthy runner
        await bot.start()
        await bot.wait_runs_done()
        [job] = bot.store.jobs_for_pr(REPO, 7)
        assert job.state == RunState.SUCCEEDED and job.attempts == 2
        assert len(bot.bot_comments()) == 1
    finally:
        gate.open()
        await bot.stop()


async def test_push_to_default_branch_records_the_reference_used_by_later_prs(bot: BotHarness) -> None:
    push = payloads.event(
        "push", repo_full_name=REPO, clone_url=bot.clone_url, installation_id=1, api_url=bot.fake.url
    )
    push.update(ref="refs/heads/main", after=bot.sample.base_sha, deleted=False)
    push["repository"]["default_branch"] = "main"
    assert await bot.send("push", push) == 202

    def baseline_done() -> bool:
        return bot.store.baseline(REPO, "default") is not None and not bot.service.workers.busy  # type: ignore[union-attr]

    await bot.wait_for("the baseline run", baseline_done)
    # A baseline reports to no PR; its commit shows whether the coverage map was recorded.
    await bot.wait_for("its check run", lambda: bool(bot.fake.check_runs(REPO)))
    [mapped] = bot.fake.check_runs(REPO)
    final = mapped.states[-1]
    assert mapped.name == "paritybot / coverage map (default)" and mapped.head_sha == bot.sample.base_sha
    assert (final["status"], final["conclusion"]) == ("completed", "success")
    assert re.fullmatch(r"\d+ tests, \d+ files", final["output"]["title"]), final["output"]["title"]

    assert await bot.send("pull_request", bot.pr_event("opened")) == 202
    await bot.wait_runs_done()
    [job] = bot.store.jobs_for_pr(REPO, 7)
    report = bot.store.report(job.id)
    assert report is not None and report.tests is not None and report.parity is not None
    # The selection now comes from the base commit's per-test coverage.
    reasons = [r for t in report.tests.selection.tests for r in t.reasons]
    assert any("cover" in r for r in reasons), reasons
    # The parity table's CI reference is the probe recorded on the default branch.
    python_row = next(r for r in report.parity.rows if r.field == "python")
    assert python_row.reference is not None and python_row.reference == python_row.this_run


async def test_a_delivery_whose_handling_hits_a_github_error_is_retried(bot: BotHarness) -> None:
    # GitHub fails the config lookup once: the delivery is handled again a moment later.
    bot.fake.fail("GET", f"/repos/{REPO}/contents/.github/paritybot.yml", 500, times=1)
    assert await bot.send("pull_request", bot.pr_event("opened")) == 202
    await bot.wait_runs_done()
    assert len(bot.store.jobs_for_pr(REPO, 7)) == 1
    assert bot.store.delivery_status_count("dispatched") == 1


async def test_a_pull_request_with_no_change_gets_neutral_check_runs_saying_nothing_to_check(
    bot: BotHarness,
) -> None:
    # The head is the base itself (a branch opened before its first commit, or one already merged).
    base = bot.sample.base_sha
    bot.seed_pull(base)
    assert await bot.send("pull_request", bot.pr_event("opened", head_sha=base)) == 202
    await bot.wait_runs_done()

    runs = bot.fake.check_runs(REPO, head_sha=base)
    assert len(runs) == 4
    for run in runs:
        final = run.states[-1]
        assert (final["status"], final["conclusion"]) == ("completed", "neutral"), run.name
        assert final["output"]["title"] == "Nothing to check"
        assert "is already part of the base" in final["output"]["summary"]
    [comment] = bot.bot_comments()
    assert "### ➖ Nothing to check" in comment.body
    assert "passed" not in comment.body and "✅" not in comment.body
