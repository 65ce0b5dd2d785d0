"""First failure first: the selected tests in the order most likely to fail, for pytest to run.

Ordering never changes which tests run, only when: the plugin (``--paritybot-order FILE``) sorts
pytest's items by the first id of this list that names them, keeping pytest's own order among
equals and for the tests the list does not name. Most likely to fail first:

1. tests that failed in this pull request's previous run, and tests in files the change adds or
   edits (a changed test is the likeliest to fail, and the one its author waits for);
2. the rest of the selection: first the tests named after what the change edits (``test_merge``
   and ``test_merge_with_none`` for an edit inside ``def merge``; then a test file named after the
   edited module), because projects name a unit test after the unit; then the tests whose
   recorded coverage is narrowest (a test that runs few lines tests the changed code most
   directly; an end-to-end test that runs half the project fails later, if at all), then the
   selection's own order (strongest signal first);
3. tests selected only because ``tests.always_run`` names them, last.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path, PurePosixPath

from bot.core.models import Selection
from runner import gitdiff
from runner.gitdiff import FileStatus
from runner.selection.coverage_map import CoverageMap

ALWAYS_RUN_REASON = "always run (tests.always_run"


def changed_test_files(repo: Path, base: str, head: str, roots: list[str]) -> set[str]:
    """Python test files (under the test roots, or named as pytest collects them by default when
    no root is configured) that the change adds or edits."""
    return {
        f.path
        for f in gitdiff.changed_files(repo, base, head)
        if f.status != FileStatus.DELETED and f.path.endswith(".py") and _is_test_file(f.path, roots)
    }


def _is_test_file(path: str, roots: list[str]) -> bool:
    prefixes = tuple(r.rstrip("/") + "/" for r in roots if r.strip("/"))
    if prefixes:
        return path.startswith(prefixes)
    name = PurePosixPath(path).name
    return name.startswith("test_") or name.endswith("_test.py")  # pytest's default python_files


class ChangedNames:
    """What a change edits, by name: the innermost functions and classes around its changed lines,
    and the stems of the modules it edits (for matching test names)."""

    def __init__(self, symbols: set[str] | None = None, modules: set[str] | None = None) -> None:
        self.symbols = {n.strip("_").lower() for n in symbols or () if len(n.strip("_")) >= 3}
        self.modules = {m.strip("_").lower() for m in modules or () if len(m.strip("_")) >= 3}

    def affinity(self, nodeid: str) -> int:
        """3: the test is named for an edited function (``test_f``); 2: its name or class holds
        one (``test_f_empty``, ``TestF``); 1: its file is named for an edited module; else 0."""
        parts = nodeid.split("::")
        func = re.sub(r"\[.*$", "", parts[-1]).lower() if len(parts) > 1 else ""
        classes = [_snake(p) for p in parts[1:-1]]
        if any(func == f"test_{n}" for n in self.symbols):
            return 3
        words = [func, *classes]
        if any(re.search(rf"(^|_){re.escape(n)}(_|$)", w) for n in self.symbols for w in words):
            return 2
        stem = PurePosixPath(parts[0]).stem.lower()
        return 1 if any(re.search(rf"(^|_){re.escape(m)}(_|$)", stem) for m in self.modules) else 0


def changed_names(repo: Path, base: str, head: str, roots: list[str]) -> ChangedNames:
    """The functions and classes enclosing the change's lines in the head's Python files outside
    the test roots (a file that does not parse gives its module's name only)."""
    lines = gitdiff.changed_lines(repo, base, head, include_deletions=True)
    sources = {p: ls for p, ls in lines.items() if p.endswith(".py") and not _is_test_file(p, roots)}
    symbols: set[str] = set()
    modules: set[str] = set()
    texts = gitdiff.read_files(repo, head, sorted(sources))
    for path, changed in sources.items():
        stem = PurePosixPath(path).stem
        modules.add(PurePosixPath(path).parent.name if stem == "__init__" else stem)
        text = texts.get(path)
        if text is not None:
            symbols |= _enclosing(text, changed)
    return ChangedNames(symbols, modules)


def _enclosing(source: str, lines: set[int]) -> set[str]:
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):  # a PR's file: anything goes
        return set()
    defs = [
        (node.lineno, node.end_lineno or node.lineno, node.name)
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
    ]
    found: set[str] = set()
    for line in lines:
        around = [(start, name) for start, end, name in defs if start <= line <= end]
        if around:
            found.add(max(around)[1])  # the innermost: the latest start that encloses it
    return found


def _snake(name: str) -> str:
    """``TestMergeWith`` → ``test_merge_with``."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).lower()


def coverage_breadth(cmap: CoverageMap | None) -> dict[str, int]:
    """Test id → how many lines its recorded coverage holds (none: no map)."""
    if cmap is None:
        return {}
    counts = [0] * len(cmap.tests)
    for lines in cmap.files.values():
        for indexes in lines.values():
            for i in indexes:
                counts[i] += 1
    return dict(zip(cmap.tests, counts, strict=True))


def failure_first(
    selection: Selection,
    changed_files: set[str],
    recently_failed: set[str],
    breadth: dict[str, int] | None = None,
    names: ChangedNames | None = None,
    covering: set[str] | None = None,
) -> list[str]:
    """The ids to run first, in order: an order file for the plugin. With the whole suite selected,
    the changed test files and recent failures, then the tests of the coverage map that run the
    changed lines (``covering``) or are named for what the change edits; the rest after them."""
    first = sorted(recently_failed) + sorted(changed_files - recently_failed)
    known = breadth or {}
    named = names or ChangedNames()
    if selection.whole_suite:
        middle = [t for t in known if t in (covering or set()) or named.affinity(t) > 0]
    else:
        middle = [t.nodeid for t in selection.tests if not _only_always_run(t.reasons)]
    # stable: the selection's (or the map's) order among equals
    middle.sort(key=lambda n: (-named.affinity(n), known.get(n, 1 << 62)))
    last = [t.nodeid for t in selection.tests if _only_always_run(t.reasons)]
    return list(dict.fromkeys([*first, *middle, *last]))


def covering_tests(cmap: CoverageMap | None, lines: dict[str, set[int]]) -> set[str]:
    """The map's tests that ran any of the changed lines (an ordering hint: the map may be of an
    older commit, and ordering never changes which tests run)."""
    if cmap is None:
        return set()
    return {t for path, numbers in lines.items() for t in cmap.tests_at(path, numbers)}


def _only_always_run(reasons: list[str]) -> bool:
    return bool(reasons) and all(r.startswith(ALWAYS_RUN_REASON) for r in reasons)
