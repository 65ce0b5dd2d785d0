"""Several hosts with a backlog (more runs queued than agents), when things die: how fast runs come
back, how fast deliveries are answered, whether a neighbour's restart costs anyone a run.

Real `paritybot serve` replicas and `paritybot agent` processes (a stub step, tests/fleet_agent.py;
the agents log in as a member of `paritybot_agent`) on one fresh PostgreSQL database, with the fake
GitHub in this process (tests/fleet_harness.py, as the tests use it). Heartbeat 0.5 s, stalled
after 3 s: the goals below are in those units.

    python benchmarks/fleet_backlog.py [--backlog 8] [--step 1.0] [--deliveries 30]

Needs PARITYBOT_TEST_DATABASE_URL (scripts/postgres.sh) and, for the neighbour's restart, a
Docker engine with the test image (PARITYBOT_TEST_IMAGE, default paritybot-test/python:bookworm).
Prints:

- recovery after kill -9 of the agent running a run, and after SIGSTOP of it past the stalled
  threshold, with the backlog waiting: seconds from the kill (the freeze) to the rerun's start;
  goal ≤ stalled-after + heartbeat + 2 s;
- delivery → first check run of its PR, p50/p99, with the replica the deliveries were sent to
  killed mid-burst; goal p99 ≤ stalled-after + 2 s;
- early results with agents: runs whose docstrings check run was completed before their tests'
  (goal: all);
- runs destroyed by a neighbour's restart: two agents on one engine, one restarted while the
  other runs its containers (goal 0);
- one machine: kill -9 of `serve` mid-run until GitHub shows the rerun finished, early results,
  and a `check --runner docker` whose container runs while `serve` starts on its engine (goal 0).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import sys
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from fakegithub import FakeGitHub  # noqa: E402
from fleet_harness import HEARTBEAT_S, ONE_ENVIRONMENT, REPO, STALLED_S, Fleet, Proc  # noqa: E402
from postgres_support import benchmark_server_url  # noqa: E402

from bot.core.kinds import CheckKind  # noqa: E402
from bot.core.models import RunState  # noqa: E402
from bot.render.check_runs import check_run_name  # noqa: E402

GOAL_RECOVERY_S = STALLED_S + HEARTBEAT_S + 2
GOAL_DELIVERY_S = STALLED_S + 2


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] if ordered else float("nan")


@asynccontextmanager
async def fleet(server: str) -> AsyncIterator[Fleet]:
    """A fresh database, the fake GitHub and the harness; everything gone afterwards."""
    name = f"bench_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    fake = FakeGitHub()
    await fake.start()
    try:
        with TemporaryDirectory(prefix="paritybot-backlog-") as tmp:
            url = urlunsplit(urlsplit(server)._replace(path=f"/{name}"))
            harness = await Fleet.create(fake, Path(tmp), url, ONE_ENVIRONMENT)
            try:
                yield harness
            finally:
                await harness.close()
    finally:
        await fake.close()
        with psycopg.connect(server, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


async def open_backlog(bench: Fleet, serve: Proc, first: int, count: int, step_s: float) -> list[int]:
    numbers = list(range(first, first + count))
    for n in numbers:
        bench.seed_pull(f"{n:040x}", number=n)
        bench.step_for(f"{n:040x}", step_s)
        await bench.send(serve, "pull_request", bench.pr_event("opened", number=n, head_sha=f"{n:040x}"))
    return numbers


def starts(bench: Fleet, head_sha: str) -> list[dict[str, Any]]:
    return [e for e in bench.events() if e["event"] == "start" and e["sha"] == head_sha]


async def recovery(server: str, args: argparse.Namespace, how: str) -> float:
    """kill -9 (``how`` = "kill") or SIGSTOP ("freeze") of the agent running a long run while a
    backlog waits; seconds until the run starts again."""
    async with fleet(server) as bench:
        serve = await bench.start_serve()
        agents = {n: await bench.start_agent(n, "cuda12.1") for n in ("gpu-a", "gpu-b")}
        long_sha = f"{1:040x}"
        bench.seed_pull(long_sha, number=1)
        bench.step_for(long_sha, 600)
        await bench.send(serve, "pull_request", bench.pr_event("opened", number=1, head_sha=long_sha))
        await bench.wait_for("the long run to start", lambda: bool(starts(bench, long_sha)))
        await open_backlog(bench, serve, 10, args.backlog, args.step)
        victim_name = str(starts(bench, long_sha)[0]["agent"])
        victim = agents[victim_name]
        if how == "kill":
            victim.kill()
            hit = time.time()
            victim.popen.wait()
            await bench.start_agent(victim_name, "cuda12.1")  # its supervisor restarts it
        else:
            victim.kill(signal.SIGSTOP)
            hit = time.time()
        await bench.wait_for(
            "the rerun", lambda: any(float(e["t"]) > hit for e in starts(bench, long_sha)), timeout=120
        )
        rerun = min(float(e["t"]) for e in starts(bench, long_sha) if float(e["t"]) > hit)
        if how == "freeze":
            os.kill(victim.popen.pid, signal.SIGCONT)
        waiting = sum(1 for j in bench.store.jobs_in_state(RunState.QUEUED))
        print(
            f"  {how}: rerun started {rerun - hit:.2f} s after (goal ≤ {GOAL_RECOVERY_S:.1f} s), {waiting} runs still waiting"
        )
        return rerun - hit


async def delivery_latency(server: str, args: argparse.Namespace) -> list[float]:
    """Deliveries sent to one replica, killed mid-burst; each PR's first check run, timed."""
    async with fleet(server) as bench:
        doomed = await bench.start_serve("serve-1", PARITYBOT_DELIVERY_LEASE_S="120")
        await bench.start_serve("serve-2", PARITYBOT_DELIVERY_LEASE_S="120")
        await bench.start_agent("gpu-a", "cuda12.1")
        numbers = list(range(100, 100 + args.deliveries))
        for n in numbers:
            bench.seed_pull(bench.sample.head_sha, number=n)
        sent: dict[int, float] = {}
        acknowledged: dict[int, float] = {}  # 202s: what GitHub counts as delivered
        first: dict[int, float] = {}

        async def deliver(n: int) -> None:
            sent[n] = time.time()
            # Not acknowledged (refused, or the replica died first): GitHub shows it failed.
            with contextlib.suppress(Exception):
                if await bench.send(doomed, "pull_request", bench.pr_event("opened", number=n)) == 202:
                    acknowledged[n] = sent[n]

        async def watch() -> None:
            seen: set[int] = set()
            while True:
                for run in bench.fake.check_runs(REPO):
                    if run.id not in seen:
                        seen.add(run.id)
                        seen_at = time.time()
                        # Off the event loop: the fake GitHub answers from it meanwhile.
                        for pr in await asyncio.to_thread(run_prs, bench, run):
                            first.setdefault(pr, seen_at)
                await asyncio.sleep(0.02)

        watcher = asyncio.create_task(watch())
        sending = [asyncio.create_task(deliver(n)) for n in numbers]
        # Killed once a third were answered: the replica holds some it was handling.
        await bench.wait_for(
            "a third acknowledged", lambda: len(acknowledged) >= len(numbers) // 3, timeout=120
        )
        doomed.kill()
        await asyncio.gather(*sending)
        await bench.wait_for(
            "every acknowledged delivery's check runs",
            lambda: all(n in first for n in acknowledged),
            timeout=180,
        )
        watcher.cancel()
        latencies = [first[n] - acknowledged[n] for n in acknowledged]
        print(
            f"  delivery → first check run, {len(latencies)} acknowledged, replica killed mid-burst: "
            f"p50 {pct(latencies, 0.5):.2f} s, p99 {pct(latencies, 0.99):.2f} s (goal p99 ≤ {GOAL_DELIVERY_S:.1f} s)"
        )
        return latencies


