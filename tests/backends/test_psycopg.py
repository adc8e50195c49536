"""The psycopg backend against a real PostgreSQL: its hooks called directly (plain and async),
``connection(pool)``'s commit-or-roll-back contract, the one-call pools, and what goes wrong
without the hooks (the scenarios with the pool running them: ``test_psycopg_scenarios.py``)."""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
import threading
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, assert_type

import pytest

import poolkit
from pg_service import PgServer, need, pg, table

__all__ = ["pg", "table"]

if TYPE_CHECKING:
    import psycopg

    from poolkit.backends import psycopg as pk
else:  # (the driver first: missing, the tests skip, or fail under POOLKIT_REQUIRE_SERVICES=1)
    psycopg = need("psycopg")
    pk = need("poolkit.backends.psycopg")

CTX = poolkit.ConnectContext(1, "test", None, 0)


def run(main: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(main())


def status(conn: Any) -> str:
    """The connection's transaction status by name (read anew at each call)."""
    return str(conn.info.transaction_status.name)


def rows(server: PgServer, table: str) -> list[int]:
    return [r[0] for r in server.admin.execute(f"SELECT x FROM {table} ORDER BY x").fetchall()]


# ---------------------------------------------------------------- the driver is an extra


def test_missing_driver_names_the_extra() -> None:
    code = (
        "import sys; sys.modules['psycopg'] = None\n"
        "try:\n    import poolkit.backends.psycopg\n"
        "except ImportError as exc:\n    print(exc)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "pip install 'poolkit[psycopg]'" in out.stdout


# ---------------------------------------------------------------- the hooks, plain


def test_reset_clears_a_session_and_rolls_back_with_a_warning(
    pg: PgServer, caplog: pytest.LogCaptureFixture
) -> None:
    with pk.connect(pg.dsn, application_name=pg.app)(CTX) as conn:
        default_tz = conn.execute("SHOW timezone").fetchone()
        conn.rollback()
        conn.isolation_level = psycopg.IsolationLevel.SERIALIZABLE  # (set while idle)
        conn.deferrable = True
        conn.execute("SET timezone = 'Pacific/Chatham'")
        conn.execute("LISTEN poolkit_chan")
        conn.commit()  # (SET and LISTEN in a transaction rolled back would undo themselves)
        conn.execute("SELECT pg_advisory_lock(4242)")  # (a session's lock outlives a rollback)
        conn.execute("CREATE TEMP TABLE t_left (x int)")
        assert conn.execute("SHOW timezone").fetchone() == ("Pacific/Chatham",)
        assert status(conn) == "INTRANS"
        with caplog.at_level(logging.WARNING, "poolkit.backends.psycopg"):
            pk.make_reset(pk.DEFAULT_RESET_QUERY)(conn)
        assert "rolling back a transaction left open" in caplog.text
        assert status(conn) == "IDLE"
        assert conn.deferrable is None and conn.isolation_level is None
        assert not conn.autocommit
        assert conn.execute("SHOW timezone").fetchone() == default_tz
        assert conn.execute("SELECT pg_listening_channels()").fetchall() == []
        locks = "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = %s"
        assert conn.execute(locks, [conn.info.backend_pid]).fetchone() == (0,)
        assert conn.execute("SELECT to_regclass('t_left')").fetchone() == (None,)
        conn.rollback()


def test_reset_rolls_back_a_failed_transaction_and_restores_autocommit(pg: PgServer) -> None:
    with pk.connect(pg.dsn, application_name=pg.app, autocommit=True)(CTX) as conn:
        conn.autocommit = False
        with pytest.raises(psycopg.errors.DivisionByZero) as caught:
            conn.execute("SELECT 1/0")
        assert not pk.is_broken(conn, caught.value)
        assert status(conn) == "INERROR"
        pk.make_reset(None, autocommit=True)(conn)
        assert conn.autocommit
        assert conn.execute("SELECT 1").fetchone() == (1,)


def test_reset_with_your_query_or_none(pg: PgServer) -> None:
    with pk.connect(pg.dsn, application_name=pg.app, autocommit=True)(CTX) as conn:
        conn.execute("SET timezone = 'Pacific/Chatham'")
        conn.execute("SET search_path = 'elsewhere'")
        pk.make_reset("RESET timezone", autocommit=True)(conn)
        assert conn.execute("SHOW timezone").fetchone() != ("Pacific/Chatham",)
        assert conn.execute("SHOW search_path").fetchone() == ("elsewhere",)
        pk.make_reset(None, autocommit=True)(conn)  # nothing to do, nothing done
        assert conn.execute("SHOW search_path").fetchone() == ("elsewhere",)


def test_check_is_broken_and_reset_on_a_terminated_connection(pg: PgServer) -> None:
    with pk.connect(pg.dsn, application_name=pg.app)(CTX) as conn:
        pk.check(conn)
        pk.check_ping(conn)
        pk.ping(conn)
        assert status(conn) == "IDLE"
        pg.terminate(conn.info.backend_pid)
        assert not conn.closed  # psycopg has not noticed: it reads only when asked
        with pytest.raises(psycopg.OperationalError):
            pk.check(conn)  # the server's goodbye is waiting on the socket
        assert pk.is_broken(conn, Exception())
        with pytest.raises(psycopg.OperationalError):
            pk.check_ping(conn)
        with pytest.raises(psycopg.OperationalError):
            pk.make_reset(pk.DEFAULT_RESET_QUERY)(conn)


def test_is_broken_after_the_error_a_lost_connection_gives(pg: PgServer) -> None:
    with pk.connect(pg.dsn, application_name=pg.app)(CTX) as conn:
        pg.terminate(conn.info.backend_pid)
        with pytest.raises(psycopg.OperationalError) as caught:
            conn.execute("SELECT 1")
        assert pk.is_broken(conn, caught.value)
        with pk.connect(pg.dsn, application_name=pg.app)(CTX) as other:
            with pytest.raises(psycopg.errors.QueryCanceled) as cancelled:
                other.execute("SET statement_timeout = 10; SELECT pg_sleep(5)")
            assert not pk.is_broken(other, cancelled.value)


def test_hooks_are_what_was_asked_for() -> None:
    plain = pk.hooks()
    assert plain.check is pk.check and plain.is_broken is pk.is_broken
    assert plain.reset is not None and plain.check_after == 0
    assert pk.hooks(check="ping").check is pk.check_ping
    assert pk.hooks(check=None).check is None
    assert pk.async_hooks().check is not None  # (test_async_hooks_on_a_clean_connection_...)
    assert pk.async_hooks(check="ping", check_after=3).check_after == 3
    with pytest.raises(ValueError, match="check must be"):
        pk.hooks(check="often")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="reset must be"):
        pk.hooks(reset=3)  # type: ignore[arg-type]


# ---------------------------------------------------------------- the hooks, async


def test_async_hooks_on_a_clean_connection_need_no_task(pg: PgServer) -> None:
    """``async_hooks``' check and reset answer at once (a plain ``None``, which an ``AsyncPool``
    takes without spawning a task) when the connection needs no round trip, and return the
    awaitable that does the rest when it does."""

    async def main() -> None:
        hooks = pk.async_hooks()
        assert hooks.check is not None and hooks.reset is not None and hooks.end is not None
        conn = await pk.async_connect(pg.dsn, application_name=pg.app)(CTX)
        async with conn:
            assert hooks.check(conn) is None  # nothing came from the server
            await conn.execute("SET search_path = nowhere")
            # COMMIT and the reset query in one message, the rest of the reset here: the pool
            # is told (True) that it has no reset to run
            assert await hooks.end(conn, None) is True
            cur = await conn.execute("SELECT current_setting('search_path') <> 'nowhere'")
            assert await cur.fetchone() == (True,)
            await conn.rollback()
            rollback_only = pk.async_hooks(reset=False).reset
            assert rollback_only is not None
            assert rollback_only(conn) is None  # clean: nothing to send
            await conn.execute("SET search_path = nowhere")
            rest = hooks.reset(conn)  # a transaction left open: rolled back, then reset
            assert rest is not None
            await rest
            assert status(conn) == "IDLE"
            cur = await conn.execute("SELECT current_setting('search_path') <> 'nowhere'")
            assert await cur.fetchone() == (True,)
            await conn.rollback()
            await conn.set_read_only(True)  # a setting changed: a round trip to give it back
            rest = hooks.reset(conn)
            assert rest is not None
            await rest
            assert conn.read_only is None
            pg.terminate(conn.info.backend_pid)
            await asyncio.sleep(0.2)  # (the server's goodbye arrives)
            ping = hooks.check(conn)
            assert ping is not None
            with pytest.raises(psycopg.OperationalError):
                await ping

    run(main)


def test_async_hooks_reset_check_and_is_broken(pg: PgServer) -> None:
    async def main() -> None:
        conn = await pk.async_connect(pg.dsn, application_name=pg.app)(CTX)
        async with conn:
            await conn.execute("LISTEN poolkit_chan")
            await conn.execute("SET timezone = 'Pacific/Chatham'")
            await conn.commit()
            await conn.set_read_only(True)
            with pytest.raises(psycopg.errors.DivisionByZero) as caught:
                await conn.execute("SELECT 1/0")
            assert not pk.is_broken(conn, caught.value)
            await pk.make_async_reset(pk.DEFAULT_RESET_QUERY)(conn)
            assert status(conn) == "IDLE"
            assert conn.read_only is None
            cur = await conn.execute("SELECT current_setting('timezone') <> 'Pacific/Chatham'")
            assert await cur.fetchone() == (True,)
            cur = await conn.execute("SELECT pg_listening_channels()")
            assert await cur.fetchall() == []
            await conn.rollback()
            await pk.async_check(conn)
            await pk.async_check_ping(conn)
            await pk.async_ping(conn)
            pg.terminate(conn.info.backend_pid)
            with pytest.raises(psycopg.OperationalError):
                await pk.async_check(conn)
            assert pk.is_broken(conn, Exception())
            with pytest.raises(psycopg.OperationalError):
                await pk.make_async_reset(None)(conn)

    run(main)


def test_async_a_query_timed_out_by_asyncio_leaves_a_usable_connection(pg: PgServer) -> None:
    async def main() -> None:
        conn = await pk.async_connect(pg.dsn, application_name=pg.app)(CTX)
        async with conn:
            with pytest.raises(TimeoutError) as timed_out:
                async with asyncio.timeout(0.05):
                    await conn.execute("SELECT pg_sleep(2)")
            assert not pk.is_broken(conn, timed_out.value)
            await pk.make_async_reset(pk.DEFAULT_RESET_QUERY)(conn)
            cur = await conn.execute("SELECT 1")
            assert await cur.fetchone() == (1,)

    run(main)


# ---------------------------------------------------------------- connection(pool)


def insert_and_fail(pool: poolkit.Pool[Any], table: str, x: int, *, sql: bool) -> None:
    """A block that inserts, then fails: in Python, or in SQL."""
    with pk.connection(pool, timeout=5) as conn:
        conn.execute(f"INSERT INTO {table} VALUES ({x})")
        if sql:
            conn.execute("SELECT 1/0")
        raise ZeroDivisionError


async def async_insert_and_fail(pool: poolkit.AsyncPool[Any], table: str, x: int) -> None:
    async with pk.connection(pool) as conn:
        await conn.execute(f"INSERT INTO {table} VALUES ({x})")
        raise ZeroDivisionError


def test_connection_commits_on_success_and_rolls_back_on_error(pg: PgServer, table: str) -> None:
    pool = pk.create_pool(pg.dsn, application_name=pg.app)
    with pool:
        with pk.connection(pool) as conn:
            conn.execute(f"INSERT INTO {table} VALUES (1)")
        with pytest.raises(ZeroDivisionError):
            insert_and_fail(pool, table, 2, sql=False)
        with pytest.raises(psycopg.errors.DivisionByZero):
            insert_and_fail(pool, table, 3, sql=True)  # a failed transaction: rolled back too
        with pk.connection(pool) as conn:
            assert status(conn) == "IDLE"
        assert rows(pg, table) == [1]
    with pytest.raises(TypeError, match="takes a poolkit Pool"):
        pk.connection(object())  # type: ignore[call-overload]


def test_a_failing_commit_reaches_the_caller(pg: PgServer, table: str) -> None:
    pg.admin.execute(
        f"ALTER TABLE {table} ADD CONSTRAINT positive CHECK (x > 0) NOT VALID; "
        f"ALTER TABLE {table} ADD UNIQUE (x) DEFERRABLE INITIALLY DEFERRED"
    )
    with pk.create_pool(pg.dsn, application_name=pg.app) as pool:
        with pytest.raises(psycopg.errors.UniqueViolation), pk.connection(pool) as conn:
            conn.execute(f"INSERT INTO {table} VALUES (7), (7)")  # checked at COMMIT
        assert rows(pg, table) == []


def test_async_connection_commits_on_success_and_rolls_back_on_error(
    pg: PgServer, table: str
) -> None:
    async def main() -> None:
        async with pk.create_async_pool(pg.dsn, application_name=pg.app) as pool:
            async with pk.connection(pool) as conn:
                await conn.execute(f"INSERT INTO {table} VALUES (1)")
            with pytest.raises(ZeroDivisionError):
                await async_insert_and_fail(pool, table, 2)
        assert rows(pg, table) == [1]

    run(main)


# ---------------------------------------------------------------- the one-call pools


def test_the_types_a_user_sees(pg: PgServer) -> None:
    """(mypy checks the ``assert_type`` lines; at run time they only run.)"""
    with pk.create_pool(pg.dsn, application_name=pg.app) as pool:
        assert_type(pool, poolkit.Pool[psycopg.Connection[Any]])
        with pk.connection(pool) as conn:
            assert_type(conn, psycopg.Connection[Any])
        with pool.connection() as conn:
            assert_type(conn, psycopg.Connection[Any])

    async def main() -> None:
        async with pk.create_async_pool(pg.dsn, application_name=pg.app) as apool:
            assert_type(apool, poolkit.AsyncPool[psycopg.AsyncConnection[Any]])
            async with pk.connection(apool) as aconn:
                assert_type(aconn, psycopg.AsyncConnection[Any])

    run(main)


def test_create_pool_serves_32_threads_on_10_connections(pg: PgServer) -> None:
    options = poolkit.PoolOptions(max_size=10)
    pool = pk.create_pool(pg.dsn, options=options, application_name=pg.app)
    assert isinstance(pool, poolkit.Pool)
    assert len(pg.pids()) == 1  # ready: one connection made already
    results: dict[int, list[int]] = {}

    def worker(n: int) -> None:
        got = []
        for i in range(20):
            with pk.connection(pool) as conn:
                row = conn.execute("SELECT %s::int * 2", [n * 1000 + i]).fetchone()
                assert row is not None
                got.append(row[0])
        results[n] = got

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(32)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert results == {n: [2 * (n * 1000 + i) for i in range(20)] for n in range(32)}
    assert 1 <= len(pg.pids()) <= 10
    assert pool.stats().total <= 10
    pool.close()
    pg.wait_sessions(0)


def test_create_async_pool_serves_64_tasks_on_10_connections(pg: PgServer) -> None:
    async def main() -> None:
        options = poolkit.PoolOptions(max_size=10)
        pool = await pk.create_async_pool(pg.dsn, options=options, application_name=pg.app)
        assert isinstance(pool, poolkit.AsyncPool)

        async def worker(n: int) -> list[int]:
            got = []
            for i in range(20):
                async with pk.connection(pool) as conn:
                    cur = await conn.execute("SELECT %s::int * 2", [n * 1000 + i])
                    row = await cur.fetchone()
                    assert row is not None
                    got.append(row[0])
            return got

        results = await asyncio.gather(*(worker(n) for n in range(64)))
        assert results == [[2 * (n * 1000 + i) for i in range(20)] for n in range(64)]
        assert 1 <= len(pg.pids()) <= 10
        await pool.close()
        pg.wait_sessions(0)

    run(main)


def test_create_pool_fails_at_once_on_a_bad_database_and_hides_the_password(
    pg: PgServer,
) -> None:
    bad = pg.dsn.rsplit("/", 1)[0] + "/no_such_database_here"
    with pytest.raises(psycopg.OperationalError, match="no_such_database_here"):
        pk.create_pool(bad, application_name=pg.app)
    with_password = pg.dsn.replace("://postgres@", "://postgres:s3cret@")
    with pk.create_pool(with_password, application_name=pg.app) as pool:
        assert "s3cret" not in repr(pool)
        assert pool.address == "127.0.0.1:5432/test"
    pg.wait_sessions(0)


def test_create_pool_refuses_options_with_hooks_already() -> None:
    options = poolkit.PoolOptions(hooks=poolkit.Hooks())
    with pytest.raises(ValueError, match=r"leave options\.hooks unset"):
        pk.create_pool("", options=options)


# ---------------------------------------------------------------- without the hooks


def bare_pool(server: PgServer) -> poolkit.Pool[Any]:
    """The new user's glue: a pool of psycopg connections with no hooks."""
    connect_one = pk.connect(server.dsn, application_name=server.app)
    return poolkit.Pool(connect_one, options=poolkit.PoolOptions(max_size=1))


def test_without_hooks_a_set_and_a_transaction_reach_the_next_caller(pg: PgServer) -> None:
    with bare_pool(pg) as pool:
        with pool.connection() as conn:
            conn.execute("SET timezone = 'Pacific/Chatham'")  # (in a transaction: psycopg's)
        with pool.connection() as conn:
            status = conn.info.transaction_status
            assert status == psycopg.pq.TransactionStatus.INTRANS
            assert conn.execute("SHOW timezone").fetchone() == ("Pacific/Chatham",)
            conn.rollback()


def test_without_hooks_a_failed_transaction_reaches_the_next_caller(pg: PgServer) -> None:
    with bare_pool(pg) as pool:
        with pytest.raises(psycopg.errors.DivisionByZero), pool.connection() as conn:
            conn.execute("SELECT 1/0")
        with pytest.raises(psycopg.errors.InFailedSqlTransaction), pool.connection() as conn:
            conn.execute("SELECT 1")


def test_without_hooks_a_terminated_connection_stays_in_the_pool(pg: PgServer) -> None:
    with bare_pool(pg) as pool:
        with pool.connection() as conn:
            pid = conn.info.backend_pid
            conn.rollback()
        pg.terminate(pid)
        for _ in range(3):
            with pytest.raises(psycopg.OperationalError), pool.connection() as conn:
                conn.execute("SELECT 1")
        assert pool.stats().total == 1  # nothing replaced it


def test_is_broken_on_a_connection_or_shutdown_error_even_with_psycopg_flags_unset(
    pg: PgServer,
) -> None:
    # (psycopg can report a terminated backend as "connection socket closed" with neither
    # ``closed`` nor ``broken`` set: the error's class decides then)
    with pk.connect(pg.dsn, application_name=pg.app)(CTX) as conn:
        assert not conn.closed and not conn.broken
        assert pk.is_broken(conn, psycopg.errors.AdminShutdown())
        assert pk.is_broken(conn, psycopg.errors.ConnectionFailure())
        assert not pk.is_broken(conn, psycopg.errors.DivisionByZero())
        assert not pk.is_broken(conn, psycopg.errors.QueryCanceled())
