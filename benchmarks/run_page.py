"""The run page: how soon a printed line is visible on an open page, and how heavy a long log's first view is.

1. **Delay from printed to visible**, in both modes. A real step (the container runner, or the
   host runner without an engine) prints ``tick N <time>`` lines, each stamped with the clock when
   it was printed, every ``--interval`` s; the step's output goes through the run's log recorder
   into the store, as in `serve`. A real headless Chromium has the run's page open (`serve`'s
   routes, on loopback), and a MutationObserver stamps each line when it is added to the page.
   SQLite: the recorder and the page share one process and the store wakes the page. PostgreSQL:
   the recorder writes through a store of its own, as an agent does, and the page is woken by
   LISTEN/NOTIFY only. Goal: p95 <= 1 s. The baseline, in the same run: the delay from printed to
   stored (the store polled every 10 ms), i.e. what the page adds to what storing costs.

2. **First view of a 100,000-line log**: a finished run whose tests step failed after printing
   100,000 lines (pytest-like, some coloured, the errors at the end: the page finds and marks the
   first). The browser loads the page; the Navigation and Resource Timing
   entries give the bytes transferred (the page, its script and style; compressed as sent) and
   the time to interactive (DOMContentLoaded's end: the deferred script has run). Goal: <= 300 KB
   and <= 1 s. Baseline: the same page for a 1-line log, and the log's own size as plain text.

    python benchmarks/run_page.py [--lines 40] [--interval 0.15] [--views 5] [--no-postgres]

PostgreSQL: the tests' server (tests/postgres_support.py: PARITYBOT_TEST_DATABASE_URL or
scripts/postgres.sh). Chromium: Debian's chromium and chromium-driver.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import sys
import tempfile
import time
from pathlib import Path

from aiohttp import web

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from browser_support import start_chromium
from run_page_support import free_port, request

from bot.core.config import Environment
from bot.core.models import RunState
from bot.core.run_log import LogKind, NewLogEvent, StepEnd
from bot.service.run_log import RunLogRecorder
from bot.service.run_page.live import LogWake, listen_for_logs
from bot.service.run_page.routes import add_run_page
from bot.service.store.protocol import Store
from bot.service.store.sqlite import SQLiteStore
from runner.backends.base import Runner, Step
from runner.backends.host import HostRunner
from runner.step_log import LiveOutput, LoggedRunner

OBSERVE = """
window.seen = {};
new MutationObserver((records) => {
  for (const r of records) for (const n of r.addedNodes) {
    if (!n.classList || !n.classList.contains('line')) continue;
    const t = n.querySelector('.t');
    if (t && t.textContent.startsWith('tick ')) window.seen[t.textContent] = performance.timeOrigin + performance.now();
  }
}).observe(document.getElementById('logs'), {childList: true, subtree: true});
"""


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


async def serve_pages(store: Store, wake: LogWake) -> tuple[web.AppRunner, str]:
    app = web.Application()
    add_run_page(app, store, wake=wake)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    return runner, f"http://127.0.0.1:{port}"


def make_runner(output: LiveOutput) -> tuple[Runner, str]:
    """The container runner when an engine answers, else the host runner."""
    try:
        import docker

        from runner.backends.docker import DockerRunner

        client = docker.from_env()
        client.ping()
        image = "paritybot-test/python:bookworm"
        client.images.get(image)
        env = Environment(name="bench", image=image, gpus="none")
        return DockerRunner(
            env, f"bench-{time.monotonic_ns()}", client, on_output=output, owns_client=True
        ), "container"
    except Exception:
        return HostRunner(on_output=output), "host"


async def delays(
    page_store: Store, writer: Store, wake: LogWake, browser, lines: int, interval: float
) -> dict[str, list[float]]:  # type: ignore[no-untyped-def]
    job = page_store.enqueue(request(), "default", f"bench-{time.monotonic_ns()}")
    assert job is not None
    server, base = await serve_pages(page_store, wake)
    recorder = RunLogRecorder(writer, job.id, 1)
    live = LiveOutput(recorder)
    inner, kind = make_runner(live)
    runner = LoggedRunner(inner, recorder, live)
    stored: dict[str, float] = {}

    async def watch_store() -> None:
        after = 0
        while True:
            for event in await asyncio.to_thread(page_store.log_events, job.id, after):
                after = event.seq
                for line in event.text.splitlines():
                    if line.startswith("tick "):
                        stored.setdefault(line, time.time())
            await asyncio.sleep(0.01)

    try:
        await asyncio.to_thread(browser.get, f"{base}/runs/{job.id}")
        await asyncio.to_thread(browser.execute_script, OBSERVE)
        script = f'for i in $(seq 1 {lines}); do echo "tick $i $(date +%s.%N)"; sleep {interval}; done'
        watcher = asyncio.create_task(watch_store())
        with tempfile.TemporaryDirectory() as ws:
            async with recorder.flushing():
                await runner.run(Step(name="ticks", argv=["sh", "-c", script]), Path(ws))
        await asyncio.sleep(1.0)
        watcher.cancel()
        seen: dict[str, float] = await asyncio.to_thread(browser.execute_script, "return window.seen")
    finally:
        await runner.close()
        await server.cleanup()
    printed = {line: float(line.split()[2]) for line in seen}
    return {
        "page": [seen[line] / 1000 - printed[line] for line in seen],
        "store": [stored[line] - printed[line] for line in seen if line in stored],
        "kind": [0.0 if kind == "container" else 1.0],
        "missing": [float(lines - len(seen))],
    }


def report_delays(mode: str, result: dict[str, list[float]], lines: int) -> None:
    page, store = result["page"], result["store"]
    where = "container" if result["kind"][0] == 0.0 else "host runner"
    print(f"\n[{mode}] {lines} lines printed in a {where} step; {len(page)} seen on the open page")
    for name, values in (("printed → on the page", page), ("printed → in the store (baseline)", store)):
        if values:
            print(
                f"  {name:36s} p50 {statistics.median(values) * 1000:7.0f} ms   "
                f"p95 {percentile(values, 95) * 1000:7.0f} ms   max {max(values) * 1000:7.0f} ms"
            )
    if page and store:
        print(
            f"  the page adds p50 {(statistics.median(page) - statistics.median(store)) * 1000:.0f} ms to storing"
        )
    print(f"  goal p95 <= 1000 ms: {'met' if page and percentile(page, 95) <= 1.0 else 'NOT met'}")


def long_log(lines: int) -> str:
    parts = []
    for i in range(1, lines + 1):
        if i % 50 == 0:
            parts.append(
                f"\x1b[32mPASSED\x1b[0m tests/test_module_{i // 1000}.py::test_case_{i} [{i * 100 // lines:3d}%]\n"
            )
        else:
            parts.append(
                f"tests/test_module_{i // 1000}.py::test_case_{i} PASSED                      [{i * 100 // lines:3d}%]\n"
            )
    return "".join(parts)


TIMING = """
const nav = performance.getEntriesByType('navigation')[0];
const res = performance.getEntriesByType('resource');
return {transfer: nav.transferSize + res.reduce((a, r) => a + r.transferSize, 0),
        page: nav.transferSize, decoded: nav.decodedBodySize,
        interactive: nav.domContentLoadedEventEnd, lines: document.querySelectorAll('.line').length};
