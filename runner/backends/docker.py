"""The container runner: every step in a fresh, hardened container of the CI's own image.

What a run gets, and why:

* The image is resolved once, in :meth:`DockerRunner.prepare`, to an immutable id; every step of
  the run uses that id even if the tag moves meanwhile, and repro commands name it by digest.
* One Docker volume per run holds a *copy* of the workspace (``/paritybot/workspace``) and the
  home directory (``/paritybot/home``). Steps share it, so a set-up step's ``pip install`` (which
  falls back to ``~/.local`` for a non-root user) and a test step's reports carry over from step
  to step, while the host's checkout is never written. The copy is made with the Docker API
  (``put_archive``), so it works with a remote engine and with a runner that itself runs in a
  container. The volume is removed when the run closes, or at the next start-up if the runner
  died (:func:`runner.backends.docker_engine.remove_orphans`). A scratch step (``Step.scratch``) gets a new volume of its own
  instead, mounted at the same place: its directory and home, and nothing of the run.
* Hardening by default: a non-root user (``environment.user``, else ``1000:1000``, which needs no
  entry in the image's ``/etc/passwd``), every capability dropped, ``no-new-privileges``, a
  read-only root file system, a size-limited ``/tmp`` tmpfs, memory (without swap), process, CPU
  and ``/dev/shm`` limits, and no network unless the step asks for it.
* A step that asks for a store (pre-commit's hook environments) gets a named volume keyed by the
  store's key, the image digest and the user id, so it survives runs but is never shared by runs
  whose inputs differ. It is mounted writable only into a scratch step (the one that installs the
  environments from the config alone) and read-only everywhere else, so a pull
  request's code cannot change the environments another run uses. There is no shared pip cache: a
  step's pip caches in the run's own home directory, which goes with the run.
* Output is streamed while the step runs, capped (head and tail kept) and stripped of secrets;
  the engine keeps no log of it.
* The run volume is kept under ``limits.workspace_size`` by a watchdog beside the steps
  (:mod:`runner.backends.workspace_watch`), and collected files are read back only up to their cap, never
  through a link (:mod:`runner.backends.collect`).

The pure parts live beside it, each tested on its own: the limits (:mod:`runner.backends.docker_limits`),
the image's user and digest (:mod:`runner.backends.docker_image`), archives in and out
(:mod:`runner.backends.docker_archives`), the output's cap (:mod:`runner.backends.docker_output`), and
the labels and the engine calls that tolerate a gone container (:mod:`runner.backends.docker_engine`).

Why one module past 400 lines: :class:`DockerRunner` is one container lifecycle per run (image,
volumes, steps, cancellation, clean-up) whose parts share its state.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import tarfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import docker
import docker.errors
import requests
import structlog
from docker.models.containers import Container
from docker.types import LogConfig, Ulimit

from bot.core.config import (
    Environment,
)
from bot.core.secrets import redact
from runner.backends.base import (
    COLLECT_MAX_BYTES,
    RunnerError,
    RunnerInfo,
    Step,
    StepResult,
    ToolStore,
)
from runner.backends.collect import CollectRefused, collect_files
from runner.backends.docker_archives import (
    files_archive,
    read_container_file,
    safe_relative,
    workspace_archive,
)
from runner.backends.docker_engine import (
    LABEL_MANAGED,
    LABEL_ROLE,
    LABEL_RUN_ID,
    api_error_text,
    inspect_state,
    kill_container,
    remove_container,
    remove_volume,
    safe_name,
    writable_volumes,
)
from runner.backends.docker_image import (
    needs_image_accounts,
    parse_user,
    pick_repo_digest,
    pullable_name,
    store_volume_name,
)
from runner.backends.docker_limits import (
    device_requests,
    effective_limits,
    gpus_flag,
    human_size,
    workspace_limit,
)
from runner.backends.docker_output import OutputBuffer
from runner.backends.ownership import OWNER_LABEL, Owner, this_process
from runner.backends.workspace_watch import WorkspaceWatch

log = structlog.get_logger(__name__)


RUN_MOUNT = "/paritybot"
WORKSPACE_DIR = f"{RUN_MOUNT}/workspace"
# A scratch step gets a new volume of its own at RUN_MOUNT, never the run's: its directory and home
# sit where a workspace step's would, but nothing of the run (the workspace, the home) is there.
SCRATCH_PATH = f"{RUN_MOUNT}/scratch"
HOME_DIR = f"{RUN_MOUNT}/home"
STORE_MOUNT = "/paritybot-store"
# A fresh volume's root belongs to root; the data lives one level down, in a directory the
# runner creates with the step user's ownership.
STORE_SUBDIR = "data"
DEFAULT_USER = "1000:1000"
NVIDIA_HINT = (
    "the container engine has no NVIDIA runtime: install the NVIDIA Container Toolkit "
    "(nvidia-container-toolkit) on the runner's machine and restart the engine, or set `gpus: none`"
)
_GPU_ERRORS = (
    "could not select device driver",
    "nvidia-container-cli",
    "unknown or invalid runtime name: nvidia",
)
# The engine keeps no log of a step: its output is read from the attached stream, capped, and a
# json-file log would grow on the engine's disk as fast as the step prints (70 MB/s measured).
NO_ENGINE_LOG = LogConfig(type=LogConfig.types.NONE)
# How long close() waits for a step still finishing (one just cancelled removes its container).
CLOSE_WAIT_S = 60.0
OnOutput = Callable[[str], None]
T = TypeVar("T")


def _is_gpu_error(text: str) -> bool:
    return any(marker in text for marker in _GPU_ERRORS)


async def _in_thread(func: Callable[..., T], *args: Any) -> T:
    """``func(*args)`` in a worker thread that is never abandoned: if the caller is cancelled, the
    thread (which cannot be stopped) is waited for before the cancellation goes on. Otherwise a
    container it creates or removes would appear or linger after the runner's clean-up has looked."""
    future = asyncio.ensure_future(asyncio.to_thread(func, *args))
    try:
        return await asyncio.shield(future)
    except asyncio.CancelledError:
        await asyncio.wait({future})
        if not future.cancelled():
            future.exception()  # retrieved: the cancellation is what the caller sees
        raise


