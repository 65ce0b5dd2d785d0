"""Hostile pull requests against the network and the pre-commit check, on the real engine.

Each test is an attack a pull request can make, and fails if the defence it names is removed:

* a ``repo: local`` hook connects out while the hooks run → it cannot (no network for hooks);
* the install of hook environments reaches for the pull request's files → they are not there (the
  install runs in a container that holds the config and nothing else);
* a hook writes into the hook-environment store → refused, and a later run of another pull request
  with the same config runs unchanged environments (the store is read-only beside the workspace);
* a set-up step connects out → it cannot unless the base branch's config allows it, and then the
  summary says the set-up had the network;
* hooks print pre-commit's status lines, shadow pre-commit with a package of their own, rewrite the
  config in the workspace → no row is made or changed (rows come from the config, statuses from
  each hook's container's exit status, the config and pre-commit from outside the workspace);
* ``.pre-commit-config.yaml`` is a symbolic link to a file of the bot's host → refused, and the
  file's content is nowhere in the report (the config is read from git's objects).

Reachability is tested without the internet: the test listens on the engine's bridge gateway, which
a container reaches with bridge networking and cannot reach without it.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import socket
import textwrap
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import docker
import pytest
from docker_support import docker_client, test_image, unavailable
from gitrepo import GitRepo

from bot.core.config import Environment, RepoConfig, ResourceLimits
from bot.core.kinds import Stage
from bot.core.models import (
    CheckStatus,
    HookStatus,
    PrecommitResult,
    RunReport,
    RunRequest,
    RunScope,
    RunState,
)
from bot.render.comment import render_comment
from runner.backends.base import RunnerRequest, Step
from runner.backends.docker import DockerRunner
from runner.checks.precommit import CONFIG_FILE, run_precommit
from runner.pipeline import Pipeline, PipelineDeps

__all__ = ["docker_client", "test_image"]  # fixtures, imported for pytest
pytestmark = pytest.mark.docker

LIMITS = ResourceLimits(memory="1g", pids=256, cpus=1, shm_size="16m", tmpfs_size="256m")


# --- fixtures --------------------------------------------------------------------------------------


@dataclass
class Listener:
    """A TCP server on the engine's bridge gateway; ``connections`` counts who reached it."""

    host: str
    port: int
    connections: list[str] = field(default_factory=list)

    def connect_script(self) -> str:
        """Python that connects to the listener: prints CONNECTED and exits 0, or exits 1 with why."""
        return textwrap.dedent(
            f"""
            import socket, sys
            try:
                socket.create_connection(({self.host!r}, {self.port}), timeout=5).close()
            except OSError as exc:
                print("unreachable:", exc)
                sys.exit(1)
            print("CONNECTED")
            """
        )


def _bridge_gateway(client: docker.DockerClient) -> str:
    config = client.networks.get("bridge").attrs["IPAM"]["Config"][0]
    if "Gateway" in config:
        return str(config["Gateway"])
    # Some engines leave the default bridge's gateway out of its IPAM config; it is the subnet's
    # first address, which is what the engine gives the bridge then.
    return str(next(ipaddress.ip_network(config["Subnet"]).hosts()))


@pytest.fixture
async def listener(docker_client: docker.DockerClient) -> AsyncIterator[Listener]:
    host = _bridge_gateway(docker_client)

    async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        found.connections.append(str(writer.get_extra_info("peername")))
        writer.close()

    try:
        server = await asyncio.start_server(accept, host, 0, family=socket.AF_INET)
    except OSError as exc:
        unavailable(f"cannot listen on the engine's bridge gateway {host} (a remote engine?): {exc}")
        raise
    found = Listener(host, server.sockets[0].getsockname()[1])
    async with server:
        yield found


@pytest.fixture(scope="session")
def offline_wheels(docker_client: docker.DockerClient, test_image: str) -> dict[str, str]:
    """pip settings that install from the wheels bundled in the image: `language: python` hooks
    get their environments without a package index."""
    folder = docker_client.containers.run(
        test_image,
        ["python3", "-c", "from virtualenv.seed.wheels.embed import BUNDLE_FOLDER; print(BUNDLE_FOLDER)"],
        remove=True,
        network_mode="none",
    )
    return {"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": folder.decode().strip()}


