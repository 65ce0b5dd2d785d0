"""Keeping the reference out of reach: the base checkout and the driver, as the head's code finds them.

Standard library only, valid on Python 3.8. Injected as ``paritybot_perf_guard.py`` beside the
driver. The head's code runs beside the base's in one run, as the same user: a ``conftest.py`` of
the pull request could rewrite the base's copy of a function (a regression reported as an
improvement), or the driver and its plugin. Two cheap defences, neither a sandbox:

* every file of both checkouts and the driver's own files are made read-only before any benchmark
  process starts (both checkouts, so the two sides run alike), so writing one fails;
* a fingerprint of the base checkout and the driver's files (each file's inode, size and change
  time, which no process can set back) is taken before and compared during and after the run: a
  file replaced, rewritten, removed or a module added refuses the whole comparison, naming it.
"""

from __future__ import annotations

import contextlib
import os
import stat

MAX_FILES = 200_000  # a checkout larger than this is fingerprinted in part
WATCHED = (".py", ".pth", ".so", ".pyd", ".json", ".toml", ".cfg", ".ini")  # new files that could run


def _walk(root):
    count = 0
    for directory, dirs, files in os.walk(root):
        dirs.sort()
        for name in sorted(files):
            count += 1
            if count > MAX_FILES:
                return
            yield os.path.join(directory, name)


def read_only(roots):
    """Take the write permission off every file under ``roots`` (directories stay writable, so the
    workspace can still be removed; a file replaced in one is caught by the fingerprint)."""
    for root in roots:
        for path in _walk(root) if os.path.isdir(root) else [root]:
            with contextlib.suppress(OSError):
                mode = os.lstat(path).st_mode
                if stat.S_ISREG(mode):
                    os.chmod(path, stat.S_IMODE(mode) & ~0o222)


def fingerprint(roots):
    """path → (inode, size, change time) of every file under ``roots`` (a root may be a file)."""
    found = {}
    for root in roots:
        for path in _walk(root) if os.path.isdir(root) else [root]:
            try:
                info = os.lstat(path)
            except OSError:
                continue
            found[path] = (info.st_ino, info.st_size, info.st_ctime_ns)
    return found


def changed(before, roots):
    """The first file under ``roots`` that differs from ``before`` (changed, removed, or a new file
    that could run), or None."""
    now = fingerprint(roots)
    for path, mark in before.items():
        if now.get(path) != mark:
            return path
    for path in now:
        if path not in before and path.endswith(WATCHED):
            return path
    return None


class Guard:
    """The base checkout and the driver's files, made read-only and watched for the whole run."""

    def __init__(self, base_root, head_root, own_files, every_s=5.0):
        self.base_root = base_root
        self.roots = [base_root, *own_files]
        read_only([base_root, head_root, *own_files])
        self.before = fingerprint(self.roots)
        self.every_s = every_s
        self.checked_at = None
        self.broken = None  # why the comparison is refused, once it is

    def check(self, now, force=False):
        """Whether the reference is intact; checked at most every ``every_s`` unless ``force``."""
        if self.broken is None and (
            force or self.checked_at is None or now - self.checked_at >= self.every_s
        ):
            self.checked_at = now
            path = changed(self.before, self.roots)
            if path is not None:
                where = os.path.relpath(path, self.base_root) if path.startswith(self.base_root) else path
                what = "the base checkout" if path.startswith(self.base_root) else "the benchmark driver"
                self.broken = (
                    f"{what} changed while the benchmarks ran (`{where}`): a process of the run wrote "
                    "to it, so base is no longer the reference; not compared"
                )
        return self.broken is None


# Files that run during a measurement besides the measured code: pytest's and Python's hooks, the
# suites' configuration. A change to one can bias the numbers as much as the code under test.
HARNESS_NAMES = {
    "conftest.py",
    "pytest.ini",
    "tox.ini",
    "setup.cfg",
    "pyproject.toml",
    "asv.conf.json",
    "sitecustomize.py",
    "usercustomize.py",
}


def _harness(root, bench_dirs):
    """Relative path → bytes of the harness files under ``root``."""
    found = {}
    for path in _walk(root):
        where = os.path.relpath(path, root)
        name = os.path.basename(where)
        inside = any(where == d or where.startswith(d.rstrip("/") + "/") for d in bench_dirs)
        if name in HARNESS_NAMES or name.endswith(".pth") or (inside and name.endswith(".py")):
            with contextlib.suppress(OSError):
                if os.path.isfile(path) and not os.path.islink(path) and os.path.getsize(path) < 1 << 22:
                    with open(path, "rb") as fh:
                        found[where] = fh.read()
    return found


def harness_changes(base_root, head_root, bench_dirs):
    """The harness files the change edits, adds or removes (sorted), for the reviewer: they run
    during the measurement, so they can bias it though they are not the code measured."""
    dirs = [os.path.normpath(d) for d in bench_dirs if d and not d.startswith("-")]
    base, head = _harness(base_root, dirs), _harness(head_root, dirs)
    return sorted(p for p in set(base) | set(head) if base.get(p) != head.get(p))


# A user of its own per side, where the run is root: the head's processes then cannot write the
# base's checkout (its files and directories belong to root) nor trace a base process, whatever
# their code does. Ids no image is expected to use, one per side, so both sides run alike.
SIDE_USERS = {"base": 65532, "head": 65533}


def closed_on_the_way(path):
    """The first directory on the way to ``path`` that other users cannot enter, or ``path`` itself
    when they cannot read it; None when it is open to them."""
    path = os.path.abspath(path)
    try:
        if not os.stat(path).st_mode & stat.S_IROTH:
            return path
    except OSError:
        return path
    current = path if os.path.isdir(path) else os.path.dirname(path)
    while True:
        try:
            if not os.stat(current).st_mode & stat.S_IXOTH:
                return current
        except OSError:
            return current
        parent = os.path.dirname(current)
        if parent == current:
            return None
        current = parent


def side_users(paths):
    """Per side, the user id its benchmark processes run as, or None and why not: only a root run
    can switch users, and only when the checkouts, the driver and the interpreters (``paths``, as
    their real paths) are open to other users."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return None, "the run is not root, so both sides run as its user"
    for path in paths:
        closed = closed_on_the_way(os.path.realpath(path))
        if closed:
            return None, f"{closed} is closed to other users, so both sides run as the run's user"
    return dict(SIDE_USERS), None


def become(uid):
    """A ``preexec_fn`` that makes the child process user ``uid`` (group ``uid``, no others)."""

    def switch():
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)

    return switch
