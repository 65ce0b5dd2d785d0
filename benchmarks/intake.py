"""Webhook intake throughput: paritybot's `POST /webhook` against a bare aiohttp handler.

Both servers run side by side in this one script run, on loopback, each in its own process, and
are loaded with `wrk` (Debian's package) using a Lua script that gives every request a unique
X-GitHub-Delivery and counts the 202 answers. The payload is GitHub's real `pull_request.opened`
example, signed.

The bare handler reads the body and answers 202 without checking anything. paritybot checks the
headers, the signature (gidgethub) and that the body is a JSON object, then commits the delivery
to its SQLite store (WAL, synchronous=FULL, one INSERT … ON CONFLICT DO NOTHING per delivery, in a
thread) before it answers 202. After each run the script counts the rows of that run in the
store: every 202 must have its row. The paritybot server also reports how late its event loop
woke up (a 10 ms timer) while it served: how long the loop was blocked.

    python benchmarks/intake.py [--duration 10] [--connections 16,64] [--group-commit]

--group-commit adds a third server, not shipped: the same checks, but the deliveries that arrive
while a commit is under way are committed together in the next one (one transaction, one fsync
per batch) — the alternative docs/intake.md weighs. The script also measures the store alone
(record_delivery in a loop, no HTTP) before and after the runs: what the disk allows just then.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import hashlib
import hmac
import json
import multiprocessing
import os
import re
import shutil
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from aiohttp import web

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "tests" / "fixtures" / "github" / "webhooks-examples.json.gz"
SECRET = "benchmark-secret"

LUA = r"""
local threads = {}
function setup(thread)
  thread:set("tid", #threads + 1)
  table.insert(threads, thread)
end
function init(args)
  counter = 0
  accepted = 0
  body = io.open(os.getenv("BENCH_BODY")):read("*a")
  signature = os.getenv("BENCH_SIG")
end
request = function()
  counter = counter + 1
  local headers = {}
  headers["Content-Type"] = "application/json"
  headers["X-GitHub-Event"] = "pull_request"
  headers["X-GitHub-Delivery"] = string.format("%s-%d-%d", os.getenv("BENCH_RUN"), tid, counter)
  headers["X-Hub-Signature-256"] = signature
  return wrk.format("POST", "/webhook", headers, body)
end
response = function(status, headers, body)
  if status == 202 then accepted = accepted + 1 end
end
function done(summary, latency, requests)
  local total = 0
  for _, thread in ipairs(threads) do total = total + thread:get("accepted") end
  io.write(string.format("ACCEPTED %d\n", total))
end
"""


def payload() -> bytes:
    with gzip.open(EXAMPLES) as f:
        events = json.load(f)
    pr = next(e for e in events if e["name"] == "pull_request")
    example = next(x for x in pr["examples"] if x.get("action") == "opened")
    return json.dumps(example, indent=2).encode()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def serve_bare(port: int) -> None:
    async def handler(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(status=202)

    app = web.Application(client_max_size=25 * 1024 * 1024)
    app.router.add_post("/webhook", handler)
    web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None)


class GroupCommit:
    """The experiment: deliveries that arrive while a commit is under way wait, and are committed
    together in the next one (one transaction, one fsync), each batch in a thread."""

    def __init__(self, path: Path):
        from bot.service.store.sqlite import SQLiteStore, connect

        SQLiteStore(path).close()  # the schema
        self._conn = connect(path)
        self._waiting: list[tuple[tuple[str, str, bytes], asyncio.Future[bool]]] = []
        self._committing: asyncio.Task[None] | None = None

    async def record(self, delivery_id: str, event: str, body: bytes) -> bool:
        fut: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._waiting.append(((delivery_id, event, body), fut))
        if self._committing is None:
            self._committing = asyncio.create_task(self._commit_all())
        return await fut

    async def _commit_all(self) -> None:
        try:
            while self._waiting:
                batch, self._waiting = self._waiting, []
                try:
                    new = await asyncio.to_thread(self._commit, [args for args, _ in batch])
                except Exception as exc:
                    for _, fut in batch:
                        if not fut.done():
                            fut.set_exception(exc)
                else:
                    for (_, fut), is_new in zip(batch, new, strict=True):
                        if not fut.done():
                            fut.set_result(is_new)
        finally:
            self._committing = None

    def _commit(self, batch: list[tuple[str, str, bytes]]) -> list[bool]:
        self._conn.execute("BEGIN IMMEDIATE")
        try:
            new = [
                self._conn.execute(
                    "INSERT INTO deliveries (delivery_id, event, body, received_at) VALUES (?, ?, ?, '') "
                    "ON CONFLICT(delivery_id) DO NOTHING",
                    args,
                ).rowcount
                == 1
                for args in batch
            ]
        except BaseException:
            self._conn.execute("ROLLBACK")
            raise
        self._conn.execute("COMMIT")
        return new


def group_commit_app(db: str) -> web.Application:
    """paritybot's checks, then the experiment's batched commit instead of the store's own."""
    from bot.service.intake import IntakeError, accept, check_transport

    grouped = GroupCommit(Path(db))

    async def webhook(request: web.Request) -> web.Response:
        try:
            check_transport(request.headers)
            delivery = accept(request.headers, await request.read(), SECRET)
        except IntakeError as exc:
            return web.json_response({"error": str(exc)}, status=exc.status)
        await grouped.record(delivery.delivery_id, delivery.event, delivery.body)
        return web.Response(status=202, text="accepted")

    app = web.Application(client_max_size=25 * 1024 * 1024)
    app.router.add_post("/webhook", webhook)
    return app


def serve_paritybot(port: int, db: str, lag_file: str, group_commit: bool) -> None:
    from bot.service.store.sqlite import SQLiteStore
    from bot.service.web import create_web_app

    app = group_commit_app(db) if group_commit else create_web_app(SECRET, SQLiteStore(Path(db)))
    watcher: list[asyncio.Task[None]] = []

    async def watch_loop(app: web.Application) -> None:
        async def measure() -> None:
            lags: list[float] = []
            try:
                while True:
                    started = time.perf_counter()
                    await asyncio.sleep(0.01)
                    lags.append(time.perf_counter() - started - 0.01)
                    if len(lags) % 100 == 0:
                        Path(lag_file).write_text(json.dumps(lags))
            except asyncio.CancelledError:
                Path(lag_file).write_text(json.dumps(lags))

        watcher.append(asyncio.create_task(measure()))

    app.on_startup.append(watch_loop)
    web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None)


