"""Several hosts under load: 2 `serve` replicas, 4 agents, 1,000 pull-request events over 100 PRs and
3 environments, on one PostgreSQL, against the fake GitHub (in a process of its own).

The agents are the real `paritybot agent` (procrastinate's worker, heartbeats, the fence, the reaper,
sealed clone tokens) with a stub step in place of the pipeline (tests/fleet_agent.py), so the figures
are the bot's: how fast it accepts, decides, enqueues, hands out and reports.

    python benchmarks/fleet.py [--prs 100] [--events-per-pr 10] [--step 0.05] [--kills 3] [--supersedes 5]

Needs PARITYBOT_TEST_DATABASE_URL (scripts/postgres.sh start; eval "$(scripts/postgres.sh env)"):
a new database is made for the run and dropped after it. Prints:

- events/s accepted (202s per second of sending, 16 requests in flight, both replicas in turn);
- time from a delivery's POST to its job's start on an agent, p50/p99 (jobs superseded before they
  started have no start): under the burst of 1,000, and paced (PRs opened one at a time before it);
- CPU per event of each role (serve replicas, agents, the fake GitHub, PostgreSQL), from /proc: what
  the figures above cost, whatever else the machine is doing;
- jobs lost (a PR's last head without a succeeded run in each environment, a delivery never handled,
  a job left queued or running) and duplicate runs (a job started twice, or two runs of one PR and
  environment at once), both with goal 0; summaries per PR (goal 1) and check runs left open (goal 0);
- supersede: from the POST of a push while the PR's run is going to that run stopped on its agent
  (the abort seen by the step), and to the new head's run started;
- recovery after kill -9 of the agent running a job: until another agent starts it (goal ≤ the
  stalled-after threshold + 2 s);
- PostgreSQL transactions/s with the agents idle (alone, then with the replicas idle too).

Longer than most scripts: it starts and drives the whole several-hosts scenario.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import multiprocessing
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import aiohttp
import psycopg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from postgres_support import benchmark_server_url  # noqa: E402

SECRET = "benchmark-secret"
REPO = "octo-org/calc"
HEARTBEAT_S, STALLED_S = 1.0, 5.0
ENVIRONMENTS = {"cuda12": "cuda12.1", "cuda11": "cuda11.8", "rocm6": "rocm6.0"}
AGENTS = {"gpu-1": "cuda12.1", "gpu-2": "cuda11.8", "gpu-3": "rocm6.0", "gpu-4": "cuda12.1,cuda11.8,rocm6.0"}
CONFIG = "environments:\n" + "".join(
    f"  - name: {env}\n    runs_on: {label}\n    image: python:3.11-slim\n    branches: [main]\n"
    for env, label in ENVIRONMENTS.items()
)
BASE_SHA = "b" * 40
SUPERSEDE_PR = 700  # PRs 700… are the supersede rounds'


def sha(pr: int, k: int) -> str:
    return f"{pr:020x}{k:020x}"


def fake_github_process(conn: Any, prs: int, events_per_pr: int, kill_prs: list[int]) -> None:
    """The fake GitHub in a process of its own, so its work (it checks every request against
    GitHub's REST description) does not slow the load generator."""
    from fakegithub import FakeGitHub

    async def main() -> None:
        fake = FakeGitHub()
        await fake.start()
        fake.add_repo(REPO, installation_id=1, clone_url="file:///nonexistent.git")
        fake.set_file(REPO, ".github/paritybot.yml", CONFIG, ref="main")
        for pr in [*range(1, prs + 1), *kill_prs, *range(500, 600), *range(SUPERSEDE_PR, SUPERSEDE_PR + 100)]:
            fake.add_pull(
                REPO,
                pr,
                head_sha=sha(pr, 0),
                base_ref="main",
                base_sha=BASE_SHA,
                author="octocat",
                author_association="OWNER",
            )
        conn.send((fake.url, fake.app_id, fake.private_key_pem))
        while True:
            if not await asyncio.to_thread(conn.poll, 0.5):
                continue
            if conn.recv() == "stop":
                break
            comments = {
                pr: sum(1 for c in fake.comments(REPO, pr) if c.user == fake.bot_login)
                for pr in range(1, prs + 1)
            }
            open_runs = sum(1 for r in fake.runs.values() if r.states[-1]["status"] != "completed")
            conn.send({"comments": comments, "open_check_runs": open_runs, "calls": len(fake.calls)})
        await fake.close()

    asyncio.run(main())


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def transactions(url: str) -> int:
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = current_database()"
        ).fetchone()
        return int(row[0]) if row else 0


