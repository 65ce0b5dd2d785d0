"""A local run's Python: a throwaway environment of its own, layered on the project's interpreter.

`paritybot check`, `coverage-map` and `perf` on the host run the project's code with the
project's interpreter (``--python PATH``, else the active virtualenv, else the one paritybot runs
on, said on stderr), never in it: each run gets a ``venv`` made by that interpreter, whose
site-packages hold a ``.pth`` that appends the interpreter's own site-packages (so whatever the
contributor installed imports, editable dependencies included); it sees the installation's
site-packages and the user's only where that interpreter does. Its ``bin/`` is first on the
steps' ``PATH`` and holds a ``pip`` that runs in it, and ``PYTHONUSERBASE`` is inside it, so
set-up commands (``pip install -e .``, ``python -m pip install .``, and ``pip install --user .``
where the interpreter allows it) install into it: the contributor's environment is never
written, nor byte-compiled into
(``PYTHONPYCACHEPREFIX`` is inside it too). pip will not uninstall what lies outside the
environment it runs in, so installing the project there leaves the contributor's install as it was.

The environment is kept per (interpreter, dependency files), so what set-up installed once is
there on the next run; one run at a time holds it (a lock beside it).

The code imported is the commit's: the run's tree (``src/`` first, when it has one) leads
``PYTHONPATH``, ahead of any editable install of the contributor's working copy, and before the
tests run a probe asks the environment where each of the project's packages would come from; one
that resolves elsewhere (an import hook placed first) stops the run with one line naming the path.

Compiled code (``.pyx``, or C/C++ sources with a build script) is built from the commit in the
run's tree, with the project's own build in this environment, before the first step; the modules
are kept by a hash of the sources (:mod:`runner.backends.localbuild`). A project
with compiled sources and no way to build them here stops the run saying so: never tested
against whatever build happened to be importable.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from runner.backends.base import RunnerError, RunnerInfo, Step, StepResult
from runner.backends.host import HostRunner
from runner.backends.localbuild import (
    build_command,
    build_key,
    compiled_sources,
    copy_build,
    keep_build,
    tracked_files,
)

DEPENDENCY_FILES = ("pyproject.toml", "setup.py", "setup.cfg", "requirements.txt", "requirements-dev.txt")
# Steps that run the project's code as tests: the imports are proved before the first of them.
PROVEN_STEPS = ("tests", "coverage-map")
BASE_PTH = "_paritybot_base.pth"

_FACTS = """\
import json, site, sys, sysconfig, importlib.util
paths = sysconfig.get_paths()
base = sysconfig.get_paths(vars={"base": sys.base_prefix, "platbase": sys.base_prefix})
print(json.dumps({
    "executable": sys.executable, "version": sys.version, "prefix": sys.prefix,
    "site": sorted({paths["purelib"], paths["platlib"]}) if sys.prefix != sys.base_prefix else [],
    "system_site": base["purelib"] in sys.path,
    "user_site": site.getusersitepackages() if site.ENABLE_USER_SITE else None,
    "pip": importlib.util.find_spec("pip") is not None,
}))
"""

_WHERE = """\
import importlib.util, json, sys
found = {}
for name in sys.argv[1:]:
    try:
        spec = importlib.util.find_spec(name)
    except Exception:
        spec = None
    if spec is not None:
        found[name] = list(spec.submodule_search_locations or []) or [spec.origin or ""]
