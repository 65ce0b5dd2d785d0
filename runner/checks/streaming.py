"""The first failure while the rest still run: the test step's live file, read as it grows.

The injected plugin appends a JSON line per result to ``.paritybot/live.jsonl``
(:data:`runner.checks.testexec.LIVE_PATH`). Where the step runs in the workspace itself (the host
runner), the pipeline reads it while pytest runs and reports the failures so far, rate-limited:
the first failure at once, then at most one update per :data:`MIN_INTERVAL_S`. In a container
(:class:`ContainerTail`) the runner reads the file from the running step's workspace through the
engine, every :data:`POLL_S`, as it collects a step's files (never through a link). The pull request's code could write the file too: what it says is shown only until the
final result replaces it, is capped, and is never read through a link.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from bot.core.models import TestCaseResult, TestOutcome, TestsProgress

MIN_INTERVAL_S = 10.0  # GitHub's secondary rate limits: no more than one update per PR this often
POLL_S = 1.0
MAX_BYTES = 4_000_000  # read no further: a run printing more is shown at its end
MAX_LINE = 10_000_000  # past any source file's length
MAX_FAILURES = 200


@dataclass
class LiveTail:
    """Reads the new complete lines of the live file on each call; never follows a link."""

    path: Path
    offset: int = 0
    total: int | None = None
    done: int = 0
    failed: list[TestCaseResult] = field(default_factory=list)

    def read(self) -> bool:
        """Take in what was appended since; True when a failure was new."""
        data = self._new_bytes()
        end = data.rfind(b"\n") + 1
        self.offset += end
        before = len(self.failed)
        for line in data[:end].splitlines():
            self._take(line)
        return len(self.failed) > before

    def progress(self) -> TestsProgress:
        return TestsProgress(done=self.done, total=self.total)

    def _new_bytes(self) -> bytes:
        if self.offset >= MAX_BYTES or self.path.parent.is_symlink():
            return b""
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            return b""  # not there (yet), or a link
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return b""
            os.lseek(fd, self.offset, os.SEEK_SET)
            return os.read(fd, MAX_BYTES - self.offset)
        finally:
            os.close(fd)

    def _take(self, line: bytes) -> None:
        try:
            entry = json.loads(line)
        except ValueError:
            return
        if not isinstance(entry, dict):
            return
        if isinstance(entry.get("total"), int) and self.total is None:
            self.total = max(0, entry["total"])
        elif entry.get("done") == 1:
            self.done += 1
        elif isinstance(entry.get("failed"), str) and len(self.failed) < MAX_FAILURES:
            message = entry["message"] if isinstance(entry.get("message"), str) else ""
            at = entry.get("line")
            self.failed.append(
                TestCaseResult(
                    nodeid=entry["failed"][:500],
                    outcome=TestOutcome.FAILED,
                    message=message[:500],
                    # The file is the PR's to write: a line that is no line number is dropped.
                    line=at if type(at) is int and 1 <= at <= MAX_LINE else None,
                )
            )


@dataclass
class ContainerTail(LiveTail):
    """The live file of a step running in a container: read whole through the runner each time
    (it stays under :data:`MAX_BYTES`), the new part taken past ``offset``."""

    fetch: Callable[[], str | None] = lambda: None

    def _new_bytes(self) -> bytes:
        if self.offset >= MAX_BYTES:
            return b""
        text = self.fetch()
        return b"" if text is None else text.encode("utf-8", "replace")[self.offset : MAX_BYTES]
