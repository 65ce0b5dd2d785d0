"""The run page: ``/runs/<id>`` (HTML), ``/runs/<id>.json`` (the record), a step's hidden lines,
``/runs/<id>/events`` (the live log, :mod:`bot.service.run_page.stream`), and
``/repos/<owner>/<repo>/pulls/<n>/latest.json`` (the record of a pull request's latest run, for
`paritybot repro owner/repo#N`).

Every answer about a run asks the gate first when its repository is private (or not known to be
public): the gate gets the request and the repository's full name and returns None to allow. When
it does not, the answer is ``unseen``'s — the very answer a run that does not exist gets (a bad id,
an unknown run, a pull request with no run), byte for byte, so no answer tells an outsider that a
private run exists. The defaults answer 404 to both. What is shown of a run goes through
:mod:`bot.service.run_page.redaction` first: nothing of the service's machines reaches a page.
Pages are served with a strict Content-Security-Policy: scripts and styles only from this
server's static files, nothing inline.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from importlib import resources
from pathlib import Path

import jinja2
from aiohttp import web
from markupsafe import Markup, escape

from bot.core.run_log import LogEvent
from bot.render.run_page import (
    CHART_HEIGHT,
    CHART_WIDTH,
    StepLog,
    lines_between,
    rounds_chart,
    run_page_url,
    step_log,
)
from bot.render.run_record import RunMeta, RunRecord, run_record
from bot.render.run_steps import fold_steps
from bot.render.terminal import Line
from bot.service.run_page.live import LogWake
from bot.service.run_page.redaction import NOTHING_MORE, PublicRedaction
from bot.service.store.protocol import Store
from bot.service.store.records import Job

Gate = Callable[[web.Request, str], Awaitable[web.StreamResponse | None]]
Unseen = Callable[[web.Request], Awaitable[web.StreamResponse]]

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
SAFE_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
}
_RUN_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
STATIC_PREFIX = "/static/run-page"
_FINAL = {"succeeded", "failed", "cancelled"}

STORE = web.AppKey("run_page_store", Store)
GATE: web.AppKey[Gate] = web.AppKey("run_page_gate")
UNSEEN: web.AppKey[Unseen] = web.AppKey("run_page_unseen")
REDACTION = web.AppKey("run_page_redaction", PublicRedaction)
WAKE = web.AppKey("run_page_wake", LogWake)
PUBLIC_URL: web.AppKey[str | None] = web.AppKey("run_page_public_url")


async def private_not_found(request: web.Request, repository: str) -> web.StreamResponse | None:
    """The default gate: nobody sees a private repository's runs (404, as for no run at all)."""
    return not_found()


async def shown_to_nobody(request: web.Request) -> web.StreamResponse:
    """The default answer for what is not shown: 404, as for no run at all."""
    return not_found()


def not_found() -> web.Response:
    return web.Response(status=404, text="no such run", headers=SAFE_HEADERS)


def _templates() -> jinja2.Environment:
    folder = resources.files("bot.service.run_page").joinpath("templates")
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(folder)),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["duration"] = _duration
    env.filters["line_html"] = line_html
    return env


def line_html(line: Line, step: int, error_line: int | None) -> Markup:
    """One log line as the page's markup: every text escaped, class names only from the parser's
    fixed set. (A filter rather than a macro: a 1,000-line first view renders five times faster.)"""
    anchor = f"s{step}-L{line.number}"
    number = f'<a class="ln" href="#{anchor}">{line.number}</a>'
    if line.group is not None:
        title = escape(line.group)
        return Markup(
            f'<div class="line grp" id="{anchor}" data-group="{title}">{number}<span class="t">▸ {title}</span></div>'
        )
    if line.end_group:
        return Markup(f'<div class="line egrp" id="{anchor}">{number}</div>')
    text = "".join(
        f'<span class="{escape(classes)}">{escape(part)}</span>' if classes else str(escape(part))
        for classes, part in line.segments
    )
    marked = " hl" if line.number == error_line else ""
    return Markup(f'<div class="line{marked}" id="{anchor}">{number}<span class="t">{text}</span></div>')


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "running"
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, rest = divmod(int(seconds), 60)
    return f"{minutes} min {rest} s"


TEMPLATES = _templates()


def meta_of(job: Job) -> RunMeta:
    return RunMeta(
        id=job.id,
        request=job.request,
        environment=job.environment,
        state=job.state,
        error=job.error,
        attempts=job.attempts,
        created_at=job.created_at,
        started_at=job.started_at,
        finished_at=job.finished_at,
    )


async def allowed_job(request: web.Request, run_id: str) -> Job | web.StreamResponse:
    """The run, or the response to send instead: ``unseen``'s for a bad id, an unknown run and a
    run the gate refuses alike."""
    if not _RUN_ID.fullmatch(run_id):
        return await request.app[UNSEEN](request)
    job = await asyncio.to_thread(request.app[STORE].get_job, run_id)
    if job is None:
        return await request.app[UNSEEN](request)
    if job.request.private is not False:
        refused = await request.app[GATE](request, job.repo)
        if refused is not None:
            # Not the gate's own answer: one that a run that does not exist gets too, so nothing
            # (a sign-in redirect for this name and a 404 for a made-up one) confirms it exists.
            return await request.app[UNSEEN](request)
    return job


