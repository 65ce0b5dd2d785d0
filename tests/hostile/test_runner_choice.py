"""Hostile pull requests against the choice of runner: PR code never reaches the host by accident.

The PR of these tests carries code that leaves a marker file on whatever machine runs it (a
``conftest.py`` that pytest imports, and the PR's own pre-commit hook script). The marker lives in
the test's temporary directory, a path that exists only on this machine: code that ran in a
container cannot write it there, so an absent marker proves the code never ran on the host, and no
test here lets hostile code run on the host to prove anything. Every test drives the real service
(`tests/botharness.py`: web app, queue, workers, against the fake GitHub) or the real CLI, on real
git repositories and the real engine.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import payloads
import pytest
import structlog
from botharness import REPO, SECRET, BotHarness
from cli_run import run_cli
from docker_support import docker_client, test_image
from fakegithub import FakeGitHub
from gitrepo import GitRepo

from bot.core.config import Environment, RepoConfig
from bot.core.models import RunReport, RunRequest, RunState
from bot.render.comment import STICKY_MARKER
from runner.backends.base import Step
from runner.backends.choice import RunnerPolicy, runner_factory
from runner.backends.host import HostRunner
from runner.pipeline import Pipeline, PipelineDeps

__all__ = ["docker_client", "test_image"]  # fixtures, imported for pytest

CONFTEST = """import pathlib

try:
    pathlib.Path({marker!r}).write_text("pull-request code ran here\\n")
except OSError:  # the path exists only on the host: here is somewhere else
    pass
"""
DEFAULT_SETTINGS: dict[str, Any] = {"runner": "docker", "allow_host_runner": None}  # `serve`'s, unset
HOST_SETTINGS: dict[str, Any] = {"runner": "host", "allow_host_runner": "trusted-code-only"}
NO_GPU_CONFIG = "environments:\n  - name: default\n    gpus: none\n"  # no image: the service's default


def hostile_pr(bot: BotHarness, marker: Path) -> str:
    """Push to the PR's branch code that writes ``marker`` wherever it runs; the new head SHA."""
    bot.commit_on_feature("conftest.py", CONFTEST.format(marker=str(marker)), "tests: shared fixtures")
    hook = bot.sample.path / "tools" / "strip_ws.py"
    return bot.commit_on_feature(
        "tools/strip_ws.py", CONFTEST.format(marker=str(marker)) + hook.read_text(), "tools: faster"
    )


async def open_pr(bot: BotHarness, head_sha: str, **author: Any) -> None:
    bot.seed_pull(head_sha, **author)
    event = bot.pr_event("opened", head_sha=head_sha, **_event_author(bot, author))
    assert await bot.send("pull_request", event) == 202


def _event_author(bot: BotHarness, author: dict[str, Any]) -> dict[str, Any]:
    if "author" not in author:
        return {}
    fork = author.get("head_repo")
    return {
        "author": author["author"],
        "author_association": author["author_association"],
        **({"fork_owner": fork.split("/")[0], "head_clone_url": bot.clone_url} if fork else {}),
    }


async def maintainer_comments(bot: BotHarness, body: str) -> None:
    posted = bot.fake.add_comment(REPO, 7, body, user="maintainer", author_association="MEMBER")
    payload = payloads.issue_comment_event(
        "created",
        body=body,
        commenter="maintainer",
        author_association="MEMBER",
        comment_id=posted.id,
        number=7,
        repo_full_name=REPO,
        clone_url=bot.clone_url,
        installation_id=1,
        api_url=bot.fake.url,
    )
    assert await bot.send("issue_comment", payload) == 202


def last_report(bot: BotHarness) -> RunReport:
    job = bot.store.jobs_for_pr(REPO, 7)[-1]
    report = bot.store.report(job.id)
    assert report is not None
    return report


def final_check_runs(bot: BotHarness, head_sha: str) -> dict[str, dict[str, Any]]:
    """Each check run's last state, by name."""
    return {r.name: r.states[-1] for r in bot.fake.check_runs(REPO, head_sha=head_sha)}


