"""The GitHub side of reporting: check runs, the one sticky comment, replies and reactions.

Rendering is pure (:mod:`bot.render`); this module only sends what it renders. The sticky
comment is rebuilt from the store's view of the PR every time, under a per-PR lock, so two runs
that finish at once both write the same, latest summary into the same comment.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import structlog
from gidgethub import BadRequest
from gidgethub.abc import GitHubAPI

from bot.core.kinds import Stage
from bot.core.models import RunState
from bot.core.verdict import Verdict, verdict
from bot.render.annotations import annotation_batches
from bot.render.check_runs import CheckRunOutput
from bot.render.comment import (
    STICKY_MARKER,
    CommentSection,
    needs_new_comment,
    render_comment,
    render_pr_comment,
)
from bot.service.store.protocol import Store
from bot.service.store.records import Job

log = structlog.get_logger(__name__)


class PrLocks:
    """One lock per PR in this process: comment edits and scheduling for a PR never interleave."""

    def __init__(self) -> None:
        self._locks: dict[tuple[str, int], asyncio.Lock] = defaultdict(asyncio.Lock)

    def __call__(self, repo: str, pr_number: int) -> asyncio.Lock:
        return self._locks[(repo, pr_number)]


def _stage_of(job: Job) -> Stage:
    return {
        RunState.QUEUED: Stage.QUEUED,
        RunState.RUNNING: Stage.RUNNING,
        RunState.CANCELLED: Stage.CANCELLED,
    }.get(job.state, Stage.DONE)


_SEVERITY = [
    Verdict.FAIL,
    Verdict.ERROR,
    Verdict.FLAKY_ONLY,
    Verdict.CANCELLED,
    Verdict.PASS,
    Verdict.NOTHING_TO_CHECK,
]


def _worst(verdicts: list[Verdict]) -> Verdict:
    return min(verdicts, key=_SEVERITY.index)


class GitHubReporter:
    def __init__(self, gh: GitHubAPI, store: Store, locks: PrLocks, bot_login: str):
        self.gh = gh
        self.store = store
        self.locks = locks
        self.bot_login = bot_login
        self.app_slug = bot_login.removesuffix("[bot]")

    # --- check runs ------------------------------------------------------------------------------

    async def create_check_runs(
        self, repo: str, head_sha: str, outputs: Sequence[CheckRunOutput]
    ) -> dict[str, int]:
        ids: dict[str, int] = {}
        for out in outputs:
            batches = annotation_batches(out.annotations)
            body = out.request_body(batches[0] if batches else None) | {"head_sha": head_sha}
            created = await self.gh.post(f"/repos/{repo}/check-runs", data=body)
            ids[out.kind.value] = int(created["id"])
            await self._more_annotations(repo, ids[out.kind.value], out, batches[1:])
        return ids

    async def update_check_runs(
        self, repo: str, ids: dict[str, int], outputs: Sequence[CheckRunOutput]
    ) -> None:
        for out in outputs:
            check_id = ids.get(out.kind.value)
            if check_id is None:
                continue
            batches = annotation_batches(out.annotations)
            body = out.request_body(batches[0] if batches else None)
            await self.gh.patch(f"/repos/{repo}/check-runs/{check_id}", data=body)
            await self._more_annotations(repo, check_id, out, batches[1:])

    async def _more_annotations(
        self, repo: str, check_id: int, out: CheckRunOutput, batches: list[list[dict[str, Any]]]
    ) -> None:
        # GitHub appends the annotations of each update; title and summary must be resent.
        for batch in batches:
            output = {"title": out.title, "summary": out.summary, "annotations": batch}
            await self.gh.patch(f"/repos/{repo}/check-runs/{check_id}", data={"output": output})

    # --- the sticky comment ------------------------------------------------------------------------

    async def refresh_summary(
        self,
        repo: str,
        pr_number: int,
        *,
        override: tuple[Stage, str] | None = None,
    ) -> int | None:
        """Rewrite the PR's one summary comment from the store's current view of the PR."""
        async with self.locks(repo, pr_number):
            body, current_verdict = await asyncio.to_thread(self._summary_body, repo, pr_number, override)
            if body is None:
                return None
            return await self._upsert(repo, pr_number, body, current_verdict)

    def _summary_body(
        self, repo: str, pr_number: int, override: tuple[Stage, str] | None
    ) -> tuple[str | None, str | None]:
        """The comment for the PR's newest commit: one section per environment it runs in."""
        if override is not None:
            stage, notice = override
            return render_comment(None, stage=stage, notice=notice, app_slug=self.app_slug), None
        jobs = self.store.jobs_for_pr(repo, pr_number)
        if not jobs:
            return None, None
        head = jobs[-1].head_sha
        latest: dict[str, Job] = {}
        for job in jobs:
            if job.head_sha == head:
                latest[job.environment] = job  # jobs come oldest first: the last one wins
        sections = [self._section(job, jobs) for job in latest.values()]
        body = render_pr_comment(sections, app_slug=self.app_slug)
        verdicts = [verdict(s.report) for s in sections if s.report is not None and s.stage == Stage.DONE]
        if len(verdicts) < len(sections):
            return body, None  # not every environment has finished: no verdict to notify about
        return body, _worst(verdicts).value

    def _section(self, job: Job, jobs: list[Job]) -> CommentSection:
        stage = _stage_of(job)
        report = self.store.report(job.id)
        if report is None and stage in (Stage.QUEUED, Stage.RUNNING):
            # While waiting, show the last finished run of this environment: still worth reading.
            done = [j for j in jobs if j.environment == job.environment and j.state == RunState.SUCCEEDED]
            report = self.store.report(done[-1].id) if done else None
        if stage == Stage.DONE and report is None:
            report = job.report_without_results(job.state, job.error or "the run ended without results")
        position = self.store.queue_position(job.id) if stage == Stage.QUEUED else None
        return CommentSection(
            environment=job.environment, stage=stage, report=report, queue_position=position
        )

    async def _upsert(self, repo: str, pr_number: int, body: str, current_verdict: str | None) -> int:
        state = await asyncio.to_thread(self.store.pull_state, repo, pr_number)
        digest = hashlib.sha256(body.encode()).hexdigest()
        if state.comment_id is None:
            state.comment_id = await self._find_comment(repo, pr_number)
        fresh = False
        if current_verdict is not None:
            previous = Verdict(state.last_verdict) if state.last_verdict else None
            fresh = state.comment_id is not None and needs_new_comment(previous, Verdict(current_verdict))
            state.last_verdict = current_verdict
        if state.comment_id is not None and fresh:
            # News that needs action (pass → fail): a new comment notifies people; the old one
            # goes only once the new one exists, so the PR never shows no summary.
            created = await self.gh.post(f"/repos/{repo}/issues/{pr_number}/comments", data={"body": body})
            await self._delete_comment(repo, state.comment_id)
            state.comment_id = int(created["id"])
        elif state.comment_id is not None and state.comment_body_hash == digest:
            await asyncio.to_thread(self.store.save_pull_state, state)
            return state.comment_id
        elif state.comment_id is not None:
            try:
                await self.gh.patch(f"/repos/{repo}/issues/comments/{state.comment_id}", data={"body": body})
            except BadRequest as exc:
                if exc.status_code != 404:
                    raise
                log.info("summary comment was deleted; posting a new one")
                state.comment_id = None
        if state.comment_id is None:
            created = await self.gh.post(f"/repos/{repo}/issues/{pr_number}/comments", data={"body": body})
            state.comment_id = int(created["id"])
        state.comment_body_hash = digest
        await asyncio.to_thread(self.store.save_pull_state, state)
        return state.comment_id

    async def _find_comment(self, repo: str, pr_number: int) -> int | None:
        """Our comment by marker AND author: other tools copy markers, and users quote them."""
        async for comment in self.gh.getiter(f"/repos/{repo}/issues/{pr_number}/comments?per_page=100"):
            user = comment.get("user") or {}
            if user.get("login") == self.bot_login and STICKY_MARKER in (comment.get("body") or ""):
                return int(comment["id"])
        return None

    async def _delete_comment(self, repo: str, comment_id: int) -> None:
        try:
            await self.gh.delete(f"/repos/{repo}/issues/comments/{comment_id}")
        except BadRequest as exc:
            if exc.status_code != 404:
                raise

    # --- conversation --------------------------------------------------------------------------------

    async def reply(self, repo: str, pr_number: int, body: str) -> None:
        await self.gh.post(f"/repos/{repo}/issues/{pr_number}/comments", data={"body": body})

    async def react(self, repo: str, comment_id: int, content: str) -> None:
        await self.gh.post(f"/repos/{repo}/issues/comments/{comment_id}/reactions", data={"content": content})
