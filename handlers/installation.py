"""Installation events: remember which accounts installed the App."""

from __future__ import annotations

import asyncio

import structlog
from gidgethub import routing, sansio

from handlers.context import HandlerContext

router = routing.Router()
log = structlog.get_logger(__name__)


@router.register("installation")
@router.register("installation_repositories")
async def installation_changed(event: sansio.Event, ctx: HandlerContext) -> None:
    installation = event.data["installation"]
    account = (installation.get("account") or {}).get("login", "")
    action = event.data.get("action", "")
    await asyncio.to_thread(ctx.store.record_installation, int(installation["id"]), account, action)
    log.info("installation recorded", installation_id=installation["id"], account=account, action=action)
