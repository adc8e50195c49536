"""``poolkit.backends.asyncpg.create_pool`` as a swap for ``asyncpg.create_pool`` (issue 24, points
13 and 14): the same keywords where they mean the same, asyncpg's pool's defaults, the others
refused at the call saying where they go; against a real PostgreSQL where a pool is made."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

import pytest

import poolkit
from pg_service import PgServer, need, pg, wait_until
from poolkit import events as ev

__all__ = ["pg"]

asyncpg = need("asyncpg")
if TYPE_CHECKING:
    from poolkit.backends import asyncpg as pk_asyncpg
else:
    pk_asyncpg = need("poolkit.backends.asyncpg")


def run(main: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(main())


def test_max_size_as_asyncpg_spells_it(pg: PgServer) -> None:
    """The issue's call: ``create_pool(dsn, max_size=5)`` failed at the first connect
    (``connect() got an unexpected keyword argument 'max_size'``)."""

    async def main() -> None:
        async with pk_asyncpg.create_pool(pg.dsn, max_size=5, application_name=pg.app) as pool:
            options = pool.options
            # asyncpg's min_size (10) lowered to fit; its idle limit (300 s)
            assert (options.max_size, options.min_size, options.max_idle_time) == (5, 5, 300.0)

            async def one() -> int:
                async with pool.connection() as conn:
                    return int(await conn.fetchval("SELECT 1 FROM pg_sleep(0.01)"))

            assert await asyncio.gather(*(one() for _ in range(20))) == [1] * 20
            assert pool.stats().total <= 5 and len(pg.pids()) <= 5
        pg.wait_sessions(0)

    run(main)


def test_the_defaults_are_asyncpgs_pools() -> None:
    assert (pk_asyncpg.MIN_SIZE, pk_asyncpg.MAX_SIZE) == (10, 10)
    assert pk_asyncpg.MAX_INACTIVE_CONNECTION_LIFETIME == 300.0
    defaults = inspect.signature(asyncpg.create_pool).parameters  # (the installed asyncpg's)
    assert defaults["min_size"].default == pk_asyncpg.MIN_SIZE
    assert defaults["max_size"].default == pk_asyncpg.MAX_SIZE
    lifetime = defaults["max_inactive_connection_lifetime"].default
    assert lifetime == pk_asyncpg.MAX_INACTIVE_CONNECTION_LIFETIME


def test_the_pool_has_asyncpgs_defaults_unless_options_say_otherwise(pg: PgServer) -> None:
    async def main() -> None:
        async with pk_asyncpg.create_pool(pg.dsn, application_name=pg.app) as pool:
            options = pool.options
            assert (options.min_size, options.max_size, options.max_idle_time) == (10, 10, 300)
            await wait_until(lambda: len(pg.pids()) == 10, "min_size to be filled")
        await wait_until(lambda: pg.pids() == [], "the sessions to end")
        given = poolkit.PoolOptions(max_size=3)  # options=: the whole configuration, as given
        async with pk_asyncpg.create_pool(pg.dsn, options=given, application_name=pg.app) as p:
            assert (p.options.min_size, p.options.max_size, p.options.max_idle_time) == (0, 3, None)
            assert pg.pids() == []  # (init_size is min_size, 0: none made yet, as asyncpg's)
        pg.wait_sessions(0)

    run(main)


_Record: Any = asyncpg.Record
_Connection: Any = asyncpg.Connection


class Counted(_Record):  # type: ignore[misc]  # (a class of the driver's, imported at run time)
    """A record class of the user's (asyncpg's ``record_class``)."""


def test_asyncpgs_own_keywords_mean_the_same(pg: PgServer) -> None:
    """``min_size``, ``max_size``, ``max_inactive_connection_lifetime``, ``init``,
    ``connection_class``, ``record_class``, ``loop`` and ``connect`` as ``asyncpg.create_pool``
    takes them, with ``asyncpg.connect``'s own keywords beside them."""
    initialised: list[Any] = []
    connected: list[dict[str, Any]] = []

    class MyConnection(_Connection):  # type: ignore[misc]
        pass

    async def init(conn: Any) -> None:
        initialised.append(conn)

    async def my_connect(*args: Any, **kwargs: Any) -> Any:
        connected.append(kwargs)
        return await asyncpg.connect(*args, **kwargs)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        async with pk_asyncpg.create_pool(
            pg.dsn,
            min_size=1,
            max_size=2,
            max_inactive_connection_lifetime=0,
            init=init,
            connection_class=MyConnection,
            record_class=Counted,
            loop=loop,
            connect=my_connect,
            command_timeout=5,
            server_settings={"application_name": pg.app},
        ) as pool:
            assert (pool.options.min_size, pool.options.max_size) == (1, 2)
            assert pool.options.max_idle_time is None  # 0: none, as asyncpg's 0
            async with pool.connection() as conn:
                row = await conn.fetchrow("SELECT 1 AS x")
                assert type(row) is Counted and row["x"] == 1
        assert len(initialised) == 1 and isinstance(initialised[0], MyConnection)
        (call,) = connected
        assert call["loop"] is loop and issubclass(call["connection_class"], MyConnection)
        assert call["record_class"] is Counted and call["command_timeout"] == 5

    run(main)


