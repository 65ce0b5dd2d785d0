"""The viewers' sessions part of the store: who is signed in, so that signing out ends a session on
the server and a replayed cookie is no session (docs/security.md, "The session").

The cookie holds a random session id; the store keeps only its SHA-256 (``key``), the login and
the session's times, never the viewer's GitHub token. Both backends implement it
(:mod:`bot.service.store.sqlite_sessions`, :mod:`bot.service.store.postgres_sessions`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Protocol


@dataclass(frozen=True)
class ViewerSession:
    login: str
    started_at: datetime
    seen_at: datetime
    expires_at: datetime


class SessionStore(Protocol):
    def start_session(self, key: str, login: str, at: datetime, expires_at: datetime) -> None:
        """Record a new session; sessions already past their expiry are forgotten in the same
        transaction (the table holds live sessions only, give or take one sign-in)."""
        ...

    def viewer_session(self, key: str) -> ViewerSession | None:
        """The session of ``key``; None when it was never started, or was ended."""
        ...

    def session_seen(self, key: str, at: datetime) -> None:
        """The session was used at ``at`` (its idle time starts again)."""
        ...

    def end_session(self, key: str) -> bool:
        """Forget the session; False when there was none."""
        ...
