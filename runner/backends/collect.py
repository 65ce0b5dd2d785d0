"""Reading back the files a step left in its workspace: bounded, and never through a link.

Those files (a JUnit report, a coverage map) are written by the code under test, so they are as
hostile as the rest of the run: a report of 300 MB, a sparse file that reads as gigabytes of
zeros, a directory or a FIFO where a file should be, a symbolic link to a file of the host. Both
runners read them through here, so:

* a file larger than the step's cap (:attr:`runner.backends.base.Step.collect_max_bytes`) is not read at
  all, and the check says so ("the JUnit report is 312 MB, more than the 64 MB paritybot reads"):
  a truncated read would parse as fewer results, which is worse than none;
* only a regular file is read; a symbolic link anywhere on the path, a directory, a FIFO or a
  device is refused, and the refusal names it;
* the container runner's archive stream is read only as far as the cap: the size is in the tar
  header, before the contents, and the stream is cut there.

A refusal is a :class:`CollectRefused` whose ``reason`` completes a sentence about the file
(``f"the JUnit report {reason}"``); the runners put it in :attr:`StepResult.refused`.
"""

from __future__ import annotations

import errno
import os
import stat
import tarfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path, PurePosixPath

import structlog

log = structlog.get_logger(__name__)

# Room for the tar headers in front of the contents: the header block, a PAX header with the
# file's name and any extended attributes the step set on the file.
_ARCHIVE_HEADER_SLACK = 1 << 20
# Go's os.FileMode type bits, as the engine reports a path's mode in its archive stat.
_GO_MODE_DIR = 1 << 31
_GO_MODE_SYMLINK = 1 << 27
_GO_MODE_NOT_REGULAR = (
    _GO_MODE_DIR | _GO_MODE_SYMLINK | (1 << 26) | (1 << 25) | (1 << 24) | (1 << 21) | (1 << 19)
)

LINK = "is a symbolic link; paritybot reads no links from a run"
NOT_A_FILE = "is not a regular file"
OUTSIDE = "is not inside the workspace"