"""


async def first_view(store: SQLiteStore, browser, views: int) -> None:  # type: ignore[no-untyped-def]
    results = {}
    text = long_log(99_990) + "".join(f"E   assert {i} == {i + 1}\n" for i in range(10))
    for name, log in (("100,000 lines", text), ("1 line (baseline)", "tests/test_a.py::test_a PASSED\n")):
        job = store.enqueue(request(), "default", f"view-{name}")
        assert job is not None
        store.append_log(job.id, 1, [NewLogEvent(step=0, kind=LogKind.STEP, text="tests")])
        for start in range(0, len(log), 1_000_000):
            store.append_log(
                job.id, 1, [NewLogEvent(step=0, kind=LogKind.OUT, text=log[start : start + 1_000_000])]
            )
        store.append_log(
            job.id,
            1,
            [
                NewLogEvent(
                    step=0, kind=LogKind.END, text=StepEnd(state="failed", exit_code=1, duration_s=60).text()
                )
            ],
        )
        store.finish(job.id, RunState.SUCCEEDED, None, None)
        server, base = await serve_pages(store, LogWake())
        samples = []
        try:
            for _ in range(views):
                await asyncio.to_thread(browser.execute_cdp_cmd, "Network.clearBrowserCache", {})
                await asyncio.to_thread(browser.get, f"{base}/runs/{job.id}")
                samples.append(await asyncio.to_thread(browser.execute_script, TIMING))
        finally:
            await server.cleanup()
        results[name] = samples
    print(
        f"\n[first view] the log: {len(text.encode()):,} bytes as plain text, {views} views each, cache cleared"
    )
    for name, samples in results.items():
        transfer = statistics.median(s["transfer"] for s in samples)
        page = statistics.median(s["page"] for s in samples)
        interactive = statistics.median(s["interactive"] for s in samples)
        print(
            f"  {name:18s} transferred {transfer / 1000:7.1f} KB (page {page / 1000:6.1f} KB, "
            f"{samples[0]['decoded'] / 1000:7.1f} KB decoded, {samples[0]['lines']} lines shown); "
            f"interactive after {interactive:6.0f} ms (median; max {max(s['interactive'] for s in samples):.0f} ms)"
        )
    big = results["100,000 lines"]
    transfer, interactive = (
        statistics.median(s["transfer"] for s in big),
        statistics.median(s["interactive"] for s in big),
    )
    print(f"  transferred / the log's plain text: {transfer / len(text.encode()):.3f}")
    print(
        f"  goal <= 300 KB: {'met' if transfer <= 300_000 else 'NOT met'}; goal interactive <= 1 s: {'met' if interactive <= 1000 else 'NOT met'}"
    )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lines", type=int, default=40)
    parser.add_argument("--interval", type=float, default=0.15)
    parser.add_argument("--views", type=int, default=5)
    parser.add_argument("--no-postgres", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        browser = start_chromium(Path(tmp))
        try:
            store = SQLiteStore(Path(tmp) / "bench.sqlite")
            wake = LogWake()
            wake.bind(asyncio.get_running_loop())
            store.on_log = wake.notify
            report_delays(
                "SQLite, one process",
                await delays(store, store, wake, browser, args.lines, args.interval),
                args.lines,
            )
            if not args.no_postgres:
                await postgres_delays(browser, args.lines, args.interval)
            await first_view(store, browser, args.views)
            store.close()
        finally:
            browser.quit()


async def postgres_delays(browser, lines: int, interval: float) -> None:  # type: ignore[no-untyped-def]
    from postgres_support import benchmark_server_url, with_database

    from bot.service.store.postgres import PostgresStore

    server = benchmark_server_url()
    if server is None:
        print(
            '\n[PostgreSQL] skipped: no server (scripts/postgres.sh start; eval "$(scripts/postgres.sh env)")'
        )
        return
    import psycopg

    name = f"run_page_bench_{time.monotonic_ns()}"
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    url = with_database(server, name)
    page_store = PostgresStore(url)
    agent_store = PostgresStore(url, migrate_schema=False)
    wake = LogWake()
    wake.bind(asyncio.get_running_loop())
    listener = asyncio.create_task(listen_for_logs(url, wake))
    try:
        await asyncio.sleep(0.5)  # LISTEN registered
        result = await delays(page_store, agent_store, wake, browser, lines, interval)
        report_delays("PostgreSQL, agent → NOTIFY → page", result, lines)
    finally:
        listener.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await listener
        agent_store.close()
        page_store.close()
        with psycopg.connect(server, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')


if __name__ == "__main__":
    asyncio.run(main())
