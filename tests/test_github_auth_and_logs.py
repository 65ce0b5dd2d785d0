"""App authentication against the fake GitHub, and what the logs may and may not show."""

from __future__ import annotations

import io
import json
from datetime import timedelta

import aiohttp
import gidgethub
import pytest
import structlog
from fakegithub import FakeGitHub

from bot.service.github import GitHubApp
from bot.service.logs import configure_logging, register_secret

TOKEN_PATH = "/app/installations/{installation_id}/access_tokens"


async def test_installation_token_is_cached_until_shortly_before_it_expires(fake_github: FakeGitHub) -> None:
    fake_github.add_repo("octo-org/calc", installation_id=1)
    async with aiohttp.ClientSession() as session:
        app = GitHubApp(session, fake_github.app_id, fake_github.private_key_pem, fake_github.url)
        first = await app.installation_token(1)
        assert await app.installation_token(1) == first
        assert len(fake_github.calls_to("POST", TOKEN_PATH)) == 1
        assert await app.bot_login() == "paritybot[bot]"

        fake_github.token_ttl = timedelta(minutes=4)  # inside the 5-minute refresh margin
        app._tokens.clear()
        await app.installation_token(1)
        await app.installation_token(1)
        assert len(fake_github.calls_to("POST", TOKEN_PATH)) == 3  # each call had to refresh it


def test_json_logs_carry_bound_context_and_never_a_token() -> None:
    out = io.StringIO()
    configure_logging("json", "info", stream=out)
    register_secret("s3cr3t-webhook-value")
    token = "ghs_" + "A" * 36
    structlog.contextvars.bind_contextvars(delivery_id="d-1", repo="o/r", pr=7, run_id="r-1")
    try:
        structlog.get_logger("test").info(
            "cloning", url=f"https://x-access-token:{token}@github.com/o/r", secret="s3cr3t-webhook-value"
        )
    finally:
        structlog.contextvars.clear_contextvars()
    line = json.loads(out.getvalue().strip())
    assert (
        line["delivery_id"] == "d-1" and line["repo"] == "o/r" and line["pr"] == 7 and line["run_id"] == "r-1"
    )
    assert token not in out.getvalue() and "s3cr3t-webhook-value" not in out.getvalue()


async def test_idempotent_requests_are_retried_after_a_gateway_error(fake_github: FakeGitHub) -> None:
    fake_github.add_repo("octo-org/calc", installation_id=1)
    fake_github.add_pull("octo-org/calc", 7, head_sha="a" * 40)
    comment = fake_github.add_comment("octo-org/calc", 7, "hello")
    async with aiohttp.ClientSession() as session:
        app = GitHubApp(session, fake_github.app_id, fake_github.private_key_pem, fake_github.url)
        gh = await app.client(1)
        gh.sleep = _no_wait  # type: ignore[method-assign]
        fake_github.fail("GET", "/repos/octo-org/calc/pulls/7", 502, times=2)
        pull = await gh.getitem("/repos/octo-org/calc/pulls/7")
        assert pull["number"] == 7
        fake_github.fail("PATCH", f"/repos/octo-org/calc/issues/comments/{comment.id}", 503, times=1)
        await gh.patch(f"/repos/octo-org/calc/issues/comments/{comment.id}", data={"body": "edited"})
        assert fake_github.comment(comment.id).body == "edited"
        # A POST is never repeated: it may have been carried out before the error.
        fake_github.fail("POST", "/repos/octo-org/calc/issues/7/comments", 502, times=1)
        with pytest.raises(gidgethub.GitHubBroken):
            await gh.post("/repos/octo-org/calc/issues/7/comments", data={"body": "once"})
        assert [c.body for c in fake_github.comments("octo-org/calc", 7)] == ["edited"]


async def _no_wait(seconds: float) -> None:
    return None


def test_a_log_call_never_raises_and_still_writes_its_line() -> None:
    # A value nested deeper than the JSON encoder recurses, bound to the context as the
    # dispatcher binds a delivery's, used to raise from inside the dispatcher's error handling.
    out = io.StringIO()
    configure_logging("json", "info", stream=out)
    register_secret("s3cr3t-webhook-value")
    deep: object = "s3cr3t-webhook-value"
    # Deeper than any interpreter's limit: 3.13's C encoder takes 5,000 levels that 3.11's refuses.
    for _ in range(200_000):
        deep = {"a": deep}
    structlog.contextvars.bind_contextvars(delivery_id="d-1", repo=deep)
    try:
        try:
            raise ValueError("handling failed")
        except ValueError:
            structlog.get_logger("test").exception("delivery handling failed", attempt=1)
    finally:
        structlog.contextvars.clear_contextvars()
        structlog.reset_defaults()
    line = json.loads(out.getvalue())
    assert line["event"] == "delivery handling failed" and line["level"] == "error"
    assert line["delivery_id"] == "d-1" and line["attempt"] == 1
    assert line["repo"] == "<dict, not rendered>"
    assert "ValueError: handling failed" in line["exception"]
    assert line["log_error"] == "RecursionError while rendering this line"
    assert "s3cr3t-webhook-value" not in out.getvalue()


def test_a_log_call_on_a_closed_stream_does_not_raise() -> None:
    out = io.StringIO()
    configure_logging("json", "info", stream=out)
    out.close()
    try:
        structlog.get_logger("test").error("the log collector went away")
    finally:
        structlog.reset_defaults()
