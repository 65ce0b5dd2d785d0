"""Signals from the tests the PR edits, and from the doctests it changes."""

from __future__ import annotations

from pathlib import PurePosixPath

from runner.gitdiff import FileStatus
from runner.selection.change import FileChange, diff_lines
from runner.selection.context import Context
from runner.selection.hits import Signal
from runner.selection.import_graph import (
    ImportGraph,
    LineInfo,
    ModuleInfo,
    SymbolKey,
    SymbolKind,
    analyze_module,
    is_test_symbol,
    line_info,
    symbol_at,
)
from runner.selection.neutral import changed_doctests, doctest_names
from runner.selection.universe import split_nodeid


def doctests(ctx: Context, fc: FileChange) -> None:
    """A changed doctest selects its doctest item: the one pytest collected (or the map knows),
    else, where the project's pytest options collect doctests, the item pytest will collect."""
    assert fc.base_text is not None and fc.head_text is not None
    at_head = set(doctest_names(fc.head_text))
    for qual in changed_doctests(fc.base_text, fc.head_text):
        target = _doctest_target(ctx, fc, qual)
        items = _doctest_items(ctx, fc, qual) if qual in at_head else []
        ctx.add_tests(items, Signal.EDITED, f"a doctest of `{target}`, which this PR changes")


def own_doctests(ctx: Context, fc: FileChange) -> None:
    """The doctests of the functions and classes the change touches: they run that code."""
    if fc.head_text is None or not ctx.layout.collects_doctests(fc.path):
        return
    with_doctest = set(doctest_names(fc.head_text))
    if not with_doctest:
        return
    info = line_info(fc.head_text)
    lines = set(diff_lines(fc.base_text, fc.head_text).head_lines) if fc.base_text is not None else set()
    touched = {
        qual
        for qual, first, last in [*info.functions, *info.classes]
        if qual in with_doctest and (fc.base_text is None or any(first <= n <= last for n in lines))
    }
    for qual in sorted(touched):
        target = _doctest_target(ctx, fc, qual)
        reason = f"the doctest of `{target}`, whose code this PR changes"
        ctx.add_tests(_doctest_items(ctx, fc, qual), Signal.STATIC, reason)


def _doctest_target(ctx: Context, fc: FileChange, qual: str) -> str:
    module = ctx.module_name(fc.path)
    return f"{module}.{qual}" if qual else module


def _doctest_items(ctx: Context, fc: FileChange, qual: str) -> list[str]:
    """The node ids of ``qual``'s doctest: collected or mapped ones first; else the id pytest gives
    it (``pkg/ops.py::pkg.ops.scale``) when the project collects doctests; else none."""
    target = _doctest_target(ctx, fc, qual)
    known = set(ctx.universe.all_tests or []) | set(ctx.cmap.tests if ctx.cmap is not None else [])
    items = sorted(n for n in known if split_nodeid(n)[0] in (fc.path, fc.base_path))
    chosen = [n for n in items if split_nodeid(n)[1][-1:] == [target]]
    # The module's name as pytest imported it may differ from ours (a rootdir-relative one).
    if not chosen and qual:
        chosen = [n for n in items if any(name.endswith(f".{qual}") for name in split_nodeid(n)[1][-1:])]
    if chosen:
        return chosen
    if ctx.layout.collects_doctests(fc.path) and ctx.universe.all_tests is None:
        return [f"{fc.path}::{target}"]
    return []


# --- Signal: tests the PR edits ----------------------------------------------------------------------


def edited_tests(ctx: Context, fc: FileChange) -> None:
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


def _edited_helpers(ctx: Context, fc: FileChange, module: ModuleInfo, helpers: set[str]) -> None:
    """A changed helper or fixture in a test file selects the tests of that file that use it."""
    graph = ImportGraph([module], test_roots=None)
    reached = graph.tests_reaching(SymbolKey(path=fc.path, name=h) for h in helpers)
    for key, reach in reached.items():
        reason = f"uses `{reach.chain[-1].name}` in {fc.path}, which this PR changes"
        ctx.add_tests(ctx.universe.expand(fc.path, [key.name]), Signal.EDITED, reason, weight=2)
