"""Which tests a change can affect, and why.

Signals, strongest first; each adds a reason to every test it selects:

1. ``tests.always_run`` from the config;
2. tests the PR edits or adds;
3. the per-test line coverage map of the base commit: tests that executed a changed line, or,
   for changed code no test executed line by line, the function (or class) around it; lines that
   run only at import time (``def`` lines, module constants) go to the tests that run the code
   using them;
4. the static import graph, resolved to the names actually used, for code the map cannot know
   (new files, new functions, no map at all) and for removed names;
5. file names (``tests/test_ops.py`` ↔ ``ops.py``) where the map cannot help.

A change to conftest.py, packaging, CI files, ``tests.whole_suite_globs`` or compiled sources
selects the whole suite. A change that cannot alter behaviour (comments, docstrings, formatting
that leaves the syntax tree equal) selects nothing. ``tests.max_tests`` keeps the strongest
signals and lists what it cut.

The decision (:func:`select_for_change`) is a pure function of the change, the settings, the map
and a source reader; :mod:`runner.selection.pr` reads the pull request from git around it.

Why one module past 400 lines: the signals above are ranked against each other and the budget cuts
across them, so they share one set of hits; each signal is a short function of its own below.
"""

from __future__ import annotations

import difflib
import fnmatch
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from enum import IntEnum
from pathlib import Path, PurePosixPath

import structlog
from pydantic import BaseModel, ConfigDict, Field

from bot.core.config import TestSettings
from bot.core.models import SelectedTest, Selection
from runner import gitdiff
from runner.gitdiff import FileStatus
from runner.selection.coverage_map import CoverageMap
from runner.selection.import_graph import (
    MODULE_BODY,
    WHOLE_MODULE,
    ImportGraph,
    LineInfo,
    ModuleInfo,
    SymbolKey,
    SymbolKind,
    analyze_module,
    build_graph,
    innermost,
    is_test_file,
    is_test_symbol,
    line_info,
    module_names,
    python_files,
    symbol_at,
    symbols_at,
)
from runner.selection.neutral import behaviour_neutral, changed_doctests, unchanged_imports

log = structlog.get_logger(__name__)

# Sources a coverage tracer cannot see into: a change there may affect any test.
COMPILED_SUFFIXES = {
    ".c", ".cc", ".cpp", ".cxx", ".cu", ".cuh", ".h", ".hh", ".hpp", ".hxx",
    ".pyx", ".pxd", ".pxi", ".f", ".f90", ".rs", ".metal", ".cl",
}  # fmt: skip
# Files no test reads.
DOC_SUFFIXES = {".md", ".rst", ".adoc", ".png", ".jpg", ".jpeg", ".gif", ".svg", ".ipynb", ".bib"}
DOC_DIRS = {"docs", "doc", ".github"}
DOC_NAMES = {"LICENSE", "LICENCE", "COPYING", "AUTHORS", "CHANGELOG", "NOTICE", "CODEOWNERS", ".gitignore"}
MAX_LINES_SHOWN = 6
MAX_REASONS = 6


class Signal(IntEnum):
    """Strength of a reason; lower is stronger (kept first under a budget)."""

    ALWAYS = 0
    EDITED = 1
    LINE = 2
    FUNCTION = 3
    IMPORT_TIME = 4
    STATIC = 5
    NAME = 6
    BASE_BRANCH = 7  # changed on the base branch since the coverage map was recorded


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


# --- Collecting hits --------------------------------------------------------------------------------


@dataclass
class _Hit:
    rank: Signal
    weight: int = 0
    reasons: list[tuple[Signal, str]] = field(default_factory=list)
    lines: dict[str, set[int]] = field(default_factory=dict)


class _Hits:
    """Per test: the strongest signal, how much of the change it covers, and the reasons.

    While ``relabel`` is set (the change the base branch made since the coverage map), every hit
    is recorded as that, the weakest signal, with that reason: it is not the PR's change.
    """

    def __init__(self, enabled: frozenset[Signal] | None = None) -> None:
        self.by_test: dict[str, _Hit] = {}
        self.enabled = enabled if enabled is not None else frozenset(Signal)
        self.relabel: str | None = None

    def add(self, nodeid: str, rank: Signal, reason: str, weight: int = 1) -> None:
        if rank not in self.enabled:
            return
        if self.relabel is not None:
            rank, reason = Signal.BASE_BRANCH, self.relabel
        hit = self.by_test.setdefault(nodeid, _Hit(rank=rank))
        hit.rank = min(hit.rank, rank)
        hit.weight += weight
        if (rank, reason) not in hit.reasons:
            hit.reasons.append((rank, reason))

    def add_line(self, nodeid: str, path: str, line: int) -> None:
        if Signal.LINE not in self.enabled:
            return
        if self.relabel is not None:
            self.add(nodeid, Signal.LINE, "")
            return
        hit = self.by_test.setdefault(nodeid, _Hit(rank=Signal.LINE))
        hit.rank = min(hit.rank, Signal.LINE)
        hit.weight += 1
        hit.lines.setdefault(path, set()).add(line)

    def ranked(self) -> list[tuple[str, _Hit]]:
        return sorted(self.by_test.items(), key=lambda kv: (kv[1].rank, -kv[1].weight, kv[0]))


def _line_reason(path: str, lines: set[int]) -> str:
    shown = sorted(lines)
    text = ", ".join(str(n) for n in shown[:MAX_LINES_SHOWN])
    if len(shown) > MAX_LINES_SHOWN:
        text += f" (+{len(shown) - MAX_LINES_SHOWN} more)"
    return f"covers {path}:{text} changed in this PR"