def cpu_seconds(pid: int, *, children: bool = False) -> float:
    """User + system CPU of a process (and of its reaped children), from /proc."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    ticks = int(fields[11]) + int(fields[12]) + (int(fields[13]) + int(fields[14]) if children else 0)
    return ticks / os.sysconf("SC_CLK_TCK")


def postgres_cpu(url: str) -> float:
    """The cluster's CPU: its postmaster with the backends it reaped, and those still running."""
    with psycopg.connect(url) as conn:
        row = conn.execute("SHOW data_directory").fetchone()
    pid_file = Path(str(row[0]) if row else "") / "postmaster.pid"
    try:
        postmaster = int(pid_file.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return float("nan")
    live = subprocess.run(
        ["ps", "-o", "pid=", "--ppid", str(postmaster)], capture_output=True, text=True
    ).stdout
    return cpu_seconds(postmaster, children=True) + sum(cpu_seconds(int(p)) for p in live.split())


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


class Bench:
    def __init__(self, args: argparse.Namespace, url: str, tmp: Path):
        self.args = args
        self.url = url
        self.tmp = tmp
        self.events = tmp / "events.jsonl"
        self.steps = tmp / "steps.json"
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.ports: dict[str, int] = {}
        parts = urlsplit(url)
        self.agent_role = agent_role(parts.path.strip("/"))
        self.agent_url = urlunsplit(
            parts._replace(netloc=f"{self.agent_role}@{parts.netloc.rpartition('@')[2]}")
        )

    def env(self, **extra: str) -> dict[str, str]:
        return {
            "PATH": os.environ.get("PATH", ""),
            "HOME": os.environ.get("HOME", "/tmp"),
            "PARITYBOT_DATABASE_URL": self.url,
            "PARITYBOT_GITHUB_API_URL": self.fake_url,
            "PARITYBOT_HEARTBEAT_S": str(HEARTBEAT_S),
            "PARITYBOT_STALLED_AFTER_S": str(STALLED_S),
            "PARITYBOT_LOG_FORMAT": "json",
            "PARITYBOT_LOG_LEVEL": "warning",
            "PARITYBOT_WORKSPACE_ROOT": str(self.tmp / "ws"),
            "PARITYBOT_CACHE_ROOT": str(self.tmp / "cache"),
            **extra,
        }

    def spawn(self, name: str, argv: list[str], env: dict[str, str]) -> None:
        log = (self.tmp / f"{name}.log").open("ab")
        self.procs[name] = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)

    def start_agent(self, name: str, labels: str) -> None:
        env = self.env(
            STUB_EVENTS=str(self.events),
            STUB_STEPS=str(self.steps),
            STUB_STEP_S=str(self.args.step),
            PARITYBOT_DATABASE_URL=self.agent_url,
        )
        self.spawn(name, [sys.executable, "tests/fleet_agent.py", "--labels", labels, "--name", name], env)

    def start_serve(self, name: str) -> None:
        port = free_port()
        self.ports[name] = port
        env = self.env(
            PARITYBOT_APP_ID=str(self.app_id),
            PARITYBOT_PRIVATE_KEY=self.key,
            PARITYBOT_WEBHOOK_SECRET=SECRET,
            PARITYBOT_HOST="127.0.0.1",
            PARITYBOT_PORT=str(port),
        )
        self.spawn(name, [sys.executable, "-m", "bot.cli.main", "serve"], env)

    def query(self, sql: str, *args: Any) -> list[tuple[Any, ...]]:
        with psycopg.connect(self.url) as conn:
            return list(conn.execute(sql.encode(), args).fetchall())

    async def wait(self, what: str, predicate: Any, timeout: float = 600) -> float:
        start = time.monotonic()
        while time.monotonic() - start < timeout:
            if predicate():
                return time.monotonic() - start
            await asyncio.sleep(0.1)
        raise SystemExit(f"timed out waiting for {what}")

    def read_events(self) -> list[dict[str, Any]]:
        if not self.events.exists():
            return []
        return [json.loads(line) for line in self.events.read_text().splitlines() if line.strip()]

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
            proc.wait()


