"""PostgreSQL's LISTEN, turned into asyncio events: each NOTIFY on a channel sets that channel's
event (and calls its callbacks with the payload), so a loop waiting on it wakes in milliseconds.

Every waiting loop still polls: a notification sent while the connection was down is lost, and
the poll is what catches up. All events are set once listening starts, for the same reason.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping

import psycopg

Heard = Callable[[str], None]  # called with a notification's payload


async def listen(
    database_url: str, events: Mapping[str, asyncio.Event], heard: Mapping[str, Heard] | None = None
) -> None:
    """LISTEN on every channel of ``events`` (and of ``heard``) until cancelled."""
    heard = heard or {}
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
        for channel in {*events, *heard}:
            await conn.execute(f"LISTEN {channel}")
        for event in events.values():
            event.set()
        async for note in conn.notifies():
            if note.channel in events:
                events[note.channel].set()
            if note.channel in heard:
                heard[note.channel](note.payload)
