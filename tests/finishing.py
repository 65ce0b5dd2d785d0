"""What "finished" means on GitHub, read from the fake: every check run of the PR's runs completed,
none created twice, no check missing, one summary that no longer says a run is under way."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from fakegithub import FakeGitHub

from bot.core.kinds import CHECK_KINDS
from bot.render.check_runs import check_run_name
from bot.render.comment import STICKY_MARKER

STILL_GOING = ("🔄 Running", "⏳ Queued")

# Settings that make retries, the reconciler and heartbeats fast enough for tests.
FAST = {
    "github_retry_attempts": 3,
    "github_retry_wait_s": 0.05,
    "github_rate_limit_wait_s": 0.5,
    "reconcile_interval_s": 0.3,
    "heartbeat_s": 0.2,
}


@dataclass
class GitHubView:
    """The PR as its readers see it on GitHub."""

    runs: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # name → states, oldest first
    summaries: list[str] = field(default_factory=list)

    def names(self) -> Counter[str]:
        return Counter({name: len(states) for name, states in self.runs.items()})

    def open_runs(self) -> list[str]:
        return [name for name, states in self.runs.items() for s in states if s["status"] != "completed"]

    def conclusions(self) -> dict[str, list[str | None]]:
        return {name: [s["conclusion"] for s in states] for name, states in self.runs.items()}


def view(fake: FakeGitHub, repo: str, pr_number: int, head_sha: str) -> GitHubView:
    seen = GitHubView()
    for run in fake.check_runs(repo, head_sha=head_sha):
        seen.runs.setdefault(run.name, []).append(run.states[-1])
    seen.summaries = [
        c.body for c in fake.comments(repo, pr_number) if c.user == fake.bot_login and STICKY_MARKER in c.body
    ]
    return seen


def finished(seen: GitHubView, *, runs_per_check: int = 1, environment: str = "default") -> bool:
    """Every check of every run completed, exactly once each, and one summary saying it is over."""
    wanted = {check_run_name(k, environment): runs_per_check for k in CHECK_KINDS}
    return (
        dict(seen.names()) == wanted
        and not seen.open_runs()
        and len(seen.summaries) == 1
        and not any(word in seen.summaries[0] for word in STILL_GOING)
    )


def problems(seen: GitHubView, *, runs_per_check: int = 1, environment: str = "default") -> list[str]:
    """Why :func:`finished` is False, in words (for assertion messages)."""
    out = []
    wanted = {check_run_name(k, environment): runs_per_check for k in CHECK_KINDS}
    if dict(seen.names()) != wanted:
        out.append(f"check runs by name {dict(seen.names())}, wanted {wanted}")
    if seen.open_runs():
        out.append(f"open check runs: {seen.open_runs()}")
    if len(seen.summaries) != 1:
        out.append(f"{len(seen.summaries)} summary comments")
    elif any(word in seen.summaries[0] for word in STILL_GOING):
        out.append("the summary still says the run is under way")
    return out


# --- faults on GitHub's side ------------------------------------------------------------------------

CHECK_RUNS = "/repos/{owner}/{repo}/check-runs"
CHECK_RUN = "/repos/{owner}/{repo}/check-runs/{check_run_id}"
COMMENTS = "/repos/{owner}/{repo}/issues/{issue_number}/comments"
COMMENT = "/repos/{owner}/{repo}/issues/comments/{comment_id}"
REACTIONS = "/repos/{owner}/{repo}/issues/comments/{comment_id}/reactions"

ONCE, REPEATEDLY = 1, 12  # 12: more than one round of retries gives up, the reconciler finishes


@dataclass(frozen=True)
class Fault:
    """GitHub answering ``times`` requests of one kind of write with ``status``."""

    write: str
    method: str
    path: str
    status: int
    times: int
    after: bool = False  # carried out, and the answer lost

    @property
    def label(self) -> str:
        lost = " after doing it" if self.after else ""
        often = "once" if self.times == 1 else f"{self.times} times"
        return f"{self.write}: {self.status}{lost}, {often}"


WRITE_FAULTS = [
    *(Fault("check run create", "POST", CHECK_RUNS, 500, n) for n in (ONCE, REPEATEDLY)),
    Fault("check run create", "POST", CHECK_RUNS, 502, REPEATEDLY, after=True),
    *(Fault("check run update", "PATCH", CHECK_RUN, 500, n) for n in (ONCE, REPEATEDLY)),
    *(Fault("comment create", "POST", COMMENTS, 502, n) for n in (ONCE, REPEATEDLY)),
    Fault("comment create", "POST", COMMENTS, 502, ONCE, after=True),
    *(Fault("comment edit", "PATCH", COMMENT, 500, n) for n in (ONCE, REPEATEDLY)),
    *(Fault("comment delete", "DELETE", COMMENT, 502, n) for n in (ONCE, REPEATEDLY)),
    *(Fault("reaction", "POST", REACTIONS, 502, n) for n in (ONCE, REPEATEDLY)),
]


async def comment_command(bot: Any, body: str, *, user: str = "maintainer") -> int:
    """A member's comment on the fake, and GitHub's webhook for it; the comment's id."""
    import payloads
    from botharness import REPO

    posted = bot.fake.add_comment(REPO, 7, body, user=user, author_association="MEMBER")
    payload = payloads.issue_comment_event(
        "created",
        body=body,
        commenter=user,
        author_association="MEMBER",
        comment_id=posted.id,
        number=7,
        repo_full_name=REPO,
        clone_url=bot.clone_url,
        installation_id=1,
        api_url=bot.fake.url,
    )
    assert await bot.send("issue_comment", payload) == 202
    return int(posted.id)


async def run_with_fault(bot: Any, fault: Fault) -> tuple[float, int]:
    """Open the sample PR with ``fault`` injected; wait until GitHub shows it finished.

    Returns the seconds from the webhook to the finished state, and how many runs per check the
    scenario makes (the reaction's scenario re-runs the PR with `/retest-gpu`).
    """
    import time

    from botharness import REPO

    fake: FakeGitHub = bot.fake
    runs = 1
    inject = lambda: fake.fail(fault.method, fault.path, fault.status, times=fault.times, after=fault.after)  # noqa: E731
    if fault.write == "comment delete":
        # Two summaries of ours, as a post whose answer was lost leaves them: one must go.
        for _ in range(2):
            fake.add_comment(REPO, 7, f"{STICKY_MARKER}\nold", user=fake.bot_login, user_type="Bot")
    start = time.monotonic()
    if fault.write != "reaction":
        inject()
    assert await bot.send("pull_request", bot.pr_event("opened")) == 202
    if fault.write == "reaction":
        await bot.wait_for("the first run", lambda: finished(view(fake, REPO, 7, bot.sample.head_sha)))
        start = time.monotonic()
        comment_id = await comment_command(bot, "/retest-gpu")
        # The reaction that says the run is on its way went out; the one with the result fails.
        await bot.wait_for("👀", lambda: [r.content for r in fake.reactions(comment_id)] == ["eyes"])
        inject()
        runs = 2

        def done() -> bool:
            reacted = [r.content for r in fake.reactions(comment_id)] == ["eyes", "-1"]
            return reacted and finished(view(fake, REPO, 7, bot.sample.head_sha), runs_per_check=2)
    else:

        def done() -> bool:
            return finished(view(fake, REPO, 7, bot.sample.head_sha))

    def settled() -> bool:
        due = [j for j in bot.store.jobs_for_pr(REPO, 7) if j.report_due]
        return done() and not due and not bot.service.workers.busy

    await bot.wait_for(fault.label, settled, timeout=180)
    return time.monotonic() - start, runs
