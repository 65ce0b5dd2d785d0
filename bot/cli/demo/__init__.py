"""The built-in sample project: a real git repository with a base commit and a PR-like head commit.

`paritybot check --demo` runs the whole pipeline on it, and the test suite uses it too. The head
commit (branch ``feature``) breaks exactly one test, adds a ``print(`` call and trailing whitespace
in ``src/`` and an undocumented public function. See ``README.md`` beside this file.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from runner.git import git as run_git

TREE = Path(__file__).parent / "tree"

BROKEN_TEST = "tests/test_stats.py::TestMean::test_mean_of_halves"
FLAKY_TEST = "tests/test_flaky.py::test_eventually_passes"
SUITE_SIZE = 18

# The head commit's change to src/calc/stats.py. The trailing spaces after `print(ordered)` are
# deliberate: the sample's trailing-whitespace hook must find them.
_HEAD_BUG = ("    return sum(values) / len(values)\n", "    return sum(values) // len(values)\n")
_HEAD_ADDITION = (
    "\n\n"
    "def median(values):\n"
    "    ordered = sorted(values)\n"
    "    print(ordered)   \n"
    "    return ordered[len(ordered) // 2]\n"
)

# Fixed identity and dates: the same tree always gives the same commit ids.
_GIT_ENV = {
    "GIT_AUTHOR_NAME": "Sample Author",
    "GIT_AUTHOR_EMAIL": "author@example.com",
    "GIT_COMMITTER_NAME": "Sample Author",
    "GIT_COMMITTER_EMAIL": "author@example.com",
    "GIT_AUTHOR_DATE": "2024-01-01T12:00:00+00:00",
    "GIT_COMMITTER_DATE": "2024-01-01T12:00:00+00:00",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_CONFIG_NOSYSTEM": "1",
}


@dataclass(frozen=True)
class DemoRepo:
    path: Path
    base_sha: str  # branch main
    head_sha: str  # branch feature


def git(repo: Path, *args: str) -> str:
    """Run git in ``repo`` with a fixed identity; return its stripped stdout."""
    return run_git(repo, *args, env=_GIT_ENV)


def commit_all(repo: Path, message: str) -> str:
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD")


def make_demo_repo(tmp_path: Path, name: str = "sample", *, fresh: bool = False) -> DemoRepo:
    """Create ``tmp_path/name``: base commit on ``main``, head commit on ``feature`` (checked out).

    ``fresh``: replace what an earlier call left there.
    """
    path = tmp_path / name
    if fresh:
        shutil.rmtree(path, ignore_errors=True)
    shutil.copytree(TREE, path, ignore=shutil.ignore_patterns("__pycache__", ".flaky_attempted"))
    git(path, "init", "-q", "-b", "main")
    base_sha = commit_all(path, "Base: calculator with tests")
    git(path, "checkout", "-q", "-b", "feature")
    stats = path / "src" / "calc" / "stats.py"
    text = stats.read_text()
    if _HEAD_BUG[0] not in text:
        raise RuntimeError(f"{stats} no longer contains the line the head commit changes")
    stats.write_text(text.replace(*_HEAD_BUG) + _HEAD_ADDITION)
    head_sha = commit_all(path, "Head: add median, use integer division")
    return DemoRepo(path=path, base_sha=base_sha, head_sha=head_sha)
