"""The container runner against a real Docker engine (marked ``docker``), plus its pure helpers."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from docker_support import (
    containers_of,
    docker_client,
    engine_has_nvidia,
    make_runner,
    sh,
    small_env,
    test_image,
    volumes_of,
    workspace,
)

from bot.core.config import Environment, ResourceLimits
from bot.core.secrets import redact
from runner.backends.base import RunnerError, Step, ToolStore
from runner.backends.docker import DockerRunner
from runner.backends.docker_engine import remove_leftovers
from runner.backends.docker_image import parse_user, pick_repo_digest, store_volume_name
from runner.backends.docker_limits import (
    EffectiveLimits,
    device_requests,
    effective_limits,
    gpus_flag,
    human_size,
    workspace_limit,
)
from runner.backends.docker_output import OutputBuffer
from runner.backends.ownership import new_instance, process_alive

__all__ = ["docker_client", "make_runner", "test_image", "workspace"]  # fixtures, imported for pytest
REPO_ROOT = Path(__file__).resolve().parent.parent


# --- pure helpers ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("gpus", "count", "ids", "flag"),
    [
        ("all", -1, [], "all"),
        (2, 2, [], "2"),
        (["0", "3"], 0, ["0", "3"], '"device=0,3"'),
    ],
)
def test_gpu_requests_and_the_matching_cli_flag(gpus, count, ids, flag):
    (request,) = device_requests(gpus)
    assert request["Count"] == count
    assert request["DeviceIDs"] == ids
    assert request["Capabilities"] == [["gpu"]]
    assert gpus_flag(gpus) == flag


@pytest.mark.parametrize("gpus", ["none", 0])
def test_no_gpus_means_no_request_and_no_flag(gpus):
    assert device_requests(gpus) == []
    assert gpus_flag(gpus) is None


PASSWD = "root:x:0:0:root:/root:/bin/bash\nci:x:1001:1002::/home/ci:/bin/sh\n"
GROUP = "root:x:0:\nci:x:1002:\nvideo:x:44:ci\n"


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("1000:1000", (1000, 1000)),
        ("1001", (1001, 1002)),  # the passwd entry's group, as Docker does
        ("4242", (4242, 0)),  # no passwd entry: group 0, as Docker does
        ("ci", (1001, 1002)),
        ("ci:video", (1001, 44)),
        ("ci:7", (1001, 7)),
    ],
)
def test_user_resolution_follows_the_engine(spec, expected):
    assert parse_user(spec, PASSWD, GROUP) == expected


@pytest.mark.parametrize("spec", ["nosuchuser", "ci:nosuchgroup"])
def test_unknown_user_or_group_is_a_clear_error(spec):
    with pytest.raises(RunnerError, match="nosuch"):
        parse_user(spec, PASSWD, GROUP)


def test_repo_digest_prefers_the_configured_repository():
    digests = ["mirror.example/ci@sha256:aaa", "registry.example:5000/team/ci@sha256:bbb"]
    assert pick_repo_digest("registry.example:5000/team/ci:cuda12", digests) == digests[1]
    assert pick_repo_digest("other/image:1", digests) == digests[0]
    assert pick_repo_digest("local/image:dev", []) is None


def test_store_volumes_differ_per_key_image_and_user():
    a = store_volume_name("pc-1", "sha256:" + "a" * 64, 1000)
    assert a != store_volume_name("pc-1", "sha256:" + "b" * 64, 1000)
    assert a != store_volume_name("pc-1", "sha256:" + "a" * 64, 0)
    assert a != store_volume_name("pc-2", "sha256:" + "a" * 64, 1000)


def test_only_a_scratch_step_may_write_a_store():
    store = ToolStore(key="pc-1", env="PRE_COMMIT_HOME", writable=True)
    with pytest.raises(ValueError, match="gets a store read-only"):
        Step(name="hook", argv=["true"], store=store)
    assert Step(name="install", argv=["true"], scratch=True, store=store).store == store


def test_output_buffer_keeps_head_and_tail_and_hides_a_secret_cut_in_two():
    secret = "s3cr3t-token-value"
    buf = OutputBuffer(limit=100)
    buf.feed(b"HEAD" + b"x" * 40 + secret.encode() + b"y" * 500 + b"TAIL")
    text = buf.text([secret])
    assert text.startswith("HEAD")
    assert text.endswith("TAIL")
    assert "characters cut" in text
    assert "s3cr3t" not in text


def test_output_buffer_decodes_utf8_split_across_chunks():
    buf = OutputBuffer(limit=1000)
    data = "héllo ✓".encode()
    for i in range(len(data)):
        buf.feed(data[i : i + 1])
    assert buf.text() == "héllo ✓"


def test_redact_replaces_every_secret_and_ignores_tiny_ones():
    assert redact("token=abcd1234 again abcd1234 and ab", ["abcd1234", "ab"]) == "token=*** again *** and ab"


def test_the_workspace_limit_is_a_docker_size_or_a_clear_error():
    assert workspace_limit(Environment(name="ci", image="x")) == 10 << 30
    assert workspace_limit(
        Environment.model_validate({"name": "ci", "limits": {"workspace_size": "500m"}})
    ) == (500 << 20)
    with pytest.raises(RunnerError, match=r"environment ci: bad limits.workspace_size"):
        workspace_limit(Environment.model_validate({"name": "ci", "limits": {"workspace_size": "lots"}}))


GIB = 1 << 30


@pytest.mark.parametrize(
    ("configured", "engine_memory", "engine_cpus", "expected"),
    [
        # A big machine: the maximums.
        ({}, 256 * GIB, 64, EffectiveLimits(16 * GIB, 8 * GIB, 4 * GIB, 8.0, 4096)),
        # A 8 GiB laptop engine: 3/4 of its memory, half of that for /dev/shm, a quarter for /tmp.
        ({}, 8 * GIB, 4, EffectiveLimits(6 * GIB, 3 * GIB, 1536 << 20, 4.0, 4096)),
        # What the repository sets wins; shm and /tmp follow its memory; too many CPUs are lowered.
        (
            {"memory": "4g", "cpus": 32},
            256 * GIB,
            16,
            EffectiveLimits(4 * GIB, 2 * GIB, 1 * GIB, 16.0, 4096),
        ),
        (
            {"memory": "2g", "shm_size": "64m", "tmpfs_size": "1g", "cpus": 1.5, "pids": 100},
            8 * GIB,
            4,
            EffectiveLimits(2 * GIB, 64 << 20, 1 * GIB, 1.5, 100),
        ),
        # An engine that reports nothing: the maximums.
        ({}, 0, 0, EffectiveLimits(16 * GIB, 8 * GIB, 4 * GIB, 8.0, 4096)),
    ],
)
def test_limits_default_to_a_share_of_the_engine_s_machine(configured, engine_memory, engine_cpus, expected):
    limits = ResourceLimits.model_validate(configured)
    assert effective_limits(limits, engine_memory, engine_cpus) == expected


def test_a_bad_size_is_named():
    with pytest.raises(ValueError, match=r"limits\.memory = 'lots'"):
        effective_limits(ResourceLimits(memory="lots"), 8 * GIB, 4)


def test_sizes_are_shown_in_docker_syntax():
    assert [human_size(n) for n in (8 * GIB, 1536 << 20, 3 << 10, 1000)] == ["8g", "1536m", "3k", "1000"]


def test_the_config_schema_documents_the_rule():
    from bot.core.config import RepoConfig

    limits = RepoConfig.model_json_schema()["$defs"]["ResourceLimits"]["properties"]
    assert "3/4 of the engine's memory, at most 16g" in limits["memory"]["description"]
    assert "the engine's CPUs, at most 8" in limits["cpus"]["description"]
    assert "half the memory limit, at most 8g" in limits["shm_size"]["description"]
    assert "a quarter of the memory limit, at most 4g" in limits["tmpfs_size"]["description"]


def test_an_environment_without_image_cannot_use_the_container_runner():
    with pytest.raises(RunnerError, match="has no image"):
        DockerRunner(Environment(name="bare"), "r1")


# --- against the engine ----------------------------------------------------------------------------


def _snapshot(root: Path) -> dict[str, str]:
    """Every path under root with its content hash and mode (directories by mode only)."""
    snap = {}
    for path in sorted(root.rglob("*")):
        mode = oct(path.lstat().st_mode)
        digest = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "dir"
        snap[str(path.relative_to(root))] = f"{digest} {mode}"
    return snap


@pytest.mark.docker
async def test_exit_code_and_both_streams_are_reported(make_runner, workspace):
    runner = make_runner(redact=["hunter2-password"])
    await runner.prepare()
    result = await runner.run(
        sh(
            "echo",
            "echo to-stdout; echo to-stderr >&2; echo $SECRET; exit 3",
            env={"SECRET": "hunter2-password"},
        ),
        workspace,
    )
    assert result.exit_code == 3
    assert not result.ok
    assert "to-stdout" in result.output and "to-stderr" in result.output
    assert "hunter2" not in result.output and "***" in result.output


@pytest.mark.docker
async def test_image_is_pinned_to_a_reference_docker_run_accepts(make_runner, docker_client):
    runner = make_runner()
    await runner.prepare()
    info = runner.info
    assert info.kind == "docker"
    assert info.image_digest and info.image_digest.startswith("sha256:")
    out = docker_client.containers.run(info.image_ref, ["echo", "pinned"], remove=True, network_mode="none")
    assert out.strip() == b"pinned"
    # The test image is built here, with no registry digest: it is named as configured, never by
    # the local id alone, which no reader can pull.
    image = docker_client.images.get(info.image_digest)
    if image.attrs.get("RepoDigests"):
        assert "@sha256:" in info.image_ref
    else:
        assert info.image_ref == runner.environment.image and not info.image_ref.startswith("sha256:")


@pytest.mark.docker
async def test_missing_image_that_cannot_be_pulled_is_a_clear_error(docker_client):
    env = Environment(name="ci", image="paritybot-test/does-not-exist:never", gpus="none")
    runner = DockerRunner(env, "t-missing", docker_client)
    with pytest.raises(RunnerError) as err:
        await runner.prepare()
    message = str(err.value)
    assert "paritybot-test/does-not-exist:never" in message
    assert "could not be pulled" in message
    assert len(message.splitlines()) == 1  # a sentence, not a traceback


@pytest.mark.docker
async def test_default_limits_follow_the_engine_s_machine(docker_client, test_image, workspace):
    """No limits configured: the container's cgroup and mounts carry the sizes the rule gives for
    this engine's memory and CPUs."""
    info = docker_client.info()
    expected = effective_limits(ResourceLimits(), int(info["MemTotal"]), int(info["NCPU"]))
    env = Environment(name="ci", image=test_image, gpus="none")
    runner = DockerRunner(env, f"t-{uuid.uuid4().hex[:12]}", docker_client)
    try:
        cg = "/sys/fs/cgroup"
        script = (  # cgroup v2 files, else v1's
            f"cat {cg}/memory.max 2>/dev/null || cat {cg}/memory/memory.limit_in_bytes; "
            f"cat {cg}/cpu.max 2>/dev/null || echo $(cat {cg}/cpu/cpu.cfs_quota_us {cg}/cpu/cpu.cfs_period_us); "
            "df -k /dev/shm /tmp | tail -n 2"
        )
        result = await runner.run(sh("limits", script), workspace)
    finally:
        await runner.close()
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert int(lines[0]) == expected.memory
    quota, period = lines[1].split()
    assert int(quota) / int(period) == expected.cpus
    shm_kb, tmp_kb = (int(line.split()[1]) for line in lines[2:4])
    assert (shm_kb * 1024, tmp_kb * 1024) == (expected.shm, expected.tmpfs)
    assert runner.info.memory == human_size(expected.memory)
    assert runner.info.shm_size == human_size(expected.shm)


