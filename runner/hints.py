"""What to do about a failed set-up command or a test suite that does not import, read from the
output: a hint only where the output says what went wrong.

The network is blamed only when the output shows a download that could not happen (pip could not
reach an index, found no distribution with the index switched off, a name did not resolve).
A set-up that failed for another reason known here gets that reason's own fix; any other failure
gets no hint at all, since a wrong one sends the reader the wrong way.

A test module that does not collect because a module is missing is the project not installed
where the tests run (the missing module is the project's own) or a dependency missing from the
image; each gets its fix.
"""

from __future__ import annotations

import re

# Each is what pip, setuptools or the resolver print; matched on the whole output.
_NETWORK = re.compile(
    r"Could not find a version that satisfies the requirement"
    r"|No matching distribution found for"
    r"|Failed to establish a new connection"
    r"|Temporary failure in name resolution"
    r"|Name or service not known"
    r"|Network is unreachable"
    r"|nodename nor servname provided"
    r"|Max retries exceeded with url"
    r"|Could not fetch URL"
    r"|ProxyError"
    r"|ConnectTimeoutError"
    # git's, cloning a pre-commit hook repository
    r"|Could not resolve host"
    r"|Could not resolve hostname"
    r"|Failed to connect to \S+ port"
)
_USER_IN_VENV = "Can not perform a '--user' install"
_NO_WHEEL = "invalid command 'bdist_wheel'"

OFFLINE_SETUP_HINT = (
    "Set-up commands run without network: install the dependencies in the image (then e.g. "
    "`pip install --no-build-isolation --no-deps -e .`), or let the base branch's config set "
    "environments[].network.setup: true."
)
USER_IN_VENV_HINT = (
    "The set-up's Python is a virtual environment, where pip refuses `--user`: drop `--user` from "
    "the set-up command (`pip install --no-build-isolation --no-deps -e .`)."
)
NO_WHEEL_HINT = (
    "The build has no `wheel` command: the environment's setuptools is older than 70.1 and the "
    "`wheel` package is not installed. Install `wheel` (or a newer setuptools) where the set-up "
    "runs, e.g. in the image."
)


def is_network_error(output: str) -> bool:
    """Whether the output shows a download that could not happen (no index, no connection)."""
    return _NETWORK.search(output) is not None


def setup_failure_hint(output: str, *, network: bool) -> str | None:
    """The fix for the failure ``output`` shows, or None when it shows none paritybot knows.

    ``network``: whether the command had the network; only an offline command is told to get it.
    """
    if _USER_IN_VENV in output:
        return USER_IN_VENV_HINT
    if _NO_WHEEL in output:
        return NO_WHEEL_HINT
    if not network and is_network_error(output):
        return OFFLINE_SETUP_HINT
    return None


_MISSING_MODULE = re.compile(r"No module named '(?P<name>[\w.]+)'")

INSTALL_PROJECT_FIX = (
    "The project itself does not import where the tests run: `{name}` is not installed. Install it "
    'in the environment\'s set-up (`setup: ["pip install --no-build-isolation --no-deps -e ."]` in '
    ".github/paritybot.yml), or put its source on the path (`env: {{PYTHONPATH: {root}}}`, or pytest's "
    "`pythonpath`)."
)
INSTALL_DEPENDENCY_FIX = (
    "`{name}` is not installed where the tests run: install it in the image (or in the "
    "environment's `setup:`, with `network.setup: true`)."
)


def missing_modules(messages: list[str]) -> list[str]:
    """The top-level modules the errors say are missing, in order, once each."""
    names = [m["name"].split(".")[0] for text in messages for m in _MISSING_MODULE.finditer(text)]
    return list(dict.fromkeys(names))


def collection_fix(messages: list[str], own_roots: dict[str, str]) -> str:
    """The likely fix for test modules that did not collect, from their errors; "" when none is known.

    ``own_roots``: the project's own top-level packages and modules, each with the directory it is
    in (``"."`` or ``"src"``).
    """
    fixes = []
    for name in missing_modules(messages):
        if name in own_roots:
            fixes.append(INSTALL_PROJECT_FIX.format(name=name, root=own_roots[name]))
        else:
            fixes.append(INSTALL_DEPENDENCY_FIX.format(name=name))
    return " ".join(list(dict.fromkeys(fixes))[:3])
