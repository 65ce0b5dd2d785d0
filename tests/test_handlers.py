"""Every branch of every handler, in milliseconds: GitHub's real payloads, the real store, scheduler
and reporter, and a gidgethub client that answers from canned responses (tests/ghmock.py).

The flows end to end (a real run, the fake GitHub over HTTP) are in test_e2e_*.py; here each test
is one delivery and what it makes the bot do on GitHub and in the store.
"""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import payloads
import pytest
from ghmock import MockGitHubAPI
from gidgethub import sansio

from bot.core.models import RunKind, RunScope, RunState
from bot.render.comment import STICKY_MARKER
from bot.service.locks import PrLocks
from bot.service.publisher.github import GitHubReporter
from bot.service.publisher.publisher import Publisher
from bot.service.scheduler import Scheduler
from bot.service.store.records import Job, PullState
from bot.service.store.sqlite import SQLiteStore
from handlers.context import HandlerContext
from handlers.routing import router

REPO = "octo-org/calc"
BOT = "paritybot[bot]"
NUMBER = 7
HEAD = "1" * 40
NEW_HEAD = "2" * 40
CONFIG_URL = f"/repos/{REPO}/contents/.github/paritybot.yml"
TWO_ENVIRONMENTS = """
environments:
  - name: cpu
    default: true
  - name: cuda12
    labels: [gpu]
"""


@dataclass
class World:
    gh: MockGitHubAPI
    store: SQLiteStore
    ctx: HandlerContext

    async def deliver(self, event: str, payload: dict[str, Any], delivery_id: str = "delivery-1") -> None:
        await router.dispatch(sansio.Event(payload, event=event, delivery_id=delivery_id), self.ctx)

    def jobs(self) -> list[Job]:
        return self.store.jobs_for_pr(REPO, NUMBER)

    def check_runs(self) -> list[dict[str, Any]]:
        return [c.body for c in self.gh.called("POST", f"/repos/{REPO}/check-runs")]

    def comments(self) -> list[str]:
        return [c.body["body"] for c in self.gh.called("POST", f"/repos/{REPO}/issues/{NUMBER}/comments")]

    def replies(self) -> list[str]:
        return [body for body in self.comments() if STICKY_MARKER not in body]

    def summaries(self) -> list[str]:
        """The summary comment's bodies as posted, then as edited, in order."""
        writes = [
            c
            for c in self.gh.calls
            if (c.method == "POST" and c.path == f"/repos/{REPO}/issues/{NUMBER}/comments")
            or (c.method == "PATCH" and c.path.startswith(f"/repos/{REPO}/issues/comments/"))
        ]
        return [c.body["body"] for c in writes if STICKY_MARKER in c.body["body"]]

    def reactions(self, comment_id: int) -> list[str]:
        path = f"/repos/{REPO}/issues/comments/{comment_id}/reactions"
        return [c.body["content"] for c in self.gh.called("POST", path)]

    def config(self, text: str) -> None:
        content = base64.b64encode(text.encode()).decode()
        self.gh.answer(f"GET {CONFIG_URL}", {"type": "file", "encoding": "base64", "content": content})

    def pull(self, **overrides: Any) -> dict[str, Any]:
        """The PR as GET /pulls/7 shows it, and answered so."""
        pull = pr_event("opened", **overrides)["pull_request"]
        self.gh.answer(f"GET /repos/{REPO}/pulls/{NUMBER}", pull)
        return pull

    def permission(self, login: str, permission: str) -> None:
        self.gh.answer(f"GET /repos/{REPO}/collaborators/{login}/permission", {"permission": permission})


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    gh = MockGitHubAPI({f"GET /repos/{REPO}/issues/{NUMBER}/comments": []})
    store = SQLiteStore(tmp_path / "paritybot.db")
    locks = PrLocks()
    reporter = GitHubReporter(gh, store, locks, BOT)

    async def reporter_of(job: Job) -> GitHubReporter:
        return reporter

    ctx = HandlerContext(
        gh=gh,
        store=store,
        reporter=reporter,
        scheduler=Scheduler(store, locks, Publisher(store, None, locks, reporter_factory=reporter_of)),
        installation_id=1,
        bot_login=BOT,
    )
    try:
        yield World(gh, store, ctx)
    finally:
        store.close()


