"""SQLAlchemy's pool users' top complaints as tests (issue 39, point 5), each run against
SQLAlchemy's own pool and against poolkit's (``poolkit.backends.sqlalchemy``), on the real
server. Where SQLAlchemy's pool fails, its case is marked ``xfail(strict=True)`` with the issue:
the same assertion documents its behaviour (an XPASS says SQLAlchemy changed: update the mark).
poolkit's case must hold.

* #6652 / #8145 / #12077: a task cancelled while it holds a connection (in a query, inside
  ``async with engine.connect()``), under asyncio and in an anyio task group (whose cancel scope
  cancels again every await of the clean-up), gives the connection back: none checked out
  afterwards, no "non-checked-in connection" warning when the garbage collector runs, no
  session left running the query, and none at all once the engine is disposed;
* H3 starvation: 16 threads on a pool of 8, each ``with engine.connect(): SELECT 1`` in a loop:
  no thread does less than half the mean number of operations (``timing``: left out of a plain
  run, ``-m timing`` runs it).
"""

from __future__ import annotations

import asyncio
import gc
import warnings
from typing import TYPE_CHECKING, Any

import pytest

from pg_service import PgServer, need, pg, wait_until
from starvation import assert_no_thread_starved, operations_per_thread

__all__ = ["pg"]

if TYPE_CHECKING:
    import anyio
    import sqlalchemy
    import sqlalchemy.ext.asyncio as sa_asyncio
    import sqlalchemy.pool as sa_pool

    from poolkit.backends import sqlalchemy as pk
else:
    sqlalchemy = need("sqlalchemy")
    sa_pool = need("sqlalchemy.pool")
    sa_asyncio = need("sqlalchemy.ext.asyncio")
    anyio = need("anyio")
    pk = need("poolkit.backends.sqlalchemy")


def running(server: PgServer, query: str) -> int:
    """Sessions of this test running ``query`` now."""
    row = server.admin.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s AND state = 'active' "
        "AND query = %s",
        [server.app, query],
    ).fetchone()
    return int(row[0])


# ---------------------------------------------------------------- #6652, #8145, #12077

QUERY = "SELECT pg_sleep(30)"


def async_engine(server: PgServer, impl: str) -> Any:
    cls = sa_pool.AsyncAdaptedQueuePool if impl == "sqlalchemy" else pk.AsyncAdaptedQueuePool
    rest = server.dsn.split("://", 1)[1]
    return sa_asyncio.create_async_engine(
        f"postgresql+asyncpg://{rest}",
        poolclass=cls,
        pool_size=2,
        max_overflow=0,
        # (the server checks every 100 ms that the client is still there while a query runs: a
        # connection the client closed mid-query ends its session at once, not when the
        # query would have ended)
        connect_args={
            "server_settings": {
                "application_name": server.app,
                "client_connection_check_interval": "100ms",
            }
        },
    )


async def hold(engine: Any, started: asyncio.Event | anyio.Event) -> None:
    async with engine.connect() as conn:
        await conn.exec_driver_sql("SELECT 1")
        started.set()
        await conn.exec_driver_sql(QUERY)


async def cancel_with_asyncio(engine: Any) -> None:
    started = asyncio.Event()
    task = asyncio.create_task(hold(engine, started))
    await asyncio.wait_for(started.wait(), 10)
    await asyncio.sleep(0.2)  # (the query runs)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 10)


async def cancel_with_anyio(engine: Any) -> None:
    started = anyio.Event()
    with anyio.fail_after(10):
        async with anyio.create_task_group() as group:
            group.start_soon(hold, engine, started)
            await started.wait()
            await anyio.sleep(0.2)  # (the query runs)
            group.cancel_scope.cancel()


CANCELLERS = {"asyncio": cancel_with_asyncio, "anyio": cancel_with_anyio}


@pytest.mark.parametrize("runner", ["asyncio", "anyio"])
@pytest.mark.parametrize("impl", ["sqlalchemy", "poolkit"])
def test_a_task_cancelled_holding_a_connection_gives_it_back(
    pg: PgServer, impl: str, runner: str
) -> None:
    """Cancelled in the middle of a query, the task's connection comes back to the pool (the
    cancelled clean-up invalidates it: SQLAlchemy's own reset path), nothing warns, the query
    stops running on the server, and disposing the engine leaves no session. Both hold with
    SQLAlchemy 2.1 (its #13699 fix returns the record when a cancellation interrupts the reset,
    and poolkit's pool keeps SQLAlchemy's records and reset): a regression guard for both.

    Under anyio the cancel scope also cancels asyncpg's cancel request, so the connection is
    closed under the query rather than the query cancelled: the server ends that session when
    it sees the client gone (``client_connection_check_interval``, set here), for both pools."""
    engine = async_engine(pg, impl)
    pool: Any = engine.sync_engine.pool

    async def main() -> None:
        await CANCELLERS[runner](engine)
        assert pool.checkedout() == 0, pool.status()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            gc.collect()
        assert not [w for w in caught if "non-checked-in" in str(w.message)], caught
        await wait_until(lambda: running(pg, QUERY) == 0, "the cancelled query to stop")
        async with engine.connect() as conn:  # (the pool still serves)
            assert (await conn.exec_driver_sql("SELECT 1")).scalar() == 1
        await engine.dispose()

    asyncio.run(main())
    pg.wait_sessions(0)


# ---------------------------------------------------------------- H3: no thread starved

SIZE = 8  # (16 threads: starvation.THREADS)


@pytest.mark.timing
@pytest.mark.parametrize(
    "impl",
    [
        pytest.param(
            "sqlalchemy",
            marks=pytest.mark.xfail(
                strict=True,
                reason="H3: QueuePool's threading.Condition lets a newcomer take a connection a "
                "waiter was woken for; a thread can go without any for the whole run",
            ),
        ),
        "poolkit",
    ],
)
def test_no_thread_is_starved(pg: PgServer, impl: str) -> None:
    """H3's shape: 16 threads, each ``with engine.connect(): SELECT 1`` in a loop, on a pool of
    8 (no overflow), for 2 s: every thread does at least half the mean number of operations."""
    cls = sa_pool.QueuePool if impl == "sqlalchemy" else pk.QueuePool
    rest = pg.dsn.split("://", 1)[1]
    engine = sqlalchemy.create_engine(
        f"postgresql+psycopg://{rest}?application_name={pg.app}",
        poolclass=cls,
        pool_size=SIZE,
        max_overflow=0,
        pool_timeout=10,
    )
    warm = [engine.connect() for _ in range(SIZE)]
    for conn in warm:
        conn.close()

    def operation() -> None:
        with engine.connect() as conn:
            conn.exec_driver_sql("SELECT 1").scalar()

    try:
        counts = operations_per_thread(operation)
    finally:
        engine.dispose()
    assert_no_thread_starved(counts)
