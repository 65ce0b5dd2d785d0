"""Compiled code of a local run, built from the commit: which sources, how, and the build's cache.

A project with compiled sources (Cython files, or C/C++ files beside a build script) gets its
extension modules built in the run's tree by its own build (``setup.py build_ext --inplace``,
else an editable ``pip install`` with the build backend it declares, from the environment). The
modules a build made are kept by a hash of the interpreter, the sources and the build files, so a
later run of the same sources copies them instead of building (:func:`keep_build`,
:func:`copy_build`).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

CYTHON_SUFFIXES = (".pyx", ".pxd", ".pxi")
C_SUFFIXES = (".c", ".cc", ".cpp", ".cxx", ".h", ".hh", ".hpp")
BUILD_SCRIPTS = ("setup.py", "meson.build", "CMakeLists.txt")
# What a pyproject.toml that builds compiled code without a script of its own says.
COMPILED_MARKERS = ("ext-modules", "scikit_build_core", "mesonpy")
EXTENSION_SUFFIXES = (".so", ".pyd", ".dylib")
PIP_BUILD = ("python", "-m", "pip", "install", "--no-build-isolation", "--no-deps", "--no-index", "-e", ".")


def tracked_files(tree: Path) -> list[str]:
    """The files of the commit, as git lists them in its tree."""
    out = subprocess.run(["git", "ls-files", "-z"], cwd=tree, capture_output=True, timeout=120)
    return [p for p in out.stdout.decode("utf-8", "replace").split("\0") if p]


def _declares_extensions(tree: Path) -> bool:
    """Whether the project has a build script, or a pyproject.toml that builds compiled code."""
    if any((tree / s).is_file() for s in BUILD_SCRIPTS):
        return True
    pyproject = tree / "pyproject.toml"
    if not pyproject.is_file() or pyproject.is_symlink():
        return False
    text = pyproject.read_text(errors="replace")
    return any(marker in text for marker in COMPILED_MARKERS)


def compiled_sources(tree: Path, files: list[str]) -> list[str]:
    """The commit's sources of compiled code: Cython files, or C/C++ files beside a build script."""
    cython = [f for f in files if f.endswith(CYTHON_SUFFIXES)]
    has_script = _declares_extensions(tree)
    c_files = [f for f in files if f.endswith(C_SUFFIXES)] if has_script or cython else []
    return sorted({*cython, *c_files})


def build_command(tree: Path, has_pip: bool) -> list[str] | None:
    """How the project builds its extensions in place, with its own build script; None: no way here."""
    if (tree / "setup.py").is_file():
        return ["python", "setup.py", "build_ext", "--inplace"]
    if (tree / "pyproject.toml").is_file() and has_pip:
        return list(PIP_BUILD)
    return None


def build_key(interpreter: str, tree: Path, sources: list[str]) -> str:
    """The build's cache key: the interpreter (executable and version), the sources, the build files."""
    digest = hashlib.sha256(interpreter.encode())
    for rel in [*sources, *BUILD_SCRIPTS, "pyproject.toml", "setup.cfg"]:
        path = tree / rel
        if path.is_file() and not path.is_symlink():
            digest.update(f"\0{rel}\0".encode() + path.read_bytes())
    return digest.hexdigest()[:16]


def built_extensions(tree: Path) -> list[str]:
    """Extension modules in the tree that git does not track: what a build made."""
    out = subprocess.run(
        ["git", "ls-files", "-z", "--others"], cwd=tree, capture_output=True, timeout=120
    ).stdout.decode("utf-8", "replace")
    return sorted(p for p in out.split("\0") if p.endswith(EXTENSION_SUFFIXES) and "/build/" not in f"/{p}")


def keep_build(tree: Path, cached: Path) -> None:
    """Keep what the build made in the tree; a build that made no extension module is not kept."""
    made = built_extensions(tree)
    if not made:
        return
    scratch = cached.with_name(cached.name + ".new")
    shutil.rmtree(scratch, ignore_errors=True)
    for rel in made:
        target = scratch / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(tree / rel, target)
    scratch.mkdir(parents=True, exist_ok=True)
    (scratch / ".complete").write_text("")
    shutil.rmtree(cached, ignore_errors=True)
    os.replace(scratch, cached)


def copy_build(cached: Path, tree: Path) -> None:
    """Put a kept build's extension modules where the build made them in ``tree``."""
    top = tree.resolve()
    for path in cached.rglob("*"):
        if path.is_file() and path.name != ".complete":
            target = tree / path.relative_to(cached)
            if not target.parent.resolve().is_relative_to(top):
                continue  # a directory of the commit that is a link: nothing is written through it
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target)
