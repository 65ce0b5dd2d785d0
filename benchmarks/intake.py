"""Webhook intake throughput: paritybot's `POST /webhook` against a bare aiohttp handler.

Both servers run side by side in this one script run, on loopback, each in its own process, and
are loaded with `wrk` (Debian's package) using a Lua script that gives every request a unique
X-GitHub-Delivery. The payload is GitHub's real `pull_request.opened` example, signed.

The bare handler reads the body and answers 202 without checking anything. paritybot verifies the
signature, checks the body is a JSON object and appends the delivery to its log, fdatasync'ed
(group commit), before it answers 202. After the run we count the logged deliveries: every 202
must be a durable delivery.

    python benchmarks/intake.py [--duration 10] [--connections 16,64]
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import hmac
import json
import multiprocessing
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "tests" / "fixtures" / "github" / "webhooks-examples.json.gz"
SECRET = b"benchmark-secret"

LUA = r"""
local counter = 0
local thread_id = 0
local threads = {}
function setup(thread)
  thread:set("tid", #threads + 1)
  table.insert(threads, thread)
end
function init(args)
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
    from aiohttp import web

    async def handler(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(status=202)

    app = web.Application(client_max_size=25 * 1024 * 1024)
    app.router.add_post("/webhook", handler)
    web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None)


def serve_paritybot(port: int, db: str) -> None:
    from aiohttp import web

    from bot.delivery_log import DeliveryLog
    from bot.web import create_web_app

    delivery_log = DeliveryLog(Path(db), SECRET)

    async def make() -> web.Application:
        await delivery_log.start()
        app = create_web_app(SECRET, delivery_log)

        async def stop(_: web.Application) -> None:
            await delivery_log.stop()

        app.on_cleanup.append(stop)
        return app

    web.run_app(make(), host="127.0.0.1", port=port, print=None, access_log=None)


def count_logged(directory: Path) -> int:
    """Deliveries durably in the log, read the way the store ingests them."""
    from bot.delivery_log import decode_from, segments

    count = 0
    for _, path in segments(directory):
        buf, pos = path.read_bytes(), 0
        while (decoded := decode_from(buf, pos)) is not None:
            count, pos = count + 1, decoded[1]
    return count


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
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    lat = {m.group(1): m.group(2) for m in re.finditer(r"^\s+(50|99)%\s+(\S+)", out, re.M)}
    return {
        "rps": rps,
        "requests": total,
        "errors": int(non2xx.group(1)) if non2xx else 0,
        "p50": _ms(lat.get("50", "nan")),
        "p99": _ms(lat.get("99", "nan")),
    }


def _ms(text: str) -> float:
    m = re.match(r"([\d.]+)(us|ms|s)", text)
    if not m:
        return float("nan")
    value, unit = float(m.group(1)), m.group(2)
    return value / 1000 if unit == "us" else value * 1000 if unit == "s" else value


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=int, default=10)
    parser.add_argument("--connections", default="16,64")
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        print("wrk is not installed: apt-get install wrk", file=sys.stderr)
        return 2
    sys.path.insert(0, str(ROOT))
    tmp = Path(tempfile.mkdtemp(prefix="intake-bench-"))
    body = payload()
    (tmp / "body.json").write_bytes(body)
    (tmp / "bench.lua").write_text(LUA)
    sig = "sha256=" + hmac.new(SECRET, body, hashlib.sha256).hexdigest()
    db = tmp / "deliveries"
    ports = {"bare": free_port(), "paritybot": free_port()}
    procs = [
        multiprocessing.Process(target=serve_bare, args=(ports["bare"],), daemon=True),
        multiprocessing.Process(target=serve_paritybot, args=(ports["paritybot"], str(db)), daemon=True),
    ]
    for p in procs:
        p.start()
    try:
        for port in ports.values():
            wait_ready(port)
        print(f"payload: real pull_request.opened example, {len(body):,} bytes, signed")
        print("| connections | server | req/s | p50 ms | p99 ms | non-2xx | ratio |")
        print("|---|---|---|---|---|---|---|")
        accepted = 0
        for conns in [int(c) for c in args.connections.split(",")]:
            results = {}
            for name in ("bare", "paritybot"):
                env = {"BENCH_BODY": str(tmp / "body.json"), "BENCH_SIG": sig, "BENCH_RUN": f"{name}{conns}"}
                results[name] = run_wrk(ports[name], conns, args.duration, env, tmp / "bench.lua")
            accepted += int(results["paritybot"]["requests"] - results["paritybot"]["errors"])
            ratio = results["paritybot"]["rps"] / results["bare"]["rps"]
            for name, r in results.items():
                shown = f"{ratio:.2f}×" if name == "paritybot" else "1.00×"
                print(
                    f"| {conns} | {name} | {r['rps']:,.0f} | {r['p50']:.2f} | {r['p99']:.2f} | "
                    f"{r['errors']} | {shown} |"
                )
        time.sleep(0.5)
        rows = count_logged(db)
        # wrk cuts connections at the end of a run, so a few answered requests may go uncounted by it.
        print(f"\ndeliveries committed: {rows:,}; 202s counted by wrk: {accepted:,}")
        if rows < accepted:
            print("ERROR: fewer committed deliveries than 202 answers", file=sys.stderr)
            return 1
    finally:
        for p in procs:
            p.terminate()
            p.join(5)
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
