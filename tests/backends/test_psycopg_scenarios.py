"""The issue's scenarios on pools of psycopg connections made by ``create_pool`` and
``create_async_pool``: they need the pool to run the backend's hooks (``test_psycopg.py`` shows
each going wrong without them)."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

import pytest

import poolkit
from pg_service import PgServer, SilentProxy, need, pg

__all__ = ["pg"]

if TYPE_CHECKING:
    import psycopg

    from poolkit.backends import psycopg as pk
else:  # (the driver first: missing, the tests skip, or fail under POOLKIT_REQUIRE_SERVICES=1)
    psycopg = need("psycopg")
    pk = need("poolkit.backends.psycopg")

IDLE = psycopg.pq.TransactionStatus.IDLE


def run(main: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(main())


def one_connection(server: PgServer, **kwargs: Any) -> poolkit.Pool[Any]:
    """A pool of one connection: the next caller surely gets the previous caller's session."""
    options = poolkit.PoolOptions(max_size=1)
    return pk.create_pool(server.dsn, options=options, application_name=server.app, **kwargs)


def test_a_set_and_a_transaction_do_not_reach_the_next_caller(
    pg: PgServer, caplog: pytest.LogCaptureFixture
) -> None:
    with one_connection(pg) as pool:
        # (checkout/release: pool.connection() would commit the transaction, as psycopg_pool's)
        lease = pool.checkout()
        conn = lease.connection
        default_tz = conn.execute("SHOW timezone").fetchone()
        pid = conn.info.backend_pid
        conn.execute("SET timezone = 'Pacific/Chatham'")
        conn.commit()
        conn.execute("CREATE TEMP TABLE left_behind (x int)")  # and left open
        lease.release()
        with pool.connection() as conn:
            assert conn.info.backend_pid == pid  # the same session, cleaned
            assert conn.info.transaction_status == IDLE
            assert conn.execute("SHOW timezone").fetchone() == default_tz
            assert conn.execute("SELECT to_regclass('left_behind')").fetchone() == (None,)
    assert "rolling back a transaction left open" in caplog.text


def test_pool_connection_commits_when_its_block_succeeds_and_rolls_back_when_it_raises(
    pg: PgServer,
) -> None:
    # psycopg_pool's contract, on the generic pool.connection() (through Hooks.end)
    with one_connection(pg) as pool:
        with pool.connection() as conn:
            conn.execute("CREATE TEMP TABLE kept (x int)")
            conn.execute("INSERT INTO kept VALUES (1)")
        with pytest.raises(ZeroDivisionError):
            insert_then_fail(pool)
        with pool.connection() as conn:
            assert conn.execute("SELECT x FROM kept").fetchall() == [(1,)]


def insert_then_fail(pool: poolkit.Pool[Any]) -> None:
    with pool.connection() as conn:
        conn.execute("INSERT INTO kept VALUES (2)")
        raise ZeroDivisionError


def test_a_failed_transaction_does_not_reach_the_next_caller(pg: PgServer) -> None:
    with one_connection(pg) as pool:
        with pytest.raises(psycopg.errors.DivisionByZero):
            select(pool, "SELECT 1/0")
        assert select(pool, "SELECT 1") == 1
        assert pool.stats().connections_closed.get("error", 0) == 0  # kept: not broken


def select(pool: poolkit.Pool[Any], query: Any) -> Any:
    """One value, through the generic ``pool.connection()`` (which neither commits nor
    rolls back: the reset does)."""
    with pool.connection() as conn:
        row = conn.execute(query).fetchone()
        return None if row is None else row[0]


def test_a_terminated_connection_is_replaced_unseen_when_checked(pg: PgServer) -> None:
    with one_connection(pg) as pool:  # check="closed": a round trip only if the server spoke
        with pk.connection(pool) as conn:
            pid = conn.info.backend_pid
        pg.terminate(pid)
        for _ in range(3):
            with pk.connection(pool) as fresh:
                assert fresh.execute("SELECT 1").fetchone() == (1,)
                assert fresh.info.backend_pid != pid
        assert pool.stats().connections_closed.get("error") == 1


