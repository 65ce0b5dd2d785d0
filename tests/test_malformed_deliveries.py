"""Signed deliveries whose payload GitHub would never send: each is recorded as failed with one line
naming the field, at its first attempt (the same bytes would fail again), without a call to
GitHub; no loop of the service stops, and `/healthz` says so. A loop that does stop is restarted,
and `/healthz` names it meanwhile.

Every payload starts as one of GitHub's real examples (tests/payloads.py) and is changed only
where the case says; it goes through the real web app, store and dispatcher, with the service's
JSON logs on, as `serve` runs.
"""

from __future__ import annotations

import io
import json
import sqlite3
from collections.abc import Callable
from typing import Any

import payloads
import pytest
from botharness import REPO, SECRET, BotHarness, bot

from bot.core.release import VERSION
from bot.service.store.records import Delivery, DeliveryStatus

__all__ = ["bot"]  # the fixture, imported for pytest

Payload = dict[str, Any]


pytestmark = pytest.mark.usefixtures("json_logs")  # the JSON renderer, as `serve` logs


def log_lines(out: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in out.getvalue().splitlines() if line.strip()]


async def deliver(bot: BotHarness, event: str, body: bytes, delivery_id: str = "d-bad") -> Delivery:
    """POST a signed body; the delivery once the dispatcher is done with it (failed or dispatched)."""
    status = (
        await bot.post(body, payloads.webhook_headers(event, body, SECRET, delivery_id=delivery_id))
    ).status
    assert status == 202, status
    return await deliver_recorded(bot, delivery_id)


async def deliver_recorded(bot: BotHarness, delivery_id: str) -> Delivery:
    """A recorded delivery once the dispatcher is done with it (failed or dispatched)."""

    def done() -> bool:
        return bot.store.delivery_status(delivery_id) != DeliveryStatus.RECEIVED

    await bot.wait_for(f"delivery {delivery_id} to be dispatched or failed", done, timeout=20)
    delivery = bot.store.delivery(delivery_id)
    assert delivery is not None
    return delivery


# --- the payloads, each from a real example ---------------------------------------------------------


def pr_opened(bot: BotHarness) -> Payload:
    return bot.pr_event("opened")


def retest_comment(bot: BotHarness) -> Payload:
    posted = bot.fake.add_comment(REPO, 7, "/retest-gpu", user="octocat", author_association="OWNER")
    return payloads.issue_comment_event(
        body="/retest-gpu",
        number=7,
        commenter="octocat",
        author_association="OWNER",
        comment_id=posted.id,
        repo_full_name=REPO,
        clone_url=bot.clone_url,
        installation_id=1,
        api_url=bot.fake.url,
    )


def rerun_button(bot: BotHarness) -> Payload:
    payload = payloads.check_run_event(
        head_sha=bot.sample.head_sha,
        app_slug="paritybot",
        repo_full_name=REPO,
        installation_id=1,
        api_url=bot.fake.url,
    )
    payload["check_run"]["pull_requests"] = [{"number": 7, "id": 1, "url": "x", "head": {}, "base": {}}]
    return payload


def installation_created(bot: BotHarness) -> Payload:
    return payloads.event("installation", "created", installation_id=1)


def default_branch_push(bot: BotHarness) -> Payload:
    payload = payloads.event(
        "push", repo_full_name=REPO, clone_url=bot.clone_url, installation_id=1, api_url=bot.fake.url
    )
    payload.update(ref="refs/heads/main", deleted=False, after=bot.sample.base_sha)
    payload["repository"]["default_branch"] = "main"
    return payload


def set_at(path: str, value: Any) -> Callable[[Payload], None]:
    *parents, last = path.split(".")

    def change(payload: Payload) -> None:
        node: Any = payload
        for key in parents:
            node = node[int(key)] if isinstance(node, list) else node[key]
        node[last] = value

    return change


def remove(path: str) -> Callable[[Payload], None]:
    *parents, last = path.split(".")

    def change(payload: Payload) -> None:
        node: Any = payload
        for key in parents:
            node = node[key]
        del node[last]

    return change


