"""The run page over HTTP, against a real server and store: the steps, the whole log, the results,
the JSON record, private repositories behind the gate, the live stream and its resumption.
(The same page in a real browser: tests/test_run_page_browser.py.)"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from postgres_support import pg_url
from run_page_support import (
    HEAD,
    TRACEBACK,
    add_step,
    failed_run,
    hostile_log,
    page_server,
    running_job,
)

from bot.core.models import RunState
from bot.core.run_log import LogKind, NewLogEvent, StepEnd
from bot.render.run_page import HEAD_LINES, TAIL_LINES
from bot.render.run_record import SCHEMA_VERSION, RunRecord
from bot.service.run_page.live import LogWake, listen_for_logs
from bot.service.run_page.routes import CSP
from bot.service.store.postgres import PostgresStore
from bot.service.store.sqlite import SQLiteStore

__all__ = ["pg_url"]  # the fixture, imported for pytest


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SQLiteStore]:
    s = SQLiteStore(tmp_path / "db.sqlite")
    yield s
    s.close()


async def get(url: str, **headers: str) -> tuple[int, dict[str, str], str]:
    async with aiohttp.ClientSession() as session, session.get(url, headers=headers) as resp:
        return resp.status, dict(resp.headers), await resp.text()


async def test_a_failed_runs_page_shows_its_steps_log_and_results_under_a_strict_policy(store):
    run_id = failed_run(store)
    async with page_server(store) as base:
        status, headers, html = await get(f"{base}/runs/{run_id}")
    assert status == 200
    assert headers["Content-Security-Policy"] == CSP and "'unsafe-inline'" not in CSP
    assert "<script src=" in html and "<script>" not in html and "style=" not in html
    assert 'id="step-1"' in html and "tests: exit code 1" in html
    assert '<span class="fg2">collected 1 item</span>' in html  # colours as classes
    assert 'class="line hl" id="s1-L4"' in html  # the first error line of the failed step: "E   …"
    assert "tests/test_add.py::test_add" in html and "assert 3 == 4" in html
    assert "docker run --rm ci/image@sha256:" in html and "covers src/add.py lines 1-3" in html
    # The comment's other facts, uncut: pre-commit's fix and diff, the docstring findings.
    assert "pre-commit run --from-ref main" in html and "+a = 1 &lt;x&gt;" in html
    assert "src/add.py:1" in html and "Missing docstring: `add()` has none" in html


async def test_a_hostile_log_is_text_in_the_html(store):
    run_id = failed_run(store, log=hostile_log())
    async with page_server(store) as base:
        _, _, html = await get(f"{base}/runs/{run_id}")
    body = html.split('<div id="logs">', 1)[1].split('<section id="failing">', 1)[0]
    assert "<script>" not in body and "<img" not in body and '<a href="javascript' not in body
    assert "&lt;script&gt;window.pwned = 1&lt;/script&gt;" in body
    assert "javascript:window.pwned=4" not in body  # the OSC-8 target is gone, its text stays
    assert "an OSC-8 link" in body and "\x1b" not in body and "\x07" not in body
    assert body.count('<details class="step') == 2  # the forged step is text
    assert 'class="line hl"' not in body  # no line looks like an error; the forged one is text
    assert "{{ 7 * 7 }}" in body


async def test_a_private_repositorys_run_is_not_found_unless_the_gate_allows(store):
    private = failed_run(store, private=True)
    unknown = failed_run(store, private=None)
    asked: list[str] = []

    async def gate(request: web.Request, repository: str) -> web.StreamResponse | None:
        asked.append(repository)
        return None if request.headers.get("X-Viewer") == "allowed" else web.Response(status=404)

    async with page_server(store) as base:
        for run_id in (private, unknown):
            for path in (f"/runs/{run_id}", f"/runs/{run_id}.json", f"/runs/{run_id}/events"):
                status, _, body = await get(base + path)
                assert status == 404 and "test_add" not in body
    async with page_server(store, gate=gate) as base:
        assert (await get(f"{base}/runs/{private}"))[0] == 404
        assert (await get(f"{base}/runs/{private}", **{"X-Viewer": "allowed"}))[0] == 200
    assert asked == ["octo/widgets", "octo/widgets"]


async def test_the_json_record_is_versioned_and_has_what_a_repro_needs(store):
    run_id = failed_run(store)
    async with page_server(store) as base:
        status, headers, text = await get(f"{base}/runs/{run_id}.json")
    assert status == 200 and headers["Content-Type"].startswith("application/json")
    data = json.loads(text)
    record = RunRecord.model_validate(data)
    assert data["schema_version"] == SCHEMA_VERSION == 1
    assert (record.repository, record.pr_number, record.head_sha, record.merged) == (
        "octo/widgets",
        7,
        HEAD,
        False,
    )
    env = record.environment
    assert env.image_ref == "ci/image@sha256:" + "c" * 64 and env.setup == ["pip install -e ."]
    assert env.env == {"OMP_NUM_THREADS": "1"} and env.env_hidden == ["API_TOKEN"] and "s3cret" not in text
    assert [(s.name, s.state, s.exit_code) for s in record.steps] == [
        ("probe", "passed", 0),
        ("tests", "failed", 1),
    ]
    assert record.failing_tests[0].traceback == TRACEBACK and record.failing_tests[0].repro
    assert record.selection is not None and record.selection.tests[0].reasons == [
        "covers src/add.py lines 1-3"
    ]


async def test_a_long_log_opens_with_head_and_tail_and_the_rest_on_demand(store):
    run_id = running_job(store)
    lines = "".join(f"line {i}\n" for i in range(1, 100_001))
    add_step(store, run_id, 0, "tests", lines, StepEnd(state="passed", exit_code=0, duration_s=1))
    store.finish(run_id, RunState.SUCCEEDED, None, None)
    async with page_server(store) as base:
        _, _, html = await get(f"{base}/runs/{run_id}")
        assert html.count('<div class="line') == HEAD_LINES + TAIL_LINES
        assert f'data-from="{HEAD_LINES + 1}" data-to="{100_000 - TAIL_LINES}"' in html
        status, _, text = await get(f"{base}/runs/{run_id}/steps/0/lines?from=400&to=402")
    assert status == 200
    assert [(line["n"], line["s"]) for line in json.loads(text)["lines"]] == [
        (n, [["", f"line {n}"]]) for n in (400, 401, 402)
    ]


async def read_events(resp: aiohttp.ClientResponse, until: str) -> list[tuple[str, str, dict]]:
    """(id, event, data) of each event until one named ``until``."""
    events, frame = [], {}
    async for raw in resp.content:
        line = raw.decode().rstrip("\n")
        if line.startswith(("id: ", "event: ", "data: ")):
            key, _, value = line.partition(": ")
            frame[key] = value
        elif not line and frame:
            events.append((frame.get("id", ""), frame["event"], json.loads(frame["data"])))
            if frame["event"] == until:
                return events
            frame = {}
    return events


async def test_the_live_stream_sends_new_lines_and_resumes_after_the_last_event_id(store):
    run_id = running_job(store)
    add_step(store, run_id, 0, "tests", "one\n", None)
    async with page_server(store) as base, aiohttp.ClientSession() as session:
        async with session.get(f"{base}/runs/{run_id}/events?after=0") as resp:
            assert resp.headers["Content-Type"] == "text/event-stream"
            first = await read_events(resp, until="lines")
            assert [(e, d) for _, e, d in first] == [
                ("step", first[0][2]),
                ("lines", {"step": 0, "lines": [{"n": 1, "s": [["", "one"]], "g": None, "eg": False}]}),
            ]
            last_id = first[-1][0]
            store.append_log(run_id, 1, [NewLogEvent(step=0, kind=LogKind.OUT, text="two\n")])
            second = await read_events(resp, until="lines")
            assert second[-1][2]["lines"][0]["n"] == 2
        # A reconnection with the last id it saw gets what came after, numbered on.
        store.append_log(run_id, 1, [NewLogEvent(step=0, kind=LogKind.OUT, text="three\n")])
        store.append_log(
            run_id, 1, [NewLogEvent(step=0, kind=LogKind.END, text=StepEnd(state="passed").text())]
        )
        store.finish(run_id, RunState.SUCCEEDED, None, None)
        async with session.get(
            f"{base}/runs/{run_id}/events", headers={"Last-Event-ID": second[-1][0]}
        ) as resp:
            rest = await read_events(resp, until="run")
    assert int(last_id) < int(second[-1][0])
    assert [e for _, e, _ in rest] == ["lines", "end", "run"]
    assert rest[0][2]["lines"][0] == {"n": 3, "s": [["", "three"]], "g": None, "eg": False}
    assert rest[-1][2] == {"state": "succeeded"}


@pytest.mark.postgres
async def test_with_agents_a_runs_live_pages_are_woken_by_postgresqls_notify(pg_url):
    """An agent's log lines reach the service through PostgreSQL: its NOTIFY wakes the pages."""
    store = PostgresStore(pg_url)
    wake = LogWake()
    wake.bind(asyncio.get_running_loop())
    listener = asyncio.create_task(listen_for_logs(pg_url, wake))
    try:
        with wake.watch("job-agent") as woken, wake.watch("job-other") as other:
            for _ in range(100):  # until the listener has started listening
                await asyncio.to_thread(
                    store.append_log, "job-agent", 1, [NewLogEvent(step=0, kind=LogKind.OUT, text="x\n")]
                )
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(woken.wait(), 0.1)
                if woken.is_set():
                    break
            assert woken.is_set() and not other.is_set()
    finally:
        listener.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await listener
        store.close()


