"""Small, exact questions to git about a pull request's change: real ``git`` subprocesses.

The API is a few functions and two models; the checks and the test selection build on them:

* :func:`merge_base` — where the PR branched off (diff against this for PR semantics);
* :func:`changed_files` — what the change touches, with line counts, renames followed;
* :func:`changed_lines` — head-side line numbers the change adds or modifies;
* :func:`read_file` / :func:`read_files` — a file's text at a revision, from git's objects only
  (symbolic links, submodules and oversized files refused: a PR controls its tree);
* :func:`list_files` — every file tracked at a revision.

Every failure of git (a bad revision, not a repository) raises :class:`runner.git.GitError`
carrying git's own stderr, so the user sees the real reason.
"""

from __future__ import annotations

import functools
import re
from enum import StrEnum
from pathlib import Path

import structlog
from pydantic import BaseModel, ConfigDict, Field

from runner.git import GitError, decode, git_bytes

log = structlog.get_logger(__name__)

_DIFF_OPTIONS = ["--no-ext-diff", "--no-textconv", "--no-color", "--find-renames"]

_HUNK = re.compile(r"^@@ -\d+(?:,\d+)? \+(\d+)(?:,(\d+))? @@")


class FileStatus(StrEnum):
    ADDED = "added"
    MODIFIED = "modified"
    DELETED = "deleted"
    RENAMED = "renamed"
    COPIED = "copied"
    TYPE_CHANGED = "type_changed"


_STATUS_LETTERS = {
    "A": FileStatus.ADDED,
    "M": FileStatus.MODIFIED,
    "D": FileStatus.DELETED,
    "R": FileStatus.RENAMED,
    "C": FileStatus.COPIED,
    "T": FileStatus.TYPE_CHANGED,
}


class ChangedFile(BaseModel):
    """One file the change touches. ``path`` is the head-side path (the old one for deletions)."""

    model_config = ConfigDict(extra="forbid")

    path: str
    status: FileStatus = FileStatus.MODIFIED
    additions: int = Field(0, ge=0)
    deletions: int = Field(0, ge=0)
    old_path: str | None = Field(None, description="the base-side path when renamed or copied")
    binary: bool = False

    @property
    def lines_changed(self) -> int:
        return self.additions + self.deletions


# A commit never changes: asked about full shas, git gives the same answer for good, so the answer
# is kept (for the repository at that path). Any other revision (a branch, HEAD, a short sha) may
# move or mean another commit, and is asked afresh. Each run asks the same few questions of its
# workspace from several checks; this spares it a few dozen git processes.
_MEMO = 1024
_FULL_SHA = re.compile(r"[0-9a-f]{40}([0-9a-f]{24})?")


def _fixed(*revs: str) -> bool:
    return all(_FULL_SHA.fullmatch(r) for r in revs)


def merge_base(repo: Path, a: str, b: str) -> str:
    """The best common ancestor of ``a`` and ``b`` as a full sha.

    Raises:
        GitError: a revision is unknown, or the two share no history.
    """
    return _merge_base_of_commits(repo, a, b) if _fixed(a, b) else _merge_base(repo, a, b)


def _merge_base(repo: Path, a: str, b: str) -> str:
    out = decode(git_bytes(repo, "merge-base", "--end-of-options", a, b)).strip()
    if not out:
        raise GitError(["merge-base", a, b], 1, f"{a} and {b} have no common ancestor")
    return out


_merge_base_of_commits = functools.lru_cache(maxsize=_MEMO)(_merge_base)


def same_files(repo: Path, a: str, b: str) -> bool:
    """Whether commits ``a`` and ``b`` (shas, never options) hold exactly the same files (one tree)."""
    trees = decode(git_bytes(repo, "rev-parse", f"{a}^{{tree}}", f"{b}^{{tree}}"))
    first, second = trees.split()
    return first == second


def changed_files(repo: Path, base: str, head: str) -> list[ChangedFile]:
    """Files that differ between ``base`` and ``head`` (a two-dot diff; pass a merge base for a PR).

    Renames and copies are followed, so a moved file is one entry with ``old_path`` set; binary
    files have ``binary=True`` and zero line counts.
    """
    found = _changed_between_commits(repo, base, head) if _fixed(base, head) else _changed(repo, base, head)
    return [f.model_copy() for f in found]


def _changed(repo: Path, base: str, head: str) -> tuple[ChangedFile, ...]:
    status_out = git_bytes(
        repo, "diff", *_DIFF_OPTIONS, "--name-status", "-z", "--end-of-options", base, head, "--"
    )
    numstat_out = git_bytes(
        repo, "diff", *_DIFF_OPTIONS, "--numstat", "-z", "--end-of-options", base, head, "--"
    )
    counts = _parse_numstat(decode(numstat_out))
    files = []
    for status, old_path, path in _parse_name_status(decode(status_out)):
        added, deleted = counts.get(path, (None, None))
        files.append(
            ChangedFile(
                path=path,
                status=status,
                additions=added or 0,
                deletions=deleted or 0,
                old_path=old_path,
                binary=path in counts and added is None,
            )
        )
    return tuple(files)


