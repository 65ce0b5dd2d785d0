"""What a project uses of the GPU stack, read from its commit: PyTorch, and GPU libraries at all.

The parity table compares PyTorch's and CUDA's versions; for a project that uses neither, those
rows are unknown on every side and only hide the rows that matter, and asking the contributor for
a `torch.utils.collect_env` paste is asking for something the project never needed. The project
says what it uses in its dependency files and its imports; both are read from git's objects.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from runner import gitdiff

# Modules whose use means the project runs GPU code (PyTorch among them).
GPU_MODULES = frozenset(
    {"torch", "cupy", "numba", "jax", "jaxlib", "tensorflow", "pycuda", "cuda", "triton", "tensorrt", "cudf"}
)
DEPENDENCY_GLOBS = (
    "pyproject.toml",
    "setup.py",
    "setup.cfg",
    "requirements*.txt",
    "requirements/*.txt",
    "environment.yml",
    "environment.yaml",
)
# Enough to see what a large project imports without reading all of it.
MAX_SOURCE_FILES = 3000

_IMPORT = re.compile(r"^[ \t]*(?:import|from)[ \t]+([A-Za-z_]\w*)", re.MULTILINE)


def _named(text: str, module: str) -> bool:
    """``module`` as a distribution name in a dependency file (``torch>=2``, ``"torch"``, ``- torch``)."""
    return re.search(rf"(?<![\w.-]){re.escape(module)}(?![\w-])", text) is not None


@dataclass(frozen=True)
class ProjectStack:
    torch: bool
    gpu: bool


def stack_from(dependency_texts: list[str], sources: list[str]) -> ProjectStack:
    """What the dependency files and the sources show the project uses."""
    imported = {m for text in sources for m in _IMPORT.findall(text)}
    uses = {m for m in GPU_MODULES if m in imported or any(_named(t, m) for t in dependency_texts)}
    if any(_named(t, "pytorch") for t in dependency_texts):  # conda's name for it
        uses.add("torch")
    return ProjectStack(torch="torch" in uses, gpu=bool(uses))


def project_stack(repo: Path, rev: str) -> ProjectStack:
    """:func:`stack_from` on the commit's dependency files and Python sources."""
    files = gitdiff.list_files(repo, rev)
    deps = [p for p in files if any(fnmatch.fnmatch(p, g) for g in DEPENDENCY_GLOBS)]
    sources = [p for p in files if PurePosixPath(p).suffix in (".py", ".pyx")][:MAX_SOURCE_FILES]
    dep_texts = [t for t in gitdiff.read_files(repo, rev, deps).values() if t]
    source_texts = [t for t in gitdiff.read_files(repo, rev, sources).values() if t]
    return stack_from(dep_texts, source_texts)
