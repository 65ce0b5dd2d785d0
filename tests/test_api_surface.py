"""runner.checks.api_surface: what counts as public API, and which changes to it break callers."""

from __future__ import annotations

import textwrap

import pytest

from runner.checks.api_surface import (
    ApiChangeKind,
    ObjectKind,
    ParamKind,
    diff_api,
    is_public_module_path,
    module_name,
    public_api,
)


def api(source: str, module: str = "pkg.mod") -> dict:
    return public_api(textwrap.dedent(source), module)


def changes(old: str, new: str) -> list[str]:
    return [c.description for c in diff_api(api(old), api(new))]


def test_public_objects_exclude_private_names_and_fold_stubs() -> None:
    found = api(
        """
        import typing

        def visible(a, b=1, *args, key, opt=None, **kw): ...
        def _hidden(): ...
        async def fetch(url): ...

        class Widget:
            def __init__(self, size): ...
            def draw(self, canvas): ...
            def _internal(self): ...
            def __len__(self): ...
            @staticmethod
            def make(spec): ...
            @property
            def area(self): ...
            @area.setter
            def area(self, value): ...
            @typing.overload
            def get(self, i: int) -> int: ...
            @typing.overload
            def get(self, i: str) -> str: ...
            def get(self, i): ...
            class Inner:
                def go(self): ...

        class _Private:
            def method(self): ...

        if typing.TYPE_CHECKING:
            def conditional(): ...
        """
    )

    assert list(found) == [
        "pkg.mod.visible",
        "pkg.mod.fetch",
        "pkg.mod.Widget",
        "pkg.mod.Widget.__init__",
        "pkg.mod.Widget.draw",
        "pkg.mod.Widget.__len__",
        "pkg.mod.Widget.make",
        "pkg.mod.Widget.area",
        "pkg.mod.Widget.get",
        "pkg.mod.Widget.Inner",
        "pkg.mod.Widget.Inner.go",
        "pkg.mod.conditional",
    ]
    assert found["pkg.mod.Widget.area"].kind == ObjectKind.PROPERTY
    assert found["pkg.mod.Widget.draw"].kind == ObjectKind.METHOD
    assert found["pkg.mod.Widget"].kind == ObjectKind.CLASS
    assert found["pkg.mod.Widget.get"].line == 23  # the implementation, not the stubs


def test_signatures_drop_self_but_not_a_staticmethods_first_parameter() -> None:
    found = api(
        """
        def f(a, /, b, c=1, *rest, d, e=2, **extra): ...
        class C:
            def m(self, x): ...
            @classmethod
            def build(cls, y=0): ...
            @staticmethod
            def s(z): ...
        """
    )

    params = [(p.name, p.kind, p.has_default) for p in found["pkg.mod.f"].params]
    assert params == [
        ("a", ParamKind.POSITIONAL_ONLY, False),
        ("b", ParamKind.POSITIONAL_OR_KEYWORD, False),
        ("c", ParamKind.POSITIONAL_OR_KEYWORD, True),
        ("rest", ParamKind.VAR_POSITIONAL, False),
        ("d", ParamKind.KEYWORD_ONLY, False),
        ("e", ParamKind.KEYWORD_ONLY, True),
        ("extra", ParamKind.VAR_KEYWORD, False),
    ]
    assert [p.name for p in found["pkg.mod.C.m"].params] == ["x"]
    assert [p.name for p in found["pkg.mod.C.build"].params] == ["y"]
    assert [p.name for p in found["pkg.mod.C.s"].params] == ["z"]


def test_static_all_decides_what_is_public() -> None:
    source = """
        __all__ = ["exported"]
        __all__ += ["Also"]
        def exported(): ...
        def not_listed(): ...
        class Also: ...
        """
    assert list(api(source)) == ["pkg.mod.exported", "pkg.mod.Also"]
    # A computed __all__ cannot be read statically: underscores alone decide.
    computed = """
        __all__ = [name for name in dir() if name.islower()]
        def one(): ...
        def two(): ...
        """
    assert list(api(computed)) == ["pkg.mod.one", "pkg.mod.two"]


def test_spans_and_facts_about_the_body() -> None:
    found = api(
        """
        @decorator
        def gen(n):
            def inner():
                return 1
            for i in range(n):
                yield i

        def compute(x):
            if x < 0:
                raise ValueError("negative")
            try:
                return x * 2
            except KeyError:
                raise

        class Box:
            size = 1

            def open(self):
                return None
        """
    )
    gen, compute, box = found["pkg.mod.gen"], found["pkg.mod.compute"], found["pkg.mod.Box"]
    assert (gen.start, gen.line, gen.end) == (2, 3, 7)
    assert gen.is_generator and not gen.returns_value  # the nested function's return is its own
    assert compute.returns_value and compute.raises == ["ValueError"]
    assert not found["pkg.mod.Box.open"].returns_value
    assert box.owns_line(18) and not box.owns_line(20)  # the method owns its lines


def test_private_modules_have_no_public_api() -> None:
    assert api("def f(): ...", module="pkg._impl") == {}
    assert api("def f(): ...", module="pkg.__main__") == {}


def test_syntax_errors_propagate() -> None:
    with pytest.raises(SyntaxError):
        api("def broken(:\n")


