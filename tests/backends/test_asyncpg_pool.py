"""The asyncpg backend's pool against a real PostgreSQL, as issue 24 found it: how many server
connections it opens for the callers it serves, and a close that races its connects."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

import pytest

import poolkit
from pg_service import PgServer, need, pg

__all__ = ["pg"]

asyncpg = need("asyncpg")
if TYPE_CHECKING:
    from poolkit.backends import asyncpg as pk_asyncpg
else:
    pk_asyncpg = need("poolkit.backends.asyncpg")


def run(main: Callable[[], Coroutine[Any, Any, None]]) -> list[dict[str, Any]]:
    """``asyncio.run(main())``; returns what reached the loop's exception handler (asyncio's
    "Future exception was never retrieved", "Task exception was never retrieved"...), the
    garbage collected on the loop before it closes."""
    reported: list[dict[str, Any]] = []

    async def watched() -> None:
        asyncio.get_running_loop().set_exception_handler(lambda _, ctx: reported.append(ctx))
        try:
            await main()
        finally:
            gc.collect()  # (an unretrieved future is reported when it is collected)
            await asyncio.sleep(0)

    asyncio.run(watched())
    return reported


def messages(reported: list[dict[str, Any]]) -> list[str]:
    return [f"{ctx.get('message')}: {ctx.get('exception')!r}" for ctx in reported]


# ---------------------------------------------------------------- connections opened


@pytest.mark.parametrize("reset", [True, False])
def test_a_caller_back_for_more_waits_for_its_reset_not_for_a_new_connection(
    pg: PgServer, reset: bool
) -> None:
    """Issue 24, point 5: 50 tasks on a pool of up to 100 opened up to 100 server connections,
    since a caller back for more found its connection still being reset and the pool connected
    anew. A reset running covers a waiter as a connect in flight does: about 50 now."""

    async def main() -> None:
        options = poolkit.PoolOptions(max_size=100)
        async with pk_asyncpg.create_pool(
            pg.dsn, options=options, application_name=pg.app, reset=reset
        ) as pool:

            async def task() -> None:
                for _ in range(40):
                    async with pool.connection() as conn:
                        await conn.fetchval("SELECT pg_sleep(0.001)")

            await asyncio.gather(*(task() for _ in range(50)))
            stats = pool.stats()
            # none closed: the total now (pending ones included) is the most there ever were
            assert stats.connections_closed == {}
            assert len(pg.pids()) <= stats.total <= 52, stats

    assert messages(run(main)) == []


def test_the_first_checkout_after_create_pool_opens_no_second_connection(pg: PgServer) -> None:
    """Issue 24, point 5: ``create_pool`` checks one connection out and back (so a wrong DSN
    fails there); the first caller found it being reset and a second connection was made."""

    async def main() -> None:
        options = poolkit.PoolOptions(max_size=100)
        async with pk_asyncpg.create_pool(pg.dsn, options=options, application_name=pg.app) as p:
            async with p.connection() as conn:
                assert await conn.fetchval("SELECT 1") == 1
            stats = p.stats()
            assert (stats.total, stats.connections_created, stats.connect_attempts) == (1, 1, 1)
            assert len(pg.pids()) == 1

    assert messages(run(main)) == []


# ---------------------------------------------------------------- a close racing connects


def test_closing_right_after_a_checkout_leaves_no_unretrieved_future(pg: PgServer) -> None:
    """Issue 24, point 6: ``checkout``, ``close()``, ``lease.release()`` printed "Future exception
    was never retrieved ... ConnectionError('unexpected connection_lost() call')" in about half
    the runs (a connect the close abandoned, cancelled inside asyncpg's handshake)."""

    async def main() -> None:
        for _ in range(20):
            options = poolkit.PoolOptions(max_size=10)
            pool = await pk_asyncpg.create_pool(pg.dsn, options=options, application_name=pg.app)
            lease = await pool.checkout()
            closing = asyncio.ensure_future(pool.close())
            await asyncio.sleep(0)
            lease.release()
            await closing
            gc.collect()
        pg.wait_sessions(0)

    assert messages(run(main)) == []


def test_connects_abandoned_by_a_close_leave_nothing_behind(pg: PgServer) -> None:
    """A close while connects are in flight (``min_size`` being filled) abandons them: each is
    let finish its handshake and closed, never cancelled halfway (asyncpg then leaves a future
    whose error nobody retrieves). The closes land at every point of the handshake."""

    async def main() -> None:
        connect_one = pk_asyncpg.async_connect(pg.dsn, application_name=pg.app)
        for n in range(20):
            pool = poolkit.AsyncPool(connect_one, options=poolkit.PoolOptions(min_size=2))
            pool.ready()
            await asyncio.sleep(n * 0.0003)  # (0 to 6 ms: before, during, after the handshakes)
            await pool.close()
            stats = pool.stats()
            assert (stats.total, stats.abandoned) == (0, 0)
            gc.collect()
        pg.wait_sessions(0)

    assert messages(run(main)) == []
