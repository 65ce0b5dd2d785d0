"""The session `paritybot repro` opens after the rerun, in the run's container (or, with
``--runner host``, in the workspace on this machine): an interactive shell for now.

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

from bot.cli.checkout import UsageError
from bot.cli.repro_record import ReproRecord
from runner.backends.base import Runner, Step
from runner.backends.docker import WORKSPACE_DIR, DockerRunner
from runner.workspace import Workspace

RC_PATH = ".paritybot/repro.bashrc"
# The session container's own command: it waits, the user's shells are `docker exec`s beside it.
IDLE = ["sleep", "infinity"]
Say = Callable[[str], None]


class Session:
    """What the user works in; :meth:`wait` returns when they leave, :meth:`close` removes it."""

    def __init__(self, argv: list[str], cwd: Path | None, env: dict[str, str] | None, what: str):
        self.argv, self.cwd, self.env, self.what = argv, cwd, env, what
        self.container: str | None = None

    async def wait(self) -> int:
        process = await asyncio.create_subprocess_exec(*self.argv, cwd=self.cwd, env=self.env)
        try:
            return await process.wait()
        except asyncio.CancelledError:
            if process.returncode is None:
                process.kill()
                await process.wait()
            raise

    async def close(self) -> None:
        """The container goes with the runner's volume (DockerRunner.close); nothing else is held."""


async def open_session(
    mode: str, runner: Runner, ws: Workspace, record: ReproRecord, nodeid: str, key: Path | None, say: Say
) -> Session:
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