def _reasons(hit: _Hit) -> list[str]:
    tagged = [(Signal.LINE, _line_reason(p, ls)) for p, ls in sorted(hit.lines.items())]
    tagged.extend(hit.reasons)
    ordered = [text for _, text in sorted(tagged, key=lambda t: t[0])]
    if len(ordered) > MAX_REASONS:
        ordered = [*ordered[: MAX_REASONS - 1], f"and {len(ordered) - MAX_REASONS + 1} more reasons"]
    return ordered


# --- The test universe ------------------------------------------------------------------------------


def split_nodeid(nodeid: str) -> tuple[str, list[str], str]:
    """``file::Class::test[param]`` → (file, [Class, test], "[param]"); a param may contain ``::``."""
    path, sep, rest = nodeid.partition("::")
    if not sep:
        return path, [], ""
    names, bracket, param = rest.partition("[")
    return path, names.split("::"), f"{bracket}{param}"


class _Universe:
    """The tests that exist at head: collected node ids when given, else the static test symbols."""

    def __init__(
        self,
        all_tests: list[str] | None,
        test_files: set[str],
        head_files: Iterable[str],
        reader: Callable[[list[str]], dict[str, str | None]],
        earlier: _Universe | None = None,
    ) -> None:
        self.all_tests = all_tests
        self.earlier = earlier
        self._all = set(all_tests or [])
        self._head_files = set(head_files)
        self.test_files = set(test_files)
        if all_tests is not None:
            self.test_files |= {split_nodeid(n)[0] for n in all_tests}
        self._read = reader
        self._defs: dict[str, tuple[ModuleInfo, LineInfo]] = {}
        self._names: dict[str, list[str]] | None = None
        self._paths: dict[str, str] = {}
        self._by_file: dict[str, list[str]] = {}
        for nodeid in all_tests or []:
            self._by_file.setdefault(split_nodeid(nodeid)[0], []).append(nodeid)

    def exists(self, nodeid: str) -> bool:
        """Whether a node id (from the coverage map of an older commit, say) still names a test.

        Without collected ids the answer comes from the test file's source: a missing file, or a
        test function or class no longer defined there, is gone; so is a method neither the class
        nor its base classes in the repository define. A method another package's base class may
        provide, a name bound by an import or a star import, is given the benefit of the doubt.
        """
        if nodeid in self._all:
            return True
        path, names, param = split_nodeid(nodeid)
        if self.all_tests is not None:
            return not param and bool(self.expand(path, names))
        if path not in self.test_files:
            return path in self._head_files  # a doctest item names the source module's objects
        return not names or self._defined(path, names)

    def _module(self, path: str) -> tuple[ModuleInfo, LineInfo]:
        if path not in self._defs:
            text = self._read([path])[path]
            name = self._module_names().get(path, [PurePosixPath(path).stem])[0]
            self._defs[path] = (analyze_module(path, name, text or "", is_test=True), line_info(text or ""))
        return self._defs[path]

    def _module_names(self) -> dict[str, list[str]]:
        if self._names is None:
            self._names = module_names(python_files(self._head_files))
            self._paths = {n: p for p, names in self._names.items() for n in names}
        return self._names

    def _defined(self, path: str, names: list[str]) -> bool:
        module, info = self._module(path)
        if module.error or module.star_imports or "__getattr__" in module.symbols:
            return True
        top = module.symbols.get(names[0])
        if top is None:
            return False
        if len(names) == 1 or top.kind != SymbolKind.CLASS:
            return True
        qualified = {q for q, _, _ in [*info.functions, *info.classes]}
        for depth in range(1, len(names)):
            if ".".join(names[: depth + 1]) not in qualified:
                # Not in the class body: inherited from a base class, or gone.
                return self._inherited(path, ".".join(names[:depth]), names[depth], frozenset())
        return True

    def _inherited(self, path: str, owner: str, name: str, seen: frozenset[tuple[str, str]]) -> bool:
        """Whether class ``owner`` of ``path`` may inherit ``name`` from one of its base classes.

        A base class of this repository is read (a mixin in the same file or in ``tests/__init__.py``):
        it must define the name, itself or through its own bases. A base class that is not, another
        package's, is given the benefit of the doubt, unless the class's own body defined the name
        at the earlier commit: then it was renamed or removed since.
        """
        module, _ = self._module(path)
        sym = module.symbols.get(owner)
        if sym is None:
            return True  # a nested class: its bases are not recorded, so it may inherit
        for base in sym.bases:
            if base in _PLAIN_BASES or _from_stdlib(module, base):
                continue  # unittest.TestCase, typing.Protocol, abc.ABC: no test methods to inherit
            where = self._resolve(module, base)
            if where is None:
                if self.earlier is None or not self.earlier.in_body(path, owner, name):
                    return True
                continue
            if where in seen:
                return True
            if self._defines(*where, name, seen | {where}):
                return True
        return False

    def _defines(self, path: str, owner: str, name: str, seen: frozenset[tuple[str, str]]) -> bool:
        module, _ = self._module(path)
        sym = module.symbols.get(owner)
        if module.error or module.star_imports or sym is None or sym.kind != SymbolKind.CLASS:
            return True  # not a class this reading can follow
        return self.in_body(path, owner, name) or self._inherited(path, owner, name, seen)

    def in_body(self, path: str, owner: str, name: str) -> bool:
        """Whether class ``owner`` of ``path`` defines method ``name`` itself."""
        return f"{owner}.{name}" in {q for q, _, _ in self._module(path)[1].functions}

    def _resolve(self, module: ModuleInfo, base: str) -> tuple[str, str] | None:
        """The file and class a base class written as ``base`` names, when this repository has it."""
        here = module.symbols.get(base)
        if here is not None and here.kind == SymbolKind.CLASS:
            return module.path, base
        first, _, rest = base.partition(".")
        self._module_names()
        for target in module.imports.get(first, []):
            dotted = f"{target}.{rest}" if rest else target
            owner_module, _, owner = dotted.rpartition(".")
            if owner_module in self._paths:
                return self._paths[owner_module], owner
        return None

    def expand(self, path: str, names: list[str] | None = None) -> list[str]:
        """Node ids under ``path::names`` (all parametrized cases, all methods of a class)."""
        if self.all_tests is not None:
            prefix = "::".join([path, *(names or [])])
            return [
                n
                for n in self._by_file.get(path, [])
                if n == prefix or n.startswith((f"{prefix}::", f"{prefix}["))
            ]
        if names:
            return ["::".join([path, *names])]
        return self._static_tests(path)

    def _static_tests(self, path: str) -> list[str]:
        text = self._read([path])[path]
        if text is None:
            return []
        module = analyze_module(path, PurePosixPath(path).stem, text, is_test=True)
        ids = [f"{path}::{s.name}" for s in module.symbols.values() if is_test_symbol(s, module)]
        return ids or [path]


