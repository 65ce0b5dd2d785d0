#!/usr/bin/env python3
"""How the workspace's size limit stops a writer, and what the watchdog costs a normal run.

    DOCKER_HOST=unix:///tmp/paritybot-engine/docker.sock python benchmarks/workspace_limit.py \
        [--limit 2g] [--files 50000]

1. Two steps write zeros into the workspace as fast as the disk takes them, under
   ``limits.workspace_size = --limit``, each up to four times the limit (so that a broken defence
   cannot fill the disk): one file (``dd``), which the file-size limit stops in the kernel, and
   files of 256 MiB one after the other, which only the watchdog's readings can stop. Printed for
   each: how long until it was stopped, how much the workspace held at the reading that stopped
   it (the overshoot over the limit), and the line the user sees.
2. The many-files writer again for the same time, with a limit that never bites: how much a step
   puts down unchecked in that time (the disk's speed, the baseline of the overshoot).
3. The cost of one reading on a large workspace: ``--files`` files (a big checkout), measured by
   the same ``du -skx`` the watcher runs each second, in a container like the watcher; the share
   of one CPU it takes at one reading per second.

For the per-step latency the watcher adds, compare ``benchmarks/runner_overhead.py`` on this
commit and on one before the watchdog.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

# Run as a script from a checkout: the project root must be importable.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import docker
import structlog
from docker.utils import parse_bytes

from bot.core.config import Environment, ResourceLimits
from runner.backends.base import Step
from runner.backends.docker import DockerRunner
from runner.backends.workspace_watch import _LIMITS, WATCH_INTERVAL_S, WATCH_MOUNT

# 100 files of 3 kB per directory, like a source tree.
MAKE_FILES = """
import os, sys
for i in range(int(sys.argv[1])):
    os.makedirs(f"tree/d{i // 100}", exist_ok=True)
    with open(f"tree/d{i // 100}/f{i}", "wb") as f:
        f.write(bytes(3000))
"""
MEASURE = Step(name="measure", argv=["du", "-sk", "."])


def gib(n: float) -> str:
    return f"{n / (1 << 30):.2f} GiB"


async def fill(
    env: Environment, client: docker.DockerClient, workspace: Path, step: Step, *, measure: bool = False
) -> tuple[float, str, int]:
    """Seconds until the writer ended, what the user sees, and (``measure``) bytes written then."""
    runner = DockerRunner(env, f"bench-{uuid.uuid4().hex[:8]}", client)
    await runner.prepare()
    started = time.perf_counter()
    result = await runner.run(step, workspace)
    elapsed = time.perf_counter() - started
    written = 0
    if measure:
        written = int((await runner.run(MEASURE, workspace)).output.split()[0]) * 1024
    await runner.close()
    return elapsed, result.describe_failure(), written


def held(text: str) -> float:
    """The size in the user's line: "… it held 2.1 GiB when measured"."""
    value, unit = text.split("it held ", 1)[1].split()[:2]
    return float(value) * (1 << 30 if unit == "GiB" else 1 << 20)


async def tick_cost(env: Environment, client: docker.DockerClient, workspace: Path, files: int) -> float:
    runner = DockerRunner(env, f"bench-{uuid.uuid4().hex[:8]}", client)
    await runner.prepare()
    made = await runner.run(
        Step(name="make-files", argv=["python3", "-c", MAKE_FILES, str(files)]), workspace
    )
    if not made.ok:
        raise SystemExit(f"could not make the files: {made.describe_failure()}\n{made.output}")
    volume = runner._run_volume

    def watcher_like(script: str) -> float:
        started = time.perf_counter()
        client.containers.run(
            runner._image_id,
            entrypoint=["sh", "-c", script],
            command=[],
            volumes={volume: {"bind": WATCH_MOUNT, "mode": "ro"}},
            remove=True,
            **_LIMITS,
        )
        return time.perf_counter() - started

    # Interleaved, so that load on the machine hits both alike; the difference is the reading.
    du, empty = [], []
    for _ in range(7):
        du.append(watcher_like(f"du -skx {WATCH_MOUNT} >/dev/null"))
        empty.append(watcher_like("true"))
    await runner.close()
    return max(statistics.median(du) - statistics.median(empty), 0.0)


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--limit", default="2g", help="limits.workspace_size for the writer (default 2g)")
    parser.add_argument(
        "--files", type=int, default=50_000, help="files in the large workspace (default 50000)"
    )
    parser.add_argument(
        "--image", default=os.environ.get("PARITYBOT_TEST_IMAGE", "paritybot-test/python:bookworm")
    )
    args = parser.parse_args()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.ERROR))
    client = docker.from_env()
    limits = ResourceLimits(workspace_size=args.limit, memory="1g", cpus=1)
    env = Environment(name="bench", image=args.image, gpus="none", limits=limits)
    limit = int(parse_bytes(args.limit))
    mib = 4 * limit >> 20
    one_file = Step(name="one-file", argv=["dd", "if=/dev/zero", "of=fill", "bs=1M", f"count={mib}"])
    many = (
        f"i=0; while [ $i -lt {mib // 256} ]; do head -c 256M /dev/zero > f$i || exit 1; i=$((i + 1)); done"
    )
    many_files = Step(name="many-files", argv=["sh", "-c", many], timeout_s=600)
    print(f"engine: {os.environ.get('DOCKER_HOST', 'default socket')}   image: {args.image}")
    print(f"limit {args.limit} ({gib(limit)}), one reading every {WATCH_INTERVAL_S} s")
    with tempfile.TemporaryDirectory(prefix="bench-ws-") as tmp:
        workspace = Path(tmp)
        (workspace / "README").write_text("bench\n")
        for writer in (one_file, many_files):
            elapsed, said, _ = await fill(env, client, workspace, writer)
            at_stop = held(said)
            print(
                f"{writer.name}: stopped after {elapsed:.1f} s, holding {gib(at_stop)}: "
                f"overshoot {gib(max(at_stop - limit, 0))} ({at_stop / limit:.2f}x the limit)"
            )
            print(f"  the user sees: {said}")
        # The same time again, without a limit that bites: how much the writer puts down unchecked.
        free = env.model_copy(update={"limits": limits.model_copy(update={"workspace_size": "1000g"})})
        timed = many_files.model_copy(update={"timeout_s": max(elapsed, 1.0)})
        _, unchecked, written = await fill(free, client, workspace, timed, measure=True)
        print(
            f"baseline, no limit, {max(elapsed, 1.0):.1f} s of many-files: wrote {gib(written)} ({unchecked})"
        )
        cost = await tick_cost(env, client, workspace, args.files)
    client.close()
    print(
        f"one reading of {args.files} files (du in a watcher-like container, less an empty one): "
        f"{cost * 1000:.0f} ms, at most {min(cost / WATCH_INTERVAL_S, 1) * 100:.0f}% of one CPU"
    )
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