def pr_event(action: str = "opened", **overrides: Any) -> dict[str, Any]:
    values: dict[str, Any] = dict(
        number=NUMBER,
        head_sha=HEAD,
        base_ref="main",
        author="octocat",
        author_association="OWNER",
        labels=[],
        repo_full_name=REPO,
        installation_id=1,
    )
    return payloads.pull_request_event(action, **(values | overrides))


def comment_event(body: str, *, action: str = "created", **overrides: Any) -> dict[str, Any]:
    values: dict[str, Any] = dict(
        body=body,
        commenter="maintainer",
        author_association="MEMBER",
        comment_id=501,
        number=NUMBER,
        repo_full_name=REPO,
        installation_id=1,
    )
    return payloads.issue_comment_event(action, **(values | overrides))


def names(check_runs: list[dict[str, Any]]) -> list[str]:
    return [c["name"] for c in check_runs]


FOUR_CHECKS = [
    "paritybot / pre-commit (default)",
    "paritybot / docstrings (default)",
    "paritybot / tests (default)",
    "paritybot / parity (default)",
]


# --- pull_request ----------------------------------------------------------------------------------


@pytest.mark.parametrize("action", ["opened", "synchronize", "reopened", "ready_for_review"])
async def test_new_code_by_a_trusted_author_is_queued_with_its_check_runs_and_a_summary(
    world: World, action: str
) -> None:
    await world.deliver("pull_request", pr_event(action))
    [job] = world.jobs()
    assert (job.state, job.head_sha, job.environment) == (RunState.QUEUED, HEAD, "default")
    assert job.request.author_trusted and job.request.trigger == f"pull_request.{action}"
    assert names(world.check_runs()) == FOUR_CHECKS
    assert {c["status"] for c in world.check_runs()} == {"queued"}
    assert job.check_runs == {"pre-commit": 1000, "docstrings": 1001, "tests": 1002, "parity": 1003}
    [summary] = world.summaries()
    assert "Queued for a GPU runner" in summary
    # The association settled trust: no permission lookup was needed.
    assert not world.gh.called("GET", f"/repos/{REPO}/collaborators")


async def test_a_draft_runs_nothing(world: World) -> None:
    await world.deliver("pull_request", pr_event("opened", draft=True))
    assert world.jobs() == [] and world.gh.calls == []


async def test_a_new_push_cancels_the_queued_run_of_the_older_commit(world: World) -> None:
    await world.deliver("pull_request", pr_event("opened"))
    await world.deliver("pull_request", pr_event("synchronize", head_sha=NEW_HEAD))
    old, new = world.jobs()
    assert (old.head_sha, old.state) == (HEAD, RunState.CANCELLED)
    assert (new.head_sha, new.state) == (NEW_HEAD, RunState.QUEUED)
    cancelled = [c.body for c in world.gh.called("PATCH", f"/repos/{REPO}/check-runs/")]
    assert [c["conclusion"] for c in cancelled] == ["cancelled"] * 4
    assert {c.path.rsplit("/", 1)[1] for c in world.gh.called("PATCH", f"/repos/{REPO}/check-runs/")} == {
        str(i) for i in old.check_runs.values()
    }


async def test_the_same_push_delivered_twice_queues_one_run(world: World) -> None:
    await world.deliver("pull_request", pr_event("synchronize"), "delivery-1")
    await world.deliver("pull_request", pr_event("synchronize"), "delivery-2")
    assert len(world.jobs()) == 1 and len(world.check_runs()) == 4


@pytest.mark.parametrize("action", ["closed", "converted_to_draft"])
async def test_closing_or_drafting_cancels_the_queued_runs(world: World, action: str) -> None:
    await world.deliver("pull_request", pr_event("opened"))
    await world.deliver("pull_request", pr_event(action))
    [job] = world.jobs()
    assert job.state == RunState.CANCELLED
    assert len(world.gh.called("PATCH", f"/repos/{REPO}/check-runs/")) == 4


