"""The live log: ``/runs/<id>/events``, server-sent events from the store's log of a run.

Each event's id is the store's ``seq`` of the last log event it covers; a reconnecting browser
sends it back (``Last-Event-ID``) and the stream resumes after it. The server replays the log up to
there without sending it, so line numbers, colours and open lines carry on exactly where the page
(rendered from the same events) left off. A stream is woken when the run's log grows (in-process,
or through PostgreSQL's NOTIFY), looks anyway every ``LOOK_S``, and ends when the run has ended
and everything is sent, or a new attempt of the run began (the page reloads for either).

Events: ``step`` (a step started: index, name), ``lines`` (complete lines of a step, as
segments of fixed class names and text), ``cut`` (what the caps left out), ``end`` (a step's
state, duration, reason and first error line), ``run`` (the run ended or restarted: reload).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any

from aiohttp import web

from bot.core.run_log import LogEvent, LogKind, StepEnd
from bot.render.terminal import Line, TerminalParser
from bot.service.run_page.routes import _FINAL, SAFE_HEADERS, STORE, WAKE, allowed_job, redacted_events
from bot.service.store.records import Job

LOOK_S = 2.0  # a stream looks at the store at least this often, woken or not
PING_S = 15.0  # a comment line now and then keeps proxies from closing an idle stream


class LogStream:
    """The parsers of one stream: one per step, fed the events in order."""

    def __init__(self) -> None:
        self.parsers: dict[int, TerminalParser] = {}
        self.attempt: int | None = None

    def take(self, event: LogEvent) -> list[tuple[str, dict[str, Any]]]:
        """What the page is told of ``event``: (event name, data) pairs, maybe none."""
        if event.kind == LogKind.STEP:
            self.parsers[event.step] = TerminalParser()
            return [("step", {"step": event.step, "name": event.text, "at": event.at.isoformat()})]
        parser = self.parsers.get(event.step)
        if parser is None:
            return []
        if event.kind == LogKind.OUT:
            return _lines(event.step, parser.feed(event.text))
        if event.kind == LogKind.HELD:
            return [("note", {"step": event.step, "text": event.text})]
        told = _lines(event.step, parser.feed("", final=True))
        if event.kind == LogKind.CUT:
            return [*told, ("cut", {"step": event.step, "text": event.text})]
        end = StepEnd.parse(event.text)
        failed = end.state != "passed"
        data = end.model_dump() | {"step": event.step, "error_line": parser.first_error if failed else None}
        return [*told, ("end", data)]


def _lines(step: int, lines: list[Line]) -> list[tuple[str, dict[str, Any]]]:
    if not lines:
        return []
    body = [{"n": line.number, "s": line.segments, "g": line.group, "eg": line.end_group} for line in lines]
    return [("lines", {"step": step, "lines": body})]


def _frame(name: str, data: dict[str, Any], seq: int) -> bytes:
    # json.dumps escapes every newline: one data line, whatever the log held.
    return f"id: {seq}\nevent: {name}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


def _resume_from(request: web.Request) -> int:
    text = request.headers.get("Last-Event-ID") or request.query.get("after") or "0"
    return int(text) if text.isdigit() else 0


async def run_events(request: web.Request) -> web.StreamResponse:
    job = await allowed_job(request, request.match_info["run_id"])
    if not isinstance(job, Job):
        return job
    store, after = request.app[STORE], _resume_from(request)
    stream = LogStream()
    seen = 0
    while seen < after:  # replayed, not sent: the page has it
        # Replayed as sent: redacted, so line numbers and open lines match what the page got.
        stored = await asyncio.to_thread(store.log_events, job.id, seen)
        batch = redacted_events(request, [e for e in stored if e.seq <= after])
        if not batch:
            break
        for event in batch:
            if event.attempt != stream.attempt:  # a later attempt starts afresh, as the page did
                stream.parsers.clear()
                stream.attempt = event.attempt
            stream.take(event)
        seen = batch[-1].seq
    response = web.StreamResponse(
        headers={"Content-Type": "text/event-stream", "Cache-Control": "no-store", **SAFE_HEADERS}
    )
    await response.prepare(request)
    with request.app[WAKE].watch(job.id) as woken:
        await _send_until_over(request, response, job, stream, after, woken)
    return response


def _track_attempt(stream: LogStream, event: LogEvent) -> bool:
    """Whether ``event`` belongs to a later attempt of the run than the page shows (it must start over)."""
    if stream.attempt is None:
        stream.attempt = event.attempt
    return event.attempt > stream.attempt


async def _send_until_over(
    request: web.Request,
    response: web.StreamResponse,
    job: Job,
    stream: LogStream,
    after: int,
    woken: asyncio.Event,
) -> None:
    store, wake = request.app[STORE], request.app[WAKE]
    quiet = 0.0
    while not wake.closed:
        woken.clear()
        events = redacted_events(request, await asyncio.to_thread(store.log_events, job.id, after))
        for event in events:
            if _track_attempt(stream, event):
                await response.write(_frame("run", {"state": "restarted"}, after))
                return
            for name, data in stream.take(event):
                await response.write(_frame(name, data, event.seq))
            after = event.seq
        if events:
            quiet = 0.0
            continue
        current = await asyncio.to_thread(store.get_job, job.id)
        if current is None or current.state.value in _FINAL:
            if await asyncio.to_thread(store.log_events, job.id, after, 1):
                continue  # written just before the run ended: sent first
            await response.write(_frame("run", {"state": current.state.value if current else "gone"}, after))
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(woken.wait(), LOOK_S)
        quiet = 0.0 if woken.is_set() else quiet + LOOK_S
        if quiet >= PING_S:
            await response.write(b": still running\n\n")
            quiet = 0.0
