#!/usr/bin/env python3
"""For each fault, the state GitHub ends in and how long it took to get there.

    python benchmarks/finishing.py [--only SUBSTRING] [--no-kills]

Each scenario opens the demo project's pull request on the real bot (in-process, or as real
`paritybot serve` processes for kill -9) against the fake GitHub, injects one fault, and waits
until GitHub shows the run finished: every check run completed, none twice, one summary. The
same scenario without a fault, measured in the same run, is the baseline; the ratio says what the
fault cost. Retries, the reconciler and heartbeats use the tests' short settings
(tests/finishing.py, FAST): on a real deployment each wait is longer by the settings' factor.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import structlog  # noqa: E402
from botharness import REPO, BotHarness  # noqa: E402
from fakegithub import FakeGitHub  # noqa: E402
from finishing import CHECK_RUNS, FAST, WRITE_FAULTS, Fault, problems, run_with_fault, view  # noqa: E402
from serveproc import ServeProcess, kill_during_run  # noqa: E402

NO_RERUNS = "tests:\n  reruns: 0\n"


def outcome(fake: FakeGitHub, head: str, runs: int) -> str:
    seen = view(fake, REPO, 7, head)
    wrong = problems(seen, runs_per_check=runs)
    if wrong:
        return "NOT FINISHED: " + "; ".join(wrong)
    total = sum(len(s) for s in seen.runs.values())
    verdicts = ", ".join(
        f"{name.split(' / ')[1].split(' ')[0]} {states[-1]['conclusion']}"
        for name, states in seen.runs.items()
    )
    return f"{total} check runs completed, 0 twice, 1 summary ({verdicts})"


async def in_process(fault: Fault | None) -> tuple[str, float]:
    with tempfile.TemporaryDirectory(prefix="paritybot-bench-") as tmp:
        async with FakeGitHub() as fake:
            bot = await BotHarness.create(fake, Path(tmp), settings=FAST)
            fake.set_file(REPO, ".github/paritybot.yml", NO_RERUNS, ref="main")
            try:
                if fault is None:
                    start = time.monotonic()
                    assert await bot.send("pull_request", bot.pr_event("opened")) == 202
                    await bot.wait_for(
                        "finished", lambda: not problems(view(fake, REPO, 7, bot.sample.head_sha))
                    )
                    return outcome(fake, bot.sample.head_sha, 1), time.monotonic() - start
                seconds, runs = await run_with_fault(bot, fault)
                return outcome(fake, bot.sample.head_sha, runs), seconds
            finally:
                await bot.stop()


async def rate_limited(status: int) -> tuple[str, float]:
    with tempfile.TemporaryDirectory(prefix="paritybot-bench-") as tmp:
        async with FakeGitHub() as fake:
            bot = await BotHarness.create(fake, Path(tmp), settings=FAST)
            fake.set_file(REPO, ".github/paritybot.yml", NO_RERUNS, ref="main")
            headers = (
                {"Retry-After": "1"}
                if status == 403
                else {"x-ratelimit-remaining": "0", "x-ratelimit-reset": str(int(time.time()) + 1)}
            )
            fake.fail("POST", CHECK_RUNS, status, headers=headers, body={"message": "secondary rate limit"})
            try:
                start = time.monotonic()
                assert await bot.send("pull_request", bot.pr_event("opened")) == 202
                await bot.wait_for("finished", lambda: not problems(view(fake, REPO, 7, bot.sample.head_sha)))
                seconds = time.monotonic() - start
                limited = next(c for c in fake.calls if c.status == status)
                gap = min(c.at for c in fake.calls if c.at > limited.at) - limited.at
                return outcome(fake, bot.sample.head_sha, 1) + f"; next request after {gap:.2f} s", seconds
            finally:
                await bot.stop()


async def killed(kills: int) -> tuple[str, float]:
    with tempfile.TemporaryDirectory(prefix="paritybot-bench-") as tmp:
        async with FakeGitHub() as fake:
            serve = ServeProcess.create(fake, Path(tmp), max_attempts=2)
            try:
                report = await kill_during_run(serve, kills)
                orphans = (
                    "leftover step killed at each start"
                    if all(report.orphans_killed_at_start)
                    else "LEFTOVER ALIVE"
                )
                return f"{outcome(fake, serve.sample.head_sha, 1)}; {orphans}", report.seconds_after_last_kill
            finally:
                serve.open_gate()
                await serve.stop()


class Rows(list[tuple[str, str, float]]):
    def append(self, row: tuple[str, str, float]) -> None:
        super().append(row)
        print(f"{row[0]}: {row[2]:.1f} s: {row[1]}", file=sys.stderr, flush=True)


async def main_async(only: str, kills: bool) -> None:
    rows = Rows()
    baseline_state, baseline = await in_process(None)
    rows.append(("no fault (baseline)", baseline_state, baseline))
    for fault in WRITE_FAULTS:
        if only in fault.label:
            state, seconds = await in_process(fault)
            rows.append((fault.label, state, seconds))
    for status in (403, 429):
        label = f"rate limit: {status} with " + (
            "Retry-After: 1" if status == 403 else "x-ratelimit-reset in 1 s"
        )
        if only in label:
            state, seconds = await rate_limited(status)
            rows.append((label, state, seconds))
    if kills:
        for n in (1, 2, 3):
            label = f"kill -9 of serve, {n}×"
            if only in label:
                state, seconds = await killed(n)
                rows.append((label + " (time from the last kill)", state, seconds))
    print(f"\n| fault | final state on GitHub | seconds to it | × baseline ({baseline:.1f} s) |")
    print("|---|---|---|---|")
    for label, state, seconds in rows:
        print(f"| {label} | {state} | {seconds:.1f} | {seconds / baseline:.2f} |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="run only the faults whose label contains this")
    parser.add_argument("--no-kills", action="store_true", help="leave out the kill -9 scenarios")
    args = parser.parse_args()
    logging.basicConfig(level=logging.CRITICAL)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.CRITICAL))
    asyncio.run(main_async(args.only, not args.no_kills))
    return 0


if __name__ == "__main__":
    sys.exit(main())
