"""From a red check to its failure reproduced: the wall time of one `paritybot repro RUN --rerun-only`.

A run of a small project whose head breaks a test is recorded in a real store and served by the run
page's routes (as the check run's Details link leads to it); the image is the local test image
(already on the engine, as the goal assumes). The command runs as a user runs it, and the figure is
its wall time from start to exit: record read, clone, image, probe, set-up, the test rerun, the
clean-up. Its output is printed too (the README's transcript comes from here).

    eval "$(scripts/docker-engine.sh env)"; python benchmarks/repro_command.py [--runs 3]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import docker  # noqa: E402
from cli_run import CLI, cli_env  # noqa: E402
from docker_support import TEST_IMAGE  # noqa: E402
from repro_support import make_project, record_job  # noqa: E402
from run_page_support import page_server  # noqa: E402

from bot.core.config import Environment  # noqa: E402
from bot.core.models import EnvFacts  # noqa: E402
from bot.service.store.sqlite import SQLiteStore  # noqa: E402
from runner.backends.docker import DockerRunner  # noqa: E402
from runner.probe.probe import parse_probe, probe_step  # noqa: E402


async def one_run(url: str, home: Path) -> tuple[float, int, str]:
    started = time.monotonic()
    proc = await asyncio.create_subprocess_exec(
        *CLI,
        "repro",
        url,
        "--rerun-only",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        env=cli_env(home),
    )
    out, _ = await proc.communicate()
    return time.monotonic() - started, proc.returncode or 0, out.decode()


async def image_facts(image: str) -> EnvFacts:
    """What the run's probe saw: the real probe in the image, as a run's first step."""
    runner = DockerRunner(Environment(name="probe", image=image, gpus="none"), "repro-bench-probe")
    try:
        with tempfile.TemporaryDirectory() as empty:
            return parse_probe(await runner.run(probe_step([]), Path(empty)))
    finally:
        await runner.close()


async def main(runs: int) -> None:
    client = docker.from_env()
    image_id = client.images.get(TEST_IMAGE).id
    client.close()
    facts = await image_facts(image_id)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        project = make_project(root)
        store = SQLiteStore(root / "store.db")
        job = record_job(store, project, image_id, sha=project["head"], private=False, probe=facts)
        async with page_server(store) as server:
            times = []
            for i in range(runs):
                elapsed, code, out = await one_run(f"{server}/runs/{job}", root / f"home{i}")
                if i == 0:
                    print(f"$ paritybot repro {server}/runs/{job} --rerun-only\n{out}")
                print(f"run {i + 1}: {elapsed:.1f} s, exit code {code}")
                times.append(elapsed)
        store.close()
    print(
        f"red check to the failure reproduced: median {statistics.median(times):.1f} s of {runs} (goal: 120 s)"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    asyncio.run(main(parser.parse_args().runs))
