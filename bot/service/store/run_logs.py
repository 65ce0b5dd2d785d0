"""The run logs' part of the store: add a run's events, read them back in order, forget old runs.

Both backends implement it (:mod:`bot.service.store.sqlite_logs`, :mod:`bot.service.store.postgres_logs`).
With several hosts an agent adds its run's events to PostgreSQL directly (its role may only insert
them) and NOTIFYs ``LOG_CHANNEL`` with the run's id; the service's run pages LISTEN.
"""

from __future__ import annotations

from datetime import datetime
from typing import Protocol

from bot.core.run_log import LogEvent, NewLogEvent

LOG_CHANNEL = "paritybot_run_log"
READ_BATCH = 5000  # events per read: a page of a long log, never the whole store


class RunLogStore(Protocol):
    def append_log(self, job_id: str, attempt: int, events: list[NewLogEvent]) -> None:
        """Add events to a run's log, in order, in one transaction (and wake its readers)."""
        ...

    def log_events(self, job_id: str, after: int = 0, limit: int = READ_BATCH) -> list[LogEvent]:
        """The run's events after ``seq`` ``after``, oldest first, at most ``limit``."""
        ...

    def purge_logs(self, before: datetime) -> int:
        """Forget the logs of runs whose last event is older than ``before``; how many events went."""
        ...

    def log_size(self) -> int:
        """Characters of output the store keeps in all runs' logs."""
        ...
