"""Per-PR and per-job locks: comment edits and scheduling for a PR never interleave, and two
senders never create a job's check runs at once. One process: asyncio locks (:class:`PrLocks`);
several service replicas: PostgreSQL advisory locks (:class:`bot.service.fleet.locks.AdvisoryPrLocks`).
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol


class PrLocking(Protocol):
    """A lock per PR: comment edits and scheduling for a PR never interleave. One process: an
    asyncio lock (:class:`PrLocks`); several service replicas: a PostgreSQL advisory lock
    (:class:`bot.service.fleet.locks.AdvisoryPrLocks`)."""

    def __call__(self, repo: str, pr_number: int) -> AbstractAsyncContextManager[Any]: ...
    def job(self, job_id: str) -> AbstractAsyncContextManager[Any]:
        """One lock per job: whoever sends its check runs holds it (see :class:`PrLocks`)."""
        ...


class PrLocks:
    """One lock per PR in this process: comment edits and scheduling for a PR never interleave.

    ``job(id)`` is one lock per job: whoever sends a job's check runs (its worker, the reconciler)
    holds it, so two of them never create the same check run at once.
    """

    def __init__(self) -> None:
        self._locks: dict[tuple[str, int], asyncio.Lock] = defaultdict(asyncio.Lock)
        self._jobs: dict[str, asyncio.Lock] = defaultdict(asyncio.Lock)

    def __call__(self, repo: str, pr_number: int) -> asyncio.Lock:
        return self._locks[(repo, pr_number)]

    def job(self, job_id: str) -> asyncio.Lock:
        return self._jobs[job_id]
