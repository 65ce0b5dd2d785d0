"""End to end, what the App reports beyond pass and fail: annotations on the test's own line, a
parity table of what the project uses, and the default branch's coverage map as a check run."""

from __future__ import annotations

import os
import subprocess

import payloads
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


async def test_a_default_branch_map_that_is_not_recorded_fails_its_check_run_with_the_reason(
    bot: BotHarness,
) -> None:
    # The default branch's own config deselects every test: no test runs, so no map is kept.
    sample = bot.sample.path

    def git(*args: str) -> str:
        env = {**os.environ, "GIT_AUTHOR_NAME": "a", "GIT_AUTHOR_EMAIL": "a@b"}
        env |= {"GIT_COMMITTER_NAME": "a", "GIT_COMMITTER_EMAIL": "a@b"}
        done = subprocess.run(["git", *args], cwd=sample, check=True, capture_output=True, text=True, env=env)
        return done.stdout.strip()

    git("checkout", "-q", "main")
    (sample / ".github").mkdir(exist_ok=True)
    config = 'tests:\n  pytest_args: ["-k", "no_such_test"]\n'
    (sample / ".github" / "paritybot.yml").write_text(config)
    git("add", ".github/paritybot.yml")
    git("commit", "-qm", "ci: deselect everything")
    git("push", "-q", str(bot.tmp / "remote.git"), "HEAD:main")
    after = git("rev-parse", "HEAD")
    bot.fake.set_file(REPO, ".github/paritybot.yml", config, ref=after)  # what GitHub's API serves
    push = payloads.event(
        "push", repo_full_name=REPO, clone_url=bot.clone_url, installation_id=1, api_url=bot.fake.url
    )
    push.update(ref="refs/heads/main", after=after, deleted=False)
    push["repository"]["default_branch"] = "main"
    assert await bot.send("push", push) == 202

    await bot.wait_for("the map's check run", lambda: bool(bot.fake.check_runs(REPO, head_sha=after)))
    await bot.wait_for(
        "it to complete",
        lambda: bot.fake.check_runs(REPO, head_sha=after)[0].states[-1]["status"] == "completed",
    )
    [mapped] = bot.fake.check_runs(REPO, head_sha=after)
    final = mapped.states[-1]
    assert mapped.name == "paritybot / coverage map (default)"
    assert final["conclusion"] == "failure", final["output"]
    assert final["output"]["title"].startswith("Not recorded: coverage map not recorded: no test ran")
