"""The asyncpg backend against a real PostgreSQL: its hooks called directly, its one-call pool,
and what goes wrong without the hooks (the scenarios with the pool running them are in
``test_asyncpg_scenarios.py``)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import pytest

import poolkit
from pg_service import PgServer, SilentProxy, need, pg, wait_until

__all__ = ["pg"]  # the fixture, imported for the tests below

asyncpg = need("asyncpg")
if TYPE_CHECKING:
    from poolkit.backends import asyncpg as pk_asyncpg
else:  # (once the driver is known to be there)
    pk_asyncpg = need("poolkit.backends.asyncpg")


#: the connections a test opened with ``connect``: ``run`` closes those still open
opened: list[Any] = []


def run(main: Callable[[], Awaitable[None]]) -> None:
    """``asyncio.run(main())``, closing what ``connect`` opened even if the test failed."""

    async def guarded() -> None:
        try:
            await main()
        finally:
            for conn in opened:
                if not conn.is_closed():
                    conn.terminate()
            opened.clear()

    asyncio.run(guarded())


async def connect(server: PgServer, **kwargs: Any) -> Any:
    """A connection made by the backend's connect function (as the pool makes them)."""
    connect_one = pk_asyncpg.async_connect(server.dsn, application_name=server.app, **kwargs)
    conn = await connect_one(poolkit.ConnectContext(1, server.dsn, None, 0))
    opened.append(conn)
    return conn


# ---------------------------------------------------------------- the driver is an extra