MARK = "__MARK__"  # replaced in the encoded body by raw JSON the encoder would not write


def raw_at(path: str, raw: bytes) -> tuple[Callable[[Payload], None], bytes]:
    return set_at(path, MARK), raw


# name → (event, payload, change, the field the failure names)
CASES: dict[str, tuple[str, Callable[[BotHarness], Payload], Any, str]] = {
    "pull_request.number is null": (
        "pull_request",
        pr_opened,
        set_at("pull_request.number", None),
        "pull_request.number",
    ),
    "pull_request.number has 30 digits": (
        "pull_request",
        pr_opened,
        raw_at("pull_request.number", b"123456789012345678901234567890"),
        "pull_request.number",
    ),
    "pull_request.base.ref is missing": (
        "pull_request",
        pr_opened,
        remove("pull_request.base.ref"),
        "pull_request.base.ref",
    ),
    "pull_request.base.ref looks like a git option": (
        "pull_request",
        pr_opened,
        set_at("pull_request.base.ref", "--upload-pack=touch /tmp/pwned"),
        "pull_request.base.ref",
    ),
    "pull_request.head.sha is not a SHA": (
        "pull_request",
        pr_opened,
        set_at("pull_request.head.sha", "HEAD~1"),
        "pull_request.head.sha",
    ),
    "pull_request.draft is a string": (
        "pull_request",
        pr_opened,
        set_at("pull_request.draft", "false"),
        "pull_request.draft",
    ),
    "pull_request.labels has 10,000 labels": (
        "pull_request",
        pr_opened,
        set_at("pull_request.labels", [{"name": f"l{i}"} for i in range(10_000)]),
        "pull_request.labels",
    ),
    "installation is a string": ("pull_request", pr_opened, set_at("installation", "1"), "installation"),
    "installation.id is 1e308": (
        "pull_request",
        pr_opened,
        set_at("installation.id", 1e308),
        "installation.id",
    ),
    "installation.id is true": (
        "pull_request",
        pr_opened,
        set_at("installation.id", True),
        "installation.id",
    ),
    "action is an object": ("pull_request", pr_opened, set_at("action", {"opened": 1}), "action"),
    "comment.body is a number": ("issue_comment", retest_comment, set_at("comment.body", 7), "comment.body"),
    "repository.full_name is null": (
        "issue_comment",
        retest_comment,
        set_at("repository.full_name", None),
        "repository.full_name",
    ),
    "repository.full_name climbs out of /repos": (
        "issue_comment",
        retest_comment,
        set_at("repository.full_name", "octo-org/.."),
        "repository.full_name",
    ),
    "repository.full_name is a URL template": (
        "issue_comment",
        retest_comment,
        set_at("repository.full_name", "octo-org/calc{/x}"),
        "repository.full_name",
    ),
    "issue.number is an object": (
        "issue_comment",
        retest_comment,
        set_at("issue.number", {}),
        "issue.number",
    ),
    "check_run.pull_requests.0.number is an object": (
        "check_run",
        rerun_button,
        set_at("check_run.pull_requests.0.number", {}),
        "check_run.pull_requests.0.number",
    ),
    "push after is not a SHA": ("push", default_branch_push, set_at("after", "main"), "after"),
    "installation.account.login is an object": (
        "installation",
        installation_created,
        set_at("installation.account.login", {"$ne": ""}),
        "installation.account.login",
    ),
}


def encoded(payload: Payload, change: Any) -> bytes:
    if isinstance(change, tuple):
        change, raw = change
        change(payload)
        return payloads.encode(payload).replace(json.dumps(MARK).encode(), raw, 1)
    change(payload)
    return payloads.encode(payload)


def assert_failed_at_once(delivery: Delivery, field: str) -> None:
    assert delivery.status == DeliveryStatus.FAILED
    assert delivery.attempts == 1  # deterministic: never retried
    assert delivery.error is not None and "\n" not in delivery.error and len(delivery.error) < 400
    assert delivery.error.startswith(f"malformed payload: {field}: "), delivery.error