@pytest.mark.docker
async def test_only_steps_that_ask_get_a_network(make_runner, workspace):
    runner = make_runner()
    offline = await runner.run(sh("tests", "ls /sys/class/net"), workspace)
    online = await runner.run(sh("setup", "ls /sys/class/net", network=True), workspace)
    assert offline.output.split() == ["lo"]
    assert "eth0" in online.output.split()


@pytest.mark.docker
async def test_the_host_workspace_is_never_modified(make_runner, workspace):
    before = _snapshot(workspace)
    runner = make_runner()
    first = await runner.run(
        sh(
            "mutate",
            "git status --porcelain && echo changed >> README.md && rm pkg/mod.py && "
            "mkdir -p build && echo out > build/report.txt && cat .paritybot/input.txt",
            inject={".paritybot/input.txt": "injected text"},
            collect=["build/report.txt", "no/such/file.txt"],
        ),
        workspace,
    )
    assert first.exit_code == 0, first.output
    assert "injected text" in first.output
    assert first.collected == {"build/report.txt": "out\n"}
    # The copy carries over to the next step of the same run.
    second = await runner.run(sh("see", "git status --porcelain; cat build/report.txt"), workspace)
    assert " M README.md" in second.output and " D pkg/mod.py" in second.output
    assert "out" in second.output
    assert _snapshot(workspace) == before
    assert not (workspace / ".paritybot").exists()