_changed_between_commits = functools.lru_cache(maxsize=_MEMO)(_changed)


def _parse_name_status(out: str) -> list[tuple[FileStatus, str | None, str]]:
    fields = out.split("\0")
    entries: list[tuple[FileStatus, str | None, str]] = []
    i = 0
    while i < len(fields) and fields[i]:
        letter = fields[i][0]
        status = _STATUS_LETTERS.get(letter, FileStatus.MODIFIED)
        if letter in "RC":
            entries.append((status, fields[i + 1], fields[i + 2]))
            i += 3
        else:
            entries.append((status, None, fields[i + 1]))
            i += 2
    return entries


def _parse_numstat(out: str) -> dict[str, tuple[int | None, int | None]]:
    """head path → (added, deleted); ``None`` counts mean a binary file."""
    fields = out.split("\0")
    counts: dict[str, tuple[int | None, int | None]] = {}
    i = 0
    while i < len(fields) and fields[i]:
        added, deleted, path = fields[i].split("\t", 2)
        if not path:  # a rename: the old and new paths follow as their own fields
            path = fields[i + 2]
            i += 3
        else:
            i += 1
        counts[path] = (
            None if added == "-" else int(added),
            None if deleted == "-" else int(deleted),
        )
    return counts


def changed_lines(
    repo: Path, base: str, head: str, *, include_deletions: bool = False
) -> dict[str, set[int]]:
    """Head-side path → the head-side line numbers the change adds or modifies.

    A pure deletion has no head-side line; with ``include_deletions`` the lines on either side of
    the cut are marked instead, so a deleted statement still marks the function it was in.
    Deleted files do not appear.
    """
    out = git_bytes(
        repo,
        "diff",
        *_DIFF_OPTIONS,
        "-U0",
        "--src-prefix=a/",
        "--dst-prefix=b/",
        "--end-of-options",
        base,
        head,
        "--",
    )
    return parse_unified_diff(decode(out), include_deletions=include_deletions)


def parse_unified_diff(patch: str, *, include_deletions: bool = False) -> dict[str, set[int]]:
    """Parse ``git diff -U0`` output (with ``b/`` destination prefix) into head-side line sets."""
    result: dict[str, set[int]] = {}
    current: set[int] | None = None
    for line in patch.split("\n"):
        if line.startswith("+++ "):
            path = _diff_path(line[4:])
            current = None if path is None else result.setdefault(path, set())
            continue
        match = _HUNK.match(line)
        if match is None or current is None:
            continue
        start, count = int(match.group(1)), int(match.group(2) or "1")
        if count:
            current.update(range(start, start + count))
        elif include_deletions:
            # ``+start,0`` means the cut lies just after head line ``start``.
            current.update(n for n in (start, start + 1) if n >= 1)
    return result


def _diff_path(raw: str) -> str | None:
    # git appends a tab to ---/+++ names that contain spaces.
    raw = raw.removesuffix("\t")
    if raw == "/dev/null":
        return None
    if raw.startswith('"'):
        raw = _unquote_c(raw)
    return raw[2:] if raw.startswith("b/") else raw


def _unquote_c(quoted: str) -> str:
    """Undo git's C-style quoting of a path: ``\\t``-style escapes and octal UTF-8 bytes."""
    out = bytearray()
    body = quoted[1:-1].encode("utf-8")
    i = 0
    while i < len(body):
        if body[i] != 0x5C or i + 1 == len(body):  # not a backslash
            out.append(body[i])
            i += 1
        elif body[i + 1 : i + 4].isdigit():
            out.append(int(body[i + 1 : i + 4], 8))
            i += 4
        else:
            out.extend(_C_ESCAPES.get(chr(body[i + 1]), chr(body[i + 1])).encode())
            i += 2
    return out.decode("utf-8", "replace")


_C_ESCAPES = {"a": "\a", "b": "\b", "t": "\t", "n": "\n", "v": "\v", "f": "\f", "r": "\r"}


class UnsafeFileError(Exception):
    """A file the bot was asked to read is not a regular file in the commit (a symbolic link, a
    submodule, a directory) or is larger than the bot reads. A pull request controls its tree, so
    such a file is refused rather than followed: a link could point at a file of the bot's host."""

    def __init__(self, path: str, rev: str, reason: str):
        self.path, self.rev, self.reason = path, rev, reason
        super().__init__(f"{path} at {rev[:12]}: {reason}; only regular files are read from a commit")


