"""Running git: the one wrapper for every git command paritybot runs on its own host.

Settings that would change git's output (colour, path quoting, prefixes, external diff tools) are
pinned per call, prompts are off and the locale is C, so a user's or the machine's git config
cannot break what is parsed. Every failure raises :class:`GitError` carrying git's own stderr, so
the user sees the real reason. :func:`git` blocks (callers in async code use a thread);
:func:`git_async` is for the long fetches and clones of a run, which must be cancellable.
"""

from __future__ import annotations

import asyncio
import io
import os
import subprocess
import tarfile
from collections.abc import Mapping
from pathlib import Path

from runner.safe_tar import extract_all

_PINNED = ["-c", "core.quotePath=false", "-c", "diff.noprefix=false", "-c", "color.ui=never"]
_ENV = {"LC_ALL": "C", "GIT_TERMINAL_PROMPT": "0", "GIT_PAGER": "cat"}


class GitError(RuntimeError):
    """A git command failed; ``stderr`` holds git's own explanation."""

    def __init__(self, argv: list[str], returncode: int, stderr: str):
        self.argv = argv
        self.returncode = returncode
        self.stderr = stderr.strip()
        # git can follow its reason with a whole usage text; the first lines carry the reason.
        reason = " ".join(self.stderr.splitlines()[:3])[:500]
        super().__init__(f"`git {' '.join(argv)}` failed (exit {returncode}): {reason}")

    @property
    def last_line(self) -> str:
        """git's last line of stderr (its conclusion), or the exit code when it said nothing."""
        lines = self.stderr.splitlines()
        return lines[-1] if lines else f"exit code {self.returncode}"


def _argv(repo: Path | None, args: list[str]) -> list[str]:
    return ["git", *(["-C", str(repo)] if repo is not None else []), *_PINNED, *args]


def git_bytes(
    repo: Path | None, *args: str, stdin: bytes | None = None, env: Mapping[str, str] | None = None
) -> bytes:
    """git's stdout, as bytes (file contents, ``-z`` lists)."""
    try:
        done = subprocess.run(
            _argv(repo, list(args)),
            input=stdin,
            capture_output=True,
            env={**os.environ, **_ENV, **(env or {})},
            check=False,
        )
    except FileNotFoundError as exc:
        raise GitError(list(args), 127, f"git is not installed: {exc}") from None
    if done.returncode != 0:
        raise GitError(list(args), done.returncode, done.stderr.decode("utf-8", "replace"))
    return done.stdout


def decode(data: bytes) -> str:
    # Source files are UTF-8 in practice; a stray byte must not lose the whole file.
    return data.decode("utf-8", "replace")


def git(repo: Path | None, *args: str, env: Mapping[str, str] | None = None) -> str:
    """git's stdout as text, without the trailing newline."""
    return decode(git_bytes(repo, *args, env=env)).strip()


async def git_async(
    repo: Path | None, *args: str, env: Mapping[str, str] | None = None, timeout: float = 600
) -> str:
    """:func:`git` for long commands: killed at ``timeout`` (GitError) or when the task is cancelled."""
    proc = await asyncio.create_subprocess_exec(
        *_argv(repo, list(args)),
        env={**os.environ, **_ENV, **(env or {})},
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout)
    except (TimeoutError, asyncio.CancelledError) as exc:
        proc.kill()
        await proc.wait()
        if isinstance(exc, asyncio.CancelledError):
            raise
        raise GitError(list(args), -9, f"timed out after {timeout:.0f} s") from None
    if proc.returncode != 0:
        raise GitError(list(args), proc.returncode or 1, decode(err))
    return decode(out).strip()


def export_commit(repo: Path, sha: str, target: Path) -> None:
    """The tree of ``sha`` from git's objects into ``target``, a new directory (links kept as
    links, nothing written outside it: :func:`runner.safe_tar.extract_all`)."""
    data = git_bytes(repo, "archive", "--format=tar", sha)
    target.mkdir(parents=True)
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        extract_all(tar, target)
