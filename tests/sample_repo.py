"""The sample repository the checks are tested on: the built-in demo project (:mod:`bot.cli.demo`)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from bot.cli.demo import BROKEN_TEST, FLAKY_TEST, SUITE_SIZE, TREE, commit_all, git
from bot.cli.demo import DemoRepo as SampleRepo
from bot.cli.demo import make_demo_repo as make_sample_repo

__all__ = [
    "BROKEN_TEST",
    "FLAKY_TEST",
    "SUITE_SIZE",
    "TREE",
    "SampleRepo",
    "commit_all",
    "git",
    "make_sample_repo",
    "tool_env",
]


def tool_env() -> dict[str, str]:
    """Environment for a host runner whose ``python``, ``pytest`` and ``pre-commit`` are this
    interpreter's: what a CI image would provide."""
    return {"PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
