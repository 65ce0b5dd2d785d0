"""`paritybot repro RUN`: a run's record from the run page's server, the run's image, commit and
set-up, the failing test rerun, a shell in that container; nothing left when the user leaves.

The runs are real records in a real store served by the run page's routes; the image is the local
test image (by id: it has no registry digest), the repository a real git repository.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import aiohttp
import docker
import pexpect
import pytest
from aiohttp import web
from cli_run import CLI, cli_env
from docker_support import docker_client, test_image, unavailable
from fakegithub import FakeGitHub
from repro_support import ERROR, GOOD_TOKEN, NODEID, REPO, make_project, record_job
from run_page_support import page_server

from bot.cli.checkout import UsageError
from bot.cli.repro_outcome import gpu_warning, pull_hint
from bot.cli.repro_record import parse_record, record_url
from bot.core.models import EnvFacts
from bot.service.github import GitHubApp
from bot.service.store.sqlite import SQLiteStore
from bot.service.viewers import ViewerGate
from runner.backends.docker_engine import LABEL_RUN_ID

__all__ = ["docker_client", "test_image"]  # fixtures, imported for pytest


@pytest.fixture
def project(tmp_path: Path) -> dict[str, str]:
    return make_project(tmp_path)


@pytest.fixture
async def served(
    tmp_path: Path,
    project: dict[str, str],
    test_image: str,
    docker_client: docker.DockerClient,
    fake_github: FakeGitHub,
):
    # The service's own gate, asking (the fake) GitHub whether the token's user may read REPO.
    fake_github.add_repo(REPO, installation_id=7, private=True)
    fake_github.set_role(REPO, "alice", "read")
    fake_github.web.user_token("alice", GOOD_TOKEN)
    store = SQLiteStore(tmp_path / "store.db")
    image_id = docker_client.images.get(test_image).id
    ids = {
        "failing": record_job(store, project, image_id, sha=project["head"], private=False),
        "fixed": record_job(store, project, image_id, sha=project["base"], private=False),
        "private": record_job(store, project, image_id, sha=project["head"], private=True),
    }
    async with aiohttp.ClientSession() as session:
        app = GitHubApp(session, fake_github.app_id, fake_github.private_key_pem, fake_github.url)
        async with page_server(store, gate=ViewerGate(app, session, None)) as url:
            yield url, ids
    store.close()


async def _cli(home: Path, *args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        *CLI,
        "repro",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        env=cli_env(home) | (env or {}),
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 300)
    return proc.returncode or 0, out.decode()


def _ours(client: docker.DockerClient, run_id: str) -> list[str]:
    prefix = f"repro-{run_id}-"
    things = [
        c.name for c in client.containers.list(all=True) if c.labels.get(LABEL_RUN_ID, "").startswith(prefix)
    ]
    things += [
        v.name
        for v in client.volumes.list()
        if (v.attrs.get("Labels") or {}).get(LABEL_RUN_ID, "").startswith(prefix)
    ]
    return things


@pytest.mark.docker
async def test_the_failing_test_of_a_run_is_reproduced_in_its_image_and_nothing_is_left(
    served, tmp_path, docker_client
):
    url, ids = served
    code, out = await _cli(tmp_path, f"{url}/runs/{ids['failing']}", "--rerun-only")
    assert code == 0, out
    assert f"run {ids['failing']} of {REPO} PR #7" in out
    assert "parity between the run and here:" in out and "3.9.0" in out
    assert ERROR in out and "1 failed" in out
    assert "reproduced: the same failure (assert 3 == 4)" in out
    assert _ours(docker_client, ids["failing"]) == []
    assert not any((tmp_path / "cache").glob("paritybot/repro/workspaces/*"))


@pytest.mark.docker
async def test_a_test_that_passes_here_says_what_differs_from_the_run(served, tmp_path):
    url, ids = served
    code, out = await _cli(tmp_path, f"{url}/runs/{ids['fixed']}.json", "--rerun-only")
    assert code == 1, out
    assert (
        "did not reproduce: it passed here; what differs from the run: Python: the run 3.9.0, here 3.11"
        in out
    )


@pytest.mark.docker
async def test_a_pull_requests_latest_run_is_found_through_the_server(served, tmp_path):
    url, ids = served
    code, out = await _cli(
        tmp_path, f"{REPO}#7", "--rerun-only", env={"PARITYBOT_SERVER": url, "GITHUB_TOKEN": GOOD_TOKEN}
    )
    assert f"run {ids['private']} of {REPO}" in out, out  # the latest of the PR's runs
    assert code == 0 and "reproduced: the same failure" in out


async def test_a_private_repositorys_run_is_refused_without_a_token(served, tmp_path):
    url, ids = served
    code, out = await _cli(tmp_path, f"{url}/runs/{ids['private']}", "--rerun-only")
    assert code == 2
    assert "a private repository's run (HTTP 404)" in out and "--token-file FILE or GITHUB_TOKEN" in out
    wrong = tmp_path / "token"
    wrong.write_text("ghu_someone_else\n")
    code, out = await _cli(
        tmp_path, f"{url}/runs/{ids['private']}", "--rerun-only", "--token-file", str(wrong)
    )
    assert code == 2 and "your GitHub token may not read its repository" in out


def test_a_record_of_a_newer_schema_is_refused_and_a_bad_run_named():
    with pytest.raises(
        UsageError, match=r"schema version is 2, newer than this paritybot reads \(1\); upgrade"
    ):
        parse_record(
            json.dumps({"schema_version": 2, "id": "x"}).encode(), "http://s/runs/x.json", token_sent=True
        )
    with pytest.raises(UsageError, match="not a run: give a run page URL"):
        record_url("hello", None)
    with pytest.raises(UsageError, match="--server URL or PARITYBOT_SERVER"):
        record_url("https://github.com/octo/calc/pull/7", None)
    assert record_url("https://github.com/octo/calc/pull/7/files", "http://s/") == (
        "http://s/repos/octo/calc/pulls/7/latest.json"
    )
    assert record_url("https://ci.example/p/runs/abc?x=1", None) == "https://ci.example/p/runs/abc.json"


@pytest.mark.docker
async def test_the_shell_is_in_the_container_at_the_head_with_the_test_in_its_history(
    served, tmp_path, project, docker_client
):
    url, ids = served
    env = cli_env(tmp_path)
    child = await asyncio.to_thread(
        pexpect.spawn,
        CLI[0],
        [*CLI[1:], "repro", f"{url}/runs/{ids['failing']}"],
        env=env,
        encoding="utf-8",
        timeout=180,
        dimensions=(40, 200),
    )
    child.logfile_read = sys.stdout
    try:
        await asyncio.to_thread(child.expect, r"\(repro " + project["head"][:12] + r"\) ")
        child.send("\x1b[A")  # up-arrow: the test's command, from the history
        child.send("\r")
        await asyncio.to_thread(child.expect, "assert 3 == 4")
        await asyncio.to_thread(child.expect, "1 failed")
        child.sendline("git rev-parse HEAD; id -u; head -1 /etc/os-release")
        await asyncio.to_thread(child.expect, project["head"])
        await asyncio.to_thread(child.expect, "Debian")
        child.sendline("exit")
        await asyncio.to_thread(child.expect, pexpect.EOF)
    finally:
        child.close(force=True)
    assert child.exitstatus == 0
    assert _ours(docker_client, ids["failing"]) == []


async def test_without_a_container_engine_it_refuses_with_the_reason(served, tmp_path):
    url, ids = served
    code, out = await _cli(
        tmp_path,
        f"{url}/runs/{ids['failing']}",
        "--rerun-only",
        env={"DOCKER_HOST": "unix:///nonexistent/docker.sock"},
    )
    assert code == 2, out
    assert "cannot reproduce here:" in out and "--runner host runs on this machine instead" in out


async def test_the_host_runner_reproduces_in_a_clean_worktree_and_says_so_loudly(served, tmp_path):
    url, ids = served
    code, out = await _cli(
        tmp_path,
        f"{url}/runs/{ids['failing']}",
        "--rerun-only",
        "--runner",
        "host",
        "--python",
        sys.executable,
    )
    assert code == 0, out
    assert "the test runs ON THIS MACHINE, as you, without the run's container" in out
    assert "reproduced: the same failure (assert 3 == 4)" in out
    assert not any((tmp_path / "cache").glob("paritybot/repro/workspaces/*"))


@pytest.mark.docker
async def test_interrupted_in_the_shell_it_removes_what_it_started(served, tmp_path, project, docker_client):
    url, ids = served
    child = await asyncio.to_thread(
        pexpect.spawn,
        CLI[0],
        [*CLI[1:], "repro", f"{url}/runs/{ids['failing']}"],
        env=cli_env(tmp_path),
        encoding="utf-8",
        timeout=180,
    )
    try:
        await asyncio.to_thread(child.expect, r"\(repro " + project["head"][:12] + r"\) ")
        assert _ours(docker_client, ids["failing"]) != []  # the session's container and volume
        child.kill(signal.SIGINT)  # the user interrupts paritybot itself, not the shell
        await asyncio.to_thread(child.expect, "removed everything it started")
        await asyncio.to_thread(child.expect, pexpect.EOF)
    finally:
        child.close(force=True)
    assert _ours(docker_client, ids["failing"]) == []


@pytest.mark.docker
def test_what_a_repro_left_is_listed_with_how_to_remove_it(docker_client, tmp_path):
    from bot.cli.repro_session import leftovers
    from runner.workspace import Workspace

    volume = docker_client.volumes.create(labels={LABEL_RUN_ID: "repro-left-1"})
    (tmp_path / "ws").mkdir()
    try:
        left = leftovers(
            "repro-left-1", Workspace(path=tmp_path / "ws", head_sha="a" * 40, base_sha=None), None
        )
    finally:
        volume.remove(force=True)
    assert left == [
        f"workspace {tmp_path / 'ws'} (rm -rf it)",
        f"volume {volume.name} (docker volume rm {volume.name})",
    ]


@pytest.mark.docker
async def test_an_image_the_registry_cannot_give_is_said_with_what_to_do(tmp_path, project, docker_client):
    store = SQLiteStore(tmp_path / "store.db")
    gone = "registry.invalid/octo/ci@sha256:" + "d" * 64
    job = record_job(store, project, gone, sha=project["head"], private=False)
    async with page_server(store) as url:
        code, out = await _cli(tmp_path, f"{url}/runs/{job}", "--rerun-only")
    store.close()
    assert code == 2, out
    assert f"image {gone} is not on the container engine and could not be pulled" in out
    assert "the registry registry.invalid cannot be reached from here" in out


def test_fewer_or_other_gpus_here_than_the_run_had_are_warned_of():
    run = EnvFacts(source="probe", gpu_models=["NVIDIA H100 80GB HBM3"] * 8)
    assert "here the container sees 0 GPU(s)" in (gpu_warning("all", run, EnvFacts(source="probe")) or "")
    assert "here the container sees 1 GPU(s)" in (
        gpu_warning(2, run, EnvFacts(source="probe", gpu_models=["NVIDIA A100"])) or ""
    )
    other = gpu_warning("all", run, EnvFacts(source="probe", gpu_models=["NVIDIA A100"] * 8))
    assert other is not None and "the run's GPUs were NVIDIA H100 80GB HBM3; here NVIDIA A100" in other
    assert gpu_warning("all", run, run) is None
    assert gpu_warning("none", run, None) is None


def test_a_login_the_registry_asks_for_is_said():
    message = (
        "image ghcr.io/octo/ci@sha256:x is not on the container engine and could not be pulled: unauthorized"
    )
    assert pull_hint(message, "ghcr.io/octo/ci@sha256:x").endswith(
        "the registry needs a login: `docker login ghcr.io`, then run this again"
    )


async def _open_gate(request: web.Request, repository: str) -> web.StreamResponse | None:
    return None


@pytest.mark.docker
async def test_a_private_run_a_careless_service_shows_is_still_not_used_without_a_token(
    tmp_path, project, test_image, docker_client
):
    store = SQLiteStore(tmp_path / "store.db")
    job = record_job(store, project, test_image, sha=project["head"], private=True)
    async with page_server(store, gate=_open_gate) as url:
        code, out = await _cli(tmp_path, f"{url}/runs/{job}.json", "--rerun-only")
    store.close()
    assert code == 2, out
    assert f"the run is of a private repository ({REPO}); give your GitHub token" in out


SSHD_IMAGE = os.environ.get("PARITYBOT_TEST_SSHD_IMAGE", "paritybot-test/python-sshd:bookworm")


@pytest.fixture
def sshd_image(docker_client: docker.DockerClient) -> str:
    """The test image with openssh-server and an account for uid 1000 (scripts/build-test-image.sh)."""
    try:
        return str(docker_client.images.get(SSHD_IMAGE).id)
    except docker.errors.ImageNotFound:
        unavailable(f"image {SSHD_IMAGE} is not built; run scripts/build-test-image.sh")
        raise


@pytest.mark.docker
async def test_over_ssh_the_test_fails_the_same_way_and_stopping_removes_everything(
    tmp_path, project, sshd_image, docker_client
):
    key = tmp_path / "id_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    store = SQLiteStore(tmp_path / "store.db")
    job = record_job(store, project, sshd_image, sha=project["head"], private=False)
    async with page_server(store) as url:
        proc = await asyncio.create_subprocess_exec(
            *CLI,
            "repro",
            f"{url}/runs/{job}",
            "--ssh",
            "--key",
            f"{key}.pub",
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            env=cli_env(tmp_path),
        )
        assert proc.stdout is not None and proc.stdin is not None
        seen = ""
        while not (command := re.search(r"^ssh -p (\d+) .*$", seen, re.MULTILINE)):
            line = await asyncio.wait_for(proc.stdout.readline(), 240)
            assert line, seen
            seen += line.decode()
        assert "reproduced: the same failure" in seen
        assert f"-i {key} " in command.group(0)
        ssh = [*shlex.split(command.group(0))[:-1], "-o", "BatchMode=yes", shlex.split(command.group(0))[-1]]
        rerun = await asyncio.to_thread(
            subprocess.run,
            [*ssh, f"git rev-parse HEAD && python -m pytest -p no:cacheprovider {NODEID}"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert rerun.returncode == 1, rerun.stdout + rerun.stderr
        assert (
            project["head"] in rerun.stdout
            and "E       assert 3 == 4" in rerun.stdout
            and "1 failed" in rerun.stdout
        )
        proc.stdin.write(b"\n")  # the user stops it
        rest, _ = await asyncio.wait_for(proc.communicate(), 120)
    store.close()
    assert proc.returncode == 0, seen + rest.decode()
    assert "removed everything it started" in rest.decode()
    assert _ours(docker_client, job) == []


@pytest.fixture(scope="session")
def jupyter_wheels(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """JupyterLab's wheels for the test image's Python, downloaded once for the session (as
    `repro --jupyter` does into the user's cache)."""
    from bot.cli.repro_jupyter import wheelhouse

    return wheelhouse(tmp_path_factory.mktemp("jupyter-wheels"), "3.11")


@pytest.mark.docker
@pytest.mark.browser
async def test_jupyter_opens_a_notebook_whose_first_cell_shows_the_failure_in_the_debugger(
    tmp_path, project, test_image, docker_client, jupyter_wheels
):
    from browser_support import start_chromium
    from selenium.common.exceptions import ElementNotInteractableException, StaleElementReferenceException
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    cached = tmp_path / "cache" / "paritybot" / "repro" / "jupyter-wheels" / "py3.11"
    shutil.copytree(jupyter_wheels, cached)
    store = SQLiteStore(tmp_path / "store.db")
    job = record_job(store, project, test_image, sha=project["head"], private=False)
    browser = start_chromium(tmp_path)
    async with page_server(store) as url:
        proc = await asyncio.create_subprocess_exec(
            *CLI, "repro", f"{url}/runs/{job}", "--jupyter",
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
            env=cli_env(tmp_path),
        )  # fmt: skip
        assert proc.stdout is not None and proc.stdin is not None
        seen = ""
        try:
            while not (
                lab := re.search(r"^http://127\.0\.0\.1:\d+/lab/tree/\S+\?token=\w+$", seen, re.MULTILINE)
            ):
                line = await asyncio.wait_for(proc.stdout.readline(), 400)
                assert line, seen
                seen += line.decode()
            assert "reproduced: the same failure" in seen

            def rerun_in_the_notebook() -> str:
                browser.get(lab.group(0))
                deadline = time.monotonic() + 120
                while time.monotonic() < deadline and not browser.find_elements(
                    By.CSS_SELECTOR, ".jp-Notebook .jp-Cell .cm-content"
                ):
                    time.sleep(1)

                def body() -> str:
                    return str(browser.find_element(By.TAG_NAME, "body").text)

                def run_first_cell() -> None:
                    # JupyterLab draws the cell before it takes input (its layout, the kernel starting).
                    while True:
                        try:
                            browser.find_element(By.CSS_SELECTOR, ".jp-Notebook .jp-Cell .cm-content").click()
                            break
                        except (ElementNotInteractableException, StaleElementReferenceException):
                            if time.monotonic() > deadline:
                                raise
                            time.sleep(1)
                    ActionChains(browser).key_down(Keys.SHIFT).send_keys(Keys.ENTER).key_up(
                        Keys.SHIFT
                    ).perform()

                # A cell run before the kernel is connected is dropped, not queued: wait for it.
                while time.monotonic() < deadline and "| Idle" not in body():
                    time.sleep(1)
                run_first_cell()
                retried = False
                while time.monotonic() < deadline and "entering PDB" not in body():
                    prompt = browser.find_element(
                        By.CSS_SELECTOR, ".jp-Notebook .jp-Cell .jp-InputPrompt"
                    ).text
                    if not retried and prompt.strip() == "[ ]:" and "| Idle" in body():
                        time.sleep(5)  # still not started after the kernel went idle: it was dropped
                        if "entering PDB" not in body():
                            run_first_cell()
                        retried = True
                    time.sleep(1)
                return str(browser.find_element(By.TAG_NAME, "body").text)

            page = await asyncio.to_thread(rerun_in_the_notebook)
        finally:
            browser.quit()
        assert "assert 3 == 4" in page and "entering PDB" in page, page[-2000:]
        proc.stdin.write(b"\n")
        rest, _ = await asyncio.wait_for(proc.communicate(), 120)
    store.close()
    assert proc.returncode == 0, seen + rest.decode()
    assert _ours(docker_client, job) == []


async def test_ssh_and_jupyter_need_the_container_and_say_so_before_anything_runs(served, tmp_path):
    url, ids = served
    for mode in ("--ssh", "--jupyter"):
        code, out = await _cli(tmp_path, f"{url}/runs/{ids['failing']}", mode, "--runner", "host")
        assert code == 2, out
        assert f"paritybot: {mode} needs the run's container; it cannot be used with --runner host" in out
        assert "rerunning" not in out


def test_the_notebook_reruns_the_test_with_the_runs_arguments_and_the_cache_off_once() -> None:
    from bot.cli.repro_jupyter import notebook

    def call(pytest_args: list[str]) -> str:
        cell = json.loads(notebook("tests/test_calc.py::test_add", pytest_args))["cells"][0]
        return str(cell["source"][-1]).strip()

    assert call(["-p", "no:cacheprovider", "-x"]) == (
        'pytest.main(["-p", "no:cacheprovider", "-x", "tests/test_calc.py::test_add", "--pdb"])'
    )
    assert (
        call(["-x"])
        == 'pytest.main(["-p", "no:cacheprovider", "-x", "tests/test_calc.py::test_add", "--pdb"])'
    )
