"""A psycopg connection (or a cursor, transaction, pipeline... made from it) kept past its block
refuses use with ``ConnectionReleasedError`` (a ``psycopg.InterfaceError``), on pools made by
``create_pool`` and ``create_async_pool``, against a real PostgreSQL: nothing it would have run
reaches the connection's next owner, whose block commits no stale row."""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

import pytest

import poolkit
from pg_service import PgServer, need, pg, table

__all__ = ["pg", "table"]

if TYPE_CHECKING:
    import psycopg
    from psycopg.rows import dict_row

    from poolkit.backends import psycopg as pk
else:  # (the driver first: missing, the tests skip, or fail under POOLKIT_REQUIRE_SERVICES=1)
    psycopg = need("psycopg")
    pk = need("poolkit.backends.psycopg")
    dict_row = psycopg.rows.dict_row

IDLE = psycopg.pq.TransactionStatus.IDLE
RELEASED = "the connection was released back to the pool"


def run(main: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(main())


def rows(server: PgServer, table: str) -> list[int]:
    """What is committed in ``table``, read on a connection of the test's own."""
    return [r[0] for r in server.admin.execute(f"SELECT x FROM {table} ORDER BY x").fetchall()]


def one_connection(server: PgServer, **kwargs: Any) -> poolkit.Pool[Any]:
    """A pool of one connection: the next caller surely gets the previous caller's session."""
    options = poolkit.PoolOptions(max_size=1)
    return pk.create_pool(server.dsn, options=options, application_name=server.app, **kwargs)


def async_one_connection(server: PgServer, **kwargs: Any) -> Any:
    options = poolkit.PoolOptions(max_size=1)
    return pk.create_async_pool(server.dsn, options=options, application_name=server.app, **kwargs)


def refused(call: Callable[[], object]) -> Any:
    """``call()`` raises psycopg's ``InterfaceError`` saying the connection was released (the
    backend's ``ConnectionReleasedError``); that error."""
    with pytest.raises(psycopg.InterfaceError, match=RELEASED) as info:
        call()
    assert isinstance(info.value, pk.ConnectionReleasedError)
    return info.value


async def async_refused(call: Callable[[], object]) -> Any:
    """:func:`refused` for a call that may return an awaitable (awaited) or an async context
    manager (entered)."""

    async def use() -> None:
        result = call()
        if inspect.isawaitable(result):
            await result
        elif hasattr(result, "__aenter__"):
            await result.__aenter__()

    with pytest.raises(psycopg.InterfaceError, match=RELEASED) as info:
        await use()
    assert isinstance(info.value, pk.ConnectionReleasedError)
    return info.value


# ---------------------------------------------------------------- threads


def test_a_kept_connection_refuses_and_the_next_block_commits_no_stale_row(
    pg: PgServer, table: str
) -> None:
    with one_connection(pg) as pool:
        with pool.connection() as conn:
            kept = conn
            cursor = conn.cursor()
            cursor.execute("SELECT 1")
            pid = conn.info.backend_pid
        error = refused(lambda: kept.execute(f"INSERT INTO {table} VALUES (1)"))
        assert (error.address, error.connection_id, error.attribute) == (
            pool.address,
            1,
            "execute",
        )
        refused(lambda: cursor.execute(f"INSERT INTO {table} VALUES (2)"))
        refused(lambda: setattr(kept, "row_factory", dict_row))  # (the next owner's rows)
        refused(lambda: setattr(kept, "prepare_threshold", 0))
        with pool.connection() as conn:
            assert conn.info.backend_pid == pid  # the same session
            assert conn.info.transaction_status == IDLE
            conn.execute(f"INSERT INTO {table} VALUES (3)")
            assert conn.execute("SELECT 1").fetchone() == (1,)
            assert conn.prepare_threshold == 5
        assert cursor.fetchone() == (1,)  # (rows it had received stay readable: no I/O)
    assert rows(pg, table) == [3]


@dataclasses.dataclass
class Kept:
    """What a block made and kept: its connection and things made from it."""

    conn: Any
    cursor: Any
    named: Any
    pipeline: Any
    table: str

    @property
    def insert(self) -> str:
        return f"INSERT INTO {self.table} VALUES (1)"


#: each way a kept connection (or what was made from it) could reach the pooled session
PATHS: dict[str, Callable[[Kept], object]] = {
    "execute": lambda k: k.conn.execute(k.insert),
    "cursor": lambda k: k.conn.cursor().execute(k.insert),
    "kept cursor": lambda k: k.cursor.execute(k.insert),
    "kept cursor executemany": lambda k: k.cursor.executemany(k.insert, [()]),
    "kept cursor copy": lambda k: k.cursor.copy(f"COPY {k.table} FROM STDIN").__enter__(),
    "server-side cursor": lambda k: k.conn.cursor("late").execute("SELECT 1"),
    "kept server-side cursor": lambda k: k.named.execute("SELECT 1"),
    "transaction": lambda k: k.conn.transaction().__enter__(),
    "commit": lambda k: k.conn.commit(),
    "rollback": lambda k: k.conn.rollback(),
    "pipeline": lambda k: k.conn.pipeline().__enter__(),
    "kept pipeline": lambda k: k.pipeline.sync(),
    "autocommit": lambda k: setattr(k.conn, "autocommit", True),
    "notifies": lambda k: next(k.conn.notifies(timeout=0)),
    "cancel": lambda k: k.conn.cancel_safe(),
    "close": lambda k: k.conn.close(),
}


@pytest.mark.parametrize("path", list(PATHS))
def test_every_way_to_the_session_is_refused(pg: PgServer, table: str, path: str) -> None:
    with one_connection(pg) as pool:
        with pool.connection() as conn:
            with conn.cursor("early") as named:
                named.execute("SELECT 1")
            with conn.pipeline() as pipeline:
                pass
            kept = Kept(conn, conn.cursor(), named, pipeline, table)
            pid = conn.info.backend_pid
        refused(lambda: PATHS[path](kept))
        with pool.connection() as conn:
            assert conn.info.backend_pid == pid  # the same session: not closed, not replaced
            assert conn.info.transaction_status == IDLE
            assert conn.autocommit is False
        assert pool.stats().total == 1
    assert rows(pg, table) == []


def test_a_kept_connection_refuses_while_another_caller_holds_its_connection(
    pg: PgServer, table: str
) -> None:
    with one_connection(pg) as pool:
        with pool.connection() as conn:
            kept, cursor = conn, conn.cursor()
        with pool.connection() as conn:
            conn.execute(f"INSERT INTO {table} VALUES (1)")
            refused(lambda: kept.execute(f"INSERT INTO {table} VALUES (2)"))
            refused(lambda: cursor.execute(f"INSERT INTO {table} VALUES (3)"))
            refused(lambda: kept.rollback())  # (would undo the holder's insert)
            conn.execute(f"INSERT INTO {table} VALUES (4)")
    assert rows(pg, table) == [1, 4]


def insert_then_fail(pool: poolkit.Pool[Any], table: str, kept: list[Any]) -> None:
    """A block that inserts, keeps its connection in ``kept``, then raises."""
    with pool.connection() as conn:
        kept.append(conn)
        conn.execute(f"INSERT INTO {table} VALUES (1)")
        raise ZeroDivisionError


def test_a_block_that_raised_leaves_its_connection_refusing(pg: PgServer, table: str) -> None:
    with one_connection(pg) as pool:
        kept: list[Any] = []
        with pytest.raises(ZeroDivisionError):
            insert_then_fail(pool, table, kept)
        refused(lambda: kept[0].execute(f"INSERT INTO {table} VALUES (2)"))
        with pool.connection() as conn:
            assert conn.info.transaction_status == IDLE
    assert rows(pg, table) == []


def test_a_lease_given_back_leaves_its_connection_refusing(pg: PgServer, table: str) -> None:
    with one_connection(pg) as pool:
        lease = pool.checkout()
        conn = lease.connection
        assert lease.connection is conn  # (one object per lease)
        conn.execute("SELECT 1")
        lease.release()  # (no end hook: the reset releases the lease's object)
        refused(lambda: conn.execute(f"INSERT INTO {table} VALUES (1)"))
        with pool.connection() as again:
            assert again is not conn
            assert again.info.transaction_status == IDLE
    assert rows(pg, table) == []


def test_autocommit_connections_refuse_too(pg: PgServer, table: str) -> None:
    with one_connection(pg, autocommit=True) as pool:
        with pool.connection() as conn:
            kept = conn
        refused(lambda: kept.execute(f"INSERT INTO {table} VALUES (1)"))  # (would commit)
        with pool.connection() as conn:
            assert conn.autocommit is True
    assert rows(pg, table) == []


class Tagged(psycopg.Connection[Any]):
    """A connection class of the user's own."""

    def tag(self) -> str:
        return f"tagged {self.info.backend_pid}"


def test_a_connection_class_and_row_factory_are_kept_and_refuse_too(pg: PgServer) -> None:
    with one_connection(pg, connection_class=Tagged, row_factory=dict_row) as pool:
        with pool.connection() as conn:
            assert isinstance(conn, Tagged)
            assert isinstance(conn, psycopg.Connection)
            assert conn.tag().startswith("tagged ")
            assert conn.execute("SELECT 1 AS one").fetchone() == {"one": 1}
            assert "[IDLE]" in repr(conn) or "[INTRANS]" in repr(conn)
            kept = conn
        assert isinstance(kept, Tagged)
        assert "[released]" in repr(kept)
        refused(lambda: kept.tag())
        refused(lambda: kept.execute("SELECT 1"))


def test_the_hooks_get_the_pooled_connection(pg: PgServer) -> None:
    """psycopg_pool's kind of check and reset functions (and the pool's own hooks) work on the
    pooled connection, never on a lease's object."""
    seen: list[tuple[str, type]] = []

    def check(conn: psycopg.Connection[Any]) -> None:
        conn.execute("")  # (psycopg_pool's check_connection, in short)
        seen.append(("check", type(conn)))

    def reset(conn: psycopg.Connection[Any]) -> None:
        conn.execute("SELECT 1")
        conn.rollback()
        seen.append(("reset", type(conn)))

    with one_connection(pg, check=check, reset=reset) as pool:
        for _ in range(2):
            with pool.connection() as conn:
                handed = type(conn)
        lease = pool.checkout()
        lease.release()
    assert handed is not psycopg.Connection and issubclass(handed, psycopg.Connection)
    assert {kind for kind, _ in seen} == {"check", "reset"}
    assert {cls for _, cls in seen} == {psycopg.Connection}


def hooked_pool(server: PgServer, hooks: poolkit.Hooks) -> poolkit.Pool[Any]:
    """A pool of one connection with only the ``hooks`` given (a user's own composition)."""
    connect_one = pk.connect(server.dsn, application_name=server.app)
    return poolkit.Pool(connect_one, options=poolkit.PoolOptions(max_size=1, hooks=hooks))


def test_lend_with_end_alone_releases_when_the_block_ends(pg: PgServer, table: str) -> None:
    with hooked_pool(pg, poolkit.Hooks(lend=pk.lend, end=pk.end)) as pool:
        with pool.connection() as conn:
            kept = conn
            conn.execute(f"INSERT INTO {table} VALUES (1)")
        refused(lambda: kept.execute(f"INSERT INTO {table} VALUES (2)"))
        with pool.connection() as conn:
            assert conn.info.transaction_status == IDLE
    assert rows(pg, table) == [1]


def test_lend_alone_releases_at_the_next_hand_out(pg: PgServer, table: str) -> None:
    with hooked_pool(pg, poolkit.Hooks(lend=pk.lend)) as pool:
        with pool.connection() as conn:
            kept = conn
            conn.rollback()
        with pool.connection() as conn:
            refused(lambda: kept.execute(f"INSERT INTO {table} VALUES (1)"))
            assert conn.info.transaction_status == IDLE
    assert rows(pg, table) == []


def test_hooks_lend_for_both_pools() -> None:
    assert pk.hooks().lend is pk.lend
    assert pk.async_hooks().lend is pk.lend
    assert issubclass(pk.ConnectionReleasedError, psycopg.InterfaceError)


# ---------------------------------------------------------------- asyncio


def test_async_a_kept_connection_refuses_and_the_next_block_commits_no_stale_row(
    pg: PgServer, table: str
) -> None:
    async def main() -> None:
        async with async_one_connection(pg) as pool:
            async with pool.connection() as conn:
                kept = conn
                cursor = conn.cursor()
                await cursor.execute("SELECT 1")
            await async_refused(lambda: kept.execute(f"INSERT INTO {table} VALUES (1)"))
            await async_refused(lambda: cursor.execute(f"INSERT INTO {table} VALUES (2)"))
            async with pool.connection() as conn:
                assert conn.info.transaction_status == IDLE
                await conn.execute(f"INSERT INTO {table} VALUES (3)")
                await async_refused(lambda: kept.execute(f"INSERT INTO {table} VALUES (4)"))
        assert rows(pg, table) == [3]

    run(main)


ASYNC_PATHS: dict[str, Callable[[Kept], object]] = {
    "execute": lambda k: k.conn.execute(k.insert),
    "cursor": lambda k: k.conn.cursor().execute(k.insert),
    "kept cursor": lambda k: k.cursor.execute(k.insert),
    "kept cursor copy": lambda k: k.cursor.copy(f"COPY {k.table} FROM STDIN"),
    "server-side cursor": lambda k: k.conn.cursor("late").execute("SELECT 1"),
    "kept server-side cursor": lambda k: k.named.execute("SELECT 1"),
    "transaction": lambda k: k.conn.transaction(),
    "commit": lambda k: k.conn.commit(),
    "rollback": lambda k: k.conn.rollback(),
    "pipeline": lambda k: k.conn.pipeline(),
    "kept pipeline": lambda k: k.pipeline.sync(),
    "autocommit": lambda k: k.conn.set_autocommit(True),
    "cancel": lambda k: k.conn.cancel_safe(),
    "close": lambda k: k.conn.close(),
}


@pytest.mark.parametrize("path", list(ASYNC_PATHS))
def test_async_every_way_to_the_session_is_refused(pg: PgServer, table: str, path: str) -> None:
    async def main() -> None:
        async with async_one_connection(pg) as pool:
            async with pool.connection() as conn:
                async with conn.cursor("early") as named:
                    await named.execute("SELECT 1")
                async with conn.pipeline() as pipeline:
                    pass
                kept = Kept(conn, conn.cursor(), named, pipeline, table)
                pid = conn.info.backend_pid
            await async_refused(lambda: ASYNC_PATHS[path](kept))
            async with pool.connection() as conn:
                assert conn.info.backend_pid == pid
                assert conn.info.transaction_status == IDLE
                assert conn.autocommit is False
            assert pool.stats().total == 1
        assert rows(pg, table) == []

    run(main)


def test_async_a_lease_given_back_leaves_its_connection_refusing(pg: PgServer, table: str) -> None:
    async def main() -> None:
        async with async_one_connection(pg) as pool:
            lease = await pool.checkout()
            conn = lease.connection
            await conn.execute("SELECT 1")
            lease.release()
            await async_refused(lambda: conn.execute(f"INSERT INTO {table} VALUES (1)"))
            async with pool.connection() as again:
                assert again.info.transaction_status == IDLE
        assert rows(pg, table) == []

    run(main)
