"""The session `paritybot repro` opens after the rerun, in the run's container (or, with
``--runner host``, in the workspace on this machine): an interactive shell, sshd
(:mod:`bot.cli.repro_ssh`) or JupyterLab (:mod:`bot.cli.repro_jupyter`).

The shell is ``docker exec`` into a container the runner started on the run's volume (the same
image, user, variables, GPUs and limits as the test's step, no network), in the workspace, with the
start-up file the test step wrote (:func:`bot.cli.repro_outcome.shell_rc`): a prompt naming the
commit and the test's command in the history.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

from bot.cli.checkout import UsageError, cache_root
from bot.cli.repro_jupyter import lab_url, relay_argv, start_jupyter
from bot.cli.repro_record import ReproRecord
from bot.cli.repro_ssh import ExecBridge, prepare_sshd, public_key, ssh_command, sshd_argv
from runner.backends.base import Runner, Step
from runner.backends.docker import WORKSPACE_DIR, DockerRunner
from runner.workspace import Workspace

RC_PATH = ".paritybot/repro.bashrc"
# The session container's own command: it waits, the user's shells are `docker exec`s beside it.
IDLE = ["sleep", "infinity"]
Say = Callable[[str], None]


class Session:
    """What the user works in; :meth:`wait` returns when they leave, :meth:`close` removes it.

    ``argv``: the shell the user works in; None: the user works over a bridge (sshd) and leaves by
    pressing Enter here (or Ctrl-C)."""

    def __init__(self, argv: list[str] | None, cwd: Path | None, env: dict[str, str] | None, what: str):
        self.argv, self.cwd, self.env, self.what = argv, cwd, env, what
        self.container: str | None = None
        self.bridge: ExecBridge | None = None

    async def wait(self) -> int:
        if self.argv is None:
            await asyncio.to_thread(sys.stdin.readline)
            return 0
        process = await asyncio.create_subprocess_exec(*self.argv, cwd=self.cwd, env=self.env)
        try:
            return await process.wait()
        except asyncio.CancelledError:
            if process.returncode is None:
                process.kill()
                await process.wait()
            raise

    async def close(self) -> None:
        """The port is closed here; the container goes with the runner's volume (DockerRunner.close)."""
        if self.bridge is not None:
            await self.bridge.close()


async def open_session(
    mode: str, runner: Runner, ws: Workspace, record: ReproRecord, nodeid: str, key: Path | None, say: Say
) -> Session:
    if mode == "ssh" and isinstance(runner, DockerRunner):
        return await _container_ssh(runner, ws, key, say)
    if mode == "jupyter" and isinstance(runner, DockerRunner):
        return await _container_jupyter(runner, ws, record, nodeid, say)
    if mode != "shell":
        raise UsageError(f"--{mode} is not available in this paritybot; --shell is")
    if isinstance(runner, DockerRunner):
        return await _container_shell(runner, ws, say)
    rc = ws.path / RC_PATH
    say(f"repro: a shell ON THIS MACHINE in {ws.path}; `exit` leaves and removes the workspace")
    env = dict(os.environ) | runner.info.env
    return Session(["bash", "--rcfile", str(rc), "-i"], ws.path, env, "shell")


async def _container_shell(runner: DockerRunner, ws: Workspace, say: Say) -> Session:
    docker_cli = shutil.which("docker")
    if docker_cli is None:
        raise UsageError("the shell needs the docker command on PATH (docker exec); it is not there")
    step = Step(name="session", argv=IDLE, env=dict(runner.info.env))
    container = await runner.start_session(step, ws.path)
    tty = ["-t"] if sys.stdin.isatty() else []
    argv = [docker_cli, "exec", "-i", *tty, "-w", WORKSPACE_DIR, container]
    argv += ["bash", "--rcfile", f"{WORKSPACE_DIR}/{RC_PATH}", "-i"]
    say(f"repro: a shell in container {container[:12]}; `exit` leaves and removes it")
    session = Session(argv, None, None, "shell")
    session.container = container
    return session


async def _container_ssh(runner: DockerRunner, ws: Workspace, key: Path | None, say: Say) -> Session:
    docker_cli = shutil.which("docker")
    if docker_cli is None:
        raise UsageError("--ssh needs the docker command on PATH (docker exec); it is not there")
    line, key_file = public_key(key, Path.home())
    step = Step(name="session", argv=IDLE, env=dict(runner.info.env))
    container = await runner.start_session(step, ws.path)
    session = Session(None, None, None, "ssh")
    session.container = container
    login = await asyncio.to_thread(prepare_sshd, runner, container, line, dict(runner.info.env))
    session.bridge = ExecBridge(sshd_argv(docker_cli, container))
    port = await session.bridge.start()
    say(f"repro: sshd in container {container[:12]}, for the key {key_file}, on 127.0.0.1:{port}:")
    print(ssh_command(login, port, key_file), flush=True)
    say("repro: press Enter here (or Ctrl-C) to stop it and remove the container")
    return session


async def _container_jupyter(
    runner: DockerRunner, ws: Workspace, record: ReproRecord, nodeid: str, say: Say
) -> Session:
    docker_cli = shutil.which("docker")
    if docker_cli is None:
        raise UsageError("--jupyter needs the docker command on PATH (docker exec); it is not there")
    step = Step(name="session", argv=IDLE, env=dict(runner.info.env))
    container = await runner.start_session(step, ws.path)
    session = Session(None, None, None, "jupyter")
    session.container = container
    say(
        "repro: installing JupyterLab in the container, beside the project's environment (its wheels downloaded here once)"
    )
    cache = cache_root() / "repro" / "jupyter-wheels"
    token = await asyncio.to_thread(start_jupyter, runner, container, cache, nodeid, record.pytest_args)
    session.bridge = ExecBridge(relay_argv(docker_cli, container))
    port = await session.bridge.start()
    say(
        f"repro: JupyterLab in container {container[:12]}, on 127.0.0.1:{port}; its notebook reruns the test:"
    )
    print(lab_url(port, token), flush=True)
    say("repro: press Enter here (or Ctrl-C) to stop it and remove the container")
    return session


def leftovers(run_id: str, workspace: Workspace | None, session: Session | None) -> list[str]:
    """What this repro started that is still there: containers, volumes, the workspace."""
    left: list[str] = []
    if workspace is not None and workspace.path.exists():
        left.append(f"workspace {workspace.path} (rm -rf it)")
    try:
        import docker
        import docker.errors

        from runner.backends.docker_engine import LABEL_RUN_ID

        client = docker.from_env()
    except Exception:
        return left
    try:
        mine = {"label": f"{LABEL_RUN_ID}={run_id}"}
        left += [
            f"container {c.name} (docker rm -f {c.name})"
            for c in client.containers.list(all=True, filters=mine)
        ]
        left += [f"volume {v.name} (docker volume rm {v.name})" for v in client.volumes.list(filters=mine)]
    except docker.errors.DockerException:
        left.append(
            f"perhaps containers or volumes labelled {LABEL_RUN_ID}={run_id} (the engine did not answer)"
        )
    finally:
        client.close()
    return left