@pytest.fixture
def stores(docker_client: docker.DockerClient) -> Iterator[None]:
    """Removes the hook-environment stores a test created (they outlive runs on purpose)."""
    before = {v.name for v in docker_client.volumes.list(filters={"label": "paritybot.role=store"})}
    yield
    for volume in docker_client.volumes.list(filters={"label": "paritybot.role=store"}):
        if volume.name not in before:
            volume.remove(force=True)


@pytest.fixture
async def make_runner(
    docker_client: docker.DockerClient, test_image: str, stores: None
) -> AsyncIterator[Callable[..., DockerRunner]]:
    made: list[DockerRunner] = []

    def make(**env_fields: object) -> DockerRunner:
        env = Environment.model_validate(
            {"name": "ci", "image": test_image, "gpus": "none", "limits": LIMITS, **env_fields}
        )
        runner = DockerRunner(env, f"t-{uuid.uuid4().hex[:12]}", docker_client)
        made.append(runner)
        return runner

    yield make
    for runner in made:
        await runner.close()


def _config(*hooks: str) -> str:
    """A config of local hooks; a fresh comment line keeps each test's hook store its own."""
    body = "".join(textwrap.indent(textwrap.dedent(h).strip(), "      ") + "\n" for h in hooks)
    return f"# test {uuid.uuid4().hex}\nrepos:\n  - repo: local\n    hooks:\n{body}"


def _pull_request(path: Path, config: str, files: dict[str, str]) -> tuple[GitRepo, str, str]:
    """A repository whose base holds the config and whose head adds ``files``."""
    repo = GitRepo(path)
    base = repo.commit({CONFIG_FILE: config, "README.md": "base\n"}, "base")
    head = repo.commit(files, "the pull request")
    return repo, base, head


async def _precommit(
    runner: DockerRunner, repo: GitRepo, base: str, head: str, *, hook_network: bool = False
) -> PrecommitResult:
    await runner.prepare()
    return await run_precommit(runner, repo.path, base, head, "ci", 120, hook_network=hook_network)


# --- hooks run without network ----------------------------------------------------------------------


async def test_a_local_hook_cannot_connect_out_while_hooks_run(make_runner, listener, tmp_path):
    config = _config(
        """
        - id: phone-home
          name: phone home
          language: system
          entry: python3 tools/phone_home.py
          pass_filenames: false
          always_run: true
        """
    )
    repo, base, head = _pull_request(
        tmp_path / "pr", config, {"tools/phone_home.py": listener.connect_script()}
    )

    offline = await _precommit(make_runner(), repo, base, head)

    [row] = offline.hooks
    assert row.status == HookStatus.FAILED
    assert "unreachable" in row.output and "Network is unreachable" in row.output
    assert listener.connections == []
    # The same hook with the network the base branch's config can grant reaches the listener:
    # the attack is real, only the defence stops it.
    online = await _precommit(make_runner(), repo, base, head, hook_network=True)
    assert [h.status for h in online.hooks] == [HookStatus.PASSED]
    assert len(listener.connections) == 1


# --- the install sees the config and nothing else ----------------------------------------------------


async def test_installing_hook_environments_sees_no_file_of_the_pull_request(
    make_runner, offline_wheels, tmp_path
):
    # additional_dependencies are pip arguments: this one asks pip to build the PR's own package,
    # whose setup.py would run during the install, with the install's network.
    config = _config(
        """
        - id: lint
          name: lint
          language: python
          entry: python -c "print('ok')"
          additional_dependencies: ["/paritybot/workspace/evil"]
        """
    )
    setup_py = "raise SystemExit('PR-SETUP-RAN: the pull request ran code in the install')\n"
    repo, base, head = _pull_request(tmp_path / "pr", config, {"evil/setup.py": setup_py, "a.py": "x = 1\n"})

    runner = make_runner(env=offline_wheels)
    await runner.prepare()
    # The pull request's files are in the run's volume before the install, as after any earlier step.
    assert (await runner.run(Step(name="earlier", argv=["test", "-f", "evil/setup.py"]), repo.path)).ok
    result = await _precommit(runner, repo, base, head)

    assert result.status == CheckStatus.ERROR
    assert result.message.startswith("pre-commit failed installing the hook environments")
    assert "/paritybot/workspace/evil" in result.output  # pip looked for it, and it was not there
    assert "PR-SETUP-RAN" not in result.model_dump_json()


# --- the hook-environment store cannot be poisoned ---------------------------------------------------

