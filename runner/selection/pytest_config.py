"""What ``pytest`` run with no arguments collects in a project, read from its own configuration.

The test universe is pytest's, not a guess: its ``testpaths`` (the whole repository when it has
none), its ``python_files`` patterns, the directories it does not recurse into, and whether its
options collect doctests (``--doctest-modules`` in ``addopts``, ``--doctest-glob``). The settings are
read the way pytest finds them at the repository's root: ``pytest.ini`` (or ``.pytest.ini``),
``pyproject.toml``'s ``[tool.pytest.ini_options]`` (or ``[tool.pytest]``), ``tox.ini``'s ``[pytest]``,
``setup.cfg``'s ``[tool:pytest]``; the first that has them wins.

This reading is static (the selection reads commits, not a checkout): a ``conftest.py`` that
changes collection (``collect_ignore``, ``pytest_collect_file``) is not followed, but the node ids
pytest collected, when given, always take precedence over it.
"""

from __future__ import annotations

import configparser
import fnmatch
import shlex
import tomllib
from collections.abc import Callable, Iterable
from pathlib import PurePosixPath

from pydantic import BaseModel, ConfigDict, Field

INI_FILES = ("pytest.ini", ".pytest.ini", "pyproject.toml", "tox.ini", "setup.cfg")
DEFAULT_PYTHON_FILES = ["test_*.py", "*_test.py"]
DEFAULT_NORECURSE = ["*.egg", ".*", "_darcs", "build", "CVS", "dist", "node_modules", "venv", "{arch}"]


class PytestLayout(BaseModel):
    """How pytest collects in one project; :meth:`collects` answers for one file."""

    model_config = ConfigDict(extra="forbid")

    source: str | None = Field(None, description="the file the settings came from; None: pytest's defaults")
    testpaths: list[str] = Field(default_factory=list, description="empty: the whole repository")
    python_files: list[str] = Field(default_factory=lambda: list(DEFAULT_PYTHON_FILES))
    norecursedirs: list[str] = Field(default_factory=lambda: list(DEFAULT_NORECURSE))
    doctest_modules: bool = False
    doctest_globs: list[str] = Field(default_factory=list)

    def under_testpaths(self, path: str) -> bool:
        """Whether pytest, run with no arguments, looks at ``path`` at all."""
        parts = PurePosixPath(path).parts
        if any(_matches_any(part, self.norecursedirs) for part in parts[:-1]):
            return False
        if not self.testpaths:
            return True
        return any(_under(path, root) for root in self.testpaths)

    def collects(self, path: str) -> bool:
        """Whether ``path`` is a test module pytest collects when run with no arguments."""
        name = PurePosixPath(path).name
        return path.endswith(".py") and _matches_any(name, self.python_files) and self.under_testpaths(path)

    def collects_doctests(self, path: str) -> bool:
        """Whether pytest collects the doctests of ``path`` (a Python module or a text file)."""
        if not self.under_testpaths(path):
            return False
        if path.endswith(".py"):
            return self.doctest_modules and PurePosixPath(path).name not in ("setup.py", "conftest.py")
        # pytest's default --doctest-glob is test*.txt: those files are collected as doctests.
        return _matches_any(PurePosixPath(path).name, self.doctest_globs or ["test*.txt"])

    def where(self) -> str:
        """Where pytest looks, in words, for a reason that says why nothing was found."""
        roots = ", ".join(self.testpaths) if self.testpaths else "the whole repository"
        origin = f" (testpaths of {self.source})" if self.testpaths and self.source else ""
        return f"{roots}{origin}, files named {' or '.join(self.python_files)}"


Reader = Callable[[list[str]], dict[str, str | None]]
"""paths → path → text (``None`` for a missing file), of one commit."""


def pytest_layout(files: Iterable[str], read: Reader) -> PytestLayout:
    """The layout of the commit whose tracked ``files`` are given (``read`` reads that commit)."""
    present = set(files)
    candidates = [f for f in INI_FILES if f in present]
    texts = read(candidates) if candidates else {}
    for name in candidates:
        options = _ini_options(name, texts.get(name))
        if options is not None:
            return _layout(name, options)
    return PytestLayout()


def _ini_options(name: str, text: str | None) -> dict[str, object] | None:
    """pytest's options in one configuration file; ``None`` when the file is not pytest's."""
    if text is None:
        return None
    if name == "pyproject.toml":
        try:
            tool = tomllib.loads(text).get("tool", {})
        except tomllib.TOMLDecodeError:
            return None
        pytest_table = tool.get("pytest") if isinstance(tool, dict) else None
        if not isinstance(pytest_table, dict):
            return None
        options = pytest_table.get("ini_options", pytest_table)
        return dict(options) if isinstance(options, dict) else None
    parser = configparser.RawConfigParser(strict=False, interpolation=None)
    try:
        parser.read_string(text)
    except configparser.Error:
        return None
    section = {"setup.cfg": "tool:pytest", "tox.ini": "pytest"}.get(name, "pytest")
    if parser.has_section(section):
        return dict(parser.items(section))
    # pytest.ini is pytest's even without a [pytest] section.
    return {} if name in ("pytest.ini", ".pytest.ini") else None


def _layout(source: str, options: dict[str, object]) -> PytestLayout:
    layout = PytestLayout(source=source)
    if "testpaths" in options:
        layout.testpaths = [p.strip("/") or "." for p in _as_list(options["testpaths"])]
        layout.testpaths = [p for p in layout.testpaths if p != "."]
    if "python_files" in options:
        layout.python_files = _as_list(options["python_files"]) or list(DEFAULT_PYTHON_FILES)
    if "norecursedirs" in options:
        layout.norecursedirs = _as_list(options["norecursedirs"])
    addopts = options.get("addopts", "")
    args = _as_args(addopts)
    layout.doctest_modules = "--doctest-modules" in args
    for i, arg in enumerate(args):
        if arg == "--doctest-glob" and i + 1 < len(args):
            layout.doctest_globs.append(args[i + 1])
        elif arg.startswith("--doctest-glob="):
            layout.doctest_globs.append(arg.partition("=")[2])
    return layout


def _as_list(value: object) -> list[str]:
    if isinstance(value, list):
        return [str(v) for v in value]
    return str(value).split()


def _as_args(value: object) -> list[str]:
    if isinstance(value, list):
        return [str(v) for v in value]
    try:
        return shlex.split(str(value))
    except ValueError:
        return str(value).split()


def _matches_any(name: str, patterns: list[str]) -> bool:
    return any(fnmatch.fnmatchcase(name, p) for p in patterns)


def _under(path: str, root: str) -> bool:
    if any(c in root for c in "*?["):
        return fnmatch.fnmatchcase(path, root) or fnmatch.fnmatchcase(path, f"{root}/*")
    return path == root or path.startswith(f"{root}/")
