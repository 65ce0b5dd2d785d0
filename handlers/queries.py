"""Reads from GitHub that handlers need: the repository's config, and facts that settle trust."""

from __future__ import annotations

import base64

from gidgethub import BadRequest
from gidgethub.abc import GitHubAPI

from bot.core.config import CONFIG_PATH, ConfigError, RepoConfig, parse_repo_config
from handlers.decisions.trust import Lookup, UserFacts


async def fetch_repo_config(gh: GitHubAPI, repo: str, ref: str) -> RepoConfig:
    """The config on ``ref`` (the PR's base branch: a PR must not rewrite its own rules).

    No file means the defaults; a bad file raises ConfigError naming each problem.
    """
    try:
        data = await gh.getitem(f"/repos/{repo}/contents/{CONFIG_PATH}{{?ref}}", url_vars={"ref": ref})
    except BadRequest as exc:
        if exc.status_code == 404:
            return parse_repo_config(None)
        raise
    if not isinstance(data, dict) or data.get("type") != "file":
        raise ConfigError([f"expected a file, found {type(data).__name__}"])
    try:
        text = base64.b64decode(data.get("content") or "").decode("utf-8")
    except (ValueError, UnicodeDecodeError):
        raise ConfigError(["the file is not UTF-8 text"]) from None
    return parse_repo_config(text)


async def lookup_user_facts(gh: GitHubAPI, repo: str, lookup: Lookup) -> UserFacts | None:
    """Make exactly the calls ``lookup`` asks for; None when it asks for none."""
    if not lookup.needed:
        return None
    permission = None
    if lookup.permission:
        try:
            data = await gh.getitem(
                f"/repos/{repo}/collaborators/{{user}}/permission", url_vars={"user": lookup.login}
            )
            permission = str(data.get("permission") or "none")
        except BadRequest as exc:
            if exc.status_code != 404:
                raise
            permission = "none"
    team_member = None
    if lookup.teams:
        team_member = False
        for team in lookup.teams:
            org, _, slug = team.partition("/")
            try:
                data = await gh.getitem(
                    "/orgs/{org}/teams/{slug}/memberships/{user}",
                    url_vars={"org": org, "slug": slug, "user": lookup.login},
                )
            except BadRequest as exc:
                if exc.status_code != 404:
                    raise
                continue
            if data.get("state") == "active":
                team_member = True
                break
    return UserFacts(permission=permission, team_member=team_member)
