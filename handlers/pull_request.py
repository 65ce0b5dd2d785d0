"""`pull_request` events: run on new code, cancel on close or draft."""

from __future__ import annotations

from gidgethub import routing, sansio

from handlers.context import HandlerContext
from handlers.events import PullRequestEvent, PullRequestStopped, parse
from handlers.runs import request_from_pr, run_pr_head

router = routing.Router()


@router.register("pull_request", action="opened")
@router.register("pull_request", action="synchronize")
@router.register("pull_request", action="reopened")
@router.register("pull_request", action="ready_for_review")
async def pr_has_new_code(event: sansio.Event, ctx: HandlerContext) -> None:
    payload = parse(PullRequestEvent, event.data)
    pull = payload.pull_request
    if pull.draft or ctx.gh is None:
        return
    request = request_from_pr(pull, ctx.installation_id, trigger=f"pull_request.{payload.action}")
    await run_pr_head(ctx, pull, request, trigger_key=f"push-{request.head_sha}")


@router.register("pull_request", action="closed")
@router.register("pull_request", action="converted_to_draft")
async def pr_stopped(event: sansio.Event, ctx: HandlerContext) -> None:
    payload = parse(PullRequestStopped, event.data)
    await ctx.scheduler.cancel(payload.repository.full_name, payload.pull_request.number)
