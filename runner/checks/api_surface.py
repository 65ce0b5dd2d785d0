"""The public API of a Python module, read from its AST, and the breaking changes between two.

Pure functions on source text: :func:`public_api` lists a module's public functions, classes,
methods and properties with their signatures and line spans; :func:`diff_api` compares two such
listings and reports what breaks callers (removals, renames, parameter changes). The docstring
check and the RFC checklist both build on this, so "public" means the same thing everywhere:

* no part of the qualified name starts with an underscore (dunder methods of a class are public
  protocol and count as public; module-level dunders are not API objects);
* the module is not private (``pkg/_impl.py``), not ``__main__`` and not a test;
* when the module assigns ``__all__`` a literal list or tuple, only the names in it are public.

Why one module past 400 lines: the listing and the comparison share one definition of an API
object (its parameters, kinds and shapes); half of it in another module would let "public" and
"breaking" drift apart.

Longer than most modules: reading signatures from the AST and comparing two listings are one
concern, shared by the docstring check and the RFC checklist; splitting them would split one model.
"""

from __future__ import annotations

import ast
import fnmatch
import hashlib
from collections.abc import Iterable, Iterator, Sequence
from enum import StrEnum
from pathlib import PurePosixPath

from pydantic import Field

from bot.core.models import Model


class ObjectKind(StrEnum):
    FUNCTION = "function"
    CLASS = "class"
    METHOD = "method"
    PROPERTY = "property"


class ParamKind(StrEnum):
    POSITIONAL_ONLY = "positional_only"
    POSITIONAL_OR_KEYWORD = "positional_or_keyword"
    VAR_POSITIONAL = "var_positional"
    KEYWORD_ONLY = "keyword_only"
    VAR_KEYWORD = "var_keyword"


_POSITIONAL = (ParamKind.POSITIONAL_ONLY, ParamKind.POSITIONAL_OR_KEYWORD)
_VARIADIC = (ParamKind.VAR_POSITIONAL, ParamKind.VAR_KEYWORD)


class ApiParam(Model):
    name: str
    kind: ParamKind
    has_default: bool = False


class ApiObject(Model):
    """One public function, class, method or property of a module."""

    qualname: str = Field(description="module-qualified, e.g. pkg.mod.Class.method")
    kind: ObjectKind
    parent: str | None = Field(None, description="qualname of the enclosing class")
    line: int = Field(description="the def/class line")
    start: int = Field(description="first line, decorators included")
    end: int
    member_spans: list[tuple[int, int]] = Field(
        default_factory=list, description="classes: spans of member defs, which own their lines"
    )
    position: int = Field(0, description="index among the public members of its parent")
    params: list[ApiParam] = Field(
        default_factory=list, description="the signature; a method's self/cls is left out"
    )
    decorators: list[str] = Field(default_factory=list, description="dotted names as written")
    docstring: str | None = None
    returns_annotation: str | None = None
    returns_value: bool = Field(False, description="has a `return <expr>` that is not None")
    is_generator: bool = False
    raises: list[str] = Field(default_factory=list, description="exception names raised in the body")
    body_shape: str = Field("", description="digest of the body without its docstring")
    fingerprint: str = Field("", description="digest of the object's own code, formatting ignored")

    @property
    def name(self) -> str:
        return self.qualname.rsplit(".", 1)[-1]

    @property
    def display(self) -> str:
        """How messages name it: ``pkg.mod.fn()`` for callables, ``pkg.mod.Class`` otherwise."""
        callable_ = self.kind in (ObjectKind.FUNCTION, ObjectKind.METHOD)
        return f"{self.qualname}()" if callable_ else self.qualname

    def owns_line(self, line: int) -> bool:
        """Whether ``line`` is this object's own code (a class's methods own their lines)."""
        if not self.start <= line <= self.end:
            return False
        return not any(a <= line <= b for a, b in self.member_spans)

    def touched_by(self, lines: Iterable[int]) -> bool:
        return any(self.owns_line(n) for n in lines)


