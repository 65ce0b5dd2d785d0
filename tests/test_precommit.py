"""The pre-commit check, run for real: pre-commit, git and the sample project's own hooks."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from sample_repo import SampleRepo, commit_all, git, make_sample_repo, tool_env

from bot.models import CheckStatus, HookStatus, PrecommitResult
from runner.host import HostRunner
from runner.precommit import CONFIG_FILE, parse_output, precommit_cache_key, run_precommit


@pytest.fixture
def sample(tmp_path: Path) -> SampleRepo:
    return make_sample_repo(tmp_path)


async def _run(
    repo: Path, base: str, head: str, cache: Path, network: bool = False, env: dict[str, str] | None = None
) -> PrecommitResult:
    runner = HostRunner(env={**tool_env(), **(env or {})})
    return await run_precommit(runner, repo, base, head, "host", 300, network, cache_root=str(cache))


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
    runner = HostRunner(env={"PATH": str(bin_dir)})

    result = await run_precommit(runner, sample.path, sample.base_sha, sample.head_sha, "gpu", 60, False)

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


def test_cache_key_follows_config_and_image() -> None:
    key = precommit_cache_key("repos: []\n", "host")
    assert key == precommit_cache_key("repos: []\n", "host")
    assert key != precommit_cache_key("repos: []\n", "sha256:abc")
    assert key != precommit_cache_key("repos: [] # changed\n", "host")
    assert "/" not in key


def _bundled_wheels() -> Path:
    """setuptools and pip wheels that virtualenv (a pre-commit dependency) ships: a local index."""
    from virtualenv.seed.wheels.embed import BUNDLE_FOLDER

    return Path(BUNDLE_FOLDER)


async def test_a_warm_hook_environment_cache_needs_no_network(sample: SampleRepo, tmp_path: Path) -> None:
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
    key = precommit_cache_key(config.read_text(), "host")
    assert any((cache / key).glob("repo*/py_env-*")), "no hook environment was cached"

    offline = {"PIP_FIND_LINKS": str(empty)}
    second = await _run(sample.path, sample.base_sha, head, cache, network=False, env=offline)

    assert second.status == CheckStatus.FAILED, second.message
    assert {h.id for h in second.hooks if h.files_modified} == {"trailing-whitespace"}
    # The same run on a cold cache cannot install the environment offline, and says why.
    cold = await _run(sample.path, sample.base_sha, head, tmp_path / "cold", network=False, env=offline)
    assert cold.status == CheckStatus.ERROR
    assert "without network" in cold.message


def test_parse_output_reads_statuses_notes_and_errors() -> None:
    output = (
        "paritybot: merge base abc123\n"
        "[INFO] Initializing environment for local.\n"
        "check.yaml.............................................(no files to check)Skipped\n"
        "mypy...................................................................Passed\n"
        "- hook id: mypy\n"
        "- duration: 1.2s\n"
        "\n"
        "Success: no issues found\n"
        "An unexpected error has occurred: CalledProcessError: command: ('pip', 'install', '.')\n"
        "return code: 1\n"
    )
    parsed = parse_output(output)

    assert [(h.name, h.status) for h in parsed.hooks] == [
        ("check.yaml", HookStatus.SKIPPED),
        ("mypy", HookStatus.PASSED),
    ]
    assert parsed.hooks[1].id == "mypy"
    assert parsed.merge_base == "abc123"
    assert parsed.errors[0].startswith("An unexpected error has occurred: CalledProcessError")
    assert parsed.diff == ""