_PLAIN_BASES = {"object", "TestCase", "unittest.TestCase", "IsolatedAsyncioTestCase"}


def _from_stdlib(module: ModuleInfo, base: str) -> bool:
    first = base.partition(".")[0]
    targets = module.imports.get(first, [])
    return bool(targets) and all(t.partition(".")[0] in sys.stdlib_module_names for t in targets)


def parse_collect_only(output: str) -> list[str]:
    """Node ids from ``pytest --collect-only -q`` output, in collection order.

    Summary lines, warnings and errors are skipped; a parametrized id may contain spaces and
    ``::`` inside its brackets.
    """
    ids: list[str] = []
    for raw in output.splitlines():
        if not raw or raw[0].isspace() or raw.startswith(("=", "_", "-")):
            continue
        line = raw.rstrip()
        path, sep, rest = line.partition("::")
        if not sep or not rest or any(c.isspace() for c in path):
            continue
        ids.append(line)
    return list(dict.fromkeys(ids))


def discover_test_files(files: Iterable[str], settings: TestSettings) -> set[str]:
    """Test files under the configured roots (pytest's default name patterns); anywhere if none match."""
    candidates = python_files(files)
    found = {p for p in candidates if is_test_file(p, settings.paths)}
    return found or {p for p in candidates if is_test_file(p)}


# --- Whole-suite triggers ----------------------------------------------------------------------------


def _glob(path: str, pattern: str) -> bool:
    if fnmatch.fnmatchcase(path, pattern):
        return True
    # ``**/x`` also means ``x`` at the root, as in .gitignore.
    return pattern.startswith("**/") and fnmatch.fnmatchcase(path, pattern[3:])


def whole_suite_reasons(changes: list[FileChange], settings: TestSettings) -> list[str]:
    """Why the whole suite must run, one line per file; empty when a targeted run is enough."""
    reasons = []
    for change in changes:
        for path in dict.fromkeys([change.path, change.base_path]):
            pattern = next((g for g in settings.whole_suite_globs if _glob(path, g)), None)
            if pattern is not None:
                reasons.append(f"`{path}` changed (matches `{pattern}` in tests.whole_suite_globs)")
                break
            if PurePosixPath(path).suffix.lower() in COMPILED_SUFFIXES:
                reasons.append(f"`{path}` changed: compiled code, which coverage cannot attribute to tests")
                break
    return reasons


def _is_doc(path: str) -> bool:
    pure = PurePosixPath(path)
    return (
        pure.suffix.lower() in DOC_SUFFIXES
        or pure.stem.upper() in DOC_NAMES
        or pure.name in DOC_NAMES
        or (len(pure.parts) > 1 and pure.parts[0] in DOC_DIRS)
    )


# --- Changed lines ------------------------------------------------------------------------------------


@dataclass
class _Diff:
    """Base-side lines replaced or deleted, and head-side lines added, of one file."""

    base_lines: list[int] = field(default_factory=list)
    inserted: list[int] = field(default_factory=list)  # head lines of pure insertions
    head_lines: list[int] = field(default_factory=list)  # every head line added or modified


def diff_lines(base_text: str, head_text: str) -> _Diff:
    base, head = base_text.splitlines(), head_text.splitlines()
    out = _Diff()
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
            out.head_lines.extend(n for n in (j1, j1 + 1) if 1 <= n <= len(head))
    return out


# --- The decision -----------------------------------------------------------------------------------