def committed(db: Path, run: str) -> int:
    conn = sqlite3.connect(db)
    try:
        return int(
            conn.execute(
                "SELECT count(*) FROM deliveries WHERE delivery_id LIKE ?", (f"{run}-%",)
            ).fetchone()[0]
        )
    finally:
        conn.close()


def store_alone(db: Path, body: bytes, seconds: float = 3.0) -> str:
    """The disk's share: record_delivery called in a loop, no HTTP. It bounds the intake's rate."""
    from bot.service.store.sqlite import SQLiteStore

    store = SQLiteStore(db)
    times: list[float] = []
    deadline = time.perf_counter() + seconds
    try:
        while (started := time.perf_counter()) < deadline:
            store.record_delivery(f"alone-{len(times)}", "pull_request", body)
            times.append(time.perf_counter() - started)
    finally:
        store.close()
        for path in db.parent.glob(db.name + "*"):
            path.unlink()
    times.sort()
    return f"{len(times) / seconds:,.0f} commits/s, p99 {times[int(len(times) * 0.99)] * 1000:.2f} ms"


def wait_ready(port: int) -> None:
    for _ in range(100):
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"server on port {port} did not start")


def run_wrk(
    port: int, connections: int, duration: int, env: dict[str, str], script: Path
) -> dict[str, float]:
    out = subprocess.run(
        [
            "wrk",
            "-t2",
            f"-c{connections}",
            f"-d{duration}s",
            "--latency",
            "-s",
            str(script),
            f"http://127.0.0.1:{port}/webhook",
        ],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        check=True,
    ).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    total = int(re.search(r"(\d+) requests in", out).group(1))  # type: ignore[union-attr]
    accepted = int(re.search(r"ACCEPTED (\d+)", out).group(1))  # type: ignore[union-attr]
    lat = {m.group(1): m.group(2) for m in re.finditer(r"^\s+(50|99)%\s+(\S+)", out, re.M)}
    return {
        "rps": rps,
        "requests": total,
        "accepted": accepted,
        "p50": _ms(lat.get("50", "nan")),
        "p99": _ms(lat.get("99", "nan")),
    }


