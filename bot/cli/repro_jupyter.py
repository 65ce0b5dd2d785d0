"""`paritybot repro --jupyter`: JupyterLab inside the run's container, with a notebook that reruns the
test and stops in the debugger at the failure.

The container has no network, so JupyterLab comes from a wheelhouse this machine downloads once
(``pip download``, into paritybot's cache) and copies into the run's volume; it is installed into an
environment of its own in the run's home, never into the project's: the project's packages are
seen through a ``.pth`` file listing the project interpreter's site-packages, after JupyterLab's
own. The server listens on the container's 127.0.0.1 with a token; this machine's 127.0.0.1 port
reaches it through a small relay started with ``docker exec`` per connection
(:class:`bot.cli.repro_ssh.ExecBridge`), as for ``--ssh``.
"""

from __future__ import annotations

import io
import itertools
import json
import secrets
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import Any

from bot.cli.checkout import UsageError
from runner.backends.docker import HOME_DIR, RUN_MOUNT, WORKSPACE_DIR, DockerRunner

JUPYTER_DIR = f"{HOME_DIR}/.paritybot-jupyter"
NOTEBOOK = "paritybot-repro.ipynb"
PORT_INSIDE = 8888
PACKAGES = ["jupyterlab", "ipykernel"]
_READY_TIMEOUT_S = 120
# One TCP connection to the server inside, its two directions on stdin and stdout.
RELAY = f"""
import os, socket, threading
s = socket.create_connection(("127.0.0.1", {PORT_INSIDE}))
def up():
    while True:
        d = os.read(0, 65536)
        if not d:
            break
        s.sendall(d)
    s.shutdown(socket.SHUT_WR)
threading.Thread(target=up, daemon=True).start()
while True:
    d = s.recv(65536)
    if not d:
        break
    os.write(1, d)
"""


def wheelhouse(cache: Path, python: str) -> Path:
    """JupyterLab's wheels for the container's Python ``python`` (``3.11``), downloaded once."""
    folder = cache / f"py{python}"
    done = folder / ".complete"
    if done.exists():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    platforms = [
        f"--platform={p}" for p in ("manylinux2014_x86_64", "manylinux_2_17_x86_64", "manylinux_2_28_x86_64")
    ]
    argv = [sys.executable, "-m", "pip", "download", "-q", "-d", str(folder), "--only-binary=:all:"]
    argv += [f"--python-version={python}", *platforms, *PACKAGES]
    got = subprocess.run(argv, capture_output=True, text=True, check=False)
    if got.returncode != 0:
        last = (got.stderr.strip().splitlines() or ["no output"])[-1]
        raise UsageError(f"--jupyter could not download JupyterLab's wheels on this machine: {last}")
    done.write_text("")
    return folder


def _wheels_archive(folder: Path, uid: int, gid: int) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for sub in ("home/.paritybot-jupyter", "home/.paritybot-jupyter/wheels"):
            entry = tarfile.TarInfo(sub)
            entry.type, entry.mode, entry.uid, entry.gid, entry.mtime = (
                tarfile.DIRTYPE,
                0o755,
                uid,
                gid,
                time.time(),
            )
            tar.addfile(entry)
        for path in sorted(folder.glob("*.whl")):
            info = tar.gettarinfo(str(path), arcname=f"home/.paritybot-jupyter/wheels/{path.name}")
            info.uid, info.gid, info.uname, info.gname = uid, gid, "", ""
            with path.open("rb") as f:
                tar.addfile(info, f)
    return buf.getvalue()


def _disables(pytest_args: list[str], plugin: str) -> bool:
    pairs = itertools.pairwise(pytest_args)
    return (
        any(flag == "-p" and value == f"no:{plugin}" for flag, value in pairs)
        or f"-pno:{plugin}" in pytest_args
    )


