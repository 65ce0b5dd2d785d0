"""`check_run` rerequested: the "Re-run" button on one of our check runs."""

from __future__ import annotations

from gidgethub import routing, sansio

from handlers.context import HandlerContext
from handlers.events import CheckRunEvent, PullNumber, PullRequest, parse
from handlers.runs import request_from_pr, run_pr_head

router = routing.Router()


@router.register("check_run", action="rerequested")
async def rerun_requested(event: sansio.Event, ctx: HandlerContext) -> None:
    payload = parse(CheckRunEvent, event.data)
    check = payload.check_run
    slug = check.app.slug if check.app is not None else None
    if ctx.gh is None or slug not in (None, ctx.bot_login.removesuffix("[bot]")):
        return
    repo = payload.repository.full_name
    numbers = [p.number for p in check.pull_requests]
    if not numbers:
        # Fork PRs come with an empty list: map the SHA to its PRs ourselves.
        pulls = await ctx.gh.getitem(f"/repos/{repo}/commits/{check.head_sha}/pulls")
        numbers = [p.number for p in map(PullNumber.model_validate, pulls) if p.state == "open"]
    for number in numbers:
        pull = PullRequest.model_validate(await ctx.gh.getitem(f"/repos/{repo}/pulls/{number}"))
        if pull.head.sha != check.head_sha:
            continue  # an outdated commit: rerunning it would report on code no longer in the PR
        request = request_from_pr(pull, ctx.installation_id, trigger="check run re-run")
        await run_pr_head(ctx, pull, request, trigger_key=f"rerequest-{event.delivery_id}")
