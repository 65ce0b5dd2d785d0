"""`pull_request` events: run on new code, cancel on close or draft."""

from __future__ import annotations

from gidgethub import routing, sansio

from handlers.context import HandlerContext
from handlers.runs import request_from_pr, run_pr_head

router = routing.Router()


@router.register("pull_request", action="opened")
@router.register("pull_request", action="synchronize")
@router.register("pull_request", action="reopened")
@router.register("pull_request", action="ready_for_review")
async def pr_has_new_code(event: sansio.Event, ctx: HandlerContext) -> None:
    pull = event.data["pull_request"]
    if pull.get("draft") or ctx.gh is None:
        return
    request = request_from_pr(pull, ctx.installation_id, trigger=f"pull_request.{event.data['action']}")
    await run_pr_head(ctx, pull, request, trigger_key=f"push-{request.head_sha}")


@router.register("pull_request", action="closed")
@router.register("pull_request", action="converted_to_draft")
async def pr_stopped(event: sansio.Event, ctx: HandlerContext) -> None:
    pull = event.data["pull_request"]
    await ctx.scheduler.cancel(event.data["repository"]["full_name"], int(pull["number"]))
