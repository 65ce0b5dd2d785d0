"""`/retest-gpu` in PR comments: parse, check who asked, react, and run.

A valid command gets 👀 at once and 🚀 or 😕 when its run ends; a bad one gets a short reply with
the usage; an untrusted commenter gets a reply saying why nothing ran. The bot never reacts to
its own comments or any bot's.
"""

from __future__ import annotations

import asyncio
import hashlib

import structlog
from gidgethub import routing, sansio

from bot.core.config import RepoConfig
from bot.core.kinds import COMMAND, Reaction
from bot.core.models import RunScope
from handlers.context import HandlerContext
from handlers.decisions.commands import is_new_command, parse_comment, reply_for_errors, usage_text
from handlers.decisions.environments import choose_environments
from handlers.decisions.trust import (
    Commenter,
    TrustDecision,
    commenter_from_payload,
    decide_comment,
    needs_lookup,
    pr_facts_from_payload,
)
from handlers.events import IssueCommentEvent, PullRequest, parse
from handlers.queries import lookup_user_facts
from handlers.runs import approvals_of, load_config, request_from_pr, start_runs

router = routing.Router()
log = structlog.get_logger(__name__)


@router.register("issue_comment", action="created")
@router.register("issue_comment", action="edited")
async def comment_on_pr(event: sansio.Event, ctx: HandlerContext) -> None:
    payload = parse(IssueCommentEvent, event.data)
    issue, comment = payload.issue, payload.comment
    if issue.pull_request is None or ctx.gh is None or ctx.reporter is None:
        return
    body = comment.body or ""
    if not is_new_command(payload.body_before_edit, body):
        return
    commenter = commenter_from_payload(comment, payload.sender)
    if commenter.ignored or commenter.login == ctx.bot_login:
        return
    repo, number, comment_id = payload.repository.full_name, issue.number, comment.id
    parsed = parse_comment(body)
    if parsed.errors:
        await ctx.reporter.react(repo, comment_id, Reaction.REJECTED)
        await ctx.reporter.reply(repo, number, reply_for_errors(parsed.errors))
        return
    command = parsed.command
    if command is None:
        return
    if command.help:
        await ctx.reporter.reply(repo, number, usage_text())
        return
    pull = PullRequest.model_validate(await ctx.gh.getitem(f"/repos/{repo}/pulls/{number}"))
    if pull.state != "open":
        await ctx.reporter.reply(repo, number, "This pull request is closed, so nothing was run.")
        return
    config = await load_config(ctx, repo, number, pull.base.ref)
    if config is None:
        return
    decision = await _decide(ctx, config, repo, number, pull, commenter)
    if decision.ignored:
        return
    if not decision.run:
        await ctx.reporter.reply(repo, number, decision.reason)
        return
    labels = [label.name for label in pull.labels]
    choice = choose_environments(config, pull.base.ref, labels, command.envs)
    if choice.errors:
        await ctx.reporter.react(repo, comment_id, Reaction.REJECTED)
        await ctx.reporter.reply(repo, number, "\n".join(choice.errors))
        return
    if decision.approve_sha:
        await asyncio.to_thread(ctx.store.add_approval, repo, number, decision.approve_sha, commenter.login)
    request = request_from_pr(
        pull, ctx.installation_id, scope=command.scope, trigger=f"{COMMAND} by @{commenter.login}"
    )
    request.comment_id = comment_id
    request.perf = command.perf
    request.author_trusted = decision.author_trusted
    if command.scope == RunScope.FAILED:
        request.only_tests = await _failed_last_time(ctx, repo, number)
        if not request.only_tests:
            await ctx.reporter.react(repo, comment_id, Reaction.REJECTED)
            await ctx.reporter.reply(
                repo, number, f"No test failed in the last run, so `{COMMAND} failed` has nothing to rerun."
            )
            return
    await ctx.reporter.react(repo, comment_id, Reaction.ACCEPTED)
    jobs = await start_runs(
        ctx,
        request,
        config,
        choice.environments,
        trigger_key=f"comment-{comment_id}-{hashlib.sha256(body.encode()).hexdigest()[:12]}",
    )
    log.info("retest requested", scope=command.scope.value, runs=len(jobs))


async def _decide(
    ctx: HandlerContext,
    config: RepoConfig,
    repo: str,
    number: int,
    pull: PullRequest,
    commenter: Commenter,
) -> TrustDecision:
    """May this comment run code? Asks GitHub only what the associations leave open."""
    assert ctx.gh is not None
    pr = pr_facts_from_payload(pull)
    lookup = needs_lookup(config.trust, commenter.login, commenter.association, is_bot=commenter.is_bot)
    facts = await lookup_user_facts(ctx.gh, repo, lookup)
    author_facts = None
    if commenter.login.lower() != pr.author_login.lower():
        lookup = needs_lookup(config.trust, pr.author_login, pr.author_association, is_bot=pr.author_is_bot)
        author_facts = await lookup_user_facts(ctx.gh, repo, lookup)
    approvals = await approvals_of(ctx, repo, number)
    return decide_comment(config.trust, pr, commenter, approvals, facts, author_facts)


async def _failed_last_time(ctx: HandlerContext, repo: str, number: int) -> list[str]:
    state = await asyncio.to_thread(ctx.store.pull_state, repo, number)
    return sorted({nodeid for ids in state.failed_tests.values() for nodeid in ids})