def run_prs(bench: Fleet, run: object) -> list[int]:
    """The PRs of the jobs a check run belongs to (its external id names the job)."""
    job_id = str(getattr(run, "external_id", "") or "").partition("/")[0]
    job = bench.store.get_job(job_id) if job_id else None
    return [job.pr_number] if job is not None and job.pr_number is not None else []


async def early_results(server: str, args: argparse.Namespace) -> tuple[int, int]:
    async with fleet(server) as bench:
        serve = await bench.start_serve()
        await bench.start_agent("gpu-a", "cuda12.1", mode="early", step_s=args.step)
        await bench.start_agent("gpu-b", "cuda12.1", mode="early", step_s=args.step)
        numbers = await open_backlog(bench, serve, 10, args.backlog, args.step)
        docstrings, tests = (check_run_name(k, "cuda12") for k in (CheckKind.DOCSTRINGS, CheckKind.TESTS))
        for n in numbers:
            await bench.wait_settled(1, pr=n, timeout=180)
        early = sum(_completed_first(bench, n, docstrings, tests) for n in numbers)
        print(
            f"  early results with agents: {early}/{len(numbers)} runs had docstrings completed before the tests (goal: all)"
        )
        return early, len(numbers)


def _completed_first(bench: Fleet, pr: int, first: str, then: str) -> bool:
    """In GitHub's own log of requests: ``first``'s completing update came before ``then``'s."""
    order = []
    for call in bench.fake.calls_to("PATCH", "/repos/{owner}/{repo}/check-runs/{check_run_id}"):
        if call.status == 200 and (call.json or {}).get("status") == "completed":
            run = bench.fake.check_run(int(call.path.rsplit("/", 1)[1]))
            if run.head_sha == f"{pr:040x}":
                order.append(run.name)
    return first in order and then in order and order.index(first) < order.index(then)


