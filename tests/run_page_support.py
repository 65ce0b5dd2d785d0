"""Runs in a real store, as the run page reads them: a job, its log's events, its report.

``hostile_log`` is what a step of a pull request may print to attack the page: markup, script,
``javascript:`` links, OSC-8 hyperlinks, cursor and screen escapes, a line dressed as a step header
or a status, a fake highlight. The tests check that all of it stays text.
"""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from aiohttp import web

from bot.core.config import Environment, RepoConfig
from bot.core.models import (
    CheckStatus,
    DocstringResult,
    Finding,
    PrecommitResult,
    RunReport,
    RunRequest,
    RunState,
    SelectedTest,
    Selection,
    TestCaseResult,
    TestOutcome,
    TestsResult,
)
from bot.core.run_log import LogKind, NewLogEvent, StepEnd
from bot.service.run_page.routes import Gate, Unseen, add_run_page, private_not_found, shown_to_nobody
from bot.service.store.sqlite import SQLiteStore

REPO = "octo/widgets"
HEAD = "a" * 40
BASE = "b" * 40
TRACEBACK = "def test_add():\n>       assert add(1, 2) == 4\nE       assert 3 == 4\n\ntests/test_add.py:3: AssertionError"
HOSTILE_LINES = [
    "<script>window.pwned = 1</script>",
    '<img src=x onerror="window.pwned = 2">',
    '<a href="javascript:window.pwned=3">click me</a>',
    "\x1b]8;;javascript:window.pwned=4\x1b\\an OSC-8 link\x1b]8;;\x1b\\",
    "\x1b[2J\x1b[H\x1b[5Acursor moved \x1b[31mred\x1b[0m",
    '</div></details><details class="step state-passed" id="step-9"><summary>fake step passed</summary>',
    "=== step: deploy (passed) ===",
    '<div class="line hl">forged highlight</div>',
    "{{ 7 * 7 }} {% raw %}",
    "\x1b[38;2;1;2;3m\x1b[48;5;200mcolours\x1b[0m \x07\x08bell",
]


def hostile_log() -> str:
    return "\n".join(HOSTILE_LINES) + "\n"


def request(private: bool | None = False) -> RunRequest:
    env = Environment(
        name="default",
        image="ci/image:1",
        env={"OMP_NUM_THREADS": "1", "API_TOKEN": "s3cret"},
        setup=["pip install -e ."],
    )
    return RunRequest(
        repo=REPO,
        clone_url=f"https://github.com/{REPO}.git",
        private=private,
        pr_number=7,
        head_sha=HEAD,
        head_ref="feature",
        base_ref="main",
        base_sha=BASE,
        trigger="pull request opened",
        config=RepoConfig(environments=[env]),
    )


def failing_report(run_id: str) -> RunReport:
    failed = TestCaseResult(
        nodeid="tests/test_add.py::test_add",
        outcome=TestOutcome.FAILED,
        message="E       assert 3 == 4",
        traceback=TRACEBACK,
        repro=["docker run --rm ci/image@sha256:" + "c" * 64 + " pytest tests/test_add.py::test_add"],
    )
    selection = Selection(
        tests=[SelectedTest(nodeid="tests/test_add.py::test_add", reasons=["covers src/add.py lines 1-3"])]
    )
    return RunReport(
        run_id=run_id,
        repo=REPO,
        pr_number=7,
        head_sha=HEAD,
        base_sha=BASE,
        image="ci/image:1",
        image_digest="sha256:" + "c" * 64,
        image_ref="ci/image@sha256:" + "c" * 64,
        runner="docker",
        state=RunState.SUCCEEDED,
        tests=TestsResult(status=CheckStatus.FAILED, selection=selection, results=[failed]),
        precommit=PrecommitResult(
            status=CheckStatus.FAILED,
            fix_command="pre-commit run --from-ref main",
            diff="-a = 1\n+a = 1 <x>\n",
        ),
        docstrings=DocstringResult(
            status=CheckStatus.FAILED,
            findings=[
                Finding(path="src/add.py", line=1, title="Missing docstring", message="`add()` has none")
            ],
        ),
    )


def add_step(
    store: SQLiteStore, job_id: str, index: int, name: str, output: str, end: StepEnd | None
) -> None:
    events = [NewLogEvent(step=index, kind=LogKind.STEP, text=name)]
    if output:
        events.append(NewLogEvent(step=index, kind=LogKind.OUT, text=output))
    if end is not None:
        events.append(NewLogEvent(step=index, kind=LogKind.END, text=end.text()))
    store.append_log(job_id, 1, events)


def running_job(store: SQLiteStore, *, private: bool | None = False) -> str:
    job = store.enqueue(request(private), "default", f"key-{private}-{store.delivery_count()}-{id(store)}")
    assert job is not None
    claimed = store.claim()
    assert claimed is not None and claimed.id == job.id
    return job.id


def failed_run(store: SQLiteStore, *, private: bool | None = False, log: str | None = None) -> str:
    job_id = running_job(store, private=private)
    add_step(store, job_id, 0, "probe", "python 3.11\n", StepEnd(state="passed", exit_code=0, duration_s=0.4))
    tests_log = (
        log
        if log is not None
        else "\x1b[32mcollected 1 item\x1b[0m\n" + TRACEBACK + "\nFAILED tests/test_add.py::test_add\n"
    )
    add_step(
        store,
        job_id,
        1,
        "tests",
        tests_log,
        StepEnd(state="failed", exit_code=1, duration_s=2.5, reason="tests: exit code 1"),
    )
    store.finish(job_id, RunState.SUCCEEDED, failing_report(job_id), None)
    return job_id


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@asynccontextmanager
async def page_server(
    store: SQLiteStore,
    gate: Gate = private_not_found,
    *,
    port: int | None = None,
    routes: Callable[[web.UrlDispatcher], None] | None = None,
    unseen: Unseen = shown_to_nobody,
) -> AsyncIterator[str]:
    """The run page's routes on a real aiohttp server over ``store`` (and the gate's own
    ``routes``, the sign-in's; ``unseen``, its answer for what is not shown); yields its base URL."""
    import asyncio

    app = web.Application()
    wake = add_run_page(app, store, gate=gate, unseen=unseen, public_url=None)
    if routes is not None:
        routes(app.router)
    wake.bind(asyncio.get_running_loop())
    store.on_log = wake.notify
    runner = web.AppRunner(app)
    await runner.setup()
    port = port or free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()
