"""Signals that read the code, not the coverage map: the static import graph, file names, data
files, and ``tests.always_run``."""

from __future__ import annotations

import fnmatch
from pathlib import PurePosixPath

from runner.selection.change import FileChange, diff_lines
from runner.selection.context import Context
from runner.selection.hits import Signal
from runner.selection.import_graph import (
    WHOLE_MODULE,
    ImportGraph,
    SymbolKey,
    SymbolKind,
    analyze_module,
    symbols_at,
)
from runner.selection.importers import import_time_line, importing_test_files
from runner.selection.neutral import quiet_docstring_lines
from runner.selection.universe import split_nodeid

# --- Signal: the static import graph ------------------------------------------------------------------


def static_signal(ctx: Context, fc: FileChange, *, fallback: bool, only: set[str] | None = None) -> None:
    """Symbols at the changed lines → tests that use them, resolved through re-exports.

    ``only``: test files to select from (the holes of a partial coverage map)."""
    if Signal.STATIC not in ctx.hits.enabled:
        return
    head_lines: set[int] = set()
    base_lines: set[int] = set()
    if fc.base_text is not None and fc.head_text is not None:
        diff = diff_lines(fc.base_text, fc.head_text)
        # Lines inside a docstring no program reads, or a doctest's (its own item speaks for it),
        # change no code: the map never sees them either.
        edited = set(diff.head_lines) - set(diff.neighbours) - quiet_docstring_lines(fc.head_text)
        head_lines, base_lines = edited | set(diff.neighbours), set(diff.base_lines)
    elif fc.head_text is not None:
        head_lines = set(range(1, fc.head_text.count("\n") + 2))
    elif fc.base_text is not None:
        base_lines = set(range(1, fc.base_text.count("\n") + 2))
    static_lines(ctx, fc, head_lines, base_lines, new_only=False, fallback=fallback, only=only)


def static_lines(
    ctx: Context,
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
            reach(ctx, graph, keys, Signal.STATIC, f"which this PR {verb}{note}", only)
    if base_lines and fc.base_text is not None:
        graph = ctx.graph("base")
        module = graph.modules.get(fc.base_path)
        head_names = _top_names(fc.head_text, fc.path)
        if module is not None:
            names = {n for line in base_lines for n in symbols_at(module, line)} - ctx.unchanged_imports(fc)
            if changed:
                keys = [SymbolKey(path=fc.base_path, name=n) for n in sorted(names)]
                reach(ctx, graph, keys, Signal.STATIC, "which this PR changes (no coverage data for it yet)")
                return
            gone = sorted(names - head_names) if fc.head_text is not None else sorted(names)
            keys = [SymbolKey(path=fc.base_path, name=n) for n in gone]
            reach(ctx, graph, keys, Signal.STATIC, f"which this PR removes or renames{note}", only)


def _top_names(text: str | None, path: str) -> set[str]:
    if text is None:
        return set()
    return set(analyze_module(path, PurePosixPath(path).stem, text).symbols)


def reach(
    ctx: Context,
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


def package_importers(ctx: Context, fc: FileChange) -> None:
    """A package's ``__init__.py`` whose import-time code changed: every test module whose
    collection imports the package, or anything inside it.

    Those lines run once, while the first test module imports the package, with no test's
    context: the coverage map cannot tell who needs them, and the import graph follows the names
    they bind, often past them (``vis.transforms.flip`` resolves to ``vis/transforms.py``). When
    one raises, every importer fails to collect; what cannot be ruled out is run.
    """
    line = import_time_line(fc) if Signal.STATIC in ctx.hits.enabled else None
    if line is None:
        return  # only function bodies changed: they run when called, as the other signals know
    side, path = ("head", fc.path) if fc.head_text is not None else ("base", fc.base_path)
    reason = f"imports `{ctx.module_name(path)}`, whose code run at import this PR changes ({path}:{line})"
    for test_file in sorted(importing_test_files(path, ctx.runs_on_import(side), ctx.universe.test_files)):
        ctx.add_tests(ctx.universe.expand(test_file), Signal.STATIC, reason)


# --- Signal: file names, data files, always_run -------------------------------------------------------


def name_match(ctx: Context, fc: FileChange, only: set[str] | None = None) -> None:
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


def data_file(ctx: Context, fc: FileChange) -> None:
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
            reach(ctx, graph, [key], Signal.STATIC, f"which reads `{name}`, changed in this PR")


def always_run(ctx: Context) -> None:
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