TAMPER = """\
import glob, os, sys
store = os.environ["PRE_COMMIT_HOME"]
refused = []
for target in [os.path.join(store, "poison")] + glob.glob(os.path.join(store, "repo*/py_env-*/bin")):
    path = target if target.endswith("poison") else os.path.join(target, "python-poison")
    try:
        with open(path, "w") as fh:
            fh.write("poisoned")
    except OSError as exc:
        refused.append(f"{path}: {exc.strerror}")
for site in glob.glob(os.path.join(store, "repo*/py_env-*/lib/python*/site-packages")):
    try:
        with open(os.path.join(site, "sitecustomize.py"), "w") as fh:
            fh.write("print('POISONED'); raise SystemExit(1)\\n")
    except OSError as exc:
        refused.append(f"{site}: {exc.strerror}")
print("\\n".join(refused) or "every write went through")
sys.exit(1 if refused else 0)
"""


async def test_a_hook_cannot_change_the_hook_environments_of_a_later_run(
    make_runner, offline_wheels, tmp_path
):
    config = _config(
        """
        - id: tamper
          name: tamper
          language: system
          entry: python3 tools/tamper.py
          pass_filenames: false
          always_run: true
        """,
        """
        - id: victim
          name: victim
          language: python
          entry: python -c "import os, sys; sys.exit(os.path.exists(os.path.join(os.environ['PRE_COMMIT_HOME'], 'poison')))"
          pass_filenames: false
          always_run: true
        """,
    )
    attacker, a_base, a_head = _pull_request(tmp_path / "attacker", config, {"tools/tamper.py": TAMPER})
    other, o_base, o_head = _pull_request(
        tmp_path / "other", config, {"tools/tamper.py": "print('harmless')\n"}
    )

    attack = await _precommit(make_runner(env=offline_wheels), attacker, a_base, a_head)
    later = await _precommit(make_runner(env=offline_wheels), other, o_base, o_head)

    tamper = attack.hooks[0]
    assert tamper.status == HookStatus.FAILED
    assert "Read-only file system" in tamper.output and "went through" not in tamper.output
    assert [(h.id, h.status) for h in later.hooks] == [
        ("tamper", HookStatus.PASSED),
        ("victim", HookStatus.PASSED),
    ]
    assert "POISONED" not in later.model_dump_json()


# --- set-up steps get the network only when the base branch's config allows it --------------------------


async def _pipeline_run(
    tmp_path: Path, test_image: str, docker_client, listener: Listener, allow: bool
) -> RunReport:
    repo = GitRepo(tmp_path / f"repo-{allow}")
    base = repo.commit({"tests/test_ok.py": "def test_ok():\n    assert True\n"}, "base")
    head = repo.commit({"tools/setup_check.py": listener.connect_script()}, "head")
    env = Environment.model_validate(
        {
            "name": "ci",
            "image": test_image,
            "gpus": "none",
            "limits": LIMITS,
            "setup": ["python3 tools/setup_check.py"],
            "network": {"setup": allow},
        }
    )
    config = RepoConfig.model_validate(
        {"environments": [env.model_dump()], "checks": {"precommit": False, "docstrings": False}}
    )

    async def factory(request: RunnerRequest) -> DockerRunner:
        return DockerRunner(request.environment, request.run_id, docker_client)

    deps = PipelineDeps(runner_factory=factory, workspace_root=tmp_path / "ws", cache_root=tmp_path / "cache")
    request = RunRequest(
        repo="octo/calc",
        clone_url=str(repo.path),
        head_sha=head,
        base_sha=base,
        scope=RunScope.FAILED,
        only_tests=["tests/test_ok.py::test_ok"],
    )
    return await Pipeline(request, config, env, f"t-{uuid.uuid4().hex[:12]}", deps).execute()


async def test_a_set_up_step_reaches_the_network_only_when_the_base_config_allows_it(
    tmp_path, test_image, docker_client, listener
):
    denied = await _pipeline_run(tmp_path, test_image, docker_client, listener, allow=False)

    assert denied.state == RunState.SUCCEEDED, denied.error
    assert denied.tests is not None and denied.tests.status == CheckStatus.ERROR
    assert "Network is unreachable" in denied.tests.message
    assert "environments[].network.setup" in denied.tests.message
    assert listener.connections == []
    assert denied.networked_steps == []
    assert "network allowed" not in render_comment(denied, stage=Stage.DONE)

    allowed = await _pipeline_run(tmp_path, test_image, docker_client, listener, allow=True)

    assert allowed.tests is not None and allowed.tests.status == CheckStatus.PASSED, allowed.tests.message
    assert len(listener.connections) == 1
    assert allowed.networked_steps == ["set-up"]
    assert "network allowed for set-up" in render_comment(allowed, stage=Stage.DONE)


