"""What every handler receives besides the event: the GitHub client and three small services.

Handlers are typed against these protocols, not the service's classes: each names only what the
handlers use, so a handler test passes in a recording stand-in, and the service may change how it
stores, schedules or reports without a handler noticing. ``bot.service.app`` builds the context
for each delivery from the real ones.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from gidgethub.abc import GitHubAPI

from bot.core.config import Environment, RepoConfig
from bot.core.kinds import Stage
from bot.core.models import RunRequest
from bot.render.check_runs import CheckRunOutput


class PullFacts(Protocol):
    """What handlers read of the store's record of a pull request."""

    @property
    def failed_tests(self) -> dict[str, list[str]]:
        """Environment → node ids that failed in its last run."""
        ...


class HandlerStore(Protocol):
    """The store, as far as handlers use it: approvals, a PR's last failures, installations."""

    def approvals(self, repo: str, pr_number: int) -> list[tuple[str, str]]:
        """(head SHA, approver) pairs."""
        ...

    def add_approval(self, repo: str, pr_number: int, sha: str, approver: str) -> None: ...
    def pull_state(self, repo: str, pr_number: int) -> PullFacts: ...
    def record_installation(self, installation_id: int, account: str, action: str) -> None: ...


class Reporter(Protocol):
    """What handlers say on GitHub, in the PR's conversation and its checks tab."""

    async def reply(self, repo: str, pr_number: int, body: str) -> None: ...
    async def react(self, repo: str, comment_id: int, content: str) -> None: ...
    async def refresh_summary(
        self, repo: str, pr_number: int, *, override: tuple[Stage, str] | None = None
    ) -> int | None:
        """Rewrite the PR's summary comment; ``override`` shows a stage and notice instead of runs."""
        ...

    async def create_check_runs(
        self, repo: str, head_sha: str, outputs: Sequence[CheckRunOutput], *, key: str
    ) -> dict[str, int]:
        """Check runs of no job, tagged ``{key}/{kind}``: handling the same event again finds them
        rather than creating them twice."""
        ...


class RunScheduler(Protocol):
    """Queues and cancels runs; the check runs and the summary that go with them are its business."""

    async def schedule(
        self, request: RunRequest, config: RepoConfig, environments: Sequence[Environment], trigger_key: str
    ) -> Sequence[object]:
        """One run per environment; returns those queued (none for a request already queued)."""
        ...

    async def cancel(self, repo: str, pr_number: int, *, keep_sha: str | None = None) -> Sequence[object]:
        """Cancel the PR's runs of other commits (all of them when ``keep_sha`` is None)."""
        ...


@dataclass
class HandlerContext:
    gh: GitHubAPI | None  # None when the event carries no installation (nothing can be done)
    store: HandlerStore
    reporter: Reporter | None
    scheduler: RunScheduler
    installation_id: int | None
    bot_login: str