def notebook(nodeid: str, pytest_args: list[str]) -> str:
    # The run's own arguments already keep pytest's cache out of the project; say it once.
    cache_off = [] if _disables(pytest_args, "cacheprovider") else ["-p", "no:cacheprovider"]
    argv = [*cache_off, *pytest_args, nodeid, "--pdb"]
    cell: dict[str, Any] = {
        "cell_type": "code",
        "execution_count": None,
        "id": "rerun",
        "metadata": {},
        "outputs": [],
        "source": [
            "# The run's failing test, rerun here; at the failure pytest stops in the debugger (pdb):\n",
            "# `p NAME` prints a value, `up`/`down` move in the stack, `q` leaves.\n",
            "import pytest\n",
            f"pytest.main({json.dumps(argv)})\n",
        ],
    }
    return json.dumps(
        {
            "cells": [cell],
            "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"}},
            "nbformat": 4,
            "nbformat_minor": 5,
        },
        indent=1,
    )


def _exec(container: Any, argv: list[str], what: str) -> str:
    done = container.exec_run(argv, workdir=WORKSPACE_DIR)
    out = done.output.decode(errors="replace")
    if done.exit_code != 0:
        raise UsageError(f"--jupyter: {what} failed in the container: {out.strip()[-300:]}")
    return str(out)


def start_jupyter(
    runner: DockerRunner, container_id: str, cache: Path, nodeid: str, pytest_args: list[str]
) -> str:
    """Install and start JupyterLab in the container; returns its token."""
    container = runner.client.containers.get(container_id)
    probe = "import sys, site; print(f'{sys.version_info[0]}.{sys.version_info[1]}'); print(*site.getsitepackages(), sep='\\n')"
    lines = _exec(container, ["python", "-c", probe], "asking the project's Python").split()
    version, site_dirs = lines[0], lines[1:]
    wheels = wheelhouse(cache, version)
    uid, gid = (int(container.exec_run(["id", flag]).output) for flag in ("-u", "-g"))
    container.put_archive(RUN_MOUNT, _wheels_archive(wheels, uid, gid))
    venv = f"{JUPYTER_DIR}/venv"
    install = (
        f"python -m venv {venv} && {venv}/bin/pip install -q --no-index --find-links {JUPYTER_DIR}/wheels "
        f"{' '.join(PACKAGES)} && printf '%s\\n' {' '.join(site_dirs)} > "
        f"$({venv}/bin/python -c 'import site; print(site.getsitepackages()[0])')/paritybot-project.pth"
    )
    _exec(container, ["sh", "-c", install], "installing JupyterLab")
    container.put_archive(RUN_MOUNT, _notebook_archive(notebook(nodeid, pytest_args), uid, gid))
    token = secrets.token_hex(24)
    serve = [
        f"{venv}/bin/jupyter", "lab", "--no-browser", "--ip=127.0.0.1", f"--port={PORT_INSIDE}",
        f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={WORKSPACE_DIR}",
    ]  # fmt: skip
    container.exec_run(serve, workdir=WORKSPACE_DIR, detach=True)
    _wait_ready(container, token)
    return token


def _notebook_archive(text: str, uid: int, gid: int) -> bytes:
    from runner.backends.docker_archives import files_archive

    return files_archive([], {f"workspace/{NOTEBOOK}": text}, uid, gid)


def _wait_ready(container: Any, token: str) -> None:
    check = (
        "import urllib.request; urllib.request.urlopen("
        f"'http://127.0.0.1:{PORT_INSIDE}/api/status?token={token}', timeout=5)"
    )
    deadline = time.monotonic() + _READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if container.exec_run(["python3", "-c", check]).exit_code == 0:
            return
        time.sleep(1)
    raise UsageError(f"--jupyter: JupyterLab did not answer in the container within {_READY_TIMEOUT_S} s")


def relay_argv(docker_cli: str, container: str) -> list[str]:
    return [docker_cli, "exec", "-i", container, "python3", "-c", RELAY]


def lab_url(port: int, token: str) -> str:
    return f"http://127.0.0.1:{port}/lab/tree/{NOTEBOOK}?token={token}"
