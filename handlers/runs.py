"""Starting runs for a PR: config, trust, environments, superseding — shared by every trigger.

Each step's decision is a pure function (trust, environments); this module makes the few API
calls those decisions need and hands the result to the scheduler.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import structlog

from bot.core.config import ConfigError, Environment, RepoConfig
from bot.core.kinds import Stage
from bot.core.models import RunRequest, RunScope
from bot.render.check_runs import render_awaiting_approval_output
from handlers.context import HandlerContext
from handlers.decisions.environments import choose_environments
from handlers.decisions.trust import (
    Approval,
    PrFacts,
    decide_pr_run,
    needs_lookup,
    pr_facts_from_payload,
    untrusted_pr_note,
)
from handlers.events import PullRequest
from handlers.queries import fetch_repo_config, lookup_user_facts

log = structlog.get_logger(__name__)


def request_from_pr(
    pull: PullRequest,
    installation_id: int | None,
    *,
    scope: RunScope = RunScope.SELECTED,
    trigger: str = "",
) -> RunRequest:
    """The run request for a PR (from a webhook or from GET /pulls/N)."""
    return RunRequest(
        installation_id=installation_id,
        repo=pull.base.repo.full_name,
        clone_url=pull.base.repo.clone_url,
        private=pull.base.repo.private,
        pr_number=pull.number,
        head_sha=pull.head.sha,
        head_ref=pull.head.ref,
        base_ref=pull.base.ref,
        base_sha=pull.base.sha,
        scope=scope,
        pr_body=pull.body or "",
        labels=[label.name for label in pull.labels],
        trigger=trigger,
    )


async def load_config(ctx: HandlerContext, repo: str, pr_number: int | None, ref: str) -> RepoConfig | None:
    """The config on the base branch; on a bad file, the summary says what is wrong and None returns."""
    assert ctx.gh is not None
    try:
        return await fetch_repo_config(ctx.gh, repo, ref)
    except ConfigError as exc:
        log.warning("bad repository config", problems=exc.problems)
        if ctx.reporter is not None and pr_number is not None:
            notice = "\n".join(f"- {p}" for p in exc.problems)
            await ctx.reporter.refresh_summary(repo, pr_number, override=(Stage.CONFIG_ERROR, notice))
        return None


async def approvals_of(ctx: HandlerContext, repo: str, pr_number: int) -> list[Approval]:
    rows = await asyncio.to_thread(ctx.store.approvals, repo, pr_number)
    return [Approval(sha=sha, approver=who) for sha, who in rows]


async def start_runs(
    ctx: HandlerContext,
    request: RunRequest,
    config: RepoConfig,
    environments: Sequence[Environment],
    *,
    trigger_key: str,
) -> Sequence[object]:
    """Supersede older runs of the PR, then queue one run per environment."""
    if request.pr_number is not None:
        await ctx.scheduler.cancel(request.repo, request.pr_number, keep_sha=request.head_sha)
    return await ctx.scheduler.schedule(request, config, environments, trigger_key)


async def run_pr_head(
    ctx: HandlerContext, pull: PullRequest, request: RunRequest, *, trigger_key: str
) -> None:
    """Run the PR's head in the environments the base branch's config picks, once it may run."""
    config = await load_config(ctx, request.repo, request.pr_number, pull.base.ref)
    if config is None:
        return
    environments = choose_environments(config, request.base_ref, request.labels).environments
    allowed = await runnable_request(ctx, config, request, pr_facts_from_payload(pull), environments)
    if allowed is not None:
        await start_runs(ctx, allowed, config, environments, trigger_key=trigger_key)


async def runnable_request(
    ctx: HandlerContext,
    config: RepoConfig,
    request: RunRequest,
    pr: PrFacts,
    environments: Sequence[Environment],
) -> RunRequest | None:
    """The request to run, marked with whether its author is trusted; None while the head commit
    waits for a maintainer's approval.

    While it waits, older runs of the PR are cancelled, and the summary and one check run per
    check of each environment say that a maintainer must approve the commit.
    """
    assert ctx.gh is not None and request.pr_number is not None
    approvals = await approvals_of(ctx, request.repo, request.pr_number)
    lookup = needs_lookup(config.trust, pr.author_login, pr.author_association, is_bot=pr.author_is_bot)
    facts = await lookup_user_facts(ctx.gh, request.repo, lookup)
    decision = decide_pr_run(config.trust, pr, approvals, facts)
    if decision.run:
        return request.model_copy(update={"author_trusted": decision.author_trusted})
    log.info("run waits for approval", reason=decision.reason)
    # The older commit's runs must not go on once an untrusted author pushes new code.
    await ctx.scheduler.cancel(request.repo, request.pr_number, keep_sha=request.head_sha)
    if ctx.reporter is not None:
        note = untrusted_pr_note(config.trust, pr, approvals)
        await ctx.reporter.refresh_summary(
            request.repo, request.pr_number, override=(Stage.AWAITING_APPROVAL, note)
        )
        # The checks tab says it too: "action required", not a silent absence of checks.
        for env in environments:
            outputs = render_awaiting_approval_output(env.name, reason=note)
            await ctx.reporter.create_check_runs(
                request.repo, request.head_sha, outputs, key=f"awaiting-approval/{env.name}"
            )
    return None