@pytest.mark.docker
async def test_workdir_is_relative_to_the_workspace(make_runner, workspace):
    runner = make_runner()
    result = await runner.run(
        Step(name="pwd", argv=["python3", "-c", "import mod; print(mod.VALUE)"], workdir="pkg"), workspace
    )
    assert result.exit_code == 0, result.output
    assert result.output.strip() == "1"


@pytest.mark.docker
async def test_output_is_streamed_while_the_step_runs(make_runner, workspace):
    seen: list[tuple[float, str]] = []
    runner = make_runner(on_output=lambda text: seen.append((time.monotonic(), text)))
    result = await runner.run(sh("slow", "echo one; sleep 2; echo two"), workspace)
    assert result.exit_code == 0
    first = next(t for t, text in seen if "one" in text)
    second = next(t for t, text in seen if "two" in text)
    assert first < second  # "one" arrived before the step printed "two", not all at the end


@pytest.mark.docker
async def test_cancel_mid_step_leaves_no_container(make_runner, workspace, docker_client):
    runner = make_runner()
    task = asyncio.create_task(runner.run(sh("long", "sleep 300"), workspace))
    for _ in range(200):
        running = docker_client.containers.list(filters={"label": f"paritybot.run-id={runner.run_id}"})
        if running:
            break
        await asyncio.sleep(0.05)
    assert running, "the step's container never started"
    await runner.cancel()
    result = await asyncio.wait_for(task, timeout=30)
    assert result.cancelled and not result.ok
    assert containers_of(docker_client, runner.run_id, role="step") == []
    later = await runner.run(sh("after", "echo never"), workspace)
    assert later.cancelled and later.exit_code is None


