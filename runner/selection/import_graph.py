"""A static graph of which names each module and each test uses, resolved to where they are defined.

Test files usually import the package root, and the root re-exports everything, so "test X imports
package P" says nothing. What helps is the *names* a test uses: ``from pkg import scale`` followed by
``scale(...)`` is a use of ``pkg.scale``, which ``pkg/__init__.py`` binds to ``pkg.ops.scale``, whose
body calls ``pkg.util.helper``. This module turns sources into that graph of top-level symbols and
answers "which tests reach this changed symbol, and through what".

Everything here is a pure function on source text; the selection reads the sources from git's
objects (never the checkout: a PR's symbolic link there could point at any file of the bot's host).

Why one module past 400 lines: name resolution (imports, re-exports, attribute chains) and the
reachability over it are one analysis, built in one pass and queried together; the parts have no
use alone.
"""

from __future__ import annotations

import ast
import fnmatch
import io
import re
import tokenize
from collections import deque
from collections.abc import Iterable, Iterator, Mapping
from enum import StrEnum
from pathlib import PurePosixPath

from pydantic import ConfigDict, Field

from bot.core.models import Model

# Pseudo-symbols: the module's own top-level code, and "the module as a whole" (``import pkg.ops as m``
# followed by ``m`` passed around, or a name the module does not define statically).
MODULE_BODY = "<module>"
WHOLE_MODULE = "*"

TEST_FILE_PATTERNS = ("test_*.py", "*_test.py")
SKIP_DIRS = {
    ".git",
    ".hg",
    ".tox",
    ".nox",
    ".venv",
    "venv",
    "env",
    "node_modules",
    "build",
    "dist",
    "__pycache__",
    ".mypy_cache",
    ".ruff_cache",
    ".pytest_cache",
    ".eggs",
    "site-packages",
}
# A dotted string in a test (``monkeypatch.setattr("pkg.ops.scale", ...)``) is a use of that name.
_DOTTED_STRING = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)+$")


class SymbolKind(StrEnum):
    FUNCTION = "function"
    CLASS = "class"
    VARIABLE = "variable"
    IMPORT = "import"  # a name bound by an import: an alias of a name defined elsewhere
    BODY = "body"  # module-level code that binds nothing (registrations, checks, side effects)


class Symbol(Model):
    """A top-level name of a module (a class counts as one symbol with all its methods)."""

    name: str
    kind: SymbolKind
    ranges: list[tuple[int, int]] = Field(default_factory=list, description="1-based inclusive lines")
    refs: list[str] = Field(default_factory=list, description="dotted names used, as written")
    params: list[str] = Field(default_factory=list, description="parameter names (pytest fixtures)")
    bases: list[str] = Field(default_factory=list, description="base classes as written (classes only)")


class ModuleInfo(Model):
    path: str = Field(description="repository-relative, forward slashes")
    name: str = Field(description="dotted module name")
    is_package: bool = False
    symbols: dict[str, Symbol] = Field(default_factory=dict)
    imports: dict[str, list[str]] = Field(
        default_factory=dict, description="local name → absolute dotted targets it may be bound to"
    )
    star_imports: list[str] = Field(default_factory=list)
    error: str | None = Field(None, description="why the source could not be parsed")


class SymbolKey(Model):
    model_config = ConfigDict(frozen=True, extra="forbid")

    path: str
    name: str


class Reach(Model):
    """How a test reaches a changed symbol: the chain of symbols from the test to the change."""

    test: SymbolKey
    chain: list[SymbolKey]


# --- Module names -----------------------------------------------------------------------------------


def module_names(paths: Iterable[str]) -> dict[str, list[str]]:
    """Dotted names each Python file can be imported as.

    The first name is the package-qualified one (walk up while the directory has ``__init__.py``);
    the others cover namespace packages and ``src/`` layouts, so ``import pkg.ops`` still resolves
    when ``pkg`` has no ``__init__.py``.
    """
    files = set(paths)
    names: dict[str, list[str]] = {}
    for path in sorted(files):
        pure = PurePosixPath(path)
        parts = [*pure.parent.parts, pure.stem] if pure.stem != "__init__" else list(pure.parent.parts)
        if not parts or not all(p.isidentifier() for p in parts[-1:]):
            continue
        # Package-qualified: the directories that are packages, nearest the file.
        depth = 1
        parent = pure.parent
        if pure.stem == "__init__":
            parent = parent.parent
        while parent.parts and str(parent / "__init__.py") in files:
            depth += 1
            parent = parent.parent
        candidates = [".".join(parts[-depth:])]
        for start in range(len(parts) - depth, -1, -1):
            candidates.append(".".join(parts[start:]))
        valid = [c for c in candidates if c and all(p.isidentifier() for p in c.split("."))]
        names[path] = list(dict.fromkeys(valid))
    return names


