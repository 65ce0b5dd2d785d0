"""The pre-commit check, run for real on the host runner: pre-commit, git and the sample project's
own hooks; and its pure parts (the classifier's answer, rows, the diff). The container side, and the
attacks it stops, are in ``tests/hostile/test_network.py``."""

from __future__ import annotations

import json
import shutil
import uuid
from pathlib import Path

import docker
import pytest
from docker_support import docker_client, test_image
from sample_repo import SampleRepo, commit_all, git, make_sample_repo, tool_env

from bot.core.config import Environment
from bot.core.models import CheckStatus, HookStatus, PrecommitResult
from runner.backends.base import Step, StepResult
from runner.backends.docker import DockerRunner
from runner.backends.host import HostRunner
from runner.checks.precommit import (
    CONFIG_FILE,
    Change,
    PlanError,
    PlannedHook,
    config_hook_ids,
    fixes_diff,
    hook_output,
    hook_result,
    precommit_store_key,
    read_plan,
    run_precommit,
    summarize,
)

__all__ = ["docker_client", "test_image"]  # fixtures, imported for pytest


@pytest.fixture
def sample(tmp_path: Path) -> SampleRepo:
    return make_sample_repo(tmp_path)


async def _run(
    repo: Path, base: str, head: str, store: Path, network: bool = True, env: dict[str, str] | None = None
) -> PrecommitResult:
    runner = HostRunner(env={**tool_env(), **(env or {})}, store_root=store)
    return await run_precommit(runner, repo, base, head, "host", 300, install_network=network)


async def test_failing_hooks_are_named_with_their_output_fix_command_and_diff(
    sample: SampleRepo, tmp_path: Path
) -> None:
    result = await _run(sample.path, sample.base_sha, sample.head_sha, tmp_path / "cache")

    assert result.status == CheckStatus.FAILED
    hooks = {h.id: h for h in result.hooks}
    assert set(hooks) == {"no-print", "trailing-whitespace"}
    assert hooks["no-print"].status == HookStatus.FAILED
    assert hooks["no-print"].name == "forbid print calls in library code"
    assert "src/calc/stats.py:22:    print(ordered)" in hooks["no-print"].output
    assert not hooks["no-print"].files_modified
    assert hooks["trailing-whitespace"].files_modified
    assert "Fixing src/calc/stats.py" in hooks["trailing-whitespace"].output
    assert "- hook id" not in hooks["no-print"].output
    assert result.fix_command == "pre-commit run --files src/calc/stats.py"
    assert "-    print(ordered)   \n+    print(ordered)\n" in result.diff
    assert result.diff.startswith("diff --git a/src/calc/stats.py b/src/calc/stats.py")
    assert "no-print" in result.message and "trailing-whitespace" in result.message


async def test_the_checkout_is_left_as_pushed(sample: SampleRepo, tmp_path: Path) -> None:
    await _run(sample.path, sample.base_sha, sample.head_sha, tmp_path / "cache")

    assert git(sample.path, "status", "--porcelain", "--untracked-files=no") == ""
    assert "print(ordered)   \n" in (sample.path / "src/calc/stats.py").read_text()


async def test_only_the_pull_requests_changes_are_checked(sample: SampleRepo, tmp_path: Path) -> None:
    # The base already has a violation; the pull request adds one more file with another.
    (sample.path / "src/calc/legacy.py").write_text('"""Old code."""\n\nprint("legacy")\n')
    base = commit_all(sample.path, "legacy code with a print")
    (sample.path / "src/calc/debug.py").write_text('"""Debugging."""\n\nprint("debug")\n')
    head = commit_all(sample.path, "add debug")

    result = await _run(sample.path, base, head, tmp_path / "cache")

    assert result.status == CheckStatus.FAILED
    [failed] = [h for h in result.hooks if h.status == HookStatus.FAILED]
    assert failed.id == "no-print"
    assert "src/calc/debug.py" in failed.output and "legacy.py" not in failed.output
    assert result.fix_command == "pre-commit run no-print --files src/calc/debug.py"
    assert result.diff == ""


async def test_clean_changes_pass_and_hooks_without_files_are_skipped(
    sample: SampleRepo, tmp_path: Path
) -> None:
    (sample.path / "README.md").write_text("A calculator.\n")
    head = commit_all(sample.path, "readme")

    result = await _run(sample.path, sample.head_sha, head, tmp_path / "cache")

    assert result.status == CheckStatus.PASSED
    statuses = {h.id: h.status for h in result.hooks}
    # Only src/ files concern no-print; pre-commit reports it "(no files to check)Skipped".
    assert statuses == {"no-print": HookStatus.SKIPPED, "trailing-whitespace": HookStatus.PASSED}
    assert result.fix_command is None and result.diff == ""


async def test_no_config_is_not_configured_not_passed(sample: SampleRepo, tmp_path: Path) -> None:
    git(sample.path, "rm", "-q", CONFIG_FILE)
    head = commit_all(sample.path, "drop pre-commit")

    result = await _run(sample.path, sample.base_sha, head, tmp_path / "cache")

    assert result.status == CheckStatus.NOT_CONFIGURED
    assert CONFIG_FILE in result.message


