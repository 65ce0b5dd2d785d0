"""Python modules that only compiled code imports are in the selection's graph.

A Cython extension (``pkg/_ext.pyx``) imports a pure-Python helper; tests import the extension,
never the helper. Reverting a fix in the helper must select the extension's tests — it once
selected nothing, said "No tests selected" and passed.
"""

from __future__ import annotations

from pathlib import Path

from gitrepo import GitRepo

from bot.core.config import TestSettings
from runner.selection.cython_imports import cython_imports
from runner.selection.pr import select_tests

HELPERS = "def clamp(x, lo, hi):\n    return max(lo, min(x, hi))\n"
EXTENSION = (
    "# cython: language_level=3\n"
    "cimport cython\n"
    "from libc.math cimport sqrt\n"
    "from pkg._helpers import (\n    clamp,\n)\n\n"
    "def run(double x):\n"
    "    return clamp(sqrt(x), 0, 10)\n"
)
PROJECT: dict[str, str | bytes | None] = {
    "pyproject.toml": '[project]\nname = "pkg"\nversion = "1"\n',
    "setup.py": "from Cython.Build import cythonize\nfrom setuptools import setup\n\n"
    'setup(ext_modules=cythonize("pkg/*.pyx"))\n',
    "pkg/__init__.py": "",
    "pkg/_helpers.py": HELPERS,
    "pkg/other.py": "def unrelated():\n    return 0\n",
    # The extension's code is pasted in from another file, as msgpack's _cmsgpack.pyx does.
    "pkg/_ext.pyx": 'include "_impl.pyx"\n',
    "pkg/_impl.pyx": EXTENSION,
    "pkg/_ext.pxd": "from pkg.fmt cimport fmt_value\n",
    "tests/test_ext.py": "from pkg._ext import run\n\n\ndef test_run():\n    assert run(400.0) == 10\n",
    "tests/test_other.py": "from pkg.other import unrelated\n\n\ndef test_unrelated():\n    assert unrelated() == 0\n",
}


def test_a_fix_reverted_in_a_module_only_an_extension_imports_selects_the_extensions_tests(
    tmp_path: Path,
) -> None:
    repo = GitRepo(tmp_path / "repo")
    base = repo.commit(PROJECT, "base")
    head = repo.commit({"pkg/_helpers.py": HELPERS.replace("min(x, hi)", "x")}, "revert the fix")
    selection = select_tests(repo.path, base, head, TestSettings())
    assert not selection.whole_suite
    assert {t.nodeid: t.reasons for t in selection.tests} == {
        "tests/test_ext.py::test_run": [
            "uses `pkg._ext (compiled)` → `pkg._helpers.clamp` which this PR changes"
        ]
    }


def test_import_and_cimport_lines_of_cython_are_read() -> None:
    text = (
        "import numpy as np, os.path\n"
        "cimport numpy as cnp\n"
        "from . import _fallback\n"
        "from .._core cimport (Reader,\n    Writer as W)\n"
        "from pkg.sub.fmt import *  # everything\n"
        'include "defs.pxi"\n'
    )
    assert cython_imports(text, "pkg.sub.parser") == [
        "numpy",
        "os.path",
        "numpy",
        "pkg.sub._fallback",
        "pkg._core.Reader",
        "pkg._core.Writer",
        "pkg.sub.fmt",
    ]