def test_unchecked_a_terminated_connection_gives_one_clear_error(pg: PgServer) -> None:
    with one_connection(pg, check=None) as pool:
        with pk.connection(pool) as conn:
            pid = conn.info.backend_pid
        pg.terminate(pid)
        with pytest.raises(psycopg.OperationalError, match="terminating connection"):
            select(pool, "SELECT 1")
        with pk.connection(pool) as fresh:  # is_broken discarded it: a new connection
            assert fresh.execute("SELECT 1").fetchone() == (1,)
            assert fresh.info.backend_pid != pid
        assert pool.stats().total == 1


def test_client_side_settings_are_given_back_their_defaults(pg: PgServer) -> None:
    with one_connection(pg) as pool:
        with pool.connection() as conn:
            conn.autocommit = True
            conn.read_only = True
        with pool.connection() as conn:
            assert not conn.autocommit and conn.read_only is None


def leave_settings_changed(conn: Any, seen: list[str]) -> None:
    """What one caller can change on its connection without a query, all of it."""
    conn.row_factory = psycopg.rows.dict_row
    conn.cursor_factory = psycopg.ClientCursor
    conn.server_cursor_factory = LeftServerCursor
    conn.prepare_threshold = None
    conn.prepared_max = 3
    conn.isolation_level = psycopg.IsolationLevel.SERIALIZABLE
    conn.deferrable = True
    conn.add_notice_handler(lambda diag: seen.append(f"notice {diag.message_primary}"))
    conn.add_notify_handler(lambda notify: seen.append(f"notify {notify.payload}"))


class LeftServerCursor(psycopg.ServerCursor[Any]):
    """A server cursor class one caller chose."""


def raise_a_notice_and_a_notification(conn: Any) -> None:
    conn.execute("LISTEN poolkit_settings")
    conn.execute("DO $$ BEGIN RAISE NOTICE 'for the next caller'; END $$")
    conn.execute("NOTIFY poolkit_settings, 'for the next caller'")
    conn.commit()
    conn.execute("SELECT 1")  # (a query after the commit: psycopg reads the notification)
    conn.execute("UNLISTEN *")
    conn.commit()


def test_row_factory_and_the_other_client_settings_do_not_reach_the_next_caller(
    pg: PgServer,
) -> None:
    seen: list[str] = []
    with one_connection(pg) as pool:
        with pool.connection() as conn:
            assert conn.execute("SELECT 1 AS one").fetchone() == (1,)
            conn.commit()  # (the isolation level is set outside a transaction)
            leave_settings_changed(conn, seen)
            assert conn.execute("SELECT 1 AS one").fetchone() == {"one": 1}
        with pool.connection() as conn:
            assert conn.execute("SELECT 1 AS one").fetchone() == (1,)
            assert conn.row_factory is psycopg.rows.tuple_row
            assert conn.cursor_factory is psycopg.Cursor
            assert conn.server_cursor_factory is psycopg.ServerCursor
            assert (conn.prepare_threshold, conn.prepared_max) == (5, 100)
            assert (conn.isolation_level, conn.deferrable) == (None, None)
            raise_a_notice_and_a_notification(conn)
    assert seen == []


def test_the_settings_configure_chose_are_the_ones_given_back(pg: PgServer) -> None:
    noticed: list[str] = []

    def configure(conn: Any) -> None:
        conn.row_factory = psycopg.rows.dict_row
        conn.prepare_threshold = 0
        conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        conn.add_notice_handler(lambda diag: noticed.append(diag.message_primary))

    with one_connection(pg, configure=configure) as pool:
        with pool.connection() as conn:
            conn.row_factory = psycopg.rows.tuple_row
            conn.prepare_threshold = None
            conn.isolation_level = None
            conn.add_notice_handler(lambda diag: noticed.append("a caller's handler"))
        with pool.connection() as conn:
            assert conn.execute("SELECT 1 AS one").fetchone() == {"one": 1}
            assert conn.prepare_threshold == 0
            assert conn.isolation_level == psycopg.IsolationLevel.REPEATABLE_READ
            conn.execute("DO $$ BEGIN RAISE NOTICE 'seen once'; END $$")
    assert noticed == ["seen once"]