@dataclass
class _Context:
    change: ChangeSet
    settings: TestSettings
    cmap: CoverageMap | None
    read: SourceReader
    universe: _Universe
    hits: _Hits
    removed: set[str] = field(default_factory=set)  # selected, but not a test at head
    _unchanged_imports: dict[str, set[str]] = field(default_factory=dict)
    _graphs: dict[str, ImportGraph] = field(default_factory=dict)
    _names: dict[str, str] = field(default_factory=dict)
    _line_info: dict[str, LineInfo] = field(default_factory=dict)

    def graph(self, side: str) -> ImportGraph:
        """The import graph of base or head, built on first use (it reads every Python file)."""
        if side not in self._graphs:
            rev = self.change.head if side == "head" else self.change.base
            files = python_files(self.change.head_files if side == "head" else self.change.base_files)
            texts = self.read(rev, files)
            sources = {p: t for p, t in texts.items() if t is not None}
            self._graphs[side] = build_graph(sources, test_files=self.universe.test_files)
        return self._graphs[side]

    def base_line_info(self, path: str) -> LineInfo:
        if path not in self._line_info:
            text = self.read(self.change.base, [path]).get(path)
            self._line_info[path] = line_info(text or "")
        return self._line_info[path]

    def module_name(self, path: str) -> str:
        if not self._names:
            every = module_names(python_files([*self.change.head_files, *self.change.base_files]))
            self._names = {p: names[0] for p, names in every.items() if names}
        return self._names.get(path, PurePosixPath(path).stem)

    def add_tests(self, nodeids: Iterable[str], rank: Signal, reason: str, weight: int = 1) -> None:
        for nodeid in nodeids:
            if self.universe.exists(nodeid):
                self.hits.add(nodeid, rank, reason, weight)
            elif rank in self.hits.enabled:
                self.removed.add(nodeid)

    def unchanged_imports(self, fc: FileChange) -> set[str]:
        """Names the change's import lines bind as before (see :func:`neutral.unchanged_imports`)."""
        if fc.path not in self._unchanged_imports:
            both = fc.base_text is not None and fc.head_text is not None
            self._unchanged_imports[fc.path] = (
                unchanged_imports(fc.base_text or "", fc.head_text or "") if both else set()
            )
        return self._unchanged_imports[fc.path]

    def tests_running(self, path: str, first: int, last: int) -> set[str]:
        """Tests that ran lines ``first``–``last`` of ``path``, or whose module's import did."""
        assert self.cmap is not None
        tests = self.cmap.tests_between(path, first, last)
        for module in self.cmap.importers_between(path, first, last):
            tests.update(self.universe.expand(module))
        return tests


@dataclass
class Drift:
    """What the base branch changed between the coverage map's commit and the merge base.

    The map describes ``change.base``; the tests that change reaches are added to the selection,
    said to be for that reason, because the map may no longer know how they run.
    """

    change: ChangeSet
    cmap: CoverageMap


def neutral_files(changes: list[FileChange]) -> list[str]:
    """Changed Python files whose change cannot alter behaviour (see :mod:`runner.selection.neutral`)."""
    return [
        fc.path
        for fc in changes
        if fc.path.endswith(".py")
        and fc.base_text is not None
        and fc.head_text is not None
        and fc.base_path == fc.path
        and behaviour_neutral(fc.base_text, fc.head_text)
    ]


def select_for_change(
    change: ChangeSet,
    settings: TestSettings,
    read: SourceReader,
    coverage_map: CoverageMap | None = None,
    all_tests: list[str] | None = None,
    signals: frozenset[Signal] | None = None,
    drift: Drift | None = None,
) -> Selection:
    """Decide the tests for a change already read from git (see the module docstring).

    ``coverage_map`` must describe ``change.base``'s lines (:func:`runner.selection.pr.rebase_map`
    makes an older map do so); ``drift`` is what the base branch changed since the map's own
    commit. ``signals`` limits which signals may select (all by default); the benchmark uses it
    to measure each one alone.
    """
    total = len(all_tests) if all_tests is not None else None
    neutral = neutral_files(change.files)
    files = [fc for fc in change.files if fc.path not in neutral]
    whole = whole_suite_reasons(files, settings)
    if whole:
        return Selection(
            whole_suite=True, whole_suite_reasons=whole, total_tests=total, unchanged_behaviour=neutral
        )
    test_files = discover_test_files(change.head_files, settings)

    def read_at(sha: str) -> Callable[[list[str]], dict[str, str | None]]:
        return lambda paths: read(sha, paths)

    base_tests = discover_test_files(change.base_files, settings)
    at_base = _Universe(None, base_tests, change.base_files, read_at(change.base))
    universe = _Universe(all_tests, test_files, change.head_files, read_at(change.head), at_base)
    hits = _Hits(signals)
    ctx = _Context(change, settings, coverage_map, read, universe, hits)
    for fc in files:
        _select_for_file(ctx, fc, test_files)
    _always_run(ctx)
    if drift is not None and any(not _is_doc(fc.path) for fc in files):
        # Only a change the map is asked about needs the map's blind spots covered.
        _drift(drift, ctx)
    selection = _apply_budget(hits, settings, total)
    selection.unchanged_behaviour = neutral
    gone = ctx.removed - {t.nodeid for t in selection.tests}
    # The tests gone at head that the merge base had: this PR renamed or removed them (the others
    # the base branch removed after the coverage map was recorded).
    selection.removed = sorted(n for n in gone if at_base.exists(n))
    return selection


def _drift(drift: Drift, pr: _Context) -> None:
    """The tests the base branch's own change since the map reaches, labelled as such."""
    ctx = _Context(drift.change, pr.settings, drift.cmap, pr.read, pr.universe, pr.hits)
    test_files = discover_test_files(drift.change.head_files, pr.settings)
    since = (drift.cmap.commit or drift.change.base)[:12]
    neutral = set(neutral_files(drift.change.files))
    try:
        for fc in drift.change.files:
            if fc.path in neutral:
                continue
            pr.hits.relabel = (
                f"`{fc.path}` changed on the base branch since the coverage map ({since}) was recorded"
            )
            _select_for_file(ctx, fc, test_files)
    finally:
        pr.hits.relabel = None
    pr.removed.update(ctx.removed)


