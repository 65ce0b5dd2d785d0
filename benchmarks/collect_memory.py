#!/usr/bin/env python3
"""The bot's peak memory when a run's tests write a huge JUnit report, against a normal report.

    DOCKER_HOST=unix:///tmp/paritybot-engine/docker.sock python benchmarks/collect_memory.py [--mb 300]

Each side is one test step of the container runner through :func:`runner.checks.testexec.run_tests`, in
a fresh process so that its peak resident memory (``ru_maxrss``) is its own. The hostile side's
``conftest.py`` rewrites pytest's report at the end of the session with ``--mb`` megabytes of
valid XML (test cases with ``--case-bytes`` of failure text each), as a pull request can. The baseline side runs
the same suite and keeps pytest's own report. Printed: what the check said, the peak memory of
each side and their ratio, and the wall time of each step.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import resource
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid
from pathlib import Path

# Run as a script from a checkout: the project root must be importable.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import docker
import structlog

from bot.core.config import Environment, TestSettings
from runner.backends.docker import DockerRunner
from runner.checks.repro import ReproContext
from runner.checks.testexec import TestRunError, run_tests

# Rewrites the report after pytest wrote it: cases of 100 kB failure text each, up to the size asked.
_CONFTEST = """
import os

def pytest_unconfigure(config):
    path, mb = config.option.xmlpath, int(os.environ.get("HUGE_REPORT_MB", "0"))
    if not path or not mb:
        return
    text = "E   " + "x" * int(os.environ["HUGE_REPORT_CASE_BYTES"])
    with open(path, "w") as f:
        f.write('<?xml version="1.0"?><testsuites><testsuite name="pytest">')
        written, i = 0, 0
        while written < mb * 1_000_000:
            case = (f'<testcase classname="t" name="test_{i}" file="tests/test_a.py" time="0.1">'
                    f'<failure message="boom">{text}</failure></testcase>')
            f.write(case)
            written, i = written + len(case), i + 1
        f.write("</testsuite></testsuites>")
"""


def make_workspace(root: Path) -> str:
    """A committed checkout with the suite and the conftest; returns its head commit."""
    (root / "tests").mkdir(parents=True)
    (root / "conftest.py").write_text(textwrap.dedent(_CONFTEST))
    (root / "tests" / "test_a.py").write_text("def test_one():\n    assert True\n")
    identity = ["-c", "user.name=b", "-c", "user.email=b@example.com"]
    for argv in (["init", "-q"], ["add", "-A"], [*identity, "commit", "-qm", "bench"]):
        subprocess.run(["git", "-C", str(root), *argv], check=True)
    head = subprocess.run(
        ["git", "-C", str(root), "rev-parse", "HEAD"], check=True, capture_output=True, text=True
    )
    return head.stdout.strip()


async def child(image: str, mb: int, case_bytes: int) -> dict[str, object]:
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    client = docker.from_env()
    variables = {"HUGE_REPORT_MB": str(mb), "HUGE_REPORT_CASE_BYTES": str(case_bytes)}
    env = Environment(name="bench", image=image, gpus="none", env=variables)
    runner = DockerRunner(env, f"bench-{uuid.uuid4().hex[:8]}", client)
    with tempfile.TemporaryDirectory(prefix="bench-ws-") as tmp:
        workspace = Path(tmp)
        repro = ReproContext(head_sha=make_workspace(workspace), repo="bench/bench")
        await runner.prepare()
        started = time.perf_counter()
        try:
            results = await run_tests(runner, workspace, None, TestSettings(reruns=0), repro)
            said = f"{len(results)} results"
        except TestRunError as exc:
            said = f"error: {exc.message.splitlines()[0][:100]}"
        elapsed = time.perf_counter() - started
        await runner.close()
    client.close()
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"said": said, "peak_mib": peak_kib / 1024, "seconds": elapsed}


def measure(image: str, mb: int, case_bytes: int) -> dict[str, object]:
    argv = ["--image", image, "--mb", str(mb), "--case-bytes", str(case_bytes)]
    out = subprocess.run(
        [sys.executable, __file__, "--child", *argv],
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=int, default=300, help="size of the hostile report (default 300)")
    parser.add_argument(
        "--image", default=os.environ.get("PARITYBOT_TEST_IMAGE", "paritybot-test/python:bookworm")
    )
    parser.add_argument(
        "--case-bytes", type=int, default=100_000, help="failure text per test case (default 100000)"
    )
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(asyncio.run(child(args.image, args.mb, args.case_bytes))))
        return 0
    base = measure(args.image, 0, args.case_bytes)
    huge = measure(args.image, args.mb, args.case_bytes)
    print(f"engine: {os.environ.get('DOCKER_HOST', 'default socket')}   image: {args.image}")
    for name, side in (("normal report", base), (f"{args.mb} MB report", huge)):
        print(
            f"{name:>16}: peak RSS {side['peak_mib']:7.1f} MiB   step {side['seconds']:6.2f} s   "
            f"check said: {side['said']}"
        )
    print(f"ratio peak RSS hostile / normal: {float(huge['peak_mib']) / float(base['peak_mib']):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
