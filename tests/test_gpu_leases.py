"""GPU leases: a runner's inventory, the allocator, runs waiting for their GPUs, recovery at start-up.

The engine tests need an engine whose dockerd has a stand-in ``nvidia-container-runtime-hook`` on
its PATH (GPU containers then really start, with no GPU): PARITYBOT_TEST_GPU_ENGINE names it.
scripts/test.sh starts a second private engine so and sets it; by hand:

    mkdir -p /tmp/hook && printf '#!/bin/sh\\nexit 0\\n' > /tmp/hook/nvidia-container-runtime-hook
    chmod +x /tmp/hook/nvidia-container-runtime-hook
    PATH=/tmp/hook:$PATH PARITYBOT_ENGINE_DIR=/tmp/paritybot-gpu-engine scripts/docker-engine.sh start
    PARITYBOT_TEST_GPU_ENGINE=unix:///tmp/paritybot-gpu-engine/docker.sock  # and load the test image
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import docker
import docker.errors
import pytest
from docker_support import SMALL, TEST_IMAGE, sh, unavailable, workspace

from bot.core.config import Environment
from bot.service.app import gpu_leases_at_startup
from bot.service.settings import Settings
from runner.backends.base import RunnerInfo, RunnerRequest, RunRefused
from runner.backends.choice import RunnerPolicy, runner_factory
from runner.backends.docker import DockerRunner
from runner.backends.docker_engine import LABEL_MANAGED, LABEL_ROLE, LABEL_RUN_ID
from runner.backends.docker_limits import device_requests, gpus_flag
from runner.backends.gpu_inventory import (
    Gpu,
    confine,
    parse_nvidia_smi,
    parse_selection,
    runner_inventory,
)
from runner.backends.gpu_leases import GpuAllocator, Lease, LeaseRefused, leased_environment
from runner.backends.gpu_leasing import GpuLeases, LeasedRunner, engine_gpu_holders, leasing, start_leases
from runner.backends.ownership import OWNER_LABEL

__all__ = ["workspace"]  # a fixture

# What nvidia-smi --query-gpu=index,uuid,name,memory.total --format=csv,noheader,nounits prints.
H100_X8 = "".join(
    f"{i}, GPU-{i}a1b2c3d-4e5f-6a7b-8c9d-0e1f2a3b4c5{i}, NVIDIA H100 80GB HBM3, 81559\n" for i in range(8)
)
MIXED = (
    "0, GPU-2f6ee0b1-9c5d-8a4e-3b2c-1d0e9f8a7b6c, NVIDIA A100-SXM4-40GB, 40960\n"
    "1, GPU-7c1d2e3f-4a5b-6c7d-8e9f-0a1b2c3d4e5f, NVIDIA GeForce RTX 4090, 24564\n"
    "2, GPU-aa11bb22-cc33-dd44-ee55-ff6677889900, NVIDIA A100 80GB PCIe, [N/A]\n"
)


def gpus(n: int) -> list[Gpu]:
    return [Gpu(i, f"GPU-{i:04d}", "NVIDIA H100 80GB HBM3", 81559) for i in range(n)]


def env(gpus_setting: object = 2, **kw: object) -> Environment:
    return Environment.model_validate(
        {"name": "ci", "image": TEST_IMAGE, "gpus": gpus_setting, "limits": SMALL, **kw}
    )


# --- the inventory ------------------------------------------------------------------------------


def test_nvidia_smi_rows_are_parsed_by_index_uuid_model_and_memory() -> None:
    eight = parse_nvidia_smi(H100_X8)
    assert [g.index for g in eight] == list(range(8))
    assert eight[3] == Gpu(3, "GPU-3a1b2c3d-4e5f-6a7b-8c9d-0e1f2a3b4c53", "NVIDIA H100 80GB HBM3", 81559)
    mixed = parse_nvidia_smi(MIXED)
    assert [g.name for g in mixed] == [
        "NVIDIA A100-SXM4-40GB",
        "NVIDIA GeForce RTX 4090",
        "NVIDIA A100 80GB PCIe",
    ]
    assert [g.memory_mib for g in mixed] == [40960, 24564, None]
    # Without nounits the memory says MiB; a model name with a comma stays whole.
    assert parse_nvidia_smi("0, GPU-x, Some GPU, rev 2, 1024 MiB\n") == [
        Gpu(0, "GPU-x", "Some GPU, rev 2", 1024)
    ]
    assert parse_nvidia_smi("") == []


def test_what_nvidia_smi_prints_instead_of_rows_is_not_taken_for_gpus() -> None:
    for text in (
        "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that "
        "the latest NVIDIA driver is installed and running.\n",
        "No devices were found\n",
    ):
        with pytest.raises(ValueError, match="not an nvidia-smi GPU row"):
            parse_nvidia_smi(text)


def test_the_operator_confines_a_runner_to_some_gpus_by_index_or_uuid() -> None:
    found = parse_nvidia_smi(MIXED)
    assert parse_selection(None) is None and parse_selection(" ") is None
    assert parse_selection("none") == []
    assert parse_selection("0, 2,0") == ["0", "2"]
    with pytest.raises(ValueError, match="empty entry"):
        parse_selection("0,,1")
    assert confine(found, None) == found
    assert confine(found, ["2", "GPU-7c1d2e3f-4a5b-6c7d-8e9f-0a1b2c3d4e5f"]) == [found[2], found[1]]
    with pytest.raises(ValueError, match="names 5, which nvidia-smi does not list"):
        confine(found, ["0", "5"])
    # Without nvidia-smi here (a remote engine), the setting alone is the inventory.
    assert confine(None, ["GPU-a", "GPU-b"]) == [Gpu(0, "GPU-a"), Gpu(1, "GPU-b")]
    assert confine(None, None) is None
    assert runner_inventory(None, lambda: found) == found
    assert runner_inventory("1", lambda: found) == [found[1]]
    assert runner_inventory("none", lambda: found) == []
    assert runner_inventory(None, lambda: None) is None


def test_the_setting_is_checked_when_the_service_starts() -> None:
    assert Settings(gpus="0,1").gpus == "0,1"
    assert Settings(gpus="").gpus is None
    with pytest.raises(ValueError, match="empty entry"):
        Settings(gpus="0,")
    # Unknown GPUs: nothing is leased (and nothing is asked of the engine).
    assert gpu_leases_at_startup(Settings(), lambda: None) is None
    leases = gpu_leases_at_startup(
        Settings(runner="host", allow_host_runner="trusted-code-only"), lambda: gpus(2)
    )
    assert leases is not None and leases.allocator.inventory == gpus(2)


# --- the allocator ------------------------------------------------------------------------------


def test_two_runs_of_two_gpus_get_disjoint_gpus_and_a_third_waits() -> None:
    alloc = GpuAllocator(gpus(4))
    a = alloc.request("a", 2)
    b = alloc.request("b", 2)
    assert a == Lease("a", ("GPU-0000", "GPU-0001"))
    assert b == Lease("b", ("GPU-0002", "GPU-0003"))
    assert alloc.request("c", 2) is None
    assert alloc.position("c") == 1
    assert alloc.release("b") == [Lease("c", ("GPU-0002", "GPU-0003"))]
    assert alloc.free() == []


def test_all_is_every_gpu_exclusively_and_none_never_waits() -> None:
    alloc = GpuAllocator(gpus(2))
    assert alloc.request("all", "all") == Lease("all", ("GPU-0000", "GPU-0001"))
    assert alloc.request("one", 1) is None
    assert alloc.request("cpu", "none") == Lease("cpu", ())
    assert alloc.request("zero", 0) == Lease("zero", ())
    assert alloc.release("all") == [Lease("one", ("GPU-0000",))]


def test_a_run_that_asks_more_than_the_runner_has_is_refused_at_once() -> None:
    alloc = GpuAllocator(gpus(2))
    with pytest.raises(LeaseRefused, match=r"asks for 3 GPUs .* this runner has 2 .*at most 2"):
        alloc.request("big", 3)
    with pytest.raises(LeaseRefused, match="asks for GPU 7"):
        alloc.request("where", ["0", "7"])
    with pytest.raises(LeaseRefused, match="this runner has no GPU"):
        GpuAllocator([]).request("any", 1)
    assert GpuAllocator([]).request("all", "all") == Lease("all", ())
    assert alloc.position("big") is None and alloc.free() == ["GPU-0000", "GPU-0001"]


def test_waiting_is_first_come_first_served_so_big_runs_are_not_starved() -> None:
    alloc = GpuAllocator(gpus(4))
    assert alloc.request("three", 3) is not None
    assert alloc.request("four", 4) is None
    # One GPU is free, but the run of four asked first: the run of one waits behind it.
    assert alloc.request("one", 1) is None
    assert alloc.release("three") == [Lease("four", tuple(g.uuid for g in gpus(4)))]
    assert alloc.release("four") == [Lease("one", ("GPU-0000",))]


def test_a_withdrawn_head_lets_the_runs_behind_it_go() -> None:
    alloc = GpuAllocator(gpus(2))
    alloc.request("one", 1)
    alloc.request("two", 2)
    alloc.request("other", 1)
    assert alloc.withdraw("two") == [Lease("other", ("GPU-0001",))]


def test_device_ids_are_a_constraint_within_the_inventory() -> None:
    alloc = GpuAllocator(gpus(4))
    assert alloc.request("a", ["2", "GPU-0000"]) == Lease("a", ("GPU-0000", "GPU-0002"))
    assert alloc.request("b", ["GPU-0002"]) is None
    assert alloc.release("a") == [Lease("b", ("GPU-0002",))]


def test_a_recovered_lease_is_not_handed_out_twice() -> None:
    alloc = GpuAllocator(gpus(4))
    alloc.recover("dead/run-1", ["GPU-0001", "3"])
    alloc.recover("old/run-2", [], count=1)  # an older paritybot's request by count: the first GPU
    assert alloc.request("a", 1) == Lease("a", ("GPU-0002",))
    assert alloc.request("b", 1) is None
    assert alloc.free() == []
    assert alloc.forget_recovered({"old/run-2"}) == [Lease("b", ("GPU-0001",))]
    assert alloc.forget_recovered(set()) == []
    assert alloc.free() == ["GPU-0000", "GPU-0003"]
    everything = GpuAllocator(gpus(2))
    everything.recover("x/y", [], count=-1)
    assert everything.request("c", 1) is None


def test_with_sharing_allowed_leases_overlap_on_the_least_used_gpus() -> None:
    alloc = GpuAllocator(gpus(2), shared=True)
    assert alloc.request("a", 1) == Lease("a", ("GPU-0000",))
    assert alloc.request("b", 1) == Lease("b", ("GPU-0001",))
    assert alloc.request("c", 2) == Lease("c", ("GPU-0000", "GPU-0001"))
    assert alloc.request("d", "all") == Lease("d", ("GPU-0000", "GPU-0001"))


def test_the_lease_is_what_docker_and_the_host_get_and_the_env_cannot_widen_it() -> None:
    lease = Lease("r", ("GPU-0002", "GPU-0003"))
    wide = env(2, env={"NVIDIA_VISIBLE_DEVICES": "all", "CUDA_VISIBLE_DEVICES": "0,1,2,3", "KEEP": "1"})
    leased = leased_environment(wide, lease)
    assert leased.gpus == ["GPU-0002", "GPU-0003"]
    assert leased.env == {
        "KEEP": "1",
        "NVIDIA_VISIBLE_DEVICES": "GPU-0002,GPU-0003",
        "CUDA_VISIBLE_DEVICES": "GPU-0002,GPU-0003",
    }
    assert list(leased.env)[-2:] == ["NVIDIA_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"]  # set last
    (request,) = device_requests(leased.gpus)
    assert request["DeviceIDs"] == ["GPU-0002", "GPU-0003"] and not request["Count"]
    cpu = leased_environment(env("none", env={"NVIDIA_VISIBLE_DEVICES": "all"}), Lease("c", ()))
    assert cpu.gpus == "none" and device_requests(cpu.gpus) == []
    assert cpu.env == {"NVIDIA_VISIBLE_DEVICES": "void", "CUDA_VISIBLE_DEVICES": ""}
    # Bare indexes (no nvidia-smi where paritybot runs): a container numbers its GPUs from 0 again.
    by_index = leased_environment(wide, Lease("i", ("2", "3")))
    assert by_index.env == {"KEEP": "1", "NVIDIA_VISIBLE_DEVICES": "2,3"}
    assert device_requests(by_index.gpus)[0]["DeviceIDs"] == ["2", "3"]


# --- waiting for a lease ------------------------------------------------------------------------


class FakeRunner:
    def __init__(self, environment: Environment) -> None:
        self.environment = environment
        self.closed = False
        self.info = RunnerInfo(kind="docker", gpus=gpus_flag(environment.gpus))

    async def close(self) -> None:
        self.closed = True

    def read_running(self, rel: str, limit: int) -> str | None:
        return rel


async def test_runs_wait_for_their_gpus_and_get_them_when_a_run_closes() -> None:
    leases = GpuLeases(GpuAllocator(gpus(2)))
    made: list[FakeRunner] = []

    async def factory(request: RunnerRequest) -> FakeRunner:
        made.append(FakeRunner(request.environment))
        return made[-1]

    make = leasing(factory, leases)  # type: ignore[arg-type]
    first = await make(RunnerRequest(env(2), "first"))
    second = asyncio.ensure_future(make(RunnerRequest(env(1), "second")))
    await asyncio.sleep(0.05)
    assert not second.done()
    assert isinstance(first, LeasedRunner) and first.read_running("x", 1) == "x"
    await first.close()
    await first.close()  # a second close releases nothing more
    runner = await asyncio.wait_for(second, 5)
    assert made[0].closed and made[1].environment.gpus == ["GPU-0000"]
    assert runner.info.gpus == "1", "a repro command asks for what the environment asks"
    await runner.close()
    assert leases.allocator.held == {} and leases.allocator.free() == ["GPU-0000", "GPU-0001"]


async def test_a_run_too_big_is_refused_before_any_runner_is_made() -> None:
    made: list[RunnerRequest] = []

    async def factory(request: RunnerRequest) -> FakeRunner:
        made.append(request)
        return FakeRunner(request.environment)

    make = leasing(factory, GpuLeases(GpuAllocator(gpus(2))))  # type: ignore[arg-type]
    with pytest.raises(RunRefused, match="asks for 3 GPUs"):
        await asyncio.wait_for(make(RunnerRequest(env(3), "big")), 5)
    assert made == []


async def test_a_cancelled_wait_or_a_failed_runner_leaves_no_lease() -> None:
    leases = GpuLeases(GpuAllocator(gpus(1)))

    async def failing(request: RunnerRequest) -> FakeRunner:
        raise RunRefused("no engine")

    with pytest.raises(RunRefused, match="no engine"):
        await leasing(failing, leases)(RunnerRequest(env(1), "fails"))  # type: ignore[arg-type]
    assert leases.allocator.held == {}
    held = await leases.acquire("holder", 1)
    waiting = asyncio.ensure_future(leases.acquire("waiter", 1))
    await asyncio.sleep(0.05)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    leases.release(held)
    assert leases.allocator.held == {} and leases.allocator.position("waiter#2") is None


async def test_the_host_runner_sees_only_its_lease_whatever_the_machine_passes_through(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3")  # the operator's, passed through to steps
    leases = GpuLeases(GpuAllocator(gpus(4)))
    await leases.acquire("other", 1)
    make = leasing(runner_factory(RunnerPolicy(mode="host", host="any")), leases)
    runner = await make(RunnerRequest(env(2, image=None, env={"CUDA_VISIBLE_DEVICES": "0"}), "host-run"))
    try:
        result = await runner.run(sh("gpus", 'echo "cuda=$CUDA_VISIBLE_DEVICES"'), workspace)
    finally:
        await runner.close()
    assert result.output.strip() == "cuda=GPU-0001,GPU-0002"
    assert list(leases.allocator.held) == ["other#1"]


# --- on an engine: device ids, and leases recovered from running containers --------------------


@pytest.fixture(scope="module")
def gpu_engine() -> Iterator[docker.DockerClient]:
    """A client of the engine with the stand-in NVIDIA hook (see the module docstring)."""
    where = os.environ.get("PARITYBOT_TEST_GPU_ENGINE")
    if not where:
        # scripts/test.sh starts its engine with the stand-in, so CI always has one.
        unavailable("PARITYBOT_TEST_GPU_ENGINE is unset: no engine with a stand-in NVIDIA hook")
    client = docker.DockerClient(base_url=where, timeout=60)
    try:
        client.ping()
        client.images.get(TEST_IMAGE)
    except docker.errors.DockerException as exc:
        pytest.fail(f"PARITYBOT_TEST_GPU_ENGINE={where}: {exc}")
    yield client
    client.close()


def running_device_ids(client: docker.DockerClient, run_id: str) -> list[str] | None:
    found = client.containers.list(
        ignore_removed=True, filters={"label": [f"{LABEL_RUN_ID}={run_id}", f"{LABEL_ROLE}=step"]}
    )
    for container in found:
        requests = container.attrs["HostConfig"].get("DeviceRequests") or []
        assert [r.get("Count") or 0 for r in requests] == [0], "a device request by count"
        return [str(i) for r in requests for i in r.get("DeviceIDs") or []]
    return None


@pytest.mark.docker
async def test_two_concurrent_runs_of_two_gpus_get_disjoint_device_ids(gpu_engine, workspace: Path) -> None:
    leases = GpuLeases(GpuAllocator(gpus(4)))

    async def factory(request: RunnerRequest) -> DockerRunner:
        return DockerRunner(request.environment, request.run_id, gpu_engine, owns_client=False)

    make = leasing(factory, leases)
    runs = [f"t-gpu-{uuid.uuid4().hex[:8]}" for _ in range(2)]

    async def run(run_id: str) -> str:
        runner = await make(RunnerRequest(env(2, env={"NVIDIA_VISIBLE_DEVICES": "all"}), run_id))
        try:
            await runner.prepare()
            result = await runner.run(sh("gpus", 'echo "gpus=$NVIDIA_VISIBLE_DEVICES"; sleep 6'), workspace)
            assert result.exit_code == 0, result.output
            return result.output
        finally:
            await runner.close()

    async def seen() -> dict[str, list[str]]:
        ids: dict[str, list[str]] = {}
        deadline = time.monotonic() + 60
        while len(ids) < 2 and time.monotonic() < deadline:
            for run_id in runs:
                got = await asyncio.to_thread(running_device_ids, gpu_engine, run_id)
                if got is not None:
                    ids[run_id] = got
            await asyncio.sleep(0.2)
        return ids

    outputs, ids = await asyncio.gather(asyncio.gather(*(run(r) for r in runs)), seen())
    assert len(ids) == 2, "both runs' containers ran at once"
    a, b = ids.values()
    assert len(a) == 2 and len(b) == 2 and not set(a) & set(b), ids
    assert set(a) | set(b) == {g.uuid for g in gpus(4)}
    for run_id, output in zip(runs, outputs, strict=True):
        # The env's "all" never reaches the hook last: the lease's ids do.
        assert output.strip().splitlines()[-1] == f"gpus={','.join(ids[run_id])}"
    assert leases.allocator.held == {}


@pytest.mark.docker
async def test_gpus_a_running_container_holds_are_recovered_and_not_handed_out_twice(gpu_engine) -> None:
    run_id = f"t-gpu-{uuid.uuid4().hex[:8]}"
    container = gpu_engine.containers.run(
        TEST_IMAGE,
        ["sleep", "60"],
        detach=True,
        labels={LABEL_MANAGED: "1", LABEL_RUN_ID: run_id, LABEL_ROLE: "step", OWNER_LABEL: "process:dead"},
        device_requests=device_requests(["GPU-0001"]),
        network_mode="none",
    )
    try:
        assert engine_gpu_holders(gpu_engine)[f"process:dead/{run_id}"] == (["GPU-0001"], 0)
        leases = await asyncio.to_thread(start_leases, gpus(2), client=gpu_engine)
        assert leases is not None
        leases._recheck_s = 0.2
        first = await leases.acquire("a", 1)
        assert first.uuids == ("GPU-0000",)
        waiting = asyncio.ensure_future(leases.acquire("b", 1))
        await asyncio.sleep(0.5)
        assert not waiting.done(), "GPU-0001 is still the running container's"
        await asyncio.to_thread(container.remove, force=True)
        second = await asyncio.wait_for(waiting, 10)
        assert second.uuids == ("GPU-0001",)
    finally:
        with contextlib.suppress(docker.errors.NotFound):
            container.remove(force=True)
