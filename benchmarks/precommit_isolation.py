#!/usr/bin/env python3
"""What running pre-commit safely costs: the isolated check against one plain ``pre-commit run``.

    DOCKER_HOST=unix:///tmp/paritybot-engine/docker.sock python benchmarks/precommit_isolation.py [-n 5]

Two sides, on the same workspace, in the same image, with hook environments already installed,
interleaved so that engine warm-up and background load hit them alike:

* **single** — one container runs ``pre-commit run --from-ref MB --to-ref HEAD`` over every hook
  and puts the files back (how the check ran before it was split), the hook store read-only;
* **isolated** — :func:`runner.checks.precommit.run_precommit`: the install container (nothing to install,
  it checks and exits), the classifier container, one container per hook that applies, and the
  put-back container when a hook failed.

Two configs: the demo project's (2 hooks) and one of 10 local hooks (pygrep, system and a
``language: python`` hook), on the demo's pull request. Only the pre-commit part is timed: each
round makes a fresh runner and copies the workspace with an untimed first step, as the probe does
in a real run.
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

from bot.cli.demo import DemoRepo, commit_all, git, make_demo_repo
from bot.core.config import Environment
from runner.backends.base import Step, ToolStore
from runner.backends.docker import DockerRunner
from runner.checks.precommit import CONFIG_FILE, STORE_ENV, image_key, precommit_store_key, run_precommit
from runner.gitdiff import merge_base

TEN_HOOKS = """\
repos:
  - repo: local
    hooks:
      - {id: no-print, name: no print, language: pygrep, entry: 'print\\(', files: ^src/}
      - {id: trailing-whitespace, name: trailing whitespace, language: system, entry: python tools/strip_ws.py, types: [text]}
      - {id: no-breakpoint, name: no breakpoint, language: pygrep, entry: 'breakpoint\\(', types: [python]}
      - {id: no-todo, name: no todo, language: pygrep, entry: 'TODO', types: [python]}
      - {id: py-compile, name: compiles, language: system, entry: python -m py_compile, types: [python]}
      - {id: no-tabs, name: no tabs, language: pygrep, entry: '\\t', types: [python]}
      - {id: long-lines, name: long lines, language: pygrep, entry: '.{121,}', types: [python]}
      - {id: yaml-parses, name: yaml parses, language: system, entry: 'python -c "import sys, yaml; [yaml.safe_load(open(f)) for f in sys.argv[1:]]"', types: [yaml]}
      - {id: python-env, name: python env, language: python, entry: 'python -c "import sys"', types: [python]}
      - {id: no-merge-markers, name: no merge markers, language: pygrep, entry: '^(<<<<<<<|>>>>>>>) ', types: [text]}