@pytest.mark.docker
def test_a_runner_process_keeps_its_containers_while_it_lives_and_loses_them_once_dead(
    docker_client, test_image, tmp_path
):
    """`paritybot check --runner docker` owns its containers by its process: a `serve` or another
    check starting on the same engine leaves them alone while that process runs."""
    run_id = f"t-orphan-{uuid.uuid4().hex[:8]}"
    (tmp_path / "f.txt").write_text("x")
    script = textwrap.dedent(
        f"""
        import asyncio
        from pathlib import Path
        from bot.core.config import Environment
        from runner.backends.base import Step
        from runner.backends.docker import DockerRunner

        async def main():
            env = Environment(name="ci", image={test_image!r}, gpus="none")
            runner = DockerRunner(env, {run_id!r})
            await runner.run(Step(name="hang", argv=["sleep", "300"]), Path({str(tmp_path)!r}))

        asyncio.run(main())
        """
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script], cwd=REPO_ROOT, env={**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    )
    me = new_instance()  # another instance starting up on the same engine
    try:
        deadline = time.monotonic() + 60
        while not docker_client.containers.list(filters={"label": f"paritybot.run-id={run_id}"}):
            assert proc.poll() is None, "the runner process died before starting its step"
            assert time.monotonic() < deadline, "the runner never started its container"
            time.sleep(0.1)
        # Its owner lives: nothing of its run is removed.
        remove_leftovers(docker_client, me, process_alive)
        assert containers_of(docker_client, run_id)
        assert volumes_of(docker_client, run_id)
        assert proc.poll() is None
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert containers_of(docker_client, run_id)  # the killed runner left its container behind
    assert volumes_of(docker_client, run_id)

    removed, volumes = remove_leftovers(docker_client, me, process_alive)
    assert removed >= 1 and volumes >= 1
    assert containers_of(docker_client, run_id) == []
    assert volumes_of(docker_client, run_id) == []