def github_calls_to_repos(bot: BotHarness) -> list[str]:
    return [f"{c.method} {c.path}" for c in bot.fake.calls if c.path.startswith("/repos/")]


@pytest.mark.parametrize("case", list(CASES))
async def test_a_malformed_delivery_fails_once_naming_its_field(
    bot: BotHarness, json_logs: io.StringIO, case: str
) -> None:
    event, build, change, field = CASES[case]
    delivery = await deliver(bot, event, encoded(build(bot), change))
    assert_failed_at_once(delivery, field)
    assert github_calls_to_repos(bot) == []  # nothing from the payload reached a URL
    warnings = [line for line in log_lines(json_logs) if line.get("delivery_id") == "d-bad"]
    assert [line["error"] for line in warnings if line["level"] == "warning"] == [delivery.error]
    assert await bot.health() == (200, {"status": "ok", "version": VERSION})
    assert bot.service is not None and not bot.service.supervisor.deaths


@pytest.mark.parametrize(
    ("event", "build"),
    [
        ("pull_request", pr_opened),
        ("issue_comment", retest_comment),
        ("check_run", rerun_button),
        ("push", default_branch_push),
        ("installation", installation_created),
    ],
)
async def test_the_unchanged_payloads_are_handled(bot: BotHarness, event: str, build: Any) -> None:
    # The other side of each case above: the same real payload, unchanged, is handled.
    delivery = await deliver(bot, event, payloads.encode(build(bot)), delivery_id="d-good")
    assert (delivery.status, delivery.error) == (DeliveryStatus.DISPATCHED, None)


async def deliver_deepest(bot: BotHarness, event: str, payload: Payload, path: str) -> Delivery:
    """The payload with an object at ``path`` nested as deep as the intake takes, up to 1,024
    (Python's parser refuses what is deeper than it recurses), delivered."""
    set_at(path, MARK)(payload)
    for depth in range(1_024, 800, -1):
        nested = b'{"a":' * depth + b"1" + b"}" * depth
        body = payloads.encode(payload).replace(json.dumps(MARK).encode(), nested, 1)
        delivery_id = f"d-deep-{depth}"
        status = (
            await bot.post(body, payloads.webhook_headers(event, body, SECRET, delivery_id=delivery_id))
        ).status
        if status == 202:
            break
        assert status == 400, status
    else:
        raise AssertionError("the intake refused every depth")
    return await deliver_recorded(bot, delivery_id)


async def test_repository_full_name_nested_as_deep_as_the_intake_takes(
    bot: BotHarness, json_logs: io.StringIO
) -> None:
    # The deepest nesting the intake parses is a little deeper than what the JSON log renderer
    # can write from inside the dispatcher: logged into the delivery's context, it used to make
    # the dispatcher's own error handling raise, and the dispatcher stopped for good.
    delivery = await deliver_deepest(bot, "issue_comment", retest_comment(bot), "repository.full_name")
    assert_failed_at_once(delivery, "repository.full_name")
    assert "(got an object)" in (delivery.error or "")
    # The dispatcher goes on: the next delivery is handled.
    good = await deliver(bot, "installation", payloads.encode(installation_created(bot)), "d-after")
    assert good.status == DeliveryStatus.DISPATCHED
    assert await bot.health() == (200, {"status": "ok", "version": VERSION})
    assert bot.service is not None and not bot.service.supervisor.deaths


async def test_a_key_no_handler_reads_nested_deep_is_ignored(bot: BotHarness) -> None:
    # GitHub adds keys all the time: one the handlers do not read may hold anything the intake
    # took, even nesting a fixed-depth JSON parser refuses, and the pull request still runs.
    delivery = await deliver_deepest(bot, "pull_request", pr_opened(bot), "pull_request.new_field")
    assert (delivery.status, delivery.error) == (DeliveryStatus.DISPATCHED, None)
    await bot.wait_runs_done()
    assert len(bot.bot_comments()) == 1


