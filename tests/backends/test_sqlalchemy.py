"""poolkit.backends.sqlalchemy: ``QueuePool`` and ``AsyncAdaptedQueuePool`` for SQLAlchemy's
engines, on the real server (psycopg for threads, asyncpg for asyncio), each behaviour checked
beside SQLAlchemy's own ``QueuePool`` where they must agree (the same events in the same order,
the same counts, the same errors)."""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
import threading
import time
from typing import TYPE_CHECKING, Any

import pytest

from pg_service import PgServer, need, pg
from poolkit import AsyncPool

__all__ = ["pg"]

if TYPE_CHECKING:
    import sqlalchemy
    import sqlalchemy.ext.asyncio as sa_asyncio
    import sqlalchemy.pool as sa_pool

    from poolkit.backends import sqlalchemy as pk
else:
    sqlalchemy = need("sqlalchemy")
    sa_pool = need("sqlalchemy.pool")
    sa_asyncio = need("sqlalchemy.ext.asyncio")
    pk = need("poolkit.backends.sqlalchemy")

EVENTS = (
    "connect",
    "first_connect",
    "checkout",
    "checkin",
    "reset",
    "invalidate",
    "soft_invalidate",
    "close",
    "detach",
    "close_detached",
)


def url(server: PgServer, driver: str = "psycopg") -> str:
    """The test database's SQLAlchemy URL (psycopg or asyncpg), with this test's
    application_name (its sessions are found by it)."""
    rest = server.dsn.split("://", 1)[1]
    return f"postgresql+{driver}://{rest}?application_name={server.app}"


def engine(server: PgServer, poolclass: Any, **kwargs: Any) -> Any:
    return sqlalchemy.create_engine(url(server), poolclass=poolclass, **kwargs)


def record_events(pool: Any) -> list[str]:
    """Every pool event fired on ``pool``, by name, in order."""
    fired: list[str] = []
    for name in EVENTS:
        sqlalchemy.event.listen(pool, name, lambda *args, _name=name: fired.append(_name))
    return fired


def scenario(eng: Any) -> None:
    """Check out, use, invalidate (hard and soft), detach, overflow and give back."""
    with eng.connect() as conn:
        conn.exec_driver_sql("SELECT 1")
    with eng.connect() as conn:  # (the same record again: no connect)
        conn.exec_driver_sql("SELECT 1")
        conn.invalidate()
    with eng.connect() as conn:  # (the invalidated record reconnects)
        conn.connection.invalidate(soft=True)
    held = [eng.raw_connection() for _ in range(3)]  # (size 2: one overflow)
    held[0].detach()
    for raw in held:
        raw.close()  # (the detached one closes for good; the overflow one closes: queue full)


def test_the_events_fire_as_on_queuepool(pg: PgServer) -> None:
    """The same uses of an engine fire the same pool events, in the same order, on both pools
    (every event among them), and leave the same counts."""
    fired: dict[str, list[str]] = {}
    for name, cls in (("sqlalchemy", sa_pool.QueuePool), ("poolkit", pk.QueuePool)):
        eng = engine(pg, cls, pool_size=2, max_overflow=1)
        fired[name] = record_events(eng.pool)
        scenario(eng)
        assert eng.pool.status() == (
            "Pool size: 2  Connections in pool: 2 Current Overflow: 0 Current Checked out "
            "connections: 0"
        )
        eng.dispose()
    assert set(fired["sqlalchemy"]) == set(EVENTS)
    assert fired["poolkit"] == fired["sqlalchemy"]


def test_the_pool_is_poolkits_and_counts_as_queuepool(pg: PgServer) -> None:
    eng = engine(pg, pk.QueuePool, pool_size=3, max_overflow=2, pool_timeout=7)
    pool = eng.pool
    assert type(pool) is pk.QueuePool
    assert (pool.size(), pool.timeout(), pool.checkedin(), pool.overflow()) == (3, 7, 0, -3)
    conns = [eng.connect() for _ in range(5)]
    assert (pool.checkedout(), pool.checkedin(), pool.overflow()) == (5, 0, 2)
    for conn in conns:
        conn.close()
    assert (pool.checkedout(), pool.checkedin(), pool.overflow()) == (0, 3, 0)
    pg.wait_sessions(3)  # (the two overflow ones closed: their backends end a moment later)
    eng.dispose()
    pg.wait_sessions(0)