@pytest.mark.docker
async def test_a_live_owners_containers_go_once_the_store_says_their_run_is_over(
    make_runner, workspace, docker_client
):
    runner = make_runner()
    task = asyncio.create_task(runner.run(sh("long", "sleep 120", timeout_s=60), workspace))
    for _ in range(200):
        if containers_of(docker_client, runner.run_id, role="step"):
            break
        await asyncio.sleep(0.05)
    me = new_instance()
    # Its owner (this process) lives and its run goes on: nothing is removed.
    remove_leftovers(docker_client, me, process_alive, lambda ids: set())
    assert containers_of(docker_client, runner.run_id, role="step")
    # The store says the run ended (its owner lost track of it): it goes, whoever owns it.
    removed, volumes = remove_leftovers(docker_client, me, process_alive, lambda ids: ids & {runner.run_id})
    assert removed >= 1 and volumes >= 1
    assert containers_of(docker_client, runner.run_id) == []
    with contextlib.suppress(RunnerError):
        await asyncio.wait_for(task, timeout=30)


@pytest.mark.docker
async def test_gpu_request_on_an_engine_without_nvidia_fails_cleanly(docker_client, test_image, workspace):
    if engine_has_nvidia(docker_client):
        pytest.skip("this engine has the NVIDIA runtime; the request would succeed")
    runner = DockerRunner(small_env(test_image, gpus="all"), f"t-gpu-{uuid.uuid4().hex[:8]}", docker_client)
    await runner.prepare()
    assert runner.info.gpus == "all"
    try:
        with pytest.raises(RunnerError) as err:
            await runner.run(Step(name="probe", argv=["true"]), workspace)
        assert "NVIDIA" in str(err.value)
        assert "could not select device driver" in str(err.value)
        assert containers_of(docker_client, runner.run_id, role="step") == []
    finally:
        await runner.close()
    assert volumes_of(docker_client, runner.run_id) == []


@pytest.mark.docker
async def test_a_store_is_filled_from_scratch_and_read_only_beside_the_workspace(
    make_runner, workspace, docker_client
):
    key = f"t-{uuid.uuid4().hex[:12]}"
    writer = ToolStore(key=key, env="STORE", writable=True)
    reader = ToolStore(key=key, env="STORE")
    first = make_runner()
    # The workspace is in the run's volume now; a scratch step still sees none of it, nor the home.
    copied = await first.run(sh("copy", "echo left-in-home > $HOME/note; ls"), workspace)
    assert "README.md" in copied.output.split()
    wrote = await first.run(
        Step(
            name="fill",
            argv=["sh", "-c", "ls -A . $HOME /paritybot; touch $STORE/env"],
            scratch=True,
            store=writer,
        ),
        workspace,
    )
    assert wrote.exit_code == 0, wrote.output
    assert "README.md" not in wrote.output and "note" not in wrote.output and "workspace" not in wrote.output
    await first.close()
    second = make_runner()
    seen = await second.run(sh("use", "ls $STORE; touch $STORE/other", store=reader), workspace)
    assert "env" in seen.output.split()
    assert seen.exit_code != 0 and "Read-only file system" in seen.output
    await second.close()
    for volume in docker_client.volumes.list(filters={"label": "paritybot.role=store"}):
        if key in volume.name:
            volume.remove(force=True)


@pytest.mark.docker
async def test_one_runner_serves_one_workspace(make_runner, workspace, tmp_path, docker_client):
    runner = make_runner()
    assert (await runner.run(sh("first", "true"), workspace)).ok
    other = tmp_path / "other"
    other.mkdir()
    with pytest.raises(RunnerError, match="one runner serves one workspace"):
        await runner.run(sh("second", "true"), other)
    assert containers_of(docker_client, runner.run_id, role="step") == []


