"""Check-run annotations: the failures placed on the lines of the files they concern.

From a failed hook's ``path:LINE[:COL]: message`` lines, and from a failing test's traceback (the
last frame in the test's own file). GitHub takes at most 50 per request; :func:`annotation_batches`
splits them.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from bot.core import limits
from bot.core.models import (
    TestCaseResult,
    TestOutcome,
)
from bot.core.verdict import NOT_CAUSED
from bot.render import markdown as md
from bot.render.phrases import error_headline, one_line


def annotation_batches(annotations: Sequence[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Split annotations into GitHub's 50-per-request batches, in order.

    The first batch goes with the create (or completing) call, each later one in a PATCH of its
    own: GitHub appends annotations on every update. No annotations, no batches.
    """
    size = limits.ANNOTATIONS_PER_REQUEST
    return [list(annotations[i : i + size]) for i in range(0, len(annotations), size)]


# "path:LINE: message" or "path:LINE:COL: message", as ruff, flake8, mypy and pytest print them.
_LOCATION = re.compile(r"^(?P<path>[\w./+-][^\s:]*\.\w+):(?P<line>\d+):(?:(?P<col>\d+):)?\s*(?P<msg>.*)$")


def hook_annotations(output: str, hook_id: str) -> list[dict[str, Any]]:
    """Annotations from a failed hook's ``path:LINE[:COL]: message`` lines; other lines are ignored."""
    found = []
    for raw in output.splitlines():
        m = _LOCATION.match(raw.strip())
        if m is None or m["path"].startswith("/"):
            continue  # an absolute path is outside the repository; GitHub could not place it
        line = int(m["line"])
        if line < 1:
            continue
        found.append(
            annotation(m["path"].removeprefix("./"), line, line, "failure", m["msg"] or raw, hook_id)
        )
    return found


def annotation(path: str, start: int, end: int, level: str, message: str, title: str) -> dict[str, Any]:
    ann: dict[str, Any] = {
        "path": path,
        "start_line": start,
        "end_line": max(start, end),
        "annotation_level": level,
        "message": limits.truncate(
            md.plain(message.strip("\n").rstrip() or title), limits.ANNOTATION_MESSAGE_SOFT_MAX
        ),
    }
    if title:
        ann["title"] = one_line(md.plain(title), limits.ANNOTATION_TITLE_MAX)
    return ann


def capped(annotations: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return annotations[: limits.ANNOTATIONS_PER_RUN_MAX]


def nodeid_path(nodeid: str) -> str | None:
    """The file of a pytest node id (``tests/test_x.py::Test::test[p]`` → ``tests/test_x.py``).

    None when the id names no Python file (a unittest-style dotted name, a JUnit class name):
    such a failure cannot be placed on a file.
    """
    path = nodeid.split("::", 1)[0].split("[", 1)[0]
    if not path.endswith(".py") or path.startswith("/"):
        return None
    return path.removeprefix("./")


# Where a traceback names a frame: pytest's ``path:LINE:`` and Python's ``File "path", line N``.
_FRAMES = (
    re.compile(r"(?P<path>[^\s:\"'()\[\]]+\.py):(?P<line>\d+)\b"),
    re.compile(r"File \"(?P<path>[^\"]+\.py)\", line (?P<line>\d+)"),
)


def failure_line(path: str, message: str, fallback: int | None = None) -> int:
    """The line in ``path`` a traceback points at: its last frame in that file, else ``fallback``
    (the test's own line, as pytest's report names it), else line 1.

    The last frame in the test's own file is the one nearest the failure. A frame's path is
    either the same relative path or an absolute one ending in it (``/workspace/tests/x.py``, as
    a container prints it); ``sub/test_x.py`` is NOT ``test_x.py``.
    """
    best: tuple[int, int] | None = None  # (position in the message, line)
    for pattern in _FRAMES:
        for m in pattern.finditer(message):
            found, number = m["path"], int(m["line"])
            same = found == path or (found.startswith("/") and found.endswith("/" + path))
            if same and number >= 1 and (best is None or m.start() > best[0]):
                best = (m.start(), number)
    return best[1] if best else (fallback or 1)


def early_test_annotation(r: TestCaseResult) -> dict[str, Any] | None:
    """A test that failed while the others still run, on its line at once. A warning: whether the
    change caused it (a rerun, the base) is known only when the tests end, and GitHub keeps every
    annotation it was sent, so this one says only what is already certain."""
    path = nodeid_path(r.nodeid)
    if path is None:
        return None
    headline = error_headline(r.message) or r.outcome.value
    message = (
        f"Failed at this head while the other tests still ran: {headline}\n\n"
        "Whether this change caused it (a rerun, the same test at the base) is in the final result."
    )
    return annotation(
        path,
        failure_line(path, r.message, r.line),
        failure_line(path, r.message, r.line),
        "warning",
        message,
        r.nodeid,
    )


def test_annotation(r: TestCaseResult) -> dict[str, Any] | None:
    path = nodeid_path(r.nodeid)
    if path is None:
        return None
    line = failure_line(path, r.message, r.line)
    level = "warning" if r.outcome == TestOutcome.FLAKY or r.cause in NOT_CAUSED else "failure"
    # The hover box is small: the headline first, then the error as pytest printed it.
    headline = error_headline(r.message) or r.outcome.value
    if r.outcome == TestOutcome.FLAKY:
        headline = f"Flaky, passed on attempt {r.attempts}: {headline}"
    elif r.cause in NOT_CAUSED:
        headline = f"Not caused by this change ({r.cause}): {headline}"
    message = headline + ("\n\n" + r.message.strip("\n") if r.message.strip() else "")
    if r.repro:
        message += "\n\nReproduce:\n" + "\n".join(r.repro)
    return annotation(path, line, line, level, message, r.nodeid)