async def test_a_running_run_is_flagged_to_stop_not_ended_by_the_handler(world: World) -> None:
    await world.deliver("pull_request", pr_event("opened"))
    running = world.store.claim()
    assert running is not None
    await world.deliver("pull_request", pr_event("closed"))
    [job] = world.jobs()
    assert job.state == RunState.RUNNING and job.cancel_requested
    assert world.gh.called("PATCH") == []  # its worker completes the check runs when it stops


async def test_a_label_adds_an_environment(world: World) -> None:
    world.config(TWO_ENVIRONMENTS)
    await world.deliver("pull_request", pr_event("opened", labels=["gpu"]))
    assert sorted(j.environment for j in world.jobs()) == ["cpu", "cuda12"]
    assert len(world.check_runs()) == 8


async def test_an_untrusted_fork_waits_for_approval_saying_so_in_the_summary_and_checks(world: World) -> None:
    world.config(TWO_ENVIRONMENTS)
    world.permission("stranger", "read")
    await world.deliver(
        "pull_request",
        pr_event(
            "opened",
            author="stranger",
            author_association="CONTRIBUTOR",
            fork_owner="stranger",
            labels=["gpu"],
        ),
    )
    assert world.jobs() == []
    [summary] = world.summaries()
    assert "Waiting for approval" in summary and "@stranger is not yet trusted" in summary
    # One check run per check and environment, completed "action required": never silently absent.
    assert len(world.check_runs()) == 8
    assert {(c["status"], c["conclusion"]) for c in world.check_runs()} == {("completed", "action_required")}
    [lookup] = world.gh.called("GET", f"/repos/{REPO}/collaborators/")
    assert lookup.path.endswith("/stranger/permission")


async def test_an_untrusted_push_cancels_the_older_commits_runs_while_it_waits(world: World) -> None:
    world.permission("stranger", "none")
    world.store.add_approval(REPO, NUMBER, HEAD, "maintainer")
    await world.deliver("pull_request", pr_event("opened", author="stranger", author_association="NONE"))
    await world.deliver(
        "pull_request",
        pr_event("synchronize", author="stranger", author_association="NONE", head_sha=NEW_HEAD),
    )
    [job] = world.jobs()
    assert (job.head_sha, job.state) == (HEAD, RunState.CANCELLED)
    assert "An earlier commit of this pull request was approved" in world.summaries()[-1]


async def test_write_permission_makes_an_author_trusted(world: World) -> None:
    world.permission("newcomer", "write")
    await world.deliver(
        "pull_request", pr_event("opened", author="newcomer", author_association="CONTRIBUTOR")
    )
    [job] = world.jobs()
    assert job.request.author_trusted


async def test_an_approved_commit_of_an_untrusted_author_runs_but_not_as_trusted_code(world: World) -> None:
    world.permission("stranger", "read")
    world.store.add_approval(REPO, NUMBER, HEAD, "maintainer")
    await world.deliver("pull_request", pr_event("opened", author="stranger", author_association="NONE"))
    [job] = world.jobs()
    assert job.state == RunState.QUEUED and not job.request.author_trusted


async def test_a_bad_config_is_named_in_the_summary_and_nothing_runs(world: World) -> None:
    world.config("environments:\n  - name: cpu\n    gpus: many\n")
    await world.deliver("pull_request", pr_event("opened"))
    assert world.jobs() == [] and world.check_runs() == []
    [summary] = world.summaries()
    assert "Invalid" in summary and "environments.0.gpus" in summary


async def test_a_config_that_is_not_a_file_is_a_config_error(world: World) -> None:
    world.gh.answer(f"GET {CONFIG_URL}", [{"type": "file", "name": "a"}])
    await world.deliver("pull_request", pr_event("opened"))
    assert world.jobs() == []
    assert "expected a file, found list" in world.summaries()[0]


async def test_an_event_without_an_installation_does_nothing(world: World) -> None:
    world.ctx.gh = world.ctx.reporter = None
    await world.deliver("pull_request", pr_event("opened"))
    assert world.jobs() == [] and world.gh.calls == []


# --- issue_comment ---------------------------------------------------------------------------------


