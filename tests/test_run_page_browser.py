"""The run page in a real browser (headless Chromium), against a real `paritybot serve` and the
fake GitHub: a line a step prints appears on the open page; a hostile log stays inert in the DOM;
every check run's Details link is its run page; screenshots of the page go into the docs."""

from __future__ import annotations

import asyncio
import os
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from botharness import REPO
from browser_support import start_chromium
from docker_support import docker_client, test_image
from fakegithub import FakeGitHub
from finishing import finished, view
from fleet_harness import Fleet
from postgres_support import pg_url
from run_page_support import HOSTILE_LINES, failed_run, free_port, hostile_log, page_server
from run_page_support import REPO as PAGE_REPO
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from serveproc import ServeProcess, until

from bot.service.store.sqlite import SQLiteStore

# Chromium is needed: scripts/test-compat.sh runs the unit tests where it is not installed.
pytestmark = pytest.mark.browser

__all__ = ["docker_client", "pg_url", "test_image"]

# Screenshots go to the docs only when asked (PARITYBOT_SCREENSHOT_DIR=docs/images): a test run
# leaves the checkout as it was.
DOCS_IMAGES = Path(os.environ.get("PARITYBOT_SCREENSHOT_DIR") or tempfile.mkdtemp(prefix="run-page-shots-"))

HOSTILE_CONFIG = """\
environments:
  - name: default
    setup:
      - 'cat "$MARKS/hostile.txt"; echo started > "$MARKS/started.1"; while [ ! -e "$MARKS/open" ]; do sleep 0.1; done; cat "$MARKS/hostile.txt"; echo "after the gate"'
    env:
      MARKS: {marks}
tests:
  reruns: 0
"""

CONTAINER_CONFIG = """\
environments:
  - name: default
    image: {image}
    gpus: none
    setup:
      - 'echo "first line"; sleep 12; echo "printed in the container"; sleep 2'
checks:
  precommit: false
  docstrings: false
tests:
  paths: [tests/unit]
  reruns: 0
"""


@pytest.fixture
async def serve(fake_github: FakeGitHub, tmp_path: Path) -> AsyncIterator[ServeProcess]:
    serve = ServeProcess.create(fake_github, tmp_path)
    serve.settings["public_url"] = f"http://127.0.0.1:{serve.port}"
    yield serve
    serve.open_gate()
    await serve.stop()


@pytest.fixture
def browser(tmp_path: Path) -> WebDriver:
    driver = start_chromium(tmp_path)
    yield driver
    driver.quit()


def run_url(fake: FakeGitHub, head: str) -> str | None:
    """The Details link of the PR's check runs, once they all have the same one."""
    urls = {run.details_url for run in fake.check_runs(REPO, head_sha=head)}
    return urls.pop() if len(urls) == 1 and None not in urls else None


def dom(browser: WebDriver, script: str) -> object:
    # Scripts run by the driver are the test's, outside the page's Content-Security-Policy.
    return browser.execute_script(script)