def event_body(bench: Bench, action: str, pr: int, head: str) -> tuple[bytes, dict[str, str]]:
    """A signed `pull_request` delivery: GitHub's real payload, with this PR and head."""
    from payloads import delivery, pull_request_event

    payload = pull_request_event(
        action,
        number=pr,
        head_sha=head,
        base_ref="main",
        base_sha=BASE_SHA,
        repo_full_name=REPO,
        clone_url="file:///nonexistent.git",
        installation_id=1,
        api_url=bench.fake_url,
    )
    return delivery("pull_request", payload, SECRET)


async def post_event(bench: Bench, action: str, pr: int, head: str) -> None:
    body, headers = event_body(bench, action, pr, head)
    url = f"http://127.0.0.1:{next(iter(bench.ports.values()))}/webhook"
    async with aiohttp.ClientSession() as s, s.post(url, data=body, headers=headers) as r:
        assert r.status == 202


async def send_all(bench: Bench, session: aiohttp.ClientSession, prs: int, per_pr: int) -> dict[str, float]:
    """Every event once, 16 in flight, both replicas in turn; returns the send time of each head."""
    gate = asyncio.Semaphore(16)
    sent: dict[str, float] = {}
    failures = 0
    replicas = [f"http://127.0.0.1:{p}/webhook" for p in bench.ports.values()]
    order = [(pr, k) for k in range(per_pr) for pr in range(1, prs + 1)]

    async def one(i: int, pr: int, k: int) -> None:
        nonlocal failures
        body, headers = event_body(bench, "opened" if k == 0 else "synchronize", pr, sha(pr, k))
        async with gate:
            sent[sha(pr, k)] = time.time()
            try:
                async with session.post(replicas[i % 2], data=body, headers=headers) as r:
                    await r.read()
                    failures += r.status != 202
            except aiohttp.ClientError:
                failures += 1

    await asyncio.gather(*(one(i, pr, k) for i, (pr, k) in enumerate(order)))
    if failures:
        print(f"  {failures} deliveries were not answered 202")
    return sent


async def run(args: argparse.Namespace, url: str, tmp: Path) -> None:
    bench = Bench(args, url, tmp)
    kill_prs = [900 + i for i in range(args.kills)]
    parent, child = multiprocessing.Pipe()
    fake = multiprocessing.get_context("spawn").Process(
        target=fake_github_process, args=(child, args.prs, args.events_per_pr, kill_prs), daemon=True
    )
    fake.start()
    bench.fake_url, bench.app_id, bench.key = parent.recv()
    bench.fake_pid = fake.pid or 0
    try:
        await measure(bench, args, parent, kill_prs)
    finally:
        bench.stop()
        parent.send("stop")
        fake.join(10)


