"""Writing a run's log as its steps print: what the runner tells (:class:`runner.step_log.StepLogSink`)
becomes the store's events (:mod:`bot.core.run_log`), redacted as comments are, capped, in batches.

Output arrives from the runner's threads in pieces of any size. It is kept until a line ends (or
``FLUSH_S`` passed), redacted a batch at a time with the one redaction of
:mod:`bot.core.secrets` (the service's secrets and the run's token), and written every ``FLUSH_S``
by one task, so a line printed in the container reaches the store, and the open run page, well
within a second. The caps (:class:`bot.core.run_log.LogCaps`) keep a step's head as it comes and
its tail in memory, written when the step ends after a ``cut`` event saying how much was left out.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Iterable

import structlog

from bot.core.run_log import LogCaps, LogKind, NewLogEvent, StepEnd
from bot.core.secrets import redact
from bot.service.store.run_logs import RunLogStore
from runner.backends.base import StepResult
from runner.step_log import step_state

log = structlog.get_logger(__name__)

FLUSH_S = 0.1


class _Tail:
    """The last ``limit`` characters of a step's output past its head, in bounded memory."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.parts: deque[str] = deque()
        self.size = 0
        self.dropped = 0

    def add(self, text: str) -> None:
        self.parts.append(text)
        self.size += len(text)
        while self.size > self.limit and self.parts:
            first = self.parts.popleft()
            extra = self.size - self.limit
            if len(first) > extra:
                self.parts.appendleft(first[extra:])
                self.size -= extra
                self.dropped += extra
            else:
                self.size -= len(first)
                self.dropped += len(first)

    def text(self) -> str:
        return "".join(self.parts)


class RunLogRecorder:
    """One attempt of one run's log; thread-safe; ``flushing()`` runs its writer."""

    def __init__(
        self,
        store: RunLogStore,
        job_id: str,
        attempt: int,
        secrets: Iterable[str] = (),
        caps: LogCaps | None = None,
    ) -> None:
        self._store = store
        self._job_id = job_id
        self._attempt = attempt
        self._secrets = [s for s in secrets if s]
        self._caps = caps or LogCaps()
        self._lock = threading.Lock()
        self._pending: list[NewLogEvent] = []
        self._partial = ""  # output of the current step since its last newline
        self._partial_since = 0.0
        self._step = -1
        self._started = 0.0
        self._head_room = 0
        self._tail: _Tail | None = None
        self._stored = 0  # characters of output kept for this run

    # --- what the runner tells ----------------------------------------------------------------------

    def step_started(self, name: str) -> None:
        with self._lock:
            self._open_step(name)

    def _open_step(self, name: str) -> None:
        self._close_step_output()
        self._step += 1
        self._started = time.monotonic()
        room = max(self._caps.run_max - self._stored, 0)
        self._head_room = min(self._caps.step_head, room)
        self._tail = _Tail(self._caps.step_tail if room else self._caps.spent_tail)
        self._pending.append(NewLogEvent(step=self._step, kind=LogKind.STEP, text=name[:200]))

    def output(self, text: str) -> None:
        with self._lock:
            if self._step < 0:
                self._step_before_any()
            if not self._partial:
                self._partial_since = time.monotonic()
            self._partial += text

    def step_ended(self, result: StepResult) -> None:
        with self._lock:
            if self._step < 0:
                self._step_before_any()
            self._close_step_output()
            end = StepEnd(
                state=step_state(result),
                exit_code=result.exit_code,
                duration_s=round(result.duration_s or time.monotonic() - self._started, 3),
                reason="" if result.ok else redact(result.describe_failure(), self._secrets)[:500],
            )
            self._pending.append(NewLogEvent(step=self._step, kind=LogKind.END, text=end.text()))

    # --- writing -------------------------------------------------------------------------------------

    def _step_before_any(self) -> None:
        self._open_step("output")  # output told before any step: a step of its own

    def _take_lines(self, everything: bool) -> None:
        """Move the finished lines of the current output (all of it with ``everything``) into events."""
        if not self._partial:
            return
        cut = len(self._partial) if everything else self._partial.rfind("\n") + 1
        if cut <= 0:
            return
        text, self._partial = self._partial[:cut], self._partial[cut:]
        self._partial_since = time.monotonic()
        self._keep(redact(text, self._secrets))

    def _keep(self, text: str) -> None:
        """Into the head while it has room, then into the tail."""
        head = text[: self._head_room]
        if head:
            self._head_room -= len(head)
            self._stored += len(head)
            self._pending.append(NewLogEvent(step=self._step, kind=LogKind.OUT, text=head))
        if len(head) < len(text) and self._tail is not None:
            if not self._tail.size:  # the first text past the head: the page says why nothing comes
                note = f"the rest is kept as the last {self._tail.limit} characters, shown when the step ends"
                self._pending.append(NewLogEvent(step=self._step, kind=LogKind.HELD, text=note))
            self._tail.add(text[len(head) :])

    def _close_step_output(self) -> None:
        """The end of the current step's output: the rest of its lines, what was cut, its tail."""
        if self._step < 0:
            return
        self._take_lines(everything=True)
        tail, self._tail = self._tail, None
        if tail is None or not tail.size:
            return
        if tail.dropped:
            self._pending.append(
                NewLogEvent(step=self._step, kind=LogKind.CUT, text=f"{tail.dropped} characters cut")
            )
        self._stored += tail.size
        self._pending.append(NewLogEvent(step=self._step, kind=LogKind.OUT, text=tail.text()))

    def _batch(self) -> list[NewLogEvent]:
        with self._lock:
            self._take_lines(everything=time.monotonic() - self._partial_since >= FLUSH_S)
            batch, self._pending = self._pending, []
        return batch

    async def flush(self) -> None:
        batch = self._batch()
        if batch:
            await asyncio.to_thread(self._store.append_log, self._job_id, self._attempt, batch)

    @contextlib.asynccontextmanager
    async def flushing(self) -> AsyncIterator[RunLogRecorder]:
        """Write what comes every ``FLUSH_S`` while the block runs, and the rest when it ends. A
        store that fails loses log lines, never the run: it is logged and the run goes on."""

        async def loop() -> None:
            while True:
                await asyncio.sleep(FLUSH_S)
                try:
                    await self.flush()
                except Exception as exc:
                    log.warning("run log not written", run_id=self._job_id, error=str(exc))

        writer = asyncio.create_task(loop())
        try:
            yield self
        finally:
            writer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await writer
            with self._lock:
                self._close_step_output()
            try:
                await self.flush()
            except Exception as exc:
                log.warning("run log not written", run_id=self._job_id, error=str(exc))