def _ms(text: str) -> float:
    m = re.match(r"([\d.]+)(us|ms|s)", text)
    if not m:
        return float("nan")
    value, unit = float(m.group(1)), m.group(2)
    return value / 1000 if unit == "us" else value * 1000 if unit == "s" else value


def loop_lag(lag_file: Path) -> str:
    lags = sorted(json.loads(lag_file.read_text())) if lag_file.exists() else []
    if not lags:
        return "no samples"
    p99 = lags[int(len(lags) * 0.99)]
    return f"p99 {p99 * 1000:.1f} ms, max {lags[-1] * 1000:.1f} ms over {len(lags):,} wake-ups"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=int, default=10)
    parser.add_argument("--connections", default="16,64")
    parser.add_argument("--group-commit", action="store_true", help="add the batched variant")
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        print("wrk is not installed: apt-get install wrk", file=sys.stderr)
        return 2
    sys.path.insert(0, str(ROOT))
    # The store on the same file system as the checkout (a real disk, like the service's volume).
    tmp = Path(tempfile.mkdtemp(prefix=".intake-bench-", dir=ROOT))
    try:
        return measure(tmp, args.duration, [int(c) for c in args.connections.split(",")], args.group_commit)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def measure(tmp: Path, duration: int, connections: list[int], group_commit: bool) -> int:
    from bot.service.store.sqlite import connect

    body = payload()
    (tmp / "body.json").write_bytes(body)
    (tmp / "bench.lua").write_text(LUA)
    sig = "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
    servers: dict[str, tuple[object, tuple[object, ...]]] = {"bare": (serve_bare, ())}
    servers["paritybot"] = (serve_paritybot, (str(tmp / "p.db"), str(tmp / "p.lag"), False))
    if group_commit:
        servers["group commit"] = (serve_paritybot, (str(tmp / "g.db"), str(tmp / "g.lag"), True))
    ports = {name: free_port() for name in servers}
    procs = [
        multiprocessing.Process(target=target, args=(ports[name], *extra), daemon=True)  # type: ignore[arg-type]
        for name, (target, extra) in servers.items()
    ]
    for p in procs:
        p.start()
    failed = False
    try:
        for port in ports.values():
            wait_ready(port)
        print(f"payload: real pull_request.opened example, {len(body):,} bytes, signed")
        disk_before = store_alone(tmp / "alone.db", body)
        print("| connections | server | req/s | p50 ms | p99 ms | 202s | rows committed | ratio |")
        print("|---|---|---|---|---|---|---|---|")
        for conns in connections:
            results = {}
            for name in servers:
                run = f"{name.replace(' ', '')}{conns}"
                env = {"BENCH_BODY": str(tmp / "body.json"), "BENCH_SIG": sig, "BENCH_RUN": run}
                results[name] = run_wrk(ports[name], conns, duration, env, tmp / "bench.lua")
                db = tmp / ("g.db" if name == "group commit" else "p.db")
                results[name]["rows"] = committed(db, run) if name != "bare" else float("nan")
            for name, r in results.items():
                ratio = r["rps"] / results["bare"]["rps"]
                rows = "—" if name == "bare" else f"{int(r['rows']):,}"
                print(
                    f"| {conns} | {name} | {r['rps']:,.0f} | {r['p50']:.2f} | {r['p99']:.2f} | "
                    f"{int(r['accepted']):,} | {rows} | {ratio:.2f}× |"
                )
                # wrk cuts connections at the end of a run: a committed delivery may miss its 202,
                # never the other way round.
                if name != "bare" and r["rows"] < r["accepted"]:
                    print(f"ERROR: {name}: fewer committed deliveries than 202 answers", file=sys.stderr)
                    failed = True
    finally:
        for p in procs:
            p.terminate()
            p.join(5)
    print(f"\nthe store alone (record_delivery in a loop, no HTTP), before: {disk_before}")
    print(f"the store alone, after: {store_alone(tmp / 'alone.db', body)}")
    print(f"paritybot's event loop, late by: {loop_lag(tmp / 'p.lag')}")
    if group_commit:
        print(f"group commit's event loop, late by: {loop_lag(tmp / 'g.lag')}")
    conn = connect(tmp / "p.db")  # the settings the service's connection runs with
    pragmas = {
        p: conn.execute(f"PRAGMA {p}").fetchone()[0] for p in ("journal_mode", "synchronous", "page_size")
    }
    conn.close()
    print(f"store: {pragmas} (synchronous 2 = FULL: each commit is fsync'ed before it returns)")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