async def test_a_members_command_gets_eyes_and_queues_a_run(world: World) -> None:
    world.pull()
    await world.deliver("issue_comment", comment_event("Looks flaky.\n\n/retest-gpu\n"))
    [job] = world.jobs()
    assert job.request.trigger == "/retest-gpu by @maintainer" and job.request.comment_id == 501
    assert job.request.scope == RunScope.SELECTED and job.request.author_trusted
    assert world.reactions(501) == ["eyes"] and world.replies() == []


@pytest.mark.parametrize(
    ("body", "scope"), [("/retest-gpu all", RunScope.ALL), ("/Retest-GPU  ALL  env=default", RunScope.ALL)]
)
async def test_the_command_picks_the_scope_and_environment(world: World, body: str, scope: RunScope) -> None:
    world.pull()
    await world.deliver("issue_comment", comment_event(body))
    [job] = world.jobs()
    assert job.request.scope == scope and job.environment == "default"


async def test_an_explicit_environment_runs_only_there(world: World) -> None:
    world.config(TWO_ENVIRONMENTS)
    world.pull()
    await world.deliver("issue_comment", comment_event("/retest-gpu env=cuda12"))
    assert [j.environment for j in world.jobs()] == ["cuda12"]


async def test_an_unknown_environment_gets_confused_and_a_reply(world: World) -> None:
    world.pull()
    await world.deliver("issue_comment", comment_event("/retest-gpu env=cuda99"))
    assert world.jobs() == []
    assert world.reactions(501) == ["confused"]
    assert world.replies() == ["unknown environment `cuda99`; this repository defines `default`"]


async def test_failed_reruns_the_tests_that_failed_last_time(world: World) -> None:
    world.pull()
    state = PullState(
        repo=REPO, pr_number=NUMBER, failed_tests={"default": ["tests/test_b.py::t", "tests/test_a.py::t"]}
    )
    world.store.save_pull_state(state)
    await world.deliver("issue_comment", comment_event("/retest-gpu failed"))
    [job] = world.jobs()
    assert job.request.scope == RunScope.FAILED
    assert job.request.only_tests == ["tests/test_a.py::t", "tests/test_b.py::t"]


async def test_failed_with_nothing_failed_says_so_and_runs_nothing(world: World) -> None:
    world.pull()
    await world.deliver("issue_comment", comment_event("/retest-gpu failed"))
    assert world.jobs() == []
    assert world.reactions(501) == ["confused"]
    assert world.replies() == [
        "No test failed in the last run, so `/retest-gpu failed` has nothing to rerun."
    ]


async def test_a_bad_command_gets_confused_and_the_usage(world: World) -> None:
    await world.deliver("issue_comment", comment_event("/retest-gpu everything"))
    assert world.jobs() == []
    assert world.reactions(501) == ["confused"]
    [reply] = world.replies()
    assert "unknown argument `everything`" in reply and "/retest-gpu` usage" in reply
    assert not world.gh.called("GET")  # nothing was looked up for a command that cannot run


async def test_help_replies_with_the_usage_only(world: World) -> None:
    await world.deliver("issue_comment", comment_event("/retest-gpu help"))
    [reply] = world.replies()
    assert reply.startswith("**`/retest-gpu` usage**")
    assert world.reactions(501) == [] and world.jobs() == []


@pytest.mark.parametrize(
    "event",
    [
        comment_event("/retest-gpu", on_pull_request=False),  # an issue, not a pull request
        comment_event("```\n/retest-gpu\n```"),  # quoted in code: not a command
        comment_event("please /retest-gpu"),  # a sentence, not a command
        comment_event("/retest-gpu", commenter=BOT),  # the bot's own comment
        comment_event("/retest-gpu", commenter="dependabot[bot]"),  # any bot's
    ],
    ids=["issue", "code-block", "sentence", "own-comment", "other-bot"],
)
async def test_comments_that_are_not_commands_for_us_do_nothing(world: World, event: dict[str, Any]) -> None:
    await world.deliver("issue_comment", event)
    assert world.gh.calls == [] and world.jobs() == []