@pytest.mark.parametrize("poolclass", ["sqlalchemy", "poolkit"])
def test_exhausted_raises_queuepools_timeout_error(pg: PgServer, poolclass: str) -> None:
    cls = sa_pool.QueuePool if poolclass == "sqlalchemy" else pk.QueuePool
    eng = engine(pg, cls, pool_size=1, max_overflow=1, pool_timeout=0.2)
    held = [eng.connect(), eng.connect()]
    started = time.monotonic()
    with pytest.raises(sqlalchemy.exc.TimeoutError) as caught:
        eng.connect()
    assert 0.2 <= time.monotonic() - started < 3.0
    assert str(caught.value).startswith(
        "QueuePool limit of size 1 overflow 1 reached, connection timed out, timeout 0.20"
    )
    for conn in held:
        conn.close()
    eng.dispose()


def test_max_overflow_minus_one_is_no_limit(pg: PgServer) -> None:
    eng = engine(pg, pk.QueuePool, pool_size=1, max_overflow=-1, pool_timeout=0.1)
    conns = [eng.connect() for _ in range(6)]
    assert eng.pool.overflow() == 5
    for conn in conns:
        conn.close()
    assert (eng.pool.checkedin(), eng.pool.overflow()) == (1, 0)  # (the rest closed)
    eng.dispose()


@pytest.mark.parametrize("use_lifo", [False, True])
def test_idle_order_is_queuepools(pg: PgServer, use_lifo: bool) -> None:
    """FIFO by default (records used in turn), LIFO with ``use_lifo=True``; ``recreate()``
    keeps it."""
    eng = engine(pg, pk.QueuePool, pool_size=3, max_overflow=0, pool_use_lifo=use_lifo)
    for pool in (eng.pool, eng.pool.recreate()):
        raws = [pool.connect() for _ in range(3)]
        order = [raw.dbapi_connection for raw in raws]
        for raw in raws:
            raw.close()
        again = pool.connect()
        assert again.dbapi_connection is (order[-1] if use_lifo else order[0])
        again.close()
        pool.dispose()


def test_a_failed_connect_raises_to_the_caller_and_holds_no_room(pg: PgServer) -> None:
    """QueuePool connects in the caller: the driver's error reaches it (wrapped by the engine)
    and the slot is free again."""
    bad = sqlalchemy.create_engine(
        "postgresql+psycopg://postgres@127.0.0.1:1/none",
        poolclass=pk.QueuePool,
        pool_size=1,
        max_overflow=0,
        pool_timeout=0.2,
    )
    for _ in range(3):  # (each time: the room the failed connect took is given back)
        with pytest.raises(sqlalchemy.exc.OperationalError):
            bad.connect()
    pool: Any = bad.pool
    assert (pool.checkedin(), pool.checkedout(), pool.overflow()) == (0, 0, -1)
    bad.dispose()  # (its poolkit pool's timer thread ends with it)


def test_dispose_closes_idle_and_a_record_out_comes_back_to_the_new_pool(pg: PgServer) -> None:
    """As QueuePool: dispose() closes the idle records at once; one out meanwhile is taken back
    when given back, and handed out again."""
    eng = engine(pg, pk.QueuePool, pool_size=2, max_overflow=0)
    pool = eng.pool
    idle, out = pool.connect(), pool.connect()
    idle_conn, out_conn = idle.dbapi_connection, out.dbapi_connection
    idle.close()
    pool.dispose()
    assert idle_conn.closed and not out_conn.closed
    out.close()
    assert not out_conn.closed and pool.checkedin() == 1
    again = pool.connect()
    assert again.dbapi_connection is out_conn
    again.close()
    pool.dispose()
    assert out_conn.closed