async def test_the_performance_comparison_and_its_charts_are_on_the_page(store):
    from bot.core.perf import BenchmarkSamples, Comparison, PerformanceResult, Round, Side, Verdict

    run_id = failed_run(store)
    job = store.get_job(run_id)
    report = store.report(run_id)
    assert job is not None and report is not None
    rounds = [
        Round(base=0.010, head=0.013 + i / 1000, first=Side.BASE if i % 2 else Side.HEAD) for i in range(6)
    ]
    report.performance = PerformanceResult(
        trigger="label perf",
        threshold=0.05,
        confidence=0.95,
        blocking=False,
        comparisons=[
            Comparison(
                kind="pytest",
                name="bench_<sum>",
                verdict=Verdict.REGRESSION,
                reason="30% slower",
                base_median=0.010,
                head_median=0.0155,
                ratio=1.3,
            )
        ],
        charted=[BenchmarkSamples(kind="pytest", name="bench_<sum>", rounds=rounds)],
    )
    store.finish(run_id, RunState.SUCCEEDED, report, None)
    async with page_server(store) as base:
        _, _, html = await get(f"{base}/runs/{run_id}")
        _, _, text = await get(f"{base}/runs/{run_id}.json")
    section = html.split('<section id="performance">', 1)[1]
    assert "bench_&lt;sum&gt;" in section and "bench_<sum>" not in section and "1.300" in section
    assert section.count("<polyline") == 2 and "<svg" in section
    assert json.loads(text)["performance"]["comparisons"][0]["ratio"] == 1.3


