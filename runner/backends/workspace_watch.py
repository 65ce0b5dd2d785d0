"""The workspace's size limit: a watchdog that stops a step once the volumes it writes outgrow it.

A run's steps write into one Docker volume (the copy of the checkout, the home directory, the
reports), a scratch step into a volume of its own and perhaps a tool's store; left alone, a pull
request can fill the engine's disk through them. Docker offers no size
for such a volume that works everywhere: the local driver's ``size`` option needs the engine's
data root on XFS with project quotas (elsewhere it refuses: "quota size requested but no quota
support"), and a tmpfs volume loses its contents when the last container using it stops (steps
are separate containers) and holds them in memory. So a watchdog keeps the limit:

* beside the run's steps runs one watcher container of the same image, with the run volume
  mounted read-only, that prints ``du -skxc`` of it every :data:`WATCH_INTERVAL_S` seconds (a
  scratch step gets a watcher of its own, over every volume it may write). It is
  root with only ``CAP_DAC_READ_SEARCH`` (so a directory a step made unreadable is still
  counted), no network, a read-only root, small memory and process limits and a quarter of one
  CPU; a step cannot signal it (another PID namespace). ``du`` counts allocated blocks, so a
  sparse file costs what it takes on disk.
* The first reading above the limit while a step runs kills that step. When a step ends, the
  watcher is asked (SIGUSR1) for one more reading, taken after the step's last write, so a step
  that wrote too much between two readings and exited is caught as well.
* If the watcher ends before the run does, the step in progress is killed and later steps are
  refused: an unwatched step could fill the disk.

A single file cannot outgrow the limit at all: the container runner also sets the file-size
limit (``RLIMIT_FSIZE``) to it, which the kernel enforces on every write; the watchdog is for
many files. What the user sees is :attr:`StepResult.stopped_by_limit`: "the run wrote more than the
workspace's 10g limit (limits.workspace_size) …", and the step fails.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterator
from typing import Any

import docker
import docker.errors
import requests
import structlog
from docker.models.containers import Container

log = structlog.get_logger(__name__)

WATCH_INTERVAL_S = 1
# The reading asked for when a step ends may take a while on a large tree.
FINAL_READING_TIMEOUT_S = 30.0
EXIT_RECORD_TIMEOUT_S = 10
WATCH_MOUNT = "/paritybot-watch"  # the watched volumes are mounted below it: 0, 1, …
_FINAL = b"final"
# USR1 interrupts the sleep; the trap takes a reading marked as the one asked for. A reading in
# progress when the signal comes finishes first, so the marked one starts after the signal.
_DU = f"du -skxc {WATCH_MOUNT}/* | tail -n 1"  # the last line: the volumes' total
_SCRIPT = (
    f'trap "printf {_FINAL.decode()}; {_DU}" USR1; trap "exit 0" TERM; '
    f"while :; do {_DU}; sleep {WATCH_INTERVAL_S} & wait $!; done"
)
_LIMITS: dict[str, Any] = {
    "user": "0:0",
    "cap_drop": ["ALL"],
    "cap_add": ["DAC_READ_SEARCH"],
    "security_opt": ["no-new-privileges"],
    "read_only": True,
    "network_mode": "none",
    "mem_limit": "64m",
    "memswap_limit": "64m",
    "pids_limit": 16,
    "nano_cpus": 250_000_000,  # a quarter of one CPU, however large the tree it walks
}
OnOver = Callable[[], None]


def over_limit_message(limit_text: str, used: int) -> str:
    held = f"{used / (1 << 30):.1f} GiB" if used >= 1 << 30 else f"{used / (1 << 20):.0f} MiB"
    return (
        f"the run wrote more than the workspace's {limit_text} limit (limits.workspace_size); "
        f"it held {held} when measured"
    )


class WorkspaceWatch:
    """Watches the volumes steps write (the run's, or a scratch step's); see the module docstring."""

    def __init__(
        self,
        client: docker.DockerClient,
        image_id: str,
        volumes: list[str],
        limit: int,
        limit_text: str,
        labels: dict[str, str],
    ):
        self._client = client
        self._image_id = image_id
        self._volumes = volumes
        self._volume = volumes[0]  # names the watcher and its log lines
        self._limit = limit
        self._limit_text = limit_text
        self._labels = labels
        self._container: Container | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._final = threading.Event()
        self._closing = False
        self._on_over: OnOver | None = None  # set while a step runs
        self._stopped_by: str | None = None
        self._dead: str | None = None
        self.peak = 0

    def start(self) -> None:
        """Start the watcher container (once per run)."""
        container = self._client.containers.create(
            self._image_id,
            name=f"{self._volume}-watch-{os.urandom(3).hex()}",
            entrypoint=["sh", "-c", _SCRIPT],
            command=[],
            labels=self._labels,
            volumes={
                name: {"bind": f"{WATCH_MOUNT}/{i}", "mode": "ro"} for i, name in enumerate(self._volumes)
            },
            **_LIMITS,
        )
        self._container = container
        stream = container.attach(stdout=True, stderr=False, stream=True, logs=True)
        container.start()
        self._thread = threading.Thread(
            target=self._read, args=(stream,), name="workspace-watch", daemon=True
        )
        self._thread.start()

    def step_started(self, on_over: OnOver) -> str | None:
        """Watch a step; ``on_over`` is called (from a thread) to stop it. A reason when it must not run."""
        with self._lock:
            if self._dead is not None:
                return self._dead
            self._on_over, self._stopped_by = on_over, None
        return None

    def step_ended(self) -> str | None:
        """Take a reading after the step's end; why the step must fail (over the limit), else None."""
        self._final.clear()
        container = self._container
        if container is not None and self._dead is None:
            try:
                container.kill(signal="SIGUSR1")
            except docker.errors.DockerException as exc:
                log.warning("could not ask the workspace watcher for a reading", error=str(exc))
            if not self._final.wait(FINAL_READING_TIMEOUT_S):
                log.warning("the workspace watcher took no reading after the step", volume=self._volume)
        with self._lock:
            self._on_over = None
            return self._stopped_by

    def step_abandoned(self) -> None:
        """The step ended without a result: stop watching it, with no reading to wait for."""
        with self._lock:
            self._on_over = None

    def close(self) -> None:
        self._closing = True
        container = self._container
        if container is not None:
            with contextlib.suppress(docker.errors.NotFound, docker.errors.APIError):
                container.remove(force=True)
        if self._thread is not None:
            self._thread.join(5)

    def _read(self, stream: Iterator[bytes]) -> None:
        pending = b""
        try:
            for chunk in stream:
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    self._measured(line)
        except docker.errors.DockerException as exc:
            log.warning("the workspace watcher's output broke", error=str(exc))
        if not self._closing:
            self._stop_step(f"the workspace's size could not be watched: {self._why_it_ended()}", dead=True)
        self._final.set()

    def _measured(self, line: bytes) -> None:
        final = line.startswith(_FINAL)
        fields = line.removeprefix(_FINAL).split()
        if fields and fields[0].isdigit():
            used = int(fields[0]) * 1024
            self.peak = max(self.peak, used)
            if used > self._limit:
                self._stop_step(over_limit_message(self._limit_text, used))
        if final:
            self._final.set()

    def _stop_step(self, why: str, *, dead: bool = False) -> None:
        with self._lock:
            if dead:
                self._dead = why
            on_over = self._on_over
            if on_over is None or self._stopped_by is not None:
                return
            self._stopped_by = why
        log.warning("stopping the step", reason=why, volume=self._volume)
        on_over()

    def _why_it_ended(self) -> str:
        container = self._container
        if container is None:
            return "the watcher did not start"
        try:
            # Its output can close a moment before the engine records the exit (a loaded engine):
            # wait for that record, or the code read would be the running container's 0.
            code = container.wait(timeout=EXIT_RECORD_TIMEOUT_S).get("StatusCode")
            said = container.logs(stdout=False, stderr=True, tail=3).decode("utf-8", "replace").strip()
        except docker.errors.DockerException as exc:
            return f"the watcher is gone ({exc})"
        except requests.RequestException:
            return f"the watcher's output ended, but it was still running {EXIT_RECORD_TIMEOUT_S:g} s later"
        return f"the watcher exited with code {code}" + (f": {said}" if said else "")
