"""The `paritybot` command as a user runs it: a subprocess, with its cache and temp dirs in the test's."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

CLI = [sys.executable, "-m", "bot.cli.main"]


def cli_env(home: Path | None) -> dict[str, str]:
    """This environment without PARITYBOT_* settings; with ``home``, the user's cache directory
    (``home/cache``) and temp directory (``home/tmp``) are there, so a test sees what is left."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PARITYBOT_")}
    if home is not None:
        (home / "tmp").mkdir(parents=True, exist_ok=True)
        env |= {"XDG_CACHE_HOME": str(home / "cache"), "TMPDIR": str(home / "tmp")}
    return env


def run_cli(
    *args: str,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    timeout: float | None = None,
    home: Path | None = None,
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args],
        capture_output=True,
        text=True,
        env={**cli_env(home), **(env or {})},
        cwd=cwd,
        timeout=timeout,
    )


def record_coverage_map(repo: Path, rev: str, maps: Path) -> str:
    """`paritybot coverage-map` of ``rev`` on this host, into the map directory ``maps``; its output."""
    done = run_cli(
        "coverage-map", "--repo", str(repo), "--rev", rev, "--runner", "host",
        env={"PARITYBOT_COVERAGE_DIR": str(maps)},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout
