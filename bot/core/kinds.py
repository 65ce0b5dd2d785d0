"""The small vocabularies every layer shares: the comment command, where a run stands, the checks.

Handlers parse the command, the render layer names it in every reply and summary, and the store
keys each job's check runs by :class:`CheckKind`; defining them once here keeps the spellings from
drifting apart.
"""

from __future__ import annotations

from enum import StrEnum

COMMAND = "/retest-gpu"
"""The one comment command: ``/retest-gpu [failed | all] [env=NAME ...]`` (handlers.decisions.commands)."""


class Reaction(StrEnum):
    """The reactions paritybot leaves on a `/retest-gpu` comment: one meaning each (README, "Using it";
    docs/reporting.md), so a glance at the comment says what happened to it."""

    ACCEPTED = "eyes"  # 👀 the command was understood and its runs are queued
    PASSED = "rocket"  # 🚀 its runs finished and the change passed
    FAILED = "-1"  # 👎 its runs finished and the change fails a check (or a run broke)
    REJECTED = "confused"  # 😕 the command was not run: a mistake in it, or nothing to rerun


class Stage(StrEnum):
    """Where the PR's run stands; the comment's first line says it."""

    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    CANCELLED = "cancelled"
    AWAITING_APPROVAL = "awaiting_approval"
    CONFIG_ERROR = "config_error"


class CheckKind(StrEnum):
    """One check run per kind and environment, so a repository can require some and not others."""

    PRECOMMIT = "pre-commit"
    DOCSTRINGS = "docstrings"
    TESTS = "tests"
    PARITY = "parity"
    PERFORMANCE = "performance"  # created, completed, only by a run that compared benchmarks
    COVERAGE_MAP = "coverage map"  # created, completed, by a default-branch run that records the map


CHECK_KINDS: tuple[CheckKind, ...] = (
    CheckKind.PRECOMMIT,
    CheckKind.DOCSTRINGS,
    CheckKind.TESTS,
    CheckKind.PARITY,
)
