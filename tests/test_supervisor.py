"""The supervisor keeps the service's loops running: a loop that stops is logged and restarted,
and named as down until it runs again; only cancelling the loop's task stops it."""

from __future__ import annotations

import asyncio
import io
import json
from typing import Any

import pytest
import structlog

from bot.service.supervisor import Supervisor


class Flaky:
    """A loop that stops ``times`` times (by raising ``error``), then runs until cancelled."""

    def __init__(self, times: int, error: BaseException):
        self.left, self.error, self.starts = times, error, 0
        self.running = asyncio.Event()

    async def __call__(self) -> None:
        self.starts += 1
        if self.left:
            self.left -= 1
            raise self.error
        self.running.set()
        await asyncio.Event().wait()


async def stopped(task: asyncio.Task[None]) -> None:
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


@pytest.mark.parametrize(
    "error",
    [
        RuntimeError("no such table: deliveries"),
        RecursionError("maximum recursion depth exceeded while encoding a JSON object"),
        # escaped from something the loop awaited; the loop's own task was not cancelled
        asyncio.CancelledError(),
    ],
)
async def test_a_loop_that_raises_is_logged_and_restarted(
    json_logs: io.StringIO, error: BaseException
) -> None:
    supervisor = Supervisor(first_delay_s=0.01, max_delay_s=0.05)
    loop = Flaky(3, error)
    task = supervisor.keep("dispatcher", loop)
    await asyncio.wait_for(loop.running.wait(), 10)
    assert loop.starts == 4 and supervisor.deaths["dispatcher"] == 3
    assert supervisor.down() == []
    lines = [json.loads(line) for line in json_logs.getvalue().splitlines()]
    assert [(x["event"], x["loop"], x["level"]) for x in lines] == [
        ("loop stopped; restarting it", "dispatcher", "error")
    ] * 3
    assert type(error).__name__ in lines[0]["error"]
    assert [x["restart_in_s"] for x in lines] == [0.01, 0.02, 0.04]  # doubling, up to the maximum
    await stopped(task)


async def test_a_stopped_loop_is_named_as_down_until_it_runs_again() -> None:
    supervisor = Supervisor(first_delay_s=0.3, max_delay_s=0.3)
    loop = Flaky(1, OSError("disk I/O error"))
    task = supervisor.keep("worker-0", loop)
    await asyncio.sleep(0.1)
    assert supervisor.down() == ["worker-0"]
    await asyncio.wait_for(loop.running.wait(), 10)
    assert supervisor.down() == []
    await stopped(task)


async def test_a_loop_that_returns_is_restarted_too() -> None:
    supervisor = Supervisor(first_delay_s=0.01)
    runs: list[None] = []
    again = asyncio.Event()

    async def loop() -> None:
        runs.append(None)
        if len(runs) == 3:
            again.set()
            await asyncio.Event().wait()

    task = supervisor.keep("dispatcher", loop)
    await asyncio.wait_for(again.wait(), 10)
    assert supervisor.deaths["dispatcher"] == 2
    await stopped(task)


async def test_a_log_call_that_raises_does_not_stop_the_restart() -> None:
    def broken(*_: Any) -> Any:
        raise RuntimeError("the log pipeline itself is broken")

    structlog.configure(processors=[broken])
    try:
        supervisor = Supervisor(first_delay_s=0.01)
        loop = Flaky(2, ValueError("boom"))
        task = supervisor.keep("dispatcher", loop)
        await asyncio.wait_for(loop.running.wait(), 10)
        assert supervisor.deaths["dispatcher"] == 2
        await stopped(task)
    finally:
        structlog.reset_defaults()


async def test_cancelling_the_task_stops_the_loop_for_good() -> None:
    supervisor = Supervisor(first_delay_s=0.01)
    loop = Flaky(0, RuntimeError())
    task = supervisor.keep("dispatcher", loop)
    await asyncio.wait_for(loop.running.wait(), 10)
    await stopped(task)
    await asyncio.sleep(0.05)
    assert loop.starts == 1 and not supervisor.deaths
