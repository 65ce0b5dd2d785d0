"""Fuzzed deliveries against the running service: GitHub's real examples with values changed
(tests/delivery_fuzz.py), signed and mis-signed, through the real web app, store and dispatcher,
against the fake GitHub (which fails the test on any request GitHub would refuse).

Each delivery is answered without a 5xx (202, or 400 for a body the intake cannot parse; 401
when mis-signed), then handled or recorded as failed with one line, at once when its payload is
malformed; no loop of the service stops. Afterwards the service still runs a real pull request end
to end. benchmarks/delivery_fuzz.py runs the same with 10,000 bodies and prints the figures.
"""

from __future__ import annotations

import asyncio
from collections import Counter

from botharness import REPO, SECRET, BotHarness, bot
from delivery_fuzz import FuzzDelivery, Target, mis_signed_deliveries, signed_deliveries
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bot.core.models import RunState
from bot.core.release import VERSION
from bot.service.store.records import DeliveryStatus

__all__ = ["bot"]  # the fixture, imported for pytest

EXAMPLES = 300


async def check_one(bot: BotHarness, delivery: FuzzDelivery, signed: bool, seen: Counter[str]) -> None:
    status = (await bot.post(delivery.body, delivery.headers)).status
    seen[f"HTTP {status}"] += 1
    # A signed ping is answered 200 at once, as GitHub expects, and never stored.
    ping = delivery.event == "ping"
    expected = ((200, 400) if ping else (202, 400)) if signed else (401,)
    assert status in expected, (status, delivery)
    if status == 202:
        delivery_id = delivery.headers["X-GitHub-Delivery"]
        await bot.wait_for(
            "the delivery to be handled or failed",
            lambda: bot.store.delivery_status(delivery_id) != DeliveryStatus.RECEIVED,
            timeout=60,
        )
        record = bot.store.delivery(delivery_id)
        assert record is not None
        seen[record.status.value] += 1
        if record.status == DeliveryStatus.FAILED:
            assert record.error and "\n" not in record.error and len(record.error) <= 500, (record, delivery)
            if record.error.startswith("malformed payload"):
                assert record.attempts == 1, (record, delivery)
    assert bot.service is not None and not bot.service.supervisor.deaths, delivery
    assert await bot.health() == (200, {"status": "ok", "version": VERSION}), delivery


async def test_fuzzed_deliveries_never_stop_the_service(bot: BotHarness) -> None:
    assert bot.service is not None
    bot.service.dispatcher.retry_base_delay_s = 0.01  # GitHub's 404s for unknown repositories
    target = Target(REPO, bot.clone_url, 1, bot.fake.url, SECRET)
    loop = asyncio.get_running_loop()
    seen: Counter[str] = Counter()

    # Hypothesis drives from a thread; each delivery is sent and checked on the test's loop.
    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(
        st.one_of(
            signed_deliveries(target).map(lambda d: (d, True)),
            mis_signed_deliveries(target).map(lambda d: (d, False)),
        )
    )
    def each(case: tuple[FuzzDelivery, bool]) -> None:
        asyncio.run_coroutine_threadsafe(check_one(bot, *case, seen), loop).result(timeout=120)

    await asyncio.to_thread(each)
    print(dict(seen))
    assert seen["HTTP 202"] > EXAMPLES // 3 and seen["HTTP 401"] > 0, seen

    # Afterwards, a real pull request still runs end to end.
    assert await bot.send("pull_request", bot.pr_event("opened")) == 202

    def real_run_done() -> bool:
        jobs = [j for j in bot.store.jobs_for_pr(REPO, 7) if j.head_sha == bot.sample.head_sha]
        return bool(jobs) and all(
            j.state not in (RunState.QUEUED, RunState.RUNNING)
            and j.check_runs
            and all(bot.fake.check_run(c).states[-1]["status"] == "completed" for c in j.check_runs.values())
            for j in jobs
        )

    await bot.wait_for("the real pull request's run", real_run_done, timeout=240)
    [summary] = bot.bot_comments()
    assert bot.sample.head_sha[:7] in summary.body
