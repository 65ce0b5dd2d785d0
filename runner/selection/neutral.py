"""Changes that cannot alter what a program does: comments, docstrings, formatting.

Two versions of a Python file behave the same when their syntax trees are equal once docstrings
are set aside (positions, comments and layout are not part of the tree). A docstring is kept, and
so counts, where a program may read it:

- it holds a doctest (``>>>``), which pytest can run;
- it belongs to a decorated function or class (click, typer and argparse helpers turn docstrings
  into help text);
- it is the module's own and the module reads ``__doc__`` (``docopt(__doc__)``).
"""

from __future__ import annotations

import ast

_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def behaviour_neutral(base_text: str, head_text: str) -> bool:
    """Whether the change from ``base_text`` to ``head_text`` cannot change behaviour."""
    if base_text == head_text:
        return True
    base, head = _tree(base_text), _tree(head_text)
    if base is None or head is None:
        return False
    return ast.dump(base) == ast.dump(head)


def docstrings_only(base_text: str, head_text: str) -> bool:
    """Whether only doctests (and docstrings no program reads) changed: the code is the same, what
    pytest's doctest items run may not be. A docstring holding a doctest counts as the doctest's,
    even on a decorated function."""
    base, head = _tree(base_text, doctests=False), _tree(head_text, doctests=False)
    return base is not None and head is not None and ast.dump(base) == ast.dump(head)


def code_unchanged(base_text: str, head_text: str) -> bool:
    """Whether the code is the same once every docstring is set aside, those programs read included."""
    base, head = _tree(base_text, doctests=False, read=False), _tree(head_text, doctests=False, read=False)
    return base is not None and head is not None and ast.dump(base) == ast.dump(head)


def quiet_docstring_lines(text: str) -> set[int]:
    """Lines of the docstrings :func:`docstrings_only` sets aside: those no program reads, and
    those holding a doctest."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return set()
    reads_doc = any(isinstance(n, ast.Name) and n.id == "__doc__" for n in ast.walk(tree))
    lines: set[int] = set()
    nodes: list[tuple[ast.AST, bool]] = [(tree, reads_doc)]
    nodes += [(n, bool(n.decorator_list)) for n in ast.walk(tree) if isinstance(n, _DEFS)]
    for node, read in nodes:
        doc = _docstring(node)
        if doc is not None and (not read or ">>>" in doc):
            first = node.body[0]  # type: ignore[attr-defined]
            lines.update(range(first.lineno, (first.end_lineno or first.lineno) + 1))
    return lines


def doctest_names(text: str) -> list[str]:
    """Qualified names (``Class.method``, ``""`` for the module) whose docstring holds a doctest."""
    return sorted(_doctests(text))


def changed_doctests(base_text: str, head_text: str) -> list[str]:
    """Qualified names (``Class.method``, ``""`` for the module) whose doctest differs."""
    base, head = _doctests(base_text), _doctests(head_text)
    return sorted(q for q in base.keys() | head.keys() if base.get(q) != head.get(q))


def _tree(text: str, *, doctests: bool = True, read: bool = True) -> ast.Module | None:
    """The syntax tree without the docstrings no program reads (``doctests``: a doctest is read;
    ``read``: a decorated definition's, or the module's where it reads ``__doc__``, is)."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return None
    reads_doc = any(isinstance(n, ast.Name) and n.id == "__doc__" for n in ast.walk(tree))
    _strip(tree, keep=read and reads_doc, doctests=doctests)
    for node in ast.walk(tree):
        if isinstance(node, _DEFS):
            _strip(node, keep=read and bool(node.decorator_list), doctests=doctests)
    return tree


def _strip(
    node: ast.Module | ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef, *, keep: bool, doctests: bool
) -> None:
    doc = _docstring(node)
    if doc is None:
        return
    # doctests=False: a docstring holding a doctest is the doctest's, set aside even where read.
    strip = not keep and ">>>" not in doc if doctests else not keep or ">>>" in doc
    if strip:
        node.body = node.body[1:]


def _docstring(node: ast.AST) -> str | None:
    body = getattr(node, "body", None)
    if not body or not isinstance(body[0], ast.Expr):
        return None
    value = body[0].value
    return value.value if isinstance(value, ast.Constant) and isinstance(value.value, str) else None


def _doctests(text: str) -> dict[str, str]:
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return {}
    found: dict[str, str] = {}

    def visit(node: ast.AST, prefix: str) -> None:
        doc = _docstring(node)
        if doc is not None and ">>>" in doc:
            found[prefix.rstrip(".")] = doc
        for child in getattr(node, "body", []):
            if isinstance(child, _DEFS):
                visit(child, f"{prefix}{child.name}.")

    visit(tree, "")
    return found


def unchanged_imports(base_text: str, head_text: str) -> set[str]:
    """Names bound by ``from m import …`` to the same target on both sides.

    A changed import line (``factorial`` dropped from ``from math import …``) changes only the
    names whose binding changed; the others' users are unaffected. When a plain ``import``
    statement or the set of modules imported from changed, nothing is vouched for: importing a
    module can have side effects (a plugin that registers itself).
    """
    base, head = _imports(base_text), _imports(head_text)
    if base is None or head is None or base[0] != head[0]:
        return set()
    if {t[:2] for t in head[1].values()} != {t[:2] for t in base[1].values()}:
        return set()
    return {name for name, target in base[1].items() if head[1].get(name) == target}


def _imports(text: str) -> tuple[set[tuple[str, str | None]], dict[str, tuple[str, int, str]]] | None:
    """Module level: the plain imports, and what each ``from`` import binds (name → module, level, attr)."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return None
    plain: set[tuple[str, str | None]] = set()
    bound: dict[str, tuple[str, int, str]] = {}
    todo = list(tree.body)
    while todo:
        stmt = todo.pop()
        if isinstance(stmt, ast.Import):
            plain.update((a.name, a.asname) for a in stmt.names)
        elif isinstance(stmt, ast.ImportFrom):
            for a in stmt.names:
                bound[a.asname or a.name] = (stmt.module or "", stmt.level, a.name)
        elif isinstance(stmt, ast.If | ast.Try | ast.With):
            for field in ("body", "orelse", "finalbody"):
                todo.extend(getattr(stmt, field, None) or [])
            for handler in getattr(stmt, "handlers", None) or []:
                todo.extend(handler.body)
    return plain, bound
