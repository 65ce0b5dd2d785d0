"""In a real browser (headless Chromium): signing in to see a private repository's page, the
operators' status page, and registering the App from the set-up page.

Selenium's calls block, so each runs in a thread while the servers answer in the test's loop.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import unused_port
from browser_support import start_chromium
from fakegithub import FakeGitHub
from postgres_support import pg_url
from selenium import webdriver
from selenium.webdriver.common.by import By
from setup_support import setup_settings
from viewer_site import PRIVATE, PUBLIC, start_site

from bot.core.models import CheckStatus, PrecommitResult, RunReport, RunRequest, RunState, TestsResult
from bot.service.metrics import Metrics
from bot.service.operators import OperatorAccess, OperatorPages
from bot.service.pages import add_static_routes
from bot.service.setup import SetupPages
from bot.service.store.postgres_fleet import FleetStore
from bot.service.viewers import SESSION_COOKIE

# Chromium is needed: scripts/test-compat.sh runs the unit tests where it is not installed.
pytestmark = pytest.mark.browser

__all__ = ["pg_url"]  # the fixture, imported for pytest
TOKEN = "operators-token-for-tests"
# Set to a directory (docs/images) to keep the screenshots there.
SCREENSHOTS = os.environ.get("PARITYBOT_SCREENSHOT_DIR")


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[webdriver.Chrome]:
    driver = start_chromium(tmp_path)
    try:
        yield driver
    finally:
        driver.quit()


async def visit(driver: webdriver.Chrome, url: str) -> str:
    """Open ``url`` and wait for the page: the text the viewer sees."""
    await asyncio.to_thread(driver.get, url)
    return str(await asyncio.to_thread(lambda: driver.find_element(By.TAG_NAME, "body").text))


async def test_in_a_browser_sign_in_leads_back_to_the_private_page_and_others_see_nothing(
    fake_github: FakeGitHub, tmp_path: Path, browser: webdriver.Chrome
) -> None:
    async for site in start_site(fake_github):
        fake_github.web.sign_in("alice")  # alice, signed in to GitHub, can read the repository
        assert await visit(browser, f"{site.url}/runs/{PRIVATE}") == f"the runs of {PRIVATE}"
        assert browser.current_url == f"{site.url}/runs/{PRIVATE}"
        (cookie,) = [c for c in browser.get_cookies() if c["name"] == SESSION_COOKIE]
        assert cookie["httpOnly"] is True and cookie["sameSite"] == "Lax"
        assert SESSION_COOKIE not in browser.execute_script("return document.cookie")  # no script reads it

        other = await asyncio.to_thread(start_chromium, tmp_path / "bob")
        try:
            fake_github.web.sign_in("bob")  # bob cannot read it: the same answer as for no repository
            assert await visit(other, f"{site.url}/runs/{PRIVATE}") == "Not Found"
            assert await visit(other, f"{site.url}/runs/acme/none-such") == "Not Found"
            assert await visit(other, f"{site.url}/runs/{PUBLIC}") == f"the runs of {PUBLIC}"
        finally:
            await asyncio.to_thread(other.quit)


def busy_fleet(store: FleetStore) -> None:
    """Two GPU hosts, jobs waiting, two running, and runs that passed, failed and broke."""
    now = datetime.now(UTC)
    workers = []
    for host, gpus in (("gpu-a", ["NVIDIA H100 80GB HBM3"] * 4), ("gpu-b", ["NVIDIA A100-SXM4-40GB"] * 2)):
        worker = int(store._query("SELECT worker_id FROM procrastinate_register_worker_v1()")[0]["worker_id"])
        queue = "cuda12.1" if host == "gpu-a" else "cuda11.8"
        store.register_agent(worker, host, f"agent-{host}", [queue], gpus, None)
        workers.append((worker, queue, host))
    finished = [
        ("acme/vision", 1423, RunState.SUCCEEDED, TestsResult(status=CheckStatus.PASSED), None),
        ("acme/vision", 1419, RunState.SUCCEEDED, None, PrecommitResult(status=CheckStatus.FAILED)),
        ("acme/kernels", 88, RunState.FAILED, None, None),
        ("acme/vision", 1420, RunState.SUCCEEDED, TestsResult(status=CheckStatus.PASSED), None),
    ]
    n = 0
    for repo, pr, state, tests, precommit in finished:
        n += 1
        worker, queue, host = workers[n % 2]
        job = store.enqueue(
            request(repo, pr, n), queue.replace("12.1", "12").replace("11.8", "11"), f"k{n}", queue
        )
        assert job is not None
        qid = int(
            store._query("SELECT id FROM procrastinate_fetch_job_v2(%s::varchar[], %s)", ([queue], worker))[
                0
            ]["id"]
        )
        started = store.start_attempt(job.id, qid, worker, host)
        assert started is not None
        error = "image ghcr.io/acme/ci:cuda11.8 not found on gpu-b" if state == RunState.FAILED else None
        report = RunReport(
            run_id=job.id, repo=repo, pr_number=pr, head_sha=job.head_sha, environment=job.environment,
            state=state, error=error, tests=tests, precommit=precommit,
        )  # fmt: skip
        assert store.finish_attempt(job.id, qid, worker, report)
        minutes = 50 - 9 * n
        store._query(
            "UPDATE jobs SET created_at = %s, started_at = %s, finished_at = %s WHERE id = %s RETURNING 1",
            (
                now - timedelta(minutes=minutes + 3),
                now - timedelta(minutes=minutes),
                now - timedelta(minutes=minutes - 6, seconds=17 * n),
                job.id,
            ),
        )
    for repo, pr, (worker, queue, host) in (
        ("acme/vision", 1431, workers[0]),
        ("acme/kernels", 91, workers[1]),
    ):
        n += 1
        job = store.enqueue(
            request(repo, pr, n), queue.replace("12.1", "12").replace("11.8", "11"), f"k{n}", queue
        )
        assert job is not None
        qid = int(
            store._query("SELECT id FROM procrastinate_fetch_job_v2(%s::varchar[], %s)", ([queue], worker))[
                0
            ]["id"]
        )
        assert store.start_attempt(job.id, qid, worker, host) is not None
    for pr in (1432, 1433, 1434):
        n += 1
        store.enqueue(request("acme/vision", pr, n), "cuda12", f"k{n}", "cuda12.1")


def request(repo: str, pr: int, n: int) -> RunRequest:
    return RunRequest(
        installation_id=1,
        repo=repo,
        clone_url="https://example.invalid/r.git",
        pr_number=pr,
        head_sha=f"{n:040x}",
    )


async def serve_status(store: FleetStore) -> AsyncIterator[str]:
    app = web.Application()
    pages = OperatorPages(
        store,
        Metrics(store),
        OperatorAccess(TOKEN),
        github_url="https://github.com",
        mode="several hosts (PostgreSQL)",
    )
    pages.add_routes(app.router)
    add_static_routes(app.router)
    runner = web.AppRunner(app)
    await runner.setup()
    port = unused_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        yield f"127.0.0.1:{port}"
    finally:
        await runner.cleanup()


@pytest.mark.postgres
async def test_in_a_browser_operators_see_the_fleet_on_the_status_page(
    pg_url: str, tmp_path: Path, browser: webdriver.Chrome
) -> None:
    store = FleetStore(pg_url)
    try:
        busy_fleet(store)
        async for where in serve_status(store):
            # Without the token: the browser is asked for it, and shows nothing of the page.
            assert "paritybot status" not in await visit(browser, f"http://{where}/status")
            await asyncio.to_thread(browser.set_window_size, 1280, 1000)
            text = await visit(browser, f"http://ops:{TOKEN}@{where}/status")
            assert text.startswith("paritybot status")
            rows = browser.find_elements(By.CSS_SELECTOR, "#hosts + table tr")
            assert [r.text.split(" ")[0] for r in rows[1:]] == ["gpu-a", "gpu-b"]
            assert "NVIDIA H100 80GB HBM3, NVIDIA H100 80GB HBM3" in rows[1].text
            running = browser.find_elements(By.CSS_SELECTOR, "#running + table a")
            assert [a.get_attribute("href") for a in running] == [
                "https://github.com/acme/vision/pull/1431",
                "https://github.com/acme/kernels/pull/91",
            ]
            outcomes = [e.text for e in browser.find_elements(By.CSS_SELECTOR, "#recent + table td.outcome")]
            assert outcomes == ["pass", "error", "fail", "pass"]
            # The stylesheet applied (the policy lets in this site's styles), and no script at all.
            header = browser.find_element(By.CSS_SELECTOR, "th")
            assert header.value_of_css_property("background-color") == "rgba(246, 248, 250, 1)"
            assert browser.find_elements(By.TAG_NAME, "script") == []
            shot = tmp_path / "status.png"
            await asyncio.to_thread(browser.save_screenshot, str(shot))
            assert shot.stat().st_size > 10_000
            if SCREENSHOTS:
                shutil.copy(shot, Path(SCREENSHOTS) / "status.png")
    finally:
        store.close()


async def test_in_a_browser_the_set_up_page_registers_the_app_on_github(
    fake_github: FakeGitHub, tmp_path: Path, browser: webdriver.Chrome
) -> None:
    port = unused_port()
    url = f"http://127.0.0.1:{port}"
    settings = setup_settings(fake_github, tmp_path, url)
    async with aiohttp.ClientSession() as session:
        setup = SetupPages(settings, session)
        app = web.Application()
        setup.add_routes(app.router)
        add_static_routes(app.router)
        runner = web.AppRunner(app)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        try:
            await visit(browser, f"{url}/setup?token={setup.token}")  # the address `serve` logs
            button = await asyncio.to_thread(browser.find_element, By.ID, "register")
            await asyncio.to_thread(button.click)  # posts the manifest to GitHub, which sends us back
            # Every call in a thread: the driver waits for the page, which this loop serves.
            for _ in range(100):
                if await asyncio.to_thread(browser.find_elements, By.ID, "app-id"):
                    break
                await asyncio.sleep(0.1)
            shown = await asyncio.to_thread(lambda: browser.find_element(By.ID, "app-id").text)
            assert shown == str(fake_github.app_id)
            assert (await asyncio.to_thread(lambda: browser.current_url)).startswith(
                f"{url}/setup/callback?code="
            )
        finally:
            await runner.cleanup()
    assert setup.done.is_set()
    assert settings.private_key_path is not None
    assert settings.private_key_path.read_text().strip() == fake_github.private_key_pem.strip()