"""

SINGLE = """
mb=$1 head=$2
pre-commit run --from-ref "$mb" --to-ref "$head" --show-diff-on-failure --color never --verbose
rc=$?
git checkout -q -- .
exit $rc
"""
GIT_ENV = {"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "safe.directory", "GIT_CONFIG_VALUE_0": "*"}


async def fresh_runner(env: Environment, client: docker.DockerClient, demo: DemoRepo) -> DockerRunner:
    runner = DockerRunner(env, f"bench-{uuid.uuid4().hex[:8]}", client)
    await runner.prepare()
    await runner.run(Step(name="copy", argv=["true"]), demo.path)  # the probe's place: copies the workspace
    return runner


async def single(env: Environment, client: docker.DockerClient, demo: DemoRepo, config: str) -> float:
    runner = await fresh_runner(env, client, demo)
    store = ToolStore(key=precommit_store_key(config, image_key(runner.info)), env=STORE_ENV)
    mb = merge_base(demo.path, demo.base_sha, demo.head_sha)
    step = Step(
        name="pre-commit",
        argv=["sh", "-c", SINGLE, "single", mb, demo.head_sha],
        env=GIT_ENV,
        store=store,
        timeout_s=300,
    )
    started = time.perf_counter()
    result = await runner.run(step, demo.path)
    elapsed = time.perf_counter() - started
    await runner.close()
    if result.exit_code not in (0, 1):
        raise SystemExit(f"single pre-commit run broke: {result.describe_failure()}\n{result.output}")
    return elapsed


async def isolated(env: Environment, client: docker.DockerClient, demo: DemoRepo) -> tuple[float, int]:
    runner = await fresh_runner(env, client, demo)
    started = time.perf_counter()
    result = await run_precommit(runner, demo.path, demo.base_sha, demo.head_sha, "bench", 300)
    elapsed = time.perf_counter() - started
    await runner.close()
    if result.status.value not in ("passed", "failed"):
        raise SystemExit(f"isolated pre-commit broke: {result.message}")
    return elapsed, sum(1 for h in result.hooks if h.status.value != "skipped")


def fmt(values: list[float]) -> str:
    return f"median {statistics.median(values) * 1000:7.0f} ms   min {min(values) * 1000:7.0f}   max {max(values) * 1000:7.0f}"


async def measure(label: str, env: Environment, client: docker.DockerClient, demo: DemoRepo, n: int) -> None:
    config = (demo.path / CONFIG_FILE).read_text()
    _, ran = await isolated(env, client, demo)  # warm-up: installs the hook environments
    await single(env, client, demo, config)
    ours, theirs = [], []
    for _ in range(n):
        ours.append((await isolated(env, client, demo))[0])
        theirs.append(await single(env, client, demo, config))
    ratio = statistics.median(ours) / statistics.median(theirs)
    hooks = config.count("- {id:") or config.count("- id:")
    print(f"{label}: {hooks} hooks, {ran} apply to the change")
    print(f"  single pre-commit run   {fmt(theirs)}")
    print(f"  isolated (this check)   {fmt(ours)}")
    print(f"  ratio isolated / single {ratio:.2f}")


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", type=int, default=5, help="measured rounds of each side (default 5)")
    parser.add_argument(
        "--image", default=os.environ.get("PARITYBOT_TEST_IMAGE", "paritybot-test/python:bookworm")
    )
    args = parser.parse_args()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    client = docker.from_env()
    client.api.timeout = 120
    folder = client.containers.run(
        args.image,
        ["python3", "-c", "from virtualenv.seed.wheels.embed import BUNDLE_FOLDER; print(BUNDLE_FOLDER)"],
        remove=True,
        network_mode="none",
    )
    # The `language: python` hook gets its environment from the wheels in the image: no index needed.
    offline_pip = {"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": folder.decode().strip()}
    env = Environment(name="bench", image=args.image, gpus="none", env=offline_pip)
    before = {v.name for v in client.volumes.list(filters={"label": "paritybot.role=store"})}
    print(f"engine: {os.environ.get('DOCKER_HOST', 'default socket')}   image: {args.image}   n={args.n}")
    try:
        with tempfile.TemporaryDirectory(prefix="bench-pc-") as tmp:
            demo = make_demo_repo(Path(tmp), "demo")
            await measure("demo project", env, client, demo, args.n)
            ten = make_demo_repo(Path(tmp), "ten")
            base_config = ten.path / CONFIG_FILE
            # The ten-hook config belongs to the base: the pull request is the demo's own change.
            git(ten.path, "checkout", "-q", "main")
            base_config.write_text(f"# {uuid.uuid4().hex}\n{TEN_HOOKS}")
            base = commit_all(ten.path, "ten hooks")
            git(ten.path, "checkout", "-q", "feature")
            git(ten.path, "rebase", "-q", "main")
            head = git(ten.path, "rev-parse", "HEAD")
            await measure("ten hooks", env, client, DemoRepo(ten.path, base, head), args.n)
    finally:
        for volume in client.volumes.list(filters={"label": "paritybot.role=store"}):
            if volume.name not in before:
                volume.remove(force=True)
        client.close()
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