# --- Module paths ----------------------------------------------------------------------------------

_NOT_API_FILES = {"setup.py", "conftest.py", "noxfile.py", "__main__.py"}
_TEST_DIRS = {"tests", "test"}


def module_name(path: str) -> str:
    """Dotted module name for a repository path: ``src/pkg/ops.py`` → ``pkg.ops``."""
    parts = list(PurePosixPath(path).with_suffix("").parts)
    if parts and parts[0] == "src" and len(parts) > 1:  # the src layout is not part of the name
        parts = parts[1:]
    if len(parts) > 1 and parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def is_test_path(path: str) -> bool:
    p = PurePosixPath(path)
    if any(part in _TEST_DIRS for part in p.parts[:-1]):
        return True
    return p.name == "conftest.py" or fnmatch.fnmatch(p.name, "test_*.py") or p.name.endswith("_test.py")


def is_public_module_path(path: str) -> bool:
    """A Python file whose definitions can be public API: not private, not a test, not a script."""
    p = PurePosixPath(path)
    if p.suffix != ".py" or p.name in _NOT_API_FILES or is_test_path(path):
        return False
    return all(not _is_private(part) for part in p.with_suffix("").parts if part != "__init__")


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


# --- Collecting the public objects ----------------------------------------------------------------


def public_api(source: str, module: str) -> dict[str, ApiObject]:
    """The public objects of a module's source, keyed by qualified name, in source order.

    Overload stubs and property setters/deleters are folded into the object they describe; when a
    name is defined twice (``if``/``else`` variants) the later definition wins, as at runtime.

    Raises:
        SyntaxError: the source does not parse.
    """
    tree = ast.parse(source)
    if any(_is_private(part) or part == "__main__" for part in module.split(".")):
        return {}
    exported = static_all(tree)
    objects: dict[str, ApiObject] = {}
    for node in _definitions(tree.body):
        if node.name.startswith("_") or (exported is not None and node.name not in exported):
            continue
        _collect(node, module, None, objects)
    return _number_positions(objects)


def static_all(tree: ast.Module) -> set[str] | None:
    """The names in a literal ``__all__`` (``=``, ``+=``, ``.extend``); ``None`` when there is
    none or it is computed, in which case underscores alone decide."""
    names: set[str] | None = None
    for stmt in tree.body:
        value: ast.expr | None = None
        if isinstance(stmt, ast.Assign) and any(_is_name(t, "__all__") for t in stmt.targets):
            names, value = set(), stmt.value
        elif isinstance(stmt, ast.AnnAssign | ast.AugAssign) and _is_name(stmt.target, "__all__"):
            names = names if isinstance(stmt, ast.AugAssign) else set()
            value = stmt.value
        elif _is_all_extend(stmt):
            assert isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call)
            value = stmt.value.args[0] if stmt.value.args else None
        if value is None:
            continue
        literal = _string_sequence(value)
        if literal is None or names is None:
            return None
        names |= literal
    return names


def _is_name(node: ast.expr, name: str) -> bool:
    return isinstance(node, ast.Name) and node.id == name


def _is_all_extend(stmt: ast.stmt) -> bool:
    return (
        isinstance(stmt, ast.Expr)
        and isinstance(stmt.value, ast.Call)
        and isinstance(stmt.value.func, ast.Attribute)
        and stmt.value.func.attr in ("extend", "append")
        and _is_name(stmt.value.func.value, "__all__")
    )