async def measure(bench: Bench, args: argparse.Namespace, fake: Any, kill_prs: list[int]) -> None:
    from bot.service.store.postgres_schema import migrate

    with psycopg.connect(bench.url, autocommit=True) as conn:
        migrate(conn, "benchmark")
        # Agents log in as operators set them up: a role of their own in paritybot_agent.
        conn.execute(f"CREATE ROLE {bench.agent_role} LOGIN IN ROLE paritybot_agent")
    for name, labels in AGENTS.items():
        bench.start_agent(name, labels)
    await bench.wait("4 agents", lambda: bench.query("SELECT count(*) FROM agents")[0][0] == len(AGENTS), 120)
    await asyncio.sleep(2)
    before = transactions(bench.url)
    await asyncio.sleep(args.idle)
    idle_agents = (transactions(bench.url) - before) / args.idle
    for name in ("serve-1", "serve-2"):
        bench.start_serve(name)

    async def healthy() -> bool:
        try:
            async with aiohttp.ClientSession() as s:
                for port in bench.ports.values():
                    async with s.get(f"http://127.0.0.1:{port}/healthz") as r:
                        if r.status != 200:
                            return False
            return True
        except aiohttp.ClientError:
            return False

    while not await healthy():
        await asyncio.sleep(0.2)
    await asyncio.sleep(2)
    before = transactions(bench.url)
    await asyncio.sleep(args.idle)
    idle_all = (transactions(bench.url) - before) / args.idle

    paced = await paced_latency(bench, args)
    supersedes = await supersede_times(bench, args)

    total = args.prs * args.events_per_pr
    cpu_before = cpu_by_role(bench)
    # A busy machine may take a while to answer: count what is not a 202, never give up on one.
    patient = aiohttp.ClientTimeout(total=None, sock_connect=300, sock_read=300)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=32), timeout=patient) as session:
        t0 = time.monotonic()
        sent = await send_all(bench, session, args.prs, args.events_per_pr)
        accept_s = time.monotonic() - t0

    def settled() -> bool:
        pending = bench.query(
            "SELECT (SELECT count(*) FROM deliveries WHERE status = 'received') + "
            "(SELECT count(*) FROM jobs WHERE state IN ('queued', 'running') OR reported_state IS DISTINCT FROM state)"
        )[0][0]
        return pending == 0

    settle_s = await bench.wait("the load to settle", settled)
    cpu = {role: (after - cpu_before[role]) / total * 1000 for role, after in cpu_by_role(bench).items()}
    events = bench.read_events()
    starts: dict[str, list[dict[str, Any]]] = {}
    for e in events:
        if e["event"] == "start":
            starts.setdefault(e["job"], []).append(e)
    latency = [
        (runs[0]["t"] - sent[runs[0]["sha"]]) * 1000 for runs in starts.values() if runs[0]["sha"] in sent
    ]
    duplicates = sum(len(runs) - 1 for runs in starts.values())
    overlaps = count_overlaps(events, bench)
    lost = count_lost(bench, args)
    fake.send("stats")
    stats = fake.recv()
    comments = list(stats["comments"].values())

    recoveries = await kill_agents(bench, kill_prs)

    print(
        f"load: {total} pull_request events over {args.prs} PRs and {len(ENVIRONMENTS)} environments, "
        f"2 serve replicas, {len(AGENTS)} agents, stub step {args.step} s, heartbeat {HEARTBEAT_S} s, "
        f"stalled after {STALLED_S} s"
    )
    print(f"  events/s accepted:            {total / accept_s:.0f} ({total} in {accept_s:.1f} s)")
    print(
        f"  all handled and reported in:  {accept_s + settle_s:.1f} s after the first POST "
        f"({stats['calls']} requests to the fake GitHub)"
    )
    print(f"  jobs started:                 {len(starts)} (the rest were superseded before they started)")
    print(
        f"  delivery → job start:         p50 {pct(latency, 0.5):.0f} ms, p99 {pct(latency, 0.99):.0f} ms, "
        f"max {max(latency, default=float('nan')):.0f} ms"
    )
    print(
        f"  delivery → job start, paced:  p50 {pct(paced, 0.5):.0f} ms, p99 {pct(paced, 0.99):.0f} ms "
        f"({len(paced)} PRs opened one every {args.pace_s} s, nothing else going on)"
    )
    print("  CPU per event:                " + ", ".join(f"{role} {ms:.0f} ms" for role, ms in cpu.items()))
    print(f"  jobs lost:                    {lost} (goal 0)")
    print(
        f"  duplicate runs:               {duplicates} started twice, {overlaps} overlapping runs of one "
        "PR and environment (goal 0)"
    )
    print(
        f"  summaries per PR:             min {min(comments)}, max {max(comments)} (goal 1); "
        f"check runs left open: {stats['open_check_runs']} (goal 0)"
    )
    if supersedes:
        stopped_ms = [a for a, _ in supersedes]
        restarted_ms = [b for _, b in supersedes]
        print(
            f"  supersede, push → old run stopped on its agent: p50 {pct(stopped_ms, 0.5):.0f} ms, "
            f"max {max(stopped_ms):.0f} ms; → new head's run started: p50 {pct(restarted_ms, 0.5):.0f} ms, "
            f"max {max(restarted_ms):.0f} ms ({len(supersedes)} pushes)"
        )
    if recoveries:
        print(
            f"  recovery after kill -9:       {', '.join(f'{r:.2f}' for r in recoveries)} s; "
            f"mean {statistics.mean(recoveries):.2f} s (goal ≤ {STALLED_S + 2:.0f} s)"
        )
    print(
        f"  PostgreSQL transactions/s:    {idle_agents:.1f} with {len(AGENTS)} idle agents; "
        f"{idle_all:.1f} with the 2 replicas idle too"
    )


