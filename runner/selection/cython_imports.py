"""What compiled Cython modules import, so the Python modules only they use are in the graph.

A test that imports ``pkg._ext`` (built from ``pkg/_ext.pyx``) runs whatever Python code the
extension imports: ``import``, ``from x import y``, ``cimport`` and ``from x cimport y`` are read
from the ``.pyx`` and its ``.pxd`` (Cython is not Python: the lines are read, not parsed). The
extension's names are not known statically, so every name taken from it counts as a use of all it
imports: a module imported by an extension is used by every user of that extension.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from pathlib import PurePosixPath

from runner.selection.import_graph import SKIP_DIRS, ModuleInfo, Symbol, SymbolKind, module_names

CYTHON_SUFFIXES = (".pyx", ".pxd", ".pxi")
# The name every attribute of an extension resolves to (the graph's rule for lazy attributes).
EXTENSION_NAMES = "__getattr__"

_FROM = re.compile(r"^from\s+(\.*[\w.]*)\s+c?import\s+(.+)$")
_IMPORT = re.compile(r"^c?import\s+(.+)$")
_INCLUDE = re.compile(r"""^include\s+["']([^"']+)["']""")


def cython_files(paths: Iterable[str]) -> list[str]:
    """The Cython sources among ``paths``, leaving out virtual environments and build output."""
    return sorted(
        p
        for p in paths
        if PurePosixPath(p).suffix in CYTHON_SUFFIXES
        and not any(d in SKIP_DIRS for d in PurePosixPath(p).parts[:-1])
    )


def analyze_cython(sources: Mapping[str, str], python_paths: Iterable[str]) -> list[ModuleInfo]:
    """One module per extension (a ``.pyx`` with its ``.pxd``, or a ``.pxd`` alone), named as Python
    would import it, with every import as a name its users depend on."""
    names = module_names([*python_paths, *sources])
    included = {inc for path, text in sources.items() for inc in _includes(path, text)}
    by_module: dict[str, list[str]] = {}
    for path in sorted(sources):
        if path.endswith(".pxi") or path in included:
            continue  # text pasted into the module that includes it, not a module of its own
        by_module.setdefault(str(PurePosixPath(path).with_suffix("")), []).append(path)
    modules = []
    for stem, paths in sorted(by_module.items()):
        main = next((p for p in paths if p.endswith(".pyx")), paths[0])
        dotted = names.get(main, [PurePosixPath(stem).name])[0]
        targets: list[str] = []
        for path in _with_includes(paths, sources):
            targets.extend(cython_imports(sources[path], dotted))
        modules.append(_module(main, dotted, list(dict.fromkeys(targets))))
    return modules


def _includes(path: str, text: str) -> list[str]:
    """The files an ``include "x.pxi"`` line of ``path`` pastes in, relative to its directory."""
    parent = PurePosixPath(path).parent
    found = []
    for line in _logical_lines(text):
        if m := _INCLUDE.match(line):
            found.append(str(parent / m.group(1)) if str(parent) != "." else m.group(1))
    return found


def _with_includes(paths: list[str], sources: Mapping[str, str]) -> list[str]:
    """``paths`` and every file they include, transitively (each once)."""
    out: list[str] = []
    queue = list(paths)
    while queue:
        path = queue.pop(0)
        if path in out or path not in sources:
            continue
        out.append(path)
        queue.extend(_includes(path, sources[path]))
    return out


def cython_imports(text: str, module: str) -> list[str]:
    """Absolute dotted names a Cython source imports (``pkg.helpers``, ``pkg.helpers.clamp``)."""
    package = module.rpartition(".")[0]
    found: list[str] = []
    for line in _logical_lines(text):
        if m := _FROM.match(line):
            base = _absolute(m.group(1), package)
            if base is None:
                continue
            for name in _names(m.group(2)):
                found.append(f"{base}.{name}" if name != "*" else base)
        elif m := _IMPORT.match(line):
            found.extend(_absolute(n, package) or n for n in _names(m.group(1)))
    return found


def _module(path: str, dotted: str, targets: list[str]) -> ModuleInfo:
    symbols: dict[str, Symbol] = {}
    imports: dict[str, list[str]] = {}
    for i, target in enumerate(targets):
        alias = f"_cython_import_{i}"
        imports[alias] = [target]
        symbols[alias] = Symbol(name=alias, kind=SymbolKind.IMPORT, refs=[target])
    symbols[EXTENSION_NAMES] = Symbol(name=EXTENSION_NAMES, kind=SymbolKind.FUNCTION, refs=list(imports))
    return ModuleInfo(path=path, name=dotted, symbols=symbols, imports=imports)


def _logical_lines(text: str) -> list[str]:
    """Statements on one line each: parenthesised and backslash-continued imports joined."""
    out: list[str] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        pending = f"{pending} {line}".strip() if pending else line
        if pending.endswith("\\"):
            pending = pending[:-1]
            continue
        if pending.count("(") > pending.count(")"):
            continue
        if pending:
            out.append(pending.replace("(", " ").replace(")", " ").strip())
        pending = ""
    return out


def _names(spec: str) -> list[str]:
    """``a as b, c`` → ``["a", "c"]``: the imported names, not their aliases."""
    names = [part.split()[0] for part in spec.split(",") if part.split()]
    return [n for n in names if n == "*" or all(p.isidentifier() for p in n.split("."))]


def _absolute(name: str, package: str) -> str | None:
    level = len(name) - len(name.lstrip("."))
    rest = name[level:]
    if level == 0:
        return rest or None
    parts = package.split(".") if package else []
    if level - 1 > len(parts):
        return None
    base = parts[: len(parts) - (level - 1)]
    return ".".join(p for p in [*base, rest] if p) or None