def _string_sequence(node: ast.expr) -> set[str] | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):  # __all__.append("x")
        return {node.value}
    if not isinstance(node, ast.List | ast.Tuple | ast.Set):
        return None
    values = [e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
    return set(values) if len(values) == len(node.elts) else None


_Def = ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef


def _definitions(body: list[ast.stmt]) -> Iterator[_Def]:
    """Defs in a block, looking inside if/try/with (conditional definitions are still API)."""
    for stmt in body:
        if isinstance(stmt, _Def):
            yield stmt
        elif isinstance(stmt, ast.If):
            yield from _definitions(stmt.body)
            yield from _definitions(stmt.orelse)
        elif isinstance(stmt, ast.Try | ast.TryStar):
            for block in (stmt.body, stmt.orelse, stmt.finalbody, *(h.body for h in stmt.handlers)):
                yield from _definitions(block)
        elif isinstance(stmt, ast.With | ast.AsyncWith):
            yield from _definitions(stmt.body)


def _collect(node: _Def, prefix: str, parent: ApiObject | None, out: dict[str, ApiObject]) -> None:
    qualname = f"{prefix}.{node.name}"
    decorators = [_dotted(d) for d in node.decorator_list]
    if any(d.rsplit(".", 1)[-1] == "overload" for d in decorators):
        return  # a typing stub; the implementation that follows is the object
    if any(d.endswith((".setter", ".deleter")) for d in decorators):
        return  # part of the property the getter already describes
    if isinstance(node, ast.ClassDef):
        members = [m for m in _definitions(node.body) if not _is_private(m.name)]
        obj = _make_object(node, qualname, ObjectKind.CLASS, parent, decorators)
        obj.member_spans = [_span(m) for m in _definitions(node.body)]
        out.pop(qualname, None)  # a redefinition moves to its new place, as at runtime
        out[qualname] = obj
        for member in members:
            _collect(member, qualname, obj, out)
        return
    kind = ObjectKind.FUNCTION if parent is None else ObjectKind.METHOD
    if parent is not None and any(d.rsplit(".", 1)[-1] in _PROPERTY_DECORATORS for d in decorators):
        kind = ObjectKind.PROPERTY
    out.pop(qualname, None)
    out[qualname] = _make_object(node, qualname, kind, parent, decorators)


_PROPERTY_DECORATORS = {"property", "cached_property", "abstractproperty"}


def _make_object(
    node: _Def, qualname: str, kind: ObjectKind, parent: ApiObject | None, decorators: list[str]
) -> ApiObject:
    start, end = _span(node)
    obj = ApiObject(
        qualname=qualname,
        kind=kind,
        parent=parent.qualname if parent else None,
        line=node.lineno,
        start=start,
        end=end,
        decorators=decorators,
        docstring=ast.get_docstring(node, clean=True),
    )
    obj.body_shape, obj.fingerprint = _shapes(node)
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
        implicit_first = parent is not None and "staticmethod" not in decorators
        obj.params = _params(node.args, skip_first=implicit_first)
        obj.returns_annotation = ast.unparse(node.returns) if node.returns else None
        facts = _BodyFacts()
        for stmt in node.body:
            facts.visit(stmt)
        obj.returns_value, obj.is_generator, obj.raises = facts.returns_value, facts.yields, facts.raises
    return obj


def _span(node: _Def) -> tuple[int, int]:
    start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
    return start, node.end_lineno or node.lineno


def _dotted(node: ast.expr) -> str:
    if isinstance(node, ast.Call):
        return _dotted(node.func)
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    if isinstance(node, ast.Name):
        return node.id
    return ast.unparse(node)


def _params(args: ast.arguments, *, skip_first: bool) -> list[ApiParam]:
    positional = [(a, ParamKind.POSITIONAL_ONLY) for a in args.posonlyargs]
    positional += [(a, ParamKind.POSITIONAL_OR_KEYWORD) for a in args.args]
    # Defaults belong to the last positional parameters.
    first_default = len(positional) - len(args.defaults)
    params = [
        ApiParam(name=a.arg, kind=kind, has_default=i >= first_default)
        for i, (a, kind) in enumerate(positional)
    ]
    if skip_first and params:
        params = params[1:]
    if args.vararg:
        params.append(ApiParam(name=args.vararg.arg, kind=ParamKind.VAR_POSITIONAL))
    for arg, default in zip(args.kwonlyargs, args.kw_defaults, strict=True):
        params.append(ApiParam(name=arg.arg, kind=ParamKind.KEYWORD_ONLY, has_default=default is not None))
    if args.kwarg:
        params.append(ApiParam(name=args.kwarg.arg, kind=ParamKind.VAR_KEYWORD))
    return params


class _BodyFacts(ast.NodeVisitor):
    """What a function's own body does; nested functions, lambdas and classes are their own."""

    def __init__(self) -> None:
        self.returns_value = False
        self.yields = False
        self.raises: list[str] = []

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        return None

    visit_AsyncFunctionDef = visit_FunctionDef  # type: ignore[assignment]
    visit_Lambda = visit_FunctionDef  # type: ignore[assignment]
    visit_ClassDef = visit_FunctionDef  # type: ignore[assignment]

    def visit_Return(self, node: ast.Return) -> None:
        if node.value is not None and not (isinstance(node.value, ast.Constant) and node.value.value is None):
            self.returns_value = True
        self.generic_visit(node)

    def visit_Yield(self, node: ast.Yield) -> None:
        self.yields = True
        self.generic_visit(node)

    def visit_YieldFrom(self, node: ast.YieldFrom) -> None:
        self.yields = True
        self.generic_visit(node)

    def visit_Raise(self, node: ast.Raise) -> None:
        # A bare ``raise`` re-raises what a callee raised; only explicit raises are this body's.
        if node.exc is not None:
            name = _dotted(node.exc)
            if name not in self.raises:
                self.raises.append(name)
        self.generic_visit(node)


def _without_docstring(body: list[ast.stmt]) -> list[ast.stmt]:
    first = body[0] if body else None
    is_doc = isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
    if is_doc and isinstance(first.value.value, str):  # type: ignore[union-attr]
        return body[1:]
    return body


def _shapes(node: _Def) -> tuple[str, str]:
    """(body shape, fingerprint): digests that ignore formatting and comments.

    The body shape (without docstring) recognises a renamed or moved object. The fingerprint
    answers "did this object's own code change": a class without its member defs (they are
    objects of their own), a function whole (nested functions are its body). Each body is dumped
    once, since dumping dominates the cost of reading a module.
    """
    docstring = ast.get_docstring(node, clean=False) or ""
    if isinstance(node, ast.ClassDef):
        own = _dump([s for s in _without_docstring(node.body) if not isinstance(s, _Def)])
        members = ",".join(m.name for m in node.body if isinstance(m, _Def))
        header = _dump([*node.decorator_list, *node.bases, *node.keywords])
        return _hash(f"{own}|{members}"), _hash(f"{header}|{own}|{docstring}")
    body = _dump(_without_docstring(node.body))
    header = _dump([node.args, *node.decorator_list, *([node.returns] if node.returns else [])])
    return _hash(body), _hash(f"{type(node).__name__}|{header}|{body}|{docstring}")


def _dump(nodes: Sequence[ast.AST]) -> str:
    return "\n".join(ast.dump(n, annotate_fields=False, include_attributes=False) for n in nodes)


def _hash(text: str) -> str:
    return hashlib.sha1(text.encode(), usedforsecurity=False).hexdigest()[:16]


def _number_positions(objects: dict[str, ApiObject]) -> dict[str, ApiObject]:
    counters: dict[str | None, int] = {}
    for obj in objects.values():
        obj.position = counters.get(obj.parent, 0)
        counters[obj.parent] = obj.position + 1
    return objects


# --- Comparing two listings ------------------------------------------------------------------------


class ApiChangeKind(StrEnum):
    REMOVED = "removed"
    RENAMED = "renamed"
    PARAMETER_REMOVED = "parameter_removed"
    PARAMETER_RENAMED = "parameter_renamed"
    PARAMETER_ADDED_REQUIRED = "parameter_added_required"
    PARAMETER_INSERTED = "parameter_inserted"
    DEFAULT_REMOVED = "default_removed"
    NOW_POSITIONAL_ONLY = "now_positional_only"
    NOW_KEYWORD_ONLY = "now_keyword_only"
    PARAMETER_MOVED = "parameter_moved"


class ApiChange(Model):
    """One change to the public API that can break callers."""

    kind: ApiChangeKind
    qualname: str
    object_kind: ObjectKind
    new_qualname: str | None = None
    parameter: str | None = None
    new_parameter: str | None = None
    path: str | None = Field(None, description="the file, when the caller knows it")
    line: int | None = None
    description: str = Field(description="one human-readable line, e.g. removes public function `m.f`")


def diff_api(old: dict[str, ApiObject], new: dict[str, ApiObject]) -> list[ApiChange]:
    """The breaking changes from ``old`` to ``new``; additions of optional things are not reported.

    A removed object is a rename when exactly one added object of the same kind in the same
    place has the same body, or failing that sits at the same position. Members of a removed or
    renamed class are not listed separately.
    """
    renamed = _match_renames(old, new)
    changes: list[ApiChange] = []
    for qualname, obj in old.items():
        if obj.parent is not None and (obj.parent not in new or obj.parent in renamed):
            continue  # reported with its class
        if qualname in renamed:
            target = new[renamed[qualname]]
            changes.append(_object_change(ApiChangeKind.RENAMED, obj, target))
        elif qualname not in new:
            changes.append(_object_change(ApiChangeKind.REMOVED, obj, None))
        elif obj.kind in (ObjectKind.FUNCTION, ObjectKind.METHOD):
            changes.extend(_param_changes(obj, new[qualname]))
    return changes


def _match_renames(old: dict[str, ApiObject], new: dict[str, ApiObject]) -> dict[str, str]:
    """Removed qualname → added qualname. Same body wins over same position, and a position
    only means something inside one module or class, while a body can move between modules."""
    removed = [o for q, o in old.items() if q not in new]
    added = [o for q, o in new.items() if q not in old]
    renames: dict[str, str] = {}
    for by_body in (True, False):
        for obj in removed:  # classes come before their members, so a parent's rename is known
            if obj.qualname in renames or (
                obj.parent and obj.parent not in new and obj.parent not in renames
            ):
                continue
            container = _container(obj)
            container = renames.get(container, container)
            match = [
                a
                for a in added
                if a.kind == obj.kind
                and a.qualname not in renames.values()
                and (a.body_shape == obj.body_shape if by_body else a.position == obj.position)
                and (by_body or _container(a) == container)
                and (obj.parent is None) == (a.parent is None)
            ]
            if len(match) == 1:
                renames[obj.qualname] = match[0].qualname
    return renames


def _container(obj: ApiObject) -> str:
    """The module or class an object is defined in."""
    return obj.parent or obj.qualname.rsplit(".", 1)[0]


_KIND_WORDS = {
    ObjectKind.FUNCTION: "public function",
    ObjectKind.CLASS: "public class",
    ObjectKind.METHOD: "public method",
    ObjectKind.PROPERTY: "public property",
}


def _object_change(kind: ApiChangeKind, obj: ApiObject, target: ApiObject | None) -> ApiChange:
    what = _KIND_WORDS[obj.kind]
    if target is None:
        text = f"removes {what} `{obj.qualname}`"
    else:
        text = f"renames {what} `{obj.qualname}` → `{target.qualname}`"
    return ApiChange(
        kind=kind,
        qualname=obj.qualname,
        object_kind=obj.kind,
        new_qualname=target.qualname if target else None,
        line=target.line if target else None,
        description=text,
    )


def _param_changes(old: ApiObject, new: ApiObject) -> list[ApiChange]:
    """Signature changes that break existing calls to the same object."""
    changes: list[ApiChange] = []

    def add(kind: ApiChangeKind, param: str, text: str, new_param: str | None = None) -> None:
        changes.append(
            ApiChange(
                kind=kind,
                qualname=new.qualname,
                object_kind=new.kind,
                parameter=param,
                new_parameter=new_param,
                line=new.line,
                description=text.format(obj=f"`{new.display}`"),
            )
        )

    old_by_name = {p.name: p for p in old.params}
    new_by_name = {p.name: p for p in new.params}
    gone = [p for p in old.params if p.name not in new_by_name]
    fresh = [p for p in new.params if p.name not in old_by_name]
    for before, after in _pair_renamed_params(gone, fresh, old.params, new.params):
        add(
            ApiChangeKind.PARAMETER_RENAMED,
            before.name,
            f"renames parameter `{before.name}` of {{obj}} → `{after.name}`",
            after.name,
        )
        gone.remove(before)
        fresh.remove(after)
    for p in gone:
        add(ApiChangeKind.PARAMETER_REMOVED, p.name, f"removes parameter `{_star(p)}` from {{obj}}")
    for p in fresh:
        if not p.has_default and p.kind not in _VARIADIC:
            add(
                ApiChangeKind.PARAMETER_ADDED_REQUIRED,
                p.name,
                f"adds required parameter `{p.name}` to {{obj}}",
            )
    for name, before in old_by_name.items():
        if name not in new_by_name:
            continue
        after = new_by_name[name]
        if before.has_default and not after.has_default and after.kind not in _VARIADIC:
            add(ApiChangeKind.DEFAULT_REMOVED, name, f"removes the default of parameter `{name}` of {{obj}}")
        if before.kind == ParamKind.POSITIONAL_OR_KEYWORD and after.kind == ParamKind.POSITIONAL_ONLY:
            add(
                ApiChangeKind.NOW_POSITIONAL_ONLY,
                name,
                f"makes parameter `{name}` of {{obj}} positional-only",
            )
        if before.kind in _POSITIONAL and after.kind == ParamKind.KEYWORD_ONLY:
            add(ApiChangeKind.NOW_KEYWORD_ONLY, name, f"makes parameter `{name}` of {{obj}} keyword-only")
    for name, text in _positional_shifts(old.params, new.params, fresh):
        kind = (
            ApiChangeKind.PARAMETER_INSERTED
            if name in {p.name for p in fresh}
            else ApiChangeKind.PARAMETER_MOVED
        )
        add(kind, name, text)
    return changes


def _star(p: ApiParam) -> str:
    return {ParamKind.VAR_POSITIONAL: "*", ParamKind.VAR_KEYWORD: "**"}.get(p.kind, "") + p.name


def _pair_renamed_params(
    gone: list[ApiParam], fresh: list[ApiParam], old: list[ApiParam], new: list[ApiParam]
) -> list[tuple[ApiParam, ApiParam]]:
    """A removed and an added parameter of the same kind in the same slot are one rename
    (for ``*args``/``**kwargs`` the kind alone is the slot)."""
    pairs: list[tuple[ApiParam, ApiParam]] = []
    for before in gone:
        for after in fresh:
            if after.kind != before.kind or any(after is b for _, b in pairs):
                continue
            if before.kind in _VARIADIC or old.index(before) == new.index(after):
                pairs.append((before, after))
                break
    return pairs


def _positional_shifts(
    old: list[ApiParam], new: list[ApiParam], fresh: list[ApiParam]
) -> list[tuple[str, str]]:
    """Reordered positional parameters, and new ones inserted before existing positional ones:
    both make existing positional calls bind arguments to the wrong names."""
    old_pos = [p.name for p in old if p.kind in _POSITIONAL]
    new_pos = [p.name for p in new if p.kind in _POSITIONAL]
    common_old = [n for n in old_pos if n in new_pos]
    common_new = [n for n in new_pos if n in old_pos]
    shifts = []
    for name in common_old:
        if common_old.index(name) != common_new.index(name):
            before, after = old_pos.index(name) + 1, new_pos.index(name) + 1
            shifts.append((name, f"moves parameter `{name}` of {{obj}} from position {before} to {after}"))
    fresh_names = {p.name for p in fresh}
    for i, name in enumerate(new_pos):
        later_existing = [n for n in new_pos[i + 1 :] if n in old_pos]
        if name in fresh_names and later_existing and fresh[[p.name for p in fresh].index(name)].has_default:
            # (a required one is already reported as such)
            shifts.append((name, f"inserts parameter `{name}` before `{later_existing[0]}` in {{obj}}"))
    return shifts
