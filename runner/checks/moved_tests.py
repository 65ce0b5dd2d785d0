"""Which failing tests the change moved, and where they were on the merge base.

A test moved to another module (``tests/test_flows.py::test_x[GMM]`` →
``tests/test_mixtures.py::test_x[GMM]``), or whose module was renamed, has another node id on the
base: looked up by its head id there, it is absent, and its failure would be called new although
the base failed the same way. Its base counterpart is the same test (the same classes, name and
parameters) in the module git's rename detection pairs with its own, or, failing that, the one
function of the same name and the same source (arguments, decorators, body) in a module the change
deleted or edited.

Deciding is :func:`counterparts`, a plain function on the change and the modules' texts;
:func:`find_moved` reads them from git's objects.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from pathlib import Path

import structlog

from runner import gitdiff
from runner.git import GitError
from runner.gitdiff import ChangedFile, FileStatus

log = structlog.get_logger(__name__)

MAX_MODULES = 200  # a change touching more test modules than this is not searched for moves
_HEAD_SIDE = (FileStatus.ADDED, FileStatus.MODIFIED, FileStatus.RENAMED, FileStatus.COPIED)
_BASE_SIDE = (FileStatus.DELETED, FileStatus.MODIFIED, FileStatus.RENAMED)


def counterparts(
    failing: list[str],
    changes: list[ChangedFile],
    base_texts: Mapping[str, str | None],
    head_texts: Mapping[str, str | None],
) -> dict[str, str]:
    """Head node id → its node id on the base, for the failing tests the change moved.

    ``base_texts`` holds the base's side of the changed modules, ``head_texts`` the head's.
    """
    changed = {c.path: c for c in changes if c.status in _HEAD_SIDE and c.path.endswith(".py")}
    base_defs = {path: _defs(text) for path, text in base_texts.items()}
    moved = {}
    for nodeid in failing:
        path, _, rest = nodeid.partition("::")
        change = changed.get(path)
        name = _qualname(rest)
        if change is None or not name or name in base_defs.get(path, {}):
            continue  # unchanged module, or the test is where it was: looked up as it is
        found = _counterpart(change, name, _defs(head_texts.get(path)).get(name), base_defs)
        if found is not None:
            moved[nodeid] = f"{found}::{rest}"
    return moved


def _counterpart(
    change: ChangedFile,
    name: tuple[str, ...],
    source: str | None,
    base_defs: Mapping[str, Mapping[tuple[str, ...], str]],
) -> str | None:
    """The base module the test came from: the renamed module's own, else the one module whose
    function of that name has the same source (two or more: ambiguous, none chosen)."""
    if change.status is FileStatus.RENAMED and change.old_path and name in base_defs.get(change.old_path, {}):
        return change.old_path
    if source is None:
        return None
    same = [path for path, defs in base_defs.items() if defs.get(name) == source]
    return same[0] if len(same) == 1 else None


def _qualname(rest: str) -> tuple[str, ...]:
    """``TestA::test_b[p]`` → ``("TestA", "test_b")``: the parameters are kept in the node id."""
    parts = rest.split("::")
    return (*parts[:-1], parts[-1].split("[", 1)[0]) if rest else ()


def _defs(text: str | None) -> dict[tuple[str, ...], str]:
    """Each test function's qualified name → its source as a tree (positions and comments aside)."""
    if text is None:
        return {}
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return {}
    found: dict[tuple[str, ...], str] = {}

    def walk(body: list[ast.stmt], prefix: tuple[str, ...]) -> None:
        for node in body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                found[(*prefix, node.name)] = ast.dump(node)
            elif isinstance(node, ast.ClassDef):
                walk(node.body, (*prefix, node.name))

    walk(tree.body, ())
    return found


def find_moved(repo: Path, base_sha: str, head_sha: str, failing: list[str]) -> dict[str, str]:
    """:func:`counterparts` on the change between the merge base and the head, read from git; none
    when git cannot tell (each failing test is then looked up on the base by its own id)."""
    try:
        changes = [c for c in gitdiff.changed_files(repo, base_sha, head_sha) if c.path.endswith(".py")]
        if not changes or len(changes) > MAX_MODULES:
            return {}
        on_base = [c.old_path or c.path for c in changes if c.status in _BASE_SIDE]
        heads = sorted({n.split("::")[0] for n in failing} & {c.path for c in changes})
        base_texts = gitdiff.read_files(repo, base_sha, on_base)
        head_texts = gitdiff.read_files(repo, head_sha, heads)
    except GitError as exc:
        log.info("moved tests not looked for", error=str(exc)[:200])
        return {}
    return counterparts(failing, changes, base_texts, head_texts)