def summary(bot: BotHarness) -> str:
    [sticky] = [c for c in bot.bot_comments() if STICKY_MARKER in c.body]
    return sticky.body


# --- the host runner: only trusted code, and only when the operator asked ------------------------------


async def test_an_approved_outside_contribution_never_runs_on_a_host_runner(
    fake_github: FakeGitHub, tmp_path: Path
) -> None:
    """PARITYBOT_RUNNER=host with the allow setting; a stranger's fork PR, approved by a maintainer."""
    bot = await BotHarness.create(fake_github, tmp_path, service_runner=True, settings=HOST_SETTINGS)
    try:
        marker = tmp_path / "ran-on-host"
        head = hostile_pr(bot, marker)
        stranger = {
            "author": "stranger",
            "author_association": "FIRST_TIME_CONTRIBUTOR",
            "head_repo": "stranger/calc",
        }
        await open_pr(bot, head, **stranger)
        await maintainer_comments(bot, "/retest-gpu")  # approves this commit: it may run, not here
        await bot.wait_runs_done()

        [job] = bot.store.jobs_for_pr(REPO, 7)
        assert bot.store.approvals(REPO, 7) == [(head, "maintainer")]
        assert not job.request.author_trusted
        report = last_report(bot)
        assert report.state == RunState.FAILED and report.refused and report.runner == ""
        assert report.error is not None and "the author of this code is not trusted" in report.error
        assert report.probe is None and report.tests is None  # refused before any step
        checks = final_check_runs(bot, head)
        tests = checks["paritybot / tests (default)"]
        assert tests["conclusion"] == "failure"
        assert tests["output"]["title"].startswith("Did not run: this service runs only trusted")
        assert "never on the host" in summary(bot)
        assert not marker.exists()
    finally:
        await bot.stop()