def test_a_reset_function_runs_after_the_rollback_in_place_of_the_reset_query(
    pg: PgServer,
) -> None:
    """``reset=`` as ``asyncpg.create_pool`` runs it: after the rollback (and the listeners
    dropped), instead of asyncpg's ``RESET ALL``... query."""
    resets: list[int] = []

    async def my_reset(conn: Any) -> None:
        resets.append(conn.get_server_pid())
        await conn.execute("RESET timezone")

    async def main() -> None:
        async with pk_asyncpg.create_pool(
            pg.dsn, max_size=1, reset=my_reset, application_name=pg.app
        ) as pool:
            async with pool.connection() as conn:
                default_tz = await conn.fetchval("SHOW timezone")
                await conn.execute("SET timezone = 'Pacific/Chatham'")
                await conn.execute("SET search_path = 'elsewhere'")
                await conn.execute("BEGIN")
            async with pool.connection() as conn:
                assert not conn.is_in_transaction()
                assert await conn.fetchval("SHOW timezone") == default_tz
                assert await conn.fetchval("SHOW search_path") == "elsewhere"  # no RESET ALL
            assert len(resets) >= 2  # (create_pool's own check-out too)

    run(main)


def test_listeners_are_the_pools(pg: PgServer) -> None:
    seen: list[ev.PoolEvent] = []

    async def main() -> None:
        async with pk_asyncpg.create_pool(
            pg.dsn, max_size=1, listeners=[seen.append], application_name=pg.app
        ) as pool, pool.connection() as conn:
            await conn.fetchval("SELECT 1")
        kinds = {type(e).__name__ for e in seen}
        assert {"PoolCreatedEvent", "ConnectionReadyEvent", "ConnectionCheckedOutEvent"} <= kinds

    run(main)


def test_a_loop_that_is_not_the_running_one_is_refused(pg: PgServer) -> None:
    other = asyncio.new_event_loop()

    async def main() -> None:
        with pytest.raises(ValueError, match=r"create_pool\(loop=\.\.\.\)"):
            await pk_asyncpg.create_pool(pg.dsn, loop=other, application_name=pg.app)

    try:
        run(main)
    finally:
        other.close()
    assert pg.pids() == []


@pytest.mark.parametrize(
    ("kwargs", "says"),
    [
        ({"hooks": poolkit.Hooks()}, r"hooks=\.\.\.\): create_pool\(\) sets the hooks"),
        ({"wait_queue_timeout": 5}, r"is a pool option: .*PoolOptions\(wait_queue_timeout="),
        ({"bogus": 1, "pasword": "x"}, r"got bogus=, pasword=: not a keyword of create_pool"),
        (
            {"max_size": 5, "options": poolkit.PoolOptions()},
            r"create_pool\(max_size=\.\.\.\) with options=: give it once, in .*max_size",
        ),
        (
            {"max_inactive_connection_lifetime": 5, "options": poolkit.PoolOptions()},
            r"PoolOptions\(max_idle_time=",
        ),
        ({"init": print, "configure": print}, r"init= is asyncpg's name for configure="),
    ],
)
def test_what_has_no_place_is_refused_at_the_call(kwargs: dict[str, Any], says: str) -> None:
    """Refused when ``create_pool`` is called, before anything is awaited or connected, with
    where it goes."""
    with pytest.raises(TypeError, match=says):
        pk_asyncpg.create_pool("postgresql://nowhere/db", **kwargs)