def test_async_row_factory_and_the_other_client_settings_do_not_reach_the_next_caller(
    pg: PgServer,
) -> None:
    seen: list[str] = []

    async def main() -> None:
        options = poolkit.PoolOptions(max_size=1)
        app = pg.app
        async with pk.create_async_pool(pg.dsn, options=options, application_name=app) as pool:
            async with pool.connection() as conn:
                conn.row_factory = psycopg.rows.dict_row
                conn.prepare_threshold = None
                await conn.set_read_only(True)
                conn.add_notice_handler(lambda diag: seen.append(str(diag.message_primary)))
                cur = await conn.execute("SELECT 1 AS one")
                assert await cur.fetchone() == {"one": 1}
            async with pool.connection() as conn:
                cur = await conn.execute("SELECT 1 AS one")
                assert await cur.fetchone() == (1,)
                assert conn.prepare_threshold == 5 and conn.read_only is None
                await conn.execute("DO $$ BEGIN RAISE NOTICE 'for the next caller'; END $$")

    run(main)
    assert seen == []


def test_server_settings_survive_the_reset_and_configure_runs_once(pg: PgServer) -> None:
    configured: list[int] = []

    def configure(conn: Any) -> None:
        configured.append(conn.info.backend_pid)

    # (libpq's ``options`` goes in the DSN: ``options=`` is the pool's)
    dsn = pg.dsn + "?options=-csearch_path%3Dkept_path"
    options = poolkit.PoolOptions(max_size=1)
    app = pg.app
    with pk.create_pool(dsn, options=options, application_name=app, configure=configure) as pool:
        for _ in range(3):
            with pk.connection(pool) as conn:
                assert conn.execute("SHOW search_path").fetchone() == ("kept_path",)
                conn.execute("SET search_path = 'changed'")
    assert len(configured) == 1


