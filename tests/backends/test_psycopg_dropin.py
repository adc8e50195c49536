"""The psycopg_pool drop-ins (``poolkit.backends.psycopg.ConnectionPool`` and its siblings)
against a real PostgreSQL: psycopg_pool's constructor and defaults, getconn/putconn, the
statistics keys (the same as psycopg_pool's own pool's after the same calls), the exceptions,
generic subscription, ``conn.close()`` giving back with ``close_returns``, the null pools, the
full reset as an explicit option, and a ``wait_for`` around ``getconn`` bounded with its
cancellation not absorbed (psycopg_pool #1345, #1401). psycopg's own pool tests, run against
them, are tools/psycopg_pool_suite/run.py's."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, assert_type

import pytest

import poolkit
from pg_service import PgServer, need, pg, wait_until

__all__ = ["pg"]

if TYPE_CHECKING:
    import psycopg
    import psycopg_pool

    from poolkit.backends import psycopg as pk
else:  # (the drivers first: missing, the tests skip, or fail under POOLKIT_REQUIRE_SERVICES=1)
    psycopg = need("psycopg")
    psycopg_pool = need("psycopg_pool")
    pk = need("poolkit.backends.psycopg")


def pids(conn: Any) -> int:
    return int(conn.info.backend_pid)


def status(conn: Any) -> str:
    """The connection's transaction status by name (read anew at each call)."""
    return str(conn.info.transaction_status.name)


async def until(condition: Callable[[], bool]) -> None:
    await wait_until(condition, "the pool's state")


def kw(server: PgServer, **more: Any) -> dict[str, Any]:
    """psycopg_pool's ``kwargs=``: this test's application_name (its sessions are found by it)."""
    return {"application_name": server.app, **more}


# ---------------------------------------------------------------- constructor and defaults


def test_defaults_are_psycopg_pools(pg: PgServer) -> None:
    ours = pk.ConnectionPool(pg.dsn, kwargs=kw(pg), open=False)
    theirs = psycopg_pool.ConnectionPool(pg.dsn, kwargs=kw(pg), open=False)
    for name in ("min_size", "max_size", "timeout", "max_waiting", "max_lifetime", "max_idle",
                 "reconnect_timeout", "num_workers", "close_returns", "closed", "conninfo",
                 "kwargs", "connection_class"):  # fmt: skip
        assert getattr(ours, name) == getattr(theirs, name), name
    assert ours.name.startswith("pool-")
    assert ours.reset_session is False  # (poolkit's full reset: asked for, never by default)
    assert ours.poolkit_pool is None  # (made at open)
    with ours:
        pool = ours.poolkit_pool
        assert isinstance(pool, poolkit.Pool)
        options = pool.options
        assert (options.min_size, options.max_size, options.max_connecting) == (4, 4, 3)
        assert options.max_idle_time == 600.0
        assert options.max_lifetime is None  # (checked at putconn, as psycopg_pool does)
        assert options.idle_order == "fifo"  # (in turn, as psycopg_pool's deque)
        assert options.max_waiting == 0
        ours.wait(5.0)
        assert len(pg.pids()) == 4
    assert ours.closed
    pg.wait_sessions(0)


@pytest.mark.parametrize(("min_size", "max_size"), [(0, 0), (0, None), (-1, None), (4, 2)])
def test_bad_sizes_raise_as_in_psycopg_pool(min_size: int, max_size: int | None) -> None:
    with pytest.raises(ValueError, match="size") as theirs:
        psycopg_pool.ConnectionPool(min_size=min_size, max_size=max_size, open=False)
    with pytest.raises(ValueError, match="size") as ours:
        pk.ConnectionPool(min_size=min_size, max_size=max_size, open=False)
    assert str(ours.value) == str(theirs.value)
    with pytest.raises(ValueError, match="num_workers"):
        pk.ConnectionPool(num_workers=0, open=False)


def test_conninfo_and_kwargs_may_be_callables(pg: PgServer) -> None:
    asked: list[str] = []

    def conninfo() -> str:
        asked.append("conninfo")
        return pg.dsn

    def kwargs() -> dict[str, Any]:
        asked.append("kwargs")
        return kw(pg)

    with (
        pk.ConnectionPool(conninfo, kwargs=kwargs, min_size=1, open=True) as p,
        p.connection() as conn,
    ):
        assert conn.execute("SELECT 1").fetchone() == (1,)
    assert asked[:2] == ["conninfo", "kwargs"]


