#!/usr/bin/env python3
"""The container runner's overhead per step, against a plain ``docker run --rm`` of the same command.

    DOCKER_HOST=unix:///tmp/paritybot-engine/docker.sock python benchmarks/runner_overhead.py [-n 20]

Both sides run ``true`` in the same image, in the same script run, interleaved so that engine
warm-up and background load hit them alike. DockerRunner.run does more than the CLI line: it
copies injected files into the run volume, attaches to the output, inspects the exit state and
removes the container, under the full hardening (limits, read-only root, no network). Also shown:
the one-off cost of a run (prepare + copying a small workspace + first step + close).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

# Run as a script from a checkout: the project root must be importable.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import docker
import structlog

from bot.core.config import Environment
from runner.backends.base import Step
from runner.backends.docker import DockerRunner

STEP = Step(name="bench", argv=["true"])


def cli_run(image: str) -> float:
    started = time.perf_counter()
    subprocess.run(["docker", "run", "--rm", "--network", "none", image, "true"], check=True)
    return time.perf_counter() - started


async def runner_step(runner: DockerRunner, workspace: Path) -> float:
    started = time.perf_counter()
    result = await runner.run(STEP, workspace)
    elapsed = time.perf_counter() - started
    if not result.ok:
        raise SystemExit(f"benchmark step failed: {result.describe_failure()}\n{result.output}")
    return elapsed


async def whole_run(env: Environment, client: docker.DockerClient, workspace: Path) -> float:
    started = time.perf_counter()
    runner = DockerRunner(env, f"bench-{uuid.uuid4().hex[:8]}", client)
    await runner.prepare()
    await runner_step(runner, workspace)
    await runner.close()
    return time.perf_counter() - started


def fmt(values: list[float]) -> str:
    qs = statistics.quantiles(values, n=10) if len(values) >= 2 else values * 9
    median = statistics.median(values)
    return f"median {median * 1000:7.1f} ms   p10 {qs[0] * 1000:7.1f}   p90 {qs[-1] * 1000:7.1f}"


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", type=int, default=20, help="measured repetitions of each side (default 20)")
    parser.add_argument(
        "--image", default=os.environ.get("PARITYBOT_TEST_IMAGE", "paritybot-test/python:bookworm")
    )
    args = parser.parse_args()
    # The runner logs every step at info level; here only the figures matter.
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    if shutil.which("docker") is None:
        print("the docker CLI is not installed; it is the baseline of this benchmark", file=sys.stderr)
        return 2
    client = docker.from_env()
    env = Environment(name="bench", image=args.image, gpus="none")
    with tempfile.TemporaryDirectory(prefix="bench-ws-") as tmp:
        workspace = Path(tmp)
        for i in range(20):
            (workspace / f"file{i}.py").write_text("x = 1\n" * 50)
        runner = DockerRunner(env, f"bench-{uuid.uuid4().hex[:8]}", client)
        await runner.prepare()
        # Warm-up: the first step copies the workspace and creates the volumes; CLI warms its cache.
        await runner_step(runner, workspace)
        cli_run(args.image)
        ours, cli = [], []
        for _ in range(args.n):
            ours.append(await runner_step(runner, workspace))
            cli.append(cli_run(args.image))
        await runner.close()
        runs = [await whole_run(env, client, workspace) for _ in range(max(3, args.n // 4))]
    client.close()
    ratio = statistics.median(ours) / statistics.median(cli)
    print(f"engine: {os.environ.get('DOCKER_HOST', 'default socket')}   image: {args.image}   n={args.n}")
    print(f"DockerRunner.run (true)      {fmt(ours)}")
    print(f"docker run --rm (CLI, true)  {fmt(cli)}")
    print(f"ratio runner / CLI           {ratio:.2f}")
    print(f"whole run (prepare, copy of a 20-file workspace, one step, close)  {fmt(runs)}")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
