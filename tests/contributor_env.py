"""A contributor's own virtualenv, as `paritybot check` finds it, and a fingerprint of it.

The environment holds what this test run's interpreter has (pytest, coverage, pip, setuptools,
paritybot itself), linked into a ``venv`` of its own, less the distributions a test leaves out: a
contributor's environment without pytest-cov, say. paritybot is run from it, with it active, as a
contributor who installed paritybot there runs it.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

from cli_run import cli_env


@dataclass(frozen=True)
class ContributorEnv:
    root: Path

    @property
    def python(self) -> str:
        return str(self.root / "bin" / "python")

    @property
    def site(self) -> Path:
        return next(self.root.glob("lib/python*/site-packages"))

    def variables(self, home: Path) -> dict[str, str]:
        """The contributor's shell with the environment activated, and the test's cache directory."""
        return {
            **cli_env(home),
            "VIRTUAL_ENV": str(self.root),
            "PATH": f"{self.root / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
        }

    def run(
        self, *argv: str, cwd: Path | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [self.python, *argv], capture_output=True, text=True, cwd=cwd, check=check, timeout=600
        )

    def paritybot(self, *args: str, home: Path) -> subprocess.CompletedProcess[str]:
        """`paritybot ARGS` run from this environment, activated, from ``home``."""
        return subprocess.run(
            [self.python, "-m", "bot.cli.main", *args],
            capture_output=True,
            text=True,
            cwd=home,
            env=self.variables(home),
            timeout=600,
        )

    def fingerprint(self) -> tuple[str, dict[str, str]]:
        """``pip freeze`` and every entry under the environment (a file's hash, a link's target)."""
        freeze = self.run("-m", "pip", "freeze", "--all").stdout
        entries: dict[str, str] = {}
        for top, dirs, files in os.walk(self.root):
            for name in [*dirs, *files]:
                path = Path(top) / name
                rel = str(path.relative_to(self.root))
                if path.is_symlink():
                    entries[rel] = f"-> {os.readlink(path)}"
                elif path.is_file():
                    entries[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
                else:
                    entries[rel] = "dir"
        return freeze, entries


def make_contributor_env(root: Path, without: tuple[str, ...] = ()) -> ContributorEnv:
    """A virtualenv at ``root`` holding this interpreter's packages, less the distributions named
    in ``without`` (their import packages, metadata and ``.pth`` files)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True, timeout=300)
    env = ContributorEnv(root)
    own = Path(sysconfig.get_paths()["purelib"])
    left_out = tuple(n.replace("-", "_").lower() for n in without)
    for entry in own.iterdir():
        normal = entry.name.replace("-", "_").lower()
        if entry.name == "_virtualenv.pth" or normal.startswith(left_out):
            continue
        (env.site / entry.name).symlink_to(entry)
    pip = root / "bin" / "pip"
    pip.write_text(f"#!{env.python}\nimport sys\nfrom pip._internal.cli.main import main\nsys.exit(main())\n")
    pip.chmod(0o755)
    return env
