"""`--config FILE` on every command that reads the repository config, found by the same rules as
`check` (the merge base's `.github/paritybot.yml` otherwise), and `--json` on every command a user
might script."""

from __future__ import annotations

import json
from pathlib import Path

from cli_run import run_cli
from gitrepo import GitRepo

CONFIG = """\
tests:
  always_run: [tests/test_smoke.py]
  pytest_args: ["-k", "not test_slow"]
performance:
  pytest: [bench/]
  processes: 2
  max_time_s: 0.1
  threshold: 0.5
"""


def _project(tmp_path: Path) -> tuple[GitRepo, Path]:
    """A project with no committed config, and a config file of the user's beside it."""
    repo = GitRepo(tmp_path / "project")
    repo.commit(
        {
            "pyproject.toml": '[tool.pytest.ini_options]\npythonpath = ["."]\n',
            "pkg/__init__.py": "",
            "pkg/a.py": "def work():\n    return 1\n",
            "tests/test_a.py": "from pkg import a\n\n\ndef test_a():\n    assert a.work()\n\n\ndef test_slow():\n    pass\n",
            "tests/test_smoke.py": "def test_smoke():\n    pass\n",
            "bench/test_bench.py": "from pkg import a\n\n\ndef test_work(benchmark):\n    benchmark(a.work)\n",
        }
    )
    repo.git("checkout", "-q", "-b", "feature")
    repo.commit({"pkg/a.py": "def work():\n    return 2\n"})
    config = tmp_path / "paritybot.yml"
    config.write_text(CONFIG)
    return repo, config


def test_select_tests_takes_a_config_file_and_says_which_applied(tmp_path: Path) -> None:
    repo, config = _project(tmp_path)
    args = ("select-tests", "--repo", str(repo.path), "--base", "main", "--json")

    own = run_cli(*args, "--config", str(config), home=tmp_path)
    committed = run_cli(*args, home=tmp_path)

    assert own.returncode == committed.returncode == 0, own.stderr + committed.stderr
    assert own.stderr.splitlines()[0] == f"config: {config} (--config)"
    assert committed.stderr.splitlines()[0].startswith("config: defaults (")
    chosen = {t["nodeid"] for t in json.loads(own.stdout)["tests"]}
    assert "tests/test_smoke.py" in chosen  # the file's always_run
    assert "tests/test_smoke.py" not in {t["nodeid"] for t in json.loads(committed.stdout)["tests"]}


def test_coverage_map_takes_a_config_file_and_prints_json(tmp_path: Path) -> None:
    repo, config = _project(tmp_path)
    args = ("coverage-map", "--repo", str(repo.path), "--rev", "main", "--runner", "host", "--json")

    own = run_cli(*args, "--config", str(config), home=tmp_path)
    committed = run_cli(*args, home=tmp_path)

    assert own.returncode == committed.returncode == 0, own.stderr + committed.stderr
    assert f"config: {config} (--config)" in own.stderr
    mine, theirs = json.loads(own.stdout), json.loads(committed.stdout)
    assert mine["recorded"] and mine["commit"] == repo.git("rev-parse", "main")
    assert Path(mine["directory"]).is_dir()
    # The file's pytest options left test_slow out of the map.
    assert mine["health"]["tests_ran"] == theirs["health"]["tests_ran"] - 1


def test_a_coverage_map_that_fails_is_json_too(tmp_path: Path) -> None:
    repo = GitRepo(tmp_path / "project")
    repo.commit({"tests/test_a.py": "import not_installed_anywhere\n\n\ndef test_a():\n    pass\n"})

    done = run_cli("coverage-map", "--repo", str(repo.path), "--runner", "host", "--json", home=tmp_path)

    assert done.returncode == 1
    doc = json.loads(done.stdout)
    assert doc["recorded"] is False and doc["error"] and doc["directory"] is None
    assert doc["holes"] == ["tests/test_a.py"]


def test_perf_takes_a_config_file_and_prints_json(tmp_path: Path) -> None:
    repo, config = _project(tmp_path)

    done = run_cli(
        "perf", "--repo", str(repo.path), "--base", "main", "--runner", "host", "--config", str(config),
        "--json", "--affected", home=tmp_path, timeout=300,
    )  # fmt: skip

    assert done.returncode in (0, 1), done.stderr
    assert f"config: {config} (--config)" in done.stderr
    doc = json.loads(done.stdout)
    assert doc["threshold"] == 0.5  # the file's, not the default 0.03
    assert doc["head"] == repo.git("rev-parse", "feature")
    [row] = doc["comparisons"]
    assert row["name"] == "bench/test_bench.py::test_work" and row["verdict"]
    assert any("pkg.a" in why or "pkg/a.py" in why for why in row["why"]), row["why"]