def test_implicit_open_warns_as_psycopg_pool(pg: PgServer) -> None:
    p = pk.ConnectionPool(pg.dsn, min_size=1, kwargs=kw(pg))  # (open=None: opened here)
    try:
        assert not p.closed
        with pytest.warns(DeprecationWarning, match="'open' parameter"):
            p.putconn(p.getconn())
    finally:
        p.close()


# ---------------------------------------------------------------- getconn and putconn


def test_getconn_putconn_and_the_pool_attribute(pg: PgServer) -> None:
    with pk.ConnectionPool(pg.dsn, min_size=1, kwargs=kw(pg), open=True) as p:
        conn = p.getconn()
        assert conn._pool is p  # type: ignore[comparison-overlap]  # (psycopg's close() reads it)
        pid = pids(conn)
        conn.execute("SELECT 1")
        p.putconn(conn)
        assert conn._pool is None
        again = p.getconn()
        assert again is conn and pids(again) == pid  # (min_size 1: the same connection)
        with (
            psycopg.Connection.connect(pg.dsn, autocommit=True) as stray,
            pytest.raises(ValueError, match="doesn't come from any pool"),
        ):
            p.putconn(stray)
        with (
            pk.ConnectionPool(pg.dsn, min_size=1, kwargs=kw(pg), open=True) as other,
            pytest.raises(ValueError, match=f"comes from pool {p.name!r}"),
        ):
            other.putconn(again)
        p.putconn(again)


def test_a_pool_dropped_unclosed_is_collected_with_its_sessions(pg: PgServer) -> None:
    """A pool its user drops without ``close()`` goes as psycopg_pool's does: collected, its
    threads ended, its sessions gone from the server, and no warning (psycopg's "deleted while
    still open" included: pytest turns warnings into errors here)."""
    import gc
    import weakref

    p = pk.ConnectionPool(pg.dsn, min_size=2, kwargs=kw(pg), open=True)
    p.wait()
    with p.connection() as conn:
        conn.execute("SELECT 1")
    pg.wait_sessions(2)
    inner = weakref.ref(p._pool)  # (the poolkit pool, which its timer thread once kept alive)
    threads = [t for t in threading.enumerate() if t.name.startswith("poolkit-")]
    del p, conn
    gc.collect()
    assert inner() is None, "the poolkit pool was kept alive"
    pg.wait_sessions(0)
    for thread in threads:
        thread.join(8.0)  # (a timer thread's longest wait between two looks is 5 s)
        assert not thread.is_alive(), thread


def test_a_transaction_left_open_is_rolled_back_with_psycopg_pools_warning(
    pg: PgServer, caplog: pytest.LogCaptureFixture
) -> None:
    with pk.ConnectionPool(pg.dsn, min_size=1, kwargs=kw(pg), open=True) as p:
        conn = p.getconn()
        conn.execute("CREATE TEMP TABLE left_open (x int)")
        assert status(conn) == "INTRANS"
        with caplog.at_level(logging.WARNING, "psycopg.pool"):
            p.putconn(conn)
        assert "rolling back returned connection" in caplog.text
        assert status(conn) == "IDLE"
        with p.connection() as conn2:
            assert conn2.execute("SELECT to_regclass('left_open')").fetchone() == (None,)


def test_connection_commits_on_success_and_rolls_back_on_error(pg: PgServer) -> None:
    name = pg.app.replace("-", "_")
    pg.admin.execute(f"CREATE TABLE {name} (x int)")
    try:
        with pk.ConnectionPool(pg.dsn, min_size=1, kwargs=kw(pg), open=True) as p:
            with p.connection() as conn:
                conn.execute(f"INSERT INTO {name} VALUES (1)")
            with pytest.raises(ZeroDivisionError), p.connection() as conn:  # noqa: PT012
                conn.execute(f"INSERT INTO {name} VALUES (2)")
                raise ZeroDivisionError
        got = pg.admin.execute(f"SELECT x FROM {name}").fetchall()
        assert got == [(1,)]
    finally:
        pg.admin.execute(f"DROP TABLE {name}")


