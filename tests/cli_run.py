"""The `paritybot` command run as a user runs it: a subprocess, without the service's settings."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

CLI = [sys.executable, "-m", "bot.cli.main"]


def run_cli(
    *args: str, env: dict[str, str] | None = None, cwd: Path | None = None, timeout: float | None = None
) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("PARITYBOT_")}
    return subprocess.run(
        [*CLI, *args], capture_output=True, text=True, env={**base, **(env or {})}, cwd=cwd, timeout=timeout
    )
