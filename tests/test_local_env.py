"""Local runs test the commit in an environment of their own; the contributor's is left alone.

Each test builds a small project of one shape a contributor really has (a src layout installed
editable with an uncommitted edit, a C extension, pytest-cov in ``addopts``, a set-up step that
installs the project), runs `paritybot` from the contributor's own activated virtualenv as they
would, and checks both the answer and that the virtualenv (``pip freeze``, every file under it)
is exactly as it was.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from cli_run import run_cli
from contributor_env import ContributorEnv, make_contributor_env
from gitrepo import GitRepo

from runner.checks.pytest_plugins import missing_plugins

QUIET_CONFIG = "checks: {precommit: false, docstrings: false}\n"
SETUPTOOLS = '[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n'


def src_layout_project(path: Path) -> GitRepo:
    """``src/mylib`` with a test, on main; a branch ``change`` that edits the function."""
    repo = GitRepo(path)
    repo.commit(
        {
            "pyproject.toml": SETUPTOOLS + '[project]\nname = "mylib"\nversion = "0.1"\n',
            "src/mylib/__init__.py": "def double(x):\n    return 2 * x\n",
            "tests/test_double.py": "from mylib import double\n\n\ndef test_double():\n"
            "    assert double(2) == 4\n",
            ".github/paritybot.yml": QUIET_CONFIG,
        }
    )
    repo.git("checkout", "-q", "-b", "change")
    repo.commit({"src/mylib/__init__.py": "def double(x):\n    return x + x\n"})
    return repo


@pytest.fixture
def contributor(tmp_path: Path) -> ContributorEnv:
    return make_contributor_env(tmp_path / "venv", without=("pytest_cov", "pytest-cov"))


def unchanged(env: ContributorEnv, before: tuple[str, dict[str, str]]) -> None:
    freeze, entries = env.fingerprint()
    assert freeze == before[0]
    changed = {k for k in entries.keys() | before[1].keys() if entries.get(k) != before[1].get(k)}
    assert not changed, f"the contributor's environment changed: {sorted(changed)[:10]}"


def host_check(repo: GitRepo) -> list[str]:
    """`paritybot check` of the checked-out branch against main, on this machine."""
    return ["check", "--repo", str(repo.path), "--base", "main", "--runner", "host"]


def stored_map(home: Path) -> dict[str, object]:
    (path,) = (home / "cache" / "paritybot" / "checkouts").glob("*/coverage/*.json.gz")
    data: dict[str, object] = json.loads(gzip.decompress(path.read_bytes()))
    return data


def test_src_layout_installed_editable_tests_the_commit_not_the_working_copy(
    tmp_path: Path, contributor: ContributorEnv
) -> None:
    repo = src_layout_project(tmp_path / "proj")
    contributor.run("-m", "pip", "install", "-q", "--no-build-isolation", "--no-deps", "-e", str(repo.path))
    # Uncommitted, and broken at import: the check is of the commit, so it must not see this.
    (repo.path / "src/mylib/__init__.py").write_text("raise RuntimeError('half-done edit')\n")
    before = contributor.fingerprint()

    done = contributor.paritybot(*host_check(repo), home=tmp_path)

    assert done.returncode == 0, done.stdout + done.stderr
    assert "Tests: 1 passed" in done.stdout
    assert f"python: {contributor.python} (the active virtualenv" in done.stderr
    unchanged(contributor, before)
    (env,) = (tmp_path / "cache" / "paritybot" / "envs").glob("*/pycache")
    assert not [p for p in env.rglob("*.pyc") if "runs" in p.parts]  # the run's tree left no byte code

    mapped = contributor.paritybot(
        "coverage-map", "--repo", str(repo.path), "--rev", "main", "--runner", "host", home=tmp_path
    )

    assert mapped.returncode == 0, mapped.stdout + mapped.stderr
    files = stored_map(tmp_path)["files"]
    assert isinstance(files, dict) and "src/mylib/__init__.py" in files
    unchanged(contributor, before)


@pytest.mark.parametrize("chosen_by", ["VIRTUAL_ENV", "--python", "config"])
def test_the_projects_interpreter_runs_it_not_paritybots(
    tmp_path: Path, contributor: ContributorEnv, chosen_by: str
) -> None:
    # paritybot installed in an environment of its own (pipx, say); the project's dependency only
    # in the project's virtualenv.
    dep = GitRepo(tmp_path / "dep")
    dep.commit(
        {
            "pyproject.toml": SETUPTOOLS + '[project]\nname = "onlyhere"\nversion = "0.1"\n',
            "onlyhere/__init__.py": "FACTOR = 2\n",
        }
    )
    contributor.run("-m", "pip", "install", "-q", "--no-build-isolation", "--no-deps", str(dep.path))
    repo = src_layout_project(tmp_path / "proj")
    repo.commit(
        {"tests/test_factor.py": "import onlyhere\n\n\ndef test_factor():\n    assert onlyhere.FACTOR == 2\n"}
    )
    before = contributor.fingerprint()
    where = {"VIRTUAL_ENV": str(contributor.root)} if chosen_by == "VIRTUAL_ENV" else {}
    option = ["--python", contributor.python] if chosen_by == "--python" else []
    if chosen_by == "config":  # the environment names it: `python:` in the repository config
        config = tmp_path / "paritybot.yml"
        config.write_text(
            f"environments:\n  - name: local\n    default: true\n    python: {contributor.python}\n"
        )
        option = ["--config", str(config)]

    done = run_cli(
        *host_check(repo),
        *option,
        home=tmp_path,
        env=where,
    )

    assert done.returncode == 0, done.stdout + done.stderr
    assert "Tests: 2 passed" in done.stdout
    said = {"VIRTUAL_ENV": "the active virtualenv", "--python": "--python", "config": "the config's"}[
        chosen_by
    ]
    assert f"python: {contributor.python} ({said}" in done.stderr
    unchanged(contributor, before)


# An editable install whose import hook is placed first on sys.meta_path, serving the package
# from the contributor's checkout ahead of sys.path, and so of any tree.
IMPORT_HOOK = """\
import importlib.util, sys


