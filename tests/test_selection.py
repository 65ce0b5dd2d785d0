"""runner.selection.select on a real git repository whose suite really ran under the coverage step."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import structlog
from gitrepo import GitRepo
from selection_sample import ALL_TESTS, SAMPLE, build_coverage_map

from bot.cli.select_tests import select_tests_main
from bot.core.config import TestSettings
from bot.core.models import Selection
from bot.service.logs import configure_logging
from runner.git import GitError
from runner.selection.coverage_map import CoverageMap, CoverageMapStore
from runner.selection.pr import GivenMap, select_tests
from runner.selection.select import (
    Signal,
    parse_collect_only,
    split_nodeid,
)

STATS = str(SAMPLE["src/shapes/stats.py"])
OPS = str(SAMPLE["src/shapes/ops.py"])
INIT = str(SAMPLE["src/shapes/__init__.py"])


@dataclass
class Sample:
    repo: GitRepo
    base: str
    cmap: CoverageMap

    def change(self, files: dict[str, str | bytes | None], name: str) -> str:
        """A head commit on its own branch from the base commit."""
        self.repo.git("checkout", "-q", "-B", name, self.base)
        return self.repo.commit(files, name)

    def select(
        self,
        head: str,
        *,
        with_map: bool = True,
        settings: TestSettings | None = None,
        all_tests: list[str] | None = ALL_TESTS,
        signals: frozenset[Signal] | None = None,
    ) -> Selection:
        cmap = GivenMap(self.cmap) if with_map else None
        return select_tests(
            self.repo.path, self.base, head, settings or TestSettings(), cmap, all_tests, signals
        )


@pytest.fixture(scope="module")
def sample(tmp_path_factory: pytest.TempPathFactory) -> Sample:
    """The sample package committed once and its suite run once under coverage (one for the module, read-only)."""
    repo = GitRepo(tmp_path_factory.mktemp("selection") / "repo")
    base = repo.commit(SAMPLE, "base")
    cmap = asyncio.run(build_coverage_map(repo.path, base))
    # The step leaves its scratch files in the workspace; a checkout must not carry them along.
    (repo.path / ".git" / "info" / "exclude").write_text(".paritybot/\n")
    return Sample(repo=repo, base=base, cmap=cmap)


@pytest.fixture
def cli_logging() -> Iterator[None]:
    """Logs on stderr, as the ``paritybot`` command sets them up, so stdout holds only the output."""
    configure_logging(fmt="console", level="info", stream=sys.stderr)
    yield
    structlog.reset_defaults()


def reasons(selection: Selection) -> dict[str, list[str]]:
    return {t.nodeid: t.reasons for t in selection.tests}


def test_a_change_to_one_function_selects_the_tests_that_run_it(sample: Sample) -> None:
    head = sample.change(
        {"src/shapes/stats.py": STATS.replace("/ len(values)", "/ max(len(values), 1)")}, "mean"
    )
    selection = sample.select(head)
    assert reasons(selection) == {
        "tests/test_stats.py::test_mean": ["covers src/shapes/stats.py:4 changed in this PR"]
    }
    assert not selection.whole_suite
    assert selection.total_tests == len(ALL_TESTS)


def test_the_root_reexport_does_not_make_every_test_depend_on_every_change(sample: Sample) -> None:
    # Every test file imports the package root, which re-exports everything; without a coverage
    # map the static graph still resolves ``from shapes import shift`` to ``shapes.ops.shift``.
    head = sample.change({"src/shapes/ops.py": OPS.replace("return x + by", "return by + x")}, "shift")
    static = sample.select(head, with_map=False, signals=frozenset({Signal.STATIC}))
    assert set(reasons(static)) == {
        "tests/test_ops.py::test_shift[1-2]",
        "tests/test_ops.py::test_shift[5-6]",
    }
    assert (
        "imports `shapes.ops.shift` which this PR changes"
        in reasons(static)["tests/test_ops.py::test_shift[1-2]"]
    )
    with_map = sample.select(head)
    assert set(reasons(with_map)) == set(reasons(static))


def test_without_collected_ids_static_selection_names_test_functions(sample: Sample) -> None:
    head = sample.change({"src/shapes/ops.py": OPS.replace("return x + by", "return by + x")}, "shift-ids")
    selection = sample.select(head, with_map=False, all_tests=None, signals=frozenset({Signal.STATIC}))
    assert [t.nodeid for t in selection.tests] == ["tests/test_ops.py::test_shift"]


def test_name_match_adds_the_test_file_named_after_the_module(sample: Sample) -> None:
    head = sample.change({"src/shapes/stats.py": STATS.replace("max(values)", "max(*values)")}, "spread")
    selection = sample.select(head, with_map=False)
    got = reasons(selection)
    assert set(got) == {"tests/test_stats.py::test_mean", "tests/test_stats.py::test_spread"}
    named = "tests/test_stats.py is named after src/shapes/stats.py, which this PR changes"
    assert named in got["tests/test_stats.py::test_mean"]
    # The static signal is the stronger one, so it comes first.
    assert got["tests/test_stats.py::test_spread"][0] == "imports `shapes.stats.spread` which this PR changes"


def test_conftest_change_runs_the_whole_suite(sample: Sample) -> None:
    conftest = str(SAMPLE["tests/conftest.py"])
    head = sample.change({"tests/conftest.py": conftest.replace("[1, 2, 3]", "[1, 2, 3, 4]")}, "conftest")
    selection = sample.select(head)
    assert selection.whole_suite
    assert selection.whole_suite_reasons == [
        "`tests/conftest.py` changed (matches `**/conftest.py` in tests.whole_suite_globs)"
    ]


def test_configured_globs_and_compiled_sources_run_the_whole_suite(sample: Sample) -> None:
    head = sample.change({"data/schema.json": "{}\n", "csrc/kernel.cu": "// kernel\n"}, "globs")
    selection = sample.select(head, settings=TestSettings(whole_suite_globs=["data/*.json"]))
    assert selection.whole_suite
    assert selection.whole_suite_reasons == [
        "`csrc/kernel.cu` changed: compiled code, which coverage cannot attribute to tests",
        "`data/schema.json` changed (matches `data/*.json` in tests.whole_suite_globs)",
    ]


def test_docs_only_change_selects_nothing(sample: Sample) -> None:
    head = sample.change({"README.md": "# shapes\n\nMore words.\n"}, "docs")
    selection = sample.select(head)
    assert selection.tests == [] and not selection.whole_suite


def test_module_constant_goes_to_the_tests_that_run_code_using_it(sample: Sample) -> None:
    # consts.py runs only while importing; FACTOR reaches scale directly and clamp through LIMIT.
    head = sample.change({"src/shapes/consts.py": "FACTOR = 3\nLIMIT = FACTOR * 50\n"}, "factor")
    got = reasons(sample.select(head))
    assert set(got) == {
        "tests/test_ops.py::test_scale",
        "tests/test_ops.py::TestClamp::test_above",
        "tests/test_ops.py::TestClamp::test_below",
    }
    assert got["tests/test_ops.py::test_scale"] == [
        "runs `shapes.ops.scale`, which uses `shapes.consts.FACTOR` changed in this PR"
    ]


def test_a_changed_signature_selects_the_tests_of_that_function(sample: Sample) -> None:
    head = sample.change({"src/shapes/ops.py": OPS.replace("by=1", "by=2")}, "default")
    got = reasons(sample.select(head))
    assert set(got) == {"tests/test_ops.py::test_shift[1-2]", "tests/test_ops.py::test_shift[5-6]"}
    assert got["tests/test_ops.py::test_shift[1-2]"] == [
        "runs function `shapes.ops.shift` (src/shapes/ops.py:8–9), whose definition this PR changes"
    ]


def test_parametrized_cases_are_all_selected_with_their_ids(sample: Sample) -> None:
    text = str(SAMPLE["src/shapes/text.py"])
    head = sample.change({"src/shapes/text.py": text.replace('"!"', '"!!"')}, "shout")
    assert set(reasons(sample.select(head))) == {
        "tests/test_text.py::test_shout[hi]",
        "tests/test_text.py::test_shout[a b]",
        "tests/test_text.py::test_shout[x::y]",
    }


def test_new_function_without_coverage_falls_back_to_the_static_graph(sample: Sample) -> None:
    head = sample.change(
        {
            "src/shapes/rounding.py": "def round_half(x):\n    return round(x * 2) / 2\n",
            "src/shapes/ops.py": OPS.replace(
                "from .consts import FACTOR, LIMIT\n",
                "from .consts import FACTOR, LIMIT\nfrom .rounding import round_half\n",
            ).replace("return x * FACTOR", "return round_half(x * FACTOR)"),
        },
        "new-module",
    )
    got = reasons(sample.select(head))
    assert set(got) == {"tests/test_ops.py::test_scale"}
    assert got["tests/test_ops.py::test_scale"] == [
        "covers src/shapes/ops.py:5 changed in this PR",
        "uses `shapes.ops.scale` → `shapes.rounding.round_half` which this PR adds (no coverage data for it yet)",
    ]


def test_new_function_in_a_known_module_uses_the_static_graph_for_it(sample: Sample) -> None:
    median = "\n\ndef median(values):\n    return sorted(values)[len(values) // 2]\n"
    test_median = "from shapes import median\n\n\ndef test_median():\n    assert median([3, 1, 2]) == 2\n"
    head = sample.change(
        {
            "src/shapes/stats.py": STATS + median,
            "src/shapes/__init__.py": INIT.replace("mean, spread", "mean, median, spread"),
            "tests/test_median.py": test_median,
        },
        "median",
    )
    got = reasons(sample.select(head, all_tests=[*ALL_TESTS, "tests/test_median.py::test_median"]))
    assert got["tests/test_median.py::test_median"][0] == "added by this PR"
    assert any(
        "`shapes.stats.median` which this PR adds" in r for r in got["tests/test_median.py::test_median"]
    )


def test_edited_tests_are_selected_and_say_so(sample: Sample) -> None:
    tests = str(SAMPLE["tests/test_ops.py"])
    head = sample.change({"tests/test_ops.py": tests.replace("clamp(5) == 5", "clamp(7) == 7")}, "edit-test")
    got = reasons(sample.select(head))
    assert set(got) == {"tests/test_ops.py::TestClamp::test_below"}
    assert got["tests/test_ops.py::TestClamp::test_below"][0] == "edited by this PR"


def test_always_run_and_the_budget_keep_the_strongest_signals(sample: Sample) -> None:
    head = sample.change({"src/shapes/ops.py": OPS.replace("return x + by", "return by + x")}, "budget")
    settings = TestSettings(max_tests=2, always_run=["tests/test_stats.py::test_spread"])
    selection = sample.select(head, settings=settings)
    assert [t.nodeid for t in selection.tests] == [
        "tests/test_stats.py::test_spread",
        "tests/test_ops.py::test_shift[1-2]",
    ]
    assert selection.tests[0].reasons == ["always run (tests.always_run: `tests/test_stats.py::test_spread`)"]
    assert selection.budget_dropped == ["tests/test_ops.py::test_shift[5-6]"]


def test_a_deleted_test_is_not_selected_from_an_older_map(sample: Sample) -> None:
    stats_tests = str(SAMPLE["tests/test_stats.py"])
    head = sample.change(
        {
            "src/shapes/stats.py": STATS.replace("/ len(values)", "/ max(len(values), 1)"),
            "tests/test_stats.py": stats_tests.split("def test_mean")[0]
            + "def test_spread():\n    assert shapes.spread([1, 5]) == 4\n",
        },
        "drop-test",
    )
    collected = [n for n in ALL_TESTS if n != "tests/test_stats.py::test_mean"]
    assert "tests/test_stats.py::test_mean" not in reasons(sample.select(head, all_tests=collected))


def test_unknown_revision_is_a_git_error(sample: Sample) -> None:
    with pytest.raises(GitError, match="no-such-branch"):
        sample.select("no-such-branch")


@pytest.mark.usefixtures("cli_logging")
def test_cli_prints_json_using_the_cached_map(
    sample: Sample, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    head = sample.change(
        {"src/shapes/stats.py": STATS.replace("/ len(values)", "/ max(len(values), 1)")}, "cli"
    )
    monkeypatch.setenv("PARITYBOT_COVERAGE_DIR", str(tmp_path / "maps"))
    CoverageMapStore(tmp_path / "maps").save(sample.base, sample.cmap)
    assert select_tests_main(str(sample.repo.path), sample.base, head, as_json=True) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["whole_suite"] is False
    assert doc["coverage_map"] == sample.base
    assert doc["tests"] == [
        {
            "nodeid": "tests/test_stats.py::test_mean",
            "reasons": ["covers src/shapes/stats.py:4 changed in this PR"],
        }
    ]


@pytest.mark.usefixtures("cli_logging")
def test_cli_without_a_map_uses_static_signals_and_reports_bad_refs(
    sample: Sample, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    head = sample.change(
        {"src/shapes/stats.py": STATS.replace("/ len(values)", "/ max(len(values), 1)")}, "cli2"
    )
    monkeypatch.setenv("PARITYBOT_COVERAGE_DIR", str(tmp_path / "empty"))
    assert select_tests_main(str(sample.repo.path), sample.base, head, as_json=False) == 0
    out = capsys.readouterr().out
    assert "static analysis (no coverage map found)" in out
    assert "tests/test_stats.py::test_mean\n    imports `shapes.stats.mean` which this PR changes" in out
    assert select_tests_main(str(sample.repo.path), "nope", head, as_json=False) == 2
    assert "nope" in capsys.readouterr().err


def test_parse_collect_only_reads_node_ids_and_skips_the_rest() -> None:
    output = (
        "tests/test_a.py::test_one\n"
        "tests/test_a.py::TestK::test_two[a b]\n"
        "tests/test_a.py::test_three[x::y]\n"
        "\n"
        "=============================== warnings summary ===============================\n"
        "tests/test_a.py:3\n"
        "  DeprecationWarning: old\n"
        "-- Docs: https://docs.pytest.org/en/stable/how-to/capture-warnings.html\n"
        "3 tests collected in 0.01s\n"
    )
    assert parse_collect_only(output) == [
        "tests/test_a.py::test_one",
        "tests/test_a.py::TestK::test_two[a b]",
        "tests/test_a.py::test_three[x::y]",
    ]


def test_split_nodeid_keeps_parameters_whole() -> None:
    assert split_nodeid("t.py::K::test[a::b]") == ("t.py", ["K", "test"], "[a::b]")
    assert split_nodeid("t.py") == ("t.py", [], "")


def test_an_import_line_selects_the_users_of_the_names_it_rebinds_only(sample: Sample) -> None:
    # ``from .consts import FACTOR, LIMIT`` → ``LIMIT, FACTOR``: both names bound as before.
    reordered = OPS.replace("from .consts import FACTOR, LIMIT", "from .consts import LIMIT, FACTOR")
    head = sample.change({"src/shapes/ops.py": reordered}, "reorder-import")
    assert sample.select(head).tests == []
    assert sample.select(head, with_map=False, signals=frozenset({Signal.STATIC})).tests == []
    # LIMIT no longer imported (defined here instead): LIMIT's users, not FACTOR's.
    dropped = OPS.replace("from .consts import FACTOR, LIMIT", "from .consts import FACTOR\n\nLIMIT = 100")
    head = sample.change({"src/shapes/ops.py": dropped}, "drop-import")
    assert set(reasons(sample.select(head))) == {
        "tests/test_ops.py::TestClamp::test_above",
        "tests/test_ops.py::TestClamp::test_below",
    }


def test_a_test_method_renamed_in_a_class_with_a_mixin_is_dropped_unless_a_base_class_defines_it(
    tmp_path: Path,
) -> None:
    mixin = (
        "from typing import Protocol\n\n\nclass CheckMixin(Protocol):\n"
        "    def test_shared(self):\n        assert self.value() == 1\n"
    )
    # A base class from another package, which no file of the repository defines: never assumed gone.
    external = (
        "import sys\nimport types\n\n\nclass OtherMixin:\n"
        "    def test_other(self):\n        assert self.value() == 1\n\n\n"
        'sys.modules["external_checks"] = types.ModuleType("external_checks")\n'
        'sys.modules["external_checks"].OtherMixin = OtherMixin\n'
    )
    tests = (
        "import unittest\n\nfrom external_checks import OtherMixin\nfrom tests import CheckMixin\n\n\n"
        "def value():\n    return 1\n\n\n"
        "class ValueTest(unittest.TestCase, CheckMixin, OtherMixin):\n"
        "    def value(self):\n        return value()\n\n"
        "    def test_value(self):\n        assert self.value() == 1\n"
    )
    # Another class with a method of the same name does not keep the renamed one alive.
    other = (
        "import unittest\n\n\nclass OtherTest(unittest.TestCase):\n    def test_value(self):\n        pass\n"
    )
    repo = GitRepo(tmp_path / "repo")
    base = repo.commit(
        {
            "conftest.py": external,
            "tests/__init__.py": mixin,
            "tests/test_value.py": tests,
            "tests/test_other.py": other,
        }
    )
    cmap = asyncio.run(build_coverage_map(repo.path, base))
    assert "tests/test_value.py::ValueTest::test_other" in cmap.tests
    renamed = tests.replace("def test_value(", "def test_value_again(").replace(
        "return 1\n\n\nclass", "return 2 - 1\n\n\nclass"
    )
    head = repo.commit({"tests/test_value.py": renamed})
    selection = select_tests(repo.path, base, head, TestSettings(), GivenMap(cmap), None)
    got = reasons(selection)
    assert selection.removed == ["tests/test_value.py::ValueTest::test_value"]
    assert "tests/test_value.py::ValueTest::test_shared" in got  # inherited from the mixin: still there
    assert "tests/test_value.py::ValueTest::test_other" in got
    assert got["tests/test_value.py::ValueTest::test_value_again"][0] == "edited by this PR"