print("@@paritybot-where " + json.dumps(found))
"""

# pip of the run's environment: it installs there, never into the interpreter it is layered on.
_PIP_SHIM = '#!/bin/sh\nexec "$(dirname -- "$0")/python" -m pip "$@"\n'
_NO_PIP = '#!/bin/sh\necho "pip is not installed for {python}: install it there (python -m ensurepip), or use uv" >&2\nexit 1\n'


class LocalEnvError(RunnerError):
    """The run's environment could not be made, or would not import the commit's code: one line."""


@dataclass(frozen=True)
class BaseInterpreter:
    """The project's interpreter the run's environment is layered on, and how it was chosen."""

    python: str
    source: str
    chosen: bool = True
    """False: nothing named the project's interpreter, this is paritybot's own (the config may)."""

    def describe(self) -> str:
        return f"{self.python} ({self.source})"


def choose_base(python: str | None, environ: Mapping[str, str], own: str = sys.executable) -> BaseInterpreter:
    """``--python``, else the active virtualenv's, else the interpreter paritybot runs on."""
    if python:
        found = shutil.which(python)
        if found is None:
            raise LocalEnvError(f"--python {python}: no such interpreter")
        return BaseInterpreter(found, "--python")
    venv = environ.get("VIRTUAL_ENV")
    if venv and (Path(venv) / "bin" / "python").exists():
        return BaseInterpreter(str(Path(venv) / "bin" / "python"), "the active virtualenv, VIRTUAL_ENV")
    return BaseInterpreter(
        own,
        "paritybot's own; --python PATH, an active virtualenv or the environment's `python:` names the project's",
        chosen=False,
    )


def with_configured(base: BaseInterpreter, configured: str | None, environment: str) -> BaseInterpreter:
    """The config's interpreter (``environments[].python``) where nothing on the command line or
    in the shell named one: what the user named themselves comes first."""
    if base.chosen or not configured:
        return base
    found = shutil.which(configured)
    if found is None:
        raise LocalEnvError(
            f"environment {environment}: python: {configured}: no such interpreter on this machine "
            "(name another with --python PATH)"
        )
    return BaseInterpreter(found, f"the config's, environment {environment}")


@dataclass(frozen=True)
class Facts:
    executable: str
    version: str
    prefix: str
    site: list[str]
    """A virtualenv's own site-packages (none for an installation's interpreter)."""
    system_site: bool
    """Whether the installation's own site-packages are visible (not in an isolated virtualenv)."""
    user_site: str | None
    pip: bool


