"""A pull request's selection as a user meets it: `paritybot coverage-map`, then `select-tests` and
`check`, on a real git repository whose suite really runs under the coverage step.

Each numbered behaviour here answers one way a targeted run could lie: a red for a test that no
longer exists, a map that knows nothing passing for one that knows everything, another PR's change
described as this one's, a comment that runs thirty tests, a constructor that runs half the suite.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest
from cli_run import record_coverage_map, run_cli
from gitrepo import GitRepo

from runner.selection.coverage_map import CoverageMapStore

CONFIG = "checks:\n  precommit: false\n  docstrings: false\n"
PYPROJECT = (
    '[project]\nname = "mini"\nversion = "0.1"\n\n'
    '[tool.pytest.ini_options]\ntestpaths = ["tests"]\npythonpath = ["src"]\n'
)

CMD = """\
class Command:
    def __init__(self, name, help=""):
        self.name = name
        self.help = help.strip()

    def run(self):
        return self.name.upper()


class Group(Command):
    def __init__(self, name, commands=()):
        super().__init__(name)
        if commands:
            self.commands = {c.name: c for c in commands}
        else:
            self.commands = {}

    def run_all(self):
        return [c.run() for c in self.commands.values()]
"""

OPS = '''\
import functools


@functools.lru_cache(maxsize=8)
def double(x):
    """Twice ``x``."""
    return x * 2


def halve(x):
    # Integer halves.
    return x // 2
'''

MINI: dict[str, str | bytes | None] = {
    "pyproject.toml": PYPROJECT,
    ".github/paritybot.yml": CONFIG,
    ".github/workflows/run_tests.yml": "on: push\n",
    "src/mini/__init__.py": "from .cmd import Command, Group\nfrom .ops import double, halve\n",
    "src/mini/cmd.py": CMD,
    "src/mini/ops.py": OPS,
    # Builds its command tree at module level, as click and argparse users do.
    "tests/test_cli.py": (
        "from mini import Command, Group\n\n"
        'CLI = Group("cli", [Command("a"), Command("b")])\n\n\n'
        "def test_names():\n"
        '    assert sorted(CLI.commands) == ["a", "b"]\n\n\n'
        "def test_run_all():\n"
        '    assert CLI.run_all() == ["A", "B"]\n'
    ),
    "tests/test_group.py": (
        'from mini import Group\n\n\ndef test_empty_group():\n    assert Group("g").commands == {}\n'
    ),
    "tests/test_command.py": (
        "from mini import Command\n\n\n"
        "def test_run():\n"
        '    assert Command("x").run() == "X"\n\n\n'
        "def test_help():\n"
        '    assert Command("x", " hi ").help == "hi"\n'
    ),
    "tests/test_ops.py": (
        "from mini import double, halve\n\n\n"
        "def test_double():\n    assert double(3) == 6\n\n\n"
        "def test_halve():\n    assert halve(7) == 3\n\n\n"
        "def test_halve_even():\n    assert halve(8) == 4\n"
    ),
}


@dataclass
class Mini:
    repo: GitRepo
    base: str
    maps: Path

    @property
    def env(self) -> dict[str, str]:
        return {"PARITYBOT_COVERAGE_DIR": str(self.maps)}

    def branch(self, name: str, files: dict[str, str | bytes | None], start: str | None = None) -> str:
        self.repo.git("checkout", "-q", "-B", name, start or self.base)
        return self.repo.commit(files, name)

    def select(self, head: str, base: str | None = None) -> dict[str, object]:
        done = run_cli(
            "select-tests", "--repo", str(self.repo.path), "--base", base or self.base, "--head", head, "--json",
            env=self.env,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)  # type: ignore[no-any-return]

    def select_text(self, head: str, base: str | None = None) -> str:
        done = run_cli(
            "select-tests", "--repo", str(self.repo.path), "--base", base or self.base, "--head", head,
            env=self.env,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        return done.stdout

    def check(self, head: str, base: str | None = None, *, as_json: bool = False) -> tuple[int, str]:
        args = ["check", "--repo", str(self.repo.path), "--base", base or self.base, "--head", head]
        done = run_cli(*args, "--runner", "host", *(["--json"] if as_json else []), env=self.env, timeout=300)
        assert "Traceback" not in done.stderr, done.stderr
        return done.returncode, done.stdout


def reasons(doc: dict[str, object]) -> dict[str, list[str]]:
    return {t["nodeid"]: t["reasons"] for t in doc["tests"]}  # type: ignore[attr-defined]


@pytest.fixture(scope="module")
def mini(tmp_path_factory: pytest.TempPathFactory) -> Mini:
    root = tmp_path_factory.mktemp("mini")
    repo = GitRepo(root / "repo")
    base = repo.commit(MINI, "base")
    maps = root / "maps"
    assert "8 of 8 collected tests ran" in record_coverage_map(repo.path, base, maps)
    return Mini(repo=repo, base=base, maps=maps)


# --- 1. Tests the PR renamed or removed --------------------------------------------------------------


def test_a_test_the_pr_renamed_is_dropped_with_a_note_and_its_new_name_runs(mini: Mini) -> None:
    tests = str(MINI["tests/test_ops.py"])
    head = mini.branch(
        "rename-test",
        {
            "src/mini/ops.py": OPS.replace("return x // 2", "return int(x / 2)"),
            "tests/test_ops.py": tests.replace("def test_halve():", "def test_halve_odd():"),
        },
    )
    doc = mini.select(head)
    assert doc["removed"] == ["tests/test_ops.py::test_halve"]
    got = reasons(doc)
    assert "tests/test_ops.py::test_halve" not in got
    assert got["tests/test_ops.py::test_halve_odd"][0] == "edited by this PR"
    assert "tests/test_ops.py::test_halve_even" in got  # the map's own pick, still there

    code, report = mini.check(head, as_json=True)
    assert code == 0, report
    run = json.loads(report)
    outcomes = {r["nodeid"]: r["outcome"] for r in run["tests"]["results"]}
    assert outcomes == {
        "tests/test_ops.py::test_halve_odd": "passed",
        "tests/test_ops.py::test_halve_even": "passed",
    }
    code, comment = mini.check(head)
    assert "Not run, renamed or removed by this PR (1): `tests/test_ops.py::test_halve`" in comment
    assert "not found" not in comment


def test_a_test_file_the_pr_moved_runs_under_its_new_name(mini: Mini) -> None:
    mini.repo.git("checkout", "-q", "-B", "move-tests", mini.base)
    mini.repo.move("tests/test_command.py", "tests/test_commands.py")
    head = mini.repo.commit(
        {"src/mini/cmd.py": CMD.replace("return self.name.upper()", "return self.name.upper() + ''")}
    )
    doc = mini.select(head)
    got = reasons(doc)
    assert got["tests/test_commands.py::test_run"][0] == "moved by this PR from tests/test_command.py"
    assert doc["removed"] == ["tests/test_command.py::test_run"]


# --- 2. A map records its own health -----------------------------------------------------------------


def test_a_map_of_a_suite_that_cannot_collect_is_refused_on_the_command_line(tmp_path: Path) -> None:
    repo = GitRepo(tmp_path / "repo")
    sha = repo.commit(
        {
            ".github/paritybot.yml": CONFIG,
            "tests/test_yaml.py": "import no_such_optional_dependency\n\n\ndef test_load():\n    pass\n",
        }
    )
    done = run_cli(
        "coverage-map", "--repo", str(repo.path), "--runner", "host",
        env={"PARITYBOT_COVERAGE_DIR": str(tmp_path / "maps")},
    )  # fmt: skip
    assert done.returncode == 1
    assert "no test ran" in done.stderr
    assert (
        "tests/test_yaml.py (ModuleNotFoundError: No module named 'no_such_optional_dependency')"
        in done.stderr
    )
    assert "recorded" not in done.stdout
    assert CoverageMapStore(tmp_path / "maps").load(sha) is None


def test_a_partial_map_says_so_and_the_static_signals_cover_its_holes(mini: Mini, tmp_path: Path) -> None:
    broken = "import no_such_optional_dependency\nfrom mini import halve\n\n\ndef test_halve_yaml():\n    assert halve(2) == 1\n"
    start = mini.branch("partial-base", {"tests/test_yaml.py": broken})
    maps = tmp_path / "maps"
    done = run_cli(
        "coverage-map", "--repo", str(mini.repo.path), "--rev", start, "--runner", "host",
        env={"PARITYBOT_COVERAGE_DIR": str(maps)},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "8 of 8 collected tests ran; 1 module did not collect: tests/test_yaml.py" in done.stdout
    assert "the map is partial: it knows nothing of tests/test_yaml.py" in done.stderr

    head = mini.branch(
        "partial-pr", {"src/mini/ops.py": OPS.replace("return x // 2", "return int(x / 2)")}, start
    )
    selected = run_cli(
        "select-tests", "--repo", str(mini.repo.path), "--base", start, "--head", head, "--json",
        env={"PARITYBOT_COVERAGE_DIR": str(maps)},
    )  # fmt: skip
    doc = json.loads(selected.stdout)
    assert any("is partial" in n and "tests/test_yaml.py" in n for n in doc["notes"])
    got = reasons(doc)
    assert got["tests/test_yaml.py::test_halve_yaml"] == [
        "imports `mini.ops.halve` which this PR changes (its test module did not collect when the coverage map was recorded)"
    ]
    assert got["tests/test_ops.py::test_halve"] == ["covers src/mini/ops.py:12 changed in this PR"]


# --- 3. One selection, from (map commit, merge base, head) ------------------------------------------


def test_an_older_map_widens_the_selection_but_only_the_pr_s_change_is_called_its_own(mini: Mini) -> None:
    # Another PR landed after the map was recorded: a CI file and halve().
    later = mini.branch(
        "trunk-later",
        {
            ".github/workflows/run_tests.yml": "on: [push, pull_request]\n",
            "src/mini/ops.py": OPS.replace("return x // 2", "return x >> 1"),
        },
    )
    head = mini.branch(
        "pr-on-later",
        {"src/mini/cmd.py": CMD.replace("return self.name.upper()", "return self.name.upper() + ''")},
        later,
    )
    doc = mini.select(head, base="trunk-later")
    assert doc["coverage_map"] == mini.base and doc["map_use"] == "older"
    assert doc["whole_suite"] is False
    got = reasons(doc)
    assert got["tests/test_command.py::test_run"] == ["covers src/mini/cmd.py:7 changed in this PR"]
    assert got["tests/test_ops.py::test_halve"] == [
        f"`src/mini/ops.py` changed on the base branch since the coverage map ({mini.base[:12]}) was recorded"
    ]
    pr_own = [r for rs in got.values() for r in rs if "this PR" in r]
    assert all("cmd.py" in r for r in pr_own), pr_own
    assert not any("run_tests.yml" in r for rs in got.values() for r in rs)

    # `check` runs exactly what `select-tests` printed.
    code, report = mini.check(head, base="trunk-later", as_json=True)
    assert code == 0, report
    selection = json.loads(report)["tests"]["selection"]
    assert reasons(selection) == got
    assert selection["notes"] == doc["notes"]


def test_a_map_older_than_a_conftest_change_is_not_used_and_the_notes_say_why(mini: Mini) -> None:
    later = mini.branch("trunk-conftest", {"tests/conftest.py": "import pytest\n\nLIMIT = 3\n"})
    head = mini.branch("pr-on-conftest", {"src/mini/ops.py": OPS.replace("x * 2", "x + x")}, later)
    doc = mini.select(head, base="trunk-conftest")
    assert doc["map_use"] == "not_used"
    assert doc["notes"] == [
        f"The coverage map of {mini.base[:12]} is not used: on the base branch since it was recorded, "
        "`tests/conftest.py` changed (matches `**/conftest.py` in tests.whole_suite_globs)."
    ]
    assert set(reasons(doc)) == {
        "tests/test_ops.py::test_double",
        "tests/test_ops.py::test_halve",
        "tests/test_ops.py::test_halve_even",
    }


def test_a_version_bump_on_the_base_branch_leaves_an_older_map_in_use(mini: Mini) -> None:
    later = mini.branch("trunk-version", {"pyproject.toml": PYPROJECT.replace('"0.1"', '"0.2"')})
    head = mini.branch(
        "pr-on-version", {"src/mini/ops.py": OPS.replace("return x // 2", "return int(x / 2)")}, later
    )
    doc = mini.select(head, base="trunk-version")
    assert doc["map_use"] == "older"
    assert set(reasons(doc)) == {"tests/test_ops.py::test_halve", "tests/test_ops.py::test_halve_even"}


def test_another_tools_section_of_pyproject_neither_runs_the_suite_nor_retires_the_map(mini: Mini) -> None:
    ruff = PYPROJECT + "\n[tool.ruff]\nline-length = 100\n\n[tool.typos.default]\nextend-words = {}\n"
    head = mini.branch("pr-ruff", {"pyproject.toml": ruff})
    doc = mini.select(head)
    assert doc["whole_suite"] is False and doc["tests"] == []
    assert "only settings no test reads changed" in doc["no_tests_for"]["pyproject.toml"]  # type: ignore[index]
    # On the base branch, before a PR: the map of the commit before it stays in use.
    later = mini.branch("trunk-ruff", {"pyproject.toml": ruff})
    head = mini.branch(
        "pr-after-ruff", {"src/mini/ops.py": OPS.replace("return x // 2", "return int(x / 2)")}, later
    )
    doc = mini.select(head, base="trunk-ruff")
    assert doc["map_use"] == "older"
    assert set(reasons(doc)) == {"tests/test_ops.py::test_halve", "tests/test_ops.py::test_halve_even"}


def test_dependencies_or_pytest_options_in_pyproject_run_the_whole_suite_and_say_which(mini: Mini) -> None:
    deps = PYPROJECT.replace('version = "0.1"\n', 'version = "0.1"\ndependencies = ["numpy>=2"]\n')
    doc = mini.select(mini.branch("pr-deps", {"pyproject.toml": deps}))
    assert doc["whole_suite"] is True
    assert doc["whole_suite_reasons"] == [
        "`pyproject.toml` changed ([project] dependencies), which decides how every test runs"
    ]
    opts = PYPROJECT + 'addopts = "-x"\n'
    doc = mini.select(mini.branch("pr-addopts", {"pyproject.toml": opts}))
    assert doc["whole_suite_reasons"] == [
        "`pyproject.toml` changed ([tool.pytest]), which decides how every test runs"
    ]


def test_a_doctest_where_pytest_collects_none_selects_nothing_with_or_without_a_map(
    mini: Mini, tmp_path: Path
) -> None:
    with_doctest = OPS.replace(
        "def halve(x):\n", 'def halve(x):\n    """Half.\n\n    >>> halve(8)\n    4\n    """\n'
    )
    base = mini.branch("trunk-doctest", {"src/mini/ops.py": with_doctest})
    head = mini.branch("pr-doctest", {"src/mini/ops.py": with_doctest.replace("4\n", "5\n")}, base)
    for maps in (mini.maps, tmp_path):
        done = run_cli(
            "select-tests", "--repo", str(mini.repo.path), "--base", base, "--head", head, "--json",
            env={"PARITYBOT_COVERAGE_DIR": str(maps)},
        )  # fmt: skip
        doc = json.loads(done.stdout)
        assert doc["tests"] == [] and doc["whole_suite"] is False
        assert "(no `--doctest-modules` in its options)" in doc["no_tests_for"]["src/mini/ops.py"]


# --- 5. Changes that cannot change behaviour --------------------------------------------------------


def test_comments_docstrings_and_formatting_select_nothing_and_say_why(mini: Mini) -> None:
    head = mini.branch(
        "cosmetic",
        {
            "src/mini/ops.py": OPS.replace("# Integer halves.", '"""Halves, rounded down."""').replace(
                "return x * 2", "return (x  *  2)"
            ),
            "src/mini/cmd.py": CMD.replace(
                "class Command:\n", 'class Command:\n    """A named command."""\n\n'
            ),
        },
    )
    doc = mini.select(head)
    assert doc["tests"] == [] and doc["whole_suite"] is False
    assert doc["unchanged_behaviour"] == ["src/mini/cmd.py", "src/mini/ops.py"]
    text = mini.select_text(head)
    assert (
        "no test can be affected by this change (src/mini/cmd.py, src/mini/ops.py: only comments, docstrings or formatting changed)"
        in text
    )
    code, comment = mini.check(head)
    assert code == 0
    assert (
        "No test can be affected by this change (src/mini/cmd.py, src/mini/ops.py: only comments" in comment
    )


def test_a_docstring_a_decorator_turns_into_help_text_still_counts(mini: Mini, tmp_path: Path) -> None:
    # ``@functools.lru_cache`` keeps the docstring: a program may read it (click does, as help text).
    head = mini.branch("decorated-doc", {"src/mini/ops.py": OPS.replace("Twice ``x``.", "Two times ``x``.")})
    doc = mini.select(head)
    assert doc["unchanged_behaviour"] == []
    # The map has no line for a docstring: with it as without it, the users' tests are selected.
    done = run_cli(
        "select-tests", "--repo", str(mini.repo.path), "--base", mini.base, "--head", head, "--json",
        env={"PARITYBOT_COVERAGE_DIR": str(tmp_path / "none")},
    )  # fmt: skip
    without = json.loads(done.stdout)
    assert set(reasons(doc)) == set(reasons(without)) == {"tests/test_ops.py::test_double"}


# --- 9. Precision: what a test module's import runs belongs to that module --------------------------


def test_a_constructor_line_run_while_one_test_module_imports_selects_that_module_only(mini: Mini) -> None:
    # Only tests/test_cli.py builds a group with commands, at module level.
    head = mini.branch(
        "group-ctor",
        {
            "src/mini/cmd.py": CMD.replace(
                "{c.name: c for c in commands}", "dict((c.name, c) for c in commands)"
            )
        },
    )
    got = reasons(mini.select(head))
    assert set(got) == {"tests/test_cli.py::test_names", "tests/test_cli.py::test_run_all"}
    assert got["tests/test_cli.py::test_names"] == [
        "tests/test_cli.py runs src/mini/cmd.py:14 while it is imported, and this PR changes that line"
    ]


def test_without_a_map_a_changed_decorator_line_is_found(mini: Mini, tmp_path: Path) -> None:
    head = mini.branch("decorator", {"src/mini/ops.py": OPS.replace("maxsize=8", "maxsize=0")})
    done = run_cli(
        "select-tests", "--repo", str(mini.repo.path), "--base", mini.base, "--head", head, "--json",
        env={"PARITYBOT_COVERAGE_DIR": str(tmp_path / "none")},
    )  # fmt: skip
    got = reasons(json.loads(done.stdout))
    assert got["tests/test_ops.py::test_double"][0] == "imports `mini.ops.double` which this PR changes"


def test_a_changed_doctest_selects_that_doctest_and_nothing_else(tmp_path: Path) -> None:
    ops = OPS.replace('"""Twice ``x``."""', '"""Twice ``x``.\n\n    >>> double(2)\n    4\n    """')
    repo = GitRepo(tmp_path / "repo")
    files = {
        **MINI,
        "src/mini/ops.py": ops,
        "pyproject.toml": '[tool.pytest.ini_options]\naddopts = "--doctest-modules"\npythonpath = ["src"]\n',
        ".github/paritybot.yml": CONFIG + "tests:\n  paths: [tests, src]\n",
    }
    base = repo.commit(files, "base")
    env = {"PARITYBOT_COVERAGE_DIR": str(tmp_path / "maps")}
    done = run_cli("coverage-map", "--repo", str(repo.path), "--runner", "host", env=env)
    assert done.returncode == 0, done.stderr
    repo.git("checkout", "-q", "-b", "doctest")
    head = repo.commit({"src/mini/ops.py": ops.replace(">>> double(2)\n    4", ">>> double(3)\n    6")})
    selected = run_cli(
        "select-tests", "--repo", str(repo.path), "--base", base, "--head", head, "--json", env=env
    )
    assert reasons(json.loads(selected.stdout)) == {
        "src/mini/ops.py::mini.ops.double": ["a doctest of `mini.ops.double`, which this PR changes"]
    }
