"""The psycopg builders take psycopg_pool's arguments and defaults (moving from
``psycopg_pool.ConnectionPool(...)`` is a one-line change) and ``listeners=``, against a real
PostgreSQL."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import pytest

import poolkit
from pg_service import PgServer, need, pg
from poolkit import events

__all__ = ["pg"]

if TYPE_CHECKING:
    import psycopg
    import psycopg_pool

    from poolkit.backends import psycopg as pk
else:  # (the driver first: missing, the tests skip, or fail under POOLKIT_REQUIRE_SERVICES=1)
    psycopg = need("psycopg")
    psycopg_pool = need("psycopg_pool")
    pk = need("poolkit.backends.psycopg")


def test_listeners_reach_the_pool_not_the_driver(pg: PgServer) -> None:
    seen: list[poolkit.events.PoolEvent] = []
    options = poolkit.PoolOptions(max_size=1)
    with pk.create_pool(pg.dsn, options=options, application_name=pg.app, listeners=[seen.append]):
        pass
    kinds = {type(event) for event in seen}
    assert {events.PoolCreatedEvent, events.ConnectionCreatedEvent} <= kinds
    assert events.PoolClosedEvent in kinds

    async def main() -> None:
        async with pk.create_async_pool(
            pg.dsn, options=options, application_name=pg.app, listeners=[seen.append]
        ):
            pass

    seen.clear()
    asyncio.run(main())
    assert events.ConnectionCheckedOutEvent in {type(event) for event in seen}


def configure(conn: Any) -> None:
    conn.execute("SELECT 1")
    conn.commit()


def reset(conn: Any) -> None:
    conn.execute("RESET timezone")
    conn.commit()


def options_of(pool: poolkit.Pool[Any]) -> poolkit.PoolOptions:
    """A paused pool's options (the pool is closed)."""
    with pool:
        return pool.options


def test_the_same_call_as_psycopg_pool_works(pg: PgServer) -> None:
    """The arguments of a ``psycopg_pool.ConnectionPool``, given unchanged to ``create_pool``:
    the same pool sizes, waits and connect arguments."""
    arguments: dict[str, Any] = {
        "min_size": 1,
        "max_size": 2,
        "timeout": 0.2,
        "max_waiting": 5,
        "max_lifetime": 120.0,
        "max_idle": 60.0,
        "num_workers": 1,
        "open": True,
        "kwargs": {"application_name": pg.app, "connect_timeout": 5, "autocommit": False},
        "check": psycopg_pool.ConnectionPool.check_connection,
        "configure": configure,
        "reset": reset,
        "connection_class": psycopg.Connection,
    }
    for builder in (pk.create_pool, psycopg_pool.ConnectionPool):
        with builder(pg.dsn, **arguments) as pool:
            with pool.connection() as conn:
                conn.execute("SET timezone = 'Pacific/Chatham'")
            with pool.connection() as conn:
                assert conn.execute("SHOW timezone").fetchone() != ("Pacific/Chatham",)
                assert conn.info.parameter_status("application_name") == pg.app
            timed_out = (psycopg_pool.PoolTimeout, poolkit.WaitQueueTimeoutError)
            with pool.connection(), pool.connection(), pytest.raises(timed_out):
                pool.connection().__enter__()  # (the third caller waits 0.2 s, then gives up)
        if builder is pk.create_pool:
            pg.wait_sessions(0)  # (psycopg_pool is only the reference here)
    options = options_of(pk.create_pool(pg.dsn, **{**arguments, "open": False}))
    assert (options.min_size, options.max_size, options.wait_queue_timeout) == (1, 2, 0.2)
    assert (options.max_waiting, options.max_lifetime, options.max_idle_time) == (5, 120, 60)
    assert options.max_connecting == 1


def test_psycopg_pools_defaults_and_a_kept_min_size(pg: PgServer) -> None:
    with pk.create_pool(pg.dsn, application_name=pg.app) as pool:
        options = pool.options
        assert (options.min_size, options.max_size, options.wait_queue_timeout) == (4, 4, 30)
        assert (options.max_idle_time, options.max_lifetime, options.max_connecting) == (
            600,
            3600,
            3,
        )
        assert options.max_waiting == 0
        pg.wait_sessions(4)  # min_size connections are made and kept, as psycopg_pool's
    pg.wait_sessions(0)
    sized = options_of(pk.create_pool(pg.dsn, application_name=pg.app, min_size=2, open=False))
    assert (sized.min_size, sized.max_size) == (2, 2)  # max_size None: min_size
    grown = options_of(pk.create_pool(pg.dsn, min_size=0, max_size=7, open=False))
    assert (grown.min_size, grown.max_size) == (0, 7)
    # options= is the base (poolkit's defaults); the keywords given override it
    mixed = options_of(
        pk.create_pool(pg.dsn, options=poolkit.PoolOptions(max_size=10), timeout=1, open=False)
    )
    assert (mixed.min_size, mixed.max_size, mixed.wait_queue_timeout) == (0, 10, 1)