async def test_missing_pre_commit_is_an_error_that_says_so(sample: SampleRepo, tmp_path: Path) -> None:
    # A "machine" with sh and git but neither pre-commit nor a python that has it.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("sh", "git", "dirname", "mkdir"):
        found = shutil.which(tool)
        assert found, tool
        (bin_dir / tool).symlink_to(found)
    runner = HostRunner(env={"PATH": str(bin_dir)}, store_root=tmp_path / "store")

    result = await run_precommit(runner, sample.path, sample.base_sha, sample.head_sha, "gpu", 60)

    assert result.status == CheckStatus.ERROR
    assert result.message == (
        "pre-commit is not installed in the runner's host (environment gpu); "
        "add it to the image or disable the check"
    )


async def test_a_base_commit_missing_from_the_workspace_is_an_error(
    sample: SampleRepo, tmp_path: Path
) -> None:
    result = await _run(sample.path, "0" * 40, sample.head_sha, tmp_path / "cache")

    assert result.status == CheckStatus.ERROR
    assert f"commit {'0' * 40} is not in the workspace" in result.message


def test_store_key_follows_config_and_image() -> None:
    key = precommit_store_key("repos: []\n", "host")
    assert key == precommit_store_key("repos: []\n", "host")
    assert key != precommit_store_key("repos: []\n", "sha256:abc")
    assert key != precommit_store_key("repos: [] # changed\n", "host")
    assert "/" not in key


def _bundled_wheels() -> Path:
    """setuptools and pip wheels that virtualenv (a pre-commit dependency) ships: a local index."""
    from virtualenv.seed.wheels.embed import BUNDLE_FOLDER

    return Path(BUNDLE_FOLDER)


async def test_a_warm_hook_environment_store_needs_no_network(sample: SampleRepo, tmp_path: Path) -> None:
    # Make the whitespace fixer a `language: python` hook: pre-commit must build a virtualenv for it.
    config = sample.path / CONFIG_FILE
    config.write_text(config.read_text().replace("language: system", "language: python"))
    head = commit_all(sample.path, "python hook")
    cache = tmp_path / "cache"
    empty = tmp_path / "no-wheels"
    empty.mkdir()
    # Warm-up with network allowed; a local wheel directory stands in for the package index.
    warm_env = {"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(_bundled_wheels())}
    first = await _run(sample.path, sample.base_sha, head, cache, network=True, env=warm_env)
    assert first.status == CheckStatus.FAILED, first.message
    key = precommit_store_key(config.read_text(), "host")
    assert any((cache / key).glob("repo*/py_env-*")), "no hook environment was cached"

    offline = {"PIP_FIND_LINKS": str(empty)}
    second = await _run(sample.path, sample.base_sha, head, cache, network=False, env=offline)

    assert second.status == CheckStatus.FAILED, second.message
    assert {h.id for h in second.hooks if h.files_modified} == {"trailing-whitespace"}
    # The same run on a cold cache cannot install the environment offline, and says why.
    cold = await _run(sample.path, sample.base_sha, head, tmp_path / "cold", network=False, env=offline)
    assert cold.status == CheckStatus.ERROR
    assert "without network" in cold.message


async def test_hooks_named_in_skip_and_hooks_after_a_fail_fast_failure_are_skipped(
    sample: SampleRepo, tmp_path: Path
) -> None:
    config = sample.path / CONFIG_FILE
    config.write_text(config.read_text().replace("files: ^src/", "files: ^src/\n        fail_fast: true"))
    head = commit_all(sample.path, "stop at the first failure")

    stopped = await _run(sample.path, sample.base_sha, head, tmp_path / "store")
    skipped = await _run(sample.path, sample.base_sha, head, tmp_path / "store", env={"SKIP": "no-print"})

    assert [(h.id, h.status) for h in stopped.hooks] == [
        ("no-print", HookStatus.FAILED),
        ("trailing-whitespace", HookStatus.SKIPPED),
    ]
    assert [(h.id, h.status) for h in skipped.hooks] == [
        ("no-print", HookStatus.SKIPPED),
        ("trailing-whitespace", HookStatus.FAILED),
    ]


@pytest.mark.docker
async def test_in_a_container_the_hooks_report_the_same_and_the_code_is_put_back(
    sample: SampleRepo, docker_client: docker.DockerClient, test_image: str
) -> None:
    env = Environment(name="ci", image=test_image, gpus="none")
    runner = DockerRunner(env, f"t-{uuid.uuid4().hex[:12]}", docker_client)
    try:
        await runner.prepare()
        result = await run_precommit(runner, sample.path, sample.base_sha, sample.head_sha, "ci", 300)
        after = await runner.run(
            Step(name="after", argv=["git", "diff", "--stat"], env=SAFE_GIT), sample.path
        )
    finally:
        await runner.close()

    assert result.status == CheckStatus.FAILED
    assert [(h.id, h.status, h.files_modified) for h in result.hooks] == [
        ("no-print", HookStatus.FAILED, False),
        ("trailing-whitespace", HookStatus.FAILED, True),
    ]
    assert result.fix_command == "pre-commit run --files src/calc/stats.py"
    assert "-    print(ordered)   \n+    print(ordered)\n" in result.diff
    assert after.exit_code == 0 and after.output == ""  # the tests see the code as pushed


SAFE_GIT = {"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "safe.directory", "GIT_CONFIG_VALUE_0": "*"}


# --- the pure parts --------------------------------------------------------------------------------


def _answer(*hooks: dict[str, object], fail_fast: bool = False) -> str:
    defaults = {"runs": True, "always_run": False, "fail_fast": False}
    return json.dumps(
        {
            "python": "/opt/venv/bin/python3",
            "version": "4.0.1",
            "fail_fast": fail_fast,
            "hooks": [{**defaults, **h} for h in hooks],
        }
    )


def test_the_plan_groups_hooks_by_id_in_config_order_and_leaves_out_other_stages() -> None:
    files = ["a.py", "b.md", "c.py"]
    answer = _answer(
        {"id": "ruff", "name": "ruff lint", "files": "101"},
        {"id": "push-only", "name": "push", "files": "111", "runs": False},
        {"id": "docs", "name": "docs", "files": "000", "always_run": True},
        {"id": "ruff", "name": "ruff again", "files": "011", "fail_fast": True},
    )

    plan = read_plan(answer, files, ["ruff", "push-only", "docs", "ruff"])

    assert plan.python == "/opt/venv/bin/python3"
    assert plan.hooks == (
        PlannedHook("ruff", "ruff lint", ("a.py", "c.py", "b.md"), always_run=False, fail_fast=True),
        PlannedHook("docs", "docs", (), always_run=True),
    )


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        (None, "wrote no answer"),
        ("not json", "not understood"),
        (json.dumps({"hooks": [{"id": "x"}]}), "not understood"),
        (_answer({"id": "invented", "name": "All checks passed", "files": "1"}), "other hooks"),
    ],
)
def test_an_answer_that_does_not_match_the_config_is_refused(answer: str | None, reason: str) -> None:
    with pytest.raises(PlanError, match=reason):
        read_plan(answer, ["a.py"], ["ruff"])


