"""Files in and out of step containers as tar archives: the workspace and injected files in, owned
by the step user; a collected file out, read only up to its cap."""

from __future__ import annotations

import io
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from docker.models.containers import Container

from runner.backends.base import RunnerError
from runner.backends.collect import CollectRefused, check_archive_stat, read_archive_file

_ARCHIVE_CHUNK = 1 << 20  # how much of a collected file's archive is read at a time


def _owned(uid: int, gid: int) -> Callable[[tarfile.TarInfo], tarfile.TarInfo]:
    def set_owner(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.uid, info.gid, info.uname, info.gname = uid, gid, "", ""
        return info

    return set_owner


def workspace_archive(workspace: Path, top: str, uid: int, gid: int) -> tempfile.SpooledTemporaryFile[bytes]:
    """A tar of ``workspace`` under ``top/``, every entry owned by the step user; spooled to disk."""
    # Returned open: the caller streams it to the engine and closes it.
    spool: tempfile.SpooledTemporaryFile[bytes] = tempfile.SpooledTemporaryFile(max_size=32 << 20)  # noqa: SIM115
    with tarfile.open(fileobj=spool, mode="w", format=tarfile.PAX_FORMAT) as tar:
        tar.add(workspace, arcname=top, recursive=True, filter=_owned(uid, gid))
    spool.seek(0)
    return spool


def files_archive(dirs: Iterable[str], files: dict[str, str], uid: int, gid: int) -> bytes:
    """A tar with directories and text files (path → text), every entry owned by the step user."""
    buf = io.BytesIO()
    now = time.time()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        made: set[str] = set()
        for path in [*dirs, *(str(Path(p).parent) for p in files)]:
            parts = Path(path).parts
            for i in range(1, len(parts) + 1):
                sub = "/".join(parts[:i])
                if sub in made or sub == ".":
                    continue
                made.add(sub)
                info = tarfile.TarInfo(sub)
                info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, now
                tar.addfile(_owned(uid, gid)(info))
        for path, text in files.items():
            data = text.encode("utf-8")
            info = tarfile.TarInfo(path)
            info.size, info.mode, info.mtime = len(data), 0o644, now
            tar.addfile(_owned(uid, gid)(info), io.BytesIO(data))
    return buf.getvalue()


def safe_relative(rel: str) -> str:
    """A workspace-relative path that cannot climb out of the workspace."""
    parts = Path(rel).parts
    if not parts or Path(rel).is_absolute() or ".." in parts:
        raise RunnerError(f"path {rel!r} must be relative to the workspace and stay inside it")
    return "/".join(parts)


def read_container_file(container: Container, path: str, limit: int) -> str | None:
    """A file of a container, refused from the engine's stat or cut off at ``limit`` bytes of archive."""
    chunks, path_stat = container.get_archive(path, chunk_size=_ARCHIVE_CHUNK)
    try:
        check_archive_stat(path_stat, limit)
    except CollectRefused:
        chunks.close()  # the response ends here; the engine stops sending the archive
        raise
    return read_archive_file(chunks, limit)