# --- Analysis of one module --------------------------------------------------------------------------


class _RefCollector(ast.NodeVisitor):
    """Collects the dotted names a subtree uses; local imports are rewritten to absolute targets."""

    def __init__(self, resolve_relative: _RelResolver, strings: bool) -> None:
        self.refs: set[str] = set()
        self.local_imports: dict[str, list[str]] = {}
        self._resolve_relative = resolve_relative
        self._strings = strings

    def visit_Name(self, node: ast.Name) -> None:
        if isinstance(node.ctx, ast.Load):
            self.refs.add(node.id)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        chain = _dotted(node)
        if chain is None:
            self.generic_visit(node)
        else:
            self.refs.add(chain)

    def visit_Constant(self, node: ast.Constant) -> None:
        if self._strings and isinstance(node.value, str) and _DOTTED_STRING.match(node.value):
            self.refs.add(node.value)

    def visit_Import(self, node: ast.Import) -> None:
        for local, target in _import_bindings(node, self._resolve_relative):
            self.local_imports.setdefault(local, []).append(target)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        for local, target in _import_bindings(node, self._resolve_relative):
            self.local_imports.setdefault(local, []).append(target)

    def result(self) -> list[str]:
        out: set[str] = set()
        for ref in self.refs:
            head, _, rest = ref.partition(".")
            targets = self.local_imports.get(head)
            if targets:
                out.update(f"{t}.{rest}" if rest else t for t in targets)
            else:
                out.add(ref)
        # A function that imports a module only to call it still uses that module.
        for targets in self.local_imports.values():
            out.update(targets)
        return sorted(out)


class _RelResolver:
    def __init__(self, module: str, is_package: bool) -> None:
        self._package = module if is_package else module.rpartition(".")[0]

    def __call__(self, level: int, module: str | None) -> str | None:
        if level == 0:
            return module
        base = self._package.split(".") if self._package else []
        if level - 1 > len(base):
            return None
        base = base[: len(base) - (level - 1)]
        parts = [*base, module] if module else base
        return ".".join(p for p in parts if p) or None


def _dotted(node: ast.expr) -> str | None:
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return ".".join(reversed(parts))


def _import_bindings(node: ast.Import | ast.ImportFrom, rel: _RelResolver) -> Iterator[tuple[str, str]]:
    """(local name, absolute target) for each name an import statement binds; ``*`` for star imports."""
    if isinstance(node, ast.Import):
        for alias in node.names:
            if alias.asname:
                yield alias.asname, alias.name
            else:
                # ``import a.b.c`` binds ``a``; later ``a.b.c.f`` resolves through the module index.
                head = alias.name.partition(".")[0]
                yield head, head
        return
    base = rel(node.level, node.module)
    if base is None:
        return
    for alias in node.names:
        if alias.name == "*":
            yield "*", base
        else:
            yield alias.asname or alias.name, f"{base}.{alias.name}"


def _collect(nodes: Iterable[ast.AST], rel: _RelResolver, strings: bool) -> list[str]:
    collector = _RefCollector(rel, strings)
    for node in nodes:
        collector.visit(node)
    return collector.result()


def _is_docstring(stmt: ast.stmt) -> bool:
    return (
        isinstance(stmt, ast.Expr)
        and isinstance(stmt.value, ast.Constant)
        and isinstance(stmt.value.value, str)
    )


def _is_main_guard(stmt: ast.stmt) -> bool:
    """``if __name__ == "__main__":`` never runs under pytest."""
    if not isinstance(stmt, ast.If) or not isinstance(stmt.test, ast.Compare):
        return False
    left = stmt.test.left
    return isinstance(left, ast.Name) and left.id == "__name__"


def _span(node: ast.stmt) -> tuple[int, int]:
    start = node.lineno
    decorators = getattr(node, "decorator_list", None) or []
    if decorators:
        start = min(start, *(d.lineno for d in decorators))
    return start, node.end_lineno or node.lineno