def test_module_names_and_public_paths() -> None:
    assert module_name("src/pkg/ops.py") == "pkg.ops"
    assert module_name("pkg/__init__.py") == "pkg"
    assert module_name("torch/nn/functional.py") == "torch.nn.functional"
    assert is_public_module_path("pkg/ops.py")
    assert is_public_module_path("pkg/__init__.py")
    for not_api in [
        "pkg/_impl.py",
        "pkg/_private/ops.py",
        "tests/test_ops.py",
        "pkg/tests/utils.py",
        "pkg/ops_test.py",
        "conftest.py",
        "setup.py",
        "pkg/__main__.py",
        "README.md",
    ]:
        assert not is_public_module_path(not_api), not_api


# --- diff_api -----------------------------------------------------------------------------------


def test_removals_are_reported_once_per_object() -> None:
    old = """
        def old_fn(): return 1
        class Gone:
            def method(self): ...
        class Kept:
            def dropped(self): ...
            @property
            def prop(self): ...
        """
    new = """
        class Kept:
            pass
        """
    assert changes(old, new) == [
        "removes public function `pkg.mod.old_fn`",
        "removes public class `pkg.mod.Gone`",
        "removes public method `pkg.mod.Kept.dropped`",
        "removes public property `pkg.mod.Kept.prop`",
    ]


def test_renames_are_matched_by_body_or_position() -> None:
    by_body = changes(
        "def first(): return 1\ndef scale(x):\n    return x * 2\n",
        "def first(): return 1\ndef multiply(x):\n    return x * 2\n",
    )
    assert by_body == ["renames public function `pkg.mod.scale` → `pkg.mod.multiply`"]
    by_position = changes(
        "class A:\n    def run(self): return 1\n    def stop(self): return 2\n",
        "class A:\n    def run(self): return 1\n    def halt(self): return 3\n",
    )
    assert by_position == ["renames public method `pkg.mod.A.stop` → `pkg.mod.A.halt`"]


def test_members_of_a_renamed_class_are_not_listed() -> None:
    old = "class Old:\n    def m(self): return 1\n"
    new = "class New:\n    def m(self): return 1\n"
    assert changes(old, new) == ["renames public class `pkg.mod.Old` → `pkg.mod.New`"]


@pytest.mark.parametrize(
    ("old", "new", "kind", "description"),
    [
        (
            "def f(a, b): ...",
            "def f(a): ...",
            ApiChangeKind.PARAMETER_REMOVED,
            "removes parameter `b` from `pkg.mod.f()`",
        ),
        (
            "def f(a, *args): ...",
            "def f(a): ...",
            ApiChangeKind.PARAMETER_REMOVED,
            "removes parameter `*args` from `pkg.mod.f()`",
        ),
        (
            "def f(a, b): ...",
            "def f(a, c): ...",
            ApiChangeKind.PARAMETER_RENAMED,
            "renames parameter `b` of `pkg.mod.f()` → `c`",
        ),
        (
            "def f(a): ...",
            "def f(a, b): ...",
            ApiChangeKind.PARAMETER_ADDED_REQUIRED,
            "adds required parameter `b` to `pkg.mod.f()`",
        ),
        (
            "def f(a, *, k=1): ...",
            "def f(a, *, k): ...",
            ApiChangeKind.DEFAULT_REMOVED,
            "removes the default of parameter `k` of `pkg.mod.f()`",
        ),
        (
            "def f(a, b): ...",
            "def f(a, /, b): ...",
            ApiChangeKind.NOW_POSITIONAL_ONLY,
            "makes parameter `a` of `pkg.mod.f()` positional-only",
        ),
        (
            "def f(a, b=1): ...",
            "def f(a, *, b=1): ...",
            ApiChangeKind.NOW_KEYWORD_ONLY,
            "makes parameter `b` of `pkg.mod.f()` keyword-only",
        ),
        (
            "def f(a, b=1, c=2): ...",
            "def f(a, x=0, b=1, c=2): ...",
            ApiChangeKind.PARAMETER_INSERTED,
            "inserts parameter `x` before `b` in `pkg.mod.f()`",
        ),
        (
            "class C:\n    def __init__(self, size): ...",
            "class C:\n    def __init__(self): ...",
            ApiChangeKind.PARAMETER_REMOVED,
            "removes parameter `size` from `pkg.mod.C.__init__()`",
        ),
    ],
)
def test_breaking_signature_changes(old: str, new: str, kind: ApiChangeKind, description: str) -> None:
    found = diff_api(api(old), api(new))
    assert [(c.kind, c.description) for c in found] == [(kind, description)]


def test_reordered_parameters_are_moves() -> None:
    found = diff_api(api("def f(a, b): ..."), api("def f(b, a): ..."))
    assert [c.kind for c in found] == [ApiChangeKind.PARAMETER_MOVED, ApiChangeKind.PARAMETER_MOVED]
    assert found[0].description == "moves parameter `a` of `pkg.mod.f()` from position 1 to 2"


def test_additions_and_body_changes_are_not_breaking() -> None:
    old = "def f(a, b=1): return a\nclass C:\n    def m(self): ...\n"
    new = (
        "def f(a, b=1, c=None, *args, key=3, **kw): return a + b\n"
        "def g(): ...\n"
        "class C:\n    def m(self): return 2\n    def n(self): ...\n"
        "class D: ...\n"
    )
    assert changes(old, new) == []
    # Becoming optional or keyword-capable widens what callers may do.
    assert changes("def f(a, /, b): ...", "def f(a, b=2): ...") == []