class WorkingCopy:
    def find_spec(self, name, path=None, target=None):
        if name == "mylib":
            return importlib.util.spec_from_file_location(name, {init!r})
        return None


sys.meta_path.insert(0, WorkingCopy())
"""


def test_a_package_an_import_hook_serves_from_elsewhere_stops_the_run(
    tmp_path: Path, contributor: ContributorEnv
) -> None:
    repo = src_layout_project(tmp_path / "proj")
    init = str(repo.path / "src/mylib/__init__.py")
    (contributor.site / "_mylib_hook.py").write_text(IMPORT_HOOK.format(init=init))
    (contributor.site / "_mylib_hook.pth").write_text("import _mylib_hook\n")
    before = contributor.fingerprint()

    done = contributor.paritybot(*host_check(repo), home=tmp_path)

    assert done.returncode == 2, done.stdout + done.stderr
    assert (
        f"the project's `mylib` would be imported from {Path(init).parent}, not from the commit"
        in done.stdout
    )
    assert "Tests:" not in done.stdout
    unchanged(contributor, before)


def test_a_map_with_no_line_of_the_projects_source_is_not_kept(
    tmp_path: Path, contributor: ContributorEnv
) -> None:
    # Packages in `lib/`, installed (not editable) in the contributor's environment: the tests
    # import that copy, so no line of the tree runs, and such a map would select nothing.
    repo = GitRepo(tmp_path / "proj")
    repo.commit(
        {
            "pyproject.toml": SETUPTOOLS + '[project]\nname = "mylib"\nversion = "0.1"\n'
            '[tool.setuptools.packages.find]\nwhere = ["lib"]\n',
            "lib/mylib/__init__.py": "def double(x):\n    return 2 * x\n",
            "tests/test_double.py": "from mylib import double\n\n\ndef test_double():\n    assert double(2) == 4\n",
            ".github/paritybot.yml": QUIET_CONFIG,
        }
    )
    contributor.run("-m", "pip", "install", "-q", "--no-build-isolation", "--no-deps", str(repo.path))
    before = contributor.fingerprint()

    mapped = contributor.paritybot(
        "coverage-map", "--repo", str(repo.path), "--runner", "host", home=tmp_path
    )

    assert mapped.returncode == 1, mapped.stdout + mapped.stderr
    assert "no test ran a line of the project's source" in mapped.stderr
    assert not list((tmp_path / "cache" / "paritybot" / "checkouts").glob("*/coverage/*.json.gz"))
    unchanged(contributor, before)


@pytest.mark.parametrize(
    "setup",
    [
        "pip install --no-build-isolation --no-deps -e .",
        "python -m pip install --no-build-isolation --no-deps .",
    ],
)
def test_setup_that_installs_the_project_leaves_the_contributors_install_alone(
    tmp_path: Path, contributor: ContributorEnv, setup: str
) -> None:
    repo = src_layout_project(tmp_path / "proj")
    repo.git("checkout", "-q", "main")
    repo.commit(
        {".github/paritybot.yml": QUIET_CONFIG + f"environments:\n  - name: local\n    setup: [{setup!r}]\n"}
    )
    repo.git("checkout", "-q", "change")
    repo.git("rebase", "-q", "main")
    contributor.run("-m", "pip", "install", "-q", "--no-build-isolation", "--no-deps", "-e", str(repo.path))
    before = contributor.fingerprint()

    done = contributor.paritybot(*host_check(repo), home=tmp_path)

    assert done.returncode == 0, done.stdout + done.stderr
    assert "Tests: 1 passed" in done.stdout
    unchanged(contributor, before)
    imported = contributor.run("-c", "import mylib; print(mylib.__file__)").stdout.strip()
    assert imported == str(repo.path / "src/mylib/__init__.py")


C_SOURCE = """\
#define PY_SSIZE_T_CLEAN
#include <Python.h>