def _params(args: ast.arguments) -> list[str]:
    every = [*args.posonlyargs, *args.args, *args.kwonlyargs]
    return [a.arg for a in every if a.arg not in ("self", "cls")]


class _ModuleBuilder:
    def __init__(self, path: str, name: str, is_package: bool, strings: bool) -> None:
        self.info = ModuleInfo(path=path, name=name, is_package=is_package)
        self.rel = _RelResolver(name, is_package)
        self.strings = strings

    def add(
        self, name: str, kind: SymbolKind, span: tuple[int, int], refs: list[str], params: list[str]
    ) -> None:
        sym = self.info.symbols.get(name)
        if sym is None:
            self.info.symbols[name] = Symbol(name=name, kind=kind, ranges=[span], refs=refs, params=params)
            return
        # Rebound (a conditional definition, a fallback import): one symbol with every definition.
        sym.ranges.append(span)
        sym.refs = sorted({*sym.refs, *refs})
        sym.params = sorted({*sym.params, *params})
        if sym.kind == SymbolKind.IMPORT and kind != SymbolKind.IMPORT:
            sym.kind = kind

    def statements(self, body: list[ast.stmt]) -> None:
        for stmt in body:
            self.statement(stmt)

    def statement(self, stmt: ast.stmt) -> None:
        span = _span(stmt)
        if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef):
            self.add(stmt.name, SymbolKind.FUNCTION, span, self.refs(stmt), _params(stmt.args))
        elif isinstance(stmt, ast.ClassDef):
            self.add(stmt.name, SymbolKind.CLASS, span, self.refs(stmt), [])
            self.info.symbols[stmt.name].bases = [b for b in map(_dotted, stmt.bases) if b]
        elif isinstance(stmt, ast.Import | ast.ImportFrom):
            self.imports(stmt, span)
        elif isinstance(stmt, ast.Assign | ast.AnnAssign | ast.AugAssign):
            self.assignment(stmt, span)
        elif _is_docstring(stmt) or _is_main_guard(stmt):
            return
        elif isinstance(stmt, ast.If | ast.Try | ast.With | ast.For | ast.While | ast.TryStar):
            self.compound(stmt)
        else:
            self.add(MODULE_BODY, SymbolKind.BODY, span, self.refs(stmt), [])

    def refs(self, node: ast.AST) -> list[str]:
        return _collect([node], self.rel, self.strings)

    def imports(self, stmt: ast.Import | ast.ImportFrom, span: tuple[int, int]) -> None:
        for local, target in _import_bindings(stmt, self.rel):
            if local == "*":
                # The names it brings in are resolved on use; the line itself is module code.
                self.info.star_imports.append(target)
                self.add(MODULE_BODY, SymbolKind.BODY, span, [], [])
                continue
            self.info.imports.setdefault(local, [])
            if target not in self.info.imports[local]:
                self.info.imports[local].append(target)
            self.add(local, SymbolKind.IMPORT, span, [target], [])

    def assignment(self, stmt: ast.Assign | ast.AnnAssign | ast.AugAssign, span: tuple[int, int]) -> None:
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
        names = [n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)]
        refs = _collect([stmt.value] if stmt.value is not None else [], self.rel, self.strings)
        if not names:  # ``obj.attr = ...`` at module level: a side effect on something else
            self.add(MODULE_BODY, SymbolKind.BODY, span, self.refs(stmt), [])
        for name in names:
            self.add(name, SymbolKind.VARIABLE, span, refs, [])

    def compound(self, stmt: ast.stmt) -> None:
        """Module-level ``if``/``try``/``with``: the header is module code, the bodies hold definitions."""
        bodies: list[list[ast.stmt]] = []
        for field in ("body", "orelse", "finalbody"):
            bodies.append(getattr(stmt, field, None) or [])
        for handler in getattr(stmt, "handlers", None) or []:
            bodies.append(handler.body)
        first_body_line = min((b[0].lineno for b in bodies if b), default=stmt.lineno + 1)
        header_end = max(stmt.lineno, first_body_line - 1)
        header: list[ast.AST] = [
            getattr(stmt, f) for f in ("test", "iter", "target") if getattr(stmt, f, None) is not None
        ]
        header.extend(getattr(stmt, "items", None) or [])
        header.extend(h.type for h in getattr(stmt, "handlers", None) or [] if h.type is not None)
        self.add(
            MODULE_BODY,
            SymbolKind.BODY,
            (stmt.lineno, header_end),
            _collect(header, self.rel, self.strings),
            [],
        )
        for body in bodies:
            self.statements(body)


