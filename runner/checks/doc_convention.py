"""Which docstring convention a project declares, read from its own configuration, and whether a
docstring has sections the parser cannot read.

A project that runs ruff's or pydocstyle's docstring rules names its convention there
(``convention = "numpy"``); numpydoc's validation or Sphinx's napoleon settings say it too. What a
project declares beats a vote over its docstrings, which a few odd ones can swing.
"""

from __future__ import annotations

import configparser
import re
import tomllib
from typing import Any

# Where a convention may be declared, in the order they are believed.
CONVENTION_FILES = (
    "pyproject.toml",
    "ruff.toml",
    ".ruff.toml",
    "setup.cfg",
    "tox.ini",
    ".pydocstyle",
    "docs/conf.py",
    "doc/conf.py",
    "docs/source/conf.py",
)
_CONVENTIONS = {"google": "google", "numpy": "numpy"}  # pep257 names no sections: the vote decides

# A section heading, however it is marked up: ``Parameters`` over dashes, ``Args:``, ``**Returns:**``,
# ``# Raises``. A sentence that starts with the word ("Returns the mean.") is not one.
_HEADING = re.compile(
    r"^[ \t]*(?:#{1,6}[ \t]*)?(?:\*\*|__|\*)?[ \t]*"
    r"(?:parameters|params|arguments|args|keyword arguments|other parameters|returns?|yields?|raises|exceptions)"
    r"[ \t]*(?:\*\*|__|\*)?[ \t]*(?::|$)",
    re.IGNORECASE | re.MULTILINE,
)


def has_sections(docstring: str) -> bool:
    """Whether the docstring has a parameters, returns or raises section in any markup."""
    return _HEADING.search(docstring) is not None


def declared_convention(files: dict[str, str | None]) -> tuple[str, str] | None:
    """The convention (google or numpy) the project's files declare, and where; None if none does.

    ``files``: path → text for the paths of :data:`CONVENTION_FILES` (None: not in the commit).
    """
    for path in CONVENTION_FILES:
        text = files.get(path)
        if not text:
            continue
        found = _from_file(path, text)
        if found is not None:
            return found, _where(path)
    return None


def _where(path: str) -> str:
    return f"as {path} declares"


def _from_file(path: str, text: str) -> str | None:
    if path.endswith(".toml"):
        return _from_toml(path, text)
    if path.endswith("conf.py"):
        return _from_sphinx(text)
    return _from_ini(text)


def _dig(data: dict[str, Any], *keys: str) -> Any:
    for key in keys:
        if not isinstance(data, dict):
            return None
        data = data.get(key)  # type: ignore[assignment]
    return data


def _from_toml(path: str, text: str) -> str | None:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return None
    if path == "pyproject.toml":
        for keys in (
            ("tool", "ruff", "lint", "pydocstyle", "convention"),
            ("tool", "ruff", "pydocstyle", "convention"),
            ("tool", "pydocstyle", "convention"),
        ):
            value = _dig(data, *keys)
            if isinstance(value, str) and value.lower() in _CONVENTIONS:
                return _CONVENTIONS[value.lower()]
        if _dig(data, "tool", "numpydoc_validation") is not None:
            return "numpy"
        return None
    for where in (("lint", "pydocstyle", "convention"), ("pydocstyle", "convention")):
        value = _dig(data, *where)
        if isinstance(value, str) and value.lower() in _CONVENTIONS:
            return _CONVENTIONS[value.lower()]
    return None


def _from_ini(text: str) -> str | None:
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read_string(text)
    except configparser.Error:
        return None
    for section in ("pydocstyle", "tool:pydocstyle", "flake8"):
        for key in ("convention", "docstring-convention", "docstring_convention"):
            value = parser.get(section, key, fallback="").strip().lower()
            if value in _CONVENTIONS:
                return _CONVENTIONS[value]
    return None


def _from_sphinx(text: str) -> str | None:
    """numpydoc among Sphinx's extensions, or napoleon told to read one style only."""
    if re.search(r"""["']numpydoc["']""", text):
        return "numpy"
    if re.search(r"^\s*napoleon_numpy_docstring\s*=\s*False", text, re.MULTILINE):
        return "google"
    if re.search(r"^\s*napoleon_google_docstring\s*=\s*False", text, re.MULTILINE):
        return "numpy"
    return None
