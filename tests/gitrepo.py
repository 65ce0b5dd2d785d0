"""A real git repository in a temporary directory, for tests of code that reads git history."""

from __future__ import annotations

import subprocess
from pathlib import Path

_IDENTITY = ["-c", "user.name=Test Author", "-c", "user.email=author@example.com"]


class GitRepo:
    """``commit({"path": "text", "gone.py": None})`` writes (``None`` deletes) and commits."""

    def __init__(self, path: Path):
        self.path = path
        path.mkdir(parents=True, exist_ok=True)
        self.git("init", "-q", "-b", "main")

    def git(self, *args: str) -> str:
        proc = subprocess.run(
            ["git", "-C", str(self.path), *_IDENTITY, "-c", "commit.gpgsign=false", *args],
            capture_output=True,
            text=True,
            check=True,
        )
        return proc.stdout.strip()

    def commit(self, files: dict[str, str | bytes | None], message: str = "change") -> str:
        for name, content in files.items():
            target = self.path / name
            if content is None:
                self.git("rm", "-q", "--", name)
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(content, bytes):
                target.write_bytes(content)
            else:
                target.write_text(content)
            self.git("add", "--", name)
        self.git("commit", "-q", "--allow-empty", "-m", message)
        return self.git("rev-parse", "HEAD")

    def move(self, old: str, new: str) -> None:
        (self.path / new).parent.mkdir(parents=True, exist_ok=True)
        self.git("mv", old, new)
