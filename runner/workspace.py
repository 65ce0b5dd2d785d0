"""The PR's code at its head SHA, in a fresh directory, with the base commit available for diffs.

A bare cache repository per GitHub repository keeps fetches small across runs; each run gets its
own clone of it (``--local``: hard links, no alternates, so the workspace is complete on its own
and can be copied into a container). The installation token goes into git through the
environment, never onto a command line or into a remote URL, where ``ps`` or a log could show it.
"""

from __future__ import annotations

import base64
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import structlog

from runner.git import GitError, git_async

log = structlog.get_logger(__name__)

_SAFE = re.compile(r"[^A-Za-z0-9._-]+")


class WorkspaceError(Exception):
    """The code could not be fetched; the message says which command failed and why."""


@dataclass(frozen=True)
class Workspace:
    path: Path
    head_sha: str
    base_sha: str | None  # the merge base with the PR's base branch, when there is one


def git_auth_env(token: str | None) -> dict[str, str]:
    """Environment that makes git send the installation token as HTTP basic auth."""
    env = {"GIT_TERMINAL_PROMPT": "0", "GIT_ASKPASS": "true"}
    if token:
        basic = base64.b64encode(f"x-access-token:{token}".encode()).decode()
        env |= {
            "GIT_CONFIG_COUNT": "1",
            "GIT_CONFIG_KEY_0": "http.extraHeader",
            "GIT_CONFIG_VALUE_0": f"Authorization: Basic {basic}",
        }
    return env


async def _git(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None) -> str:
    try:
        return await git_async(cwd, *args, env=env)
    except GitError as exc:
        raise WorkspaceError(f"git {args[0]} failed: {exc.last_line}") from None


async def prepare_workspace(
    *,
    clone_url: str,
    repo: str,
    head_sha: str,
    base_ref: str | None,
    run_id: str,
    attempt: int = 1,
    base_sha: str | None = None,
    workspace_root: Path,
    cache_root: Path,
    token: str | None = None,
) -> Workspace:
    """Fetch head (and the base branch, or a base commit) into the cache, then clone the head SHA.

    The workspace's ``base_sha`` is the merge base of head with that base: what the PR changes.
    """
    env = git_auth_env(token)
    cache = cache_root / "repos" / f"{_SAFE.sub('_', repo)}.git"
    if not (cache / "HEAD").exists():
        cache.mkdir(parents=True, exist_ok=True)
        await _git("init", "--bare", "--quiet", str(cache))
    refspecs = [head_sha]
    if base_ref:
        refspecs.append(f"+refs/heads/{base_ref}:refs/heads/{base_ref}")
    elif base_sha:
        refspecs.append(base_sha)
    await _git("fetch", "--quiet", "--no-tags", clone_url, *refspecs, cwd=cache, env=env)
    # Keep the head reachable from a ref so `git clone` copies it.
    await _git("update-ref", f"refs/paritybot/{run_id}", head_sha, cwd=cache)
    # One directory per attempt: a dead attempt's leftover processes never see a retry's files,
    # and the retry never deletes a directory they still use (it is removed at the next start).
    path = workspace_root / workspace_name(run_id, attempt)
    if path.exists():
        shutil.rmtree(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    await _git("clone", "--quiet", "--local", "--no-checkout", str(cache), str(path))
    await _git("checkout", "--quiet", "--detach", head_sha, cwd=path)
    await _git("update-ref", "-d", f"refs/paritybot/{run_id}", cwd=cache)
    base = f"origin/{base_ref}" if base_ref else base_sha
    merge_base = None
    if base:
        try:
            merge_base = await _git("merge-base", head_sha, base, cwd=path)
        except WorkspaceError:
            log.warning("no merge base with the base", base=base)
    return Workspace(path=path, head_sha=head_sha, base_sha=merge_base)


def workspace_name(run_id: str, attempt: int) -> str:
    return f"{_SAFE.sub('_', run_id)}.{attempt}"


_WORKSPACE_NAME = re.compile(r"[A-Za-z0-9_-]+\.\d+")


def remove_workspace(workspace: Workspace) -> None:
    shutil.rmtree(workspace.path, ignore_errors=True)


def remove_stale_workspaces(workspace_root: Path) -> int:
    """Remove the workspaces dead runs left behind (call it before any run starts). Only
    directories named as runs name them are touched, whatever else the folder holds."""
    if not workspace_root.is_dir():
        return 0
    stale = [
        p
        for p in workspace_root.iterdir()
        if _WORKSPACE_NAME.fullmatch(p.name) and p.is_dir() and not p.is_symlink()
    ]
    for path in stale:
        shutil.rmtree(path, ignore_errors=True)
    return len(stale)