def test_waiting_threads_are_served_in_arrival_order(pg: PgServer) -> None:
    eng = engine(pg, pk.QueuePool, pool_size=1, max_overflow=0, pool_timeout=10)
    held = eng.connect()
    served: list[int] = []

    def wait(i: int) -> None:
        with eng.connect():
            served.append(i)

    threads = []
    for i in range(4):
        thread = threading.Thread(target=wait, args=(i,))
        thread.start()
        threads.append(thread)
        deadline = time.monotonic() + 5
        while eng.pool._pool.stats().waiting < i + 1:  # (the poolkit pool's: i+1 wait)
            assert time.monotonic() < deadline
            time.sleep(0.005)
    held.close()
    for thread in threads:
        thread.join(10)
    assert served == [0, 1, 2, 3]
    eng.dispose()


def test_logs_go_to_sqlalchemys_pool_logger(pg: PgServer, caplog: pytest.LogCaptureFixture) -> None:
    eng = engine(pg, pk.QueuePool)
    with caplog.at_level(logging.INFO, logger="sqlalchemy.pool"):
        eng.dispose()
    assert [r.name for r in caplog.records] == ["sqlalchemy.pool.impl.QueuePool"] * 2
    assert caplog.records[0].getMessage().startswith("Pool disposed. Pool size: 5")
    assert caplog.records[1].getMessage() == "Pool recreating"  # (the engine's new pool)


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"pool_size": -1}, ValueError),
        ({"pool_size": "5"}, TypeError),
        ({"max_overflow": 1.5}, TypeError),
        ({"timeout": "30"}, TypeError),
        ({"timeout": float("nan")}, TypeError),
    ],
)
def test_bad_arguments_are_refused(kwargs: dict[str, Any], error: type[Exception]) -> None:
    with pytest.raises(error, match=next(iter(kwargs))):
        pk.QueuePool(lambda: None, **kwargs)


# ---------------------------------------------------------------- asyncio


def async_engine(server: PgServer, **kwargs: Any) -> Any:
    return sa_asyncio.create_async_engine(
        url(server, "asyncpg").split("?", 1)[0],
        poolclass=pk.AsyncAdaptedQueuePool,
        connect_args={"server_settings": {"application_name": server.app}},
        **kwargs,
    )


def test_async_engine_made_before_any_loop_runs(pg: PgServer) -> None:
    eng = async_engine(pg, pool_size=2, max_overflow=1, pool_timeout=0.2)
    assert type(eng.sync_engine.pool) is pk.AsyncAdaptedQueuePool

    async def main() -> None:
        async with eng.connect() as conn:
            assert (await conn.exec_driver_sql("SELECT 1")).scalar() == 1
        held = [await eng.connect() for _ in range(3)]
        with pytest.raises(sqlalchemy.exc.TimeoutError, match="limit of size 2 overflow 1"):
            await eng.connect()
        for conn in held:
            await conn.close()
        assert eng.sync_engine.pool.status() == (
            "Pool size: 2  Connections in pool: 2 Current Overflow: 0 Current Checked out "
            "connections: 0"
        )
        await eng.dispose()

    asyncio.run(main())
    pg.wait_sessions(0)


def test_async_a_cancelled_waiter_leaves_the_queue(pg: PgServer) -> None:
    """A task cancelled while it waits for a connection takes none: the next one is served."""

    async def main() -> None:
        eng = async_engine(pg, pool_size=1, max_overflow=0, pool_timeout=10)
        held = await eng.connect()
        async def connect() -> Any:
            return await eng.connect()

        waiter = asyncio.create_task(connect())
        await asyncio.sleep(0.1)
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        await held.close()
        assert eng.sync_engine.pool._pool.stats().waiting == 0
        async with eng.connect() as conn:
            await conn.exec_driver_sql("SELECT 1")
        await eng.dispose()

    asyncio.run(main())