# --- rows come from the config, statuses from exit statuses ------------------------------------------

LIAR = """\
import os, sys
lines = (
    "All checks passed.....................................................Passed\\n"
    "must-fail.............................................................Passed\\n"
    "- hook id: must-fail\\n"
)
print(lines)
# Past pre-commit's capture of its output: straight into pre-commit's own standard output.
with open(f"/proc/{os.getppid()}/fd/1", "w") as out:
    out.write(lines)
sys.exit(int(sys.argv[1]))
"""
REWRITE = """\
import pathlib
config = pathlib.Path(".pre-commit-config.yaml")
config.write_text(config.read_text().replace("entry: 'false'", "entry: 'true'"))
print("rewrote the config")
"""
FAKE_PRE_COMMIT = "def main(argv=None):\n    print('fake pre-commit: all good')\n    return 0\n"


async def test_nothing_a_hook_prints_or_writes_makes_or_changes_a_row(make_runner, tmp_path):
    config = _config(
        """
        - id: liar-failing
          name: liar failing
          language: system
          entry: python3 tools/liar.py 1
          pass_filenames: false
          always_run: true
        """,
        """
        - id: liar-passing
          name: liar passing
          language: system
          entry: python3 tools/liar.py 0
          pass_filenames: false
          always_run: true
        """,
        """
        - id: rewrite-config
          name: rewrite config
          language: system
          entry: python3 tools/rewrite.py
          pass_filenames: false
          always_run: true
        """,
        """
        - id: must-fail
          name: must fail
          language: system
          entry: 'false'
          pass_filenames: false
          always_run: true
        """,
        """
        - id: docs-only
          name: docs only
          language: system
          entry: 'true'
          files: ^docs/
        """,
    )
    files = {
        "tools/liar.py": LIAR,
        "tools/rewrite.py": REWRITE,
        # With the workspace importable, this would stand in for pre-commit in every hook's container.
        "pre_commit/__init__.py": "",
        "pre_commit/main.py": FAKE_PRE_COMMIT,
        # Named like pre-commit's help option: on its command line it would print help and exit 0.
        "-h": "not an option\n",
    }
    repo, base, head = _pull_request(tmp_path / "pr", config, files)

    result = await _precommit(make_runner(), repo, base, head)

    assert [(h.id, h.status) for h in result.hooks] == [
        ("liar-failing", HookStatus.FAILED),
        ("liar-passing", HookStatus.PASSED),
        ("rewrite-config", HookStatus.FAILED),  # it changed a file, as pre-commit counts it
        ("must-fail", HookStatus.FAILED),  # run from the config as committed, not as rewritten
        ("docs-only", HookStatus.SKIPPED),
    ]
    assert result.status == CheckStatus.FAILED
    assert result.message == "3 of 5 hooks failed: liar-failing, rewrite-config, must-fail"
    assert "All checks passed" not in json.dumps([h.name for h in result.hooks])
    assert "fake pre-commit" not in result.model_dump_json()


# --- the config is read from git's objects --------------------------------------------------------------


async def test_a_config_that_links_to_a_host_file_is_refused_and_the_file_never_read(make_runner, tmp_path):
    secret = f"HOST-SECRET-{uuid.uuid4().hex}"
    host_file = tmp_path / "host-only.yaml"
    host_file.write_text(
        "repos:\n  - repo: local\n    hooks:\n"
        f"      - {{id: {secret}, name: {secret}, entry: 'true', language: system, always_run: true}}\n"
    )
    repo = GitRepo(tmp_path / "pr")
    base = repo.commit({"README.md": "base\n"}, "base")
    (repo.path / CONFIG_FILE).symlink_to(host_file)
    repo.git("add", CONFIG_FILE)
    head = repo.commit({"a.py": "x = 1\n"}, "link the config to a host file")

    result = await _precommit(make_runner(), repo, base, head)

    assert result.status == CheckStatus.ERROR
    assert result.message == (
        f"{CONFIG_FILE} at {head[:12]}: is a symbolic link; only regular files are read from a commit"
    )
    assert secret not in result.model_dump_json()
