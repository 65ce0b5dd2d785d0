"""Hostile pull requests against the container runner, on a real engine: one test per attack.

Each test is what a pull request can do from inside its run (its tests, its conftest.py, its
set-up commands) and the defence that contains it. Each fails if its defence is removed. Limits
are small (``docker_support.SMALL``) so that every attack hits its limit in a second or two.
"""

from __future__ import annotations

import os
import subprocess
import textwrap
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import docker
import docker.errors
import pytest
from docker_support import SMALL, commit_all, docker_client, make_runner, sh, test_image, workspace

from bot.core.config import TestSettings
from runner.backends.base import Step
from runner.backends.collect import LINK
from runner.backends.docker import DockerRunner
from runner.checks.repro import ReproContext
from runner.checks.testexec import TestRunError, run_tests
from runner.selection.coverage_map import CoverageMapError, coverage_map_from_step, coverage_step

__all__ = ["docker_client", "make_runner", "test_image", "workspace"]  # fixtures, imported for pytest

pytestmark = pytest.mark.docker
MakeRunner = Callable[..., DockerRunner]
# What the bot itself may allocate while it reads a hostile run back: the output cap, one chunk
# of the engine's stream, parsing. Hundreds of megabytes mean it read what it should not have.
BOT_MEMORY_BOUND = 20 << 20


# --- secrets and the engine ------------------------------------------------------------------------


