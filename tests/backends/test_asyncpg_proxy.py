"""What the asyncpg backend hands out (issue 24, point 2): a proxy of the connection for one
lease, refusing use once the lease is given back, as asyncpg's own pool's proxy does; against a
real PostgreSQL. Its type as a user's mypy sees it is checked at the end."""

from __future__ import annotations

import asyncio
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

RELEASED = "connection has been released back to the pool"


def run(main: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(main())


def one_connection(server: PgServer, **kwargs: Any) -> pk_asyncpg.Pool:
    options = poolkit.PoolOptions(max_size=1)
    return pk_asyncpg.create_pool(
        server.dsn, options=options, application_name=server.app, **kwargs
    )


def test_a_reference_kept_after_the_block_cannot_undo_the_next_owners_transaction(
    pg: PgServer,
) -> None:
    """The issue's case: task A keeps its connection past its block; task B, the next owner,
    runs BEGIN and an INSERT; A's ROLLBACK used to end B's transaction silently (B's next INSERT
    then ran in autocommit). Now A's ROLLBACK raises and B's transaction is whole."""
    table = f"poolkit_stale_{pg.app.rsplit('-', 1)[1]}"
    pg.admin.execute(f"CREATE TABLE {table} (x int)")

    async def main() -> None:
        async with one_connection(pg, reset=False) as pool:  # (no reset: nothing in between)
            kept: list[Any] = []
            a_done = asyncio.Event()
            b_in_transaction = asyncio.Event()
            stale_tried = asyncio.Event()

            async def task_a() -> None:
                async with pool.connection() as conn:
                    kept.append(conn)
                a_done.set()
                await b_in_transaction.wait()
                with pytest.raises(asyncpg.InterfaceError, match=RELEASED):
                    await kept[0].execute("ROLLBACK")
                stale_tried.set()

            async def task_b() -> None:
                await a_done.wait()
                async with pool.connection() as conn:
                    await conn.execute("BEGIN")
                    await conn.execute(f"INSERT INTO {table} VALUES (1)")
                    b_in_transaction.set()
                    await stale_tried.wait()
                    assert conn.is_in_transaction()
                    await conn.execute(f"INSERT INTO {table} VALUES (2)")
                    await conn.execute("ROLLBACK")  # B's own decision: both rows go

            await asyncio.gather(task_a(), task_b())

    try:
        run(main)
        assert pg.admin.execute(f"SELECT count(*) FROM {table}").fetchone() == (0,)
    finally:
        pg.admin.execute(f"DROP TABLE {table}")


def test_everything_on_a_released_proxy_refuses(pg: PgServer) -> None:
    async def main() -> None:
        async with one_connection(pg) as pool:
            async with pool.connection() as conn:
                fetchval = conn.fetchval  # a method taken off it in the block
                assert await fetchval("SELECT 1") == 1
                assert not conn.is_closed()
                assert "[released]" not in repr(conn)
            for use in (
                lambda: fetchval("SELECT 1"),
                lambda: conn.execute("ROLLBACK"),
                conn.is_closed,
                conn.get_server_pid,
                lambda: conn._protocol,  # type: ignore[attr-defined]  # (not a method of Connection)
            ):
                with pytest.raises(asyncpg.InterfaceError, match=RELEASED):
                    use()
            assert "[released]" in repr(conn)

    run(main)


def test_each_lease_gets_its_own_proxy_of_the_same_connection(pg: PgServer) -> None:
    async def main() -> None:
        async with one_connection(pg) as pool:
            lease = await pool.checkout()
            first = lease.connection
            assert lease.connection is first  # one proxy a lease
            assert isinstance(first, asyncpg.Connection)  # as asyncpg's proxy
            assert isinstance(first, pk_asyncpg.PooledConnection)
            assert type(first) is not asyncpg.Connection
            pid = first.get_server_pid()
            lease.release()
            with pytest.raises(poolkit.InvalidLeaseError):
                lease.connection  # noqa: B018  (the lease itself refuses as before)
            async with pool.connection() as second:
                assert second is not first and second.get_server_pid() == pid
                with pytest.raises(asyncpg.InterfaceError, match=RELEASED):
                    first.get_server_pid()

    run(main)


def test_resources_of_an_earlier_lease_refuse_use(pg: PgServer) -> None:
    """Transactions, prepared statements and cursors are asyncpg's objects on the connection
    itself: as with asyncpg's pool, those made in a block refuse use after it."""

    async def main() -> None:
        for reset in (True, False):
            async with one_connection(pg, reset=reset) as pool:
                async with pool.connection() as conn:
                    transaction = conn.transaction()
                    await transaction.start()
                    statement = await conn.prepare("SELECT 1")
                    assert await statement.fetchval() == 1
                async with pool.connection() as conn:
                    with pytest.raises(asyncpg.InterfaceError, match="released back"):
                        await transaction.rollback()
                    with pytest.raises(asyncpg.InterfaceError, match="released back"):
                        await statement.fetchval()
                    # (reset=False too rolls back a transaction left open: a caller never finds
                    # itself inside the last caller's)
                    assert not conn.is_in_transaction()
                    assert await conn.fetchval("SELECT 2") == 2

    run(main)


def test_the_hooks_and_the_close_get_the_connection_itself(pg: PgServer) -> None:
    seen: list[Any] = []

    async def configure(conn: Any) -> None:
        seen.append(conn)

    async def main() -> None:
        async with one_connection(pg, configure=configure, check="ping") as pool:
            with pytest.raises(asyncpg.DivisionByZeroError):  # (is_broken asked)
                await fail_in_a_transaction(pool)
            async with pool.connection() as conn:  # checked (ping) and reset on the connection
                assert await conn.fetchval("SELECT 1") == 1
        (made,) = seen
        assert type(made) is not pk_asyncpg.PooledConnection
        assert made.is_closed()  # the pool closed the connection itself
        assert pool.stats().connections_closed == {"poolClosed": 1}

    run(main)


async def fail_in_a_transaction(pool: pk_asyncpg.Pool | poolkit.AsyncPool[Any]) -> None:
    async with pool.connection() as conn:
        await conn.execute("BEGIN")
        await conn.fetchval("SELECT 1/0")


def test_proxies_leave_nothing_for_the_garbage_collector(pg: PgServer) -> None:
    """The lease keeps its proxy, the proxy only a weak reference to the lease: a block's
    objects go with their last reference (no cycle on the hand-out path)."""
    import gc
    import weakref

    async def main() -> None:
        async with one_connection(pg) as pool:
            gc.collect()
            gc.disable()
            try:
                async with pool.connection() as conn:
                    await conn.fetchval("SELECT 1")
                gone = weakref.ref(conn)
                del conn
                assert gone() is None
            finally:
                gc.enable()

    run(main)