@pytest.mark.docker
async def test_a_step_whose_workspace_watcher_dies_is_stopped_and_later_steps_refused(
    make_runner, workspace, docker_client
):
    runner = make_runner()
    task = asyncio.create_task(runner.run(sh("long", "sleep 120", timeout_s=60), workspace))

    def running(role: str) -> list:
        labels = [f"paritybot.run-id={runner.run_id}", f"paritybot.role={role}"]
        return docker_client.containers.list(ignore_removed=True, filters={"label": labels})

    # Killed once the step runs: a watcher that dies before the step starts refuses it instead
    # (a RunnerError from this run, as for the later step below).
    deadline = time.monotonic() + 60
    while not ((watchers := running("watch")) and running("step")):
        assert not task.done(), task.result()
        assert time.monotonic() < deadline, "the watcher or the step never started"
        await asyncio.sleep(0.05)
    watchers[0].kill()
    result = await asyncio.wait_for(task, timeout=30)
    assert not result.ok and not result.timed_out
    assert result.stopped_by_limit and result.stopped_by_limit.startswith(
        "the workspace's size could not be watched: the watcher exited with code 137"
    )
    with pytest.raises(RunnerError, match="the workspace's size could not be watched"):
        await runner.run(sh("after", "true"), workspace)


@pytest.mark.docker
async def test_a_step_the_watchdog_stops_while_its_container_starts_is_killed_once_started(
    make_runner, workspace, monkeypatch
):
    """The watchdog's stop can come after the step was admitted but before its container runs,
    when a kill does nothing at the engine; the step must not then run unwatched to its timeout."""
    from runner.backends.workspace_watch import WorkspaceWatch

    admit = WorkspaceWatch.step_started

    def stopped_at_once(self: WorkspaceWatch, on_over: Callable[[], None]) -> str | None:
        refused = admit(self, on_over)
        on_over()  # the container is created, not started
        return refused

    monkeypatch.setattr(WorkspaceWatch, "step_started", stopped_at_once)
    runner = make_runner()
    result = await asyncio.wait_for(runner.run(sh("long", "sleep 120", timeout_s=60), workspace), timeout=30)
    assert result.exit_code == 137 and not result.timed_out and not result.ok


@pytest.mark.docker
async def test_closing_beside_a_step_still_ending_leaves_nothing(make_runner, workspace, docker_client):
    """A caller that cancels its step and closes at once: the clean-up waits for the step's own
    (its container still being removed holds the volume), and nothing is left behind."""
    runner = make_runner()
    task = asyncio.create_task(runner.run(sh("long", "sleep 120", timeout_s=60), workspace))
    labels = [f"paritybot.run-id={runner.run_id}", "paritybot.role=step"]
    deadline = time.monotonic() + 60
    while not docker_client.containers.list(ignore_removed=True, filters={"label": labels}):
        assert not task.done(), task.result()
        assert time.monotonic() < deadline, "the step never started"
        await asyncio.sleep(0.05)
    task.cancel()
    await runner.close()
    assert containers_of(docker_client, runner.run_id) == []
    assert volumes_of(docker_client, runner.run_id) == []
    with pytest.raises(asyncio.CancelledError):
        await task


@pytest.mark.docker
async def test_a_running_steps_live_results_are_read_from_its_container(make_runner, workspace):
    """The test step's live file (the first failure while the rest run) is read through the
    engine while the container runs; a link put in its place is not followed."""
    from runner.checks.streaming import MAX_BYTES, ContainerTail
    from runner.checks.testexec import LIVE_PATH

    runner = make_runner()
    marks = '{"total": 3}\n{"failed": "tests/test_a.py::test_a", "message": "boom"}\n{"done": 1}\n'
    step = sh(
        "tests",
        f"mkdir -p .paritybot && printf '%s' '{marks}' > {LIVE_PATH} && sleep 6 && "
        f"rm {LIVE_PATH} && ln -s /etc/passwd {LIVE_PATH} && sleep 4",
    )
    tail = ContainerTail(workspace / LIVE_PATH, fetch=lambda: runner.read_running(LIVE_PATH, MAX_BYTES))
    running = asyncio.create_task(runner.run(step, workspace))
    deadline = time.monotonic() + 60
    while not tail.failed and time.monotonic() < deadline and not running.done():
        await asyncio.to_thread(tail.read)
        await asyncio.sleep(0.3)
    assert not running.done(), "the failure was seen only once the step had ended"
    assert [f.nodeid for f in tail.failed] == ["tests/test_a.py::test_a"] and tail.progress().total == 3
    while not running.done():  # the link: never read through
        assert await asyncio.to_thread(runner.read_running, LIVE_PATH, MAX_BYTES) in (None, marks)
        await asyncio.sleep(0.5)
    assert (await running).exit_code == 0
    assert runner.read_running(LIVE_PATH, MAX_BYTES) is None  # no step runs