@pytest.mark.parametrize(
    ("event", "build", "path", "field"),
    [
        ("issue_comment", retest_comment, "repository.full_name", "repository.full_name"),
        ("issue_comment", retest_comment, "comment.body", "comment.body"),
        ("pull_request", pr_opened, "pull_request.head.ref", "pull_request.head.ref"),
    ],
)
async def test_a_megabyte_value_never_reaches_the_log(
    bot: BotHarness, json_logs: io.StringIO, event: str, build: Any, path: str, field: str
) -> None:
    value = "octo-org/" + "x" * 1_000_000
    delivery = await deliver(bot, event, encoded(build(bot), set_at(path, value)))
    assert_failed_at_once(delivery, field)
    logged = json_logs.getvalue()
    assert "x" * 1_000 not in logged
    assert max(len(line) for line in logged.splitlines()) < 2_000


async def test_after_every_malformed_delivery_a_real_pull_request_runs_end_to_end(bot: BotHarness) -> None:
    for i, (event, build, change, _) in enumerate(CASES.values()):
        body = encoded(build(bot), change)
        assert (
            await bot.post(body, payloads.webhook_headers(event, body, SECRET, delivery_id=f"d-{i}"))
        ).status == 202
    assert await bot.send("pull_request", bot.pr_event("opened")) == 202
    await bot.wait_runs_done()
    assert bot.store.delivery_status_count(DeliveryStatus.FAILED) == len(CASES)
    runs = bot.fake.check_runs(REPO, head_sha=bot.sample.head_sha)
    assert len(runs) == 4 and all(r.states[-1]["status"] == "completed" for r in runs)
    assert len(bot.bot_comments()) == 1


async def test_an_event_no_handler_listens_to_calls_nothing_on_github(bot: BotHarness) -> None:
    star = payloads.event("star", "created", repo_full_name=REPO, installation_id=1, api_url=bot.fake.url)
    delivery = await deliver(bot, "star", payloads.encode(star))
    assert delivery.status == DeliveryStatus.DISPATCHED
    assert bot.fake.calls == []  # not even an installation token


# --- supervision -------------------------------------------------------------------------------------


def rename_table(bot: BotHarness, old: str, new: str) -> None:
    """A database this code cannot read (the fault an upgrade without migrations made)."""
    db = sqlite3.connect(bot.tmp / "bot.db")
    try:
        db.execute(f"ALTER TABLE {old} RENAME TO {new}")
        db.commit()
    finally:
        db.close()


# The loops that read each table: with it gone, each of them stops and is named, whichever first.
@pytest.mark.parametrize(
    ("table", "loops"), [("deliveries", {"dispatcher"}), ("jobs", {"worker-0", "publisher"})]
)
async def test_a_loop_that_stops_is_restarted_and_healthz_names_it_meanwhile(
    bot: BotHarness, json_logs: io.StringIO, table: str, loops: set[str]
) -> None:
    assert await bot.health() == (200, {"status": "ok", "version": VERSION})
    rename_table(bot, table, f"{table}_away")

    async def named_down() -> bool:
        status, body = await bot.health()
        return status == 503 and body["status"] == "unhealthy" and set(body["loops_down"]) == loops

    await bot.wait_for(f"/healthz to name {sorted(loops)}", named_down, timeout=20)
    stopped = [line for line in log_lines(json_logs) if line["event"] == "loop stopped; restarting it"]
    assert {line["loop"] for line in stopped} == loops
    assert all("no such table" in line["error"] for line in stopped)

    rename_table(bot, f"{table}_away", table)

    async def healthy() -> bool:
        return await bot.health() == (200, {"status": "ok", "version": VERSION})

    await bot.wait_for("the loop to run again", healthy, timeout=20)
    # Restarted, it does its work: a pull request is handled and run end to end.
    assert await bot.send("pull_request", bot.pr_event("opened")) == 202
    await bot.wait_runs_done()
    assert len(bot.bot_comments()) == 1
