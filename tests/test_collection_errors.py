"""A project that does not import where its tests run: its modules are collection errors, named as
such with their first error and the likely fix, never tests "not in this commit"; each module is
listed once, and every count agrees with what is listed.

It happens in a container whose image lacks the project (the App's runs): on the host, a local
run puts the commit's own tree (``src/`` too) first on the path (docs/local.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_run import run_cli
from docker_support import docker_client, test_image
from gitrepo import GitRepo

from bot.core.kinds import CheckKind
from bot.core.models import RunReport
from bot.render.check_results import render_check_runs

__all__ = ["docker_client", "test_image"]  # the fixtures, imported for pytest
pytestmark = pytest.mark.docker

# Not installed and not on pytest's path: `import calc` fails in every test module. Doctests are
# collected too, so pytest collects each test module twice (as tests and as doctests).
PYPROJECT = '[tool.pytest.ini_options]\ntestpaths = ["tests"]\naddopts = "--doctest-modules"\n'
STATS = "def mean(values):\n    return sum(values) / len(values)\n"
TEST_STATS = (
    "from calc.stats import mean\n\n\n"
    "def test_mean():\n    assert mean([1, 2]) == 1.5\n\n\n"
    "def test_one():\n    assert mean([1]) == 1\n"
)
TEST_TEXT = "import calc\n\n\ndef test_name():\n    assert calc.__name__ == 'calc'\n"


def _project(tmp_path: Path) -> GitRepo:
    repo = GitRepo(tmp_path / "project")
    repo.commit(
        {
            "pyproject.toml": PYPROJECT,
            "src/calc/__init__.py": "",
            "src/calc/stats.py": STATS,
            "tests/test_stats.py": TEST_STATS,
            "tests/test_text.py": TEST_TEXT,
            "tests/test_plain.py": "def test_plain():\n    assert True\n",
        }
    )
    repo.git("checkout", "-q", "-b", "feature")
    repo.commit({"src/calc/stats.py": STATS.replace("/ len", "// len")})
    return repo


def in_container(image: str, tmp_path: Path) -> tuple[str, ...]:
    """The options of a run in the test image, which has pytest and not the project."""
    config = tmp_path / "paritybot.yml"
    config.write_text(f"environments:\n  - name: ci\n    default: true\n    image: {image}\n    gpus: none\n")
    return ("--runner", "docker", "--config", str(config))


def test_a_project_that_does_not_import_is_a_collection_error_with_its_fix(
    tmp_path: Path, test_image: str
) -> None:
    repo = _project(tmp_path)
    args = ("check", "--repo", str(repo.path), "--base", "main", *in_container(test_image, tmp_path))

    shown = run_cli(*args, home=tmp_path)
    as_json = run_cli(*args, "--json", home=tmp_path)

    assert shown.returncode == as_json.returncode == 1, shown.stdout + shown.stderr
    out = shown.stdout
    report = RunReport.model_validate_json(as_json.stdout)
    assert report.tests is not None
    # The selected tests exist: their module did not collect.
    assert "not in this commit" not in out and report.tests.not_found == []
    assert "### ❌ 1 test module did not collect" in out
    assert "Tests: 0 passed · 0 failed · 0 skipped · 1 deselected · 1 module did not collect" in out
    assert (
        "**Collection error:** 1 selected test module did not collect, so none of their tests ran: "
        "`tests/test_stats.py` (first error: `ModuleNotFoundError: No module named 'calc'`)."
    ) in out
    assert "The project itself does not import where the tests run: `calc` is not installed." in out
    assert "`env: {PYTHONPATH: src}`" in out
    assert "**`tests/test_stats.py`** did not collect" in out
    # The unselected module that did not collect is listed once, though pytest collected it twice.
    assert out.count("`tests/test_text.py`") == 1
    assert "Not selected, and could not be collected: 1 test module: `tests/test_text.py`" in out
    # The count names the listed ids that are not in it.
    selected = [t.nodeid for t in report.tests.selection.tests]
    assert selected == ["tests/test_stats.py::test_mean", "tests/test_stats.py::test_one"]
    assert "🎯 Tests: 0 selected, 1 deselected; 2 selected ids in modules that did not collect" in out
    [tests_run] = [o for o in render_check_runs(report) if o.kind == CheckKind.TESTS]
    assert tests_run.title == "0 passed · 0 failed · 0 skipped · 1 deselected · 1 module did not collect"
    assert "Collection error" in tests_run.summary
    assert json.loads(as_json.stdout)["tests"]["collection_fix"].startswith("The project itself")


def test_a_module_that_does_not_collect_is_one_hole_of_the_coverage_map(
    tmp_path: Path, test_image: str
) -> None:
    repo = _project(tmp_path)
    done = run_cli(
        "coverage-map",
        "--repo",
        str(repo.path),
        "--rev",
        "main",
        *in_container(test_image, tmp_path),
        "--json",
        home=tmp_path,
    )
    doc = json.loads(done.stdout)
    paths = [e["path"] for e in doc["health"]["collection_errors"]]
    assert paths == sorted(set(paths))  # each module once, though doctests collect it again
    assert "tests/test_text.py" in paths