def test_the_public_url_setting_left_empty_is_unset_and_a_bad_one_is_refused(monkeypatch):
    from pydantic import ValidationError

    from bot.service.settings import Settings

    monkeypatch.setenv("PARITYBOT_PUBLIC_URL", "")  # what compose passes for a setting left out
    assert Settings().public_url is None
    monkeypatch.setenv("PARITYBOT_PUBLIC_URL", "https://paritybot.example.org")
    assert Settings().public_url == "https://paritybot.example.org"
    monkeypatch.setenv("PARITYBOT_PUBLIC_URL", "javascript:alert(1)")
    with pytest.raises(ValidationError):
        Settings()


async def test_a_page_of_a_run_tried_again_follows_the_latest_attempt_without_reloading_for_ever(store):
    run_id = running_job(store)
    add_step(store, run_id, 0, "tests", "first try\n", None)  # attempt 1, then the worker died
    store.append_log(run_id, 2, [NewLogEvent(step=0, kind=LogKind.STEP, text="tests")])
    store.append_log(run_id, 2, [NewLogEvent(step=0, kind=LogKind.OUT, text="second try\n")])
    async with page_server(store) as base, aiohttp.ClientSession() as session:
        _, _, html = await get(f"{base}/runs/{run_id}")
        assert "second try" in html and "first try" not in html
        last = html.split('data-last-seq="', 1)[1].split('"', 1)[0]
        async with session.get(f"{base}/runs/{run_id}/events?after={last}") as resp:
            store.append_log(run_id, 2, [NewLogEvent(step=0, kind=LogKind.OUT, text="more\n")])
            events = await read_events(resp, until="lines")
    assert [(e, d["lines"][0]["n"], d["lines"][0]["s"]) for _, e, d in events] == [
        ("lines", 2, [["", "more"]])
    ]


async def test_a_step_past_its_heads_cap_says_so_on_the_page_and_live(store):
    run_id = running_job(store)
    add_step(store, run_id, 0, "tests", "head line\n", None)
    held = "the rest is kept as the last 1000000 characters, shown when the step ends"
    store.append_log(run_id, 1, [NewLogEvent(step=0, kind=LogKind.HELD, text=held)])
    async with page_server(store) as base, aiohttp.ClientSession() as session:
        _, _, html = await get(f"{base}/runs/{run_id}")
        assert f"printed more than its log's head keeps: {held}" in html
        async with session.get(f"{base}/runs/{run_id}/events?after=0") as resp:
            events = await read_events(resp, until="note")
    assert [e for _, e, _ in events] == ["step", "lines", "note"] and events[-1][2]["text"] == held