class CollectRefused(Exception):
    """A file the runner would not read back; ``reason`` says why, after "the <file> …"."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


def size_text(n: int) -> str:
    """A byte count as people say it: 312 MB, 64 kB, 900 bytes (decimal units)."""
    for unit, scale in (("GB", 10**9), ("MB", 10**6), ("kB", 10**3)):
        if n >= scale:
            value = n / scale
            return f"{value:.0f} {unit}" if value >= 10 else f"{value:.1f} {unit}"
    return f"{n} bytes"


def too_large(size: int, limit: int) -> CollectRefused:
    shown, cap = size_text(size), size_text(limit)
    if shown == cap:  # rounding made them look equal: say the exact counts
        shown, cap = f"{size:,} bytes", f"{limit:,} bytes"
    return CollectRefused(f"is {shown}, more than the {cap} paritybot reads")


def collect_files(
    paths: Iterable[str], read_one: Callable[[str], str | None]
) -> tuple[dict[str, str], dict[str, str]]:
    """``(collected, refused)``: the text of each path ``read_one`` found, and why others were refused."""
    collected: dict[str, str] = {}
    refused: dict[str, str] = {}
    for rel in paths:
        try:
            text = read_one(rel)
        except CollectRefused as exc:
            log.warning("a file of the run was not read back", path=rel, reason=exc.reason)
            refused[rel] = exc.reason
            continue
        if text is not None:
            collected[rel] = text
    return collected, refused


# --- the host: a directory on this machine --------------------------------------------------------


def read_host_file(root: Path, rel: str, limit: int) -> str | None:
    """The text of ``root/rel``; None when it does not exist.

    Every component is opened relative to its parent with ``O_NOFOLLOW``, so a symbolic link
    anywhere on the path is refused even if it was swapped in after a check; the size is checked
    on the open file before a byte is read; a FIFO does not block (``O_NONBLOCK``).

    Raises:
        CollectRefused: a link, not a regular file, outside ``root``, or larger than ``limit``.
    """
    parts = PurePosixPath(rel).parts
    if not parts or PurePosixPath(rel).is_absolute() or ".." in parts:
        raise CollectRefused(OUTSIDE)
    dir_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in parts[:-1]:
            sub = _open_at(part, dir_fd, os.O_DIRECTORY)
            if sub is None:
                return None
            os.close(dir_fd)
            dir_fd = sub
        fd = _open_at(parts[-1], dir_fd, os.O_NONBLOCK)
    finally:
        os.close(dir_fd)
    if fd is None:
        return None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise CollectRefused(NOT_A_FILE)
    with os.fdopen(fd, "rb") as f:
        if info.st_size > limit:
            raise too_large(info.st_size, limit)
        data = f.read(limit + 1)
    if len(data) > limit:  # it grew after the check
        raise too_large(len(data), limit)
    return data.decode("utf-8", "replace")


def _open_at(name: str, dir_fd: int, flags: int) -> int | None:
    """``name`` in ``dir_fd``, never through a link; None when it does not exist."""
    try:
        return os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | flags, dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise CollectRefused(LINK) from None
        if exc.errno == errno.ENOTDIR:
            # A link to a directory reads as "not a directory" under O_NOFOLLOW; a file is just absent.
            if stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode):
                raise CollectRefused(LINK) from None
            return None
        raise


# --- the container: the engine's archive of a path ---------------------------------------------------


def check_archive_stat(path_stat: dict[str, object] | None, limit: int) -> None:
    """Refuse from the engine's stat of the path alone, before reading its archive.

    Raises:
        CollectRefused: the path is a link, not a regular file, or larger than ``limit``.
    """
    if not path_stat:
        return
    mode, size = path_stat.get("mode"), path_stat.get("size")
    if isinstance(mode, int):
        if mode & _GO_MODE_SYMLINK:
            raise CollectRefused(LINK)
        if mode & _GO_MODE_NOT_REGULAR:
            raise CollectRefused(NOT_A_FILE)
    if isinstance(size, int) and size > limit:
        raise too_large(size, limit)


def read_archive_file(chunks: Iterable[bytes], limit: int) -> str | None:
    """The text of the single file in a ``get_archive`` stream, reading at most ``limit`` bytes of it.

    Returns None for an empty archive.

    Raises:
        CollectRefused: the entry is a link or not a regular file, or it is larger than ``limit``
            (known from its header, so the contents are never read).
    """
    stream = _CappedStream(chunks, limit + _ARCHIVE_HEADER_SLACK)
    try:
        with tarfile.open(fileobj=stream, mode="r|") as tar:  # type: ignore[call-overload]
            for member in tar:
                if member.issym() or member.islnk():
                    raise CollectRefused(LINK)
                if not member.isfile():
                    raise CollectRefused(NOT_A_FILE)
                if member.size > limit:
                    raise too_large(member.size, limit)
                fh = tar.extractfile(member)
                return fh.read(member.size).decode("utf-8", "replace") if fh else None
    except _OverBudget:
        raise too_large(stream.read_so_far, limit) from None
    finally:
        stream.close()
    return None


class _OverBudget(Exception):
    pass


class _CappedStream:
    """The engine's chunks as a file for :mod:`tarfile`, refusing to hand out more than ``budget`` bytes."""

    def __init__(self, chunks: Iterable[bytes], budget: int):
        self._source = chunks
        self._chunks: Iterator[bytes] = iter(chunks)
        self._chunk = b""
        self._pos = 0
        self._budget = budget
        self.read_so_far = 0

    def read(self, n: int = -1) -> bytes:
        want = self._budget + 1 if n is None or n < 0 else n
        parts = []
        while want > 0:
            if self._pos >= len(self._chunk):
                self._chunk, self._pos = next(self._chunks, b""), 0
                if not self._chunk:
                    break
            piece = self._chunk[self._pos : self._pos + want]
            self._pos += len(piece)
            want -= len(piece)
            parts.append(piece)
        data = b"".join(parts)
        self.read_so_far += len(data)
        if self.read_so_far > self._budget:
            raise _OverBudget
        return data

    def close(self) -> None:
        # Closing the engine's generator ends the HTTP response: the rest is never transferred.
        close = getattr(self._source, "close", None)
        if callable(close):
            close()