def interpreter_facts(base: BaseInterpreter) -> Facts:
    """What the run's environment needs to know of the base interpreter (it is asked, once)."""
    try:
        done = subprocess.run([base.python, "-c", _FACTS], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as exc:
        raise LocalEnvError(f"the interpreter {base.describe()} does not run: {exc}") from None
    try:
        return Facts(**json.loads(done.stdout.strip().splitlines()[-1]))
    except (ValueError, IndexError, TypeError):
        said = (done.stderr.strip().splitlines() or [f"exit code {done.returncode}, no output"])[-1]
        raise LocalEnvError(
            f"{base.describe()} is not a Python 3 interpreter paritybot can use: {said}"
        ) from None


def env_key(facts: Facts, tree: Path) -> str:
    """The environment a run uses: one per interpreter and dependency files of the commit."""
    digest = hashlib.sha256(f"{facts.executable}\0{facts.version}\0{facts.prefix}".encode())
    for name in DEPENDENCY_FILES:
        path = tree / name
        if path.is_file() and not path.is_symlink():
            digest.update(f"\0{name}\0".encode() + path.read_bytes())
    return digest.hexdigest()[:16]


def create_env(base: BaseInterpreter, facts: Facts, root: Path) -> None:
    """A ``venv`` of ``base`` at ``root`` that sees what base sees, after its own packages."""
    scratch = root.with_name(root.name + ".new")
    shutil.rmtree(scratch, ignore_errors=True)
    # The installation's site-packages only where the base sees them too; then the user site is
    # enabled, so `pip install --user` works as it does for the base, into PYTHONUSERBASE (ours).
    system = ["--system-site-packages"] if facts.system_site else []
    argv = [base.python, "-m", "venv", *system, "--without-pip", str(scratch)]
    made = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    if made.returncode != 0:
        tail = (made.stderr or made.stdout).strip().splitlines()[-1:] or ["no output"]
        raise LocalEnvError(f"could not make the run's environment with {base.describe()}: {tail[0]}")
    own_site = _site_packages(scratch)
    layered = [*facts.site, *([facts.user_site] if facts.user_site else [])]
    # addsitedir, not a bare path: the base's own .pth files (editable dependencies) apply too.
    (own_site / BASE_PTH).write_text(
        "".join(f"import site; site.addsitedir({p!r})\n" for p in layered if Path(p).is_dir())
    )
    for name in ("pip", "pip3"):
        shim = scratch / "bin" / name
        shim.write_text(_PIP_SHIM if facts.pip else _NO_PIP.format(python=base.python))
        shim.chmod(0o755)
    os.replace(scratch, root)


def _site_packages(env: Path) -> Path:
    found = sorted(env.glob("lib/python*/site-packages"))
    if not found:
        raise LocalEnvError(f"the run's environment at {env} has no site-packages")
    return found[0]


def import_roots(tree: Path) -> list[Path]:
    """Where the project's packages live in its tree: ``src/`` first when there is one."""
    src = tree / "src"
    return [*([src] if src.is_dir() and not src.is_symlink() else []), tree]


def project_packages(tree: Path) -> list[str]:
    """The project's top-level packages (directories with ``__init__.py``) and, in ``src/``, modules."""
    names: list[str] = []
    for root in import_roots(tree):
        for entry in sorted(root.iterdir()):
            if entry.is_symlink() or not entry.name.isidentifier():
                continue
            if entry.is_dir() and (entry / "__init__.py").is_file():
                names.append(entry.name)
            elif root != tree and entry.suffix == ".py" and entry.stem.isidentifier():
                names.append(entry.stem)
    return list(dict.fromkeys(names))


def outside_tree(found: Mapping[str, list[str]], tree: Path) -> tuple[str, str] | None:
    """The first package whose location is not inside ``tree``, with that location."""
    top = tree.resolve()
    for name, locations in found.items():
        for where in locations:
            if where and not Path(where).resolve().is_relative_to(top):
                return name, where
    return None


@dataclass
class _Prepared:
    root: Path
    tree: Path
    lock: IO[str]
    variables: dict[str, str] = field(default_factory=dict)

    def forget_tree(self) -> None:
        """Remove the byte code of the run's tree from the environment's cache: the tree is gone
        after the run, and the next run's has another path. The base's byte code stays."""
        for path in {str(self.tree), str(self.tree.resolve())}:
            shutil.rmtree(self.root / "pycache" / path.lstrip(os.sep), ignore_errors=True)


class RunEnvRunner:
    """The host runner, each step in the run's own environment (see the module's docstring)."""

    def __init__(
        self,
        inner: HostRunner,
        base: BaseInterpreter,
        envs_root: Path,
        builds_root: Path,
        say: Callable[[str], None] = lambda line: None,
    ):
        self._inner = inner
        self._base = base
        self._envs_root = envs_root
        self._builds_root = builds_root
        self._say = say
        self._info = inner.info.model_copy(deep=True)
        self._prepared: _Prepared | None = None
        self._facts: Facts | None = None
        self._proven = False

    @property
    def info(self) -> RunnerInfo:
        return self._info

    async def prepare(self) -> None:
        await self._inner.prepare()

    async def run(self, step: Step, workspace: Path) -> StepResult:
        if self._prepared is None:
            self._prepared = await asyncio.to_thread(self._make_env, workspace)
            await self._build(workspace)
        if step.name in PROVEN_STEPS and not self._proven:
            await self._prove(workspace)
            self._proven = True
        return await self._inner.run(self._in_env(step), workspace)

    def _in_env(self, step: Step) -> Step:
        assert self._prepared is not None
        ours = dict(self._prepared.variables)
        if step.workdir not in ("", "."):
            # A step run in another tree of the workspace (the merge base's checkout, to tell
            # whose failure it is) imports that tree's code first, never the head's.
            ours["PYTHONPATH"] = os.pathsep.join(
                str(p) for p in import_roots(self._prepared.tree / step.workdir)
            )
        env = {**ours, **step.env}
        if step.env.get("PYTHONPATH"):  # the environment's own `env:` comes after the tree
            env["PYTHONPATH"] = f"{ours['PYTHONPATH']}{os.pathsep}{step.env['PYTHONPATH']}"
        return step.model_copy(update={"env": env})

    def _make_env(self, tree: Path) -> _Prepared:
        facts = interpreter_facts(self._base)
        key = env_key(facts, tree)
        root = self._envs_root / key
        root.parent.mkdir(parents=True, exist_ok=True)
        lock = open(root.parent / f"{key}.lock", "w")  # noqa: SIM115 - held until close()
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            made = not root.is_dir()
            if made:
                create_env(self._base, facts, root)
        except BaseException:
            lock.close()
            raise
        self._facts = facts
        self._say(
            f"python: {self._base.describe()}; the run's own environment "
            f"{'made' if made else 'reused'} at {root}; yours is not changed"
        )
        inner_path = self._inner.info.env.get("PATH", os.environ.get("PATH", ""))
        variables = {
            "PATH": f"{root / 'bin'}{os.pathsep}{inner_path}",
            "VIRTUAL_ENV": str(root),
            "PYTHONPATH": os.pathsep.join(str(p) for p in import_roots(tree)),
            "PYTHONUSERBASE": str(root / "user"),
            "PYTHONPYCACHEPREFIX": str(root / "pycache"),
        }
        return _Prepared(root, tree, lock, variables)

    async def _build(self, tree: Path) -> None:
        """Build the commit's compiled code in its tree, or copy the build of the same sources."""
        files = await asyncio.to_thread(tracked_files, tree)
        sources = compiled_sources(tree, files)
        if not sources:
            return
        assert self._facts is not None
        command = build_command(tree, self._facts.pip)
        if command is None:
            raise LocalEnvError(
                f"the commit has compiled sources ({', '.join(sources[:3])}) and no way to build them "
                "here (no setup.py, or no pip for pyproject.toml's build backend); not tested against "
                "another build"
            )
        self._info.build = [" ".join(command)]
        cached = self._builds_root / build_key(
            f"{self._facts.executable}\0{self._facts.version}", tree, sources
        )
        if (cached / ".complete").is_file():
            await asyncio.to_thread(copy_build, cached, tree)
            self._say(f"build: compiled code of the commit from the cache ({cached})")
            return
        step = Step(name="build", argv=command, timeout_s=3600)
        result = await self._inner.run(self._in_env(step), tree)
        if not result.ok:
            tail = " | ".join(result.output.strip().splitlines()[-3:])
            raise LocalEnvError(
                f"compiled code of the commit did not build (`{' '.join(command)}`: "
                f"{result.describe_failure()}): {tail}"
            )
        await asyncio.to_thread(keep_build, tree, cached)
        self._say(f"build: compiled code of the commit built with `{' '.join(command)}`")

    async def _prove(self, tree: Path) -> None:
        """Stop the run unless the project's packages would be imported from the run's tree."""
        names = project_packages(tree)
        if not names:
            return
        step = Step(name="imports", argv=["python", "-c", _WHERE, *names], timeout_s=300)
        result = await self._inner.run(self._in_env(step), tree)
        line = next((ln for ln in result.output.splitlines() if ln.startswith("@@paritybot-where ")), None)
        if line is None:
            raise LocalEnvError(
                "could not ask the run's environment where the project imports from: "
                f"{result.describe_failure()}"
            )
        wrong = outside_tree(json.loads(line.split(" ", 1)[1]), tree)
        if wrong is not None:
            name, where = wrong
            raise LocalEnvError(
                f"the project's `{name}` would be imported from {where}, not from the commit: an import "
                f"hook of {self._base.python} puts it ahead of the run's tree; uninstall it there "
                f"(`pip uninstall {name}`) or reinstall it with `pip install -e .` (setuptools)"
            )

    async def cancel(self) -> None:
        await self._inner.cancel()

    async def close(self) -> None:
        await self._inner.close()
        if self._prepared is not None:
            await asyncio.to_thread(self._prepared.forget_tree)
            with contextlib.suppress(OSError):
                self._prepared.lock.close()  # closing the file releases the lock
