"""Installation events: remember which accounts installed the App."""

from __future__ import annotations

import asyncio

import structlog
from gidgethub import routing, sansio

from handlers.context import HandlerContext
from handlers.events import InstallationEvent, parse

router = routing.Router()
log = structlog.get_logger(__name__)


@router.register("installation")
@router.register("installation_repositories")
async def installation_changed(event: sansio.Event, ctx: HandlerContext) -> None:
    payload = parse(InstallationEvent, event.data)
    installation, action = payload.installation, payload.action or ""
    account = (installation.account.login if installation.account is not None else None) or ""
    await asyncio.to_thread(ctx.store.record_installation, installation.id, account, action)
    log.info("installation recorded", installation_id=installation.id, account=account, action=action)
