"""What `/status` and a `/metrics` scrape cost on a store with a long history.

A SQLite store is filled with ``--jobs`` finished runs (and a few queued and running ones), as the
in-process workers leave them; then the store's overview (what `/status` shows, the last 30 runs)
and a whole scrape (every metric, the overview's counts among them) are timed, ``--repeat`` times
each, median and maximum. The baseline is the same store's ``jobs_in_state(queued)``, the query the
workers run on every poll, in the same process.

Usage::

    python benchmarks/operator_pages.py [--jobs 5000] [--repeat 20]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from prometheus_client import generate_latest  # noqa: E402

from bot.core.models import RunReport, RunRequest, RunState  # noqa: E402
from bot.service.metrics import Metrics  # noqa: E402
from bot.service.pages import render  # noqa: E402
from bot.service.store.sqlite import SQLiteStore  # noqa: E402


def fill(store: SQLiteStore, jobs: int) -> None:
    for n in range(jobs + 8):
        request = RunRequest(
            installation_id=1, repo="acme/vision", clone_url="https://example.invalid/r.git",
            pr_number=n % 900 + 1, head_sha=f"{n:040x}",
        )  # fmt: skip
        store.enqueue(request, f"cuda{n % 3}", f"k{n}", "cuda12.1")
        if n >= jobs + 4:
            continue  # left queued
        job = store.claim()
        assert job is not None
        if n >= jobs:
            continue  # left running
        state = RunState.SUCCEEDED if n % 5 else RunState.FAILED
        report = RunReport(
            run_id=job.id, repo=job.repo, pr_number=job.pr_number, head_sha=job.head_sha,
            environment=job.environment, state=state, error=None if n % 5 else "image not found",
        )  # fmt: skip
        store.finish(job.id, state, report, report.error)


def timed(what: Callable[[], object], repeat: int) -> tuple[float, float]:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        what()
        times.append(time.perf_counter() - start)
    return statistics.median(times), max(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=5000)
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        store = SQLiteStore(Path(tmp) / "bot.db")
        start = time.perf_counter()
        fill(store, args.jobs)
        print(f"filled {args.jobs} finished runs in {time.perf_counter() - start:.1f} s")
        metrics = Metrics(store)

        def status_page() -> object:
            return render(
                "status.html", view=store.overview(30), github_url="https://github.com", version="x", mode="b"
            )

        rows = {
            "baseline: jobs_in_state(queued)": timed(
                lambda: store.jobs_in_state(RunState.QUEUED), args.repeat
            ),
            "/status: overview(30) + the page": timed(status_page, args.repeat),
            "/metrics: a whole scrape": timed(lambda: generate_latest(metrics.registry), args.repeat),
        }
        base = rows["baseline: jobs_in_state(queued)"][0]
        for name, (median, worst) in rows.items():
            print(
                f"{name:36} median {median * 1000:7.2f} ms  max {worst * 1000:7.2f} ms  ×{median / base:5.1f}"
            )
        store.close()


if __name__ == "__main__":
    main()