async def test_no_service_secret_key_file_or_engine_socket_reaches_the_container(
    make_runner: MakeRunner, workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = tmp_path / "app-key.pem"
    key.write_text("-----BEGIN PRIVATE KEY-----\nkey-material-4f1c\n-----END PRIVATE KEY-----\n")
    monkeypatch.setenv("PARITYBOT_WEBHOOK_SECRET", "webhook-secret-77a2")
    monkeypatch.setenv("PARITYBOT_PRIVATE_KEY_PATH", str(key))
    engine = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock").removeprefix("unix://")
    script = f"""
        env
        cat {key} 2>&1
        for socket in /var/run/docker.sock /run/docker.sock {engine}; do
            test -e "$socket" && echo "engine socket present: $socket"
        done
        grep -rl --exclude-dir=proc --exclude-dir=sys key-material-4f1c / 2>/dev/null
        true
    """
    result = await make_runner().run(sh("steal", script, timeout_s=120), workspace)
    assert result.exit_code == 0, result.output
    assert "PARITYBOT_" not in result.output
    assert "webhook-secret-77a2" not in result.output
    assert "key-material-4f1c" not in result.output
    assert "engine socket present" not in result.output
    assert "DOCKER_HOST" not in result.output


async def test_a_symlink_to_a_host_file_is_not_followed_on_the_host(
    make_runner: MakeRunner, workspace: Path, tmp_path: Path
) -> None:
    host_dir = tmp_path / "host"
    host_dir.mkdir()
    host_file = host_dir / "host-secret.txt"
    host_file.write_text("host-only-content-9d3e\n")
    (workspace / "leak").symlink_to(host_file)
    (workspace / "leak-dir").symlink_to(host_dir)
    commit_all(workspace)
    result = await make_runner().run(
        sh(
            "read-links",
            "cat leak leak-dir/host-secret.txt; true",
            collect=["leak", "leak-dir/host-secret.txt"],
        ),
        workspace,
    )
    assert "host-only-content-9d3e" not in result.output
    assert "host-only-content-9d3e" not in "".join(result.collected.values())
    assert result.collected == {}
    assert result.refused == {"leak": LINK}


# --- resources -------------------------------------------------------------------------------------


async def test_a_fork_bomb_is_stopped_by_the_pids_limit(make_runner: MakeRunner, workspace: Path) -> None:
    bomb = textwrap.dedent(
        """
        import os, time
        n = 0
        try:
            while True:
                if os.fork() == 0:
                    time.sleep(600)
                    os._exit(0)
                n += 1
        except OSError as exc:
            print("fork refused after", n, "children:", exc.strerror)
        """
    )
    result = await make_runner().run(Step(name="bomb", argv=["python3", "-c", bomb], timeout_s=60), workspace)
    assert result.exit_code == 0, result.output
    assert "fork refused after" in result.output
    children = int(result.output.split("fork refused after")[1].split()[0])
    assert children < SMALL.pids


async def test_a_memory_hog_is_killed_and_reported_out_of_memory(
    make_runner: MakeRunner, workspace: Path
) -> None:
    hog = "chunks = []\nwhile True:\n    chunks.append(b'x' * (8 << 20))\n"
    result = await make_runner().run(Step(name="hog", argv=["python3", "-c", hog], timeout_s=120), workspace)
    assert result.oom_killed
    assert result.exit_code == 137
    assert "out of memory" in result.describe_failure()
    assert "out of memory" in result.output


async def test_filling_tmp_and_shm_stops_at_their_size(make_runner: MakeRunner, workspace: Path) -> None:
    script = """
        for dir in /tmp /dev/shm; do
            dd if=/dev/zero of=$dir/fill bs=1M 2>&1 | grep -o 'No space left on device'
            echo "$dir holds $(du -sk $dir/fill | cut -f1) kB"
        done
    """
    result = await make_runner().run(sh("fill-tmp", script, timeout_s=60), workspace)
    assert result.exit_code == 0, result.output
    assert result.output.count("No space left on device") == 2, result.output
    held = {line.split()[0]: int(line.split()[2]) for line in result.output.splitlines() if " holds " in line}
    assert held["/tmp"] <= 32 * 1024  # SMALL.tmpfs_size
    assert held["/dev/shm"] <= 16 * 1024  # SMALL.shm_size


async def test_an_endless_sleep_is_killed_at_the_step_timeout(
    make_runner: MakeRunner, workspace: Path
) -> None:
    result = await make_runner().run(sh("sleepy", "echo started; sleep 3600", timeout_s=2), workspace)
    assert result.timed_out
    assert not result.ok
    assert "started" in result.output
    assert result.duration_s < 60
    assert "timed out" in result.describe_failure()


async def test_200_mb_of_output_is_capped_and_the_engine_keeps_no_copy(
    make_runner: MakeRunner, workspace: Path, docker_client: docker.DockerClient
) -> None:
    engine_log: list[str] = []

    def look_at_the_engine(_: str) -> None:
        if engine_log:
            return
        running = docker_client.containers.list(filters={"label": "paritybot.role=step", "name": "loud"})
        try:
            engine_log.append(running[0].logs(tail=1).decode() if running else "(no container)")
        except docker.errors.APIError as exc:
            engine_log.append(f"refused: {exc.explanation}")

    runner = make_runner(on_output=look_at_the_engine)
    loud = "echo FIRST; head -c 200000000 /dev/zero | tr '\\0' x; echo; echo LAST"
    tracemalloc.start()
    try:
        result = await runner.run(sh("loud", loud, timeout_s=120), workspace)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert result.exit_code == 0, result.output[-500:]
    assert result.output.startswith("FIRST")
    assert result.output.rstrip().endswith("LAST")
    assert len(result.output) < 210_000
    assert "characters cut" in result.output
    assert peak < BOT_MEMORY_BOUND, f"the bot held {peak >> 20} MiB"
    assert engine_log and engine_log[0].startswith("refused"), engine_log


# --- privileges ------------------------------------------------------------------------------------


async def test_steps_run_unprivileged_on_a_read_only_root(make_runner: MakeRunner, workspace: Path) -> None:
    script = (
        "id -u; id -g; grep -E '^(CapEff|CapBnd|NoNewPrivs)' /proc/self/status; "
        'awk \'$2 == "/" { split($4, o, ","); print "root-mount-" o[1] }\' /proc/mounts; '
        "touch /usr/owned 2>/dev/null && echo image-writable; "
        "touch /tmp/ok && echo tmp-writable; touch $HOME/ok && echo home-writable; "
        "cat /sys/fs/cgroup/pids/pids.max /sys/fs/cgroup/pids.max 2>/dev/null; true"
    )
    result = await make_runner().run(sh("harden", script), workspace)
    assert result.exit_code == 0, result.output
    lines = result.output.split()
    assert lines[:2] == ["1000", "1000"]
    assert "CapEff:\t0000000000000000" in result.output
    assert "CapBnd:\t0000000000000000" in result.output  # not even a setuid binary gets one back
    assert "NoNewPrivs:\t1" in result.output
    assert "root-mount-ro" in lines
    assert "image-writable" not in lines
    assert "tmp-writable" in lines and "home-writable" in lines
    assert str(SMALL.pids) in lines


# --- what the run leaves for the bot to read ---------------------------------------------------------

_HUGE_REPORT = """
def pytest_unconfigure(config):
    # Replace the report pytest wrote: valid XML, 300 MB of it.
    with open(config.option.xmlpath, "w") as f:
        f.write('<testsuites><testsuite name="pytest">')
        case = '<testcase classname="t" name="test_%d" time="0"><failure message="x">' + "x" * 99_900 + "</failure></testcase>"
        for i in range(3000):
            f.write(case % i)
        f.write("</testsuite></testsuites>")
"""


async def test_a_300_mb_junit_report_is_refused_unread(make_runner: MakeRunner, workspace: Path) -> None:
    (workspace / "conftest.py").write_text(_HUGE_REPORT)
    (workspace / "tests").mkdir()
    (workspace / "tests" / "test_a.py").write_text("def test_a():\n    pass\n")
    commit_all(workspace)
    head = subprocess.run(["git", "-C", str(workspace), "rev-parse", "HEAD"], capture_output=True, text=True)
    repro = ReproContext(head_sha=head.stdout.strip(), repo="o/r")
    runner = make_runner(limits=SMALL.model_copy(update={"workspace_size": "1g"}))
    tracemalloc.start()
    try:
        with pytest.raises(TestRunError) as err:
            await run_tests(runner, workspace, None, TestSettings(reruns=0), repro)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert err.value.message == "the JUnit report is 300 MB, more than the 64 MB paritybot reads"
    assert peak < BOT_MEMORY_BOUND, f"the bot held {peak >> 20} MiB"


_HUGE_COVERAGE = """
import atexit

def write_after_the_driver():
    # Runs after the driver wrote its map: a 200 MB file (sparse, so it costs no disk).
    with open(".paritybot/coverage.json", "r+b") as f:
        f.truncate(200_000_000)

atexit.register(write_after_the_driver)
"""


async def test_an_oversized_coverage_map_is_refused_unread(make_runner: MakeRunner, workspace: Path) -> None:
    (workspace / "conftest.py").write_text(_HUGE_COVERAGE)
    (workspace / "tests").mkdir()
    (workspace / "tests" / "test_a.py").write_text("def test_a():\n    pass\n")
    result = await make_runner().run(coverage_step(TestSettings(), timeout_s=120), workspace)
    assert result.refused, result.output
    with pytest.raises(CoverageMapError) as err:
        coverage_map_from_step(result)
    assert str(err.value) == "the coverage map is 200 MB, more than the 64 MB paritybot reads"


# --- the workspace's size ----------------------------------------------------------------------------

WORKSPACE_64M = SMALL.model_copy(update={"workspace_size": "64m"})


async def test_writing_past_the_workspace_limit_stops_the_step(
    make_runner: MakeRunner, workspace: Path
) -> None:
    runner = make_runner(limits=WORKSPACE_64M)
    # 1 GB in files each under the limit, then wait: unstopped, it would end at its timeout (and
    # not fill the test machine's disk).
    fill = "i=0; while [ $i -lt 25 ]; do head -c 40M /dev/zero > f$i; i=$((i + 1)); done; sleep 60"
    result = await runner.run(sh("fill", fill, timeout_s=30), workspace)
    assert not result.timed_out, "the step ran until its timeout: nothing stopped the writer"
    assert not result.ok
    assert result.stopped_by_limit and result.stopped_by_limit.startswith(
        "the run wrote more than the workspace's 64m limit (limits.workspace_size)"
    )
    assert "fill: stopped: the run wrote more than the workspace's 64m limit" in result.describe_failure()
    assert "[paritybot] stopped: the run wrote more" in result.output


async def test_one_file_stops_growing_at_the_workspace_limit(
    make_runner: MakeRunner, workspace: Path
) -> None:
    runner = make_runner(limits=WORKSPACE_64M)
    result = await runner.run(
        sh("one-file", "dd if=/dev/zero of=big bs=1M count=1000; stat -c 'size %s' big"), workspace
    )
    assert "File size limit exceeded" in result.output  # the shell's word for dd's SIGXFSZ
    assert f"size {64 << 20}" in result.output.split("\n")
    assert result.stopped_by_limit, result.output


async def test_a_burst_that_exits_before_a_reading_still_fails(
    make_runner: MakeRunner, workspace: Path
) -> None:
    runner = make_runner(limits=WORKSPACE_64M)
    burst = "head -c 40000000 /dev/zero > a && head -c 40000000 /dev/zero > b"  # each under the limit
    result = await runner.run(sh("burst", burst), workspace)
    assert result.exit_code == 0
    assert not result.ok
    assert result.stopped_by_limit, "the step's last write went unmeasured"


async def test_data_hidden_in_an_unreadable_directory_is_counted(
    make_runner: MakeRunner, workspace: Path
) -> None:
    runner = make_runner(limits=WORKSPACE_64M)
    hide = "mkdir hidden && head -c 40M /dev/zero > hidden/a && head -c 40M /dev/zero > hidden/b && chmod 000 hidden && sleep 30"
    result = await runner.run(sh("hide", hide, timeout_s=60), workspace)
    assert result.stopped_by_limit, result.output
    assert result.duration_s < 30


async def test_a_scratch_step_writing_past_the_limit_is_stopped_too(
    make_runner: MakeRunner, workspace: Path
) -> None:
    # A scratch step (installing hook environments from the PR's pre-commit config) writes its
    # own volume, not the run's: it has a watcher of its own.
    runner = make_runner(limits=WORKSPACE_64M)
    fill = "i=0; while [ $i -lt 25 ]; do head -c 40M /dev/zero > f$i; i=$((i + 1)); done; sleep 60"
    result = await runner.run(sh("install", fill, timeout_s=30, scratch=True), workspace)
    assert not result.timed_out, "the step ran until its timeout: nothing stopped the writer"
    assert result.stopped_by_limit and "64m limit" in result.stopped_by_limit
