"""runner.selection.import_graph: names resolved to their definitions, through re-exports, on real sources."""

from __future__ import annotations

from runner.selection.import_graph import (
    MODULE_BODY,
    SymbolKey,
    SymbolKind,
    analyze_module,
    build_graph,
    line_info,
    module_names,
    symbols_at,
)

PACKAGE = {
    "src/pkg/__init__.py": (
        "from .ops import scale, shift\nfrom .util import *\nfrom . import ops\n__version__ = '1.0'\n"
    ),
    "src/pkg/ops.py": (
        "from .util import helper\n"
        "FACTOR = 2\n"
        "\n"
        "def scale(x):\n"
        "    return helper(x) * FACTOR\n"
        "\n"
        "def shift(x):\n"
        "    return x + 1\n"
    ),
    "src/pkg/util.py": (
        "__all__ = ['helper']\n\ndef helper(x):\n    return x\n\ndef unused():\n    return 0\n"
    ),
    "tests/test_ops.py": (
        "from pkg import scale\n"
        "import pkg\n"
        "\n"
        "def test_scale():\n"
        "    assert scale(1) == 2\n"
        "\n"
        "class TestShift:\n"
        "    def test_one(self):\n"
        "        assert pkg.shift(1) == 2\n"
        "\n"
        "def test_helper_through_module():\n"
        "    assert pkg.ops.helper(1) == 1\n"
    ),
    "tests/test_patch.py": (
        "def test_patched(monkeypatch):\n    monkeypatch.setattr('pkg.util.unused', lambda: 1)\n"
    ),
}


def reached_tests(changed: list[tuple[str, str]], sources: dict[str, str] = PACKAGE) -> set[str]:
    graph = build_graph(sources, ["tests"])
    keys = [SymbolKey(path=p, name=n) for p, n in changed]
    return {f"{k.path}::{k.name}" for k in graph.tests_reaching(keys)}


def test_module_names_follow_packages_and_src_layouts() -> None:
    names = module_names(["src/pkg/__init__.py", "src/pkg/ops.py", "tests/test_ops.py"])
    assert names["src/pkg/ops.py"][0] == "pkg.ops"
    assert names["src/pkg/__init__.py"][0] == "pkg"
    assert names["tests/test_ops.py"][0] == "test_ops"


def test_a_change_behind_a_root_reexport_selects_only_its_users() -> None:
    assert reached_tests([("src/pkg/ops.py", "shift")]) == {"tests/test_ops.py::TestShift"}
    assert reached_tests([("src/pkg/ops.py", "scale")]) == {"tests/test_ops.py::test_scale"}


def test_transitive_use_is_followed_through_function_bodies() -> None:
    assert reached_tests([("src/pkg/util.py", "helper")]) == {
        "tests/test_ops.py::test_scale",
        "tests/test_ops.py::test_helper_through_module",
    }
    assert reached_tests([("src/pkg/ops.py", "FACTOR")]) == {"tests/test_ops.py::test_scale"}


def test_dotted_strings_in_tests_count_as_uses() -> None:
    assert reached_tests([("src/pkg/util.py", "unused")]) == {"tests/test_patch.py::test_patched"}


def test_reach_explains_the_chain_from_the_test_to_the_change() -> None:
    graph = build_graph(PACKAGE, ["tests"])
    reached = graph.tests_reaching([SymbolKey(path="src/pkg/util.py", name="helper")])
    chain = reached[SymbolKey(path="tests/test_ops.py", name="test_scale")].chain
    assert [graph.display(k) for k in chain] == ["test_ops.test_scale", "pkg.ops.scale", "pkg.util.helper"]


def test_star_import_chains_resolve_to_the_defining_module() -> None:
    sources = {
        "lib/__init__.py": "from .core import *\n",
        "lib/core.py": "from .impl import *\n",
        "lib/impl.py": "def work():\n    return 1\n\ndef other():\n    return 2\n",
        "tests/test_lib.py": "import lib\n\ndef test_work():\n    assert lib.work() == 1\n",
    }
    assert reached_tests([("lib/impl.py", "work")], sources) == {"tests/test_lib.py::test_work"}
    assert reached_tests([("lib/impl.py", "other")], sources) == set()


def test_fixtures_link_tests_to_what_the_fixture_uses() -> None:
    sources = {
        "pkg/__init__.py": "def make():\n    return 1\n",
        "tests/conftest.py": (
            "import pytest\nfrom pkg import make\n\n@pytest.fixture\ndef thing():\n    return make()\n"
        ),
        "tests/test_thing.py": (
            "def test_uses_fixture(thing):\n    assert thing == 1\n\ndef test_plain():\n    pass\n"
        ),
    }
    assert reached_tests([("pkg/__init__.py", "make")], sources) == {"tests/test_thing.py::test_uses_fixture"}


def test_symbols_cover_definitions_imports_and_module_code() -> None:
    module = analyze_module(
        "m.py",
        "m",
        "import os\nfrom a import b, c\nX = 1\nos.environ.setdefault('K', 'v')\n"
        "\n@deco\ndef f(y=X):\n    return y\n",
    )
    assert module.symbols["os"].kind == SymbolKind.IMPORT
    assert module.symbols["X"].kind == SymbolKind.VARIABLE
    assert module.symbols["f"].ranges == [(6, 8)]  # the decorator line belongs to the function
    assert set(module.symbols["f"].refs) >= {"deco", "X"}
    assert symbols_at(module, 2) == ["b", "c"]
    assert symbols_at(module, 4) == [MODULE_BODY]
    assert symbols_at(module, 5) == []


def test_unparsable_source_is_reported_not_raised() -> None:
    module = analyze_module("bad.py", "bad", "def broken(:\n")
    assert module.error is not None and "bad.py" in module.error
    assert module.symbols == {}


def test_line_info_maps_continuation_lines_and_skips_comments_and_docstrings() -> None:
    source = (
        '"""Module doc."""\n'
        "def f(a,\n"
        "      b):\n"
        '    """Doc."""\n'
        "    # a comment\n"
        "    return (a +\n"
        "            b)\n"
    )
    info = line_info(source)
    assert info.statement_lines(7) == [6, 7]
    assert info.statement[3] == 2  # a multi-line signature is the def statement
    assert 1 not in info.statement and 4 not in info.statement and 5 not in info.statement
    assert info.functions == [("f", 2, 7)]


def test_unittest_classes_count_as_tests_whatever_their_name() -> None:
    sources = {
        "lib.py": "def work():\n    return 1\n",
        "tests/test_lib.py": (
            "import unittest\nfrom lib import work\n\n"
            "class Mixin:\n    def test_work(self):\n        assert work() == 1\n\n"
            "class LibTest(unittest.TestCase, Mixin):\n    pass\n\n"
            "class MoreLibTest(LibTest):\n    pass\n"
        ),
    }
    assert reached_tests([("lib.py", "work")], sources) == {
        "tests/test_lib.py::LibTest",
        "tests/test_lib.py::MoreLibTest",
    }
