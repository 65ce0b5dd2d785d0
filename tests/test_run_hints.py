"""The advice a failed run gives: only what its output shows, and what a user of that command can do.

A set-up is blamed on the network only when its output is a network error; `--runner docker` with
no engine says what to start or set; a local run is never told to comment `/retest-gpu`.
"""

from __future__ import annotations

from pathlib import Path

from cli_run import run_cli
from gitrepo import GitRepo

from runner.backends.base import StepResult
from runner.checks.precommit import step_problem
from runner.hints import (
    NO_WHEEL_HINT,
    OFFLINE_SETUP_HINT,
    USER_IN_VENV_HINT,
    collection_fix,
    missing_modules,
    setup_failure_hint,
)

# What pip printed, offline, for `pip install -e .` with build isolation (its build backend).
PIP_OFFLINE = """\
Obtaining file:///src
  Installing build dependencies: started
  Installing build dependencies: finished with status 'error'
  error: subprocess-exited-with-error
  × pip subprocess to install build dependencies did not run successfully.
  │ exit code: 1
  ╰─> [3 lines of output]
      WARNING: Retrying (Retry(total=0, connect=None, read=None, redirect=None, status=None)) after connection broken by 'NewConnectionError('<pip._vendor.urllib3.connection.HTTPSConnection object at 0x7f1c>: Failed to establish a new connection: [Errno -3] Temporary failure in name resolution')': /simple/setuptools/
      ERROR: Could not find a version that satisfies the requirement setuptools>=40.8.0 (from versions: none)
      ERROR: No matching distribution found for setuptools>=40.8.0
      [end of output]
"""
# What a legacy `setup.py` build printed with a setuptools older than 70.1 and no `wheel`.
NO_WHEEL = """\
  Building wheel for calc (setup.py): started
  Building wheel for calc (setup.py): finished with status 'error'
  error: subprocess-exited-with-error
  × python setup.py bdist_wheel did not run successfully.
  │ exit code: 1
  ╰─> [6 lines of output]
      usage: setup.py [global_opts] cmd1 [cmd1_opts] [cmd2 [cmd2_opts] ...]
         or: setup.py --help [cmd1 cmd2 ...]
         or: setup.py --help-commands
         or: setup.py cmd --help

      error: invalid command 'bdist_wheel'
      [end of output]
  ERROR: Failed building wheel for calc
"""
SYNTAX_ERROR = """\
  File "/src/setup.py", line 3
    setup(name="calc",
         ^
SyntaxError: '(' was never closed
"""


def test_only_a_network_error_offline_is_blamed_on_the_network() -> None:
    assert setup_failure_hint(PIP_OFFLINE, network=False) == OFFLINE_SETUP_HINT
    assert setup_failure_hint(PIP_OFFLINE, network=True) is None  # it had the network
    assert setup_failure_hint(NO_WHEEL, network=False) == NO_WHEEL_HINT
    assert setup_failure_hint(SYNTAX_ERROR, network=False) is None  # nothing known: no hint at all


def test_a_user_install_in_a_virtualenv_is_told_to_drop_user(tmp_path: Path) -> None:
    # The host runner's Python is a virtual environment: pip refuses `--user` there.
    repo = GitRepo(tmp_path / "project")
    config = 'environments:\n  - name: default\n    setup: ["python -m pip install --user --no-deps -e ."]\n'
    repo.commit(
        {".github/paritybot.yml": config, "calc.py": "X = 1\n", "tests/test_calc.py": "def test_x(): pass\n"}
    )
    repo.git("checkout", "-q", "-b", "feature")
    repo.commit({"calc.py": "X = 2\n"})

    done = run_cli("check", "--repo", str(repo.path), "--base", "main", "--runner", "host", home=tmp_path)

    assert done.returncode == 2, done.stdout + done.stderr
    assert "Can not perform a '--user' install" in done.stdout
    assert USER_IN_VENV_HINT in done.stdout
    assert "without network" not in done.stdout


def test_runner_docker_without_an_engine_says_what_to_start_and_never_to_comment(tmp_path: Path) -> None:
    repo = GitRepo(tmp_path / "project")
    repo.commit({"calc.py": "X = 1\n"})
    repo.git("checkout", "-q", "-b", "feature")
    repo.commit({"calc.py": "X = 2\n"})
    dead = f"unix://{tmp_path}/no-engine.sock"

    done = run_cli(
        "check", "--repo", str(repo.path), "--base", "main", "--runner", "docker", "--image", "python:3.12",
        env={"DOCKER_HOST": dead}, home=tmp_path,
    )  # fmt: skip

    assert done.returncode == 2, done.stdout + done.stderr
    assert f"runner: none: no container engine reachable at {dead}" in done.stderr
    assert "start the container engine" in done.stderr and "set DOCKER_HOST" in done.stderr
    assert "⛔ Not run" in done.stdout
    assert "running `paritybot check` again tries again" in done.stdout
    assert "/retest-gpu" not in done.stdout  # the App's command: no comment reruns a local run


def test_a_missing_module_is_the_project_or_a_dependency_each_with_its_fix() -> None:
    errors = [
        "E   ModuleNotFoundError: No module named 'calc'",
        "collection failure\nE   ModuleNotFoundError: No module named 'numpy.linalg'",
        "E   ModuleNotFoundError: No module named 'calc.stats'",
    ]
    assert missing_modules(errors) == ["calc", "numpy"]
    fix = collection_fix(errors, {"calc": "src"})
    assert fix.startswith("The project itself does not import where the tests run: `calc` is not installed.")
    assert "`env: {PYTHONPATH: src}`" in fix
    assert "`numpy` is not installed where the tests run: install it in the image" in fix
    assert collection_fix(["E   SyntaxError: invalid syntax"], {}) == ""  # no fix known: none given


def test_a_pre_commit_install_is_blamed_on_the_network_only_for_a_network_error() -> None:
    offline = StepResult(name="pre-commit-install", exit_code=1, output=PIP_OFFLINE)
    broken = StepResult(name="pre-commit-install", exit_code=1, output=SYNTAX_ERROR)

    said = step_problem(offline, "installing hooks", "the image", network=False)
    assert said is not None and "installs them without network" in said.message
    said = step_problem(broken, "installing hooks", "the image", network=False)
    assert said is not None and "without network" not in said.message