async def wait_for_text(browser: WebDriver, text: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if text in str(dom(browser, "return document.getElementById('logs').textContent")):
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{text!r} never appeared on the page")


def shot(browser: WebDriver, name: str, *, top: bool = False) -> None:
    DOCS_IMAGES.mkdir(parents=True, exist_ok=True)
    if top:
        dom(browser, "window.scrollTo(0, 0)")
    target = DOCS_IMAGES / f"run-page-{name}.png"
    browser.save_screenshot(str(target))
    assert target.stat().st_size > 10_000  # a page was drawn


def assert_inert(browser: WebDriver, steps: int) -> None:
    """Nothing of the hostile log became markup, ran, or changed the page's structure."""
    assert dom(browser, "return window.pwned === undefined")
    scripts = dom(browser, "return [...document.scripts].map(s => s.getAttribute('src'))")
    assert scripts == ["/static/run-page/run.js"]
    assert (
        dom(browser, "return document.querySelectorAll('#logs img, #logs script, #logs [style]').length") == 0
    )
    hrefs = dom(browser, "return [...document.querySelectorAll('#logs a')].map(a => a.getAttribute('href'))")
    assert all(str(h).startswith("#s") for h in hrefs)  # only the links to lines
    assert dom(browser, "return document.querySelectorAll('details.step').length") == steps
    assert dom(browser, "return document.querySelectorAll('#logs .line.hl').length") <= 1
    texts = dom(browser, "return [...document.querySelectorAll('#logs .line .t')].map(t => t.textContent)")
    for line in ("<script>window.pwned = 1</script>", "=== step: deploy (passed) ===", "cursor moved red"):
        assert line in texts
    assert "an OSC-8 link" in texts and "\x1b" not in "".join(map(str, texts))


async def test_a_hostile_log_is_inert_in_the_browser_and_details_links_go_to_the_run(
    serve: ServeProcess, fake_github: FakeGitHub, browser: WebDriver
) -> None:
    marks = serve.tmp / "marks"
    (marks / "hostile.txt").write_text(hostile_log())
    fake_github.set_file(REPO, ".github/paritybot.yml", HOSTILE_CONFIG.format(marks=marks), ref="main")
    head = serve.sample.head_sha
    await serve.start()
    assert await serve.send("pull_request", serve.pr_opened()) == 202
    await until("the set-up to start", lambda: (marks / "started.1").exists())
    await until("check runs with a Details link", lambda: run_url(fake_github, head) is not None)
    url = str(run_url(fake_github, head))
    assert url.startswith(f"http://127.0.0.1:{serve.port}/runs/")

    browser.get(url)
    await wait_for_text(browser, HOSTILE_LINES[0])
    for link in browser.find_elements(By.CSS_SELECTOR, "#logs .line .t"):
        if "click me" in link.text or "OSC-8" in link.text:
            link.click()
    steps = int(str(dom(browser, "return document.querySelectorAll('#step-table tbody tr').length")))
    assert_inert(browser, steps)
    shot(browser, "running", top=True)

    dom(browser, "window.stayed = true")
    serve.open_gate()
    await wait_for_text(browser, "after the gate")
    assert dom(browser, "return window.stayed === true")  # appended live, not by a reload
    # The hostile lines again, this time added live by the page's script: inert all the same.
    steps = int(str(dom(browser, "return document.querySelectorAll('#step-table tbody tr').length")))
    assert_inert(browser, steps)
    live_copies = "return [...document.querySelectorAll('#logs .line .t')].filter(t => t.textContent.startsWith('<script>')).length"
    assert dom(browser, live_copies) == 2

    await until("GitHub to show the run finished", lambda: finished(view(fake_github, REPO, 7, head)))
    summary = view(fake_github, REPO, 7, head).summaries[0]
    assert f"]({url})" in summary
    browser.get(url)
    assert dom(browser, "return document.body.dataset.live") == "0"
    assert dom(browser, "return document.querySelectorAll('#failing article').length") >= 1
    steps = int(str(dom(browser, "return document.querySelectorAll('#step-table tbody tr').length")))
    assert_inert(browser, steps)
    # The failed tests step's first error line is marked and in view.
    marked = dom(browser, "const l = document.querySelector('#logs .line.hl'); return l && l.textContent")
    assert marked and "hostile" not in str(marked)
    shot(browser, "failing")
    for run in fake_github.check_runs(REPO, head_sha=head):
        assert run.details_url == url, run.name


@pytest.mark.docker
async def test_a_line_printed_in_the_container_appears_on_the_open_page(
    serve: ServeProcess, fake_github: FakeGitHub, browser: WebDriver, test_image: str
) -> None:
    serve.settings |= {"runner": "docker", "default_image": test_image}
    fake_github.set_file(REPO, ".github/paritybot.yml", CONTAINER_CONFIG.format(image=test_image), ref="main")
    head = serve.sample.head_sha
    await serve.start()
    assert await serve.send("pull_request", serve.pr_opened()) == 202
    await until("check runs with a Details link", lambda: run_url(fake_github, head) is not None)
    browser.get(str(run_url(fake_github, head)))
    await wait_for_text(browser, "first line", timeout=120)
    dom(browser, "window.stayed = true")
    assert "printed in the container" not in str(
        dom(browser, "return document.getElementById('logs').textContent")
    )
    await wait_for_text(browser, "printed in the container", timeout=60)
    assert dom(browser, "return window.stayed === true")  # appended live, not by a reload
    await until("GitHub to show the run finished", lambda: finished(view(fake_github, REPO, 7, head)))
    await asyncio.sleep(0.5)
    browser.refresh()
    assert dom(browser, "return document.getElementById('run-state').textContent") == "succeeded"
    shot(browser, "passing", top=True)


async def test_groups_fold_the_hidden_lines_come_on_demand_and_the_error_is_in_view(
    tmp_path: Path, browser: WebDriver
) -> None:
    store = SQLiteStore(tmp_path / "db.sqlite")
    lines = ["::group::Installing", "pip install a", "pip install b", "::endgroup::"]
    lines += [f"<b>line {i}</b>" for i in range(5, 2000)] + ["E   assert 1 == 2", "end"]
    run_id = failed_run(store, log="\n".join(lines) + "\n")
    try:
        async with page_server(store) as base:
            await asyncio.to_thread(browser.get, f"{base}/runs/{run_id}")
            # The failed step's first error line is marked and scrolled into view.
            box = dom(
                browser,
                "const r = document.querySelector('.line.hl').getBoundingClientRect(); return [r.top, r.bottom, innerHeight]",
            )
            assert isinstance(box, list) and box[0] >= 0 and box[1] <= box[2]
            hidden = "return [...document.querySelectorAll('#s1-L2, #s1-L3')].map(l => l.hidden)"
            assert dom(browser, hidden) == [True, True]
            await asyncio.to_thread(browser.find_element(By.ID, "s1-L1").click)
            assert dom(browser, hidden) == [False, False]
            assert dom(browser, "return document.querySelector('.line.hl').id") == "s1-L2000"
            assert dom(browser, "return document.getElementById('s1-L500')") is None
            button = browser.find_element(By.CSS_SELECTOR, "button.more")
            await asyncio.to_thread(button.click)
            for _ in range(100):
                if dom(browser, "return document.getElementById('s1-L500') !== null"):
                    break
                await asyncio.sleep(0.05)
            assert (
                dom(browser, "return document.getElementById('s1-L500').querySelector('.t').textContent")
                == "<b>line 500</b>"
            )
            assert dom(browser, "return document.querySelectorAll('#logs b').length") == 0
            assert dom(browser, "return document.querySelectorAll('button.more').length") == 0
    finally:
        store.close()


AGENT_CONFIG = """\
environments:
  - name: cuda12
    runs_on: cuda12.1
    image: {image}
    gpus: none
    branches: ["main"]
    setup:
      - 'echo "first line on the agent"; sleep 12; echo "printed in the agent container"; sleep 2'
checks:
  precommit: false
  docstrings: false
tests:
  paths: [tests/unit]
  reruns: 0
"""


@pytest.mark.docker
@pytest.mark.postgres
async def test_with_agents_a_line_printed_on_a_gpu_host_appears_on_the_services_page(
    fake_github: FakeGitHub, tmp_path: Path, pg_url: str, browser: WebDriver, test_image: str
) -> None:
    """Several hosts: the agent inserts its run's lines into PostgreSQL and NOTIFYs; the page a
    `serve` replica serves LISTENs and shows each as it comes."""
    fleet = await Fleet.create(fake_github, tmp_path, pg_url, config=AGENT_CONFIG.format(image=test_image))
    try:
        port = free_port()
        serve = await fleet.start_serve(port=port, PARITYBOT_PUBLIC_URL=f"http://127.0.0.1:{port}")
        await fleet.start_agent("gpu-a", "cuda12.1", mode="pipeline")
        head = fleet.sample.head_sha
        assert await fleet.send(serve, "pull_request", fleet.pr_event()) == 202
        await fleet.wait_for("check runs with a Details link", lambda: run_url(fake_github, head) is not None)
        url = str(run_url(fake_github, head))
        assert url.startswith(f"http://127.0.0.1:{port}/runs/")
        await asyncio.to_thread(browser.get, url)
        await wait_for_text(browser, "first line on the agent", timeout=120)
        dom(browser, "window.stayed = true")
        logs = str(dom(browser, "return document.getElementById('logs').textContent"))
        assert "printed in the agent container" not in logs
        await wait_for_text(browser, "printed in the agent container", timeout=60)
        assert dom(browser, "return window.stayed === true")  # appended live, not by a reload
        jobs = await fleet.wait_settled(1, timeout=120)
        assert jobs[0].state.value == "succeeded"
    finally:
        await fleet.close()


async def test_a_private_repositorys_run_page_asks_to_sign_in_and_shows_only_readers(
    fake_github: FakeGitHub, tmp_path: Path
) -> None:
    """The service's own gate in front of the real run page: an anonymous viewer is sent to sign
    in with GitHub and comes back to the run; a viewer who cannot read the repository gets the
    page a run that does not exist gets."""
    import aiohttp

    from bot.service.github import GitHubApp
    from bot.service.sessions import Sessions
    from bot.service.viewers import OAuthClient, ViewerGate

    fake_github.add_repo(PAGE_REPO, installation_id=7, private=True)
    fake_github.set_role(PAGE_REPO, "alice", "read")
    store = SQLiteStore(tmp_path / "store.db")
    job_id = failed_run(store, private=True)
    port = free_port()
    public_url = f"http://127.0.0.1:{port}"
    fake_github.web.callback_urls = [f"{public_url}/oauth/callback"]
    alice = await asyncio.to_thread(start_chromium, tmp_path / "alice")
    bob = await asyncio.to_thread(start_chromium, tmp_path / "bob")
    try:
        async with aiohttp.ClientSession() as session:
            app = GitHubApp(session, fake_github.app_id, fake_github.private_key_pem, fake_github.url)
            oauth = OAuthClient(
                fake_github.web.client_id, fake_github.web.client_secret, fake_github.web.url, public_url
            )
            gate = ViewerGate(app, session, oauth, Sessions(store))
            async with page_server(store, gate, port=port, routes=gate.add_routes, unseen=gate.unseen) as url:
                page = f"{url}/runs/{job_id}"
                fake_github.web.sign_in("alice")  # signed in to GitHub, may read the repository
                await asyncio.to_thread(alice.get, page)
                await until("the run page", lambda: "tests/test_add.py::test_add" in alice.page_source, 20)
                assert alice.current_url == page  # GitHub's sign-in, then back to the run
                fake_github.web.sign_in("bob")  # may not read it
                await asyncio.to_thread(bob.get, page)
                body = bob.find_element(By.TAG_NAME, "body").text
                assert "test_add" not in body and body == "Not Found"
                await asyncio.to_thread(bob.get, f"{url}/runs/{'0' * 32}")
                assert bob.find_element(By.TAG_NAME, "body").text == body  # as for no run at all
    finally:
        await asyncio.to_thread(alice.quit)
        await asyncio.to_thread(bob.quit)
        store.close()
