"""The publisher's write side on GitHub: check runs, the one sticky comment, replies and reactions.

Only the publisher package imports this module (an import-linter contract in pyproject.toml keeps
it so): whatever changes a run writes the store, and :mod:`bot.service.publisher.publisher` tells
GitHub from it. Rendering is pure (:mod:`bot.render`); this module only sends what it renders. The
sticky comment is rebuilt from the store's view of the PR every time, under a per-PR lock, so two
runs that finish at once both write the same, latest summary into the same comment.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
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
from bot.render.run_page import run_page_url
from bot.service.github import RetryPolicy, retrying
from bot.service.locks import PrLocking
from bot.service.store.protocol import Store
from bot.service.store.records import Job, PullState

log = structlog.get_logger(__name__)


# GitHub appends a check run's annotations on every update and never takes one back: each is sent
# once per check run (an early one while the tests run, then the final ones), whatever else
# changes. The ids sent are kept beside the digests, under this key.
_ANNOTATED = "{kind}#annotated"


def _annotation_id(annotation: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(annotation, sort_keys=True).encode()).hexdigest()[:16]


def _annotated(recorded: str | None) -> set[str]:
    return set(json.loads(recorded)) if recorded else set()


def _digest(out: CheckRunOutput) -> str:
    """What decides whether a check run is sent again. A completed check's result is its
    conclusion, title, text and annotations; its summary's header (the run's duration so far)
    alone changing sends nothing, so a check completed early is not sent again at the end, and
    its annotations, which GitHub appends on every update, are never doubled."""
    fields = {"status", "conclusion", "title", "text", "annotations", "kind"}
    if out.status != "completed":
        fields.add("summary")
    return hashlib.sha256(out.model_dump_json(include=fields).encode()).hexdigest()[:32]


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
    def __init__(
        self,
        gh: GitHubAPI,
        store: Store,
        locks: PrLocking,
        bot_login: str,
        *,
        app_id: int | None = None,
        retry: RetryPolicy | None = None,
        public_url: str | None = None,
    ):
        self.gh = gh
        self.public_url = public_url
        self.store = store
        self.locks = locks
        self.bot_login = bot_login
        self.app_slug = bot_login.removesuffix("[bot]")
        self.app_id = app_id
        self.retry = retry or RetryPolicy()

    def _retrying(self) -> Any:
        # After a lost answer each retry first looks for what the previous attempt may have made.
        return retrying(self.retry)

    # --- check runs ------------------------------------------------------------------------------

    async def create_check_runs(
        self, repo: str, head_sha: str, outputs: Sequence[CheckRunOutput], *, key: str
    ) -> dict[str, int]:
        """Check runs not tied to a job (awaiting approval): tagged ``{key}/{kind}``, found again
        rather than created twice when the same event is handled again."""
        existing = await self.find_check_runs(repo, head_sha)
        ids: dict[str, int] = {}
        for out in outputs:
            external_id = f"{key}/{out.kind.value}"
            ids[out.kind.value] = await self._send(
                repo, head_sha, external_id, existing.get(external_id), out
            )
        return ids

    async def sync_check_runs(
        self, job: Job, outputs: Sequence[CheckRunOutput], *, while_state: RunState | None = None
    ) -> None:
        """Bring the job's check runs to ``outputs``: each missing one created (looked up first if a
        request may already have created it), each changed one updated, an unchanged one left alone.
        With ``while_state``, nothing is sent once the job has left that state (a queued job's
        outputs never overwrite a running one's)."""
        async with self.locks.job(job.id):
            stored: Job | None = await asyncio.to_thread(self.store.get_job, job.id)
            job = stored or job
            if while_state is not None and job.state != while_state:
                return
            existing: dict[str, int] = {}
            missing = any(out.kind.value not in job.check_runs for out in outputs)
            if missing and await asyncio.to_thread(self.store.intend_check_runs, job.id):
                existing = await self.find_check_runs(job.repo, job.head_sha)
            for out in outputs:
                kind, digest = out.kind.value, _digest(out)
                if job.check_run_sent.get(kind) == digest:
                    continue
                known = job.check_runs.get(kind) or existing.get(job.external_id(kind))
                annotated = _annotated(job.check_run_sent.get(_ANNOTATED.format(kind=kind)))
                fresh = out.model_copy(
                    update={"annotations": [a for a in out.annotations if _annotation_id(a) not in annotated]}
                )
                check_id = await self._send(
                    job.repo, job.head_sha, job.external_id(kind), known, fresh, self.run_url(job.id)
                )
                if kind not in job.check_runs:
                    await asyncio.to_thread(self.store.set_check_runs, job.id, {kind: check_id})
                if fresh.annotations:
                    annotated |= {_annotation_id(a) for a in fresh.annotations}
                    sent = json.dumps(sorted(annotated))
                    await asyncio.to_thread(
                        self.store.set_check_run_sent, job.id, _ANNOTATED.format(kind=kind), sent
                    )
                await asyncio.to_thread(self.store.set_check_run_sent, job.id, kind, digest)

    def run_url(self, job_id: str) -> str | None:
        """The run's page, where its check runs' Details link goes; None without a public URL."""
        return run_page_url(self.public_url, job_id)

    async def _send(
        self,
        repo: str,
        head_sha: str,
        external_id: str,
        check_id: int | None,
        out: CheckRunOutput,
        details_url: str | None = None,
    ) -> int:
        batches = annotation_batches(out.annotations)
        body = out.request_body(batches[0] if batches else None)
        if details_url is not None:
            body["details_url"] = details_url
        if check_id is None:
            check_id = await self._create(repo, head_sha, external_id, body)
        else:
            await self.gh.patch(f"/repos/{repo}/check-runs/{check_id}", data=body)
        await self._more_annotations(repo, check_id, out, batches[1:])
        return check_id

    async def _create(self, repo: str, head_sha: str, external_id: str, body: dict[str, Any]) -> int:
        """POST a check run; after a lost answer, look it up by external id before posting again."""
        body = body | {"head_sha": head_sha, "external_id": external_id}
        async for attempt in self._retrying():
            with attempt:
                if attempt.num > 1:
                    found = (await self.find_check_runs(repo, head_sha)).get(external_id)
                    if found is not None:
                        log.info("check run found after a lost answer", external_id=external_id)
                        await self.gh.patch(f"/repos/{repo}/check-runs/{found}", data=_without_head(body))
                        return found
                created = await self.gh.post(f"/repos/{repo}/check-runs", data=body)
                return int(created["id"])
        raise AssertionError("unreachable")

    async def _our_check_runs(self, repo: str, head_sha: str) -> list[dict[str, Any]]:
        """This App's check runs on the commit, every one (``filter=all``), not only the latest."""
        url = f"/repos/{repo}/commits/{head_sha}/check-runs?filter=all&per_page=100"
        if self.app_id is not None:
            url += f"&app_id={self.app_id}"
        return [run async for run in self.gh.getiter(url, iterable_key="check_runs")]

    async def find_check_runs(self, repo: str, head_sha: str) -> dict[str, int]:
        """This App's check runs on the commit, by external id (the oldest of any duplicates)."""
        found: dict[str, int] = {}
        for run in await self._our_check_runs(repo, head_sha):
            external_id, check_id = run.get("external_id"), int(run["id"])
            if external_id:
                found[external_id] = min(check_id, found.get(external_id, check_id))
        return found

    async def list_open_check_runs(self, repo: str, head_sha: str) -> list[dict[str, Any]]:
        """This App's check runs on the commit that are not completed."""
        return [run for run in await self._our_check_runs(repo, head_sha) if run.get("status") != "completed"]

    async def complete_check_run(self, repo: str, check_id: int, out: CheckRunOutput) -> None:
        await self.gh.patch(f"/repos/{repo}/check-runs/{check_id}", data=out.request_body())

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
        """Rewrite the PR's one summary comment from the store's current view of the PR.

        After a lost answer it tries again; a comment being posted is marked first, so the retry
        looks for it before it posts another.
        """
        async with self.locks(repo, pr_number):
            async for attempt in self._retrying():
                with attempt:
                    body, current_verdict = await asyncio.to_thread(
                        self._summary_body, repo, pr_number, override
                    )
                    if body is None:
                        return None
                    return await self._upsert(repo, pr_number, body, current_verdict)
        raise AssertionError("unreachable")

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
        if stage in (Stage.DONE, Stage.CANCELLED):
            report = job.final_report(report)
        position = self.store.queue_position(job.id) if stage == Stage.QUEUED else None
        return CommentSection(
            environment=job.environment,
            stage=stage,
            report=report,
            queue_position=position,
            run_url=self.run_url(job.id),
        )

    async def _upsert(self, repo: str, pr_number: int, body: str, current_verdict: str | None) -> int:
        state = await asyncio.to_thread(self.store.pull_state, repo, pr_number)
        digest = hashlib.sha256(body.encode()).hexdigest()
        posted = False  # a post whose answer was lost did create the comment
        if state.comment_id is None or state.comment_pending:
            # Unknown, or a post whose answer was lost: what is on GitHub decides.
            known = state.comment_id
            state.comment_id = await self._one_comment(repo, pr_number)
            posted = state.comment_pending and state.comment_id not in (None, known)
            state.comment_pending = False
            state.comment_body_hash = None
        fresh = False
        if current_verdict is not None and not posted:
            previous = Verdict(state.last_verdict) if state.last_verdict else None
            fresh = state.comment_id is not None and needs_new_comment(previous, Verdict(current_verdict))
        if state.comment_id is not None and fresh:
            # News that needs action (pass → fail): a new comment notifies people; the old one
            # goes only once the new one exists, so the PR never shows no summary.
            created = await self._post_comment(state, body)
            await self._delete_comment(repo, state.comment_id)
            state.comment_id = created
        elif state.comment_id is not None and state.comment_body_hash == digest:
            state.last_verdict = current_verdict or state.last_verdict
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
            state.comment_id = await self._post_comment(state, body)
        if current_verdict is not None:
            state.last_verdict = current_verdict
        state.comment_body_hash = digest
        await asyncio.to_thread(self.store.save_pull_state, state)
        return state.comment_id

    async def _post_comment(self, state: PullState, body: str) -> int:
        """Post a new summary, marked pending in the store first (see :meth:`_upsert`)."""
        state.comment_pending = True
        await asyncio.to_thread(self.store.save_pull_state, state)
        url = f"/repos/{state.repo}/issues/{state.pr_number}/comments"
        created = await self.gh.post(url, data={"body": body})
        state.comment_pending = False
        return int(created["id"])

    async def _one_comment(self, repo: str, pr_number: int) -> int | None:
        """Our summary, found by marker AND author (other tools copy markers, users quote them).
        Should there be more than one (a post whose answer was lost), the newest stays."""
        ours: list[int] = []
        async for comment in self.gh.getiter(f"/repos/{repo}/issues/{pr_number}/comments?per_page=100"):
            user = comment.get("user") or {}
            if user.get("login") == self.bot_login and STICKY_MARKER in (comment.get("body") or ""):
                ours.append(int(comment["id"]))
        for extra in ours[:-1]:
            log.info("a second summary comment removed", comment_id=extra)
            await self._delete_comment(repo, extra)
        return ours[-1] if ours else None

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
        # GitHub answers an existing reaction with itself: posting it again is safe.
        async for attempt in self._retrying():
            with attempt:
                url = f"/repos/{repo}/issues/comments/{comment_id}/reactions"
                await self.gh.post(url, data={"content": content})
                return


def _without_head(body: dict[str, Any]) -> dict[str, Any]:
    """An update's body: the create-only fields left out."""
    return {k: v for k, v in body.items() if k not in ("head_sha", "external_id")}