async def neighbour_restart(server: str, args: argparse.Namespace) -> int | None:
    image = os.environ.get("PARITYBOT_TEST_IMAGE", "paritybot-test/python:bookworm")
    try:
        import docker

        docker.from_env().images.get(image)
    except Exception as exc:
        print(f"  neighbour's restart: skipped, no engine with {image} ({type(exc).__name__})")
        return None
    async with fleet(server) as bench:
        serve = await bench.start_serve()
        await bench.start_agent("gpu-a", "cuda12.1", mode="runner", step_s=6, STUB_IMAGE=image)
        neighbour = await bench.start_agent("gpu-b", "cuda12.1", mode="runner", step_s=6, STUB_IMAGE=image)
        numbers = await open_backlog(bench, serve, 10, 4, 6)
        await bench.wait_for(
            "two runs going", lambda: len([e for e in bench.events() if e["event"] == "start"]) >= 2
        )
        await asyncio.sleep(2)  # their containers are up
        neighbour.kill()
        neighbour.popen.wait()
        await bench.start_agent("gpu-b", "cuda12.1", mode="runner", step_s=6, STUB_IMAGE=image)
        for n in numbers:
            await bench.wait_settled(1, pr=n, timeout=240)
        ends = [e for e in bench.events() if e["event"] == "end"]
        destroyed = sum(1 for e in ends if e.get("error"))
        print(f"  runs destroyed by a neighbour's restart: {destroyed} of {len(ends)} ended (goal 0)")
        for e in ends:
            if e.get("error"):
                print(f"    {e['agent']}: {str(e['error'])[:300]}")
        return destroyed


async def one_machine(args: argparse.Namespace) -> None:
    """The same questions of one machine (`serve` on SQLite, the host runner on the demo project,
    its run held at its set-up): kill -9 of `serve` mid-run → the run's next attempt at its set-up
    after the restart; early results; and a `paritybot check --runner docker` process running a
    container while a `serve` on the same engine starts (goal: its run survives)."""
    from serveproc import ServeProcess, kill_during_run

    fake = FakeGitHub()
    await fake.start()
    try:
        with TemporaryDirectory(prefix="paritybot-one-") as tmp:
            serve = ServeProcess.create(fake, Path(tmp))
            try:
                report = await kill_during_run(serve, kills=1)
            finally:
                await serve.stop()
        print(
            f"  one machine, kill -9 of serve mid-run: GitHub showed the run finished "
            f"{report.seconds_after_last_kill:.2f} s after the kill (restart, recovery and the whole rerun); "
            f"early results: pre-commit and docstrings completed while the tests ran: {report.tests_open_while_early_done}"
        )
        destroyed = await check_beside_serve(fake)
        if destroyed is not None:
            print(
                f"  one machine, a check's run destroyed by serve starting on its engine: {destroyed} of 1 (goal 0)"
            )
    finally:
        await fake.close()


async def check_beside_serve(fake: FakeGitHub) -> int | None:
    image = os.environ.get("PARITYBOT_TEST_IMAGE", "paritybot-test/python:bookworm")
    try:
        import docker

        docker.from_env().images.get(image)
    except Exception:
        return None
    from serveproc import ServeProcess

    script = (
        "import asyncio, sys, tempfile\n"
        "from pathlib import Path\n"
        "from bot.core.config import Environment\n"
        "from runner.backends.base import Step\n"
        "from runner.backends.docker import DockerRunner\n"
        "async def main():\n"
        f"    runner = DockerRunner(Environment(name='ci', image={image!r}, gpus='none'), 'bench-check')\n"
        "    with tempfile.TemporaryDirectory() as ws:\n"
        "        Path(ws, 'f').write_text('x')\n"
        "        try:\n"
        "            result = await runner.run(Step(name='sleep', argv=['sleep', '8']), Path(ws))\n"
        "        finally:\n"
        "            await runner.close()\n"
        "    sys.exit(0 if result.exit_code == 0 else 1)\n"
        "asyncio.run(main())\n"
    )
    check = await asyncio.create_subprocess_exec(sys.executable, "-c", script, cwd=ROOT)
    await asyncio.sleep(4)  # its container runs
    with TemporaryDirectory(prefix="paritybot-one-") as tmp:
        serve = ServeProcess.create(fake, Path(tmp), runner="docker", allow_host_runner="")
        try:
            await serve.start()  # removes what dead runners left, at start-up
        finally:
            await serve.stop()
    return 0 if await check.wait() == 0 else 1


async def main_async(args: argparse.Namespace, server: str) -> None:
    if args.only == "neighbour":
        await neighbour_restart(server, args)
        return
    if args.only == "deliveries":
        await delivery_latency(server, args)
        return
    if args.only == "one-machine":
        await one_machine(args)
        return
    print(
        f"heartbeat {HEARTBEAT_S} s, stalled after {STALLED_S} s, backlog {args.backlog} runs of {args.step} s, 2 agents"
    )
    await recovery(server, args, "kill")
    await recovery(server, args, "freeze")
    await delivery_latency(server, args)
    await early_results(server, args)
    await neighbour_restart(server, args)
    await one_machine(args)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--backlog", type=int, default=8, help="runs queued behind the two agents")
    parser.add_argument("--step", type=float, default=1.0, help="seconds each backlog run takes")
    parser.add_argument(
        "--deliveries", type=int, default=30, help="deliveries sent to the replica that is killed"
    )
    parser.add_argument("--only", choices=["neighbour", "deliveries", "one-machine"], help="only this part")
    args = parser.parse_args()
    server = benchmark_server_url()
    if server is None:
        return 2
    asyncio.run(main_async(args, server))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
