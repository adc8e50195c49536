"""The PostgreSQL workloads (``SELECT 1`` under contention) and every pool on them, each made and
used as its documentation shows, with the workload's pool size and its own defaults otherwise.

* asyncpg, asyncio: ``poolkit.backends.asyncpg.create_pool`` (full reset at check-in: rollback,
  ``pg_advisory_unlock_all()``, ``CLOSE ALL``, ``UNLISTEN *``, ``RESET ALL``) and
  ``asyncpg.create_pool`` (the same reset: as shipped is like for like), SQLAlchemy's
  ``AsyncAdaptedQueuePool`` (``create_async_engine``; as shipped: rollback at check-in; like for
  like: asyncpg's reset added by a ``reset`` pool event; fair queue: as shipped, on a first-in
  first-out hand-off queue, ``peerbench.sa_fair``, the guarantee poolkit's drop-in adds).
* psycopg, asyncio and threads: ``poolkit.backends.psycopg.create_async_pool`` / ``create_pool``
  (``pool.connection()``: commit, then the full reset) and the same with ``reset=False`` (roll
  back only: psycopg_pool's guarantee), ``psycopg_pool``'s ``AsyncConnectionPool`` /
  ``ConnectionPool`` (``pool.connection()``: commit; as shipped: nothing more; like for like:
  ``reset=`` running poolkit's statements), SQLAlchemy's ``AsyncAdaptedQueuePool`` (also on
  the fair queue) / ``QueuePool`` over psycopg; and poolkit's psycopg_pool drop-ins
  (``poolkit.backends.psycopg.AsyncConnectionPool`` / ``ConnectionPool``), made as psycopg_pool's
  classes with psycopg_pool's defaults (as shipped: its guarantees) and with ``reset_session=True``
  (what it adds: poolkit's full reset, against psycopg_pool like for like). psycopg_pool's classes
  and the drop-ins are used both ways psycopg_pool documents: ``pool.connection()``, and
  ``getconn()``, the query, ``commit()``, ``putconn()``.
* floors: the minimal FIFO pool over connections of the same driver, and one dedicated
  connection per worker; their operation is the user's (``SELECT 1``, and psycopg's COMMIT
  that ends its transaction), with no reset.

SQLAlchemy's pools are used as its documentation shows for a plain string: ``engine.connect()``
and ``conn.exec_driver_sql("SELECT 1")`` (no statement compiled; its ``Connection`` begins a
transaction, and the pool rolls it back at check-in). So what SQLAlchemy costs is measured with
the pool, and so is what it does when the server drops a connection (it invalidates it).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

from floors import AsyncFloor, ThreadFloor

from .core import AS_SHIPPED, LIKE_FOR_LIKE, Column, Contender, Env, Workload
from .drive import (
    AsyncBuild,
    AsyncOne,
    Record,
    Shape,
    SyncBuild,
    SyncOne,
    async_contention,
    gather_all,
    thread_contention,
)

SELECT = "SELECT 1"
#: the checkout timeout of SQLAlchemy's engines (theirs and the drop-ins'): one no run reaches
#: natively (waits are milliseconds), which a run under valgrind, some 50 times slower, can
#: reach at SQLAlchemy's default of 30 s, failing the run
NO_TIMEOUT = 600.0
pc = time.perf_counter

CONTENTION_COLUMNS = (
    Column("ops_per_s", "ops/s"),
    Column("wait_p50_us", "wait p50 µs", 1),
    Column("wait_p99_us", "wait p99 µs", 1),
    Column("wait_max_us", "wait max µs"),
    Column("ops_worker_min", "ops/worker min"),
    Column("ops_worker_max", "ops/worker max"),
    Column("server_conns_peak", "server conns"),
    Column("cpu_us_per_op", "client CPU µs/op", 1),
)


def sqlalchemy_url(dsn: str, dialect: str) -> str:
    """``dsn`` (``postgresql://...``) as SQLAlchemy's URL for ``dialect`` (``asyncpg``...)."""
    return f"postgresql+{dialect}://" + dsn.split("://", 1)[1]


# ---------------------------------------------------------------------- asyncpg, asyncio


@asynccontextmanager
async def poolkit_asyncpg(env: Env, record: Record, shape: Shape) -> AsyncIterator[AsyncOne]:
    from poolkit.backends import asyncpg as pk

    pool = await pk.create_pool(
        env.dsn, min_size=shape.size, max_size=shape.size, application_name=env.app
    )

    async def one(i: int) -> None:
        t = pc()
        async with pool.connection() as conn:
            record(pc() - t)
            await conn.fetchval(SELECT)

    try:
        yield one
    finally:
        await pool.close()


@asynccontextmanager
async def poolkit_asyncpg_acquire(
    env: Env, record: Record, shape: Shape
) -> AsyncIterator[AsyncOne]:
    """The drop-in called the asyncpg way (``async with pool.acquire() as conn``): the same
    reset at release as asyncpg's pool, in the caller."""
    from poolkit.backends import asyncpg as pk

    pool = await pk.create_pool(
        env.dsn, min_size=shape.size, max_size=shape.size, application_name=env.app
    )

    async def one(i: int) -> None:
        t = pc()
        async with pool.acquire() as conn:
            record(pc() - t)
            await conn.fetchval(SELECT)

    try:
        yield one
    finally:
        await pool.close()


@asynccontextmanager
async def asyncpg_pool(env: Env, record: Record, shape: Shape) -> AsyncIterator[AsyncOne]:
    import asyncpg

    pool = await asyncpg.create_pool(
        env.dsn,
        min_size=shape.size,
        max_size=shape.size,
        server_settings={"application_name": env.app},
    )

    async def one(i: int) -> None:
        t = pc()
        async with pool.acquire() as conn:
            record(pc() - t)
            await conn.fetchval(SELECT)

    try:
        yield one
    finally:
        await pool.close()


def sqlalchemy_async(dialect: str, like_for_like: bool, *, dropin: bool = False,
                     fair: bool = False) -> AsyncBuild:  # fmt: skip
    """SQLAlchemy's ``AsyncAdaptedQueuePool`` over ``dialect`` (``asyncpg`` or ``psycopg``);
    ``like_for_like``: a ``reset`` pool event runs the reset poolkit's backend runs; ``dropin``:
    poolkit's ``poolkit.backends.sqlalchemy.AsyncAdaptedQueuePool`` in its place
    (``poolclass=``), used the same way; ``fair``: SQLAlchemy's pool on a first-in first-out
    hand-off queue (``peerbench.sa_fair``), the guarantee the drop-in adds."""

    @asynccontextmanager
    async def build(env: Env, record: Record, shape: Shape) -> AsyncIterator[AsyncOne]:
        from sqlalchemy import event
        from sqlalchemy.ext.asyncio import create_async_engine

        pool: dict[str, Any] = {}
        if dropin:
            from poolkit.backends.sqlalchemy import AsyncAdaptedQueuePool

            pool["poolclass"] = AsyncAdaptedQueuePool
        elif fair:
            from peerbench.sa_fair import FairAsyncAdaptedQueuePool

            pool["poolclass"] = FairAsyncAdaptedQueuePool
        app = {"application_name": env.app}
        engine = create_async_engine(
            sqlalchemy_url(env.dsn, dialect),
            pool_size=shape.size,
            max_overflow=0,
            pool_timeout=NO_TIMEOUT,
            connect_args={"server_settings": app} if dialect == "asyncpg" else app,
            **pool,
        )
        if like_for_like:
            reset = _asyncpg_reset if dialect == "asyncpg" else _psycopg_async_reset

            @event.listens_for(engine.sync_engine, "reset")
            def on_reset(dbapi_connection: Any, record: Any, state: Any) -> None:
                dbapi_connection.rollback()  # (the event comes before SQLAlchemy's own rollback)
                dbapi_connection.run_async(reset)

        async def one(i: int) -> None:
            t = pc()
            async with engine.connect() as conn:
                record(pc() - t)
                result = await conn.exec_driver_sql(SELECT)
                result.scalar()

        try:
            yield one
        finally:
            await engine.dispose()

    return build


async def _asyncpg_reset(conn: Any) -> None:
    await conn.reset()  # (what asyncpg's pool runs at release, and poolkit's backend)


@asynccontextmanager
async def asyncpg_floor(env: Env, record: Record, shape: Shape) -> AsyncIterator[AsyncOne]:
    import asyncpg

    def connect() -> Any:
        return asyncpg.connect(env.dsn, server_settings={"application_name": env.app})

    conns = await gather_all(connect, shape.size)
    floor = AsyncFloor(conns)

    async def one(i: int) -> None:
        t = pc()
        conn = await floor.acquire()
        record(pc() - t)
        try:
            await conn.fetchval(SELECT)
        finally:
            floor.release(conn)

    try:
        yield one
    finally:
        await asyncio.gather(*(c.close() for c in conns))


@asynccontextmanager
async def asyncpg_dedicated(env: Env, record: Record, shape: Shape) -> AsyncIterator[AsyncOne]:
    import asyncpg

    def connect() -> Any:
        return asyncpg.connect(env.dsn, server_settings={"application_name": env.app})

    conns = await gather_all(connect, shape.workers)

    async def one(i: int) -> None:
        record(0.0)
        await conns[i].fetchval(SELECT)

    try:
        yield one
    finally:
        await asyncio.gather(*(c.close() for c in conns))


# ---------------------------------------------------------------------- psycopg, asyncio


def poolkit_psycopg_async(reset: bool) -> AsyncBuild:
    @asynccontextmanager
    async def build(env: Env, record: Record, shape: Shape) -> AsyncIterator[AsyncOne]:
        from poolkit.backends import psycopg as pk

        pool = await pk.create_async_pool(
            env.dsn,
            min_size=shape.size,
            max_size=shape.size,
            reset=reset,
            application_name=env.app,
        )

        async def one(i: int) -> None:
            t = pc()
            async with pool.connection() as conn:
                record(pc() - t)
                cur = await conn.execute(SELECT)
                await cur.fetchone()

        try:
            yield one
        finally:
            await pool.close()

    return build


async def _psycopg_async_reset(conn: Any) -> None:
    """poolkit's reset statements, outside a transaction (psycopg_pool's ``reset=``: the
    connection comes idle)."""
    from poolkit.backends.psycopg import DEFAULT_RESET_QUERY

    await conn.set_autocommit(True)
    try:
        await conn.execute(DEFAULT_RESET_QUERY)
    finally:
        await conn.set_autocommit(False)


def _psycopg_pool_class(dropin: bool, asynchronous: bool) -> Any:
    """psycopg_pool's class, or poolkit's drop-in of the same name (the one line a user
    changes)."""
    import importlib

    name = "AsyncConnectionPool" if asynchronous else "ConnectionPool"
    module = "poolkit.backends.psycopg" if dropin else "psycopg_pool"
    return getattr(importlib.import_module(module), name)


def _psycopg_pool_kwargs(dropin: bool, reset_session: bool) -> dict[str, Any]:
    assert dropin or not reset_session, "reset_session is the drop-in's keyword"
    return {"reset_session": True} if reset_session else {}


def psycopg_pool_async(
    like_for_like: bool, *, dropin: bool = False, getconn: bool = False, reset_session: bool = False
) -> AsyncBuild:
    """psycopg_pool's ``AsyncConnectionPool`` (``dropin``: poolkit's, made the same way), used
    with ``async with pool.connection()`` or (``getconn``) ``getconn()``, the query, ``commit()``
    and ``putconn()``; ``reset_session``: the drop-in's full reset on."""

    @asynccontextmanager
    async def build(env: Env, record: Record, shape: Shape) -> AsyncIterator[AsyncOne]:
        pool: Any = _psycopg_pool_class(dropin, True)(
            env.dsn,
            min_size=shape.size,
            max_size=shape.size,
            kwargs={"application_name": env.app},
            reset=_psycopg_async_reset if like_for_like else None,
            open=False,
            **_psycopg_pool_kwargs(dropin, reset_session),
        )
        await pool.open(wait=True)

        async def one(i: int) -> None:
            t = pc()
            async with pool.connection() as conn:
                record(pc() - t)
                cur = await conn.execute(SELECT)
                await cur.fetchone()

        async def one_getconn(i: int) -> None:
            t = pc()
            conn = await pool.getconn()
            record(pc() - t)
            try:
                cur = await conn.execute(SELECT)
                await cur.fetchone()
                await conn.commit()
            finally:
                await pool.putconn(conn)

        try:
            yield one_getconn if getconn else one
        finally:
            await pool.close()

    return build


@asynccontextmanager
async def psycopg_async_floor(env: Env, record: Record, shape: Shape) -> AsyncIterator[AsyncOne]:
    conns = await _psycopg_async_conns(env, shape.size)
    floor = AsyncFloor(conns)

    async def one(i: int) -> None:
        t = pc()
        conn = await floor.acquire()
        record(pc() - t)
        try:
            cur = await conn.execute(SELECT)
            await cur.fetchone()
            await conn.commit()
        finally:
            floor.release(conn)

    try:
        yield one
    finally:
        await asyncio.gather(*(c.close() for c in conns))


@asynccontextmanager
async def psycopg_async_dedicated(
    env: Env, record: Record, shape: Shape
) -> AsyncIterator[AsyncOne]:
    conns = await _psycopg_async_conns(env, shape.workers)

    async def one(i: int) -> None:
        record(0.0)
        conn = conns[i]
        cur = await conn.execute(SELECT)
        await cur.fetchone()
        await conn.commit()

    try:
        yield one
    finally:
        await asyncio.gather(*(c.close() for c in conns))


async def _psycopg_async_conns(env: Env, count: int) -> list[Any]:
    import psycopg

    def connect() -> Any:
        return psycopg.AsyncConnection.connect(env.dsn, application_name=env.app)

    return await gather_all(connect, count)


# ---------------------------------------------------------------------- psycopg, threads


def poolkit_psycopg(reset: bool) -> SyncBuild:
    @contextmanager
    def build(env: Env, record: Record, shape: Shape) -> Iterator[SyncOne]:
        from poolkit.backends import psycopg as pk

        pool = pk.create_pool(
            env.dsn,
            min_size=shape.size,
            max_size=shape.size,
            reset=reset,
            application_name=env.app,
        )

        def one(i: int) -> None:
            t = pc()
            with pool.connection() as conn:
                record(pc() - t)
                conn.execute(SELECT).fetchone()

        try:
            yield one
        finally:
            pool.close()

    return build


def _psycopg_reset(conn: Any) -> None:
    from poolkit.backends.psycopg import DEFAULT_RESET_QUERY

    conn.autocommit = True
    try:
        conn.execute(DEFAULT_RESET_QUERY)
    finally:
        conn.autocommit = False


def psycopg_pool_threads(
    like_for_like: bool, *, dropin: bool = False, getconn: bool = False, reset_session: bool = False
) -> SyncBuild:
    """:func:`psycopg_pool_async` for psycopg_pool's ``ConnectionPool`` (or the drop-in)."""

    @contextmanager
    def build(env: Env, record: Record, shape: Shape) -> Iterator[SyncOne]:
        pool: Any = _psycopg_pool_class(dropin, False)(
            env.dsn,
            min_size=shape.size,
            max_size=shape.size,
            kwargs={"application_name": env.app},
            reset=_psycopg_reset if like_for_like else None,
            open=False,
            **_psycopg_pool_kwargs(dropin, reset_session),
        )
        pool.open(wait=True)

        def one(i: int) -> None:
            t = pc()
            with pool.connection() as conn:
                record(pc() - t)
                conn.execute(SELECT).fetchone()

        def one_getconn(i: int) -> None:
            t = pc()
            conn = pool.getconn()
            record(pc() - t)
            try:
                conn.execute(SELECT).fetchone()
                conn.commit()
            finally:
                pool.putconn(conn)

        try:
            yield one_getconn if getconn else one
        finally:
            pool.close()

    return build


def sqlalchemy_threads(like_for_like: bool, *, dropin: bool = False) -> SyncBuild:
    """SQLAlchemy's ``QueuePool`` over psycopg (``create_engine``); ``dropin``: poolkit's
    ``poolkit.backends.sqlalchemy.QueuePool`` in its place (``poolclass=``), used the same way."""

    @contextmanager
    def build(env: Env, record: Record, shape: Shape) -> Iterator[SyncOne]:
        from sqlalchemy import create_engine, event

        pool: dict[str, Any] = {}
        if dropin:
            from poolkit.backends.sqlalchemy import QueuePool

            pool["poolclass"] = QueuePool
        engine = create_engine(
            sqlalchemy_url(env.dsn, "psycopg"),
            pool_size=shape.size,
            max_overflow=0,
            pool_timeout=NO_TIMEOUT,
            connect_args={"application_name": env.app},
            **pool,
        )
        if like_for_like:

            @event.listens_for(engine, "reset")
            def on_reset(dbapi_connection: Any, record: Any, state: Any) -> None:
                dbapi_connection.rollback()  # (the event comes before SQLAlchemy's own rollback)
                _psycopg_reset(dbapi_connection)

        def one(i: int) -> None:
            t = pc()
            with engine.connect() as conn:
                record(pc() - t)
                conn.exec_driver_sql(SELECT).scalar()

        try:
            yield one
        finally:
            engine.dispose()

    return build


@contextmanager
def psycopg_floor(env: Env, record: Record, shape: Shape) -> Iterator[SyncOne]:
    conns = _psycopg_conns(env, shape.size)
    floor = ThreadFloor(conns)

    def one(i: int) -> None:
        t = pc()
        conn = floor.acquire()
        record(pc() - t)
        try:
            conn.execute(SELECT).fetchone()
            conn.commit()
        finally:
            floor.release(conn)

    try:
        yield one
    finally:
        for conn in conns:
            conn.close()


@contextmanager
def psycopg_dedicated(env: Env, record: Record, shape: Shape) -> Iterator[SyncOne]:
    conns = _psycopg_conns(env, shape.workers)

    def one(i: int) -> None:
        record(0.0)
        conn = conns[i]
        conn.execute(SELECT).fetchone()
        conn.commit()

    try:
        yield one
    finally:
        for conn in conns:
            conn.close()


def _psycopg_conns(env: Env, count: int) -> list[Any]:
    import psycopg

    return [psycopg.connect(env.dsn, application_name=env.app) for _ in range(count)]


# ---------------------------------------------------------------------- the workloads

FLOOR = "floor: minimal FIFO pool"
DEDICATED = "floor: dedicated connections"


#: poolkit's psycopg_pool drop-ins, made and used as psycopg_pool's classes are
DROPIN_ASYNC = "poolkit.backends.psycopg.AsyncConnectionPool"
DROPIN = "poolkit.backends.psycopg.ConnectionPool"
#: the other way psycopg_pool's documentation shows: ``getconn()``, the query, ``commit()``,
#: ``putconn()``
GETCONN = "getconn/putconn"
#: poolkit's QueuePool for SQLAlchemy's engines, in the place of SQLAlchemy's
SA_DROPIN = "poolkit.backends.sqlalchemy.QueuePool"
#: its asyncio twin, for ``create_async_engine``
SA_DROPIN_ASYNC = "poolkit.backends.sqlalchemy.AsyncAdaptedQueuePool"
#: the drop-in with what it adds to psycopg_pool's guarantees (poolkit's full reset)
FULL_RESET = "full reset (reset_session=True)"
#: SQLAlchemy's async pool with the guarantee its drop-in adds: a first-in first-out hand-off
FAIR_QUEUE = "fair queue"


def _async(name: str, role: Any, variant: str, build: AsyncBuild, shape: Shape,
           needs: tuple[str, ...], note: str = "",
           versus: str | None = None) -> Contender:  # fmt: skip
    return Contender(name, role, variant, async_contention(build, shape), needs, note=note,
                     versus=versus)  # fmt: skip


def _threads(name: str, role: Any, variant: str, build: SyncBuild, shape: Shape,
             needs: tuple[str, ...], note: str = "",
             versus: str | None = None) -> Contender:  # fmt: skip
    return Contender(name, role, variant, thread_contention(build, shape), needs, note=note,
                     versus=versus)  # fmt: skip


def asyncpg_workload(key: str = "H1", workers: int = 50, size: int = 10) -> Workload:
    shape = Shape(workers, size)
    ap, sa = ("asyncpg",), ("asyncpg", "sqlalchemy", "greenlet")
    return Workload(
        key=key,
        group="headline",
        title=f"{workers} tasks, pool {size}, SELECT 1, asyncpg",
        metric="ops_per_s",
        higher=True,
        floor=FLOOR,
        reference="asyncpg.create_pool (as shipped)",
        server="pg",
        headline=True,
        columns=CONTENTION_COLUMNS,
        contenders=(
            _async("poolkit.backends.asyncpg", "poolkit", AS_SHIPPED, poolkit_asyncpg, shape, ap,
                   "full reset at check-in (asyncpg's)"),
            _async("poolkit.backends.asyncpg.create_pool acquire()", "poolkit", AS_SHIPPED,
                   poolkit_asyncpg_acquire, shape, ap,
                   "the drop-in called as asyncpg's: async with pool.acquire(); same reset"),
            _async("asyncpg.create_pool", "peer", AS_SHIPPED, asyncpg_pool, shape, ap,
                   "its reset is poolkit's: as shipped is like for like"),
            _async("SQLAlchemy AsyncAdaptedQueuePool", "peer", AS_SHIPPED,
                   sqlalchemy_async("asyncpg", False), shape, sa, "rollback at check-in"),
            _async("SQLAlchemy AsyncAdaptedQueuePool", "peer", LIKE_FOR_LIKE,
                   sqlalchemy_async("asyncpg", True), shape, sa, "+ asyncpg's reset (event)"),
            _async("SQLAlchemy AsyncAdaptedQueuePool", "peer", FAIR_QUEUE,
                   sqlalchemy_async("asyncpg", False, fair=True), shape, sa,
                   "rollback at check-in; + the drop-in's fair hand-off (peerbench.sa_fair)"),
            _async(SA_DROPIN_ASYNC, "poolkit", AS_SHIPPED,
                   sqlalchemy_async("asyncpg", False, dropin=True), shape, sa,
                   "poolclass=; SQLAlchemy's rollback at check-in",
                   versus=f"SQLAlchemy AsyncAdaptedQueuePool ({AS_SHIPPED})"),
            _async(FLOOR, "floor", "", asyncpg_floor, shape, ap, "no reset"),
            _async(DEDICATED, "dedicated", "", asyncpg_dedicated, shape, ap,
                   f"{workers} connections"),
        ),
    )  # fmt: skip


def psycopg_async_workload(key: str = "H2", workers: int = 50, size: int = 10) -> Workload:
    shape = Shape(workers, size)
    pg, pp = ("psycopg",), ("psycopg", "psycopg_pool")
    sa = ("psycopg", "sqlalchemy", "greenlet")
    return Workload(
        key=key,
        group="headline",
        title=f"{workers} tasks, pool {size}, SELECT 1, psycopg async",
        metric="ops_per_s",
        higher=True,
        floor=FLOOR,
        reference="psycopg_pool.AsyncConnectionPool (as shipped)",
        server="pg",
        headline=True,
        columns=CONTENTION_COLUMNS,
        contenders=(
            _async("poolkit.backends.psycopg.create_async_pool", "poolkit", AS_SHIPPED,
                   poolkit_psycopg_async(True), shape, pg, "commit, full reset"),
            _async("poolkit.backends.psycopg.create_async_pool", "poolkit",
                   "rollback only (reset=False)", poolkit_psycopg_async(False), shape, pg,
                   "commit; psycopg_pool's guarantees"),
            _async("psycopg_pool.AsyncConnectionPool", "peer", AS_SHIPPED,
                   psycopg_pool_async(False), shape, pp, "commit; rollback only"),
            _async("psycopg_pool.AsyncConnectionPool", "peer", LIKE_FOR_LIKE,
                   psycopg_pool_async(True), shape, pp, "commit; reset= poolkit's statements"),
            _async(f"psycopg_pool.AsyncConnectionPool {GETCONN}", "peer", AS_SHIPPED,
                   psycopg_pool_async(False, getconn=True), shape, pp, "commit; rollback only"),
            _async(DROPIN_ASYNC, "poolkit", AS_SHIPPED,
                   psycopg_pool_async(False, dropin=True), shape, pp,
                   "the drop-in, psycopg_pool's defaults: commit; rollback only"),
            _async(f"{DROPIN_ASYNC} {GETCONN}", "poolkit", AS_SHIPPED,
                   psycopg_pool_async(False, dropin=True, getconn=True), shape, pp,
                   "the drop-in, psycopg_pool's defaults: commit; rollback only",
                   versus=f"psycopg_pool.AsyncConnectionPool {GETCONN} ({AS_SHIPPED})"),
            _async(DROPIN_ASYNC, "poolkit", FULL_RESET,
                   psycopg_pool_async(False, dropin=True, reset_session=True), shape, pp,
                   "commit; + poolkit's full reset",
                   versus=f"psycopg_pool.AsyncConnectionPool ({LIKE_FOR_LIKE})"),
            _async("SQLAlchemy AsyncAdaptedQueuePool", "peer", AS_SHIPPED,
                   sqlalchemy_async("psycopg", False), shape, sa, "rollback at check-in"),
            _async("SQLAlchemy AsyncAdaptedQueuePool", "peer", LIKE_FOR_LIKE,
                   sqlalchemy_async("psycopg", True), shape, sa,
                   "rollback + poolkit's statements (event)"),
            _async("SQLAlchemy AsyncAdaptedQueuePool", "peer", FAIR_QUEUE,
                   sqlalchemy_async("psycopg", False, fair=True), shape, sa,
                   "rollback at check-in; + the drop-in's fair hand-off (peerbench.sa_fair)"),
            _async(SA_DROPIN_ASYNC, "poolkit", AS_SHIPPED,
                   sqlalchemy_async("psycopg", False, dropin=True), shape, sa,
                   "poolclass=; SQLAlchemy's rollback at check-in",
                   versus=f"SQLAlchemy AsyncAdaptedQueuePool ({AS_SHIPPED})"),
            _async(FLOOR, "floor", "", psycopg_async_floor, shape, pg, "commit, no reset"),
            _async(DEDICATED, "dedicated", "", psycopg_async_dedicated, shape, pg,
                   f"{workers} connections"),
        ),
    )  # fmt: skip


def psycopg_threads_workload(key: str = "H3", workers: int = 16, size: int = 8) -> Workload:
    shape = Shape(workers, size)
    pg, pp, sa = ("psycopg",), ("psycopg", "psycopg_pool"), ("psycopg", "sqlalchemy")
    return Workload(
        key=key,
        group="headline",
        title=f"{workers} threads, pool {size}, SELECT 1, psycopg",
        metric="ops_per_s",
        higher=True,
        floor=FLOOR,
        reference="psycopg_pool.ConnectionPool (as shipped)",
        server="pg",
        headline=True,
        columns=CONTENTION_COLUMNS,
        contenders=(
            _threads("poolkit.backends.psycopg.create_pool", "poolkit", AS_SHIPPED,
                     poolkit_psycopg(True), shape, pg, "commit, full reset"),
            _threads("poolkit.backends.psycopg.create_pool", "poolkit",
                     "rollback only (reset=False)", poolkit_psycopg(False), shape, pg,
                     "commit; psycopg_pool's guarantees"),
            _threads("psycopg_pool.ConnectionPool", "peer", AS_SHIPPED,
                     psycopg_pool_threads(False), shape, pp, "commit; rollback only"),
            _threads("psycopg_pool.ConnectionPool", "peer", LIKE_FOR_LIKE,
                     psycopg_pool_threads(True), shape, pp, "commit; reset= poolkit's statements"),
            _threads(f"psycopg_pool.ConnectionPool {GETCONN}", "peer", AS_SHIPPED,
                     psycopg_pool_threads(False, getconn=True), shape, pp, "commit; rollback only"),
            _threads(DROPIN, "poolkit", AS_SHIPPED, psycopg_pool_threads(False, dropin=True),
                     shape, pp, "the drop-in, psycopg_pool's defaults: commit; rollback only"),
            _threads(f"{DROPIN} {GETCONN}", "poolkit", AS_SHIPPED,
                     psycopg_pool_threads(False, dropin=True, getconn=True), shape, pp,
                     "the drop-in, psycopg_pool's defaults: commit; rollback only",
                     versus=f"psycopg_pool.ConnectionPool {GETCONN} ({AS_SHIPPED})"),
            _threads(DROPIN, "poolkit", FULL_RESET,
                     psycopg_pool_threads(False, dropin=True, reset_session=True), shape, pp,
                     "commit; + poolkit's full reset",
                     versus=f"psycopg_pool.ConnectionPool ({LIKE_FOR_LIKE})"),
            _threads("SQLAlchemy QueuePool", "peer", AS_SHIPPED, sqlalchemy_threads(False),
                     shape, sa, "rollback at check-in"),
            _threads("SQLAlchemy QueuePool", "peer", LIKE_FOR_LIKE, sqlalchemy_threads(True),
                     shape, sa, "rollback + poolkit's statements (event)"),
            _threads(SA_DROPIN, "poolkit", AS_SHIPPED, sqlalchemy_threads(False, dropin=True),
                     shape, sa, "poolclass=; SQLAlchemy's rollback at check-in",
                     versus=f"SQLAlchemy QueuePool ({AS_SHIPPED})"),
            _threads(SA_DROPIN, "poolkit", LIKE_FOR_LIKE, sqlalchemy_threads(True, dropin=True),
                     shape, sa, "poolclass=; rollback + poolkit's statements (event)",
                     versus=f"SQLAlchemy QueuePool ({LIKE_FOR_LIKE})"),
            _threads(FLOOR, "floor", "", psycopg_floor, shape, pg, "commit, no reset"),
            _threads(DEDICATED, "dedicated", "", psycopg_dedicated, shape, pg,
                     f"{workers} connections"),
        ),
    )  # fmt: skip