def cpu_by_role(bench: Bench) -> dict[str, float]:
    roles = {
        "serve": 0.0,
        "agents": 0.0,
        "fake GitHub": cpu_seconds(bench.fake_pid),
        "PostgreSQL": postgres_cpu(bench.url),
    }
    for name, proc in bench.procs.items():
        roles["serve" if name.startswith("serve") else "agents"] += cpu_seconds(proc.pid)
    return roles


async def paced_latency(bench: Bench, args: argparse.Namespace) -> list[float]:
    """Delivery → job start when nothing waits before it: new PRs opened one at a time."""
    latencies = []
    for i in range(args.paced):
        pr = 500 + i
        head = sha(pr, 0)
        sent = time.time()
        await post_event(bench, "opened", pr, head)
        await bench.wait(
            "the paced runs",
            lambda h=head: (
                len({e["job"] for e in bench.read_events() if e["sha"] == h and e["event"] == "start"})
                == len(ENVIRONMENTS)
            ),
            120,
        )
        latencies += [
            (e["t"] - sent) * 1000 for e in bench.read_events() if e["sha"] == head and e["event"] == "start"
        ]
        await asyncio.sleep(args.pace_s)
    return latencies


async def supersede_times(bench: Bench, args: argparse.Namespace) -> list[tuple[float, float]]:
    """For each round: a PR whose cuda12 run goes on, then a push; the time from the push's POST to
    the old run stopped on its agent, and to the new head's cuda12 run started (ms)."""
    times = []
    for i in range(args.supersedes):
        pr = SUPERSEDE_PR + i
        old, new = sha(pr, 0), sha(pr, 1)
        bench.steps.write_text(json.dumps({f"{old}/cuda12": 600}))
        await post_event(bench, "opened", pr, old)

        def runs(event: str, head: str, p: int = pr) -> list[dict[str, Any]]:
            ids = env_jobs(bench, p, "cuda12")
            return [
                e for e in bench.read_events() if e["event"] == event and e["sha"] == head and e["job"] in ids
            ]

        await bench.wait("the long run to start", lambda h=old: bool(runs("start", h)), 120)
        pushed = time.time()
        await post_event(bench, "synchronize", pr, new)
        await bench.wait("the old run to stop", lambda h=old: bool(runs("stopped", h)), 120)
        await bench.wait("the new run to start", lambda h=new: bool(runs("start", h)), 120)
        times.append(
            ((runs("stopped", old)[0]["t"] - pushed) * 1000, (runs("start", new)[0]["t"] - pushed) * 1000)
        )
        await bench.wait(
            "the PR to settle",
            lambda p=pr: (
                bench.query(
                    "SELECT count(*) FROM jobs WHERE pr_number = %s AND state IN ('queued', 'running')", p
                )[0][0]
                == 0
            ),
            120,
        )
    bench.steps.write_text("{}")
    return times


def count_overlaps(events: list[dict[str, Any]], bench: Bench) -> int:
    """Two runs of one PR and environment whose start–end intervals overlap (the lock forbids it)."""
    env_of = {r[0]: (r[1], r[2]) for r in bench.query("SELECT id, pr_number, environment FROM jobs")}
    spans: dict[tuple[int, str], list[tuple[float, float]]] = {}
    open_at: dict[str, float] = {}
    for e in sorted(events, key=lambda e: e["t"]):
        if e["event"] == "start":
            open_at[e["job"]] = e["t"]
        elif e["job"] in open_at:
            spans.setdefault(env_of[e["job"]], []).append((open_at.pop(e["job"]), e["t"]))
    overlaps = 0
    for intervals in spans.values():
        intervals.sort()
        overlaps += sum(1 for a, b in itertools.pairwise(intervals) if b[0] < a[1])
    return overlaps