def test_the_new_users_workload_on_threads_with_sessions_left_dirty(pg: PgServer) -> None:
    """10,000 ``SELECT 1`` from 50 threads on 10 connections through the generic
    ``pool.connection()``; every 50th block leaves a SET and an open transaction, every 50th
    (another) a failed one: no caller ever sees either."""
    options = poolkit.PoolOptions(max_size=10)
    errors: list[BaseException] = []
    done = [0] * 50
    with pk.create_pool(pg.dsn, options=options, application_name=pg.app) as pool:
        default_tz = select(pool, "SHOW timezone")

        def worker(n: int) -> None:
            try:
                for i in range(200):
                    with pool.connection() as conn:
                        assert conn.info.transaction_status == IDLE
                        assert conn.execute("SELECT 1").fetchone() == (1,)
                        if (n + i) % 50 == 0:
                            conn.execute("SET timezone = 'Pacific/Chatham'")
                            conn.commit()
                            conn.execute("SELECT 2")  # left open
                        elif (n + i) % 50 == 25:
                            with pytest.raises(psycopg.errors.DivisionByZero):
                                conn.execute("SELECT 1/0")
                        elif (n + i) % 10 == 5:
                            assert conn.execute("SHOW timezone").fetchone() == (default_tz,)
                    done[n] += 1
            except BaseException as exc:  # reported below, from the test's thread
                errors.append(exc)

        threads = [threading.Thread(target=worker, args=(n,)) for n in range(50)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert errors == []
        assert sum(done) == 10_000
        assert len(pg.pids()) <= 10
        assert pool.stats().connections_closed.get("error", 0) == 0


def test_async_a_dirty_session_and_a_dead_one(pg: PgServer) -> None:
    async def main() -> None:
        options = poolkit.PoolOptions(max_size=1)
        app = pg.app
        async with pk.create_async_pool(pg.dsn, options=options, application_name=app) as pool:
            async with pool.connection() as conn:
                pid = conn.info.backend_pid
                await conn.execute("SET timezone = 'Pacific/Chatham'")
                await conn.commit()
                await conn.execute("SELECT 2")  # left open
            async with pool.connection() as conn:
                assert conn.info.transaction_status == IDLE
                cur = await conn.execute("SELECT current_setting('timezone')")
                assert await cur.fetchone() != ("Pacific/Chatham",)
                await conn.rollback()
            pg.terminate(pid)
            async with pk.connection(pool) as fresh:  # checked: replaced, unseen
                assert fresh.info.backend_pid != pid

    run(main)


def test_async_a_ping_with_a_timeout_finds_a_connection_gone_silent(pg: PgServer) -> None:
    """(psycopg's async connection, cancelled mid-query, sends the server a cancel request and
    then waits up to 5 s for the query's end before it gives up on the connection: a pool that
    waits for a timed-out hook to return keeps the caller that long.)"""

    async def main() -> None:
        async with SilentProxy(pg.dsn) as proxy, pk.create_async_pool(
            proxy.dsn,
            options=poolkit.PoolOptions(max_size=1),
            application_name=pg.app,
            check="ping",
            hooks_timeout=0.5,
        ) as pool:
            async with pk.connection(pool) as conn:
                pid = conn.info.backend_pid
            proxy.freeze()
            async with pk.connection(pool) as fresh:
                cur = await fresh.execute("SELECT 1")
                assert await cur.fetchone() == (1,)
                assert fresh.info.backend_pid != pid

    run(main)


def test_logging_is_quiet_for_blocks_that_use_connection(
    pg: PgServer, caplog: pytest.LogCaptureFixture
) -> None:
    """``connection(pool)`` commits or rolls back itself: the reset finds nothing to roll back."""
    with caplog.at_level(logging.WARNING, "poolkit.backends.psycopg"), one_connection(pg) as pool:
        with pk.connection(pool) as conn:
            conn.execute("SELECT 1")
        with pytest.raises(psycopg.errors.DivisionByZero):
            fail(pool)
    assert caplog.text == ""


def fail(pool: poolkit.Pool[Any]) -> None:
    with pk.connection(pool) as conn:
        conn.execute("SELECT 1/0")


def test_a_reset_past_its_timeout_is_not_closed_under_its_thread(pg: PgServer) -> None:
    # Issue 24, defect 3: reset="SELECT pg_sleep(3)", hooks_timeout=0.5, max_size=1, one thread
    # releasing while another waits: the timer thread closed the connection while the reset still
    # ran on it, and about half the runs the next connect hung for good (on the descriptor the
    # close freed). Now the timeout frees the waiter at once and the connection is closed when
    # the reset returns, once; nothing is left.
    running: set[int] = set()
    closed_while_running: list[int] = []
    closes: list[int] = []
    base = pk.hooks(reset="SELECT pg_sleep(1)")
    assert base.reset is not None
    reset = base.reset

    def watched_reset(conn: Any) -> None:
        running.add(id(conn))
        try:
            reset(conn)
        finally:
            running.discard(id(conn))

    connect = pk.connect(pg.dsn, application_name=pg.app)

    def watched_connect(ctx: poolkit.ConnectContext) -> Any:
        conn = connect(ctx)
        close = conn.close

        def counted_close() -> None:
            closes.append(id(conn))
            if id(conn) in running:
                closed_while_running.append(id(conn))
            close()

        conn.close = counted_close  # type: ignore[method-assign]
        return conn

    hooks = dataclasses.replace(base, reset=watched_reset, timeout=0.3)
    options = poolkit.PoolOptions(max_size=1, connect_timeout=5, hooks=hooks)
    for _ in range(3):
        with poolkit.Pool(watched_connect, address="reset-timeout", options=options) as pool:
            lease = pool.checkout()
            served: list[Any] = []

            def waiter(pool: poolkit.Pool[Any], served: list[Any]) -> None:
                with pool.connection(timeout=10) as conn:
                    served.append(conn.execute("SELECT 1").fetchone())

            thread = threading.Thread(target=waiter, args=(pool, served))
            thread.start()
            time.sleep(0.05)
            lease.release()  # the reset runs here, for 1 s; its timeout is 0.3 s
            thread.join(10)
            assert served == [(1,)]  # the waiter got a new connection after the timeout
        pg.wait_sessions(0)
        assert closed_while_running == []
        assert len(closes) == len(set(closes)) == 2  # both connections, each closed once
        closes.clear()


def _counting(sent: list[str]) -> Callable[[Any], None]:
    """A ``configure`` hook: every query a connection sends through ``execute`` goes to
    ``sent``."""

    def configure(conn: Any) -> None:
        execute = conn.execute

        def recorded(query: Any, *args: Any, **kwargs: Any) -> Any:
            sent.append(query.decode() if isinstance(query, bytes) else str(query))
            return execute(query, *args, **kwargs)

        conn.execute = recorded

    return configure


def _in_a_block(pool: poolkit.Pool[Any], *queries: str) -> None:
    with pool.connection() as conn:
        for query in queries:
            conn.execute(query.encode())


def test_a_block_ends_with_its_commit_and_the_reset_in_one_round_trip(pg: PgServer) -> None:
    # Issue 25: the commit at the end of pool.connection() and the reset at check-in were two
    # round trips where psycopg_pool's commit is one. Now the COMMIT goes out with the reset
    # query in one message, and the reset sends nothing more for that connection.
    sent: list[str] = []
    with one_connection(pg, configure=_counting(sent)) as pool:
        sent.clear()  # (create_pool's first connection, made and given back)
        with pool.connection() as conn:
            conn.execute("SET search_path = nowhere")
            conn.execute("CREATE TEMP TABLE kept (x int)")
            conn.execute("INSERT INTO kept VALUES (1)")
        assert sent[3:] == [f"COMMIT; {pk.DEFAULT_RESET_QUERY}"]
        sent.clear()
        with pool.connection() as conn:
            assert conn.execute("SHOW search_path").fetchone() == ('"$user", public',)
            assert conn.execute("SELECT x FROM kept").fetchone() == (1,)  # committed
        assert sent == [
            "SHOW search_path",
            "SELECT x FROM kept",
            f"COMMIT; {pk.DEFAULT_RESET_QUERY}",
        ]


def test_a_block_that_raises_ends_with_rollback_and_reset_in_one_round_trip(
    pg: PgServer,
) -> None:
    sent: list[str] = []
    with one_connection(pg, configure=_counting(sent)) as pool:
        with pytest.raises(psycopg.errors.DivisionByZero):
            _in_a_block(pool, "SET search_path = nowhere", "SELECT 1 / 0")
        assert sent[-1] == f"ROLLBACK; {pk.DEFAULT_RESET_QUERY}"
        with pool.connection() as conn:
            assert conn.info.transaction_status == IDLE
            assert conn.execute("SHOW search_path").fetchone() == ('"$user", public',)


def test_a_failing_commit_reaches_the_caller_and_the_reset_still_runs(pg: PgServer) -> None:
    sent: list[str] = []
    with one_connection(pg, configure=_counting(sent)) as pool:
        _in_a_block(
            pool,
            "CREATE TEMP TABLE d (x int UNIQUE DEFERRABLE INITIALLY DEFERRED) "
            "ON COMMIT PRESERVE ROWS",
        )
        with pytest.raises(psycopg.errors.UniqueViolation):  # (at the COMMIT)
            _in_a_block(pool, "SET search_path = nowhere", "INSERT INTO d VALUES (1), (1)")
        # (the message stopped at the COMMIT: the reset at check-in sent its query alone)
        assert sent[-1] == pk.DEFAULT_RESET_QUERY
        with pool.connection() as conn:
            assert conn.execute("SHOW search_path").fetchone() == ('"$user", public',)
            assert conn.execute("SELECT count(*) FROM d").fetchone() == (0,)