async def test_an_edit_that_adds_no_command_does_nothing(world: World) -> None:
    event = comment_event("/retest-gpu\n\nfixed a typo", action="edited")
    event["changes"] = {"body": {"from": "/retest-gpu\n\nfixed a tpyo"}}
    await world.deliver("issue_comment", event)
    assert world.gh.calls == []


async def test_an_edit_that_adds_a_command_runs_it(world: World) -> None:
    world.pull()
    event = comment_event("/retest-gpu all", action="edited")
    event["changes"] = {"body": {"from": "/retest-gpu"}}
    await world.deliver("issue_comment", event)
    assert [j.request.scope for j in world.jobs()] == [RunScope.ALL]


async def test_a_command_on_a_closed_pr_is_answered_and_runs_nothing(world: World) -> None:
    pull = world.pull()
    pull["state"] = "closed"
    await world.deliver("issue_comment", comment_event("/retest-gpu"))
    assert world.replies() == ["This pull request is closed, so nothing was run."] and world.jobs() == []


async def test_a_command_under_a_bad_config_shows_the_config_error(world: World) -> None:
    world.pull()
    world.config("checks: {tests: maybe}\n")
    await world.deliver("issue_comment", comment_event("/retest-gpu"))
    assert world.jobs() == [] and "Invalid" in world.summaries()[0]


async def test_an_untrusted_bystander_is_told_who_may_run_and_nothing_runs(world: World) -> None:
    world.pull()
    world.permission("bystander", "read")
    await world.deliver(
        "issue_comment", comment_event("/retest-gpu", commenter="bystander", author_association="NONE")
    )
    assert world.jobs() == [] and world.reactions(501) == []
    [reply] = world.replies()
    assert reply.startswith("@bystander, only the author of this pull request (on an approved commit)")


async def test_an_untrusted_author_on_an_unapproved_commit_is_told_it_waits(world: World) -> None:
    world.pull(author="stranger", author_association="NONE")
    world.permission("stranger", "none")
    await world.deliver(
        "issue_comment", comment_event("/retest-gpu", commenter="stranger", author_association="NONE")
    )
    assert world.jobs() == []
    assert "@stranger is not yet trusted" in world.replies()[0]


async def test_an_untrusted_author_may_rerun_an_approved_commit(world: World) -> None:
    world.pull(author="stranger", author_association="NONE")
    world.permission("stranger", "none")
    world.store.add_approval(REPO, NUMBER, HEAD, "maintainer")
    await world.deliver(
        "issue_comment", comment_event("/retest-gpu", commenter="stranger", author_association="NONE")
    )
    [job] = world.jobs()
    assert not job.request.author_trusted


async def test_a_maintainers_command_approves_an_untrusted_head_commit(world: World) -> None:
    world.pull(author="stranger", author_association="NONE")
    world.permission("stranger", "read")
    await world.deliver("issue_comment", comment_event("/retest-gpu"))
    assert world.store.approvals(REPO, NUMBER) == [(HEAD, "maintainer")]
    [job] = world.jobs()
    assert job.state == RunState.QUEUED and not job.request.author_trusted  # approved, not trusted


@pytest.mark.parametrize(("membership", "runs"), [("active", 1), ("pending", 0)])
async def test_an_active_member_of_a_trusted_team_may_run(world: World, membership: str, runs: int) -> None:
    world.config("trust:\n  teams: [octo-org/gpu-maintainers]\n  permission_check: false\n")
    world.pull()
    world.gh.answer("GET /orgs/octo-org/teams/gpu-maintainers/memberships/teammate", {"state": membership})
    await world.deliver(
        "issue_comment", comment_event("/retest-gpu", commenter="teammate", author_association="NONE")
    )
    assert len(world.jobs()) == runs
    assert len(world.replies()) == 1 - runs  # who may run, when it did not


# --- check_run ---------------------------------------------------------------------------------------


def rerun_event(**overrides: Any) -> dict[str, Any]:
    values: dict[str, Any] = dict(head_sha=HEAD, app_slug="paritybot", repo_full_name=REPO, installation_id=1)
    event = payloads.check_run_event("rerequested", **(values | overrides))
    event["check_run"]["pull_requests"] = [{"number": NUMBER, "id": 1, "url": "u", "head": {}, "base": {}}]
    return event


