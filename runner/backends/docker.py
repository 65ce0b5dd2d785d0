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
  died (:func:`remove_orphans`). A scratch step (``Step.scratch``) gets a new volume of its own
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

Why one module past 400 lines: :class:`DockerRunner` is one container lifecycle per run (image,
volumes, steps, cancellation, clean-up) whose parts share its state; the pure helpers above it
(limits, devices, users, archives, output) are plain functions tested on their own.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import re
import tarfile
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker
import docker.errors
import requests
import structlog
from docker.models.containers import Container
from docker.types import DeviceRequest, LogConfig, Ulimit
from docker.utils import parse_bytes

from bot.core.config import (
    CPUS_DEFAULT_MAX,
    MEMORY_DEFAULT_MAX,
    SHM_DEFAULT_MAX,
    TMPFS_DEFAULT_MAX,
    Environment,
    ResourceLimits,
)
from bot.core.secrets import SECRET_MIN_LEN, redact
from runner.backends.base import (
    COLLECT_MAX_BYTES,
    RunnerError,
    RunnerInfo,
    Step,
    StepResult,
    ToolStore,
)
from runner.backends.collect import CollectRefused, check_archive_stat, collect_files, read_archive_file
from runner.backends.workspace_watch import WorkspaceWatch

log = structlog.get_logger(__name__)

LABEL_MANAGED = "paritybot.managed"
LABEL_RUN_ID = "paritybot.run-id"
# step, watch (the workspace watcher beside the steps), workspace (per-run volume) or store (kept across runs)
LABEL_ROLE = "paritybot.role"

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
_ARCHIVE_CHUNK = 1 << 20  # how much of a collected file's archive is read at a time
OnOutput = Callable[[str], None]


# --- pure helpers ----------------------------------------------------------------------------------


def device_requests(gpus: str | int | list[str]) -> list[DeviceRequest]:
    """``environment.gpus`` as Docker device requests: 'all', a count, device ids, or none."""
    if gpus == "none" or gpus == 0 or gpus == []:
        return []
    if gpus == "all":
        return [DeviceRequest(count=-1, capabilities=[["gpu"]])]
    if isinstance(gpus, int):
        return [DeviceRequest(count=gpus, capabilities=[["gpu"]])]
    if isinstance(gpus, list):
        return [DeviceRequest(device_ids=[str(g) for g in gpus], capabilities=[["gpu"]])]
    raise ValueError(f"gpus must be 'all', 'none', a count or a list of device ids, not {gpus!r}")


@dataclass(frozen=True)
class EffectiveLimits:
    """The limits a step container gets, sizes in bytes."""

    memory: int
    shm: int
    tmpfs: int
    cpus: float
    pids: int