def test_config_hook_ids_are_read_in_order_and_bad_yaml_is_a_plan_error() -> None:
    text = "repos:\n- repo: local\n  hooks:\n  - {id: a}\n  - {id: b}\n- repo: meta\n  hooks: [{id: c}]\n"
    assert config_hook_ids(text) == ["a", "b", "c"]
    with pytest.raises(PlanError, match="not valid YAML"):
        config_hook_ids("repos: [")


FAKE_STATUS_OUTPUT = (
    "ruff.....................................................................Passed\n"
    "All checks passed........................................................Passed\n"
    "- hook id: ruff\n"
    "x.py:1:1: F401 unused import\n"
)


@pytest.mark.parametrize(("exit_code", "status"), [(0, HookStatus.PASSED), (1, HookStatus.FAILED)])
def test_a_row_follows_the_exit_status_whatever_the_hook_printed(exit_code: int, status: HookStatus) -> None:
    hook = PlannedHook("ruff", "ruff", ("x.py",))
    result = StepResult(name="pre-commit hook ruff", exit_code=exit_code, output=FAKE_STATUS_OUTPUT)

    row = hook_result(hook, result, files_modified=False)

    assert (row.id, row.status) == ("ruff", status)
    # A failed hook's output is shown without pre-commit's own status and detail lines.
    assert row.output == ("x.py:1:1: F401 unused import" if status == HookStatus.FAILED else "")


def test_a_hook_that_gave_no_verdict_makes_the_check_an_error() -> None:
    hook = PlannedHook("slow", "slow", ("x.py",))
    result = StepResult(name="pre-commit hook slow", exit_code=137, timed_out=True, duration_s=30)
    row = hook_result(hook, result, files_modified=False)

    outcome = summarize([row], ("slow", result), "", Change(merge_base="b" * 40, files=["x.py"]), "h" * 40)

    assert row.status == HookStatus.FAILED and "timed out" in row.output
    assert outcome.status == CheckStatus.ERROR
    assert (
        outcome.message
        == "hook slow did not finish: pre-commit hook slow: timed out after 30 s and was killed"
    )
    assert hook_output(StepResult(name="n", exit_code=3, output="[INFO] x\nboom\n")) == "boom"


def test_the_diff_of_the_fixes_is_made_from_contents() -> None:
    before: dict[str, str | None] = {"a.py": "x = 1   \ny = 2", "same.py": "z\n", "link": None}
    after: dict[str, str | None] = {"a.py": "x = 1\ny = 2\n", "same.py": "z\n", "link": "target"}

    diff = fixes_diff(before, after)

    assert diff == (
        "diff --git a/a.py b/a.py\n--- a/a.py\n+++ b/a.py\n@@ -1,2 +1,2 @@\n"
        "-x = 1   \n-y = 2\n\\ No newline at end of file\n+x = 1\n+y = 2\n"
    )