static PyObject *answer(PyObject *self, PyObject *args) { return PyLong_FromLong(@VALUE@); }
static PyMethodDef methods[] = {{"answer", answer, METH_NOARGS, "the answer"}, {NULL, NULL, 0, NULL}};
static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_speed", NULL, -1, methods};
PyMODINIT_FUNC PyInit__speed(void) { return PyModule_Create(&module); }
"""


def extension_project(path: Path) -> GitRepo:
    """A setuptools C extension returning 41 on main; the branch makes it 42 and tests for it."""
    repo = GitRepo(path)
    repo.commit(
        {
            "pyproject.toml": SETUPTOOLS + '[project]\nname = "cext"\nversion = "0.1"\n',
            "setup.py": "from setuptools import Extension, setup\n\n"
            'setup(ext_modules=[Extension("cext._speed", ["cext/_speed.c"])], packages=["cext"])\n',
            "cext/__init__.py": "from cext._speed import answer\n",
            "cext/_speed.c": C_SOURCE.replace("@VALUE@", "41"),
            "tests/test_answer.py": "from cext import answer\n\n\ndef test_answer():\n    assert answer() == 41\n",
            ".github/paritybot.yml": QUIET_CONFIG + "tests: {reruns: 0}\n",
        }
    )
    repo.git("checkout", "-q", "-b", "change")
    repo.commit(
        {
            "cext/_speed.c": C_SOURCE.replace("@VALUE@", "42"),
            "tests/test_answer.py": "from cext import answer\n\n\ndef test_answer():\n    assert answer() == 42\n\n\n"
            "def test_off_by_one():\n    assert answer() == 43\n",
        }
    )
    return repo


def test_a_changed_extension_is_built_from_the_commit(tmp_path: Path, contributor: ContributorEnv) -> None:
    repo = extension_project(tmp_path / "proj")
    # The contributor built it at the base, in their checkout, as `pip install -e .` does.
    repo.git("checkout", "-q", "main")
    contributor.run("-m", "pip", "install", "-q", "--no-build-isolation", "--no-deps", "-e", str(repo.path))
    repo.git("checkout", "-q", "change")
    before = contributor.fingerprint()

    done = contributor.paritybot(*host_check(repo), home=tmp_path)

    assert done.returncode == 1, done.stdout + done.stderr  # the off-by-one test, and only it
    assert "Tests: 1 passed · 1 failed" in done.stdout
    assert "test_off_by_one" in done.stdout
    assert "python setup.py build_ext --inplace && python -m pytest" in done.stdout  # the repro builds
    assert "compiled code of the commit built" in done.stderr
    unchanged(contributor, before)

    again = contributor.paritybot(*host_check(repo), home=tmp_path)

    assert "Tests: 1 passed · 1 failed" in again.stdout
    assert "compiled code of the commit from the cache" in again.stderr
    assert "environment reused" in again.stderr
    unchanged(contributor, before)


def test_an_extension_declared_in_pyproject_is_built_with_its_backend(
    tmp_path: Path, contributor: ContributorEnv
) -> None:
    repo = GitRepo(tmp_path / "proj")
    repo.commit(
        {
            "pyproject.toml": SETUPTOOLS + '[project]\nname = "cext"\nversion = "0.1"\n[tool.setuptools]\n'
            'packages = ["cext"]\next-modules = [{name = "cext._speed", sources = ["cext/_speed.c"]}]\n',
            "cext/__init__.py": "from cext._speed import answer\n",
            "cext/_speed.c": C_SOURCE.replace("@VALUE@", "41"),
            "tests/test_answer.py": "from cext import answer\n\n\ndef test_answer():\n    assert answer() == 41\n",
            ".github/paritybot.yml": QUIET_CONFIG,
        }
    )
    repo.git("checkout", "-q", "-b", "change")
    repo.commit(
        {
            "cext/_speed.c": C_SOURCE.replace("@VALUE@", "42"),
            "tests/test_answer.py": "from cext import answer\n\n\ndef test_answer():\n    assert answer() == 42\n",
        }
    )
    before = contributor.fingerprint()

    done = contributor.paritybot(*host_check(repo), home=tmp_path)

    assert done.returncode == 0, done.stdout + done.stderr
    assert "Tests: 1 passed" in done.stdout
    assert "built with `python -m pip install --no-build-isolation --no-deps --no-index -e .`" in done.stderr
    unchanged(contributor, before)


def test_compiled_sources_with_no_way_to_build_them_are_said_plainly(
    tmp_path: Path, contributor: ContributorEnv
) -> None:
    repo = GitRepo(tmp_path / "proj")
    repo.commit(
        {
            "fast/__init__.py": "",
            "fast/core.pyx": "def answer():\n    return 41\n",
            "tests/test_fast.py": "def test_fast():\n    assert True\n",
            ".github/paritybot.yml": QUIET_CONFIG,
        }
    )
    repo.git("checkout", "-q", "-b", "change")
    repo.commit({"fast/core.pyx": "def answer():\n    return 42\n"})
    before = contributor.fingerprint()

    done = contributor.paritybot(*host_check(repo), home=tmp_path)

    assert done.returncode == 2, done.stdout + done.stderr
    assert "fast/core.pyx" in done.stdout and "no way to build them here" in done.stdout
    assert "passed" not in done.stdout
    unchanged(contributor, before)


def cov_project(path: Path) -> GitRepo:
    repo = GitRepo(path)
    repo.commit(
        {
            "covlib/__init__.py": "def triple(x):\n    return 3 * x\n",
            "tests/test_triple.py": "from covlib import triple\n\n\ndef test_triple():\n    assert triple(2) == 6\n",
            "setup.cfg": "[tool:pytest]\naddopts = --cov=covlib --cov-report= -n 2\n",
            ".github/paritybot.yml": QUIET_CONFIG,
        }
    )
    return repo


def test_pytest_cov_in_addopts_does_not_empty_the_map(tmp_path: Path) -> None:
    env = make_contributor_env(tmp_path / "venv")  # with pytest-cov
    repo = cov_project(tmp_path / "proj")
    before = env.fingerprint()

    mapped = env.paritybot("coverage-map", "--repo", str(repo.path), "--runner", "host", home=tmp_path)

    assert mapped.returncode == 0, mapped.stdout + mapped.stderr
    assert "turned off: pytest-cov (--no-cov), pytest-xdist (-n 0)" in mapped.stdout
    stored = stored_map(tmp_path)
    assert stored["tests"] == ["tests/test_triple.py::test_triple"]
    files = stored["files"]
    assert isinstance(files, dict) and "covlib/__init__.py" in files
    unchanged(env, before)


def test_cov_in_addopts_without_pytest_cov_names_the_package(
    tmp_path: Path, contributor: ContributorEnv
) -> None:
    repo = cov_project(tmp_path / "proj")
    before = contributor.fingerprint()

    mapped = contributor.paritybot(
        "coverage-map", "--repo", str(repo.path), "--runner", "host", home=tmp_path
    )

    assert mapped.returncode == 1
    assert "--cov needs pytest-cov: install it (pip install pytest-cov)" in mapped.stderr
    repo.git("checkout", "-q", "-b", "change")
    repo.commit({"covlib/__init__.py": "def triple(x):\n    return x * 3\n"})

    done = contributor.paritybot(*host_check(repo), home=tmp_path)

    assert "--cov needs pytest-cov: install it (pip install pytest-cov)" in done.stdout
    unchanged(contributor, before)


@pytest.mark.parametrize(
    ("output", "expected"),
    [
        (
            "ERROR: usage: pytest [options] [file_or_dir] [file_or_dir] [...]\n"
            "pytest: error: unrecognized arguments: --cov=pkg --cov-report=term -n auto\n"
            "  inifile: /p/setup.cfg\n",
            [
                "--cov needs pytest-cov: install it (pip install pytest-cov)",
                "-n needs pytest-xdist: install it (pip install pytest-xdist)",
            ],
        ),
        (
            "pytest: error: unrecognized arguments: -n4 --benchmark-disable\n",
            [
                "-n4 needs pytest-xdist: install it (pip install pytest-xdist)",
                "--benchmark-disable needs pytest-benchmark: install it (pip install pytest-benchmark)",
            ],
        ),
        ("pytest: error: unrecognized arguments: --no-such-thing\n", []),
        (
            "ModuleNotFoundError: No module named 'coverage'\n",
            ["the project's environment has no coverage: install it there (pip install coverage)"],
        ),
        ("1 failed: assert 'unrecognized arguments' in text\n", []),
    ],
)
def test_an_option_of_a_missing_plugin_names_the_package(output: str, expected: list[str]) -> None:
    assert missing_plugins(output) == expected


def test_a_python_that_is_none_is_one_line(tmp_path: Path) -> None:
    repo = src_layout_project(tmp_path / "proj")

    missing = run_cli("check", "--repo", str(repo.path), "--python", str(tmp_path / "nope"), home=tmp_path)
    not_python = run_cli(
        *host_check(repo),
        "--python",
        "false",
        home=tmp_path,
    )

    assert missing.returncode == 2
    assert missing.stderr.strip() == f"paritybot: --python {tmp_path / 'nope'}: no such interpreter"
    assert not_python.returncode == 2
    assert (
        "(--python) is not a Python 3 interpreter paritybot can use: exit code 1, no output"
        in not_python.stdout
    )