def test_close_returns_gives_the_connection_back(pg: PgServer) -> None:
    with pk.ConnectionPool(pg.dsn, min_size=1, kwargs=kw(pg), close_returns=True, open=True) as p:
        conn = p.getconn()
        pid = pids(conn)
        conn.close()  # (psycopg's close(): the pool's putconn, close_returns being set)
        assert not conn.closed
        assert conn._pool is None
        with p.connection() as again:
            assert pids(again) == pid
    with pk.ConnectionPool(pg.dsn, min_size=1, kwargs=kw(pg), open=True) as p:
        conn = p.getconn()
        conn.close()  # (close_returns False, psycopg_pool's default: closed for good)
        assert conn.closed
        p.putconn(conn)
        assert p.get_stats()["returns_bad"] == 1


# ---------------------------------------------------------------- statistics


def _exercise(p: Any, dsn: str) -> None:
    """The same calls on either pool: a use, a timeout, a bad return."""
    p.wait(5.0)
    with p.connection() as conn:
        conn.execute("SELECT 1")
    held = p.getconn()
    with pytest.raises(psycopg_pool.PoolTimeout):
        p.getconn(timeout=0.1)
    held.close()
    p.putconn(held)


def test_stats_keys_are_psycopg_pools(pg: PgServer) -> None:
    with psycopg_pool.ConnectionPool(pg.dsn, min_size=1, open=True) as theirs:
        _exercise(theirs, pg.dsn)
        their_stats = theirs.get_stats()
        their_keys = set(their_stats)
        their_popped = theirs.pop_stats()
        their_after = set(theirs.get_stats())
    with pk.ConnectionPool(pg.dsn, min_size=1, kwargs=kw(pg), open=True) as ours:
        _exercise(ours, pg.dsn)
        stats = ours.get_stats()
        popped = ours.pop_stats()
        after = ours.get_stats()
    assert set(stats) == their_keys
    assert set(popped) == set(their_popped)
    assert set(after) == their_after
    for key in ("requests_num", "requests_errors", "returns_bad"):
        assert stats[key] == their_stats[key], key
    assert (stats["requests_num"], stats["requests_errors"]) == (3, 1)
    assert stats["requests_queued"] >= 1 and stats["requests_wait_ms"] >= 100
    assert stats["returns_bad"] == 1
    assert stats["pool_min"] == stats["pool_max"] == 1
    assert after["requests_waiting"] == 0
    assert "requests_num" not in after  # (popped: counted anew)


# ---------------------------------------------------------------- exceptions


def test_exceptions_are_psycopg_pools_subclasses(pg: PgServer) -> None:
    for ours, theirs in ((pk.PoolTimeout, psycopg_pool.PoolTimeout),
                         (pk.PoolClosed, psycopg_pool.PoolClosed),
                         (pk.TooManyRequests, psycopg_pool.TooManyRequests)):  # fmt: skip
        assert issubclass(ours, theirs) and issubclass(ours, psycopg.OperationalError)
    p = pk.ConnectionPool(pg.dsn, min_size=1, max_waiting=1, kwargs=kw(pg), open=False)
    with pytest.raises(pk.PoolClosed, match="not open yet"):
        p.getconn()
    p.open(wait=True)
    held = p.getconn()
    started = time.monotonic()
    with pytest.raises(pk.PoolTimeout, match=r"after 0\.20 sec"):
        p.getconn(timeout=0.2)
    assert 0.15 < time.monotonic() - started < 2.0
    outcomes: list[BaseException] = []

    def wait_in_vain() -> None:
        try:
            p.getconn(timeout=1.0)
        except BaseException as exc:
            outcomes.append(exc)

    waiting = threading.Thread(target=wait_in_vain)
    waiting.start()
    PgServer.wait(lambda: p.get_stats()["requests_waiting"] == 1, "a caller waiting")
    with pytest.raises(pk.TooManyRequests, match="requests waiting"):
        p.getconn(timeout=1.0)
    waiting.join()
    assert [type(exc) for exc in outcomes] == [pk.PoolTimeout]
    p.putconn(held)
    p.close()
    with pytest.raises(pk.PoolClosed, match="already closed"):
        p.getconn()
    with pytest.raises(pk.PoolClosed, match="cannot be reused"):
        p.open()


# ---------------------------------------------------------------- generic at run time


class MyConnection(psycopg.Connection[Any]):
    pass


def test_generic_subscription(pg: PgServer) -> None:
    with pk.ConnectionPool[MyConnection](
        pg.dsn, connection_class=MyConnection, min_size=1, kwargs=kw(pg), open=True
    ) as p:
        assert_type(p, pk.ConnectionPool[MyConnection])
        with p.connection() as conn:
            assert_type(conn, MyConnection)
            assert type(conn) is MyConnection  # (the connection itself: no proxy)
    assert pk.AsyncConnectionPool[psycopg.AsyncConnection[Any]] is not None
    assert pk.NullConnectionPool[MyConnection] is not None