def _select_for_file(ctx: _Context, fc: FileChange, test_files: set[str]) -> None:
    path = fc.path
    if _is_doc(path):
        return
    if PurePosixPath(path).suffix != ".py":
        _data_file(ctx, fc)
        return
    if path in test_files or fc.base_path in test_files:
        _edited_tests(ctx, fc)
    elif fc.base_text is not None and fc.head_text is not None:
        _doctests(ctx, fc)
    known = ctx.cmap is not None and ctx.cmap.knows(fc.base_path) and fc.base_text is not None
    if known:
        _coverage(ctx, fc)
        if path not in test_files and ctx.cmap is not None and ctx.cmap.holes():
            # Test modules that did not collect when the map was recorded: the map cannot speak
            # for them, the static graph and the file names can.
            _static(ctx, fc, fallback=True, only=set(ctx.cmap.holes()))
            _name_match(ctx, fc, only=set(ctx.cmap.holes()))
    else:
        _static(ctx, fc, fallback=ctx.cmap is not None)
        if path not in test_files:
            _name_match(ctx, fc)


def _doctests(ctx: _Context, fc: FileChange) -> None:
    """A changed doctest selects the doctest items of its file that pytest collected (or the map knows)."""
    assert fc.base_text is not None and fc.head_text is not None
    changed = changed_doctests(fc.base_text, fc.head_text)
    if not changed:
        return
    known = set(ctx.universe.all_tests or []) | set(ctx.cmap.tests if ctx.cmap is not None else [])
    items = [n for n in known if split_nodeid(n)[0] in (fc.path, fc.base_path)]
    module = ctx.module_name(fc.path)
    for qual in changed:
        target = f"{module}.{qual}" if qual else module
        chosen = [n for n in items if split_nodeid(n)[1][-1:] == [target]] or items
        ctx.add_tests(chosen, Signal.EDITED, f"a doctest of `{target}`, which this PR changes")


# --- Signal: tests the PR edits ----------------------------------------------------------------------


def _edited_tests(ctx: _Context, fc: FileChange) -> None:
    if fc.head_text is None:
        return  # a deleted test file: nothing left to run
    if fc.status == FileStatus.ADDED or fc.base_text is None:
        ctx.add_tests(ctx.universe.expand(fc.path), Signal.EDITED, "added by this PR", weight=3)
        return
    if fc.base_path != fc.path:
        # Its node ids are new: every test in it is one the map has never seen.
        reason = f"moved by this PR from {fc.base_path}"
        ctx.add_tests(ctx.universe.expand(fc.path), Signal.EDITED, reason, weight=3)
    diff = diff_lines(fc.base_text, fc.head_text)
    info = line_info(fc.head_text)
    module = analyze_module(fc.path, PurePosixPath(fc.path).stem, fc.head_text, is_test=True)
    helpers: set[str] = set()
    test_classes = {
        s.name for s in module.symbols.values() if s.kind == SymbolKind.CLASS and is_test_symbol(s, module)
    }
    for line in sorted(set(diff.head_lines)):
        if line not in info.statement:
            continue  # a comment or a blank line
        names = _test_names_at(info, line, test_classes)
        if names is not None:
            ctx.add_tests(ctx.universe.expand(fc.path, names), Signal.EDITED, "edited by this PR", weight=3)
            continue
        top = symbol_at(module, line)
        sym = module.symbols.get(top) if top else None
        if sym is None or sym.kind in (SymbolKind.IMPORT, SymbolKind.BODY):
            reason = f"in {fc.path}, whose module-level code this PR changes"
            ctx.add_tests(ctx.universe.expand(fc.path), Signal.EDITED, reason)
        else:
            helpers.add(sym.name)
    if helpers:
        _edited_helpers(ctx, fc, module, helpers)


def _test_names_at(info: LineInfo, line: int, test_classes: set[str]) -> list[str] | None:
    """The node-id names of the test (or test class) holding ``line``; ``None`` outside any test.

    ``TestA.TestB.test_c`` → ``["TestA", "TestB", "test_c"]``; a helper method of ``TestA`` →
    ``["TestA"]`` (the whole class); a module-level helper → ``None``.
    """
    classes = {c[0] for c in info.classes}
    scopes = sorted((s for s in [*info.functions, *info.classes] if s[1] <= line <= s[2]), key=lambda s: s[1])
    names: list[str] = []
    for qual, _, _ in scopes:
        leaf = qual.rpartition(".")[2]
        if qual in classes and (leaf.startswith("Test") or qual in test_classes):
            names.append(leaf)
        elif qual not in classes and leaf.startswith("test"):
            return [*names, leaf]
        else:
            break
    return names or None


def _edited_helpers(ctx: _Context, fc: FileChange, module: ModuleInfo, helpers: set[str]) -> None:
    """A changed helper or fixture in a test file selects the tests of that file that use it."""
    graph = ImportGraph([module], test_roots=None)
    reached = graph.tests_reaching(SymbolKey(path=fc.path, name=h) for h in helpers)
    for key, reach in reached.items():
        reason = f"uses `{reach.chain[-1].name}` in {fc.path}, which this PR changes"
        ctx.add_tests(ctx.universe.expand(fc.path, [key.name]), Signal.EDITED, reason, weight=2)


