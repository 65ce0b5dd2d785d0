"""The test universe is pytest's own: what `pytest` with no arguments collects in the project.

A project whose tests live inside its package (``inpkg/tests/``) next to an older ``tests/``, and
whose pytest options collect doctests (``--doctest-modules``): the coverage map records what pytest
collects, a change selects the tests inside the package and its function's own doctest, moved
tests are selected under their new names, a doctest's expected output selects that doctest only,
and an empty selection names each file and why — with the map and without it, the same answer.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest
from cli_run import run_cli
from gitrepo import GitRepo

from runner.selection.pytest_config import pytest_layout

PYPROJECT = (
    '[project]\nname = "inpkg"\nversion = "0.1"\n\n'
    '[tool.pytest.ini_options]\naddopts = "--doctest-modules"\npythonpath = ["."]\n'
)
CALC = '''\
def add(a, b):
    """The sum.

    >>> add(1, 2)
    3
    """
    return a + b


def scale(x, k):
    """The product.

    >>> scale(2, 3)
    6
    """
    return x * k
'''
PROJECT: dict[str, str | bytes | None] = {
    "pyproject.toml": PYPROJECT,
    ".github/paritybot.yml": "checks:\n  precommit: false\n  docstrings: false\n",
    "inpkg/__init__.py": "from .calc import add, scale\nfrom .other import shout\n",
    "inpkg/calc.py": CALC,
    "inpkg/other.py": "def shout(s):\n    return s.upper()\n",
    "inpkg/unused.py": "def helper():\n    return 1\n",
    "inpkg/tests/__init__.py": "",
    "inpkg/tests/test_calc.py": (
        "from inpkg import add, scale\n\n\n"
        "def test_add():\n    assert add(2, 2) == 4\n\n\n"
        "def test_scale():\n    assert scale(2, 2) == 4\n"
    ),
    "tests/test_other.py": 'from inpkg import shout\n\n\ndef test_shout():\n    assert shout("a") == "A"\n',
    "tests/test_zero.py": "from inpkg import add\n\n\ndef test_add_zero():\n    assert add(0, 0) == 0\n",
}
EVERY_TEST = {
    "inpkg/calc.py::inpkg.calc.add",
    "inpkg/calc.py::inpkg.calc.scale",
    "inpkg/tests/test_calc.py::test_add",
    "inpkg/tests/test_calc.py::test_scale",
    "tests/test_other.py::test_shout",
    "tests/test_zero.py::test_add_zero",
}


@dataclass
class Project:
    repo: GitRepo
    base: str
    maps: Path
    no_maps: Path

    def branch(self, name: str, files: dict[str, str | bytes | None]) -> str:
        self.repo.git("checkout", "-q", "-B", name, self.base)
        return self.repo.commit(files, name)

    def select(self, head: str, *, with_map: bool) -> dict[str, object]:
        done = run_cli(
            "select-tests", "--repo", str(self.repo.path), "--base", self.base, "--head", head, "--json",
            env={"PARITYBOT_COVERAGE_DIR": str(self.maps if with_map else self.no_maps)},
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)  # type: ignore[no-any-return]

    def select_text(self, head: str, *, with_map: bool) -> str:
        done = run_cli(
            "select-tests", "--repo", str(self.repo.path), "--base", self.base, "--head", head,
            env={"PARITYBOT_COVERAGE_DIR": str(self.maps if with_map else self.no_maps)},
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        return done.stdout


def selected(doc: dict[str, object]) -> set[str]:
    return {t["nodeid"] for t in doc["tests"]}  # type: ignore[attr-defined]


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Project:
    root = tmp_path_factory.mktemp("inpkg")
    repo = GitRepo(root / "repo")
    base = repo.commit(PROJECT, "base")
    maps = root / "maps"
    done = run_cli(
        "coverage-map", "--repo", str(repo.path), "--rev", base, "--runner", "host",
        env={"PARITYBOT_COVERAGE_DIR": str(maps)},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr + done.stdout
    project = Project(repo=repo, base=base, maps=maps, no_maps=root / "no-maps")
    project.map_output = done.stdout  # type: ignore[attr-defined]
    return project


def test_the_map_records_everything_pytest_collects_not_only_tests_dir(project: Project) -> None:
    # pytest collects 6 here (2 doctests, 2 tests inside the package, 2 in tests/); the map once
    # recorded tests/ alone and called that complete.
    assert "6 of 6 collected tests ran" in project.map_output  # type: ignore[attr-defined]
    (stored,) = list(project.maps.glob("*.json.gz"))
    import gzip

    doc = json.loads(gzip.decompress(stored.read_bytes()))
    assert set(doc["tests"]) == EVERY_TEST


@pytest.mark.parametrize("with_map", [True, False])
def test_a_change_selects_the_tests_inside_the_package_and_its_own_doctest(
    project: Project, with_map: bool
) -> None:
    head = project.branch("scale-fix", {"inpkg/calc.py": CALC.replace("return x * k", "return k * x")})
    doc = project.select(head, with_map=with_map)
    assert doc["whole_suite"] is False
    wanted = {"inpkg/tests/test_calc.py::test_scale", "inpkg/calc.py::inpkg.calc.scale"}
    if with_map:
        assert selected(doc) == wanted
    else:  # the file-name signal adds test_calc.py's other test
        assert selected(doc) == wanted | {"inpkg/tests/test_calc.py::test_add"}


@pytest.mark.parametrize("with_map", [True, False])
def test_tests_the_pr_moves_into_the_package_are_selected(project: Project, with_map: bool) -> None:
    project.repo.git("checkout", "-q", "-B", "move-into-package", project.base)
    project.repo.move("tests/test_other.py", "inpkg/tests/test_other.py")
    head = project.repo.commit({}, "move")
    doc = project.select(head, with_map=with_map)
    assert selected(doc) == {"inpkg/tests/test_other.py::test_shout"}
    assert doc["tests"][0]["reasons"][0] == "moved by this PR from tests/test_other.py"  # type: ignore[index]


@pytest.mark.parametrize("with_map", [True, False])
def test_a_doctest_output_change_selects_that_doctest_only(project: Project, with_map: bool) -> None:
    head = project.branch(
        "doctest-output", {"inpkg/calc.py": CALC.replace(">>> add(1, 2)\n    3", ">>> add(2, 2)\n    4")}
    )
    doc = project.select(head, with_map=with_map)
    assert selected(doc) == {"inpkg/calc.py::inpkg.calc.add"}
    assert doc["tests"][0]["reasons"] == ["a doctest of `inpkg.calc.add`, which this PR changes"]  # type: ignore[index]


@pytest.mark.parametrize("with_map", [True, False])
def test_a_doctest_edited_beside_code_selects_its_doctest_not_the_users_of_its_function(
    project: Project, with_map: bool
) -> None:
    both = CALC.replace(">>> add(1, 2)\n    3", ">>> add(2, 2)\n    4").replace(
        "return x * k", "return k * x"
    )
    doc = project.select(project.branch("doctest-and-code", {"inpkg/calc.py": both}), with_map=with_map)
    got = selected(doc)
    assert {"inpkg/calc.py::inpkg.calc.add", "inpkg/calc.py::inpkg.calc.scale"} <= got
    assert "inpkg/tests/test_calc.py::test_scale" in got
    assert "tests/test_zero.py::test_add_zero" not in got  # add's code did not change


@pytest.mark.parametrize("with_map", [True, False])
def test_an_empty_selection_names_each_file_and_why(project: Project, with_map: bool) -> None:
    head = project.branch("unused", {"inpkg/unused.py": "def helper():\n    return 2\n"})
    doc = project.select(head, with_map=with_map)
    assert doc["tests"] == [] and doc["whole_suite"] is False
    why = doc["no_tests_for"]["inpkg/unused.py"]  # type: ignore[index]
    text = project.select_text(head, with_map=with_map)
    assert f"no test can be affected by this change: `inpkg/unused.py`: {why}" in text
    if with_map:
        assert why.startswith(
            "no test ran its changed lines, or the functions around them, in the coverage map"
        )
    else:
        assert (
            why == "no test imports what it changes (static import graph), and no test file is named after it"
        )


# --- Reading pytest's own configuration ---------------------------------------------------------------


def _layout(files: dict[str, str]):  # type: ignore[no-untyped-def]
    return pytest_layout(files, lambda paths: {p: files.get(p) for p in paths})


def test_pytest_settings_are_read_where_pytest_reads_them() -> None:
    layout = _layout(
        {
            "pytest.ini": "[pytest]\ntestpaths = src/pkg/tests\n    more\npython_files = check_*.py\n",
            "pyproject.toml": '[tool.pytest.ini_options]\ntestpaths = ["ignored"]\n',
        }
    )
    assert layout.source == "pytest.ini"
    assert layout.testpaths == ["src/pkg/tests", "more"]
    assert layout.collects("src/pkg/tests/check_ops.py")
    assert not layout.collects("src/pkg/tests/test_ops.py")  # not its python_files
    assert not layout.collects("benchmarks/check_speed.py")  # outside its testpaths

    cfg = _layout({"setup.cfg": "[tool:pytest]\naddopts = -ra --doctest-modules --doctest-glob='*.rst'\n"})
    assert cfg.doctest_modules and cfg.doctest_globs == ["*.rst"]
    assert cfg.collects_doctests("pkg/ops.py") and cfg.collects_doctests("docs/usage.rst")
    assert not cfg.collects_doctests("setup.py")
    assert cfg.collects("pkg/tests/test_ops.py") and not cfg.collects(".venv/lib/test_x.py")

    plain = _layout({"setup.cfg": "[flake8]\nmax-line-length = 100\n"})
    assert plain.source is None and not plain.doctest_modules
    assert plain.collects("anywhere/deep/test_x.py")


def test_setup_cfg_counts_for_pytest_and_packaging_sections_only() -> None:
    from bot.core.config import TestSettings
    from runner.gitdiff import FileStatus
    from runner.selection.change import FileChange
    from runner.selection.triggers import whole_suite_reasons

    base = "[metadata]\nname = x\n\n[flake8]\nmax-line-length = 88\n\n[tool:pytest]\naddopts = -ra\n"

    def reasons(head: str) -> list[str]:
        change = FileChange(path="setup.cfg", status=FileStatus.MODIFIED, base_text=base, head_text=head)
        return whole_suite_reasons([change], TestSettings())

    assert reasons(base.replace("88", "100")) == []
    assert reasons(base.replace("-ra", "-ra -x")) == [
        "`setup.cfg` changed ([tool:pytest]), which decides how every test runs"
    ]
    assert reasons(base + "\n[options]\ninstall_requires = numpy\n") == [
        "`setup.cfg` changed ([options]), which decides how every test runs"
    ]
    assert reasons("[broken") == ["`setup.cfg` changed (the whole file), which decides how every test runs"]


def test_the_map_never_collects_paritybots_own_files_where_pytest_would(tmp_path: Path) -> None:
    # norecursedirs without ".*" and --doctest-modules: pytest run with no arguments would import
    # every module under the repository, the step's own scratch files included.
    repo = GitRepo(tmp_path / "repo")
    base = repo.commit(
        {
            "pyproject.toml": (
                '[tool.pytest.ini_options]\naddopts = "--doctest-modules"\nnorecursedirs = ["build"]\n'
                'pythonpath = ["."]\n'
            ),
            "inpkg/__init__.py": "",
            "inpkg/calc.py": CALC,
            "tests/test_calc.py": "from inpkg.calc import add\n\n\ndef test_add():\n    assert add(1, 1) == 2\n",
        }
    )
    done = run_cli(
        "coverage-map", "--repo", str(repo.path), "--rev", base, "--runner", "host",
        env={"PARITYBOT_COVERAGE_DIR": str(tmp_path / "maps")},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr + done.stdout
    assert "3 of 3 collected tests ran" in done.stdout
    # The whole suite, as a check runs it (a change to pytest's options): the same three tests.
    head = repo.commit(
        {"pyproject.toml": (repo.path / "pyproject.toml").read_text() + "xfail_strict = true\n"}
    )
    done = run_cli(
        "check", "--repo", str(repo.path), "--base", base, "--head", head, "--runner", "host", "--json",
        env={"PARITYBOT_COVERAGE_DIR": str(tmp_path / "maps")}, timeout=300,
    )  # fmt: skip
    run = json.loads(done.stdout)
    assert run["tests"]["selection"]["whole_suite"] is True
    assert sorted(r["nodeid"] for r in run["tests"]["results"]) == [
        "inpkg/calc.py::inpkg.calc.add",
        "inpkg/calc.py::inpkg.calc.scale",
        "tests/test_calc.py::test_add",
    ]
    assert {r["outcome"] for r in run["tests"]["results"]} == {"passed"}
