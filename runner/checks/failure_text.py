"""Whether two failures of a test are the same one: their error summaries once what varies between
two runs of the same failure is masked. Shared by the reruns (``testexec.py``: a failure repeated
identically is not rerun again) and the attribution (``attribution.py``: the same error on the
merge base)."""

from __future__ import annotations

import re

# What varies between two runs of the same failure: object addresses, temporary paths, timings.
_VOLATILE = [
    (re.compile(r"0x[0-9a-fA-F]+"), "0x…"),
    (re.compile(r"/tmp/[^\s'\"]+"), "/tmp/…"),
    (re.compile(r"\d+\.\d+\s*(s|ms|seconds)\b"), "… s"),
    # The location lines (``path:line: Error``, or ``path:line`` alone): the line number moves, and
    # a moved test's path with it.
    (re.compile(r"^\S[^:\s]*:\d+(: |$)", re.MULTILINE), ""),
]


def same_error(head: str, base: str) -> bool:
    """Whether two error summaries are the same failure, once what varies run to run is masked."""
    return _masked(head) == _masked(base)


def _masked(message: str) -> str:
    text = message.strip()
    for pattern, replacement in _VOLATILE:
        text = pattern.sub(replacement, text)
    return "\n".join(line.rstrip() for line in text.splitlines() if line.strip())
