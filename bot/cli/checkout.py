"""The user's own checkout, as the local commands take it: where it is, which commits the options
name, and where paritybot keeps what it needs for it outside the checkout.

Every mistake in an option is a :class:`UsageError` that names the option and its value, so the
command prints one line and exits 2. Nothing here writes into the checkout: the cached clone the
runs start from, their working directories and the coverage maps live under the user's cache
directory (:func:`cache_dir`), so ``git status`` in the checkout stays as the user left it.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import platformdirs

from runner.git import GitError, git

COVERAGE_DIR_ENV = "PARITYBOT_COVERAGE_DIR"


class UsageError(Exception):
    """Something the user gave cannot be used (a path, a revision, a file, a config): one line."""


def open_checkout(path: Path, option: str = "--repo") -> Path:
    """The top directory of the git checkout at or above ``path``.

    Raises:
        UsageError: ``path`` does not exist, is not a directory or is not in a git checkout.
    """
    if not path.exists():
        raise UsageError(f"{option} {path}: no such directory")
    if not path.is_dir():
        raise UsageError(f"{option} {path}: not a directory")
    try:
        return Path(git(path, "rev-parse", "--show-toplevel")).resolve()
    except GitError:
        raise UsageError(f"{option} {path}: not a git checkout") from None


def commit_of(repo: Path, rev: str, option: str) -> str:
    """The full sha of the commit ``rev`` names in ``repo``.

    Raises:
        UsageError: no branch, tag or commit of that name (or it names a tree or a blob).
    """
    try:
        return git(repo, "rev-parse", "--verify", "--quiet", "--end-of-options", f"{rev}^{{commit}}")
    except GitError:
        raise UsageError(f"{option} {rev}: no such branch, tag or commit in {repo}") from None


def cache_root() -> Path:
    """paritybot's directory in the user's cache (``$XDG_CACHE_HOME/paritybot`` on Linux)."""
    return platformdirs.user_cache_path("paritybot")


def cache_dir(repo: Path) -> Path:
    """Where the local runs of the checkout ``repo`` keep their clone, working trees and maps.

    One directory per checkout, named after it and told apart by a hash of its path, so two
    checkouts called ``project`` never share one.
    """
    top = repo.resolve()
    digest = hashlib.sha256(str(top).encode()).hexdigest()[:12]
    return cache_root() / "checkouts" / f"{top.name}-{digest}"


def coverage_dir(repo: Path, cache: Path | None = None) -> Path:
    """Where the coverage maps of ``repo`` live: ``$PARITYBOT_COVERAGE_DIR``, else under its cache
    directory (``cache``, or :func:`cache_dir`'s)."""
    configured = os.environ.get(COVERAGE_DIR_ENV)
    return Path(configured) if configured else (cache or cache_dir(repo)) / "coverage"
