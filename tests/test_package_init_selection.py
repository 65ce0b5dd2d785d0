"""A change to a package's ``__init__.py`` runs every test module that imports the package.

Its lines run while the package is imported, outside any test: the coverage map records them with
no test, and the import graph follows the names they bind, not the import. A misspelt name in
``from . import nn, transforms, utils`` made every test module fail to collect while
``paritybot check`` said "No tests selected" and exited 0, with a map and without; in a src layout,
renaming a re-export that a module of the package still imported from the root did the same, but
only with the base's map (without one, the test files named after the package were selected).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_run import run_cli
from gitrepo import GitRepo

FLAT: dict[str, str | bytes | None] = {
    "vis/__init__.py": 'from . import nn, transforms, utils\n\n__all__ = ["nn", "transforms", "utils"]\n',
    "vis/nn.py": "def relu(x):\n    return max(x, 0)\n",
    "vis/transforms.py": "def flip(xs):\n    return list(reversed(xs))\n",
    "vis/utils.py": "def clamp(x, lo, hi):\n    return min(max(x, lo), hi)\n",
    "tests/test_nn.py": "from vis import nn\n\n\ndef test_relu():\n    assert nn.relu(-1) == 0\n",
    "tests/test_transforms.py": "import vis\n\n\ndef test_flip():\n    assert vis.transforms.flip([1, 2]) == [2, 1]\n",
    "tests/test_utils.py": "from vis.utils import clamp\n\n\ndef test_clamp():\n    assert clamp(5, 0, 3) == 3\n",
}
FLAT_TESTS = {
    "tests/test_nn.py::test_relu",
    "tests/test_transforms.py::test_flip",
    "tests/test_utils.py::test_clamp",
}

SRC: dict[str, str | bytes | None] = {
    "pyproject.toml": (
        '[project]\nname = "geo"\nversion = "0.1"\n\n'
        '[tool.pytest.ini_options]\ntestpaths = ["tests"]\npythonpath = ["src"]\n'
    ),
    "src/geo/__init__.py": "from .linalg import dot, norm\nfrom .shapes import Circle\n",
    "src/geo/linalg.py": "def dot(a, b):\n    return sum(x * y for x, y in zip(a, b))\n\n\ndef norm(a):\n    return dot(a, a) ** 0.5\n",
    # It imports from the package root, as many packages' modules do: the root's names come first.
    "src/geo/shapes.py": (
        "from geo import norm\n\n\n"
        "class Circle:\n    def __init__(self, r):\n        self.r = r\n\n"
        "    def area(self):\n        return 3 * self.r**2\n\n\n"
        "def gap(circle, point):\n    return norm(point) - circle.r\n"
    ),
    "tests/test_geo.py": "from geo import Circle\n\n\ndef test_area():\n    assert Circle(1).area() == 3\n",
    "tests/test_geo_linalg.py": "from geo import dot\n\n\ndef test_dot():\n    assert dot([1, 2], [3, 4]) == 11\n",
}
SRC_TESTS = {"tests/test_geo.py::test_area", "tests/test_geo_linalg.py::test_dot"}


def _project(
    tmp_path: Path, files: dict[str, str | bytes | None], change: dict[str, str | bytes | None]
) -> GitRepo:
    repo = GitRepo(tmp_path / "project")
    repo.commit(files, "base")
    repo.git("checkout", "-q", "-b", "feature")
    repo.commit(change, "change the package's __init__.py")
    return repo


def _selected(repo: GitRepo, home: Path) -> tuple[set[str], str | None]:
    """The tests `paritybot select-tests` names for the change, and the coverage map it used."""
    done = run_cli("select-tests", "--repo", str(repo.path), "--base", "main", "--json", home=home)
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    return {t["nodeid"] for t in doc["tests"]}, doc["coverage_map"]


def _checked(repo: GitRepo, home: Path, with_map: bool) -> str:
    """`paritybot check` of the change (after a map of the base, when asked): its output, which
    must be a failure naming the modules that did not collect, never "nothing to test"."""
    if with_map:
        mapped = run_cli(
            "coverage-map", "--repo", str(repo.path), "--rev", "main", "--runner", "host", home=home
        )
        assert mapped.returncode == 0, mapped.stderr
    done = run_cli("check", "--repo", str(repo.path), "--base", "main", "--runner", "host", home=home)
    assert "No tests selected" not in done.stdout and "no test can be affected" not in done.stdout
    assert done.returncode == 1, done.stdout + done.stderr
    assert "did not collect" in done.stdout
    return done.stdout


@pytest.mark.parametrize("with_map", [False, True], ids=["no-map", "base-map"])
def test_a_typo_in_a_flat_package_init_runs_every_test_module_that_imports_it(
    tmp_path: Path, with_map: bool
) -> None:
    typo = str(FLAT["vis/__init__.py"]).replace("nn, transforms, utils", "nn, transfroms, utils")
    repo = _project(tmp_path, FLAT, {"vis/__init__.py": typo})

    out = _checked(repo, tmp_path, with_map)

    assert "`tests/test_nn.py`, `tests/test_transforms.py`" in out
    selected, cmap = _selected(repo, tmp_path)
    assert (cmap is not None) == with_map
    # test_transforms.py reaches `vis.transforms.flip` past the `__init__.py`; test_utils.py never
    # names the package root: importing `vis.utils` runs it all the same.
    assert selected == FLAT_TESTS


@pytest.mark.parametrize("with_map", [False, True], ids=["no-map", "base-map"])
def test_a_renamed_reexport_in_a_src_layout_is_not_hidden_by_the_bases_map(
    tmp_path: Path, with_map: bool
) -> None:
    # `shapes.py` still imports `norm` from the root: importing `geo` now fails.
    renamed = str(SRC["src/geo/__init__.py"]).replace("dot, norm", "dot, norm as length")
    repo = _project(tmp_path, SRC, {"src/geo/__init__.py": renamed})

    out = _checked(repo, tmp_path, with_map)

    assert "`tests/test_geo.py`, `tests/test_geo_linalg.py`" in out
    selected, cmap = _selected(repo, tmp_path)
    assert (cmap is not None) == with_map
    assert selected == SRC_TESTS


def test_only_code_run_at_import_counts_and_pytest_s_own_imports_do_too(tmp_path: Path) -> None:
    # A function's body in `__init__.py` runs when called: its users' tests, as for any module.
    # Its header runs at import; so do the imports pytest makes itself: a conftest.py above the
    # tests, and the packages a test module lives in.
    files: dict[str, str | bytes | None] = {
        "calc/__init__.py": "def double(x):\n    return 2 * x\n",
        "calc/tests/__init__.py": "",
        "calc/tests/test_inside.py": "def test_inside():\n    assert True\n",
        "tests/test_double.py": "from calc import double\n\n\ndef test_double():\n    assert double(2) == 4\n",
        "other/conftest.py": "import calc\n",
        "other/test_plain.py": "def test_plain():\n    assert True\n",
        "tests/test_alone.py": "def test_alone():\n    assert True\n",
    }
    repo = _project(tmp_path, files, {"calc/__init__.py": "def double(x):\n    return x + x\n"})
    assert _selected(repo, tmp_path)[0] == {"tests/test_double.py::test_double"}

    repo.commit({"calc/__init__.py": "def double(x, times=2):\n    return x * times\n"}, "its header")
    assert _selected(repo, tmp_path)[0] == {
        "tests/test_double.py::test_double",
        "calc/tests/test_inside.py::test_inside",
        "other/test_plain.py::test_plain",
    }
