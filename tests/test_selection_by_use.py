"""Attribution by use: what a shared helper module or a session fixture builds belongs to the tests
that use it, not to every test of every module that imported the helper, nor to the first test
that happened to set the fixture up.

A real repository, a real coverage map recorded by `paritybot coverage-map`, `select-tests` asked
as a user asks it, and the suite run at the PR's head to show that every failing test is selected.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from cli_run import record_coverage_map, run_cli
from gitrepo import GitRepo

from runner.gitdiff import FileStatus
from runner.selection.change import ChangeSet, FileChange
from runner.selection.coverage_map import CoverageMap, parse_coverage_db
from runner.selection.pr import rebase_map

PYPROJECT = (
    '[project]\nname = "shop"\nversion = "0.1"\n\n'
    '[tool.pytest.ini_options]\ntestpaths = ["tests"]\npythonpath = ["src", "tests"]\n'
)

MODEL = """\
class Field:
    def __init__(self, name, default=None):
        self.name = name
        self.default = default


class Schema:
    def __init__(self, *fields):
        self.fields = {f.name: f for f in fields}

    def defaults(self):
        return {n: f.default for n, f in self.fields.items()}


def is_field(value):
    return isinstance(value, Field)


class Catalog:
    def __init__(self, skus):
        self.skus = sorted(skus)

    def first(self):
        return self.skus[0]


