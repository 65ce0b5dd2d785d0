"""Which sections of a project's shared configuration files change what its tests see.

``pyproject.toml``, ``setup.cfg`` and ``tox.ini`` hold the packaging and pytest's own settings, which
decide how every test runs, next to the settings of linters and other tools, which no test reads.
An edit of ``[tool.ruff]`` or ``[flake8]`` must neither run the whole suite nor retire the
coverage map; an edit of the dependencies, the build, pytest's options or the entry points must.

The decision is made on the parsed files, section by section: a file that does not parse counts
as changed everywhere (the run will say why it fails).
"""

from __future__ import annotations

import configparser
import tomllib
from pathlib import PurePosixPath
from typing import Any

CONFIG_FILES = ("pyproject.toml", "setup.cfg", "tox.ini")

# [project] keys that describe the project to people and indexes, not to an installer or a test.
_DESCRIPTIVE_PROJECT_KEYS = {
    "version", "description", "readme", "authors", "maintainers", "keywords", "classifiers",
    "urls", "license", "license-files",
}  # fmt: skip
# [tool.*] tables that decide how the project builds, installs or runs its tests.
_PYPROJECT_TOOLS = {
    "pytest", "setuptools", "setuptools_scm", "setuptools-scm", "hatch", "flit", "flit_core",
    "pdm", "poetry", "maturin", "scikit-build", "scikit-build-core", "meson-python", "mesonpy",
    "py-build-cmake", "uv", "pixi", "cython", "versioneer", "pytest-benchmark",
}  # fmt: skip
# setup.cfg / tox.ini sections that do the same; every other section is another tool's.
_INI_PREFIXES = ("options", "tool:pytest", "pytest", "build_ext", "build_py", "entry_points")
_DESCRIPTIVE_METADATA_KEYS = {
    "version", "description", "long_description", "long_description_content_type", "author",
    "author_email", "maintainer", "maintainer_email", "url", "project_urls", "keywords",
    "classifiers", "license", "license_files", "license_file", "platforms",
}  # fmt: skip


def is_config_file(path: str) -> bool:
    return PurePosixPath(path).name in CONFIG_FILES


def changed_sections(path: str, base_text: str | None, head_text: str | None) -> list[str]:
    """The sections of a shared configuration file whose change reaches the tests.

    An empty list: only other tools' sections (or descriptive metadata) changed. A file added,
    removed, or that does not parse on either side is reported whole (``["the whole file"]``).
    """
    whole = ["the whole file"]
    if base_text is None or head_text is None:
        return whole
    name = PurePosixPath(path).name
    reader = _toml_sections if name == "pyproject.toml" else _ini_sections
    base, head = reader(base_text), reader(head_text)
    if base is None or head is None:
        return whole
    return sorted(k for k in base.keys() | head.keys() if base.get(k) != head.get(k))


def _toml_sections(text: str) -> dict[str, Any] | None:
    """The parts of ``pyproject.toml`` that reach the tests, keyed by how they are named to users."""
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return None
    out: dict[str, Any] = {}
    for key, value in doc.items():
        if key == "project" and isinstance(value, dict):
            for field, item in value.items():
                if field not in _DESCRIPTIVE_PROJECT_KEYS:
                    out[f"[project] {field}"] = item
        elif key == "tool" and isinstance(value, dict):
            for tool, table in value.items():
                if tool in _PYPROJECT_TOOLS:
                    out[f"[tool.{tool}]"] = table
        else:
            out[f"[{key}]"] = value  # [build-system], [dependency-groups], anything unknown
    return out


def _ini_sections(text: str) -> dict[str, Any] | None:
    parser = configparser.RawConfigParser(strict=False, interpolation=None)
    try:
        parser.read_string(text)
    except configparser.Error:
        return None
    out: dict[str, Any] = {}
    for section in parser.sections():
        items = dict(parser.items(section))
        if section == "metadata":
            kept = {k: v for k, v in items.items() if k not in _DESCRIPTIVE_METADATA_KEYS}
            if kept:
                out["[metadata]"] = kept
        elif section.startswith(_INI_PREFIXES):
            out[f"[{section}]"] = items
    return out
