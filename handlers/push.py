"""Pushes to the default branch: record the CI reference probe and the per-test coverage map.

The next PRs compare against that probe (the parity table's "CI reference" when the config pins
none) and select their tests with that map.
"""

from __future__ import annotations

from gidgethub import routing, sansio

from bot.core.models import RunKind, RunRequest
from handlers.context import HandlerContext
from handlers.events import PushEvent, parse
from handlers.runs import load_config

router = routing.Router()


@router.register("push")
async def default_branch_pushed(event: sansio.Event, ctx: HandlerContext) -> None:
    payload = parse(PushEvent, event.data)
    repo, default = payload.repository, payload.repository.default_branch
    if (
        ctx.gh is None
        or payload.deleted
        or default is None
        or payload.ref != f"refs/heads/{default}"
        or payload.after is None
    ):
        return
    config = await load_config(ctx, repo.full_name, None, payload.after)
    if config is None:
        return
    request = RunRequest(
        kind=RunKind.BASELINE,
        installation_id=ctx.installation_id,
        repo=repo.full_name,
        clone_url=repo.clone_url,
        private=repo.private,
        head_sha=payload.after,
        base_ref=default,
        trigger=f"push to {default}",
    )
    await ctx.scheduler.schedule(request, config, config.environments, trigger_key="baseline")