# Built while the package is imported; only its readers depend on how.
EMPTY = Schema(Field("id"))
"""

SHOP: dict[str, str | bytes | None] = {
    "pyproject.toml": PYPROJECT,
    ".github/paritybot.yml": "checks:\n  precommit: false\n  docstrings: false\n",
    "src/shop/__init__.py": "from .model import EMPTY, Catalog, Field, Schema, is_field\n",
    "src/shop/model.py": MODEL,
    # The shared helper: most test modules import it, each uses some of what it builds.
    "tests/helpers.py": (
        "from shop import Field, Schema\n\n"
        'USER = Schema(Field("name", "anon"), Field("age", 0))\n'
        'ORDER = Schema(Field("id"))\n'
        'GREETING = "hello"\n'
    ),
    "tests/conftest.py": (
        "import pytest\n\nfrom shop import Catalog\n\n\n"
        '@pytest.fixture(scope="session")\n'
        "def catalog():\n"
        '    return Catalog(["b", "a"])\n'
    ),
    "tests/test_user.py": (
        "from helpers import USER\n\n\n"
        "def test_user_defaults():\n"
        '    assert USER.defaults() == {"name": "anon", "age": 0}\n\n\n'
        "def test_user_catalog(catalog):\n"
        '    assert catalog.first() == "a"\n'
    ),
    "tests/test_order.py": (
        'from helpers import ORDER\n\n\ndef test_order_fields():\n    assert list(ORDER.fields) == ["id"]\n'
    ),
    "tests/test_plain.py": (
        "from helpers import GREETING\n\nfrom shop import is_field\n\n\n"
        "def test_greeting():\n"
        '    assert GREETING == "hello"\n\n\n'
        "def test_is_field():\n"
        "    assert not is_field(3)\n"
    ),
    "tests/test_catalog.py": (
        "def test_catalog_size(catalog):\n"
        "    assert len(catalog.skus) == 2\n\n\n"
        "def test_catalog_sorted(catalog):\n"
        '    assert catalog.skus == ["a", "b"]\n'
    ),
    "tests/test_empty.py": (
        'from shop.model import EMPTY\n\n\ndef test_empty_defaults():\n    assert EMPTY.defaults() == {"id": None}\n'
    ),
}


@dataclass
class Shop:
    repo: GitRepo
    base: str
    maps: Path

    def change(self, name: str, old: str, new: str) -> str:
        self.repo.git("checkout", "-q", "-B", name, self.base)
        return self.repo.commit({"src/shop/model.py": MODEL.replace(old, new, 1)}, name)

    def select(self, head: str) -> dict[str, list[str]]:
        done = run_cli(
            "select-tests", "--repo", str(self.repo.path), "--base", self.base, "--head", head, "--json",
            env={"PARITYBOT_COVERAGE_DIR": str(self.maps)},
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        doc = json.loads(done.stdout)
        assert not doc["whole_suite"]
        return {t["nodeid"]: t["reasons"] for t in doc["tests"]}

    def failing(self, head: str) -> set[str]:
        """The tests the whole suite fails at ``head``."""
        self.repo.git("checkout", "-q", head)
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rf"],
            cwd=self.repo.path,
            capture_output=True,
            text=True,
        )
        return {line.split()[1] for line in done.stdout.splitlines() if line.startswith("FAILED ")}


@pytest.fixture(scope="module")
def shop(tmp_path_factory: pytest.TempPathFactory) -> Shop:
    root = tmp_path_factory.mktemp("shop")
    repo = GitRepo(root / "repo")
    base = repo.commit(SHOP, "base")
    maps = root / "maps"
    assert "8 of 8 collected tests ran" in record_coverage_map(repo.path, base, maps)
    return Shop(repo=repo, base=base, maps=maps)


def test_a_line_run_while_a_shared_helper_is_imported_selects_the_tests_using_what_it_built(
    shop: Shop,
) -> None:
    head = shop.change("field-default", "self.default = default", "self.default = str(default)")
    got = shop.select(head)
    # USER and ORDER are built in tests/helpers.py with Field. test_greeting imports the helper
    # too, test_user_catalog's module imports USER, and test_is_field runs code naming Field: none
    # of them uses a field the helper built.
    assert set(got) == {
        "tests/test_user.py::test_user_defaults",
        "tests/test_order.py::test_order_fields",
        "tests/test_empty.py::test_empty_defaults",
    }
    assert shop.failing(head) == {
        "tests/test_user.py::test_user_defaults",
        "tests/test_empty.py::test_empty_defaults",
    }
    (reason,) = got["tests/test_order.py::test_order_fields"]
    assert reason == (
        "runs `test_order.test_order_fields`, which uses `helpers.ORDER`, built while `tests/helpers.py` is "
        "imported (tests/helpers.py:4) by code that runs src/shop/model.py:4, which this PR changes "
        "(selected through the shared helper `tests/helpers.py`)"
    )
    # Built by the package's own module-level code: no helper to name.
    (reason,) = got["tests/test_empty.py::test_empty_defaults"]
    assert reason.endswith("by code that runs src/shop/model.py:4, which this PR changes")


def test_a_line_run_while_a_session_fixture_is_built_selects_every_test_using_the_fixture(shop: Shop) -> None:
    head = shop.change("catalog-order", "self.skus = sorted(skus)", "self.skus = list(skus)")
    got = shop.select(head)
    users = {
        "tests/test_user.py::test_user_catalog",
        "tests/test_catalog.py::test_catalog_size",
        "tests/test_catalog.py::test_catalog_sorted",
    }
    assert set(got) == users
    failing = shop.failing(head)
    assert failing == {"tests/test_user.py::test_user_catalog", "tests/test_catalog.py::test_catalog_sorted"}
    # The fixture was set up during one test's setup; every test requesting it uses what it built.
    for test in users:
        assert got[test] == [
            "through the shared fixture `catalog`: its setup runs src/shop/model.py:21, which this PR changes"
        ]


def test_an_older_map_moves_the_origins_with_their_helper_and_forgets_those_of_a_deleted_one() -> None:
    """A map of an older commit is rebased: the helper's statements moved down by a line added
    above them, so their origins follow; a line built by a module the base branch deleted loses its
    origins, and with them attribution by use (the selection falls back to the code around it)."""
    cmap = CoverageMap(
        tests=["tests/test_order.py::test_order_fields"],
        import_lines={"src/shop/model.py": [3, 4]},
        built_by={
            "src/shop/model.py": {3: ["tests/helpers.py:3"], 4: ["tests/helpers.py:4", "tests/old.py:1"]}
        },
    )
    helpers = SHOP["tests/helpers.py"]
    assert isinstance(helpers, str)
    since = ChangeSet(
        base="a" * 40,
        head="b" * 40,
        files=[
            FileChange(
                path="tests/helpers.py",
                status=FileStatus.MODIFIED,
                base_text=helpers,
                head_text="# Shared objects.\n" + helpers,
            ),
            FileChange(path="tests/old.py", status=FileStatus.DELETED, base_text="X = 1\n"),
        ],
    )
    rebased = rebase_map(cmap, since)
    assert rebased.built_from("src/shop/model.py", [3]) == [("tests/helpers.py", 4)]
    assert rebased.built_from("src/shop/model.py", [4]) is None


def test_a_map_recorded_before_origins_is_read_and_attributes_its_import_time_lines_as_before() -> None:
    doc = {
        "format": "paritybot-coverage-map/2",
        "tests": ["tests/test_order.py::test_order_fields"],
        "files": {"src/shop/model.py": {"3": [0]}},
        "import_lines": {"src/shop/model.py": [3, 4]},
    }
    cmap = parse_coverage_db(json.dumps(doc))
    assert cmap.format == "paritybot-coverage-map/3"
    assert cmap.built_from("src/shop/model.py", [4]) is None  # no origin known: attributed as before
    assert cmap.built_from("src/shop/model.py", [9]) == []  # not an import-time line at all