def test_missing_driver_names_the_extra() -> None:
    code = (
        "import sys; sys.modules['asyncpg'] = None\n"
        "import poolkit.backends\n"
        "try:\n    import poolkit.backends.asyncpg\n"
        "except ImportError as exc:\n    print(exc)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "pip install 'poolkit[asyncpg]'" in out.stdout


def test_the_backends_package_imports_no_driver() -> None:
    code = "import sys, poolkit.backends; print(sorted({'asyncpg', 'psycopg'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# ---------------------------------------------------------------- the hooks, one by one


def test_reset_clears_a_set_a_transaction_a_listen_and_a_lock(pg: PgServer) -> None:
    async def main() -> None:
        conn = await connect(pg)
        default_tz = await conn.fetchval("SHOW timezone")
        heard: list[str] = []
        await conn.add_listener("poolkit_chan", lambda *args: heard.append(args[3]))
        await conn.execute("SET timezone = 'Pacific/Chatham'")
        await conn.execute("SELECT pg_advisory_lock(4242)")
        await conn.execute("BEGIN")
        await conn.execute("CREATE TEMP TABLE t_left (x int)")
        assert conn.is_in_transaction()

        await pk_asyncpg.async_reset(conn)

        assert not conn.is_in_transaction()
        assert await conn.fetchval("SHOW timezone") == default_tz
        assert await conn.fetch("SELECT pg_listening_channels()") == []
        locks = "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = $1"
        assert await conn.fetchval(locks, conn.get_server_pid()) == 0
        assert await conn.fetchval("SELECT to_regclass('t_left')") is None  # rolled back
        # the client side too: listening again really LISTENs
        await conn.add_listener("poolkit_chan", lambda *args: heard.append(args[3]))
        await conn.execute("NOTIFY poolkit_chan, 'again'")
        await wait_until(lambda: heard == ["again"], "the notification")
        await conn.close()

    run(main)


def test_reset_leaves_a_clean_session_alone(pg: PgServer) -> None:
    async def main() -> None:
        conn = await connect(pg)
        pid = conn.get_server_pid()
        await pk_asyncpg.async_reset(conn)
        assert await conn.fetchval("SELECT 1") == 1
        assert conn.get_server_pid() == pid
        await conn.close()

    run(main)


def test_the_blocks_end_resets_in_the_caller_and_the_pool_then_runs_no_reset(
    pg: PgServer,
) -> None:
    """``async_end`` (``pool.connection()``'s exit) runs asyncpg's reset in the caller, as
    asyncpg's pool does in ``release()``, and says so (``True``): the pool then starts no reset
    (no task) for that check-in. A block that raised gets the whole reset from the pool."""

    async def main() -> None:
        conn = await connect(pg)
        await conn.execute("SET search_path = nowhere")
        assert await pk_asyncpg.async_end(conn, None) is True
        assert await conn.fetchval("SELECT current_setting('search_path')") != "nowhere"
        assert await pk_asyncpg.async_end(conn, ValueError("the block raised")) is None
        await conn.close()
        assert await pk_asyncpg.async_end(conn, None) is None  # failed: left to the pool

        async with pk_asyncpg.create_pool(pg.dsn, application_name=pg.app, max_size=1) as pool:
            async with pool.connection() as c:
                await c.execute("SET search_path = nowhere")
            stats = pool.stats()
            # create_pool's own check-in (the pool's reset), then the block's (the caller's)
            assert (stats.resets, stats.resets_failed, stats.available) == (2, 0, 1)
            async with pool.connection() as c:
                assert await c.fetchval("SELECT current_setting('search_path')") != "nowhere"
            lease = await pool.checkout()  # without a block: the pool resets
            await lease.connection.execute("SET search_path = nowhere")
            lease.release()
            for _ in range(500):  # (the reset runs in a task of the pool's: at most 5 s)
                if pool.stats().resets == 4:
                    break
                await asyncio.sleep(0.01)
            assert pool.stats().resets == 4
            async with pool.connection() as c:
                assert await c.fetchval("SELECT current_setting('search_path')") != "nowhere"

    run(main)


def test_your_own_reset_query_replaces_asyncpgs(pg: PgServer) -> None:
    async def main() -> None:
        conn = await connect(pg, reset_query="RESET timezone")
        await conn.execute("SET timezone = 'Pacific/Chatham'")
        await conn.execute("SET search_path = 'elsewhere'")
        await conn.execute("BEGIN")
        await pk_asyncpg.async_reset(conn)
        assert not conn.is_in_transaction()  # the rollback is always made
        assert await conn.fetchval("SHOW timezone") != "Pacific/Chatham"
        assert await conn.fetchval("SHOW search_path") == "elsewhere"  # not RESET ALL
        await conn.close()

        only_rollback = await connect(pg, reset_query="")
        await only_rollback.execute("SET timezone = 'Pacific/Chatham'")
        await only_rollback.execute("BEGIN")
        await pk_asyncpg.async_reset(only_rollback)
        assert not only_rollback.is_in_transaction()
        assert await only_rollback.fetchval("SHOW timezone") == "Pacific/Chatham"
        await only_rollback.close()

    run(main)


def test_application_name_is_set_and_other_server_settings_kept(pg: PgServer) -> None:
    async def main() -> None:
        conn = await connect(pg, server_settings={"search_path": "x"})
        assert await conn.fetchval("SHOW application_name") == pg.app
        assert await conn.fetchval("SHOW search_path") == "x"
        assert pg.pids() == [conn.get_server_pid()]
        await conn.close()

    run(main)


def test_check_is_broken_and_reset_on_a_terminated_connection(pg: PgServer) -> None:
    async def main() -> None:
        conn = await connect(pg)
        pk_asyncpg.async_check(conn)
        await pk_asyncpg.async_check_ping(conn)
        await pk_asyncpg.async_ping(conn)
        pg.terminate(conn.get_server_pid())
        await wait_until(conn.is_closed, "asyncpg to see the connection closed")
        with pytest.raises(asyncpg.ConnectionDoesNotExistError):
            pk_asyncpg.async_check(conn)
        with pytest.raises(asyncpg.ConnectionDoesNotExistError):
            await pk_asyncpg.async_check_ping(conn)
        with pytest.raises(asyncpg.InterfaceError) as caught:
            await conn.fetchval("SELECT 1")
        assert pk_asyncpg.is_broken(conn, caught.value)
        with pytest.raises(asyncpg.InterfaceError):
            await pk_asyncpg.async_reset(conn)  # so the pool discards it
        await conn.close()

    run(main)


def test_is_broken_is_false_for_an_sql_error(pg: PgServer) -> None:
    async def main() -> None:
        conn = await connect(pg)
        with pytest.raises(asyncpg.DivisionByZeroError) as caught:
            await conn.fetchval("SELECT 1/0")
        assert not pk_asyncpg.is_broken(conn, caught.value)
        with pytest.raises(asyncpg.QueryCanceledError) as cancelled:
            await conn.execute("SET statement_timeout = 10; SELECT pg_sleep(5)")
        assert not pk_asyncpg.is_broken(conn, cancelled.value)
        assert pk_asyncpg.is_broken(conn, ConnectionResetError())
        await conn.execute("RESET statement_timeout")
        with pytest.raises(TimeoutError) as timed_out:  # (an OSError, and not a broken one)
            async with asyncio.timeout(0.05):
                await conn.fetchval("SELECT pg_sleep(2)")
        assert not pk_asyncpg.is_broken(conn, timed_out.value)
        await pk_asyncpg.async_reset(conn)  # asyncpg cancelled the query: the connection serves on
        assert await conn.fetchval("SELECT 1") == 1
        await conn.close()

    run(main)


def test_close_is_bounded_when_the_server_no_longer_answers(pg: PgServer) -> None:
    async def main() -> None:
        async with SilentProxy(pg.dsn) as proxy:
            connect_one = pk_asyncpg.async_connect(
                proxy.dsn, application_name=pg.app, close_timeout=0.2
            )
            pool = poolkit.AsyncPool(connect_one)
            pool.ready()
            async with pool.connection() as conn:
                assert await conn.fetchval("SELECT 1") == 1
            proxy.freeze()
            await asyncio.wait_for(pool.close(), 5)  # (asyncpg's close alone would wait forever)
            assert conn.is_closed()
            other = await connect(pg, close_timeout=None)
            assert type(other) is asyncpg.Connection  # nothing asked: asyncpg's own class
            await pk_asyncpg.async_close(other, 5)
            assert other.is_closed()

    run(main)


def test_hooks_are_what_was_asked_for() -> None:
    full = pk_asyncpg.async_hooks()
    assert full.reset is pk_asyncpg.async_reset and full.end is pk_asyncpg.async_end
    assert full.check is pk_asyncpg.async_check
    assert full.is_broken is pk_asyncpg.is_broken
    assert full.check_after == 0
    bare = pk_asyncpg.async_hooks(reset=False, check=None)
    # (reset=False: only a transaction left open)
    assert bare.reset is pk_asyncpg.async_rollback_only
    assert bare.check is None and bare.is_broken is pk_asyncpg.is_broken
    assert pk_asyncpg.async_hooks(check="ping", check_after=5).check is pk_asyncpg.async_check_ping
    with pytest.raises(ValueError, match="check must be"):
        pk_asyncpg.async_hooks(check="often")  # type: ignore[arg-type]


def test_create_pool_refuses_options_with_hooks_already() -> None:
    options = poolkit.PoolOptions(hooks=poolkit.Hooks())
    with pytest.raises(ValueError, match=r"leave options\.hooks unset"):
        pk_asyncpg.create_pool("postgresql://nowhere", options=options)


# ---------------------------------------------------------------- the one-call pool


def test_create_pool_is_ready_and_serves_64_tasks_on_10_connections(pg: PgServer) -> None:
    async def main() -> None:
        options = poolkit.PoolOptions(max_size=10)
        pool = await pk_asyncpg.create_pool(pg.dsn, options=options, application_name=pg.app)
        assert isinstance(pool, pk_asyncpg.Pool) and isinstance(pool.pool, poolkit.AsyncPool)
        hooks = pool.options.hooks
        assert hooks is not None and hooks.reset is not None and hooks.lend is not None
        assert pg.pids() == []  # (init_size is min_size, 0 here: none made yet, as asyncpg's)

        async def worker(n: int) -> list[int]:
            got = []
            for i in range(20):
                async with pool.connection() as conn:
                    got.append(await conn.fetchval("SELECT $1::int * 2", n * 1000 + i))
            return got

        results = await asyncio.gather(*(worker(n) for n in range(64)))
        assert results == [[2 * (n * 1000 + i) for i in range(20)] for n in range(64)]
        assert 1 <= len(pg.pids()) <= 10
        stats = pool.stats()
        assert stats.total <= 10 and stats.checkouts >= 64 * 20
        await pool.close()
        pg.wait_sessions(0)  # nothing left on the server

    run(main)


def test_create_pool_as_an_async_context_manager(pg: PgServer) -> None:
    async def main() -> None:
        async with pk_asyncpg.create_pool(pg.dsn, application_name=pg.app) as pool:
            async with pool.connection() as conn:
                assert await conn.fetchval("SHOW application_name") == pg.app
            assert pool.stats().state is poolkit.PoolState.READY
        assert pool.stats().state is poolkit.PoolState.CLOSED
        pg.wait_sessions(0)

    run(main)


def test_create_pool_fails_at_once_on_a_bad_database(pg: PgServer) -> None:
    async def main() -> None:
        bad = pg.dsn.rsplit("/", 1)[0] + "/no_such_database_here"
        with pytest.raises(asyncpg.InvalidCatalogNameError):
            await pk_asyncpg.create_pool(bad, application_name=pg.app)
        assert pg.pids() == []

    run(main)


def test_the_new_users_workload_in_one_call(pg: PgServer) -> None:
    """The issue's workload, smaller: 2,000 ``SELECT 1`` from 50 tasks on 10 connections."""

    async def main() -> None:
        options = poolkit.PoolOptions(max_size=10)
        async with pk_asyncpg.create_pool(pg.dsn, options=options, application_name=pg.app) as p:
            done = 0

            async def task() -> None:
                nonlocal done
                for _ in range(40):
                    async with p.connection() as conn:
                        assert await conn.fetchval("SELECT 1") == 1
                    done += 1

            await asyncio.gather(*(task() for _ in range(50)))
            assert done == 2000
            assert len(pg.pids()) <= 10

    run(main)


# ---------------------------------------------------------------- without the hooks


def bare_pool(server: PgServer) -> poolkit.AsyncPool[Any]:
    """The new user's glue: a pool of asyncpg connections with no hooks."""
    connect_one = pk_asyncpg.async_connect(server.dsn, application_name=server.app)
    return poolkit.AsyncPool(connect_one, options=poolkit.PoolOptions(max_size=1))


def test_without_hooks_a_set_and_a_transaction_reach_the_next_caller(pg: PgServer) -> None:
    """What the issue found, and ``test_asyncpg_scenarios`` shows the hooks prevent."""

    async def main() -> None:
        async with bare_pool(pg) as pool:
            async with pool.connection() as conn:
                await conn.execute("SET timezone = 'Pacific/Chatham'")
                await conn.execute("BEGIN")
            async with pool.connection() as conn:
                assert conn.is_in_transaction()
                assert await conn.fetchval("SHOW timezone") == "Pacific/Chatham"
                await conn.execute("ROLLBACK")

    run(main)


async def fail_in_a_transaction(pool: poolkit.AsyncPool[Any]) -> None:
    """The block that leaves its connection in a failed transaction."""
    async with pool.connection() as conn:
        await conn.execute("BEGIN")
        await conn.execute("SELECT 1/0")


def test_without_hooks_a_failed_transaction_reaches_the_next_caller(pg: PgServer) -> None:
    async def main() -> None:
        async with bare_pool(pg) as pool:
            with pytest.raises(asyncpg.DivisionByZeroError):
                await fail_in_a_transaction(pool)
            with pytest.raises(asyncpg.InFailedSQLTransactionError):
                async with pool.connection() as conn:
                    await conn.fetchval("SELECT 1")

    run(main)


def test_without_hooks_a_terminated_connection_stays_in_the_pool(pg: PgServer) -> None:
    async def main() -> None:
        async with bare_pool(pg) as pool:
            async with pool.connection() as conn:
                pid = conn.get_server_pid()
            pg.terminate(pid)
            await wait_until(conn.is_closed, "asyncpg to see the connection closed")
            for _ in range(3):
                with pytest.raises(asyncpg.InterfaceError, match="connection is closed"):
                    async with pool.connection() as conn:
                        await conn.fetchval("SELECT 1")
            assert pool.stats().total == 1  # nothing replaced it

    run(main)
