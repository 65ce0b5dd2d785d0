"""Extracting a tar archive into a directory without writing outside it.

Python 3.11.4 added extraction filters; its ``data`` filter is what paritybot wants for a commit's
tree: no absolute or escaping paths, no links that point outside the target, no device files, no
set-uid bits, no owners from the archive. Debian 12's ``python3`` is 3.11.2, which has no filters,
so there the same rules are applied by hand (no absolute paths: a leading slash is dropped, as
the filter drops it), member by member, against the directory as it stands
when each member is written (a link extracted earlier cannot be used to escape later).
"""

from __future__ import annotations

import copy
import os
import stat
import tarfile
from pathlib import Path


class UnsafeMemberError(tarfile.TarError):
    """A member would be written, or would point, outside the target; nothing more is extracted."""


def extract_all(tar: tarfile.TarFile, target: Path) -> None:
    """Every member of ``tar`` into ``target``, under the rules of tarfile's ``data`` filter."""
    if hasattr(tarfile, "data_filter"):
        tar.extractall(target, filter="data")
        return
    root = os.path.realpath(target)
    knows_filters = hasattr(tarfile, "fully_trusted_filter")  # only where data_filter was taken away
    for member in tar:
        checked, set_attrs = _checked(member, root), not member.isdir()
        if knows_filters:  # checked here: told so, where tarfile would warn without a filter
            tar.extract(checked, root, set_attrs=set_attrs, filter="fully_trusted")
        else:
            tar.extract(checked, root, set_attrs=set_attrs)


def _checked(member: tarfile.TarInfo, root: str) -> tarfile.TarInfo:
    name = member.name.lstrip("/" + os.sep)  # as the filter: "/etc/x" is written as "etc/x"
    dest = os.path.realpath(os.path.join(root, name))
    if not _inside(dest, root):
        raise UnsafeMemberError(f"{name!r}: outside the target")
    if member.ischr() or member.isblk() or member.isfifo() or member.isdev():
        raise UnsafeMemberError(f"{name!r}: a device or pipe")
    if member.issym() or member.islnk():
        _check_link(member, root)
    clean = copy.copy(member)  # TarInfo.replace() came with the filters
    clean.name = name
    clean.uid = clean.gid = 0
    clean.uname = clean.gname = ""
    if member.isreg() or member.islnk():
        # As the data filter: owner may read and write; nobody else writes; no set-uid, set-gid,
        # sticky; executable only where the owner's bit says so.
        mode = (member.mode | stat.S_IRUSR | stat.S_IWUSR) & 0o755
        if not mode & stat.S_IXUSR:
            mode &= ~0o111
        clean.mode = mode
    return clean


def _check_link(member: tarfile.TarInfo, root: str) -> None:
    link = member.linkname
    if os.path.isabs(link):
        raise UnsafeMemberError(f"{member.name!r}: links to an absolute path")
    if member.issym():
        pointed = os.path.join(root, os.path.dirname(member.name), link)
    else:  # a hard link names another member, from the archive's root
        pointed = os.path.join(root, link)
    if not _inside(os.path.realpath(pointed), root):
        raise UnsafeMemberError(f"{member.name!r}: links outside the target")


def _inside(path: str, root: str) -> bool:
    return os.path.commonpath([path, root]) == root
