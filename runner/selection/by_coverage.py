"""Signal: the per-test line coverage map of the base commit."""

from __future__ import annotations

from pathlib import PurePosixPath

from runner.selection.change import Diff, FileChange, diff_lines
from runner.selection.context import Context
from runner.selection.hits import Signal
from runner.selection.import_graph import (
    MODULE_BODY,
    WHOLE_MODULE,
    ImportGraph,
    LineInfo,
    SymbolKey,
    SymbolKind,
    innermost,
    line_info,
    symbols_at,
)
from runner.selection.static import reach, static_lines

# Folders of the tests' own support code (helpers, fixtures), as opposed to the code under test.
TEST_DIRS = frozenset({"tests", "test", "testing"})

# --- Signal: the coverage map of the base commit -----------------------------------------------------


def coverage_signal(ctx: Context, fc: FileChange) -> None:
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
            static_lines(ctx, fc, head_lines=set(), base_lines=set(stmt), new_only=False, changed=True)
            continue
        direct = cmap.ran_at(path, stmt)
        for nodeid in direct:
            if ctx.universe.exists(nodeid):
                ctx.hits.add_line(nodeid, fc.path, min(stmt))
            else:
                ctx.removed.add(nodeid)
        by_fixture = cmap.fixtures_at(path, stmt)
        for fixture, users in by_fixture.items():
            reason = (
                f"through the shared fixture `{fixture}`: its setup runs {fc.path}:{min(stmt)}, "
                "which this PR changes"
            )
            ctx.add_tests(users - direct, Signal.LINE, reason)
        tests = direct.union(*by_fixture.values())
        importers = cmap.importers_at(path, stmt)
        for module in sorted(importers):
            reason = (
                f"{module} runs {fc.path}:{min(stmt)} while it is imported, and this PR changes that line"
            )
            ctx.add_tests(ctx.universe.expand(module), Signal.LINE, reason)
        if any(cmap.import_time(path, n) for n in stmt):
            _import_time(ctx, fc, base_info, stmt)
        elif not tests and not importers:
            _enclosing_function(ctx, fc, base_info, line, "which this PR changes")
    if fc.head_text is not None:
        _insertions(ctx, fc, base_info, diff)


def _enclosing_function(ctx: Context, fc: FileChange, info: LineInfo, line: int, what: str) -> bool:
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


def _insertions(ctx: Context, fc: FileChange, base_info: LineInfo, diff: Diff) -> None:
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
        static_lines(ctx, fc, head_lines=new_lines, base_lines=set(), new_only=True)


def _existing_container(qual: str | None, base_scopes: dict[str, tuple[int, int]]) -> str | None:
    """The nearest enclosing function/class (by qualified name) that already exists at base."""
    while qual:
        if qual in base_scopes:
            return qual
        qual = qual.rpartition(".")[0]
    return None


def _import_time(ctx: Context, fc: FileChange, info: LineInfo, stmt: list[int]) -> None:
    """A statement that ran while importing: a ``def`` line, a class attribute, a module constant,
    or the body of a function that module-level code calls (a decorator factory, a table builder).

    A line in a function's body, run at import time by known top-level statements (a helper
    module's ``User = make_user()``, a class a decorator processes), goes to the users of what
    those statements built (:func:`_by_use`). A definition goes to the tests that run the
    function or class. Anything else built at import time reaches every user of the enclosing
    top-level name, so those users' tests are found through coverage (through the static graph
    when coverage finds none).
    """
    assert ctx.cmap is not None
    line = min(stmt)
    function = innermost(info.functions, line)
    if function is not None and info.statement.get(line) != info.statement.get(function[1]):
        origins = ctx.cmap.built_from(fc.base_path, stmt)
        if origins and _by_use(ctx, fc, line, origins):
            return
    scope = innermost([*info.functions, *info.classes], line)
    if scope is not None:
        is_header = info.statement.get(line) == info.statement.get(scope[1])
        definition = is_header or scope in info.classes
        tested = definition and _enclosing_function(ctx, fc, info, line, "whose definition this PR changes")
        # A decorator factory also runs while importing the modules that use it.
        if tested and not _body_runs_at_import(ctx, fc.base_path, [(scope[1], scope[2])]):
            return
    _import_users(ctx, fc, line)


def _by_use(ctx: Context, fc: FileChange, line: int, origins: list[tuple[str, int]]) -> bool:
    """Tests that use what the top-level statements ``origins`` built while their modules were
    imported, running the changed ``line``; False when a statement's names are unknown (then the
    line goes to every user of its enclosing name, as without origins)."""
    graph = ctx.graph("base")
    built: list[tuple[SymbolKey, int]] = []
    for path, at in origins:
        module = graph.modules.get(path)
        names = symbols_at(module, at) if module is not None else []
        if not names or MODULE_BODY in names or WHOLE_MODULE in names:
            return False  # module-level code with effects elsewhere (a registration, a patch)
        built.extend((SymbolKey(path=path, name=name), at) for name in names)
    for key, at in built:
        built_with = (
            f"built while `{key.path}` is imported ({key.path}:{at}) by code that runs {fc.path}:{line}"
        )
        through = "" if _in_package(ctx, key.path) else f" (selected through the shared helper `{key.path}`)"
        why = f"`{graph.display(key)}`, {built_with}, which this PR changes{through}"
        if not _users_by_coverage(ctx, graph, key, why):
            reach(ctx, graph, [key], Signal.STATIC, f"which is {built_with}, changed in this PR{through}")
    return True


def _in_package(ctx: Context, path: str) -> bool:
    """Whether ``path`` is code under test rather than the tests' own support (helpers, conftest)."""
    parts = set(PurePosixPath(path).parts[:-1])
    name = PurePosixPath(path).name
    return not (parts & TEST_DIRS or name == "conftest.py" or path in ctx.universe.test_files)


def _import_users(ctx: Context, fc: FileChange, line: int) -> None:
    """Tests of the code that uses the top-level names defined at ``line`` (of the base commit)."""
    graph = ctx.graph("base")
    module = graph.modules.get(fc.base_path)
    if module is None:
        return
    names = symbols_at(module, line)
    kept = [n for n in names if n not in ctx.unchanged_imports(fc)]
    for name in kept if names else [MODULE_BODY]:
        changed = SymbolKey(path=fc.base_path, name=name)
        if changed.name == MODULE_BODY:
            label = ctx.module_name(fc.path)
            reason = f"imports `{label}`, whose module-level code this PR changes ({fc.path}:{line})"
            tests = ctx.tests_running(fc.base_path, 1, 10**9)
            ctx.add_tests(tests, Signal.IMPORT_TIME, reason)
            found = any(ctx.universe.exists(t) for t in tests)
        else:
            found = _users_by_coverage(ctx, graph, changed, f"`{graph.display(changed)}` changed in this PR")
        if not found:
            reach(ctx, graph, [changed], Signal.STATIC, "which this PR changes")


def _users_by_coverage(ctx: Context, graph: ImportGraph, changed: SymbolKey, why: str) -> bool:
    """Tests that ran code reading a changed (or changed-built) module-level name, found by
    coverage; any found?

    The walk goes through aliases and derived constants (``from .ops import FACTOR``,
    ``LIMIT = FACTOR * 2``), which copy the value at import time, and stops at functions and
    classes that tests run: a test affected by the change must run one of them, and coverage
    says which did.
    """
    assert ctx.cmap is not None
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
            reason = f"runs `{graph.display(user)}`, which uses {why}"
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


def _body_runs_at_import(ctx: Context, path: str, ranges: list[tuple[int, int]]) -> bool:
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
