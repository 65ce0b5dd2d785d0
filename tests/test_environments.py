"""handlers.decisions.environments: which environments a PR runs in."""

from __future__ import annotations

import pytest

from bot.core.config import RepoConfig, parse_repo_config
from handlers.decisions.environments import choose_environments

CONFIG = parse_repo_config(
    """
environments:
  - name: cpu
    default: true
  - name: cuda12
    branches: [main, "release/*"]
  - name: rocm
    branches: ["release/*"]
    labels: [rocm]
  - name: multi-gpu
    labels: [multi-gpu, distributed]
"""
)


def names(
    config: RepoConfig, base_ref: str | None, labels: list[str], explicit: list[str] | None = None
) -> list[str]:
    choice = choose_environments(config, base_ref, labels, explicit or [])
    assert not choice.errors
    return [e.name for e in choice.environments]


@pytest.mark.parametrize(
    ("base_ref", "expected"),
    [
        ("main", ["cuda12"]),
        ("release/2.4", ["cuda12", "rocm"]),  # every branch rule that matches, in config order
        ("feature/x", ["cpu"]),  # no branch rule: the default environment
        (None, ["cpu"]),  # a run without a base branch
        ("releases/2.4", ["cpu"]),  # globs match whole names
    ],
)
def test_the_base_branch_picks_the_environments(base_ref: str | None, expected: list[str]) -> None:
    assert names(CONFIG, base_ref, []) == expected


def test_labels_add_environments_once_after_the_branch_ones() -> None:
    assert names(CONFIG, "main", ["distributed", "multi-gpu", "bug"]) == ["cuda12", "multi-gpu"]
    assert names(CONFIG, "release/2.4", ["rocm"]) == ["cuda12", "rocm"]  # already chosen by branch
    assert names(CONFIG, "feature/x", ["rocm"]) == ["cpu", "rocm"]


def test_explicit_names_win_over_branches_and_labels_in_the_order_given_each_once() -> None:
    assert names(CONFIG, "main", ["multi-gpu"], ["rocm", "cpu", "rocm"]) == ["rocm", "cpu"]


def test_unknown_explicit_names_are_errors_naming_what_the_config_defines() -> None:
    choice = choose_environments(CONFIG, "main", [], ["cuda12", "cuda13", "tpu"])
    assert choice.environments == []
    assert choice.errors == [
        "unknown environment `cuda13`; this repository defines `cpu`, `cuda12`, `rocm`, `multi-gpu`",
        "unknown environment `tpu`; this repository defines `cpu`, `cuda12`, `rocm`, `multi-gpu`",
    ]


def test_without_a_default_flag_the_first_environment_is_the_default() -> None:
    config = parse_repo_config("environments:\n  - name: a\n  - name: b\n    branches: [main]\n")
    assert names(config, "dev", []) == ["a"]


def test_a_repository_without_a_config_runs_in_its_one_default_environment() -> None:
    assert names(RepoConfig(), "main", ["anything"]) == ["default"]