def count_lost(bench: Bench, args: argparse.Namespace) -> int:
    lost = bench.query("SELECT count(*) FROM deliveries WHERE status <> 'dispatched'")[0][0]
    lost += bench.query("SELECT count(*) FROM jobs WHERE state IN ('queued', 'running')")[0][0]
    for pr in range(1, args.prs + 1):
        head = sha(pr, args.events_per_pr - 1)
        done = bench.query(
            "SELECT count(DISTINCT environment) FROM jobs WHERE pr_number = %s AND head_sha = %s AND state = 'succeeded'",
            pr,
            head,
        )[0][0]
        lost += len(ENVIRONMENTS) - done
    return int(lost)


async def kill_agents(bench: Bench, kill_prs: list[int]) -> list[float]:
    """For each: a long run on cuda11.8, kill -9 its agent, time until another agent starts it."""
    recoveries: list[float] = []
    for pr in kill_prs:
        head = sha(pr, 0)
        bench.steps.write_text(json.dumps({f"{head}/cuda11": 600}))
        await post_event(bench, "opened", pr, head)

        def started(job_sha: str = head) -> list[dict[str, Any]]:
            return [e for e in bench.read_events() if e["event"] == "start" and e["sha"] == job_sha]

        def long_run(p: int = pr) -> dict[str, Any] | None:
            return next((e for e in started() if e["job"] in env_jobs(bench, p, "cuda11")), None)

        await bench.wait("the long run to start", lambda: long_run() is not None, 120)
        victim = long_run()
        assert victim is not None
        os.kill(victim["pid"], signal.SIGKILL)
        killed = time.time()
        await bench.wait(
            "the rerun",
            lambda v=victim, k=killed: any(e["job"] == v["job"] and e["t"] > k for e in started()),
            120,
        )
        rerun = next(e for e in started() if e["job"] == victim["job"] and e["t"] > killed)
        recoveries.append(rerun["t"] - killed)
        name = victim["agent"]
        bench.procs[name].wait()
        bench.start_agent(name, AGENTS[name])  # its supervisor would restart it
        await bench.wait(
            f"{name} back",
            lambda n=name: (
                bench.query(
                    "SELECT count(*) FROM agents WHERE name = %s AND stopped_at IS NULL AND last_heartbeat > now() - interval '2 seconds' "
                    "AND started_at > now() - interval '60 seconds'",
                    n,
                )[0][0]
                > 0
            ),
            120,
        )
        # The rerun, long too, is stopped by closing the PR.
        await post_event(bench, "closed", pr, head)
        await bench.wait(
            "the PR closed",
            lambda p=pr: (
                bench.query(
                    "SELECT count(*) FROM jobs WHERE pr_number = %s AND state IN ('queued', 'running')", p
                )[0][0]
                == 0
            ),
            120,
        )
    return recoveries


def env_jobs(bench: Bench, pr: int, environment: str) -> set[str]:
    return {
        r[0]
        for r in bench.query("SELECT id FROM jobs WHERE pr_number = %s AND environment = %s", pr, environment)
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--prs", type=int, default=100)
    parser.add_argument("--events-per-pr", type=int, default=10)
    parser.add_argument("--step", type=float, default=0.05, help="seconds the stub step takes")
    parser.add_argument("--kills", type=int, default=3, help="kill -9 rounds for the recovery figure")
    parser.add_argument("--idle", type=float, default=10, help="seconds each idle measurement lasts")
    parser.add_argument("--paced", type=int, default=20, help="PRs opened one at a time, before the load")
    parser.add_argument("--pace-s", type=float, default=1.0, help="seconds between the paced PRs")
    parser.add_argument(
        "--supersedes", type=int, default=5, help="pushes onto a running PR, for the supersede figure"
    )
    args = parser.parse_args()
    server = benchmark_server_url()
    if server is None:
        return 2
    name = f"bench_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    url = urlunsplit(urlsplit(server)._replace(path=f"/{name}"))
    try:
        with tempfile.TemporaryDirectory(prefix="paritybot-fleet-bench-") as tmp:
            asyncio.run(run(args, url, Path(tmp)))
    finally:
        with psycopg.connect(server, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            conn.execute(f"DROP ROLE IF EXISTS {agent_role(name)}")
    return 0


def agent_role(database: str) -> str:
    """The agents' login role of the run's database: a member of paritybot_agent, not the owner."""
    return f"agent_{database}"


if __name__ == "__main__":
    raise SystemExit(main())