def analyze_module(path: str, name: str, source: str, *, is_test: bool = False) -> ModuleInfo:
    """The top-level symbols of one module, what each uses, and what its imports bind."""
    is_package = PurePosixPath(path).name == "__init__.py"
    builder = _ModuleBuilder(path, name, is_package, strings=is_test)
    try:
        tree = ast.parse(source, filename=path)
    except (SyntaxError, ValueError) as exc:
        builder.info.error = f"{path}: cannot parse: {exc}"
        return builder.info
    builder.statements(tree.body)
    return builder.info


# --- Line structure (what a changed line belongs to) -------------------------------------------------


class LineInfo(Model):
    """What a source line is, for mapping changed lines onto coverage and symbols."""

    statement: dict[int, int] = Field(
        default_factory=dict, description="line → first line of the statement it belongs to"
    )

    def statement_lines(self, line: int) -> list[int]:
        """Every line of the statement holding ``line`` (a tracer may report any of them)."""
        key = self.statement.get(line)
        if key is None:
            return []
        return [n for n, k in self.statement.items() if k == key]

    functions: list[tuple[str, int, int]] = Field(
        default_factory=list, description="(qualified name, first line, last line) of every def"
    )
    classes: list[tuple[str, int, int]] = Field(default_factory=list)


def line_info(source: str) -> LineInfo:
    """Statement starts and function spans of a source; comments, blanks and docstrings map to nothing.

    Coverage records a multi-line statement under its first line, so a change to line 3 of a call
    spanning lines 2–4 must be looked up as line 2.
    """
    info = LineInfo()
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return info
    code_lines = _code_lines(source)
    _walk_statements(tree.body, "", info, code_lines)
    return info


def _code_lines(source: str) -> set[int]:
    """Lines holding at least one token that is not a comment (so comment edits select nothing)."""
    lines: set[int] = set()
    skip = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT}
    try:
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            if tok.type in skip or tok.type == tokenize.ENDMARKER:
                continue
            lines.update(range(tok.start[0], tok.end[0] + 1))
    except (tokenize.TokenError, SyntaxError):
        return set(range(1, source.count("\n") + 2))
    return lines


def _walk_statements(body: list[ast.stmt], prefix: str, info: LineInfo, code: set[int]) -> None:
    for index, stmt in enumerate(body):
        if index == 0 and _is_docstring(stmt) and prefix:
            continue  # a def's or class's docstring is not executed
        if prefix == "" and index == 0 and _is_docstring(stmt):
            continue  # nor is the module's
        start, end = _span(stmt)
        children = _child_bodies(stmt)
        first_child = min((_span(b[0])[0] for b in children if b), default=end + 1)
        header_end = max(stmt.lineno, first_child - 1) if children else end
        for line in range(start, header_end + 1):
            if line in code:
                info.statement[line] = stmt.lineno
        if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            qual = f"{prefix}{stmt.name}"
            target = info.classes if isinstance(stmt, ast.ClassDef) else info.functions
            target.append((qual, start, end))
            _walk_statements(stmt.body, f"{qual}.", info, code)
            continue
        for child in children:
            _walk_statements(child, prefix or "", info, code)
        _else_lines(stmt, info, code)


def _child_bodies(stmt: ast.stmt) -> list[list[ast.stmt]]:
    bodies: list[list[ast.stmt]] = []
    for field in ("body", "orelse", "finalbody"):
        value = getattr(stmt, field, None)
        if isinstance(value, list) and value and isinstance(value[0], ast.stmt):
            bodies.append(value)
    for handler in getattr(stmt, "handlers", None) or []:
        bodies.append(handler.body)
    for case in getattr(stmt, "cases", None) or []:
        bodies.append(case.body)
    return bodies


