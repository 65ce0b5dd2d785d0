"""Which environments a PR runs in: base-branch rules, labels, or an explicit `env=NAME`."""

from __future__ import annotations

from collections.abc import Iterable

from pydantic import BaseModel, Field

from bot.core.config import Environment, RepoConfig


class EnvironmentChoice(BaseModel):
    environments: list[Environment] = Field(default_factory=list)
    errors: list[str] = Field(default_factory=list)


def choose_environments(
    config: RepoConfig, base_ref: str | None, labels: Iterable[str], explicit: Iterable[str] = ()
) -> EnvironmentChoice:
    """Explicit names win; otherwise the base branch's environments (or the default) plus label ones.

    Several matching environments give several runs, one per environment.
    """
    names = list(dict.fromkeys(explicit))
    if names:
        unknown = [n for n in names if config.environment(n) is None]
        if unknown:
            known = ", ".join(f"`{e.name}`" for e in config.environments)
            return EnvironmentChoice(
                errors=[f"unknown environment `{n}`; this repository defines {known}" for n in unknown]
            )
        return EnvironmentChoice(environments=[e for n in names if (e := config.environment(n)) is not None])
    by_branch = [e for e in config.environments if e.matches_branch(base_ref)]
    chosen = by_branch or [config.default_environment()]
    label_set = set(labels)
    chosen += [e for e in config.environments if label_set.intersection(e.labels) and e not in chosen]
    return EnvironmentChoice(environments=chosen)