def redacted_events(request: web.Request, events: list[LogEvent]) -> list[LogEvent]:
    return request.app[REDACTION].events(events)


async def _load(request: web.Request, job: Job) -> tuple[RunRecord, list[LogEvent], list[StepLog]]:
    store = request.app[STORE]
    report, stored = await asyncio.gather(
        asyncio.to_thread(store.report, job.id), asyncio.to_thread(_all_events, store, job.id)
    )
    events = redacted_events(request, stored)
    steps = fold_steps(events, run_over=job.state.value in _FINAL)
    url = run_page_url(request.app[PUBLIC_URL], job.id)
    record = request.app[REDACTION].record(run_record(meta_of(job), report, steps, url))
    return record, events, [step_log(s) for s in steps]


def _all_events(store: Store, job_id: str) -> list[LogEvent]:
    events: list[LogEvent] = []
    while True:
        batch = store.log_events(job_id, after=events[-1].seq if events else 0)
        if not batch:
            return events
        events += batch


async def run_page(request: web.Request) -> web.StreamResponse:
    job = await allowed_job(request, request.match_info["run_id"])
    if not isinstance(job, Job):
        return job
    record, events, logs = await _load(request, job)
    live = job.state.value not in _FINAL
    html = TEMPLATES.get_template("run.html.j2").render(
        run=record,
        logs=logs,
        live=live,
        last_seq=events[-1].seq if events else 0,
        static=STATIC_PREFIX,
        charts=[
            c for s in (record.performance.charted if record.performance else []) if (c := rounds_chart(s))
        ],
        chart_size=(CHART_WIDTH, CHART_HEIGHT),
    )
    response = web.Response(text=html, content_type="text/html", headers=SAFE_HEADERS)
    response.enable_compression()
    return response


async def run_json(request: web.Request) -> web.StreamResponse:
    return await run_json_of(request, request.match_info["run_id"])


async def run_json_of(request: web.Request, run_id: str) -> web.StreamResponse:
    job = await allowed_job(request, run_id)
    if not isinstance(job, Job):
        return job
    record, _, _ = await _load(request, job)
    response = web.Response(text=record.model_dump_json(indent=2), content_type="application/json")
    response.headers.update(SAFE_HEADERS)
    response.enable_compression()
    return response


async def pull_latest_json(request: web.Request) -> web.StreamResponse:
    """The record of a pull request's latest run (what `paritybot repro owner/repo#N` reads), behind
    the same gate as the run itself."""
    repo = f"{request.match_info['owner']}/{request.match_info['repo']}"
    try:
        number = int(request.match_info["number"])
    except ValueError:
        return await request.app[UNSEEN](request)
    jobs = await asyncio.to_thread(request.app[STORE].jobs_for_pr, repo, number)
    if not jobs:
        return await request.app[UNSEEN](request)
    return await run_json_of(request, jobs[-1].id)


async def step_lines(request: web.Request) -> web.StreamResponse:
    """Lines ``from``–``to`` of one step (those the first view left out), as segments for the script."""
    job = await allowed_job(request, request.match_info["run_id"])
    if not isinstance(job, Job):
        return job
    try:
        index = int(request.match_info["step"])
        first, last = int(request.query.get("from", "1")), int(request.query.get("to", "1"))
    except ValueError:
        return web.json_response({"error": "from, to and the step are numbers"}, status=400)
    events = redacted_events(request, await asyncio.to_thread(_all_events, request.app[STORE], job.id))
    steps = [s for s in fold_steps(events) if s.index == index]
    if not steps:
        return not_found()
    lines = lines_between(steps[0], first, last)
    body = [{"n": line.number, "s": line.segments, "g": line.group, "eg": line.end_group} for line in lines]
    response = web.json_response({"step": index, "lines": body}, headers=SAFE_HEADERS)
    response.enable_compression()
    return response


def static_root() -> Path:
    return Path(str(resources.files("bot.service.run_page").joinpath("static")))


def add_run_page(
    app: web.Application,
    store: Store,
    *,
    gate: Gate = private_not_found,
    unseen: Unseen = shown_to_nobody,
    redaction: PublicRedaction = NOTHING_MORE,
    wake: LogWake | None = None,
    public_url: str | None = None,
) -> LogWake:
    """The run page's routes on ``app``; returns the wake its live logs wait on. ``unseen``: the
    answer for a run not shown (the viewers' gate's, in the service); ``redaction``: what pages
    must not show of the service (:func:`bot.service.run_page.redaction.public_redaction`)."""
    from bot.service.run_page.stream import run_events

    app[STORE] = store
    app[GATE] = gate
    app[UNSEEN] = unseen
    app[REDACTION] = redaction
    app[WAKE] = wake or LogWake()
    app[PUBLIC_URL] = public_url
    app.router.add_get("/runs/{run_id}.json", run_json)
    app.router.add_get("/runs/{run_id}/events", run_events)
    app.router.add_get("/runs/{run_id}/steps/{step}/lines", step_lines)
    app.router.add_get("/runs/{run_id}", run_page)
    app.router.add_get("/repos/{owner}/{repo}/pulls/{number}/latest.json", pull_latest_json)
    app.router.add_static(STATIC_PREFIX, static_root())

    async def end_live_streams(_: web.Application) -> None:
        app[WAKE].close()

    app.on_shutdown.append(end_live_streams)
    return app[WAKE]
