"""Per-PR locks shared by every service replica: PostgreSQL advisory locks.

A lock is held on a connection of its own for as long as the block runs (comment edits include
GitHub requests), and goes with the connection if the replica dies. Within one process an asyncio
lock per PR queues the waiters first, so they do not each hold a connection while they wait.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager

from psycopg_pool import AsyncConnectionPool


class AdvisoryPrLocks:
    def __init__(self, url: str, max_held: int = 16):
        self._pool = AsyncConnectionPool(
            url, min_size=0, max_size=max_held, open=False, kwargs={"autocommit": True}
        )
        self._local: dict[str, asyncio.Lock] = defaultdict(asyncio.Lock)

    async def open(self) -> None:
        await self._pool.open()

    async def close(self) -> None:
        await self._pool.close()

    def __call__(self, repo: str, pr_number: int) -> AbstractAsyncContextManager[None]:
        return self.hold(f"paritybot:pr:{repo}#{pr_number}")

    def job(self, job_id: str) -> AbstractAsyncContextManager[None]:
        """Whoever sends a job's check runs (a replica's reconciler or its report loop) holds it."""
        return self.hold(f"paritybot:job:{job_id}")

    @asynccontextmanager
    async def hold(self, key: str) -> AsyncIterator[None]:
        async with self._local[key], self._pool.connection() as conn:
            await conn.execute("SELECT pg_advisory_lock(hashtextextended(%s, 0))", (key,))
            try:
                yield
            finally:
                await conn.execute("SELECT pg_advisory_unlock(hashtextextended(%s, 0))", (key,))

    @asynccontextmanager
    async def try_hold(self, key: str) -> AsyncIterator[bool]:
        """Hold ``key`` if no one (in any replica) does; yields whether it is held."""
        async with self._pool.connection() as conn:
            cur = await conn.execute("SELECT pg_try_advisory_lock(hashtextextended(%s, 0))", (key,))
            row = await cur.fetchone()
            held = bool(row and row[0])
            try:
                yield held
            finally:
                if held:
                    await conn.execute("SELECT pg_advisory_unlock(hashtextextended(%s, 0))", (key,))
