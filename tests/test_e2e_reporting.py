"""End to end, what the App reports beyond pass and fail: annotations on the test's own line, a
parity table of what the project uses, and the default branch's coverage map as a check run."""

from __future__ import annotations

from botharness import REPO, BotHarness, bot

__all__ = ["bot"]  # the fixture, imported for pytest

# The sample's mean() raises on an empty list: the error comes from src/calc/stats.py, and
# pytest's report names this test's own line 5 as where the test was when it did.
LIBRARY_ERROR_TEST = (
    "from calc.stats import mean\n\n\ndef test_mean_of_nothing():\n    assert mean([]) == 0\n"
)


async def test_an_error_raised_in_the_library_is_annotated_at_the_test_s_own_line(bot: BotHarness) -> None:
    head = bot.commit_on_feature("tests/test_empty.py", LIBRARY_ERROR_TEST, "test: the mean of nothing")
    assert await bot.send("pull_request", bot.pr_event("opened", head_sha=head)) == 202
    await bot.wait_runs_done()

    [tests_run] = [
        r for r in bot.fake.check_runs(REPO, head_sha=head) if r.name.startswith("paritybot / tests")
    ]
    placed = {(a["path"], a["start_line"]) for a in tests_run.annotations}
    assert ("tests/test_empty.py", 5) in placed
    assert ("tests/test_empty.py", 1) not in placed


async def test_a_project_without_torch_gets_no_torch_rows_and_no_paste_request(bot: BotHarness) -> None:
    assert await bot.send("pull_request", bot.pr_event("opened")) == 202
    await bot.wait_runs_done()

    runs = bot.fake.check_runs(REPO, head_sha=bot.sample.head_sha)
    [parity] = [r for r in runs if r.name == "paritybot / parity (default)"]
    summary = parity.states[-1]["output"]["summary"]
    body = bot.bot_comments()[0].body
    for text in (summary, body):
        assert "| PyTorch |" not in text and "| cuDNN |" not in text and "| NVIDIA driver |" not in text
        assert "torch.utils.collect_env" not in text
        assert "| Python |" in text
    assert "the project neither depends on nor imports PyTorch or a GPU library" in body
