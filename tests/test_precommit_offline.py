"""pre-commit without network, with the contributor's own cache, and with its config under another name."""

from __future__ import annotations

from pathlib import Path

import pytest
from sample_repo import SampleRepo, commit_all, git, make_sample_repo, tool_env

from bot.core.config import ConfigError, parse_repo_config
from bot.core.models import CheckStatus, PrecommitResult
from bot.render.phrases import one_line
from runner.backends.host import HostRunner
from runner.checks.precommit import CONFIG_FILE, run_precommit
from runner.checks.precommit_script import INSTALLED_MARK

REMOTE_HOOKS = """\
repos:
  - repo: https://hooks.example.invalid/pre-commit-hooks
    rev: v1.0.0
    hooks:
      - id: trailing-whitespace
"""


@pytest.fixture
def sample(tmp_path: Path) -> SampleRepo:
    return make_sample_repo(tmp_path)


async def _run(sample: SampleRepo, head: str, store: Path, **options: object) -> PrecommitResult:
    env = {**tool_env(), **options.pop("env", {})}  # type: ignore[dict-item]
    runner = HostRunner(env=env, store_root=store)
    return await run_precommit(runner, sample.path, sample.base_sha, head, "host", 300, **options)  # type: ignore[arg-type]


async def test_hooks_that_cannot_be_downloaded_say_so_and_how_to_go_on(
    sample: SampleRepo, tmp_path: Path
) -> None:
    (sample.path / CONFIG_FILE).write_text(REMOTE_HOOKS)
    head = commit_all(sample.path, "hooks from a host that does not resolve")

    result = await _run(sample, head, tmp_path / "store")

    assert result.status == CheckStatus.ERROR
    assert result.message.startswith(
        "pre-commit could not install its hooks: they are downloaded, and no network was reachable. "
    )
    assert "`checks: {precommit: false}` in .github/paritybot.yml" in result.message
    assert "set PRE_COMMIT_HOME to a pre-commit cache" in result.message
    # The check run's title: whole sentences, never a word cut in two.
    title = one_line(result.message)
    assert (
        title
        == "pre-commit could not install its hooks: they are downloaded, and no network was reachable. …"
    )


def test_a_title_cut_to_its_width_ends_on_a_whole_word() -> None:
    message = "pre-commit failed installing the hook environments (exit code 3): An unexpected error has occurred. Could not resolve host"
    assert one_line(message, 110) == (
        "pre-commit failed installing the hook environments (exit code 3): An unexpected error has occurred. …"
    )
    assert one_line("fatal: unable to access the repository: Could not resolve host: example", 60) == (
        "fatal: unable to access the repository: Could not resolve…"
    )


async def test_the_contributors_pre_commit_home_serves_the_hooks_without_network(
    sample: SampleRepo, tmp_path: Path
) -> None:
    from virtualenv.seed.wheels.embed import BUNDLE_FOLDER

    # A `language: python` hook: pre-commit builds it a virtualenv, which needs an index offline.
    config = sample.path / CONFIG_FILE
    config.write_text(config.read_text().replace("language: system", "language: python"))
    head = commit_all(sample.path, "python hook")
    home = tmp_path / "pre-commit-home"
    warm = {"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(Path(BUNDLE_FOLDER))}
    first = await _run(sample, head, tmp_path / "store", env=warm, home=home)
    assert first.status == CheckStatus.FAILED, first.message
    assert not (home / INSTALLED_MARK).exists()  # the contributor's cache serves other configs too

    empty = tmp_path / "no-wheels"
    empty.mkdir()
    offline = {"PIP_FIND_LINKS": str(empty)}
    reused = await _run(sample, head, tmp_path / "other-store", env=offline, home=home, install_network=False)
    assert reused.status == CheckStatus.FAILED, reused.message
    assert {h.id for h in reused.hooks if h.files_modified} == {"trailing-whitespace"}
    cold = await _run(sample, head, tmp_path / "cold", env=offline, install_network=False)
    assert cold.status == CheckStatus.ERROR and "PRE_COMMIT_HOME" in cold.message


async def test_a_config_under_another_name_is_pointed_out_and_read_where_the_setting_says(
    sample: SampleRepo, tmp_path: Path
) -> None:
    git(sample.path, "mv", CONFIG_FILE, "pre-commit.yaml")
    head = commit_all(sample.path, "another name")

    unread = await _run(sample, head, tmp_path / "store")
    assert unread.status == CheckStatus.NOT_CONFIGURED
    assert unread.message == (
        "the repository has no .pre-commit-config.yaml (it has pre-commit.yaml: set "
        "`precommit: {config: pre-commit.yaml}` in .github/paritybot.yml to use it)"
    )

    setting = parse_repo_config("precommit:\n  config: pre-commit.yaml\n").precommit.config
    read = await _run(sample, head, tmp_path / "store", config_file=setting)
    assert read.status == CheckStatus.FAILED, read.message
    assert {h.id for h in read.hooks} == {"no-print", "trailing-whitespace"}


@pytest.mark.parametrize("path", ["/etc/pre-commit.yaml", "../outside.yaml", "hooks/"])
def test_the_config_setting_names_a_file_of_the_repository(path: str) -> None:
    with pytest.raises(ConfigError, match="relative to the repository's root"):
        parse_repo_config(f"precommit:\n  config: {path}\n")
