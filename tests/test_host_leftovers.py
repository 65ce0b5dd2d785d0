"""The host runner leaves nothing running: each step's process group is recorded while it runs,
what a step starts in the background ends with it, and at start-up the groups a dead service left
behind are killed — only those, never a process that took a reused id."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from serveproc import alive

from runner.backends.base import Step, StepProcess
from runner.backends.host import HostRunner, boot_id, group_start_ticks, kill_leftovers, start_ticks
from runner.workspace import remove_stale_workspaces, workspace_name


class Ledger:
    def __init__(self) -> None:
        self.live: list[StepProcess] = []
        self.seen: list[StepProcess] = []

    def started(self, process: StepProcess) -> None:
        self.live.append(process)
        self.seen.append(process)

    def ended(self, process: StepProcess) -> None:
        self.live.remove(process)


def wait_gone(pid: int) -> bool:
    """Whether ``pid`` is gone within ten seconds (a killed orphan is reaped by init, not by us)."""
    deadline = time.monotonic() + 10
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not alive(pid)


@pytest.fixture
def group() -> Iterator[subprocess.Popen[bytes]]:
    """A step's process group, as a service killed with -9 leaves it: a leader and a child."""
    proc = subprocess.Popen(["sh", "-c", "sleep 60 & wait"], start_new_session=True)
    yield proc
    if proc.poll() is None:
        proc.send_signal(signal.SIGKILL)
    proc.wait()


async def test_each_step_is_recorded_while_it_runs_and_its_background_processes_end_with_it(
    tmp_path: Path,
) -> None:
    ledger = Ledger()
    runner = HostRunner(processes=ledger)
    step = Step(name="tests", argv=["sh", "-c", "sleep 60 >/dev/null 2>&1 & echo $!"], timeout_s=30)
    result = await runner.run(step, tmp_path)
    assert result.ok
    background = int(result.output.strip())
    [recorded] = ledger.seen
    assert (recorded.step, recorded.boot_id) == ("tests", boot_id()) and recorded.start_ticks > 0
    assert ledger.live == []  # forgotten once it ended
    # Killed when the step ended; a killed process dies when next scheduled, which on a loaded
    # machine can be a moment after the kill returns.
    assert wait_gone(background)


# A server the step starts in a session of its own, keeping the step's output open; it prints its id.
ESCAPE = (
    "import subprocess, sys; "
    "p = subprocess.Popen(['sleep', '600'], start_new_session=True); "
    "print(p.pid, flush=True)"
)


async def test_a_step_ends_with_its_leader_though_what_it_left_in_another_session_holds_its_output(
    tmp_path: Path,
) -> None:
    runner = HostRunner()
    started = time.monotonic()
    result = await runner.run(Step(name="tests", argv=[sys.executable, "-c", ESCAPE], timeout_s=60), tmp_path)
    assert time.monotonic() - started < 30  # not the step's timeout, nor the server's ten minutes
    assert result.ok and not result.timed_out
    assert wait_gone(int(result.output.strip()))  # it carried the step's mark: killed at the end


async def test_a_step_past_its_timeout_is_stopped_though_what_it_left_holds_its_output(
    tmp_path: Path,
) -> None:
    runner = HostRunner()
    code = ESCAPE + "; import time; time.sleep(600)"
    started = time.monotonic()
    result = await runner.run(Step(name="tests", argv=[sys.executable, "-c", code], timeout_s=2), tmp_path)
    assert time.monotonic() - started < 30
    assert result.timed_out and not result.ok
    assert wait_gone(int(result.output.split()[0]))


async def test_a_huge_output_keeps_its_head_and_tail_with_secrets_redacted(tmp_path: Path) -> None:
    runner = HostRunner(output_limit=1_000, redact=["s3cr3t-token"])
    code = "print('first line s3cr3t-token'); print('x' * 2_000_000); print('last line s3cr3t-token')"
    result = await runner.run(Step(name="tests", argv=[sys.executable, "-c", code], timeout_s=60), tmp_path)
    assert result.output.startswith("first line ***")
    assert result.output.rstrip().endswith("last line ***")
    assert "s3cr3t" not in result.output and "bytes cut" in result.output
    assert len(result.output) < 1_100


def test_a_group_whose_leader_exited_at_once_is_still_named_and_killed() -> None:
    leader = subprocess.Popen(
        ["sh", "-c", "sleep 60 >/dev/null 2>&1 & echo $!"], stdout=subprocess.PIPE, start_new_session=True
    )
    out, _ = leader.communicate(timeout=10)  # the leader is gone and reaped; its child lives on
    background = int(out)
    try:
        ticks = group_start_ticks(leader.pid)
        assert ticks is not None and ticks == start_ticks(background)
        recorded = StepProcess(pgid=leader.pid, boot_id=boot_id() or "", start_ticks=ticks, step="tests")
        assert kill_leftovers([recorded]) == [recorded]
        assert wait_gone(background)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(background, signal.SIGKILL)


def test_leftovers_of_a_dead_service_are_killed_at_start_up(group: subprocess.Popen[bytes]) -> None:
    ticks = start_ticks(group.pid)
    assert ticks is not None and boot_id() is not None
    recorded = StepProcess(pgid=group.pid, boot_id=boot_id() or "", start_ticks=ticks, step="tests")
    assert kill_leftovers([recorded]) == [recorded]
    assert group.wait(timeout=10) == -signal.SIGKILL


def test_a_group_whose_id_now_names_another_process_or_another_boot_is_left_alone(
    group: subprocess.Popen[bytes],
) -> None:
    ticks = start_ticks(group.pid) or 0
    other_process = StepProcess(pgid=group.pid, boot_id=boot_id() or "", start_ticks=ticks + 1, step="tests")
    other_boot = StepProcess(pgid=group.pid, boot_id="another-boot", start_ticks=ticks, step="tests")
    assert kill_leftovers([other_process, other_boot]) == []
    assert group.poll() is None


def test_each_attempt_has_a_workspace_of_its_own_and_dead_ones_are_removed(tmp_path: Path) -> None:
    assert workspace_name("a1b2c3", 1) != workspace_name("a1b2c3", 2)
    for name in (workspace_name("a1b2c3", 1), workspace_name("a1b2c3", 2), "not-a-run", "notes.txt"):
        (tmp_path / name).mkdir()
    assert remove_stale_workspaces(tmp_path) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["not-a-run", "notes.txt"]
