"""Fuzzed deliveries against `paritybot serve`, as an operator runs it: 10,000 signed bodies and
1,000 mis-signed ones, built by hypothesis from GitHub's real webhook examples and the vendored
webhook schema (tests/delivery_fuzz.py), posted one after another over one keep-alive connection.

The service is a real `paritybot serve` process (host runner, SQLite store, JSON logs) talking to
the fake GitHub of the test suite, which runs in this process and checks every request against
GitHub's REST description. A thread polls `/healthz` throughout. Before the fuzz, one real pull
request runs end to end (the warm-up, and the reference for time and memory); after it, once
every delivery is handled or failed, another real pull request must run end to end too.

Printed: answers by status, deliveries by outcome and the failed ones by reason, the service's
memory (RSS) at the start, at its peak and afterwards, time per body, `/healthz` answers other
than 200, "loop stopped" lines in the service's log and requests GitHub would refuse. Exit 1 if
any 5xx, loop death, unhealthy answer, refused request or unfinished delivery was seen, or the
last pull request did not run.

    python benchmarks/delivery_fuzz.py [--signed 10000] [--mis-signed 1000] [--rounds 2]

The bodies are sent in rounds (half each, by default) with the service's RSS taken after each:
memory that grows from round to round is a leak; a first round's growth that the next does not
repeat is the allocator and SQLite's page cache settling.
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import os
import re
import shutil
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

import payloads  # noqa: E402
from delivery_fuzz import FuzzDelivery, Target, mis_signed_deliveries, signed_deliveries  # noqa: E402
from fakegithub import FakeGitHub  # noqa: E402
from hypothesis import HealthCheck, Phase, given, settings  # noqa: E402
from sample_repo import make_sample_repo  # noqa: E402

SECRET = "fuzz-benchmark-secret"
REPO = "octo-org/calc"
T = TypeVar("T")


class Background:
    """An event loop in a thread, for the fake GitHub."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 60) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def call(self, fn: Callable[[], T]) -> T:
        async def wrapped() -> T:
            return fn()

        return self.run(wrapped())

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def memory_kib(pid: int) -> dict[str, int]:
    """VmRSS (now) and VmHWM (the peak so far) of a process, in KiB."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            fields[key] = int(value.split()[0])
    return fields


class Service:
    """`paritybot serve` in a process of its own, on loopback, logging JSON lines to a file."""

    def __init__(self, tmp: Path, fake: FakeGitHub):
        self.port = free_port()
        self.db = tmp / "bot.db"
        self.log = tmp / "serve.log"
        env = {
            **os.environ,
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
            "PARITYBOT_APP_ID": str(fake.app_id),
            "PARITYBOT_PRIVATE_KEY": fake.private_key_pem,
            "PARITYBOT_WEBHOOK_SECRET": SECRET,
            "PARITYBOT_GITHUB_API_URL": fake.url,
            "PARITYBOT_DATABASE_URL": f"sqlite:///{self.db}",
            "PARITYBOT_WORKSPACE_ROOT": str(tmp / "workspaces"),
            "PARITYBOT_CACHE_ROOT": str(tmp / "cache"),
            "PARITYBOT_RUNNER": "host",
            "PARITYBOT_ALLOW_HOST_RUNNER": "trusted-code-only",
            "PARITYBOT_HOST": "127.0.0.1",
            "PARITYBOT_PORT": str(self.port),
        }
        self._log_file = self.log.open("wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "bot.cli.main", "serve"],
            cwd=ROOT,
            env=env,
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
        )
        self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)

    def wait_healthy(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"serve exited with {self.proc.returncode}; see {self.log}")
            try:
                if self.health() == 200:
                    return
            except OSError:
                pass
            time.sleep(0.2)
        raise RuntimeError("serve did not become healthy")

    def health(self) -> int:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        try:
            conn.request("GET", "/healthz")
            return conn.getresponse().status
        finally:
            conn.close()

    def post(self, body: bytes, headers: dict[str, str]) -> int:
        for attempt in range(2):
            try:
                self.conn.request("POST", "/webhook", body=body, headers=headers)
                response = self.conn.getresponse()
                response.read()
                return response.status
            except (http.client.HTTPException, OSError):
                self.conn.close()  # the server closed the keep-alive connection: open another
                if attempt:
                    raise
        raise AssertionError("unreachable")

    def deliveries(self) -> list[sqlite3.Row]:
        db = sqlite3.connect(f"file:{self.db}?mode=ro", uri=True, timeout=30)
        db.row_factory = sqlite3.Row
        try:
            return db.execute("SELECT delivery_id, status, attempts, error FROM deliveries").fetchall()
        finally:
            db.close()

    def loop_deaths(self) -> list[str]:
        lines = self.log.read_text(errors="replace").splitlines()
        return [line[:300] for line in lines if "loop stopped" in line]

    def stop(self) -> None:
        self.conn.close()
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self._log_file.close()


class HealthWatch(threading.Thread):
    """Polls /healthz every 0.2 s; keeps every answer that is not 200."""

    def __init__(self, service: Service):
        super().__init__(daemon=True)
        self.service, self.polls, self.bad = service, 0, Counter[str]()
        self._stop_event = threading.Event()

    def run(self) -> None:
        while not self._stop_event.wait(0.2):
            self.polls += 1
            try:
                status = self.service.health()
            except OSError as exc:
                self.bad[type(exc).__name__] += 1
                continue
            if status != 200:
                self.bad[f"HTTP {status}"] += 1

    def stop(self) -> None:
        self._stop_event.set()
        self.join()


def run_real_pull(
    bg: Background, fake: FakeGitHub, service: Service, target: Target, number: int, head: str, base: str
) -> float:
    """A real pull request opened; seconds until its check runs are completed and it has a summary."""
    bg.call(
        lambda: fake.add_pull(
            REPO,
            number,
            head_sha=head,
            base_ref="main",
            base_sha=base,
            author="octocat",
            author_association="OWNER",
        )
    )
    event = payloads.pull_request_event(
        "opened",
        number=number,
        head_sha=head,
        base_ref="main",
        base_sha=base,
        repo_full_name=REPO,
        clone_url=target.clone_url,
        installation_id=1,
        api_url=fake.url,
    )
    body, headers = payloads.delivery("pull_request", event, SECRET)
    earlier = bg.call(lambda: {r.id for r in fake.check_runs(REPO, head_sha=head)})
    started = time.monotonic()
    status = service.post(body, headers)
    if status != 202:
        raise RuntimeError(f"the real pull request got {status}")

    def done() -> bool:
        runs = [r for r in fake.check_runs(REPO, head_sha=head) if r.id not in earlier]
        summary = any(c.user == fake.bot_login for c in fake.comments(REPO, number))
        return summary and len(runs) == 4 and all(r.states[-1]["status"] == "completed" for r in runs)

    deadline = started + 300
    while time.monotonic() < deadline:
        if bg.call(done):
            return time.monotonic() - started
        time.sleep(0.2)
    raise RuntimeError(f"pull request #{number} did not run end to end within 300 s")


def wait_all_finished(service: Service, timeout: float = 300) -> list[sqlite3.Row]:
    """Until no delivery is left `received` (retries come after 5 s and 20 s)."""
    deadline = time.monotonic() + timeout
    while True:
        rows = service.deliveries()
        if not any(r["status"] == "received" for r in rows) or time.monotonic() > deadline:
            return rows
        time.sleep(1)


def reason(error: str) -> str:
    """A failed delivery's reason, grouped: the field for a malformed payload, else the error's type."""
    if error.startswith("malformed payload: "):
        where = error.removeprefix("malformed payload: ").split(": ", 1)[0]
        return "malformed payload: " + re.sub(r"\.\d+", ".N", where)
    return " ".join(error.split())[:80]


def fuzz(service: Service, target: Target, count: int, strategy: Any, statuses: Counter[int]) -> float:
    @settings(
        max_examples=count,
        deadline=None,
        database=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(strategy)
    def send(delivery: FuzzDelivery) -> None:
        statuses[service.post(delivery.body, delivery.headers)] += 1

    started = time.monotonic()
    send()
    return time.monotonic() - started


def mib(kib: int) -> str:
    return f"{kib / 1024:.1f} MiB"


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--signed", type=int, default=10_000)
    parser.add_argument("--mis-signed", type=int, default=1_000)
    parser.add_argument("--rounds", type=int, default=2, help="split the bodies into rounds; RSS after each")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="delivery-fuzz-"))
    bg = Background()
    fake = FakeGitHub()
    bg.run(fake.start())
    try:
        return measure(tmp, bg, fake, args.signed, args.mis_signed, args.rounds)
    finally:
        bg.run(fake.close())
        bg.close()
        shutil.rmtree(tmp, ignore_errors=True)


def measure(tmp: Path, bg: Background, fake: FakeGitHub, signed: int, mis_signed: int, rounds: int) -> int:
    sample = make_sample_repo(tmp / "sample")
    bare = tmp / "remote.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(sample.path), str(bare)], check=True)
    bg.call(lambda: fake.add_repo(REPO, installation_id=1, clone_url=bare.as_uri()))
    target = Target(REPO, bare.as_uri(), 1, fake.url, SECRET)
    service = Service(tmp, fake)
    watch = HealthWatch(service)
    try:
        service.wait_healthy()
        started_kib = memory_kib(service.proc.pid)
        warm_s = run_real_pull(bg, fake, service, target, 7, sample.head_sha, sample.base_sha)
        warm_kib = memory_kib(service.proc.pid)
        watch.start()
        rss = {"at start": started_kib["VmRSS"], "after the warm-up pull request": warm_kib["VmRSS"]}
        signed_statuses: Counter[int] = Counter()
        mis_statuses: Counter[int] = Counter()
        signed_s = mis_s = 0.0
        for n in range(1, rounds + 1):
            signed_s += fuzz(service, target, signed // rounds, signed_deliveries(target), signed_statuses)
            mis_s += fuzz(service, target, mis_signed // rounds, mis_signed_deliveries(target), mis_statuses)
            rss[f"after round {n}"] = memory_kib(service.proc.pid)["VmRSS"]
        statuses = signed_statuses + mis_statuses
        drain_started = time.monotonic()
        rows = wait_all_finished(service)
        drain_s = time.monotonic() - drain_started
        rss["drained"] = memory_kib(service.proc.pid)["VmRSS"]
        after_s = run_real_pull(bg, fake, service, target, 8, sample.head_sha, sample.base_sha)
        time.sleep(2)
        after_kib = memory_kib(service.proc.pid)
        rss["after the last pull request"] = after_kib["VmRSS"]
        rss["peak"] = after_kib["VmHWM"]
        watch.stop()
        deaths = service.loop_deaths()
        violations = bg.call(lambda: list(fake.violations))
    finally:
        if watch.is_alive():
            watch.stop()
        service.stop()

    outcomes = Counter(r["status"] for r in rows)
    failed = Counter((reason(r["error"] or ""), r["attempts"]) for r in rows if r["status"] == "failed")
    malformed_retried = sum(
        1
        for r in rows
        if r["status"] == "failed" and (r["error"] or "").startswith("malformed") and r["attempts"] != 1
    )
    print(
        f"bodies: {signed:,} signed, {mis_signed:,} mis-signed, from GitHub's {len(payloads.examples())} example events"
    )
    print(
        f"signed:     {dict(sorted(signed_statuses.items()))} in {signed_s:.0f} s ({1000 * signed_s / signed:.1f} ms per body, generation included)"
    )
    print(f"mis-signed: {dict(sorted(mis_statuses.items()))} in {mis_s:.0f} s")
    print(f"5xx answers: {sum(n for s, n in statuses.items() if s >= 500)}")
    print(
        f"deliveries recorded: {len(rows):,} → {dict(outcomes)} (the rest drained in {drain_s:.0f} s after the last post)"
    )
    print(f"failed malformed deliveries retried: {malformed_retried}")
    print("failed deliveries by reason (and attempts):")
    for (why, attempts), n in failed.most_common(40):
        print(f"  {n:6,}  {why}  ({attempts} attempt{'s' if attempts > 1 else ''})")
    if len(failed) > 40:
        print(f"  {sum(n for _, n in failed.most_common()[40:]):6,}  (other reasons)")
    print(f"/healthz: {watch.polls:,} polls, not 200: {dict(watch.bad) or 0}")
    print(f"'loop stopped' lines in the service's log: {len(deaths)}")
    for line in deaths[:5]:
        print(f"  {line}")
    print(f"requests GitHub would refuse: {len(violations)}")
    for v in violations[:5]:
        print(f"  {v}")
    print("service RSS: " + ", ".join(f"{when} {mib(kib)}" for when, kib in rss.items()))
    print(f"RSS after / after the warm-up: {after_kib['VmRSS'] / warm_kib['VmRSS']:.2f}×")
    print(f"a real pull request end to end: {warm_s:.1f} s before the fuzz, {after_s:.1f} s after it")
    broken = (
        any(s >= 500 for s in statuses)
        or deaths
        or watch.bad
        or violations
        or outcomes.get("received")
        or malformed_retried
        or any(s != 401 for s in mis_statuses)
    )
    return 1 if broken else 0


if __name__ == "__main__":
    raise SystemExit(main())
