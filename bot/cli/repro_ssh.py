"""`paritybot repro --ssh`: sshd in the run's container, reached on a 127.0.0.1 port of this machine.

The container keeps the run's isolation (no network, the run's user, a read-only root): instead of
publishing a port from it, paritybot listens on 127.0.0.1 and, for each connection, starts the
image's own ``sshd -i`` (inetd mode: one session over stdin and stdout) with ``docker exec``. sshd
runs as the run's user, so it needs an account for that user in the image and lets in only that
user, with the user's public key (``--key`` or ``~/.ssh/*.pub``); its host key is made for this
session in the run's home. Variables the image and the run set (``PATH``…) reach the session
through the key's ``environment=`` options, which sshd would otherwise drop.
"""

from __future__ import annotations

import asyncio
import contextlib
import shlex
from pathlib import Path

from bot.cli.checkout import UsageError
from runner.backends.docker import HOME_DIR, RUN_MOUNT, WORKSPACE_DIR, DockerRunner
from runner.backends.docker_archives import files_archive

SSH_DIR = f"{HOME_DIR}/.paritybot-ssh"
_KEY_TYPES = ("ssh-ed25519", "ssh-rsa", "ecdsa-sha2-", "sk-ssh-", "sk-ecdsa-")


def public_key(given: Path | None, home: Path) -> tuple[str, Path]:
    """The user's public key line and its file: ``--key``, else the first of ``~/.ssh/*.pub``."""
    candidates = [given] if given is not None else sorted((home / ".ssh").glob("*.pub"))
    if not candidates:
        raise UsageError(f"--ssh needs your public key: none in {home / '.ssh'}; give one with --key FILE")
    path = candidates[0]
    try:
        line = path.read_text(encoding="utf-8").strip().splitlines()[0]
    except (OSError, IndexError, UnicodeDecodeError):
        raise UsageError(f"--key {path}: not a readable public key") from None
    if not line.startswith(_KEY_TYPES):
        raise UsageError(f"--key {path}: not an OpenSSH public key (ssh-ed25519 AAAA…)")
    return line, path


def authorized_keys(key: str, env: dict[str, str]) -> str:
    # A value with a double quote cannot be written in an environment="…" option; it is left out.
    options = [f'environment="{k}={v}"' for k, v in sorted(env.items()) if '"' not in f"{k}={v}"]
    return ",".join(options) + (" " if options else "") + key + "\n"


def sshd_config() -> str:
    return "\n".join(
        [
            f"HostKey {SSH_DIR}/host_key",
            f"AuthorizedKeysFile {SSH_DIR}/authorized_keys",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            "UsePAM no",
            "StrictModes no",
            "PermitUserEnvironment yes",
            "PidFile none",
            "LogLevel ERROR",
            "Subsystem sftp internal-sftp",
            "",
        ]
    )


def profile() -> str:
    """The login's start-up: the workspace, and the repro shell's prompt and history when interactive."""
    return (
        f"cd {WORKSPACE_DIR}\n"
        f"case $- in *i*) [ -f {WORKSPACE_DIR}/.paritybot/repro.bashrc ] && . {WORKSPACE_DIR}/.paritybot/repro.bashrc ;; esac\n"
    )


def sshd_argv(docker_cli: str, container: str) -> list[str]:
    return [docker_cli, "exec", "-i", container, "/usr/sbin/sshd", "-i", "-f", f"{SSH_DIR}/sshd_config"]


class ExecBridge:
    """127.0.0.1:PORT → a new ``argv`` (a ``docker exec -i`` into the container) per connection,
    its stdin and stdout the connection's two directions."""

    def __init__(self, argv: list[str]):
        self.argv = argv
        self.server: asyncio.Server | None = None
        self._sessions: set[asyncio.subprocess.Process] = set()

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return int(self.server.sockets[0].getsockname()[1])

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        proc = await asyncio.create_subprocess_exec(
            *self.argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
        )
        self._sessions.add(proc)
        assert proc.stdin is not None and proc.stdout is not None
        try:
            await asyncio.gather(_pump(reader, proc.stdin), _pump(proc.stdout, writer))
        finally:
            self._sessions.discard(proc)
            if proc.returncode is None:
                proc.kill()
            await proc.wait()
            writer.close()

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
        for proc in list(self._sessions):
            with contextlib.suppress(ProcessLookupError):
                proc.kill()


async def _pump(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
    try:
        while data := await source.read(65536):
            sink.write(data)
            await sink.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        with contextlib.suppress(OSError, RuntimeError):
            if sink.can_write_eof():
                sink.write_eof()


def prepare_sshd(runner: DockerRunner, container_id: str, key: str, extra_env: dict[str, str]) -> str:
    """Put sshd's files in the run's home and make its host key; returns the user's login name."""
    container = runner.client.containers.get(container_id)
    if container.exec_run(["test", "-x", "/usr/sbin/sshd"]).exit_code != 0:
        raise UsageError(
            "the run's image has no sshd (openssh-server), which --ssh needs; --shell works without it"
        )
    login = container.exec_run(["id", "-un"])
    if login.exit_code != 0:
        user = runner.environment.user or "1000:1000"
        raise UsageError(
            f"the run's image has no account for its user ({user}), which sshd needs; --shell works"
        )
    uid, gid = (int(container.exec_run(["id", flag]).output) for flag in ("-u", "-g"))
    image_env = dict(e.split("=", 1) for e in container.attrs["Config"]["Env"] if "=" in e)
    files = {
        "home/.paritybot-ssh/sshd_config": sshd_config(),
        "home/.paritybot-ssh/authorized_keys": authorized_keys(key, image_env | extra_env),
        "home/.bashrc": profile(),
        "home/.profile": f". {HOME_DIR}/.bashrc\n",
    }
    container.put_archive(RUN_MOUNT, files_archive(["home/.paritybot-ssh"], files, uid, gid))
    made = container.exec_run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", f"{SSH_DIR}/host_key"])
    if made.exit_code != 0:
        raise UsageError(
            f"could not make sshd's host key in the container: {made.output.decode(errors='replace')}"
        )
    return str(login.output.decode().strip())


def ssh_command(login: str, port: int, key_file: Path | None) -> str:
    parts = ["ssh", "-p", str(port), "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null"]
    if key_file is not None:
        parts += ["-i", str(key_file.with_suffix(""))]
    return shlex.join([*parts, f"{login}@127.0.0.1"])