class TreeEntry(BaseModel):
    """One path of a commit's tree, as ``git ls-tree --long`` lists it."""

    model_config = ConfigDict(extra="forbid")

    path: str
    mode: str
    type: str = Field(description="blob, tree or commit (a submodule)")
    oid: str
    size: int | None = Field(None, description="bytes; None for trees and submodules")

    def refusal(self, max_bytes: int | None) -> str | None:
        """Why this entry is not read as a file; None when it is a regular file within the cap."""
        if self.mode == SYMLINK_MODE:
            return "is a symbolic link"
        if self.type == "commit":
            return "is a submodule"
        if self.type != "blob" or self.mode not in REGULAR_MODES:
            return "is a directory" if self.type == "tree" else f"is not a regular file (mode {self.mode})"
        if max_bytes is not None and self.size is not None and self.size > max_bytes:
            return f"is {self.size:,} bytes, more than the {max_bytes:,} read"
        return None


REGULAR_MODES = frozenset({"100644", "100755"})
SYMLINK_MODE = "120000"
# Source files larger than this are generated tables, not code anyone reviews; reading them whole
# would let one file of a pull request take the bot's memory.
MAX_SOURCE_BYTES = 5_000_000
_LS_TREE_CHUNK = 500  # paths per ls-tree call, far below any argv limit


def tree_entries(repo: Path, rev: str, paths: list[str]) -> dict[str, TreeEntry]:
    """The tree entries of ``paths`` at ``rev``; a path absent from the commit is absent here.

    A path below a directory that is a symbolic link in the commit is absent too: git's tree has
    no such path, and nothing here looks at the file system.

    Raises:
        GitError: ``rev`` is not a valid revision.
    """
    commit = _resolve_commit(repo, rev)
    wanted = set(paths)
    entries: dict[str, TreeEntry] = {}
    for i in range(0, len(paths), _LS_TREE_CHUNK):
        chunk = paths[i : i + _LS_TREE_CHUNK]
        out = git_bytes(
            repo, "--literal-pathspecs", "ls-tree", "-z", "--long", "--full-tree", commit, "--", *chunk
        )
        for record in decode(out).split("\0"):
            if not record:
                continue
            meta, _, path = record.partition("\t")
            mode, kind, oid, size = meta.split()
            if path in wanted:
                entries[path] = TreeEntry(
                    path=path, mode=mode, type=kind, oid=oid, size=int(size) if size.isdigit() else None
                )
    return entries


def read_file(repo: Path, rev: str, path: str, *, max_bytes: int | None = MAX_SOURCE_BYTES) -> str | None:
    """The text of ``path`` at ``rev`` from git's objects; ``None`` when the commit has no such path.

    Raises:
        UnsafeFileError: the path is a symbolic link, a submodule, a directory or too large.
        GitError: ``rev`` is not a valid revision.
    """
    entry = tree_entries(repo, rev, [path]).get(path)
    if entry is None:
        return None
    reason = entry.refusal(max_bytes)
    if reason is not None:
        raise UnsafeFileError(path, rev, reason)
    return _read_blobs(repo, [entry.oid])[0]


def read_files(
    repo: Path, rev: str, paths: list[str], *, max_bytes: int | None = MAX_SOURCE_BYTES
) -> dict[str, str | None]:
    """Many files at one revision from git's objects, in two git processes whatever their number.

    Returns path → text; ``None`` for a path that is missing at ``rev`` or that :func:`read_file`
    would refuse (a symbolic link, a submodule, a directory, a file over ``max_bytes``).

    Raises:
        GitError: ``rev`` is not a valid revision.
    """
    if not paths:
        _resolve_commit(repo, rev)
        return {}
    entries = tree_entries(repo, rev, paths)
    readable = [p for p in dict.fromkeys(paths) if p in entries and entries[p].refusal(max_bytes) is None]
    texts = dict(zip(readable, _read_blobs(repo, [entries[p].oid for p in readable]), strict=True))
    return {p: texts.get(p) for p in paths}


def _read_blobs(repo: Path, oids: list[str]) -> list[str]:
    if not oids:
        return []
    out = git_bytes(repo, "cat-file", "--batch", stdin="".join(f"{oid}\n" for oid in oids).encode())
    texts: list[str] = []
    pos = 0
    for _ in oids:
        end = out.index(b"\n", pos)
        size = int(out[pos:end].split(b" ")[2])
        pos = end + 1
        texts.append(decode(out[pos : pos + size]))
        pos += size + 1  # the object is followed by a newline
    return texts


def _resolve_commit(repo: Path, rev: str) -> str:
    return _commit_of_sha(repo, rev) if _fixed(rev) else _commit(repo, rev)


def _commit(repo: Path, rev: str) -> str:
    return decode(git_bytes(repo, "rev-parse", "--verify", "--end-of-options", f"{rev}^{{commit}}")).strip()


_commit_of_sha = functools.lru_cache(maxsize=_MEMO)(_commit)


def list_files(repo: Path, rev: str) -> list[str]:
    """Every file tracked at ``rev`` (paths relative to the repository root)."""
    commit = _resolve_commit(repo, rev)
    out = decode(git_bytes(repo, "ls-tree", "-r", "-z", "--name-only", commit))
    return [p for p in out.split("\0") if p]