def _else_lines(stmt: ast.stmt, info: LineInfo, code: set[int]) -> None:
    """``except E:`` and ``case p:`` lines are code of the enclosing statement."""
    for handler in getattr(stmt, "handlers", None) or []:
        body_start = handler.body[0].lineno if handler.body else handler.lineno + 1
        for line in range(handler.lineno, body_start):
            if line in code:
                info.statement.setdefault(line, handler.lineno)
    for case in getattr(stmt, "cases", None) or []:
        body_start = case.body[0].lineno if case.body else case.pattern.lineno + 1
        for line in range(case.pattern.lineno, body_start):
            if line in code:
                info.statement.setdefault(line, stmt.lineno)


def innermost(spans: list[tuple[str, int, int]], line: int) -> tuple[str, int, int] | None:
    """The narrowest span holding ``line``."""
    holding = [s for s in spans if s[1] <= line <= s[2]]
    return min(holding, key=lambda s: s[2] - s[1]) if holding else None


def symbols_at(module: ModuleInfo, line: int) -> list[str]:
    """The top-level symbols a line belongs to (the narrowest; several for ``from m import a, b``)."""
    best: list[str] = []
    width = None
    for sym in module.symbols.values():
        for start, end in sym.ranges:
            if not start <= line <= end:
                continue
            if width is None or end - start < width:
                best, width = [sym.name], end - start
            elif end - start == width and sym.name not in best:
                best.append(sym.name)
    return sorted(best)


def symbol_at(module: ModuleInfo, line: int) -> str | None:
    """The first of :func:`symbols_at`, or None for blank and comment lines."""
    found = symbols_at(module, line)
    return found[0] if found else None


# --- The graph -------------------------------------------------------------------------------------


def is_test_file(path: str, roots: Iterable[str] | None = None) -> bool:
    """pytest's default ``python_files`` patterns, under one of ``roots`` when given."""
    pure = PurePosixPath(path)
    if not any(fnmatch.fnmatchcase(pure.name, p) for p in TEST_FILE_PATTERNS):
        return False
    if roots is None:
        return True
    roots = [r.strip("/") for r in roots]
    return any(r in ("", ".") or path == r or path.startswith(f"{r}/") for r in roots)


def is_conftest(path: str) -> bool:
    return PurePosixPath(path).name == "conftest.py"


def is_test_symbol(sym: Symbol, module: ModuleInfo | None = None) -> bool:
    """pytest's defaults: ``test*`` functions, ``Test*`` classes, and ``unittest.TestCase`` subclasses."""
    if sym.kind == SymbolKind.FUNCTION:
        return sym.name.startswith("test")
    if sym.kind != SymbolKind.CLASS:
        return False
    return sym.name.startswith("Test") or _is_testcase(sym, module, set())


def _is_testcase(sym: Symbol, module: ModuleInfo | None, seen: set[str]) -> bool:
    for base in sym.bases:
        if base.rpartition(".")[2].endswith("TestCase"):
            return True
        local = module.symbols.get(base) if module else None
        if local is not None and local.kind == SymbolKind.CLASS and base not in seen:
            seen.add(base)
            if _is_testcase(local, module, seen):
                return True
    return False


