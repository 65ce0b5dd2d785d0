"""Viewers' sessions on the server: a cookie is a session only while the store holds it.

Signing in records a random session id (its SHA-256, in the store: :mod:`bot.service.store.sessions`)
and seals the id into the cookie beside the login and the viewer's token. Every request that shows
a private page asks the store: signing out (or an ended session) makes a copied cookie worthless at
once, on every replica, instead of letting it work until the cookie's own expiry.

A session ends at the first of:

- its absolute lifetime, ``SESSION_ABSOLUTE_S`` after sign-in (a GitHub App's user token lives 8 h);
- its idle lifetime, ``SESSION_IDLE_S`` without a request (counted to within ``SEEN_EVERY_S``: the
  store is written at most that often per session, not on every page);
- signing out (``/logout``, which also revokes the viewer's token at GitHub);
- GitHub no longer accepting the viewer's token, or no longer letting the viewer read a repository
  this session was let into (the viewers' gate asks again every ``PARITYBOT_VIEWER_ACCESS_TTL_S``).

:func:`judge` is the decision, pure; :class:`Sessions` does the store's I/O around it.
"""

from __future__ import annotations

import asyncio
import hashlib
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum

import structlog

from bot.service.store.sessions import SessionStore, ViewerSession

log = structlog.get_logger(__name__)

SESSION_ABSOLUTE_S = 8 * 3600
SESSION_IDLE_S = 2 * 3600
SEEN_EVERY_S = 300


@dataclass(frozen=True)
class SessionPolicy:
    absolute_s: float = SESSION_ABSOLUTE_S
    idle_s: float = SESSION_IDLE_S
    seen_every_s: float = SEEN_EVERY_S


class Verdict(StrEnum):
    LIVE = "live"  # in use, recently seen: nothing to write
    SEEN = "seen"  # in use: record that it was, so its idle time starts again
    UNKNOWN = "unknown"  # the store holds no such session: signed out, ended, or never started
    IDLE = "idle"  # unused longer than the idle lifetime
    EXPIRED = "expired"  # older than the absolute lifetime

    @property
    def valid(self) -> bool:
        return self in (Verdict.LIVE, Verdict.SEEN)


def judge(session: ViewerSession | None, login: str, now: datetime, policy: SessionPolicy) -> Verdict:
    """Whether the session a cookie names is still one, at ``now``."""
    if session is None or session.login != login:
        return Verdict.UNKNOWN
    if now >= session.expires_at or now - session.started_at >= timedelta(seconds=policy.absolute_s):
        return Verdict.EXPIRED
    idle = now - session.seen_at
    if idle >= timedelta(seconds=policy.idle_s):
        return Verdict.IDLE
    return Verdict.SEEN if idle >= timedelta(seconds=policy.seen_every_s) else Verdict.LIVE


def session_key(session_id: str) -> str:
    """What the store keeps of a session id: a reader of the database cannot make a cookie from it."""
    return hashlib.sha256(session_id.encode()).hexdigest()


def _utc_now() -> datetime:
    return datetime.now(UTC)


class Sessions:
    """The viewers' sessions in the store; each call is one short transaction, in a thread."""

    def __init__(
        self,
        store: SessionStore,
        policy: SessionPolicy | None = None,
        now: Callable[[], datetime] = _utc_now,
    ):
        self._store = store
        self.policy = policy or SessionPolicy()
        self._now = now

    async def start(self, login: str) -> str:
        """A new session for ``login``; its id, for the cookie."""
        session_id = secrets.token_urlsafe(32)
        at = self._now()
        expires = at + timedelta(seconds=self.policy.absolute_s)
        await asyncio.to_thread(self._store.start_session, session_key(session_id), login, at, expires)
        return session_id

    async def check(self, session_id: str, login: str) -> bool:
        """Whether the session is still one; an idle or expired one is ended now."""
        key, now = session_key(session_id), self._now()
        verdict = judge(await asyncio.to_thread(self._store.viewer_session, key), login, now, self.policy)
        if verdict == Verdict.SEEN:
            await asyncio.to_thread(self._store.session_seen, key, now)
        elif verdict in (Verdict.IDLE, Verdict.EXPIRED):
            await asyncio.to_thread(self._store.end_session, key)
            log.info("viewer session ended", login=login, why=verdict.value)
        return verdict.valid

    async def end(self, session_id: str, login: str, why: str) -> None:
        if await asyncio.to_thread(self._store.end_session, session_key(session_id)):
            log.info("viewer session ended", login=login, why=why)
