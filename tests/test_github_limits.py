"""GitHub's limits, as GitHub documents them: a rate-limited request waits for the time GitHub
names (``retry-after``, else ``x-ratelimit-reset``, else a minute), and no other request goes out
meanwhile; server errors are retried with backoff for requests that may be repeated; the budget
left is logged."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from email.utils import formatdate
from pathlib import Path

import aiohttp
import gidgethub
import pytest
import structlog
from botharness import REPO, BotHarness
from fakegithub import FakeGitHub
from finishing import CHECK_RUNS, FAST, finished, problems, view

from bot.service.github import GitHubApp, RateGate, RetryPolicy, rate_limit_wait

POLICY = RetryPolicy(
    attempts=3, wait_initial_s=0.01, wait_jitter_s=0.01, rate_limit_wait_s=60.0, max_wait_s=300.0
)
NOW = 1_700_000_000.0
SECONDARY = b'{"message": "You have exceeded a secondary rate limit. Please wait a few minutes before you try again."}'


@pytest.mark.parametrize(
    ("status", "headers", "body", "wait"),
    [
        (403, {"Retry-After": "7"}, SECONDARY, 7.0),
        (429, {"retry-after": "2"}, b"{}", 2.0),
        (403, {"Retry-After": formatdate(NOW + 30, usegmt=True)}, SECONDARY, 30.0),
        # The hourly budget spent: until the reset second has passed.
        (403, {"x-ratelimit-remaining": "0", "x-ratelimit-reset": str(int(NOW) + 90)}, b"{}", 91.0),
        (429, {"x-ratelimit-remaining": "0", "x-ratelimit-reset": str(int(NOW) + 5)}, b"{}", 6.0),
        # A secondary limit that names no time: at least a minute.
        (403, {"x-ratelimit-remaining": "4000"}, SECONDARY, 60.0),
        (429, {}, b"{}", 60.0),
        # Not limits: a missing permission, a server error, a success.
        (
            403,
            {"x-ratelimit-remaining": "4000"},
            b'{"message": "Resource not accessible by integration"}',
            None,
        ),
        (500, {"Retry-After": "3"}, b"{}", None),
        (200, {"x-ratelimit-remaining": "0"}, b"{}", None),
    ],
)
def test_how_long_github_asks_to_wait(
    status: int, headers: dict[str, str], body: bytes, wait: float | None
) -> None:
    assert rate_limit_wait(status, headers, body, NOW, POLICY) == wait


@pytest.fixture
def debug_logs() -> Iterator[None]:
    """structlog at its defaults (every level), whatever an earlier test configured."""
    before = structlog.get_config()
    structlog.reset_defaults()
    yield
    structlog.configure(**before)


@pytest.mark.usefixtures("debug_logs")
def test_the_budget_left_is_logged_and_a_low_one_warned_once_per_window() -> None:
    gate = RateGate()
    headers = {"x-ratelimit-limit": "5000", "x-ratelimit-reset": "1700003600", "x-ratelimit-resource": "core"}
    with structlog.testing.capture_logs() as logs:
        gate.note_budget(headers | {"x-ratelimit-remaining": "4000"})
        gate.note_budget(headers | {"x-ratelimit-remaining": "400"})
        gate.note_budget(headers | {"x-ratelimit-remaining": "399"})
    assert [(e["log_level"], e["remaining"]) for e in logs] == [
        ("debug", 4000),
        ("warning", 400),
        ("debug", 399),
    ]


@pytest.fixture
async def app(fake_github: FakeGitHub) -> AsyncIterator[GitHubApp]:
    fake_github.add_repo(REPO, installation_id=1)
    fake_github.add_pull(REPO, 7, head_sha="a" * 40)
    async with aiohttp.ClientSession() as session:
        yield GitHubApp(
            session, fake_github.app_id, fake_github.private_key_pem, fake_github.url, retry=POLICY
        )


async def test_a_secondary_rate_limit_holds_every_request_for_the_time_github_names(
    fake_github: FakeGitHub, app: GitHubApp
) -> None:
    gh = await app.client(1)
    fake_github.fail(
        "POST",
        CHECK_RUNS,
        403,
        headers={"Retry-After": "1"},
        body={"message": "You have exceeded a secondary rate limit."},
    )
    created = await gh.post(f"/repos/{REPO}/check-runs", data={"name": "lint", "head_sha": "a" * 40})
    limited, retried = fake_github.calls_to("POST", CHECK_RUNS)
    assert (limited.status, retried.status) == (403, 201)
    assert retried.at - limited.at >= 1.0  # a POST refused by a limit was not carried out: sent again
    assert len(fake_github.check_runs(REPO)) == 1 and created["id"] == fake_github.check_runs(REPO)[0].id
    # Another client of the same App waits too: GitHub asks the App, not the request, to pause.
    fake_github.fail("GET", "/repos/{owner}/{repo}/pulls/{pull_number}", 429, headers={"Retry-After": "1"})
    first = asyncio.create_task(gh.getitem(f"/repos/{REPO}/pulls/7"))
    while not any(c.status == 429 for c in fake_github.calls):
        await asyncio.sleep(0.01)
    other = await app.client(1)
    await other.getitem(f"/repos/{REPO}/pulls/7/files")
    await first
    limited = next(c for c in fake_github.calls if c.status == 429)
    [files] = fake_github.calls_to("GET", f"/repos/{REPO}/pulls/7/files")
    assert files.at - limited.at >= 1.0


async def test_a_limit_longer_than_a_request_may_wait_fails_it_without_sending_more(
    fake_github: FakeGitHub, app: GitHubApp
) -> None:
    gh = await app.client(1)
    reset = str(int(time.time()) + 3600)
    fake_github.fail(
        "GET",
        "/repos/{owner}/{repo}/pulls/{pull_number}",
        403,
        headers={"x-ratelimit-remaining": "0", "x-ratelimit-reset": reset},
    )
    with pytest.raises(gidgethub.RateLimitExceeded):
        await gh.getitem(f"/repos/{REPO}/pulls/7")
    sent = len(fake_github.calls)
    with pytest.raises(Exception, match="rate limit holds requests"):
        await gh.getitem(f"/repos/{REPO}/pulls/7")
    assert len(fake_github.calls) == sent  # nothing goes out until the reset


async def test_server_errors_are_retried_for_idempotent_requests_only(
    fake_github: FakeGitHub, app: GitHubApp
) -> None:
    gh = await app.client(1)
    fake_github.fail("GET", "/repos/{owner}/{repo}/pulls/{pull_number}", 502, times=2)
    assert (await gh.getitem(f"/repos/{REPO}/pulls/7"))["number"] == 7
    fake_github.fail("POST", "/repos/{owner}/{repo}/issues/{issue_number}/comments", 502, times=1)
    with pytest.raises(gidgethub.GitHubBroken):
        await gh.post(f"/repos/{REPO}/issues/7/comments", data={"body": "once"})
    assert len(fake_github.calls_to("POST", f"/repos/{REPO}/issues/7/comments")) == 1


@pytest.mark.parametrize(
    "headers",
    [{"Retry-After": "1"}, {"x-ratelimit-remaining": "0", "x-ratelimit-reset": "NOW+1"}],
    ids=["403 secondary limit with Retry-After", "429 with x-ratelimit-reset"],
)
async def test_a_rate_limited_run_waits_as_asked_and_still_finishes(
    headers: dict[str, str], fake_github: FakeGitHub, tmp_path: Path
) -> None:
    bot = await BotHarness.create(fake_github, tmp_path, settings=FAST)
    try:
        status = 403 if "Retry-After" in headers else 429
        if "x-ratelimit-reset" in headers:
            headers = headers | {"x-ratelimit-reset": str(int(time.time()) + 1)}
        body = {"message": "You have exceeded a secondary rate limit."}
        fake_github.fail("POST", CHECK_RUNS, status, headers=headers, body=body)
        assert await bot.send("pull_request", bot.pr_event("opened")) == 202
        await bot.wait_for(
            "the run to finish", lambda: finished(view(fake_github, REPO, 7, bot.sample.head_sha))
        )
        assert problems(view(fake_github, REPO, 7, bot.sample.head_sha)) == []
        limited = next(c for c in fake_github.calls if c.status == status)
        later = [c for c in fake_github.calls if c.at > limited.at]
        assert later and later[0].at - limited.at >= 1.0  # nothing at all went out before the time was up
    finally:
        await bot.stop()