class DockerRunner:
    """Runs the steps of one run in containers of ``environment.image``; see the module docstring."""

    def __init__(
        self,
        environment: Environment,
        run_id: str,
        client: docker.DockerClient | None = None,
        *,
        redact: list[str] | None = None,
        reason: str = "",
        output_limit: int = 200_000,
        on_output: OnOutput | None = None,
        owns_client: bool | None = None,
        owner: Owner | None = None,
    ):
        if not environment.image:
            raise RunnerError(f"environment {environment.name} has no image; the container runner needs one")
        self.environment = environment
        self.run_id = run_id
        # What this runner starts is labelled with its owner, so that a neighbour on the same
        # engine that starts up leaves it alone while the owner lives (runner.backends.ownership).
        self.owner = owner or this_process()
        self._client = client
        # A client made here, or handed over with owns_client=True, is closed with the runner.
        self._own_client = client is None if owns_client is None else owns_client
        self._secrets = [s for s in (redact or []) if s]
        self._output_limit = output_limit
        self._on_output = on_output
        self._info = RunnerInfo(
            kind="docker",
            reason=reason,
            image=environment.image,
            gpus=gpus_flag(environment.gpus),
            env=dict(environment.env),
        )
        self._image_id: str | None = None
        self._uid_gid: tuple[int, int] | None = None
        self._host_config: dict[str, Any] = {}
        self._workspace_limit = 0
        self._watch: WorkspaceWatch | None = None
        # Another owner may run another attempt of the same run on this engine: never the same volume.
        owner_tag = hashlib.sha256(self.owner.label.encode()).hexdigest()[:8]
        self._run_volume = f"paritybot-run-{safe_name(run_id)}-{owner_tag}"
        # Every volume of this run by name, for close(): the engine re-creates a removed named
        # volume, unlabelled, when a container mounting it is created (a step racing a clean-up).
        self._volumes = {self._run_volume}
        self._volumes_ready = False
        self._stores_ready: set[str] = set()
        self._copied: Path | None = None
        self._current: Container | None = None
        self._cancelled = False
        self._cancel_event = asyncio.Event()
        # Steps under way; close() cleans up only once they have ended (see close()).
        self._in_flight = 0
        self._idle = asyncio.Event()
        self._idle.set()

    @property
    def info(self) -> RunnerInfo:
        return self._info

    @property
    def client(self) -> docker.DockerClient:
        if self._client is None:
            raise RunnerError("the container runner was used before prepare()")
        return self._client

    # --- prepare -------------------------------------------------------------------------------

    async def prepare(self) -> None:
        """Connect, resolve (or pull) the image, check the limits; raises RunnerError with the cause."""
        if self._client is None:
            try:
                self._client = await asyncio.to_thread(docker.from_env)
            except docker.errors.DockerException as exc:
                raise RunnerError(f"no container engine reachable: {exc}") from None
        image = await asyncio.to_thread(self._resolve_image)
        self._image_id = image.id
        repo_digest = pick_repo_digest(self.environment.image or "", image.attrs.get("RepoDigests") or [])
        self._info.image_digest = repo_digest.split("@", 1)[1] if repo_digest else image.id
        self._info.image_ref = repo_digest or pullable_name(self.environment.image or "") or image.id
        self._uid_gid = await asyncio.to_thread(self._resolve_user)
        self._host_config = await asyncio.to_thread(self._limits)
        self._workspace_limit = workspace_limit(self.environment)
        log.info(
            "container runner ready",
            run_id=self.run_id,
            image=self.environment.image,
            image_ref=self._info.image_ref,
            user=self._user,
            gpus=self._info.gpus,
        )

    def _resolve_image(self) -> Any:
        name = self.environment.image or ""
        try:
            return self.client.images.get(name)
        except docker.errors.ImageNotFound:
            pass
        except docker.errors.APIError as exc:
            raise RunnerError(f"could not inspect image {name}: {api_error_text(exc)}") from None
        log.info("pulling image", image=name)
        try:
            # pull() with no tag means :latest; a name with a tag or digest pulls exactly that.
            return self.client.images.pull(name)
        except (docker.errors.APIError, docker.errors.ImageNotFound) as exc:
            raise RunnerError(
                f"image {name} is not on the container engine and could not be pulled: {api_error_text(exc)}"
            ) from None

    @property
    def _user(self) -> str:
        return self.environment.user or DEFAULT_USER

    def _resolve_user(self) -> tuple[int, int]:
        spec = self._user
        if not needs_image_accounts(spec):
            return parse_user(spec)
        passwd = self._image_file("/etc/passwd")
        group = self._image_file("/etc/group") if ":" in spec else None
        return parse_user(spec, passwd, group)

    def _image_file(self, path: str) -> str | None:
        """A file of the image, read from a created (never started) container."""
        container = self.client.containers.create(self._image_id, ["true"], labels=self._labels("step"))
        try:
            return read_container_file(container, path, COLLECT_MAX_BYTES)
        except docker.errors.NotFound:
            return None
        except CollectRefused as exc:
            raise RunnerError(f"the image's {path} {exc.reason}") from None
        finally:
            container.remove(force=True)

    def _limits(self) -> dict[str, Any]:
        info = self.client.info()
        try:
            limits = effective_limits(
                self.environment.limits, int(info.get("MemTotal") or 0), int(info.get("NCPU") or 0)
            )
        except ValueError as exc:
            raise RunnerError(f"environment {self.environment.name}: bad size in {exc}") from None
        self._info.memory = human_size(limits.memory)
        self._info.shm_size = human_size(limits.shm)
        log.info(
            "container limits",
            memory=self._info.memory,
            shm=self._info.shm_size,
            tmpfs=human_size(limits.tmpfs),
            cpus=limits.cpus,
        )
        return {
            "mem_limit": limits.memory,
            "memswap_limit": limits.memory,  # the same value: no swap on top of the memory limit
            "pids_limit": limits.pids,
            "nano_cpus": int(limits.cpus * 1e9),
            "shm_size": limits.shm,
            "tmpfs": {"/tmp": f"rw,exec,nosuid,nodev,size={limits.tmpfs},mode=1777"},
            "read_only": True,
            "cap_drop": ["ALL"],
            "security_opt": ["no-new-privileges"],
            "device_requests": device_requests(self.environment.gpus),
        }

    # --- run -----------------------------------------------------------------------------------

    async def run(self, step: Step, workspace: Path) -> StepResult:
        if self._cancelled:
            return StepResult(name=step.name, exit_code=None, cancelled=True)
        with self._busy():
            return await self._run(step, workspace)

    @contextlib.contextmanager
    def _busy(self) -> Iterator[None]:
        self._in_flight += 1
        self._idle.clear()
        try:
            yield
        finally:
            self._in_flight -= 1
            if self._in_flight == 0:
                self._idle.set()

    async def _run(self, step: Step, workspace: Path) -> StepResult:
        if self._image_id is None:
            await self.prepare()
        for rel in step.inject:
            safe_relative(rel)
        started = time.monotonic()
        try:
            container = await _in_thread(self._create, step, workspace)
            self._current = container
            try:
                return await self._run_watched(step, container, started)
            finally:
                self._current = None
                await _in_thread(remove_container, container)
        except (docker.errors.DockerException, requests.RequestException) as exc:
            # The engine failed under us (restarted, disk full): the run cannot go on.
            raise RunnerError(f"{step.name}: container engine error: {api_error_text(exc)}") from None

    async def start_session(self, step: Step, workspace: Path) -> str:
        """A container like ``step``'s, on the run's volume, left running for a person to work in
        (``docker exec``; `paritybot repro`); ``step.argv`` must not end by itself. It is removed
        with the run's volume when the runner closes. Returns the container's id."""
        if self._image_id is None:
            await self.prepare()
        with self._busy():
            try:
                container = await _in_thread(self._create, step, workspace)
                await _in_thread(container.start)
            except (docker.errors.DockerException, requests.RequestException) as exc:
                raise RunnerError(f"{step.name}: container engine error: {api_error_text(exc)}") from None
        return str(container.id)

    def _create(self, step: Step, workspace: Path) -> Container:
        name = f"paritybot-{safe_name(self.run_id)}-{safe_name(step.name)}-{os.urandom(3).hex()}"
        if step.scratch:
            mounts = {self._scratch_volume(name): {"bind": RUN_MOUNT, "mode": "rw"}}
        else:
            self._ensure_volumes()
            mounts = self._mounts()
        env = {
            "HOME": HOME_DIR,
            "USER": "paritybot",
            "LOGNAME": "paritybot",
            "TMPDIR": "/tmp",
            **self._info.env,
            **step.env,
        }
        if step.store is not None:
            mounts |= self._store_mount(step.store)
            env[step.store.env] = f"{STORE_MOUNT}/{STORE_SUBDIR}"
        root = SCRATCH_PATH if step.scratch else WORKSPACE_DIR
        workdir = f"{root}/{safe_relative(step.workdir)}" if step.workdir not in (".", "") else root
        try:
            container = self.client.containers.create(
                self._image_id,
                step.argv,
                name=name,
                user=self._user,
                environment=env,
                working_dir=workdir,
                labels=self._labels("step", step=step.name),
                network_mode="bridge" if step.network else "none",
                volumes=mounts,
                stdin_open=False,
                tty=False,
                log_config=NO_ENGINE_LOG,
                ulimits=[self._file_size_limit()],
                **self._host_config,
            )
        except docker.errors.APIError as exc:
            raise RunnerError(f"{step.name}: could not create the container: {api_error_text(exc)}") from None
        try:
            if step.scratch:
                self._fill_scratch(container, step, root)
            else:
                self._fill(container, step, workspace)
        except BaseException:
            remove_container(container)
            raise
        return container

    def _file_size_limit(self) -> Ulimit:
        """No file may grow past the workspace's limit: the kernel stops that writer at once, where
        the workspace watchdog (for many files) reads the volume's size once a second."""
        return Ulimit(name="fsize", soft=self._workspace_limit, hard=self._workspace_limit)

    def _fill(self, container: Container, step: Step, workspace: Path) -> None:
        """Copy the workspace (first step only) and the step's injected files into the run volume."""
        uid, gid = self._uid_gid or (0, 0)
        resolved = workspace.resolve()
        if self._copied is None:
            try:
                with workspace_archive(resolved, "workspace", uid, gid) as archive:
                    container.put_archive(RUN_MOUNT, archive)
            except OSError as exc:
                raise RunnerError(
                    f"could not copy the workspace {workspace} into the container: {exc}"
                ) from None
            self._copied = resolved
        elif self._copied != resolved:
            # Steps share one copy; a second checkout would silently mix with the first.
            raise RunnerError(
                f"this run's workspace is {self._copied}, not {resolved}: one runner serves one workspace"
            )
        files = {f"workspace/{safe_relative(rel)}": text for rel, text in step.inject.items()}
        container.put_archive(RUN_MOUNT, files_archive(["home"], files, uid, gid))

    def _fill_scratch(self, container: Container, step: Step, root: str) -> None:
        """A scratch step gets its injected files in its own volume; the workspace is never there."""
        uid, gid = self._uid_gid or (0, 0)
        top = root.removeprefix(f"{RUN_MOUNT}/")
        files = {f"{top}/{safe_relative(rel)}": text for rel, text in step.inject.items()}
        container.put_archive(RUN_MOUNT, files_archive(["home", top], files, uid, gid))

    def _ensure_volumes(self) -> None:
        if self._volumes_ready:
            return
        self._get_or_create_volume(self._run_volume, self._labels("workspace"))
        self._volumes_ready = True

    def _scratch_volume(self, container_name: str) -> str:
        """A new, empty volume for one scratch step; removed with the run's volumes."""
        name = f"{container_name}-scratch"
        self._volumes.add(name)
        self.client.volumes.create(name, labels=self._labels("workspace"))
        return name

    def _store_mount(self, store: ToolStore) -> dict[str, dict[str, str]]:
        """The store's volume, writable only for a step that sees no workspace (see Step)."""
        uid = (self._uid_gid or (0, 0))[0]
        name = store_volume_name(store.key, self._info.image_digest or self._image_id or "", uid)
        if name not in self._stores_ready:
            self._ensure_store(name)
            self._stores_ready.add(name)
        return {name: {"bind": STORE_MOUNT, "mode": "rw" if store.writable else "ro"}}

    def _ensure_store(self, name: str) -> None:
        self._get_or_create_volume(name, {LABEL_MANAGED: "1", LABEL_ROLE: "store"})
        # The data directory must belong to the step user; a never-started container with the
        # volume mounted lets the engine create it with that owner. Done by every run that uses
        # the store, so a run never sees a volume another run has created but not yet prepared.
        holder = self.client.containers.create(
            self._image_id,
            ["true"],
            labels=self._labels("step"),
            volumes={name: {"bind": STORE_MOUNT, "mode": "rw"}},
            network_mode="none",
        )
        try:
            uid, gid = self._uid_gid or (0, 0)
            holder.put_archive(STORE_MOUNT, files_archive([STORE_SUBDIR], {}, uid, gid))
        finally:
            remove_container(holder)

    def _get_or_create_volume(self, name: str, labels: dict[str, str]) -> Any:
        try:
            return self.client.volumes.get(name)
        except docker.errors.NotFound:
            return self.client.volumes.create(name, labels=labels)

    def _mounts(self) -> dict[str, dict[str, str]]:
        return {self._run_volume: {"bind": RUN_MOUNT, "mode": "rw"}}

    def _labels(self, role: str, **extra: str) -> dict[str, str]:
        return {
            LABEL_MANAGED: "1",
            LABEL_RUN_ID: self.run_id,
            LABEL_ROLE: role,
            OWNER_LABEL: self.owner.label,
        } | {f"paritybot.{k}": v for k, v in extra.items()}

    async def _run_watched(self, step: Step, container: Container, started: float) -> StepResult:
        """The step under the workspace's watchdog (:mod:`runner.backends.workspace_watch`): the run's watcher,
        or for a scratch step one of its own over the volumes it may write."""
        if step.scratch:
            watch = await _in_thread(self._start_watch, writable_volumes(container))
        else:
            if self._watch is None:
                self._watch = await _in_thread(self._start_watch, [self._run_volume])
            watch = self._watch
        stop = threading.Event()

        def stop_step() -> None:  # called from the watcher's thread
            # Kept as well as sent: a kill that comes before the container has started does
            # nothing at the engine, and the step would then run unwatched (_run_created).
            stop.set()
            kill_container(container)

        try:
            refused = watch.step_started(stop_step)
            if refused is not None:
                raise RunnerError(f"{step.name}: {refused}")
            try:
                result = await self._run_created(step, container, started, stop)
            except BaseException:
                # The step never gave a result (its container went, or it was cancelled): a final
                # reading decides nothing, and waiting for it would hold the error back.
                watch.step_abandoned()
                raise
            stopped_by = await asyncio.to_thread(watch.step_ended)
        finally:
            if watch is not self._watch:
                await asyncio.to_thread(watch.close)
        if stopped_by is None:
            return result
        note = f"\n[paritybot] stopped: {stopped_by}\n"
        return result.model_copy(update={"stopped_by_limit": stopped_by, "output": result.output + note})

    def _start_watch(self, volumes: list[str]) -> WorkspaceWatch:
        limits = self.environment.limits
        watch = WorkspaceWatch(
            self.client,
            self._image_id or "",
            volumes,
            self._workspace_limit,
            limits.workspace_size,
            self._labels("watch"),
        )
        watch.start()
        return watch

    async def _run_created(
        self, step: Step, container: Container, started: float, stop: threading.Event
    ) -> StepResult:
        buffer = OutputBuffer(self._output_limit)
        if self._cancelled:
            return StepResult(name=step.name, exit_code=None, cancelled=True)
        # Attached before start, every byte is seen without the engine keeping a log (NO_ENGINE_LOG).
        stream = await asyncio.to_thread(container.attach, stdout=True, stderr=True, stream=True, logs=False)
        try:
            await asyncio.to_thread(container.start)
        except docker.errors.APIError as exc:
            text = api_error_text(exc)
            if _is_gpu_error(text):
                raise RunnerError(f"{step.name}: GPUs were requested but {NVIDIA_HINT} ({text})") from None
            return StepResult(
                name=step.name,
                exit_code=None,
                error=f"{step.name}: the container did not start: {text}",
                duration_s=time.monotonic() - started,
            )
        if stop.is_set():
            # The watchdog stopped the step while its container was starting: kill it now.
            await asyncio.to_thread(kill_container, container)
        pump = asyncio.create_task(asyncio.to_thread(self._pump, stream, buffer, container, step.timeout_s))
        cancel_wait = asyncio.create_task(self._cancel_event.wait())
        done, _ = await asyncio.wait(
            {pump, cancel_wait}, timeout=step.timeout_s, return_when="FIRST_COMPLETED"
        )
        timed_out = pump not in done and not self._cancelled
        cancel_wait.cancel()
        if pump not in done:
            await asyncio.to_thread(kill_container, container)
        status = await pump
        found = await asyncio.to_thread(inspect_state, container)
        state = found or {}
        exit_code = state.get("ExitCode", status)
        oom = bool(state.get("OOMKilled"))
        root = SCRATCH_PATH if step.scratch else WORKSPACE_DIR
        collected, refused = await asyncio.to_thread(self._collect, container, step, root)
        output = buffer.text(self._secrets)
        if oom:
            output += f"\n[paritybot] killed: out of memory (limit {self._info.memory})\n"
        elif timed_out:
            output += f"\n[paritybot] killed: still running after {step.timeout_s:g} s\n"
        duration = time.monotonic() - started
        # Removed under the step (a neighbour's clean-up, a person): no exit code, and say why.
        gone = None if found is not None else f"{step.name}: its container was removed while it ran"
        log.info("step finished", step=step.name, exit_code=exit_code, duration_s=round(duration, 3), oom=oom)
        return StepResult(
            name=step.name,
            exit_code=exit_code,
            output=output,
            error=gone,
            duration_s=duration,
            timed_out=timed_out,
            oom_killed=oom,
            cancelled=self._cancelled and not timed_out,
            collected=collected,
            refused=refused,
        )

    def _pump(
        self, stream: Iterator[bytes], buffer: OutputBuffer, container: Container, timeout: float
    ) -> int | None:
        """Read the output until the container ends, then return its exit status (thread body)."""
        lock = threading.Lock()
        try:
            for chunk in stream:
                text = buffer.feed(chunk)
                if self._on_output and text:
                    with lock:
                        self._on_output(redact(text, self._secrets))
        except docker.errors.DockerException as exc:
            log.warning("output stream broke", error=str(exc))
        try:
            # The stream ends when the container's output closes; wait() then returns at once.
            result = container.wait(timeout=timeout + 60)
        except Exception as exc:  # the engine went away or the wait timed out; the state says more
            log.warning("waiting for the container failed", error=str(exc))
            return None
        code = result.get("StatusCode")
        return code if isinstance(code, int) else None

    def _collect(self, container: Container, step: Step, root: str) -> tuple[dict[str, str], dict[str, str]]:
        """The step's ``collect`` files under ``root``, each read only up to its cap (:mod:`runner.backends.collect`)."""

        def read_one(rel: str) -> str | None:
            try:
                path = f"{root}/{safe_relative(rel)}"
                text = read_container_file(container, path, step.collect_max_bytes)
            except (docker.errors.NotFound, RunnerError):
                return None
            except (docker.errors.APIError, tarfile.TarError) as exc:
                log.warning("could not collect a file", path=rel, error=str(exc))
                return None
            return None if text is None else redact(text, self._secrets)

        return collect_files(step.collect, read_one)

    def read_running(self, rel: str, limit: int) -> str | None:
        """A workspace file of the step now running (:class:`ReadsRunningStep`), read through the
        engine like a collected file: a link or anything but a plain file is refused."""
        container = self._current
        if container is None:
            return None
        try:
            text = read_container_file(container, f"{WORKSPACE_DIR}/{safe_relative(rel)}", limit)
        except (
            docker.errors.DockerException,
            requests.RequestException,
            RunnerError,
            CollectRefused,
            tarfile.TarError,
        ):
            return None  # not there yet, gone with its container, or refused: nothing to show
        return None if text is None else redact(text, self._secrets)

    # --- cancel and close -------------------------------------------------------------------------

    async def cancel(self) -> None:
        self._cancelled = True
        self._cancel_event.set()
        container = self._current
        if container is not None:
            await asyncio.to_thread(kill_container, container)

    async def close(self) -> None:
        """Cancel, then remove the run's containers and volumes. Never raises for the clean-up:
        what it cannot remove is logged, and removed at the next start-up (remove_leftovers)."""
        await self.cancel()
        if self._client is None:
            return
        # A step cancelled just now is still removing its container (or finishing one it was
        # creating): cleaning up beside it would race it for the containers and the volume.
        try:
            await asyncio.wait_for(self._idle.wait(), CLOSE_WAIT_S)
        except TimeoutError:
            log.warning("a step was still ending when the runner closed", run_id=self.run_id)
        if self._watch is not None:
            await asyncio.to_thread(self._watch.close)
        try:
            await asyncio.to_thread(self._remove_run_volume)
        except (RunnerError, docker.errors.DockerException, requests.RequestException) as exc:
            log.warning(
                "could not remove the run's containers and volumes", run_id=self.run_id, error=str(exc)
            )
        if self._own_client:
            await asyncio.to_thread(self._client.close)

    def _remove_run_volume(self) -> None:
        # Containers of this run hold the volumes; remove any left by a step that crashed midway.
        # Only this owner's: another attempt of the run may be running elsewhere on the engine.
        mine = {"label": [f"{LABEL_RUN_ID}={self.run_id}", f"{OWNER_LABEL}={self.owner.label}"]}
        # sparse: no inspect per container, which answers 404 for one being removed meanwhile.
        for container in self.client.containers.list(all=True, sparse=True, filters=mine):
            remove_container(container)
        # The workspace volume and every scratch step's volume, each once nothing holds it;
        # by name as well as by label, which a re-created volume lacks.
        labelled = {volume.name for volume in self.client.volumes.list(filters=mine)}
        for name in sorted(labelled | self._volumes):
            remove_volume(self.client, name)