class ImportGraph:
    """Symbols of every module and what each depends on, with names resolved to their definitions."""

    def __init__(
        self,
        modules: Iterable[ModuleInfo],
        test_roots: Iterable[str] | None = None,
        test_files: Iterable[str] | None = None,
    ) -> None:
        """``test_files`` (when given) says which modules hold tests; else pytest's name patterns
        under ``test_roots`` (anywhere when ``None``)."""
        self.modules: dict[str, ModuleInfo] = {m.path: m for m in modules}
        self.test_roots = list(test_roots) if test_roots is not None else None
        self._test_files = set(test_files) if test_files is not None else None
        names = module_names(self.modules)
        self.by_name: dict[str, str] = {}
        # Package-qualified names first, so they win over the path-based fallbacks.
        for rank in range(max((len(v) for v in names.values()), default=0)):
            for path, candidates in names.items():
                if rank < len(candidates):
                    self.by_name.setdefault(candidates[rank], path)
        self._resolved: dict[str, list[SymbolKey]] = {}
        self._in_progress: set[str] = set()
        self.deps: dict[SymbolKey, set[SymbolKey]] = {}
        self._build()
        self.rdeps: dict[SymbolKey, set[SymbolKey]] = {}
        for src, targets in self.deps.items():
            for dst in targets:
                self.rdeps.setdefault(dst, set()).add(src)

    # Resolution ------------------------------------------------------------------------------------

    def resolve(self, qualified: str) -> list[SymbolKey]:
        """Symbols a dotted name goes through, re-exports included (alias first, definition last)."""
        if qualified in self._resolved:
            return self._resolved[qualified]
        if qualified in self._in_progress:  # an import cycle: stop here
            return []
        self._in_progress.add(qualified)
        try:
            result = self._resolve(qualified)
        finally:
            self._in_progress.discard(qualified)
        self._resolved[qualified] = result
        return result

    def _resolve(self, qualified: str) -> list[SymbolKey]:
        parts = qualified.split(".")
        for cut in range(len(parts), 0, -1):
            path = self.by_name.get(".".join(parts[:cut]))
            if path is not None:
                return self._resolve_in(self.modules[path], parts[cut:])
        return []  # outside the repository: the standard library, a dependency

    def _resolve_in(self, module: ModuleInfo, rest: list[str]) -> list[SymbolKey]:
        if not rest:
            return [SymbolKey(path=module.path, name=WHOLE_MODULE)]
        name = rest[0]
        sym = module.symbols.get(name)
        key = SymbolKey(path=module.path, name=name)
        if sym is not None and sym.kind != SymbolKind.IMPORT:
            return [key]
        if name in module.imports:
            chain = [key]
            for target in module.imports[name]:
                chain.extend(self.resolve(".".join([target, *rest[1:]])))
            return chain
        submodule = f"{module.name}.{'.'.join(rest)}"
        if any(n == submodule or submodule.startswith(f"{n}.") for n in self._submodules(module)):
            return self.resolve(submodule)
        for star in module.star_imports:
            found = self.resolve(".".join([star, *rest]))
            if found:
                return found
        if "__getattr__" in module.symbols:  # lazy attributes: the module decides at run time
            return [SymbolKey(path=module.path, name="__getattr__")]
        return []

    def _submodules(self, module: ModuleInfo) -> list[str]:
        prefix = f"{module.name}."
        return [n for n in self.by_name if n.startswith(prefix)]

    def resolve_local(self, module: ModuleInfo, ref: str) -> list[SymbolKey]:
        """What a dotted name written inside ``module`` refers to."""
        head, _, rest = ref.partition(".")
        sym = module.symbols.get(head)
        if sym is not None and sym.kind != SymbolKind.IMPORT:
            return [SymbolKey(path=module.path, name=head)]
        if head in module.imports:
            chain = [SymbolKey(path=module.path, name=head)]
            for target in module.imports[head]:
                chain.extend(self.resolve(f"{target}.{rest}" if rest else target))
            return chain
        for star in module.star_imports:
            found = self.resolve(f"{star}.{ref}")
            if found:
                return found
        # A submodule of the module's own package: importing it made it an attribute there.
        package = module.name if module.is_package else module.name.rpartition(".")[0]
        if package and f"{package}.{head}" in self.by_name:
            return self.resolve(f"{package}.{ref}")
        # An absolute dotted string (``"pkg.ops.scale"`` in a patch target).
        return self.resolve(ref) if rest else []

    # Building --------------------------------------------------------------------------------------

    def _build(self) -> None:
        for module in self.modules.values():
            whole = SymbolKey(path=module.path, name=WHOLE_MODULE)
            self.deps[whole] = {SymbolKey(path=module.path, name=n) for n in module.symbols}
            body = SymbolKey(path=module.path, name=MODULE_BODY)
            fixtures = self._fixture_scope(module)
            for sym in module.symbols.values():
                key = SymbolKey(path=module.path, name=sym.name)
                deps: set[SymbolKey] = set()
                for ref in sym.refs:
                    # An import's refs are already absolute targets.
                    resolved = self.resolve(ref) if sym.kind == SymbolKind.IMPORT else None
                    deps.update(resolved if resolved is not None else self.resolve_local(module, ref))
                for param in sym.params:
                    if param in fixtures:
                        deps.add(fixtures[param])
                if MODULE_BODY in module.symbols and sym.name != MODULE_BODY:
                    deps.add(body)  # module-level side effects run before any use of the module
                if sym.kind == SymbolKind.IMPORT:
                    # ``import pkg`` alone is not a use of all of ``pkg``: the uses are the attribute
                    # chains (``pkg.ops.scale``), resolved where they are written.
                    deps = {d for d in deps if d.name != WHOLE_MODULE}
                deps.discard(key)
                self.deps[key] = deps

    def _fixture_scope(self, module: ModuleInfo) -> dict[str, SymbolKey]:
        """Fixtures a test or conftest function can name as parameters: its own module's, then conftests'."""
        if not (is_test_file(module.path) or is_conftest(module.path)):
            return {}
        scope: dict[str, SymbolKey] = {}
        parent = PurePosixPath(module.path).parent
        chain = [parent, *parent.parents]
        for directory in reversed(chain):
            conftest = str(directory / "conftest.py") if str(directory) != "." else "conftest.py"
            conf = self.modules.get(conftest)
            if conf is None:
                continue
            for sym in conf.symbols.values():
                if sym.kind == SymbolKind.FUNCTION:
                    scope[sym.name] = SymbolKey(path=conf.path, name=sym.name)
        for sym in module.symbols.values():
            if sym.kind == SymbolKind.FUNCTION:
                scope[sym.name] = SymbolKey(path=module.path, name=sym.name)
        return scope

    # Queries ---------------------------------------------------------------------------------------

    def is_test_path(self, path: str) -> bool:
        if self._test_files is not None:
            return path in self._test_files
        return is_test_file(path, self.test_roots)

    def test_files(self) -> list[str]:
        return sorted(p for p in self.modules if self.is_test_path(p))

    def is_test(self, key: SymbolKey) -> bool:
        module = self.modules.get(key.path)
        if module is None or not self.is_test_path(key.path):
            return False
        sym = module.symbols.get(key.name)
        return sym is not None and is_test_symbol(sym, module)

    def tests_reaching(self, changed: Iterable[SymbolKey]) -> dict[SymbolKey, Reach]:
        """Every test symbol that depends, directly or transitively, on one of ``changed``.

        Breadth-first from the changes along reverse edges, so each test gets the shortest chain.
        """
        parent: dict[SymbolKey, SymbolKey | None] = {}
        queue: deque[SymbolKey] = deque()
        for key in changed:
            if key not in parent:
                parent[key] = None
                queue.append(key)
        reached: dict[SymbolKey, Reach] = {}
        while queue:
            key = queue.popleft()
            if self.is_test(key) and key not in reached:
                chain = [key]
                step = parent[key]
                while step is not None:
                    chain.append(step)
                    step = parent[step]
                reached[key] = Reach(test=key, chain=chain)
            for user in sorted(self.rdeps.get(key, ()), key=lambda k: (k.path, k.name)):
                if user not in parent:
                    parent[user] = key
                    queue.append(user)
        return reached

    def display(self, key: SymbolKey) -> str:
        """``pkg.ops.scale`` for a symbol, ``pkg.ops`` for the module as a whole or its top-level code."""
        module = self.modules.get(key.path)
        name = module.name if module else key.path
        if key.name == "__getattr__" and key.path.endswith((".pyx", ".pxd")):
            return f"{name} (compiled)"
        if key.name in (WHOLE_MODULE, MODULE_BODY):
            return f"{name} (module-level code)" if key.name == MODULE_BODY else name
        return f"{name}.{key.name}"


def build_graph(
    sources: Mapping[str, str],
    test_roots: Iterable[str] | None = None,
    test_files: Iterable[str] | None = None,
    extra: Iterable[ModuleInfo] = (),
) -> ImportGraph:
    """The graph of a set of sources (repository-relative path → text); see :class:`ImportGraph`.

    ``extra``: modules read otherwise (compiled extensions' imports)."""
    names = module_names(sources)
    modules = [
        analyze_module(path, names.get(path, [PurePosixPath(path).stem])[0], text, is_test=_testish(path))
        for path, text in sorted(sources.items())
    ]
    return ImportGraph([*modules, *extra], test_roots, test_files)


def _testish(path: str) -> bool:
    return is_test_file(path) or is_conftest(path)


def python_files(paths: Iterable[str]) -> list[str]:
    """The ``.py`` files among ``paths``, leaving out virtual environments and build output."""
    out = []
    for path in paths:
        pure = PurePosixPath(path)
        if pure.suffix == ".py" and not any(part in SKIP_DIRS for part in pure.parts[:-1]):
            out.append(path)
    return sorted(out)