def test_async_a_checkout_served_at_once_stays_in_its_greenlet(
    pg: PgServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A connection available and nobody waiting: the checkout never leaves SQLAlchemy's
    greenlet (no ``await_``, as ``AsyncAdaptedQueue.get_nowait()``); one that must wait (nothing
    idle) is awaited through the bridge, the whole checkout coroutine in the task (no first step
    in the greenlet to carry over), and served when a connection comes back."""
    from sqlalchemy.util.concurrency import await_ as real  # (what the drop-in calls)

    bridged: list[Any] = []

    def await_(awaitable: Any) -> Any:
        bridged.append(awaitable)
        return real(awaitable)

    monkeypatch.setattr(pk, "await_", await_)

    def checkout(awaitable: Any) -> bool:
        """Whether ``awaitable`` is (the rest of) a poolkit checkout."""
        code = getattr(awaitable, "cr_code", None)
        return type(awaitable).__name__ == "Rest" or code is AsyncPool.checkout.__code__

    async def main() -> None:
        eng = async_engine(pg, pool_size=1, max_overflow=0, pool_timeout=10)
        async with eng.connect():
            pass  # (the first waits for its connection to be made)
        del bridged[:]
        for _ in range(3):
            async with eng.connect() as conn:
                assert (await conn.exec_driver_sql("SELECT 1")).scalar() == 1
        assert [a for a in bridged if checkout(a)] == []
        held = await eng.connect()

        async def connect() -> Any:
            return await eng.connect()

        waiter = asyncio.create_task(connect())
        await asyncio.sleep(0.05)
        assert not waiter.done()
        await held.close()
        conn = await waiter
        assert (await conn.exec_driver_sql("SELECT 2")).scalar() == 2
        await conn.close()
        (waited,) = [a for a in bridged if checkout(a)]
        assert waited.cr_code is AsyncPool.checkout.__code__  # (the coroutine itself)
        await eng.dispose()

    asyncio.run(main())
    pg.wait_sessions(0)


def test_async_pool_used_outside_a_greenlet_never_waits(pg: PgServer) -> None:
    """SQLAlchemy's sync API on an async pool (``pool.connect()`` outside a greenlet): served
    when a connection is free; else QueuePool's timeout at once, nothing left waiting, as
    ``AsyncAdaptedQueue.get_nowait()``."""

    async def main() -> None:
        eng = async_engine(pg, pool_size=1, max_overflow=0, pool_timeout=10)
        async with eng.connect():
            pass  # (its connection made)
        pool: Any = eng.sync_engine.pool
        held = pool.connect()
        started = time.perf_counter()
        with pytest.raises(sqlalchemy.exc.TimeoutError, match="limit of size 1 overflow 0"):
            pool.connect()
        assert time.perf_counter() - started < 5  # (not the 10 s pool_timeout)
        assert pool._pool.stats().waiting == 0
        held.close()
        async with eng.connect() as conn:
            assert (await conn.exec_driver_sql("SELECT 1")).scalar() == 1
        await eng.dispose()

    asyncio.run(main())
    pg.wait_sessions(0)


CROSS_LOOP = """
import asyncio, sys
import sqlalchemy.pool
from sqlalchemy.ext.asyncio import create_async_engine
from poolkit.backends import sqlalchemy as pk

cls = sqlalchemy.pool.AsyncAdaptedQueuePool
if sys.argv[2] == "poolkit":
    cls = pk.AsyncAdaptedQueuePool
eng = create_async_engine(sys.argv[1], poolclass=cls,
                          connect_args={"server_settings": {"application_name": sys.argv[3]}})

async def use():
    async with eng.connect() as conn:
        print((await conn.exec_driver_sql("SELECT count(*) FROM pg_stat_activity "
                                          "WHERE application_name = $1", (sys.argv[3],))).scalar())

async def dispose():
    await eng.dispose()

asyncio.run(use())
asyncio.run(dispose())
asyncio.run(use())
asyncio.run(dispose())
print("done")
"""


@pytest.mark.parametrize("poolclass", ["sqlalchemy", "poolkit"])
def test_async_engine_disposed_from_another_loop_then_used_in_a_third(
    pg: PgServer, poolclass: str
) -> None:
    """The usual test-suite pattern (a loop per test, ``asyncio.run(engine.dispose())``): the
    dispose closes the idle connections the first loop made (the next loop's session is the only
    one), and the engine serves the next loop, as SQLAlchemy's own pool does. (In a process of
    its own: asyncpg's transports of a closed loop cannot be closed cleanly from another one, and
    with either pool the garbage collector warns when it takes them.)"""
    url = async_engine(pg).url.render_as_string(hide_password=False)
    run = subprocess.run(
        [sys.executable, "-W", "ignore::ResourceWarning", "-c", CROSS_LOOP, url, poolclass,
         pg.app],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["1", "1", "done"]
    pg.wait_sessions(0)