# ---------------------------------------------------------------- the null pool


def test_null_pool_keeps_no_connection_and_hands_one_to_a_waiter(pg: PgServer) -> None:
    with pk.NullConnectionPool(pg.dsn, max_size=1, kwargs=kw(pg), open=True) as p:
        assert (p.min_size, p.max_size) == (0, 1)
        with p.connection() as conn:
            conn.execute("SELECT 1")
        pg.wait_sessions(0)  # (closed when given back: nobody waited)
        held = p.getconn()
        pid = pids(held)
        got: list[int] = []
        waiter = threading.Thread(target=lambda: got.append(pids(p.getconn(timeout=5.0))))
        waiter.start()
        PgServer.wait(lambda: p.get_stats()["requests_waiting"] == 1, "a caller waiting")
        p.putconn(held)
        waiter.join()
        assert got == [pid]  # (handed to the waiter, not closed)
    with pytest.raises(ValueError, match="min_size = 0"):
        pk.NullConnectionPool(min_size=1, open=False)


class _Clock:
    """A clock for ``requests_wait_ms``'s counting, moved by the test."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_null_pool_counts_a_wait_from_the_end_of_the_connects_ahead(
    pg: PgServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # psycopg_pool's null pool connects in the caller, holding its lock: a caller that comes
    # meanwhile enters the queue, and counts, only once that connect is done
    from poolkit.backends import _psycopg_dropin

    clock = _Clock()
    monkeypatch.setattr(_psycopg_dropin, "monotonic", clock)
    connecting = threading.Event()
    go = threading.Event()

    def conninfo() -> str:
        connecting.set()
        go.wait(10.0)
        return pg.dsn

    with pk.NullConnectionPool(conninfo, max_size=1, kwargs=kw(pg), timeout=10.0) as p:
        got: dict[str, Any] = {}
        first = threading.Thread(target=lambda: got.update(first=p.getconn()))
        first.start()
        assert connecting.wait(5.0)
        second = threading.Thread(target=lambda: got.update(second=p.getconn()))
        second.start()  # (finds max_size=1 connection being made: queued)
        PgServer.wait(lambda: p.get_stats().get("requests_queued") == 1, "a caller queued")
        clock.now = 3.0
        go.set()  # the connect ahead ends at 3.0: the second caller's wait counts from then
        first.join(5.0)
        PgServer.wait(lambda: p.get_stats()["requests_waiting"] == 1, "the second waiting")
        clock.now = 5.0
        p.putconn(got["first"])  # handed to the second at 5.0
        second.join(5.0)
        assert p.get_stats()["requests_wait_ms"] == 2000
        p.putconn(got["second"])
        # a caller that finds no connect running counts from when it comes
        held = p.getconn()
        third = threading.Thread(target=lambda: got.update(third=p.getconn()))
        third.start()
        PgServer.wait(lambda: p.get_stats()["requests_waiting"] == 1, "a third caller waiting")
        clock.now = 5.5
        p.putconn(held)
        third.join(5.0)
        assert p.pop_stats()["requests_wait_ms"] == 2500
        p.putconn(got["third"])


def test_a_null_pool_wait_counts_from_the_end_of_the_connects_it_found(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from poolkit.backends import _psycopg_dropin

    clock = _Clock()
    monkeypatch.setattr(_psycopg_dropin, "monotonic", clock)
    ahead = _psycopg_dropin.ConnectsAhead()
    ahead.started(1)
    ahead.started(2)
    wait = ahead.queued()  # at 0, with connects 1 and 2 running
    ahead.started(3)  # (after it came: a replacement, made while it is queued)
    clock.now = 1.0
    ahead.ended(1)
    clock.now = 2.0
    ahead.ended(2)  # the last it found: it counts from here
    clock.now = 3.0
    ahead.ended(3)
    clock.now = 4.5
    assert ahead.waited_ms(wait) == 2500
    ahead.started(4)
    wait = ahead.queued()
    clock.now = 5.0
    assert ahead.waited_ms(wait) == 0  # connect 4 still runs: not yet in psycopg_pool's queue
    ahead.ended(4)
    clock.now = 6.0
    wait = ahead.queued()  # none running: from now
    clock.now = 6.25
    assert ahead.waited_ms(wait) == 250


# ---------------------------------------------------------------- the full reset, asked for


@pytest.mark.parametrize("reset_session", [False, True])
def test_reset_session_is_an_explicit_option(pg: PgServer, reset_session: bool) -> None:
    with pk.ConnectionPool(
        pg.dsn, min_size=1, kwargs=kw(pg), reset_session=reset_session, open=True
    ) as p:
        with p.connection() as conn:
            conn.execute("SET timezone = 'Pacific/Chatham'")
            conn.commit()
            conn.autocommit = True
        with p.connection() as conn:
            timezone = conn.execute("SHOW timezone").fetchone()
            autocommit = conn.autocommit
    if reset_session:
        assert timezone != ("Pacific/Chatham",) and autocommit is False
    else:  # (psycopg_pool's behaviour: a session's settings outlive the block)
        assert timezone == ("Pacific/Chatham",) and autocommit is True


def test_close_lets_a_reset_running_end_first(
    pg: PgServer, caplog: pytest.LogCaptureFixture
) -> None:
    """A connection given back just before ``close()`` is mid-reset (``reset_session``'s
    statements run in the pool's task): ``close`` waits for it, as psycopg_pool's ``putconn`` has
    ended its reset when it returns, instead of cancelling it mid-statement (psycopg then tried
    to cancel the statement on the server and warned "query cancellation interrupted")."""

    async def main() -> float:
        p = pk.AsyncConnectionPool(
            pg.dsn, min_size=1, kwargs=kw(pg), reset_session="SELECT pg_sleep(0.3)", open=False
        )
        await p.open(wait=True)
        conn = await p.getconn()
        await p.putconn(conn)
        pool = p.poolkit_pool
        assert pool is not None
        await until(lambda: pool.stats().resetting == 1)  # (its statement now runs)
        start = time.monotonic()
        await p.close()
        return time.monotonic() - start

    with caplog.at_level(logging.WARNING, logger="psycopg"):
        took = asyncio.run(main())
    assert not [r for r in caplog.records if r.name.startswith("psycopg")], caplog.text
    assert 0.1 < took < 5.0  # (the reset's end waited for, within close's timeout)
    PgServer.wait(lambda: not pg.pids(), "the pool's sessions to end")


# ---------------------------------------------------------------- drain and resize


def test_drain_replaces_the_connections_and_resize_changes_the_sizes(pg: PgServer) -> None:
    with pk.ConnectionPool(pg.dsn, min_size=2, kwargs=kw(pg), open=True) as p:
        p.wait(5.0)
        before = set(pg.pids())
        p.drain()
        p.wait(5.0)
        PgServer.wait(lambda: not (set(pg.pids()) & before), "the old sessions to go")
        p.resize(1, 3)
        assert (p.min_size, p.max_size) == (1, 3)
        pool = p.poolkit_pool
        assert pool is not None and (pool.options.min_size, pool.options.max_size) == (1, 3)
        conns = [p.getconn(timeout=5.0) for _ in range(3)]
        assert len({pids(c) for c in conns}) == 3
        for conn in conns:
            p.putconn(conn)


def test_resize_keeps_the_pool_and_serves_the_waiting_callers_in_order(pg: PgServer) -> None:
    with pk.ConnectionPool(pg.dsn, min_size=2, kwargs=kw(pg), timeout=10.0) as p:
        p.wait(5.0)
        pool = p.poolkit_pool
        assert pool is not None
        held = [p.getconn() for _ in range(2)]
        kept = {pids(c) for c in held}
        served: list[str] = []
        conns: dict[str, Any] = {}

        def caller(name: str) -> None:
            conns[name] = p.getconn()
            served.append(name)

        threads = []
        for name in ("first", "second"):
            threads.append(threading.Thread(target=caller, args=(name,)))
            threads[-1].start()
            PgServer.wait(lambda: p.get_stats()["requests_waiting"] == len(threads), name)
        p.resize(2, 3)  # room for one: the first caller's
        PgServer.wait(lambda: served == ["first"], "the first caller served")
        assert p.poolkit_pool is pool  # (no new pool: the same connections, the same queue)
        assert kept <= set(pg.pids()) and len(pg.pids()) == 3
        p.putconn(held.pop())  # (the second one waits for a connection given back)
        PgServer.wait(lambda: served == ["first", "second"], "the second caller served")
        for thread in threads:
            thread.join(5.0)
        stats = p.get_stats()
        assert (stats["pool_min"], stats["pool_max"]) == (2, 3)
        assert stats["requests_num"] == 4 and stats["requests_queued"] == 2  # (not reset)
        p.resize(1, 1)  # smaller: the idle ones close now, those out when given back
        for conn in [*held, *conns.values()]:
            p.putconn(conn)
        pg.wait_sessions(1)
        assert p.get_stats()["pool_size"] == 1 and pool.stats().total == 1


def test_async_resize_keeps_the_pool_and_serves_the_waiting_caller(pg: PgServer) -> None:
    async def main() -> None:
        async with pk.AsyncConnectionPool(pg.dsn, min_size=1, kwargs=kw(pg)) as p:
            await p.wait(5.0)
            pool = p.poolkit_pool
            held = await p.getconn()
            waiter = asyncio.create_task(p.getconn(timeout=10.0))
            await until(lambda: p.get_stats()["requests_waiting"] == 1)
            await p.resize(1, 2)
            conn = await asyncio.wait_for(waiter, 5.0)
            assert p.poolkit_pool is pool and pids(held) in pg.pids()
            await p.resize(1)  # (max_size = min_size, as psycopg_pool's)
            await p.putconn(conn)  # beyond the limit: closed
            await p.putconn(held)
            await until(lambda: len(pg.pids()) == 1)
            assert p.get_stats()["requests_queued"] == 1

    asyncio.run(main())


def test_null_pool_resize_grows_its_connects_at_once(pg: PgServer) -> None:
    with pk.NullConnectionPool(pg.dsn, max_size=1, kwargs=kw(pg), timeout=10.0) as p:
        pool = p.poolkit_pool
        assert pool is not None and pool.options.max_connecting == 1
        held = p.getconn()
        got: list[Any] = []
        thread = threading.Thread(target=lambda: got.append(p.getconn()))
        thread.start()
        PgServer.wait(lambda: p.get_stats()["requests_waiting"] == 1, "a waiting caller")
        p.resize(0, 2)
        thread.join(5.0)
        assert got and pids(got[0]) != pids(held) and p.poolkit_pool is pool
        assert (pool.options.max_size, pool.options.max_connecting) == (2, 2)
        for conn in (held, got[0]):
            p.putconn(conn)
        pg.wait_sessions(0)


# ---------------------------------------------------------------- asyncio, cancellation


def test_async_pool_wait_for_around_getconn_is_bounded_and_not_absorbed(pg: PgServer) -> None:
    async def main() -> None:
        async with pk.AsyncConnectionPool(pg.dsn, min_size=1, kwargs=kw(pg)) as p:
            await p.wait(5.0)
            held = await p.getconn()
            started = time.monotonic()
            with pytest.raises(TimeoutError):  # (#1345: the wait_for ends the wait)
                await asyncio.wait_for(p.getconn(timeout=30.0), 0.2)
            assert time.monotonic() - started < 2.0
            assert p.get_stats()["requests_waiting"] == 0
            # #1401: the connection handed over as the waiter is cancelled is not kept by a
            # cancelled getconn, nor lost: the cancellation reaches the caller, the connection
            # goes back to the pool
            waiter = asyncio.create_task(p.getconn(timeout=30.0))
            await until(lambda: p.get_stats()["requests_waiting"] == 1)
            await p.putconn(held)  # (handed to the waiter...)
            waiter.cancel()  # (...which is cancelled before it runs again)
            with pytest.raises(asyncio.CancelledError):
                await waiter
            await until(lambda: p.get_stats()["pool_available"] == 1)
            assert p.get_stats()["pool_size"] == 1
            async with p.connection(timeout=1.0) as conn:
                assert await (await conn.execute("SELECT 1")).fetchone() == (1,)

    asyncio.run(main())


def test_async_pool_cannot_open_without_a_loop_and_null_pool_works(pg: PgServer) -> None:
    with pytest.raises(RuntimeError, match="no running loop"):
        pk.AsyncConnectionPool(pg.dsn)
    p = pk.AsyncNullConnectionPool(pg.dsn, kwargs=kw(pg), open=False)

    async def main() -> None:
        async with p:
            await p.wait(5.0)
            async with p.connection() as conn:
                assert await (await conn.execute("SELECT 2")).fetchone() == (2,)
            assert p.get_stats()["pool_available"] == 0

    asyncio.run(main())
    pg.wait_sessions(0)
