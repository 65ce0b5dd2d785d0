"""runner.selection.coverage_map: a real suite run under the coverage step, parsed, stored and loaded."""

from __future__ import annotations

import asyncio
import gzip
from pathlib import Path

import coverage
import pytest
from selection_sample import SAMPLE, build_coverage_map, host_runner

from bot.core.config import TestSettings
from runner.backends.base import StepResult
from runner.backends.host import HostRunner
from runner.selection.coverage_map import (
    OUTPUT_PATH,
    CoverageMap,
    CoverageMapError,
    CoverageMapStore,
    context_to_nodeid,
    coverage_map_from_step,
    coverage_step,
    parse_coverage_db,
)


def write_tree(root: Path, files: dict[str, str | bytes | None]) -> Path:
    for name, content in files.items():
        target = root / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, str):
            target.write_text(content)
    return root


@pytest.fixture(scope="module")
def sample_map(tmp_path_factory: pytest.TempPathFactory) -> CoverageMap:
    """The sample suite run once for real; every test here reads the same map."""
    root = write_tree(tmp_path_factory.mktemp("sample"), SAMPLE)
    return asyncio.run(build_coverage_map(root, "a" * 40))


def test_every_test_gets_its_node_id_parametrized_and_class_ones_included(
    sample_map: CoverageMap,
) -> None:
    assert "tests/test_ops.py::TestClamp::test_above" in sample_map.tests
    assert "tests/test_ops.py::test_shift[1-2]" in sample_map.tests
    assert "tests/test_text.py::test_shout[x::y]" in sample_map.tests
    assert "tests/test_text.py::test_shout[a b]" in sample_map.tests
    assert len(sample_map.tests) == 10


def test_lines_map_to_the_tests_that_ran_them(sample_map: CoverageMap) -> None:
    # stats.py:4 is ``return sum(values) / len(values)``: only test_mean gets there.
    assert sample_map.tests_at("src/shapes/stats.py", [4]) == {"tests/test_stats.py::test_mean"}
    # ops.py:14 is ``return LIMIT``: only the clamp test above the limit.
    assert sample_map.tests_at("src/shapes/ops.py", [14]) == {"tests/test_ops.py::TestClamp::test_above"}
    assert sample_map.tests_between("src/shapes/ops.py", 12, 15) == {
        "tests/test_ops.py::TestClamp::test_above",
        "tests/test_ops.py::TestClamp::test_below",
    }


def test_import_time_lines_are_kept_apart(sample_map: CoverageMap) -> None:
    # def lines and module constants run while pytest imports the test modules, outside any test.
    assert sample_map.import_time("src/shapes/ops.py", 4)
    assert sample_map.import_time("src/shapes/consts.py", 1)
    assert not sample_map.tests_at("src/shapes/consts.py", [1])
    assert not sample_map.import_time("src/shapes/stats.py", 4)
    assert sample_map.knows("src/shapes/__init__.py")
    assert not any(path.startswith(".paritybot") for path in sample_map.files)


async def test_a_step_that_wrote_no_map_says_why(tmp_path: Path) -> None:
    # A command that exits before writing the map (as when coverage is not installed).
    runner = host_runner()
    result = await runner.run(coverage_step(TestSettings()).model_copy(update={"argv": ["false"]}), tmp_path)
    with pytest.raises(CoverageMapError, match="no coverage map was written"):
        coverage_map_from_step(result)


def test_map_from_collected_step_output() -> None:
    text = (
        '{"format": "paritybot-coverage-map/1", "tests": ["t.py::a", "t.py::b"],'
        ' "files": {"m.py": {"3": [0, 1], "4": [1]}}, "import_lines": {"m.py": [1]}}'
    )
    result = StepResult(name="coverage-map", exit_code=1, collected={OUTPUT_PATH: text})
    cmap = coverage_map_from_step(result, "c" * 40)
    assert cmap.commit == "c" * 40
    assert cmap.tests_at("m.py", [4]) == {"t.py::b"}
    assert cmap.tests_at("m.py", [3, 4]) == {"t.py::a", "t.py::b"}


