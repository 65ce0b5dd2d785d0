"""A method's docstring inherited from a base class, found statically as ``inspect.getdoc`` would at
run time: an override without a docstring of its own is documented by the method it overrides.

Base classes are resolved in the repository's own source only (the class's module, then what it
imports with ``from … import`` or ``import … as``); a base from elsewhere (a library) is not read,
so its methods' overrides still need their own docstring.
"""

from __future__ import annotations

import ast
from collections.abc import Callable

# How far up the hierarchy to look, and how many classes at most: a guard against cycles and
# against hostile sources, not a limit real hierarchies reach.
MAX_DEPTH = 8
MAX_CLASSES = 64

ModuleReader = Callable[[str], str | None]
"""Dotted module name → its source in the commit, or None when the repository does not have it."""


def inherited_docstring(
    source: str, module: str, class_path: str, method: str, read_module: ModuleReader, *, package: bool
) -> str | None:
    """The docstring ``method`` of class ``class_path`` (``Outer.Inner`` within ``module``) inherits
    from the nearest base that documents it; None when no base in the repository does.

    ``package``: ``module`` is a package's ``__init__.py`` (relative imports start there).
    """
    trees: dict[str, ast.Module | None] = {}

    def tree_of(name: str, text: str | None = None) -> ast.Module | None:
        if name not in trees:
            text = text if text is not None else read_module(name)
            try:
                trees[name] = ast.parse(text) if text is not None else None
            except (SyntaxError, ValueError):
                trees[name] = None
        return trees[name]

    tree_of(module, source)
    seen: set[tuple[str, str]] = set()
    queue = [(module, class_path, package, 0)]
    while queue and len(seen) < MAX_CLASSES:
        mod, path, is_package, depth = queue.pop(0)
        tree = tree_of(mod)
        cls = _find_class(tree, path) if tree is not None else None
        if cls is None and tree is not None and "." not in path:
            # Not defined here, but imported (a package's __init__ re-exporting it): follow that.
            reexported = _imported_name(tree, path, mod, is_package)
            if reexported is not None and (mod, path) not in seen:
                seen.add((mod, path))
                queue.append((*reexported, depth))
            continue
        if cls is None or (mod, path) in seen:
            continue
        seen.add((mod, path))
        if depth > 0:
            found = _method_doc(cls, method)
            if found is not None:
                return found
        if depth >= MAX_DEPTH or tree is None:
            continue
        for base in cls.bases:
            target = _resolve(base, tree, mod, is_package)
            if target is not None:
                queue.append((*target, depth + 1))
    return None


def _find_class(tree: ast.Module, path: str) -> ast.ClassDef | None:
    body: list[ast.stmt] = tree.body
    found: ast.ClassDef | None = None
    for part in path.split("."):
        found = next((n for n in body if isinstance(n, ast.ClassDef) and n.name == part), None)
        if found is None:
            return None
        body = found.body
    return found


def _method_doc(cls: ast.ClassDef, method: str) -> str | None:
    for node in cls.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == method:
            return ast.get_docstring(node)
    return None


def _resolve(base: ast.expr, tree: ast.Module, module: str, package: bool) -> tuple[str, str, bool] | None:
    """(module, class path, is package) that a base-class expression names, within the repository."""
    if isinstance(base, ast.Subscript):  # Generic[T], Base[int]
        base = base.value
    if isinstance(base, ast.Name):
        if _find_class(tree, base.id) is not None:
            return module, base.id, package
        return _imported_name(tree, base.id, module, package)
    if isinstance(base, ast.Attribute) and isinstance(base.value, ast.Name):
        alias = base.value.id
        for node in tree.body:
            if isinstance(node, ast.Import):
                for name in node.names:
                    if (name.asname or name.name) == alias:
                        return name.name, base.attr, False
        imported = _imported_name(tree, alias, module, package)
        if imported is not None:  # from pkg import mod; class X(mod.Base)
            return f"{imported[0]}.{imported[1]}", base.attr, False
    return None


def _imported_name(tree: ast.Module, name: str, module: str, package: bool) -> tuple[str, str, bool] | None:
    for node in tree.body:
        if not isinstance(node, ast.ImportFrom):
            continue
        for alias in node.names:
            if (alias.asname or alias.name) == name:
                source = _absolute(node.module or "", node.level, module, package)
                return (source, alias.name, False) if source else None
    return None


def _absolute(target: str, level: int, module: str, package: bool) -> str:
    if level == 0:
        return target
    parts = module.split(".")
    keep = len(parts) - level + (1 if package else 0)
    if keep < 0:
        return ""
    return ".".join([*parts[:keep], *([target] if target else [])])
