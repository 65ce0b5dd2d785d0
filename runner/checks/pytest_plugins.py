"""Which package to install when pytest refuses an option a plugin would have added.

A project's ``addopts`` name its plugins' options (``--cov=pkg``, ``-n auto``); in an environment
without the plugin, pytest stops with ``error: unrecognized arguments: --cov=pkg``, which says
nothing of what is missing. :func:`missing_plugins` reads that line and names the package.
"""

from __future__ import annotations

import re

# option (or option prefix, for long options: --benchmark-disable is --benchmark's) → package
PLUGIN_OPTIONS: tuple[tuple[str, str], ...] = (
    ("--cov", "pytest-cov"),
    ("--no-cov", "pytest-cov"),
    ("-n", "pytest-xdist"),
    ("--numprocesses", "pytest-xdist"),
    ("--dist", "pytest-xdist"),
    ("--maxprocesses", "pytest-xdist"),
    ("--benchmark", "pytest-benchmark"),
    ("--timeout", "pytest-timeout"),
    ("--reruns", "pytest-rerunfailures"),
    ("--only-rerun", "pytest-rerunfailures"),
    ("--asyncio-mode", "pytest-asyncio"),
    ("--randomly", "pytest-randomly"),
    ("--hypothesis", "hypothesis"),
    ("--html", "pytest-html"),
    ("--mpl", "pytest-mpl"),
    ("--doctest-plus", "pytest-doctestplus"),
    ("--doctest-rst", "pytest-doctestplus"),
    ("--remote-data", "pytest-remotedata"),
    ("--xdoctest", "xdoctest"),
    ("--forked", "pytest-forked"),
    ("--instafail", "pytest-instafail"),
    ("--mypy", "pytest-mypy"),
    ("--ruff", "pytest-ruff"),
    ("--black", "pytest-black"),
    ("--flake8", "pytest-flake8"),
    ("--env", "pytest-env"),
    ("--mock-use-standalone-module", "pytest-mock"),
)

_UNRECOGNIZED = re.compile(r"error: unrecognized arguments: (.+)$", re.MULTILINE)
# The tools a run itself needs in the project's environment.
_MISSING_TOOL = re.compile(r"No module named '?(pytest|coverage)'?\s*$", re.MULTILINE)


def _package_of(token: str) -> str | None:
    name = token.split("=", 1)[0]
    for option, package in PLUGIN_OPTIONS:
        if name == option:
            return package
        if option.startswith("--") and name.startswith(option + "-"):
            return package
        if not option.startswith("--") and name.startswith(option) and name[len(option) :].isalnum():
            return package  # -n4, -nauto
    return None


def missing_plugins(output: str) -> list[str]:
    """One line per option pytest did not know that a plugin provides, and per tool a run needs
    that the environment lacks: what to install."""
    lines: dict[str, str] = {}
    for tool in _MISSING_TOOL.findall(output):
        lines.setdefault(
            tool, f"the project's environment has no {tool}: install it there (pip install {tool})"
        )
    for match in _UNRECOGNIZED.finditer(output):
        for token in match.group(1).split():
            package = _package_of(token)
            if package is not None and token.startswith("-"):
                option = token.split("=", 1)[0]
                lines.setdefault(package, f"{option} needs {package}: install it (pip install {package})")
    return list(lines.values())


def plugin_hint(output: str) -> str:
    """The lines of :func:`missing_plugins`, each on a line of its own after a newline; else ''."""
    return "".join(f"\n{line}" for line in missing_plugins(output))