# --- Signal: the coverage map of the base commit -----------------------------------------------------


def _coverage(ctx: _Context, fc: FileChange) -> None:
    assert ctx.cmap is not None and fc.base_text is not None
    cmap, path = ctx.cmap, fc.base_path
    base_info = line_info(fc.base_text)
    head_text = fc.head_text or ""
    diff = diff_lines(fc.base_text, head_text)
    done: set[int] = set()
    for line in diff.base_lines:
        stmt = base_info.statement_lines(line)
        if not stmt or stmt[0] in done:
            continue  # comment, blank line, docstring; or a statement already looked up
        done.add(stmt[0])
        if any(n in cmap.unmapped.get(path, ()) for n in stmt):
            # Added on the base branch after the map was recorded: the map cannot know it.
            _static_lines(ctx, fc, head_lines=set(), base_lines=set(stmt), new_only=False, changed=True)
            continue
        tests = cmap.tests_at(path, stmt)
        for nodeid in tests:
            if ctx.universe.exists(nodeid):
                ctx.hits.add_line(nodeid, fc.path, min(stmt))
            else:
                ctx.removed.add(nodeid)
        importers = cmap.importers_at(path, stmt)
        for module in sorted(importers):
            reason = (
                f"{module} runs {fc.path}:{min(stmt)} while it is imported, and this PR changes that line"
            )
            ctx.add_tests(ctx.universe.expand(module), Signal.LINE, reason)
        if any(cmap.import_time(path, n) for n in stmt):
            _import_time(ctx, fc, base_info, min(stmt))
        elif not tests and not importers:
            _enclosing_function(ctx, fc, base_info, line, "which this PR changes")
    if fc.head_text is not None:
        _insertions(ctx, fc, base_info, diff)


def _enclosing_function(ctx: _Context, fc: FileChange, info: LineInfo, line: int, what: str) -> bool:
    """Function level: tests that ran any line of the function (or class) around ``line``."""
    assert ctx.cmap is not None
    scope = innermost(info.functions, line) or innermost(info.classes, line)
    if scope is None:
        return False
    qual, first, last = scope
    tests = ctx.tests_running(fc.base_path, first, last)
    kind = "class" if scope in info.classes else "function"
    reason = f"runs {kind} `{ctx.module_name(fc.path)}.{qual}` ({fc.path}:{first}–{last}), {what}"
    ctx.add_tests(tests, Signal.FUNCTION, reason)
    return bool(tests)


def _insertions(ctx: _Context, fc: FileChange, base_info: LineInfo, diff: _Diff) -> None:
    """Added lines: the existing function or class they extend, else the static graph for new code."""
    assert fc.head_text is not None
    head_info = line_info(fc.head_text)
    base_scopes = {q: (a, b) for q, a, b in [*base_info.functions, *base_info.classes]}
    new_lines: set[int] = set()
    for line in sorted(set(diff.head_lines)):
        if line not in head_info.statement:
            continue
        scope = innermost(head_info.functions, line) or innermost(head_info.classes, line)
        container = _existing_container(scope[0] if scope else None, base_scopes)
        if container is not None and line in diff.inserted:
            first, _ = base_scopes[container]
            _enclosing_function(ctx, fc, base_info, first, "which this PR extends")
        elif container is None:
            new_lines.add(line)
    if new_lines:
        _static_lines(ctx, fc, head_lines=new_lines, base_lines=set(), new_only=True)


def _existing_container(qual: str | None, base_scopes: dict[str, tuple[int, int]]) -> str | None:
    """The nearest enclosing function/class (by qualified name) that already exists at base."""
    while qual:
        if qual in base_scopes:
            return qual
        qual = qual.rpartition(".")[0]
    return None


def _import_time(ctx: _Context, fc: FileChange, info: LineInfo, line: int) -> None:
    """A statement that ran while importing: a ``def`` line, a class attribute, a module constant,
    or the body of a function that module-level code calls (a decorator factory, a table builder).

    A definition goes to the tests that run the function or class. Anything else built at import
    time reaches every user of the enclosing top-level name, so those users' tests are found
    through coverage (through the static graph when coverage finds none).
    """
    scope = innermost([*info.functions, *info.classes], line)
    if scope is not None:
        is_header = info.statement.get(line) == info.statement.get(scope[1])
        definition = is_header or scope in info.classes
        tested = definition and _enclosing_function(ctx, fc, info, line, "whose definition this PR changes")
        # A decorator factory also runs while importing the modules that use it.
        if tested and not _body_runs_at_import(ctx, fc.base_path, [(scope[1], scope[2])]):
            return
    _import_users(ctx, fc, line)


def _import_users(ctx: _Context, fc: FileChange, line: int) -> None:
    """Tests of the code that uses the top-level names defined at ``line`` (of the base commit)."""
    graph = ctx.graph("base")
    module = graph.modules.get(fc.base_path)
    if module is None:
        return
    names = symbols_at(module, line)
    kept = [n for n in names if n not in ctx.unchanged_imports(fc)]
    for name in kept if names else [MODULE_BODY]:
        changed = SymbolKey(path=fc.base_path, name=name)
        if not _users_by_coverage(ctx, fc, graph, changed, line):
            _reach(ctx, graph, [changed], Signal.STATIC, "which this PR changes")


