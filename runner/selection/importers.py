"""Which files' import runs a module's import-time code, and which changes are such code.

A module's top-level statements run once, while the first importer imports it, outside any test:
the coverage map records them with no test, and the import graph follows the names they bind, not
the fact that they run. Yet when one raises (a misspelt name in ``from . import nn, transforms``)
every test module that imports the module, or anything inside its package, fails to collect. So
"who imports it" is read here from the import statements themselves, transitively: importing
``pkg.ops`` runs ``pkg/__init__.py`` first, and pytest importing ``pkg/tests/test_x.py`` as
``pkg.tests.test_x`` runs both packages' ``__init__.py``.

Pure functions on source text, like :mod:`runner.selection.import_graph`, whose modules and
dotted names they reuse.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import PurePosixPath

from runner.selection.change import FileChange, diff_lines
from runner.selection.import_graph import ModuleInfo, is_conftest, line_info


def is_package_init(path: str) -> bool:
    return PurePosixPath(path).name == "__init__.py"


def import_time_line(fc: FileChange) -> int | None:
    """The first changed line of a statement that runs while the module is imported (head side,
    else base side); ``None`` when every changed statement is inside a function's body."""
    if fc.base_text is not None and fc.head_text is not None:
        diff = diff_lines(fc.base_text, fc.head_text)
        sides = [(fc.head_text, diff.head_lines), (fc.base_text, diff.base_lines)]
    else:
        text = fc.head_text if fc.head_text is not None else fc.base_text or ""
        sides = [(text, list(range(1, text.count("\n") + 2)))]
    for text, lines in sides:
        info = line_info(text)
        for line in sorted(lines):
            stmt = info.statement.get(line)
            if stmt is None:
                continue  # a comment, a blank line, a docstring
            # A function's header (decorators, defaults) runs at import; its body only when called.
            in_body = any(
                first <= line <= last and info.statement.get(first) != stmt
                for _, first, last in info.functions
            )
            if not in_body:
                return line
    return None


def imported_names(module: ModuleInfo, source: str | None) -> set[str]:
    """Absolute dotted names that the module's import statements name, wherever they are (a
    function's own import runs when the function does); for ``from a import b`` both ``a`` and
    ``a.b``, which may be a submodule. A source that does not parse: the imports the graph read."""
    try:
        tree = ast.parse(source or "")
    except (SyntaxError, ValueError):
        tree = None
    if source is None or tree is None:
        return {t for targets in module.imports.values() for t in targets} | set(module.star_imports)
    package = module.name if module.is_package else module.name.rpartition(".")[0]
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(package, node.level, node.module)
            if base is not None:
                names.add(base)
                names.update(f"{base}.{alias.name}" for alias in node.names if alias.name != "*")
    return names


def _absolute(package: str, level: int, module: str | None) -> str | None:
    if level == 0:
        return module
    parts = package.split(".") if package else []
    if level - 1 > len(parts):
        return None
    parts = parts[: len(parts) - (level - 1)]
    return ".".join([*parts, *([module] if module else [])]) or None


def runs_on_import(
    modules: Iterable[ModuleInfo], sources: Mapping[str, str | None], by_name: Mapping[str, str]
) -> dict[str, set[str]]:
    """Path → the repository's files its import runs directly: the packages around it (its own
    import goes through them) and every module it imports, with the packages on the way."""
    edges: dict[str, set[str]] = {}
    for module in modules:
        names = {module.name} | imported_names(module, sources.get(module.path))
        ran = {by_name[p] for name in names for p in _prefixes(name) if p in by_name}
        edges[module.path] = ran - {module.path}
    return edges


def _prefixes(dotted: str) -> list[str]:
    parts = dotted.split(".")
    return [".".join(parts[:cut]) for cut in range(1, len(parts) + 1)]


def importers(path: str, edges: Mapping[str, set[str]]) -> set[str]:
    """Files whose import runs ``path``, directly or through other files."""
    users: dict[str, set[str]] = {}
    for src, targets in edges.items():
        for target in targets:
            users.setdefault(target, set()).add(src)
    found: set[str] = set()
    todo = [path]
    while todo:
        for user in users.get(todo.pop(), ()):
            if user not in found and user != path:
                found.add(user)
                todo.append(user)
    return found


def importing_test_files(path: str, edges: Mapping[str, set[str]], test_files: set[str]) -> set[str]:
    """Test files whose collection runs ``path``: they import it, or a conftest.py above them does."""
    found = importers(path, edges)
    tests = found & test_files
    for conftest in filter(is_conftest, found):
        folder = str(PurePosixPath(conftest).parent)
        tests.update(t for t in test_files if folder == "." or t.startswith(f"{folder}/"))
    return tests
