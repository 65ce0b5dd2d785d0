"""A change between two commits, as the selection reads it: the changed files with both texts,
and the lines each change touches."""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from runner import gitdiff
from runner.gitdiff import FileStatus
from runner.selection.config_files import is_config_file


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class FileChange(_Model):
    """One changed file with both versions of its text (``None`` where it does not exist)."""

    path: str = Field(description="head-side path (the base path for a deletion)")
    old_path: str | None = None
    status: FileStatus
    base_text: str | None = None
    head_text: str | None = None

    @property
    def base_path(self) -> str:
        return self.old_path or self.path


class ChangeSet(_Model):
    base: str = Field(description="the commit the change is measured from (a merge base)")
    head: str
    files: list[FileChange] = Field(default_factory=list)
    head_files: list[str] = Field(default_factory=list, description="every file tracked at head")
    base_files: list[str] = Field(default_factory=list, description="every file tracked at base")


SourceReader = Callable[[str, list[str]], dict[str, str | None]]
"""(revision, paths) → path → text, ``None`` for a missing file."""


# --- Changed lines ------------------------------------------------------------------------------------


@dataclass
class Diff:
    """Base-side lines replaced or deleted, and head-side lines added, of one file."""

    base_lines: list[int] = field(default_factory=list)
    inserted: list[int] = field(default_factory=list)  # head lines of pure insertions
    head_lines: list[int] = field(default_factory=list)  # every head line added or modified
    neighbours: list[int] = field(default_factory=list)  # head lines around a pure deletion


def diff_lines(base_text: str, head_text: str) -> Diff:
    base, head = base_text.splitlines(), head_text.splitlines()
    out = Diff()
    matcher = difflib.SequenceMatcher(None, base, head, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        out.base_lines.extend(range(i1 + 1, i2 + 1))
        out.head_lines.extend(range(j1 + 1, j2 + 1))
        if tag == "insert":
            out.inserted.extend(range(j1 + 1, j2 + 1))
        elif tag == "delete":
            # A pure deletion changes the code around the cut: mark its head-side neighbours.
            around = [n for n in (j1, j1 + 1) if 1 <= n <= len(head)]
            out.head_lines.extend(around)
            out.neighbours.extend(around)
    return out


# --- Reading the change from git ----------------------------------------------------------------------


def source_reader(repo: Path) -> SourceReader:
    """Reads files of any commit from git's objects, each (commit, path) once."""
    cache: dict[tuple[str, str], str | None] = {}

    def read(rev: str, paths: list[str]) -> dict[str, str | None]:
        missing = [p for p in paths if (rev, p) not in cache]
        if missing:
            for p, text in gitdiff.read_files(repo, rev, missing).items():
                cache[(rev, p)] = text
        return {p: cache[(rev, p)] for p in paths}

    return read


def read_change(repo: Path, base: str, head: str, read: SourceReader) -> ChangeSet:
    """The files that differ between ``base`` and ``head``, with both texts of each Python file
    (and of each shared configuration file, which is read section by section)."""
    files = gitdiff.changed_files(repo, base, head)
    py_head = [f.path for f in files if _text_read(f.path) and f.status != FileStatus.DELETED]
    py_base = [
        f.old_path or f.path
        for f in files
        if _text_read(f.old_path or f.path) and f.status != FileStatus.ADDED
    ]
    head_texts = read(head, py_head)
    base_texts = read(base, py_base)
    changes = [
        FileChange(
            path=f.path,
            old_path=f.old_path,
            status=f.status,
            base_text=base_texts.get(f.old_path or f.path),
            head_text=head_texts.get(f.path),
        )
        for f in files
    ]
    return ChangeSet(
        base=base,
        head=head,
        files=changes,
        head_files=gitdiff.list_files(repo, head),
        base_files=gitdiff.list_files(repo, base),
    )


def _text_read(path: str) -> bool:
    return path.endswith(".py") or is_config_file(path)