def _users_by_coverage(
    ctx: _Context, fc: FileChange, graph: ImportGraph, changed: SymbolKey, line: int
) -> bool:
    """Tests that ran code reading a changed module-level name, found by coverage; any found?

    The walk goes through aliases and derived constants (``from .ops import FACTOR``,
    ``LIMIT = FACTOR * 2``), which copy the value at import time, and stops at functions and
    classes that tests run: a test affected by the change must run one of them, and coverage
    says which did.
    """
    assert ctx.cmap is not None
    before = len(ctx.hits.by_test)
    if changed.name == MODULE_BODY:
        name = ctx.module_name(fc.path)
        reason = f"imports `{name}`, whose module-level code this PR changes ({fc.path}:{line})"
        ctx.add_tests(ctx.tests_running(fc.base_path, 1, 10**9), Signal.IMPORT_TIME, reason)
        return len(ctx.hits.by_test) > before
    label = graph.display(changed)
    seen = {changed}
    queue = [changed]
    found = False
    while queue:
        key = queue.pop()
        for user in sorted(graph.rdeps.get(key, ()), key=lambda k: (k.path, k.name)):
            if user in seen or user.name == WHOLE_MODULE:
                continue
            seen.add(user)
            sym = graph.modules[user.path].symbols.get(user.name)
            if sym is None or sym.kind == SymbolKind.BODY:
                continue  # module-level code calling it: followed through the state it fills, below
            if sym.kind not in (SymbolKind.FUNCTION, SymbolKind.CLASS):
                queue.append(user)
                continue
            reason = f"runs `{graph.display(user)}`, which uses `{label}` changed in this PR"
            tests = {t for first, last in sym.ranges for t in ctx.tests_running(user.path, first, last)}
            found = found or bool(tests)
            ctx.add_tests(tests, Signal.IMPORT_TIME, reason)
            if not tests or (
                sym.kind == SymbolKind.FUNCTION and _body_runs_at_import(ctx, user.path, sym.ranges)
            ):
                # It runs at import time (a registry filled by module-level code): what it builds
                # reaches its callers and the readers of the module-level state it may fill.
                queue.append(user)
                state = [d for d in graph.deps.get(user, ()) if _is_variable(graph, d) and d not in seen]
                seen.update(state)
                queue.extend(state)
    return found


def _is_variable(graph: ImportGraph, key: SymbolKey) -> bool:
    module = graph.modules.get(key.path)
    sym = module.symbols.get(key.name) if module else None
    return sym is not None and sym.kind == SymbolKind.VARIABLE


def _body_runs_at_import(ctx: _Context, path: str, ranges: list[tuple[int, int]]) -> bool:
    """Whether module-level code called the function while importing (its body ran then)."""
    assert ctx.cmap is not None
    imported = set(ctx.cmap.import_lines.get(path, ()))
    if not imported:
        return False
    info = ctx.base_line_info(path)
    for first, last in ranges:
        header = info.statement.get(first)
        if any(n in imported and info.statement.get(n) not in (None, header) for n in range(first, last + 1)):
            return True
    return False


# --- Signal: the static import graph ------------------------------------------------------------------


def _static(ctx: _Context, fc: FileChange, *, fallback: bool, only: set[str] | None = None) -> None:
    """Symbols at the changed lines → tests that use them, resolved through re-exports.

    ``only``: test files to select from (the holes of a partial coverage map)."""
    if Signal.STATIC not in ctx.hits.enabled:
        return
    head_lines: set[int] = set()
    base_lines: set[int] = set()
    if fc.base_text is not None and fc.head_text is not None:
        diff = diff_lines(fc.base_text, fc.head_text)
        head_lines, base_lines = set(diff.head_lines), set(diff.base_lines)
    elif fc.head_text is not None:
        head_lines = set(range(1, fc.head_text.count("\n") + 2))
    elif fc.base_text is not None:
        base_lines = set(range(1, fc.base_text.count("\n") + 2))
    _static_lines(ctx, fc, head_lines, base_lines, new_only=False, fallback=fallback, only=only)


def _static_lines(
    ctx: _Context,
    fc: FileChange,
    head_lines: set[int],
    base_lines: set[int],
    *,
    new_only: bool,
    fallback: bool = True,
    changed: bool = False,
    only: set[str] | None = None,
) -> None:
    """``changed``: base lines whose symbols the PR changes (not only those it removes)."""
    note = " (no coverage data for it yet)" if fallback else ""
    if only is not None:
        note = " (its test module did not collect when the coverage map was recorded)"
    if head_lines and fc.head_text is not None:
        graph = ctx.graph("head")
        module = graph.modules.get(fc.path)
        base_names = _top_names(fc.base_text, fc.base_path) if new_only else set()
        if module is not None:
            names = {n for line in head_lines for n in symbols_at(module, line)} - ctx.unchanged_imports(fc)
            if new_only:
                # New code the map cannot know; a new import line only matters through its users.
                names = {n for n in names - base_names if module.symbols[n].kind != SymbolKind.IMPORT}
            keys = [SymbolKey(path=fc.path, name=n) for n in sorted(names)]
            verb = "adds" if fc.base_text is None or new_only else "changes"
            _reach(ctx, graph, keys, Signal.STATIC, f"which this PR {verb}{note}", only)
    if base_lines and fc.base_text is not None:
        graph = ctx.graph("base")
        module = graph.modules.get(fc.base_path)
        head_names = _top_names(fc.head_text, fc.path)
        if module is not None:
            names = {n for line in base_lines for n in symbols_at(module, line)} - ctx.unchanged_imports(fc)
            if changed:
                keys = [SymbolKey(path=fc.base_path, name=n) for n in sorted(names)]
                _reach(ctx, graph, keys, Signal.STATIC, "which this PR changes (no coverage data for it yet)")
                return
            gone = sorted(names - head_names) if fc.head_text is not None else sorted(names)
            keys = [SymbolKey(path=fc.base_path, name=n) for n in gone]
            _reach(ctx, graph, keys, Signal.STATIC, f"which this PR removes or renames{note}", only)