def test_connect_refuses_what_asyncpg_connect_does_not_take() -> None:
    with pytest.raises(TypeError, match=r"max_size=\.\.\.\) is a pool option"):
        pk_asyncpg.async_connect("postgresql://nowhere/db", max_size=5)
    with pytest.raises(
        TypeError, match=r"got hots=: not a keyword of async_connect\(\) nor of asyncpg"
    ):
        pk_asyncpg.async_connect("postgresql://nowhere/db", hots="db")


def test_a_login_the_server_refuses_fails_up_front(pg: PgServer) -> None:
    """Point 14: the builder fails in ``create_pool``, not at the first use, when the server
    refuses the login (this server trusts every password: a role it does not know is refused
    the same way, at authentication), and leaves nothing open."""
    bad = pg.dsn.replace("://postgres@", "://no_such_role_poolkit:wrong@")
    assert bad != pg.dsn

    async def main() -> None:
        with pytest.raises(asyncpg.InvalidAuthorizationSpecificationError):
            await pk_asyncpg.create_pool(bad, application_name=pg.app)

    run(main)
    assert pg.pids() == []


@pytest.mark.parametrize("size", [0, -1])
def test_a_max_size_asyncpg_refuses_is_refused(size: int) -> None:
    # (an audit of issue 24: max_size=0 made a pool without a limit, PoolOptions' meaning of 0;
    # asyncpg.create_pool raises "max_size is expected to be greater than zero")
    with pytest.raises(ValueError, match="max_size is expected to be greater than zero"):
        pk_asyncpg.create_pool("postgresql://x@127.0.0.1/test", max_size=size)


def test_a_dsn_of_several_hosts_works_as_with_asyncpg(pg: PgServer) -> None:
    # (an audit of issue 24: the address shown was built with urlsplit(...).port, which raised
    # "Port could not be cast to integer value as '5432,127.0.0.1:5432'" for a DSN asyncpg takes)
    host = pg.dsn.split("@", 1)[1].split("/", 1)[0]
    dsn = pg.dsn.replace(host, f"{host},{host}", 1)

    async def main() -> None:
        async with pk_asyncpg.create_pool(
            dsn, min_size=1, max_size=1, application_name=pg.app
        ) as pool:
            assert pool.address == f"{host},{host}/test"
            async with pool.connection() as conn:
                assert await conn.fetchval("SELECT 1") == 1

    run(main)


def test_reset_false_still_rolls_back_a_transaction_left_open(pg: PgServer) -> None:
    # (an audit of issue 24: with reset=False the next caller's "transaction" was silently a
    # savepoint inside the last caller's, and its rows never committed)
    async def main() -> None:
        async with pk_asyncpg.create_pool(
            pg.dsn, min_size=1, max_size=1, reset=False, application_name=pg.app
        ) as pool:
            async with pool.connection() as conn:
                await conn.execute("CREATE TABLE IF NOT EXISTS poolkit_rb (x int)")
                await conn.execute("TRUNCATE poolkit_rb")
            async with pool.connection() as conn:
                await conn.transaction().start()  # and left open
                await conn.execute("INSERT INTO poolkit_rb VALUES (1)")
            async with pool.connection() as conn:
                assert not conn.is_in_transaction()
                async with conn.transaction():
                    await conn.execute("INSERT INTO poolkit_rb VALUES (2)")
            async with pool.connection() as conn:
                assert [tuple(r) for r in await conn.fetch("SELECT x FROM poolkit_rb")] == [(2,)]
                await conn.execute("DROP TABLE poolkit_rb")

    run(main)


def test_reset_false_costs_a_clean_connection_nothing(pg: PgServer) -> None:
    async def main() -> None:
        conn = await asyncpg.connect(pg.dsn, server_settings={"application_name": pg.app})
        try:
            await conn.execute("SELECT 1")
            assert pk_asyncpg.async_rollback_only(conn) is None  # (no round trip, no task)
            await conn.execute("BEGIN")
            rollback = pk_asyncpg.async_rollback_only(conn)
            assert rollback is not None
            await rollback
            assert not conn.is_in_transaction()
        finally:
            await conn.close()

    run(main)
