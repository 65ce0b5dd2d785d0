"""Keeps the service's loops running: the dispatcher and each worker.

A loop that stops, by raising or by returning, is logged and started again after a delay that
doubles while it keeps failing (a broken database should not be hammered), and is back to the
first delay once the loop has run for a while. While a loop is not running, :meth:`down` names it,
and ``/healthz`` answers 503 with that name, so an orchestrator sees what a log reader would.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from collections import Counter
from collections.abc import Awaitable, Callable

import structlog

log = structlog.get_logger(__name__)

Loop = Callable[[], Awaitable[None]]
REASON_MAX = 300  # characters of a loop's error in the log


class Supervisor:
    def __init__(self, *, first_delay_s: float = 1.0, max_delay_s: float = 30.0):
        self.first_delay_s = first_delay_s
        self.max_delay_s = max_delay_s
        self.deaths: Counter[str] = Counter()  # loop name → how often it stopped
        self._down: set[str] = set()

    def keep(self, name: str, loop: Loop) -> asyncio.Task[None]:
        """Run ``loop`` for as long as the returned task is not cancelled, restarting it if it stops."""
        return asyncio.create_task(self._keep(name, loop), name=name)

    def down(self) -> list[str]:
        """The loops that are not running now (waiting to be restarted), by name."""
        return sorted(self._down)

    async def _keep(self, name: str, loop: Loop) -> None:
        delay = self.first_delay_s
        while True:
            started = time.monotonic()
            error: BaseException | None = None
            try:
                await loop()
            except asyncio.CancelledError as exc:
                if _this_task_cancelled():
                    raise  # stopped on purpose
                error = exc  # a CancelledError that escaped from something the loop awaited
            except Exception as exc:
                error = exc
            self._down.add(name)
            self.deaths[name] += 1
            if time.monotonic() - started > self.max_delay_s:
                delay = self.first_delay_s  # it had been running well: not a crash loop
            # The last line of defence: not even a failing log call may stop the restart.
            with contextlib.suppress(Exception):
                log.error(
                    "loop stopped; restarting it",
                    loop=name,
                    error=_describe(error) if error is not None else "the loop returned",
                    restart_in_s=delay,
                    exc_info=error,
                )
            try:
                await asyncio.sleep(delay)
            finally:
                self._down.discard(name)
            delay = min(delay * 2, self.max_delay_s)


async def stop_kept(task: asyncio.Task[None] | None) -> None:
    """Stop a loop :meth:`Supervisor.keep` started (None: it never started) and wait for it."""
    if task is not None:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def _this_task_cancelled() -> bool:
    """Whether this task itself was cancelled (``Task.cancel``), not just handed the exception."""
    task = asyncio.current_task()
    return task is None or task.cancelling() > 0


def _describe(exc: BaseException) -> str:
    try:
        text = " ".join(f"{type(exc).__name__}: {exc}".split())
    except Exception:  # an exception whose message cannot be made
        text = type(exc).__name__
    return text[:REASON_MAX]


def stop_on_signals() -> asyncio.Event:
    """Set when the process is asked to stop (SIGINT, SIGTERM)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    return stop