def effective_limits(limits: ResourceLimits, engine_memory: int, engine_cpus: int) -> EffectiveLimits:
    """The configured limits, with unset ones derived from the engine's machine.

    The rule, said in the config schema too: memory = min(16g, 3/4 of the engine's memory);
    shm = min(8g, memory / 2); tmpfs = min(4g, memory / 4); cpus = min(8, the engine's CPUs), and
    a configured CPU count above the engine's is lowered to it (Docker refuses more). An engine
    that reports no memory or CPU count (0) gets the maximums. Raises ValueError on a bad size.
    """
    if limits.memory is not None:
        memory = _size(limits.memory, "memory")
    else:
        memory = _size(MEMORY_DEFAULT_MAX, "memory")
        if engine_memory > 0:
            memory = min(memory, _round_down_mib(engine_memory * 3 // 4))
    if limits.shm_size is not None:
        shm = _size(limits.shm_size, "shm_size")
    else:
        shm = min(_size(SHM_DEFAULT_MAX, "shm_size"), _round_down_mib(memory // 2))
    if limits.tmpfs_size is not None:
        tmpfs = _size(limits.tmpfs_size, "tmpfs_size")
    else:
        tmpfs = min(_size(TMPFS_DEFAULT_MAX, "tmpfs_size"), _round_down_mib(memory // 4))
    cpus = limits.cpus if limits.cpus is not None else CPUS_DEFAULT_MAX
    if engine_cpus > 0:
        cpus = min(cpus, float(engine_cpus))
    return EffectiveLimits(memory=memory, shm=shm, tmpfs=tmpfs, cpus=cpus, pids=limits.pids)


def _size(value: str, key: str) -> int:
    try:
        return int(parse_bytes(value))
    except docker.errors.DockerException as exc:
        raise ValueError(f"limits.{key} = {value!r}: {exc}") from None


def _round_down_mib(n: int) -> int:
    return max(n >> 20, 1) << 20


def human_size(n: int) -> str:
    """Bytes in Docker's size syntax, as short as it stays exact: 8g, 768m, 1536k, 1000."""
    for suffix, shift in (("g", 30), ("m", 20), ("k", 10)):
        if n and n % (1 << shift) == 0:
            return f"{n >> shift}{suffix}"
    return str(n)


def gpus_flag(gpus: str | int | list[str]) -> str | None:
    """The ``docker run --gpus`` value asking for the same GPUs; None when no GPU is requested."""
    if not device_requests(gpus):
        return None
    if isinstance(gpus, list):
        # The CLI splits --gpus on commas, so a device list must be quoted inside the value.
        return '"device=' + ",".join(str(g) for g in gpus) + '"'
    return str(gpus)


def _edge_redact(head: str, tail: str, secrets: Iterable[str]) -> tuple[str, str]:
    """Hide a secret cut in two by the output cap: its start ends the head, its end starts the tail."""
    for secret in (s for s in secrets if len(s) >= SECRET_MIN_LEN):
        for n in range(len(secret) - 1, SECRET_MIN_LEN - 1, -1):
            if head.endswith(secret[:n]):
                head = head[: len(head) - n] + "***"
                break
        for n in range(len(secret) - 1, SECRET_MIN_LEN - 1, -1):
            if tail.startswith(secret[-n:]):
                tail = "***" + tail[n:]
                break
    return head, tail


class OutputBuffer:
    """Keeps the first and the last ``limit // 2`` characters of a stream, in bounded memory."""

    def __init__(self, limit: int):
        self._half = max(limit // 2, 1)
        self._head: list[str] = []
        self._head_len = 0
        self._tail = ""
        self._dropped = 0
        self._decoder = _Utf8Decoder()

    def feed(self, chunk: bytes) -> str:
        """Take a chunk; returns its decoded text (all of it, whatever the cap keeps)."""
        decoded = self._decoder.decode(chunk)
        text = decoded
        room = self._half - self._head_len
        if room > 0:
            self._head.append(text[:room])
            self._head_len += min(room, len(text))
            text = text[room:]
        if text:
            self._tail += text
            if len(self._tail) > self._half:
                self._dropped += len(self._tail) - self._half
                self._tail = self._tail[-self._half :]
        return decoded

    def text(self, secrets: Iterable[str] = ()) -> str:
        self.feed(b"")
        self._tail += self._decoder.decode(b"", final=True)
        head, tail = "".join(self._head), self._tail
        secrets = list(secrets)
        if not self._dropped:
            return redact(head + tail, secrets)
        head, tail = _edge_redact(redact(head, secrets), redact(tail, secrets), secrets)
        return f"{head}\n\n… {self._dropped} characters cut …\n\n{tail}"


class _Utf8Decoder:
    def __init__(self) -> None:
        import codecs

        self._dec = codecs.getincrementaldecoder("utf-8")("replace")

    def decode(self, data: bytes, final: bool = False) -> str:
        return self._dec.decode(data, final)


def parse_user(spec: str, passwd: str | None = None, group: str | None = None) -> tuple[int, int]:
    """Numeric (uid, gid) for a Docker ``user`` value, resolved the way the engine resolves it.

    ``uid[:gid]`` needs no files; a name needs the image's ``/etc/passwd`` (and ``/etc/group`` for a
    group name). A uid without a gid takes the passwd entry's group, else 0, as Docker does.
    """
    user, _, grp = spec.partition(":")
    users = _colon_table(passwd)  # name → [name, password, uid, gid, ...]
    if user.isdigit():
        uid = int(user)
        entry = next((row for row in users.values() if row[2] == user), None)
    elif user in users and users[user][2].isdigit():
        entry = users[user]
        uid = int(entry[2])
    else:
        raise RunnerError(f"user {user!r} is not in the image's /etc/passwd; use a numeric uid:gid")
    default_gid = int(entry[3]) if entry and len(entry) > 3 and entry[3].isdigit() else 0
    if not grp:
        return uid, default_gid
    if grp.isdigit():
        return uid, int(grp)
    groups = _colon_table(group)  # name → [name, password, gid, members]
    if grp in groups and groups[grp][2].isdigit():
        return uid, int(groups[grp][2])
    raise RunnerError(f"group {grp!r} is not in the image's /etc/group; use a numeric uid:gid")


def _colon_table(text: str | None) -> dict[str, list[str]]:
    """name → all fields of its line, for passwd and group files."""
    table: dict[str, list[str]] = {}
    for line in (text or "").splitlines():
        fields = line.split(":")
        if len(fields) >= 3 and not line.startswith("#"):
            table.setdefault(fields[0], fields)
    return table


def needs_image_accounts(spec: str) -> bool:
    """Whether resolving ``spec`` needs the image's passwd/group files."""
    user, sep, grp = spec.partition(":")
    return not (user.isdigit() and sep and grp.isdigit())


def pick_repo_digest(image_name: str, repo_digests: list[str]) -> str | None:
    """The ``repo@sha256:…`` naming the configured repository, else the first one, else None."""
    repo = _repository(image_name)
    for ref in repo_digests:
        if ref.split("@", 1)[0] == repo:
            return ref
    return repo_digests[0] if repo_digests else None


def pullable_name(image_name: str) -> str | None:
    """The configured ``name:tag`` when the image has no registry digest (built on this machine):
    what a reader can pull or build, unlike a local image id. None for an id or a digest."""
    if not image_name or image_name.startswith("sha256:") or "@" in image_name:
        return None
    return image_name


def _repository(image_name: str) -> str:
    name = image_name.split("@", 1)[0]
    # A tag follows the last colon only if that colon comes after the last slash (registry:port/…).
    if ":" in name.rsplit("/", 1)[-1]:
        name = name.rsplit(":", 1)[0]
    return name


def store_volume_name(key: str, image_digest: str, uid: int) -> str:
    """One volume per (store key, image, user): environments built elsewhere are never mixed in."""
    digest = image_digest.split(":", 1)[-1][:16]
    return f"paritybot-store-{key}-{digest}-u{uid}"


def _safe_name(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "-", text)[:100]


def _api_error_text(exc: Exception) -> str:
    explanation = getattr(exc, "explanation", None)
    if isinstance(explanation, bytes):
        explanation = explanation.decode("utf-8", "replace")
    return str(explanation or exc).strip()


def _is_gpu_error(text: str) -> bool:
    return any(marker in text for marker in _GPU_ERRORS)


# --- tar archives in and out of containers -----------------------------------------------------------


def _owned(uid: int, gid: int) -> Callable[[tarfile.TarInfo], tarfile.TarInfo]:
    def set_owner(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.uid, info.gid, info.uname, info.gname = uid, gid, "", ""
        return info

    return set_owner


def workspace_archive(workspace: Path, top: str, uid: int, gid: int) -> tempfile.SpooledTemporaryFile[bytes]:
    """A tar of ``workspace`` under ``top/``, every entry owned by the step user; spooled to disk."""
    # Returned open: the caller streams it to the engine and closes it.
    spool: tempfile.SpooledTemporaryFile[bytes] = tempfile.SpooledTemporaryFile(max_size=32 << 20)  # noqa: SIM115
    with tarfile.open(fileobj=spool, mode="w", format=tarfile.PAX_FORMAT) as tar:
        tar.add(workspace, arcname=top, recursive=True, filter=_owned(uid, gid))
    spool.seek(0)
    return spool


def files_archive(dirs: Iterable[str], files: dict[str, str], uid: int, gid: int) -> bytes:
    """A tar with directories and text files (path → text), every entry owned by the step user."""
    buf = io.BytesIO()
    now = time.time()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        made: set[str] = set()
        for path in [*dirs, *(str(Path(p).parent) for p in files)]:
            parts = Path(path).parts
            for i in range(1, len(parts) + 1):
                sub = "/".join(parts[:i])
                if sub in made or sub == ".":
                    continue
                made.add(sub)
                info = tarfile.TarInfo(sub)
                info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, now
                tar.addfile(_owned(uid, gid)(info))
        for path, text in files.items():
            data = text.encode("utf-8")
            info = tarfile.TarInfo(path)
            info.size, info.mode, info.mtime = len(data), 0o644, now
            tar.addfile(_owned(uid, gid)(info), io.BytesIO(data))
    return buf.getvalue()


def _safe_relative(rel: str) -> str:
    """A workspace-relative path that cannot climb out of the workspace."""
    parts = Path(rel).parts
    if not parts or Path(rel).is_absolute() or ".." in parts:
        raise RunnerError(f"path {rel!r} must be relative to the workspace and stay inside it")
    return "/".join(parts)


# --- the runner ------------------------------------------------------------------------------------


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
    ):
        if not environment.image:
            raise RunnerError(f"environment {environment.name} has no image; the container runner needs one")
        self.environment = environment
        self.run_id = run_id
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
        self._run_volume = f"paritybot-run-{_safe_name(run_id)}"
        self._volumes_ready = False
        self._stores_ready: set[str] = set()
        self._copied: Path | None = None
        self._current: Container | None = None
        self._cancelled = False
        self._cancel_event = asyncio.Event()

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
            raise RunnerError(f"could not inspect image {name}: {_api_error_text(exc)}") from None
        log.info("pulling image", image=name)
        try:
            # pull() with no tag means :latest; a name with a tag or digest pulls exactly that.
            return self.client.images.pull(name)
        except (docker.errors.APIError, docker.errors.ImageNotFound) as exc:
            raise RunnerError(
                f"image {name} is not on the container engine and could not be pulled: {_api_error_text(exc)}"
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
            return _read_container_file(container, path, COLLECT_MAX_BYTES)
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
        if self._image_id is None:
            await self.prepare()
        for rel in step.inject:
            _safe_relative(rel)
        started = time.monotonic()
        try:
            container = await asyncio.to_thread(self._create, step, workspace)
            self._current = container
            try:
                return await self._run_watched(step, container, started)
            finally:
                self._current = None
                await asyncio.to_thread(_remove_container, container)
        except (docker.errors.DockerException, requests.RequestException) as exc:
            # The engine failed under us (restarted, disk full): the run cannot go on.
            raise RunnerError(f"{step.name}: container engine error: {_api_error_text(exc)}") from None

    def _create(self, step: Step, workspace: Path) -> Container:
        name = f"paritybot-{_safe_name(self.run_id)}-{_safe_name(step.name)}-{os.urandom(3).hex()}"
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
        workdir = f"{root}/{_safe_relative(step.workdir)}" if step.workdir not in (".", "") else root
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
            raise RunnerError(
                f"{step.name}: could not create the container: {_api_error_text(exc)}"
            ) from None
        try:
            if step.scratch:
                self._fill_scratch(container, step, root)
            else:
                self._fill(container, step, workspace)
        except BaseException:
            _remove_container(container)
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
        files = {f"workspace/{_safe_relative(rel)}": text for rel, text in step.inject.items()}
        container.put_archive(RUN_MOUNT, files_archive(["home"], files, uid, gid))

    def _fill_scratch(self, container: Container, step: Step, root: str) -> None:
        """A scratch step gets its injected files in its own volume; the workspace is never there."""
        uid, gid = self._uid_gid or (0, 0)
        top = root.removeprefix(f"{RUN_MOUNT}/")
        files = {f"{top}/{_safe_relative(rel)}": text for rel, text in step.inject.items()}
        container.put_archive(RUN_MOUNT, files_archive(["home", top], files, uid, gid))

    def _ensure_volumes(self) -> None:
        if self._volumes_ready:
            return
        self._get_or_create_volume(self._run_volume, self._labels("workspace"))
        self._volumes_ready = True

    def _scratch_volume(self, container_name: str) -> str:
        """A new, empty volume for one scratch step; removed with the run's volumes."""
        name = f"{container_name}-scratch"
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
            _remove_container(holder)

    def _get_or_create_volume(self, name: str, labels: dict[str, str]) -> Any:
        try:
            return self.client.volumes.get(name)
        except docker.errors.NotFound:
            return self.client.volumes.create(name, labels=labels)

    def _mounts(self) -> dict[str, dict[str, str]]:
        return {self._run_volume: {"bind": RUN_MOUNT, "mode": "rw"}}

    def _labels(self, role: str, **extra: str) -> dict[str, str]:
        return {LABEL_MANAGED: "1", LABEL_RUN_ID: self.run_id, LABEL_ROLE: role} | {
            f"paritybot.{k}": v for k, v in extra.items()
        }

    async def _run_watched(self, step: Step, container: Container, started: float) -> StepResult:
        """The step under the workspace's watchdog (:mod:`runner.backends.workspace_watch`): the run's watcher,
        or for a scratch step one of its own over the volumes it may write."""
        if step.scratch:
            watch = await asyncio.to_thread(self._start_watch, _writable_volumes(container))
        else:
            if self._watch is None:
                self._watch = await asyncio.to_thread(self._start_watch, [self._run_volume])
            watch = self._watch
        try:
            refused = watch.step_started(lambda: _kill(container))
            if refused is not None:
                raise RunnerError(f"{step.name}: {refused}")
            try:
                result = await self._run_created(step, container, started)
            finally:
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

    async def _run_created(self, step: Step, container: Container, started: float) -> StepResult:
        buffer = OutputBuffer(self._output_limit)
        if self._cancelled:
            return StepResult(name=step.name, exit_code=None, cancelled=True)
        # Attached before start, every byte is seen without the engine keeping a log (NO_ENGINE_LOG).
        stream = await asyncio.to_thread(container.attach, stdout=True, stderr=True, stream=True, logs=False)
        try:
            await asyncio.to_thread(container.start)
        except docker.errors.APIError as exc:
            text = _api_error_text(exc)
            if _is_gpu_error(text):
                raise RunnerError(f"{step.name}: GPUs were requested but {NVIDIA_HINT} ({text})") from None
            return StepResult(
                name=step.name,
                exit_code=None,
                error=f"{step.name}: the container did not start: {text}",
                duration_s=time.monotonic() - started,
            )
        pump = asyncio.create_task(asyncio.to_thread(self._pump, stream, buffer, container, step.timeout_s))
        cancel_wait = asyncio.create_task(self._cancel_event.wait())
        done, _ = await asyncio.wait(
            {pump, cancel_wait}, timeout=step.timeout_s, return_when="FIRST_COMPLETED"
        )
        timed_out = pump not in done and not self._cancelled
        cancel_wait.cancel()
        if pump not in done:
            await asyncio.to_thread(_kill, container)
        status = await pump
        state = (await asyncio.to_thread(_inspect_state, container)) or {}
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
        log.info("step finished", step=step.name, exit_code=exit_code, duration_s=round(duration, 3), oom=oom)
        return StepResult(
            name=step.name,
            exit_code=exit_code,
            output=output,
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
                path = f"{root}/{_safe_relative(rel)}"
                text = _read_container_file(container, path, step.collect_max_bytes)
            except (docker.errors.NotFound, RunnerError):
                return None
            except (docker.errors.APIError, tarfile.TarError) as exc:
                log.warning("could not collect a file", path=rel, error=str(exc))
                return None
            return None if text is None else redact(text, self._secrets)

        return collect_files(step.collect, read_one)

    # --- cancel and close -------------------------------------------------------------------------

    async def cancel(self) -> None:
        self._cancelled = True
        self._cancel_event.set()
        container = self._current
        if container is not None:
            await asyncio.to_thread(_kill, container)

    async def close(self) -> None:
        await self.cancel()
        if self._client is None:
            return
        if self._watch is not None:
            await asyncio.to_thread(self._watch.close)
        await asyncio.to_thread(self._remove_run_volume)
        if self._own_client:
            await asyncio.to_thread(self._client.close)

    def _remove_run_volume(self) -> None:
        # Containers of this run hold the volumes; remove any left by a step that crashed midway.
        for container in self.client.containers.list(
            all=True, filters={"label": f"{LABEL_RUN_ID}={self.run_id}"}
        ):
            _remove_container(container)
        # The workspace volume and every scratch step's volume.
        for volume in self.client.volumes.list(filters={"label": f"{LABEL_RUN_ID}={self.run_id}"}):
            with contextlib.suppress(docker.errors.NotFound):
                volume.remove(force=True)


def _writable_volumes(container: Container) -> list[str]:
    """The named volumes ``container`` mounts writable: what its step can fill."""
    mounts = container.attrs.get("Mounts") or []
    return [m["Name"] for m in mounts if m.get("Type") == "volume" and m.get("RW") and m.get("Name")]


def workspace_limit(environment: Environment) -> int:
    """``limits.workspace_size`` in bytes; a RunnerError naming the setting when it is not a size."""
    from docker.utils import parse_bytes

    try:
        size = int(parse_bytes(environment.limits.workspace_size))
    except docker.errors.DockerException as exc:
        raise RunnerError(f"environment {environment.name}: bad limits.workspace_size: {exc}") from None
    if size <= 0:
        raise RunnerError(f"environment {environment.name}: limits.workspace_size must be more than 0")
    return size


def _read_container_file(container: Container, path: str, limit: int) -> str | None:
    """A file of a container, refused from the engine's stat or cut off at ``limit`` bytes of archive."""
    chunks, path_stat = container.get_archive(path, chunk_size=_ARCHIVE_CHUNK)
    try:
        check_archive_stat(path_stat, limit)
    except CollectRefused:
        chunks.close()  # the response ends here; the engine stops sending the archive
        raise
    return read_archive_file(chunks, limit)


def _kill(container: Container) -> None:
    with contextlib.suppress(docker.errors.NotFound, docker.errors.APIError):
        container.kill()


def _remove_container(container: Container) -> None:
    with contextlib.suppress(docker.errors.NotFound):
        try:
            container.remove(force=True, v=False)
        except docker.errors.APIError as exc:
            # 409: removal already in progress (a concurrent cancel); that is the outcome we want.
            if getattr(exc, "status_code", None) != 409:
                raise


def _inspect_state(container: Container) -> dict[str, Any] | None:
    try:
        container.reload()
    except docker.errors.NotFound:
        return None
    state = container.attrs.get("State")
    return state if isinstance(state, dict) else None


def remove_orphans(client: docker.DockerClient, live_run_ids: set[str] | None = None) -> int:
    """Remove containers and per-run volumes left by runners that died; returns the container count.

    Call it at start-up, before taking jobs, with the ids of runs still in progress elsewhere
    (none, for a single runner). Store volumes are kept: they are meant to outlive runs.
    """
    live = live_run_ids or set()
    removed = 0
    for container in client.containers.list(all=True, filters={"label": f"{LABEL_MANAGED}=1"}):
        if container.labels.get(LABEL_RUN_ID) in live:
            continue
        _remove_container(container)
        removed += 1
    volumes = 0
    for volume in client.volumes.list(filters={"label": f"{LABEL_ROLE}=workspace"}):
        labels = volume.attrs.get("Labels") or {}
        if labels.get(LABEL_MANAGED) != "1" or labels.get(LABEL_RUN_ID) in live:
            continue
        try:
            volume.remove(force=True)
            volumes += 1
        except docker.errors.APIError as exc:
            log.warning("could not remove an orphaned volume", volume=volume.name, error=_api_error_text(exc))
    if removed or volumes:
        log.info("removed orphans", containers=removed, volumes=volumes)
    return removed
