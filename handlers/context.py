"""What every handler receives besides the event: the GitHub client and the bot's services."""

from __future__ import annotations

from dataclasses import dataclass

from gidgethub.abc import GitHubAPI

from bot.reporter import GitHubReporter
from bot.scheduler import Scheduler
from bot.sqlite_store import SQLiteStore


@dataclass
class HandlerContext:
    gh: GitHubAPI | None  # None when the event carries no installation (nothing can be done)
    store: SQLiteStore
    reporter: GitHubReporter | None
    scheduler: Scheduler
    installation_id: int | None
    bot_login: str