def test_coverage_py_data_files_with_pytest_cov_contexts_parse(tmp_path: Path) -> None:
    src = tmp_path / "pkg" / "mod.py"
    data = coverage.CoverageData(basename=str(tmp_path / ".coverage"))
    data.set_context("")
    data.add_lines({str(src): [1, 2]})
    data.set_context("tests/test_mod.py::TestA::test_x[1-2]|run")
    data.add_lines({str(src): [5, 6]})
    data.set_context("tests/test_mod.py::test_y|setup")
    data.add_lines({str(src): [6], "/elsewhere/site.py": [1]})
    data.write()
    cmap = parse_coverage_db((tmp_path / ".coverage").read_bytes(), root=str(tmp_path))
    assert cmap.tests_at("pkg/mod.py", [6]) == {
        "tests/test_mod.py::TestA::test_x[1-2]",
        "tests/test_mod.py::test_y",
    }
    assert cmap.import_lines == {"pkg/mod.py": [1, 2]}
    assert list(cmap.files) == ["pkg/mod.py"]  # outside the root: left out


def test_coverage_data_without_contexts_is_refused(tmp_path: Path) -> None:
    data = coverage.CoverageData(basename=str(tmp_path / ".coverage"))
    data.add_lines({str(tmp_path / "m.py"): [1]})
    data.write()
    with pytest.raises(CoverageMapError, match="no per-test contexts"):
        parse_coverage_db((tmp_path / ".coverage").read_bytes(), root=str(tmp_path))


@pytest.mark.parametrize(
    ("context", "nodeid"),
    [
        ("tests/test_a.py::test_b|run", "tests/test_a.py::test_b"),
        ("tests/test_a.py::TestC::test_d[x::y]", "tests/test_a.py::TestC::test_d[x::y]"),
        ("tests.test_a.TestC.test_d", "tests/test_a.py::TestC::test_d"),
        ("test_a.test_b", "test_a.py::test_b"),
        ("", None),
    ],
)
def test_context_names_become_node_ids(context: str, nodeid: str | None) -> None:
    assert context_to_nodeid(context) == nodeid


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"not json at all", "neither JSON nor"),
        (b'{"format": "something-else"}', "unknown coverage map format"),
        (b'{"format": "paritybot-coverage-map/1", "tests": "nope"}', "malformed coverage map"),
        (
            b'{"format": "paritybot-coverage-map/3", "tests": ["t.py::a"], "fixture_users": {"db": [0, 7]}}',
            "a test index outside its 1 tests",
        ),
        (b'{"format": "paritybot-coverage-map/3", "files": {"a.py": {"1": [0]}}}', "outside its 0 tests"),
    ],
)
def test_bad_data_gets_a_clear_error(data: bytes, message: str) -> None:
    with pytest.raises(CoverageMapError, match=message):
        parse_coverage_db(data)


def test_store_round_trip_by_commit(tmp_path: Path, sample_map: CoverageMap) -> None:
    store = CoverageMapStore(tmp_path / "maps")
    commit = "b" * 40
    assert store.load(commit) is None
    path = store.save(commit, sample_map)
    assert path.name == f"{commit}.json.gz"
    loaded = store.load(commit)
    assert loaded is not None and loaded.commit == commit
    assert loaded.files == sample_map.files and loaded.tests == sample_map.tests
    assert not [p for p in path.parent.iterdir() if p.name.startswith(".tmp")]


def test_store_ignores_a_corrupt_file_and_refuses_odd_commit_names(tmp_path: Path) -> None:
    store = CoverageMapStore(tmp_path)
    (tmp_path / f"{'d' * 40}.json.gz").write_bytes(gzip.compress(b"{broken"))
    assert store.load("d" * 40) is None
    with pytest.raises(ValueError, match="not a commit sha"):
        store.load("../../etc/passwd")


@pytest.mark.parametrize("named", [False, True])
def test_plugin_autoload_turned_off_still_gives_a_map(tmp_path: Path, named: bool) -> None:
    """With PYTEST_DISABLE_PLUGIN_AUTOLOAD pytest-cov and xdist load only where `-p` names them:
    the step must not pass their options to a pytest that does not know them (exit 4, no map)."""
    root = write_tree(tmp_path, SAMPLE)
    env = {**host_runner().info.env, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    if named:
        env["PYTEST_ADDOPTS"] = "-p pytest_cov -p xdist"
    runner = HostRunner(env=env)
    result = asyncio.run(runner.run(coverage_step(TestSettings()), root))
    cmap = coverage_map_from_step(result)
    assert len(cmap.tests) == 10
    assert cmap.health is not None
    assert cmap.health.turned_off == (["pytest-cov (--no-cov)", "pytest-xdist (-n 0)"] if named else [])