def _top_names(text: str | None, path: str) -> set[str]:
    if text is None:
        return set()
    return set(analyze_module(path, PurePosixPath(path).stem, text).symbols)


def _reach(
    ctx: _Context,
    graph: ImportGraph,
    changed: list[SymbolKey],
    rank: Signal,
    what: str,
    only: set[str] | None = None,
) -> None:
    if not changed or rank not in ctx.hits.enabled:
        return
    for test, reach in graph.tests_reaching(changed).items():
        if only is not None and test.path not in only:
            continue
        outside = [k for k in reach.chain if k.path != test.path]
        if not outside:
            continue  # the test's own file: the edited-tests signal speaks for it
        shown = [graph.display(k) for k in outside]
        if len(shown) > 3:
            shown = [shown[0], "…", shown[-1]]
        verb = "imports" if len(outside) == 1 else "uses"
        reason = f"{verb} `{'` → `'.join(shown)}` {what}"
        ctx.add_tests(ctx.universe.expand(test.path, [test.name]), rank, reason)


# --- Signal: file names, data files, always_run -------------------------------------------------------


def _name_match(ctx: _Context, fc: FileChange, only: set[str] | None = None) -> None:
    pure = PurePosixPath(fc.path)
    stem = (pure.parent.name if pure.stem == "__init__" else pure.stem).strip("_")
    if not stem:
        return
    patterns = (f"test_{stem}.py", f"{stem}_test.py", f"test_{stem}_*.py")
    for test_file in sorted(ctx.universe.test_files if only is None else only & ctx.universe.test_files):
        name = PurePosixPath(test_file).name
        if any(fnmatch.fnmatchcase(name, p) for p in patterns):
            reason = f"{test_file} is named after {fc.path}, which this PR changes"
            ctx.add_tests(ctx.universe.expand(test_file), Signal.NAME, reason)


def _data_file(ctx: _Context, fc: FileChange) -> None:
    """A data file: the tests, and the code of tests, that name it."""
    name = PurePosixPath(fc.path).name
    if len(name) < 4:
        return
    graph = ctx.graph("head")
    texts = ctx.read(ctx.change.head, sorted(graph.modules))
    mentioning = [p for p, t in texts.items() if t is not None and name in t]
    for path in mentioning:
        reason = f"mentions `{name}`, which this PR changes"
        if path in ctx.universe.test_files:
            ctx.add_tests(ctx.universe.expand(path), Signal.STATIC, reason)
        else:
            key = SymbolKey(path=path, name=WHOLE_MODULE)
            _reach(ctx, graph, [key], Signal.STATIC, f"which reads `{name}`, changed in this PR")


def _always_run(ctx: _Context) -> None:
    for pattern in ctx.settings.always_run:
        reason = f"always run (tests.always_run: `{pattern}`)"
        if any(c in pattern for c in "*?["):
            pool = ctx.universe.all_tests or []
            for nodeid in pool:
                if fnmatch.fnmatchcase(nodeid, pattern):
                    ctx.hits.add(nodeid, Signal.ALWAYS, reason)
            continue
        path, names, _ = split_nodeid(pattern)
        expanded = ctx.universe.expand(path, names) if ctx.universe.all_tests is not None else []
        for nodeid in expanded or [pattern]:
            ctx.hits.add(nodeid, Signal.ALWAYS, reason)


# --- Budget -------------------------------------------------------------------------------------------


def _subsume_cases(hits: _Hits) -> None:
    """``test_f`` selected as a whole (no collected ids) runs every case: fold ``test_f[...]`` into it.

    The cases a map recorded may not exist any more when the PR changed the parametrization."""
    for nodeid in [n for n in hits.by_test if "[" in n]:
        whole = nodeid.partition("[")[0]
        if whole in hits.by_test:
            case = hits.by_test.pop(nodeid)
            hit = hits.by_test[whole]
            hit.rank = min(hit.rank, case.rank)
            hit.weight += case.weight
            hit.reasons.extend(r for r in case.reasons if r not in hit.reasons)
            for path, lines in case.lines.items():
                hit.lines.setdefault(path, set()).update(lines)


def _apply_budget(hits: _Hits, settings: TestSettings, total: int | None) -> Selection:
    _subsume_cases(hits)
    ranked = hits.ranked()
    keep = ranked if settings.max_tests is None else ranked[: settings.max_tests]
    dropped = [] if settings.max_tests is None else [n for n, _ in ranked[settings.max_tests :]]
    tests = [SelectedTest(nodeid=n, reasons=_reasons(h)) for n, h in keep]
    return Selection(tests=tests, total_tests=total, budget_dropped=dropped)


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
    """The files that differ between ``base`` and ``head``, with both texts of each Python file."""
    files = gitdiff.changed_files(repo, base, head)
    py_head = [f.path for f in files if f.path.endswith(".py") and f.status != FileStatus.DELETED]
    py_base = [
        f.old_path or f.path
        for f in files
        if (f.old_path or f.path).endswith(".py") and f.status != FileStatus.ADDED
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