def test_open_false_makes_no_connection_until_ready(pg: PgServer) -> None:
    pool = pk.create_pool(pg.dsn, application_name=pg.app, min_size=1, open=False)
    assert pg.pids() == []
    with pool, pool.connection() as conn:  # (``with`` makes it ready, as psycopg_pool's open)
        assert conn.execute("SELECT 1").fetchone() == (1,)
    pg.wait_sessions(0)


def test_sizes_follow_psycopg_pools_rules() -> None:
    with pytest.raises(ValueError, match=r"create_pool\(min_size=4, max_size=2\).*>= min_size"):
        pk.create_pool("", max_size=2)
    with pytest.raises(ValueError, match=r"create_async_pool\(min_size=0\)"):
        pk.create_async_pool("", min_size=0)
    with pytest.raises(ValueError, match=r"create_pool\(timeout=-1\).*wait_queue_timeout"):
        pk.create_pool("", timeout=-1)
    with pytest.raises(TypeError, match=r"create_pool\(options=\.\.\.\) must be a PoolOptions"):
        pk.create_pool("", options={"max_size": 3})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("keyword", "instead"),
    [
        ("name", "address="),
        ("close_returns", r"pool\.connection\(\) block"),
        ("reconnect_timeout", "connect_retry="),
        ("reconnect_failed", "connect_retry="),
    ],
)
def test_psycopg_pool_keywords_without_a_meaning_here_say_what_to_use(
    keyword: str, instead: str
) -> None:
    extra: dict[str, Any] = {keyword: 1}
    for builder in (pk.create_pool, pk.create_async_pool):
        with pytest.raises(TypeError, match=rf"\({keyword}=\.\.\.\) is psycopg_pool's.*{instead}"):
            builder("", **extra)
        with pytest.raises(TypeError, match=rf"\({keyword}=\.\.\.\) is psycopg_pool's"):
            builder("", kwargs={keyword: 1})


def test_connect_arguments_given_twice_are_refused() -> None:
    with pytest.raises(TypeError, match="connect_timeout both in kwargs= and as keywords"):
        pk.create_pool("", kwargs={"connect_timeout": 1}, connect_timeout=2)
    with pytest.raises(TypeError, match="DSN twice"):
        pk.create_pool("host=x", conninfo="host=y")
    with pytest.raises(TypeError, match=r"connection_class=\.\.\.\) must be psycopg\.Connection"):
        pk.create_pool("", connection_class=psycopg.AsyncConnection)  # type: ignore[arg-type]


class CountingConnection(psycopg.AsyncConnection[Any]):
    """A connection class of the user's own."""

    made = 0

    @classmethod
    async def connect(cls, *args: Any, **kwargs: Any) -> Any:
        cls.made += 1
        return await super().connect(*args, **kwargs)


def test_async_the_same_call_as_psycopg_pool_works(pg: PgServer) -> None:
    async def check(conn: Any) -> None:
        await conn.execute("SELECT 1")
        await conn.rollback()

    async def main() -> None:
        async with pk.create_async_pool(
            conninfo=pg.dsn,
            min_size=1,
            max_size=1,
            timeout=0.2,
            kwargs={"application_name": pg.app},
            connection_class=CountingConnection,
            check=check,
        ) as pool:
            assert pool.options.wait_queue_timeout == 0.2
            async with pool.connection() as conn:
                assert isinstance(conn, CountingConnection)
                with pytest.raises(poolkit.WaitQueueTimeoutError):
                    async with pool.connection():
                        pass
        assert CountingConnection.made == 1
        defaults = (await pk.create_async_pool(pg.dsn, open=False)).options
        assert (defaults.min_size, defaults.max_size, defaults.wait_queue_timeout) == (4, 4, 30)

    asyncio.run(main())
    pg.wait_sessions(0)