async def test_a_trusted_author_runs_on_the_host_runner_without_the_service_s_variables(
    fake_github: FakeGitHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The positive side of the rule, with the set-up step (the base branch's config, not the
    PR's code) printing its whole environment: none of the service's variables are there."""
    monkeypatch.setenv("PARITYBOT_WEBHOOK_SECRET", SECRET)
    monkeypatch.setenv("GITHUB_TOKEN", "ghp_" + "x" * 36)
    monkeypatch.setenv("DOCKER_HOST", os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock")
    bot = await BotHarness.create(fake_github, tmp_path, service_runner=True, settings=HOST_SETTINGS)
    try:
        config = 'environments:\n  - name: default\n    env: {OWN_VAR: from-config}\n    setup: [\'env | sort | tr "\\\\n" " "; exit 3\']\n'
        bot.fake.set_file(REPO, ".github/paritybot.yml", config)
        await open_pr(bot, bot.sample.head_sha)  # the sample PR, by the repository's owner
        await bot.wait_runs_done()

        [job] = bot.store.jobs_for_pr(REPO, 7)
        assert job.request.author_trusted
        report = last_report(bot)
        assert report.runner == "host", report.error
        assert report.tests is not None
        printed = report.tests.message
        assert "set-up command" in printed and "OWN_VAR=from-config" in printed
        assert "PATH=" in printed and "HOME=" in printed
        for leaked in ("PARITYBOT_", "DOCKER_HOST", "GITHUB_TOKEN", SECRET):
            assert leaked not in printed
    finally:
        await bot.stop()


async def test_the_host_runner_passes_only_an_allow_list_of_variables(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    service = {
        "PARITYBOT_WEBHOOK_SECRET": SECRET,
        "PARITYBOT_PRIVATE_KEY": "-----BEGIN RSA PRIVATE KEY-----",
        "DOCKER_HOST": "unix:///var/run/docker.sock",
        "GITHUB_TOKEN": "ghs_" + "t" * 36,
        "AWS_SECRET_ACCESS_KEY": "aws-secret",
        "SSH_AUTH_SOCK": "/run/ssh-agent.sock",
    }
    for name, value in service.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("LC_ALL", "C.UTF-8")
    runner = HostRunner(env={"OWN_VAR": "from-config"})
    result = await runner.run(Step(name="env", argv=["env"], env={"STEP_VAR": "from-check"}), tmp_path)
    printed = dict(line.split("=", 1) for line in result.output.splitlines() if "=" in line)
    assert result.exit_code == 0
    assert not set(service) & set(printed), printed
    assert printed["OWN_VAR"] == "from-config" and printed["STEP_VAR"] == "from-check"
    assert printed["LC_ALL"] == "C.UTF-8" and printed["HOME"] == os.environ["HOME"]
    assert Path(sys.executable).parent.as_posix() in printed["PATH"]  # the checks' tools


async def test_the_host_runner_hides_the_secrets_it_is_given(tmp_path: Path) -> None:
    (tmp_path / "report.xml").write_text("<failure>token ghs_secret-token-1234</failure>")
    runner = HostRunner(redact=("ghs_secret-token-1234",))
    step = Step(name="leak", argv=["echo", "ghs_secret-token-1234"], collect=["report.xml"])
    result = await runner.run(step, tmp_path)
    assert result.output.strip() == "***"
    assert result.collected["report.xml"] == "<failure>token ***</failure>"


# --- the container runner: no engine, no image → nothing runs, and everyone is told ---------------------


async def test_with_the_engine_stopped_a_run_fails_with_the_reason_and_runs_nothing_on_the_host(
    fake_github: FakeGitHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dead = f"unix://{tmp_path}/stopped-engine.sock"
    monkeypatch.setenv("DOCKER_HOST", dead)
    with structlog.testing.capture_logs() as logs:
        bot = await BotHarness.create(fake_github, tmp_path, service_runner=True, settings=DEFAULT_SETTINGS)
    try:
        [startup] = [e for e in logs if e["event"] == "container engine unreachable"]
        assert startup["log_level"] == "error" and startup["where"] == dead
        assert "DOCKER_GID" in startup["fix"] and "DOCKER_HOST" in startup["fix"]

        bot.fake.set_file(REPO, ".github/paritybot.yml", NO_GPU_CONFIG + "    image: ci:any\n")
        marker = tmp_path / "ran-on-host"
        head = hostile_pr(bot, marker)
        with structlog.testing.capture_logs() as run_logs:
            await open_pr(bot, head)  # by the repository's owner: trust is not what stops it
            await bot.wait_runs_done()

        report = last_report(bot)
        assert report.state == RunState.FAILED and report.refused and report.runner == ""
        assert report.error is not None
        # What GitHub shows (public on a public repository) says what to do; where the engine
        # listens, and its error, are in the operator's log.
        assert report.error.startswith("no container engine reachable (the service's log says where)")
        assert "nothing was run on the host instead: start the container engine" in report.error
        for name, check in final_check_runs(bot, head).items():
            assert "no container engine reachable" in check["output"]["summary"], name
            assert dead not in check["output"]["summary"], name
        assert "no container engine reachable" in summary(bot) and dead not in summary(bot)
        [checked] = [e for e in run_logs if e["event"] == "engine checked"]
        assert checked["where"] == dead and checked["error"]
        assert not marker.exists()
    finally:
        await bot.stop()


async def test_serve_with_default_settings_and_no_config_runs_nothing(
    fake_github: FakeGitHub, tmp_path: Path
) -> None:
    bot = await BotHarness.create(fake_github, tmp_path, service_runner=True, settings=DEFAULT_SETTINGS)
    try:
        marker = tmp_path / "ran-on-host"
        head = hostile_pr(bot, marker)
        await open_pr(bot, head)
        await bot.wait_runs_done()

        report = last_report(bot)
        assert report.state == RunState.FAILED and report.refused and report.runner == ""
        assert report.error is not None and report.error.startswith("no environment image configured")
        checks = final_check_runs(bot, head)
        assert checks["paritybot / tests (default)"]["output"]["title"].startswith(
            "Did not run: no environment image configured"
        )
        body = summary(bot)
        assert "⛔ Not run" in body and "PARITYBOT_DEFAULT_IMAGE" in body and "`image:`" in body
        assert not marker.exists()
    finally:
        await bot.stop()


@pytest.mark.docker
async def test_serve_runs_an_environment_without_image_in_the_default_image(
    fake_github: FakeGitHub, tmp_path: Path, test_image: str
) -> None:
    bot = await BotHarness.create(
        fake_github, tmp_path, service_runner=True, settings=DEFAULT_SETTINGS | {"default_image": test_image}
    )
    try:
        bot.fake.set_file(REPO, ".github/paritybot.yml", NO_GPU_CONFIG)
        marker = tmp_path / "ran-on-host"
        head = hostile_pr(bot, marker)
        await open_pr(bot, head)
        await bot.wait_runs_done()

        report = last_report(bot)
        assert report.state == RunState.SUCCEEDED, report.error
        assert report.runner == "docker" and report.image == test_image
        assert "default image" in report.runner_reason
        assert report.tests is not None and report.tests.results  # the PR's tests ran, in the container
        assert "in image `" in summary(bot) and "on the runner's host" not in summary(bot)
        assert not marker.exists()
    finally:
        await bot.stop()


@pytest.mark.docker
async def test_the_service_s_secrets_printed_by_a_pr_reach_no_comment_and_no_check_run(
    fake_github: FakeGitHub, tmp_path: Path, test_image: str
) -> None:
    """PR code cannot read them in the container; should it learn them anyway, printing them
    must not publish them."""
    bot = await BotHarness.create(
        fake_github, tmp_path, service_runner=True, settings=DEFAULT_SETTINGS | {"default_image": test_image}
    )
    try:
        bot.fake.set_file(REPO, ".github/paritybot.yml", NO_GPU_CONFIG + "checks: {precommit: false}\n")
        key_line = next(
            line for line in bot.fake.private_key_pem.splitlines() if "-----" not in line and len(line) >= 16
        )
        leak = (
            "def test_leak():\n"
            f"    print({SECRET!r})\n"
            f"    print({bot.fake.private_key_pem!r})\n"
            f"    assert False, {key_line!r}\n"
        )
        head = bot.commit_on_feature("tests/test_leak.py", leak, "tests: a leak")
        await open_pr(bot, head)
        await bot.wait_runs_done()

        report = last_report(bot)
        assert report.runner == "docker", report.error
        failed = [r for r in (report.tests.results if report.tests else []) if "test_leak" in r.nodeid]
        assert failed and "***" in failed[0].message  # the failure is reported, its secret hidden
        published = [c.body for c in bot.fake.comments(REPO, 7)] + [
            json.dumps(state) for run in bot.fake.check_runs(REPO, head_sha=head) for state in run.states
        ]
        assert any("test_leak" in text for text in published)
        for text in published:
            assert SECRET not in text and key_line not in text
    finally:
        await bot.stop()


@pytest.mark.docker
async def test_the_run_s_installation_token_printed_by_a_pr_is_hidden(
    tmp_path: Path, test_image: str
) -> None:
    token = "ghs_" + "k" * 36
    repo = GitRepo(tmp_path / "project")
    base = repo.commit({"tests/test_ok.py": "def test_ok():\n    pass\n"})
    leak = f"def test_leak():\n    print({token!r})\n    assert False, {token!r}\n"
    head = repo.commit({"tests/test_leak.py": leak})
    config = RepoConfig.model_validate({"checks": {"precommit": False, "docstrings": False}})
    environment = Environment(name="ci", image=test_image, gpus="none")
    deps = PipelineDeps(
        runner_factory=runner_factory(RunnerPolicy(mode="docker")),
        workspace_root=tmp_path / "ws",
        cache_root=tmp_path / "cache",
        token=token,
    )
    request = RunRequest(repo="octo/p", clone_url=str(repo.path), head_sha=head, base_sha=base)
    report = await Pipeline(request, config, environment, "leak-run", deps).execute()
    assert report.runner == "docker", report.error
    assert report.tests is not None
    [failed] = [r for r in report.tests.results if r.nodeid.endswith("test_leak")]
    assert "***" in failed.message
    assert token not in report.model_dump_json()


# --- `paritybot check`: the base's config, no fallback with --runner docker ----------------------------


def checkout(tmp_path: Path, base_config: str, head_files: dict[str, str]) -> GitRepo:
    """A project on `main` with ``base_config``, and a `feature` branch adding ``head_files``."""
    repo = GitRepo(tmp_path / "project")
    repo.commit(
        {
            ".github/paritybot.yml": base_config,
            "pyproject.toml": '[project]\nname = "p"\nversion = "0"\n',
            "tests/test_ok.py": "def test_ok():\n    pass\n",
        }
    )
    repo.git("checkout", "-q", "-b", "feature")
    repo.commit(head_files)
    return repo


def test_check_with_runner_docker_and_the_engine_stopped_runs_nothing(tmp_path: Path) -> None:
    marker = tmp_path / "ran-on-host"
    config = "environments:\n  - name: ci\n    image: ci:any\n    gpus: none\n"
    repo = checkout(tmp_path, config, {"conftest.py": CONFTEST.format(marker=str(marker))})
    dead = f"unix://{tmp_path}/stopped-engine.sock"
    done = run_cli(
        "check",
        "--repo",
        str(repo.path),
        "--base",
        "main",
        "--runner",
        "docker",
        env={"DOCKER_HOST": dead},
        home=tmp_path,
    )
    assert done.returncode == 2, done.stderr
    assert f"runner: none: no container engine reachable at {dead} (" in done.stderr
    assert "nothing was run on the host instead" in done.stdout
    assert not marker.exists()


@pytest.mark.docker
def test_check_uses_the_base_config_not_the_change_s_own(tmp_path: Path, test_image: str) -> None:
    """The change makes itself root with the network on and more memory; none of it applies."""
    base_config = (
        "environments:\n"
        f"  - name: ci\n    image: {test_image}\n    gpus: none\n"
        "checks: {precommit: false, docstrings: false}\n"
    )
    raised = (
        "environments:\n"
        f"  - name: ci\n    image: {test_image}\n    gpus: none\n    user: '0:0'\n"
        "    network: {tests: true}\n    limits: {memory: 64g, cpus: 64}\n"
        "checks: {precommit: false, docstrings: false}\n"
    )
    escape = (
        "import os\n\n\n"
        "def test_not_root():\n    assert os.getuid() != 0\n\n\n"
        "def test_offline():\n    assert sorted(os.listdir('/sys/class/net')) == ['lo']\n"
    )
    repo = checkout(tmp_path, base_config, {".github/paritybot.yml": raised, "tests/test_escape.py": escape})

    done = run_cli(
        "check", "--repo", str(repo.path), "--base", "main", "--runner", "docker", "--json", home=tmp_path
    )
    assert done.returncode == 0, done.stderr + done.stdout
    assert "the change's own edits to .github/paritybot.yml are not used" in done.stderr
    outcomes = {r["nodeid"]: r["outcome"] for r in json.loads(done.stdout)["tests"]["results"]}
    assert outcomes["tests/test_escape.py::test_not_root"] == "passed"
    assert outcomes["tests/test_escape.py::test_offline"] == "passed"

    # The person running the check may still choose a config, and is told which one applied.
    own = tmp_path / "raised.yml"
    own.write_text(raised)
    chosen = run_cli(
        "check",
        "--repo",
        str(repo.path),
        "--base",
        "main",
        "--runner",
        "docker",
        "--json",
        "--config",
        str(own),
        home=tmp_path,
    )
    assert f"config: {own} (--config)" in chosen.stderr
    outcomes = {r["nodeid"]: r["outcome"] for r in json.loads(chosen.stdout)["tests"]["results"]}
    assert outcomes["tests/test_escape.py::test_not_root"] == "failed"
    assert outcomes["tests/test_escape.py::test_offline"] == "failed"
