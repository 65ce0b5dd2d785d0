"""`paritybot` on a user's own checkout: mistakes in the options, an empty change, and what a run
leaves behind (nothing in the checkout, nothing in the temp dir, one cached clone reused)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_run import run_cli
from gitrepo import GitRepo

from bot.cli.demo import SUITE_SIZE, git, make_demo_repo
from bot.core.kinds import CheckKind
from bot.core.models import RunReport
from bot.render.check_results import render_check_runs

# --- one line naming the mistake, exit 2, for every subcommand -----------------------------------------

MISSING = "{tmp}/no-such-dir"
FILE = "{tmp}/a-file"
PLAIN = "{tmp}/not-a-checkout"
REPO = "{tmp}/repo"

MISTAKES = [
    (["check", "--repo", MISSING], f"--repo {MISSING}: no such directory"),
    (["check", "--repo", FILE], f"--repo {FILE}: not a directory"),
    (["check", "--repo", PLAIN], f"--repo {PLAIN}: not a git checkout"),
    (
        ["check", "--repo", REPO, "--base", "no-such-branch"],
        "--base no-such-branch: no such branch, tag or commit in {tmp}/repo",
    ),
    (["check", "--repo", REPO, "--head", "v9.9"], "--head v9.9: no such branch, tag or commit in {tmp}/repo"),
    (["check", "--repo", REPO, "--config", MISSING], f"--config {MISSING}: No such file or directory"),
    (["check", "--repo", REPO, "--pr-body", FILE + "x"], f"--pr-body {FILE}x: No such file or directory"),
    (["check", "--repo", REPO, "--env", "gpu"], "unknown environment 'gpu'; the config defines: default"),
    (["coverage-map", "--repo", MISSING], f"--repo {MISSING}: no such directory"),
    (
        ["coverage-map", "--repo", REPO, "--rev", "HEAD~5"],
        "--rev HEAD~5: no such branch, tag or commit in {tmp}/repo",
    ),
    (["select-tests", "--repo", PLAIN, "--base", "main"], f"--repo {PLAIN}: not a git checkout"),
    (
        ["select-tests", "--repo", REPO, "--base", "nope"],
        "--base nope: no such branch, tag or commit in {tmp}/repo",
    ),
    (
        ["select-tests", "--repo", REPO, "--base", "main", "--head=-x"],
        "--head -x: no such branch, tag or commit in {tmp}/repo",
    ),
    (["perf", "--repo", MISSING, "--base", "main"], f"--repo {MISSING}: no such directory"),
    (["perf", "--repo", REPO, "--base", "nope"], "--base nope: no such branch, tag or commit in {tmp}/repo"),
    (["coverage-map", "--repo", REPO, "--config", MISSING], f"--config {MISSING}: No such file or directory"),
    (
        ["select-tests", "--repo", REPO, "--base", "main", "--config", MISSING],
        f"--config {MISSING}: No such file or directory",
    ),
    (
        ["perf", "--repo", REPO, "--base", "main", "--config", MISSING],
        f"--config {MISSING}: No such file or directory",
    ),
    (["config", "validate", MISSING], f"{MISSING}: No such file or directory"),
    (["env", "parse", MISSING], f"cannot read {MISSING}: No such file or directory"),
    (["serve", "--env-file", MISSING], f"settings file {MISSING}: not found"),
]


@pytest.fixture(scope="module")
def places(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("mistakes")
    (tmp / "a-file").write_text("not a directory\n")
    (tmp / "not-a-checkout").mkdir()
    GitRepo(tmp / "repo").commit({"README.md": "hello\n"})
    return tmp


@pytest.mark.parametrize(
    ("args", "line"), MISTAKES, ids=[" ".join(a.replace("{tmp}/", "") for a in args) for args, _ in MISTAKES]
)
def test_a_mistake_in_an_option_is_one_line_naming_it(args: list[str], line: str, places: Path) -> None:
    done = run_cli(*(a.format(tmp=places) for a in args), home=places)
    expected = f"paritybot: {line.format(tmp=places)}\n"
    assert done.returncode == 2, done.stderr
    assert done.stderr.endswith(expected), done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""


# --- an empty change ----------------------------------------------------------------------------------


def test_checking_the_base_itself_is_nothing_to_check_never_a_pass(tmp_path: Path) -> None:
    demo = make_demo_repo(tmp_path)
    git(demo.path, "checkout", "-q", "main")

    done = run_cli("check", "--repo", str(demo.path), "--runner", "host", home=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "### ➖ Nothing to check" in done.stdout
    assert f"its head `{demo.base_sha[:12]}` is already part of the base" in done.stdout
    assert "passed" not in done.stdout and "✅" not in done.stdout
    assert "nothing to check: HEAD has no change from main" in done.stderr
    assert "runner:" not in done.stderr  # nothing ran, so nothing was started to run it


def test_a_change_undone_by_a_later_commit_is_nothing_to_check(tmp_path: Path) -> None:
    demo = make_demo_repo(tmp_path)
    git(demo.path, "revert", "--no-edit", "HEAD")

    done = run_cli(
        "check", "--repo", str(demo.path), "--base", "main", "--runner", "host", "--json", home=tmp_path
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["nothing_to_check"].startswith("the change is empty: its head")
    assert f"has the same files as `{demo.base_sha[:12]}`" in report["nothing_to_check"]
    assert report["tests"] is None and report["precommit"] is None


# --- what a run leaves behind ----------------------------------------------------------------------


def _files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")} if root.exists() else set()


def test_local_runs_share_one_cached_clone_and_leave_no_trace(tmp_path: Path) -> None:
    demo = make_demo_repo(tmp_path)
    clean = git(demo.path, "status", "--porcelain", "--ignored")
    args = ("check", "--repo", str(demo.path), "--base", "main", "--head", "feature", "--runner", "host")

    first = run_cli(*args, home=tmp_path)
    assert first.returncode == 1, first.stderr  # the demo's change fails its checks
    [checkout] = (tmp_path / "cache" / "paritybot" / "checkouts").iterdir()
    assert checkout.name.startswith(f"{demo.path.name}-")
    [clone] = (checkout / "repos").iterdir()
    objects = _files(clone / "objects")

    second = run_cli(*args, home=tmp_path)
    assert second.returncode == 1, second.stderr
    assert second.stdout.split("took")[0] == first.stdout.split("took")[0]
    # The second run found every object in the cached clone: nothing was fetched again.
    assert _files(clone / "objects") == objects
    assert list((checkout / "runs").iterdir()) == []  # each run's working tree is removed
    assert list((tmp_path / "tmp").iterdir()) == []  # nor is anything left in the temp dir

    mapped = run_cli(
        "coverage-map", "--repo", str(demo.path), "--rev", "main", "--runner", "host", home=tmp_path
    )
    assert mapped.returncode == 0, mapped.stderr
    assert f"recorded in {checkout / 'coverage'}" in mapped.stdout
    assert list((checkout / "coverage").iterdir())
    # The user's checkout is as it was: no .paritybot/, not even an ignored one.
    assert git(demo.path, "status", "--porcelain", "--ignored") == clean


# --- counts: in pytest's test items, the same in the summary, the check runs and the command line ------


def test_counts_are_test_items_and_agree_everywhere_on_a_failing_run(tmp_path: Path) -> None:
    demo = make_demo_repo(tmp_path)
    args = ("check", "--repo", str(demo.path), "--base", "main", "--runner", "host")

    shown = run_cli(*args, home=tmp_path)
    as_json = run_cli(*args, "--json", home=tmp_path)

    assert shown.returncode == as_json.returncode == 1, shown.stderr
    report = RunReport.model_validate_json(as_json.stdout)
    assert report.tests is not None
    # Four ids were selected (two classes, a parametrized function, a module-level test): ten tests.
    assert len(report.tests.selection.tests) == 4
    assert report.tests.selected == len(report.tests.results) == 10
    assert report.tests.deselected == SUITE_SIZE - 10
    counts = "9 passed · 1 failed · 0 skipped · 8 deselected"
    assert f"<sub>Tests: {counts}</sub>" in shown.stdout
    assert "🎯 Tests: 10 selected, 8 deselected" in shown.stdout
    assert "/retest-gpu" not in shown.stdout  # a local run is rerun by running it, not by a comment
    [tests_run] = [o for o in render_check_runs(report) if o.kind == CheckKind.TESTS]
    assert tests_run.title == counts.capitalize()
    assert "Tests: 10 selected, 8 deselected" in tests_run.summary


def test_tests_that_use_tmp_path_leave_nothing_in_the_temp_dir(tmp_path: Path) -> None:
    # pytest's own temp directories (pytest-of-USER/) go with the run's working tree.
    repo = GitRepo(tmp_path / "project")
    # It reads the project's code too: a map where no test runs a line of the project is not kept.
    uses_tmp = (
        "from pkg.mod import X\n\n\n"
        "def test_writes(tmp_path):\n    (tmp_path / 'f').write_text(str(X))\n    assert (tmp_path / 'f').exists()\n"
    )
    bench = "def test_write(benchmark, tmp_path):\n    benchmark((tmp_path / 'f').write_text, 'x')\n"
    repo.commit(
        {
            "pkg/__init__.py": "",
            "pkg/mod.py": "X = 1\n",
            "tests/test_mod.py": uses_tmp,
            "bench/test_bench.py": bench,
        }
    )
    repo.git("checkout", "-q", "-b", "feature")
    repo.commit({"pkg/mod.py": "X = 2\n"})

    checked = run_cli("check", "--repo", str(repo.path), "--base", "main", "--runner", "host", home=tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "· 0 failed ·" in checked.stdout
    mapped = run_cli(
        "coverage-map", "--repo", str(repo.path), "--rev", "main", "--runner", "host", home=tmp_path
    )
    assert mapped.returncode == 0, mapped.stderr
    config = tmp_path / "paritybot.yml"
    config.write_text("performance:\n  pytest: [bench/]\n  processes: 2\n  max_time_s: 0.1\n")
    compared = run_cli(
        "perf", "--repo", str(repo.path), "--base", "main", "--runner", "host", "--config", str(config),
        home=tmp_path,
    )  # fmt: skip
    assert compared.returncode in (0, 1), compared.stderr
    assert "bench/test_bench.py::test_write" in compared.stdout

    assert list((tmp_path / "tmp").iterdir()) == []