async def test_re_run_of_our_check_queues_a_run_of_the_pr(world: World) -> None:
    world.pull()
    await world.deliver("check_run", rerun_event(), "delivery-9")
    [job] = world.jobs()
    assert job.request.trigger == "check run re-run" and job.head_sha == HEAD


async def test_re_run_of_another_apps_check_is_not_ours(world: World) -> None:
    await world.deliver("check_run", rerun_event(app_slug="other-ci"))
    assert world.gh.calls == []


async def test_re_run_on_a_fork_finds_the_pr_by_its_commit(world: World) -> None:
    world.pull()
    event = rerun_event()
    event["check_run"]["pull_requests"] = []  # GitHub leaves it empty for forks
    closed = {"number": 8, "state": "closed"}
    world.gh.answer(f"GET /repos/{REPO}/commits/{HEAD}/pulls", [closed, {"number": NUMBER, "state": "open"}])
    await world.deliver("check_run", event)
    assert len(world.jobs()) == 1 and not world.gh.called("GET", f"/repos/{REPO}/pulls/8")


async def test_re_run_of_an_outdated_commit_runs_nothing(world: World) -> None:
    world.pull(head_sha=NEW_HEAD)
    await world.deliver("check_run", rerun_event())
    assert world.jobs() == [] and world.check_runs() == []


async def test_re_run_of_an_untrusted_commit_still_waits(world: World) -> None:
    world.pull(author="stranger", author_association="NONE")
    world.permission("stranger", "read")
    await world.deliver("check_run", rerun_event())
    assert world.jobs() == []
    assert {c["conclusion"] for c in world.check_runs()} == {"action_required"}


# --- push --------------------------------------------------------------------------------------------


def push_event(ref: str = "refs/heads/main", *, after: str = HEAD, deleted: bool = False) -> dict[str, Any]:
    event = payloads.event("push", repo_full_name=REPO, installation_id=1)
    event.update(ref=ref, after=after, deleted=deleted, created=False)
    event["repository"]["default_branch"] = "main"
    return event


async def test_a_push_to_the_default_branch_queues_its_baseline_run(world: World) -> None:
    await world.deliver("push", push_event())
    [job] = world.store.jobs_in_state(RunState.QUEUED)
    assert job.request.kind == RunKind.BASELINE and job.head_sha == HEAD and job.pr_number is None
    assert job.request.trigger == "push to main"
    # No pull request: no check runs, no summary.
    assert world.check_runs() == [] and world.comments() == []
    [config_read] = world.gh.called("GET", CONFIG_URL)
    assert config_read.query == {"ref": [HEAD]}  # the pushed commit's own config


@pytest.mark.parametrize(
    "event",
    [
        push_event("refs/heads/feature"),
        push_event("refs/tags/v1.0"),
        push_event(deleted=True, after="0" * 40),
    ],
    ids=["other-branch", "tag", "branch-deleted"],
)
async def test_other_pushes_run_nothing(world: World, event: dict[str, Any]) -> None:
    await world.deliver("push", event)
    assert world.gh.calls == [] and world.store.jobs_in_state(RunState.QUEUED) == []


# --- installation ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("event", "action"),
    [("installation", "created"), ("installation", "deleted"), ("installation_repositories", "added")],
)
async def test_installations_are_recorded(world: World, event: str, action: str) -> None:
    payload = payloads.event(event, action, installation_id=42)
    await world.deliver(event, payload)
    account = payload["installation"]["account"]["login"]
    assert world.store.installation(42) == (account, action)
    assert world.gh.calls == []


def test_the_mock_refuses_what_github_would() -> None:
    import asyncio

    gh = MockGitHubAPI()
    with pytest.raises(AssertionError, match="GitHub would refuse"):
        asyncio.run(gh.post(f"/repos/{REPO}/check-runs", data={"name": "x"}))  # no head_sha
    with pytest.raises(AssertionError, match="no such operation"):
        asyncio.run(gh.getitem(f"/repos/{REPO}/not-an-endpoint"))
    assert gh.calls == []
