"""W7, the connection storm: ``w7_tasks`` (1,000) tasks arrive at once at an empty pool (at most
10 connections) whose connect takes ``w7_connect`` (50 ms) more than the server's own: each task
makes one operation. How long until every task had its connection, and how many connects ran at
once (the most; a pool that opens more than it needs, or all at once, shows here), how many were
made, and the server's count.

The connect is slowed the way each pool lets a user supply its connect: ``connect=`` (asyncpg's
pool and poolkit's asyncpg backend), ``connection_class=`` (psycopg_pool and poolkit's psycopg
backend; redis-py's pools and poolkit's drop-in), ``async_creator=`` (SQLAlchemy).
"""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any, Literal

from floors import NAN, pctl

from .core import AS_SHIPPED, Column, Contender, Env, Figures, Workload
from .drive import AsyncOne, Record, gather_all
from .pg_rows import SELECT, sqlalchemy_url

pc = time.perf_counter
POOL_MAX = 10
COLUMNS = (
    Column("all_served_s", "all served s", 3),
    Column("elapsed_s", "all done s", 3),
    Column("wait_p50_ms", "wait p50 ms", 1),
    Column("connects_at_once", "most connects at once"),
    Column("connects", "connects"),
    Column("server_conns_peak", "server conns"),
)


@dataclasses.dataclass
class Connects:
    """The connects of one run: in flight now, the most at once, how many in all."""

    delay: float
    now: int = 0
    most: int = 0
    made: int = 0

    async def slowly(self, connect: Callable[[], Any]) -> Any:
        """``await connect()`` after ``delay`` seconds, counted."""
        self.now += 1
        self.most = max(self.most, self.now)
        try:
            await asyncio.sleep(self.delay)
            result = await connect()
            self.made += 1
            return result
        finally:
            self.now -= 1


StormBuild = Callable[[Env, Record, Connects], Any]  # -> an async context manager of AsyncOne


def _slow_asyncpg(connects: Connects) -> Callable[..., Any]:
    import asyncpg

    async def connect(*args: Any, **kwargs: Any) -> Any:
        return await connects.slowly(lambda: asyncpg.connect(*args, **kwargs))

    return connect


@asynccontextmanager
async def poolkit_asyncpg(env: Env, record: Record, connects: Connects) -> AsyncIterator[AsyncOne]:
    from poolkit.backends import asyncpg as pk

    pool = await pk.create_pool(
        env.dsn,
        min_size=0,
        max_size=POOL_MAX,
        connect=_slow_asyncpg(connects),
        application_name=env.app,
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
async def asyncpg_pool(env: Env, record: Record, connects: Connects) -> AsyncIterator[AsyncOne]:
    import asyncpg

    pool = await asyncpg.create_pool(
        env.dsn,
        min_size=0,
        max_size=POOL_MAX,
        connect=_slow_asyncpg(connects),
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


@asynccontextmanager
async def sqlalchemy_asyncpg(
    env: Env, record: Record, connects: Connects
) -> AsyncIterator[AsyncOne]:
    import asyncpg
    from sqlalchemy.ext.asyncio import create_async_engine

    async def creator() -> Any:
        return await connects.slowly(
            lambda: asyncpg.connect(env.dsn, server_settings={"application_name": env.app})
        )

    engine = create_async_engine(
        sqlalchemy_url(env.dsn, "asyncpg"),
        pool_size=POOL_MAX,
        max_overflow=0,
        async_creator=creator,
    )

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


def _slow_psycopg_class(connects: Connects) -> Any:
    import psycopg

    class SlowConnection(psycopg.AsyncConnection[Any]):
        @classmethod
        async def connect(cls, *args: Any, **kwargs: Any) -> Any:
            parent = super().connect
            return await connects.slowly(lambda: parent(*args, **kwargs))

    return SlowConnection


@asynccontextmanager
async def poolkit_psycopg(env: Env, record: Record, connects: Connects) -> AsyncIterator[AsyncOne]:
    from poolkit.backends import psycopg as pk

    pool = await pk.create_async_pool(
        env.dsn,
        min_size=0,
        max_size=POOL_MAX,
        connection_class=_slow_psycopg_class(connects),
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


@asynccontextmanager
async def psycopg_pool(env: Env, record: Record, connects: Connects) -> AsyncIterator[AsyncOne]:
    from psycopg_pool import AsyncConnectionPool

    pool: Any = AsyncConnectionPool(
        env.dsn,
        min_size=0,
        max_size=POOL_MAX,
        connection_class=_slow_psycopg_class(connects),
        kwargs={"application_name": env.app},
        open=False,
    )
    await pool.open()

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


def _slow_redis_class(connects: Connects) -> Any:
    import redis.asyncio

    class SlowConnection(redis.asyncio.Connection):
        async def connect(self) -> None:
            if self.is_connected:
                return
            parent = super().connect
            await connects.slowly(parent)

    return SlowConnection


def redis_blocking(which: str) -> StormBuild:
    @asynccontextmanager
    async def build(env: Env, record: Record, connects: Connects) -> AsyncIterator[AsyncOne]:
        import redis.asyncio

        from .drive import time_checkouts

        blocking: Any = redis.asyncio.BlockingConnectionPool
        if which == "poolkit":
            from poolkit.backends import redis as pk

            blocking = pk.AsyncBlockingConnectionPool
        pool: Any = blocking.from_url(
            env.redis_url,
            max_connections=POOL_MAX,
            client_name=env.app,
            connection_class=_slow_redis_class(connects),
        )
        time_checkouts(pool, record, coroutine=True)
        client = redis.asyncio.Redis(connection_pool=pool)
        key = f"{env.app}:storm"

        async def one(i: int) -> None:
            await client.get(key)

        try:
            yield one
        finally:
            await client.aclose()
            await pool.aclose()

    return build


def storm_run(build: StormBuild) -> Callable[[Env], Figures]:
    async def measure(env: Env) -> Figures:
        waits: list[float] = []
        connects = Connects(env.sizes.w7_connect)
        tasks = env.sizes.w7_tasks
        async with build(env, waits.append, connects) as one:
            gc.collect()
            t0 = pc()
            await gather_all(lambda: one(0), tasks)
            elapsed = pc() - t0
        return storm_figures(waits, elapsed, connects.most, connects.made)

    return lambda env: asyncio.run(measure(env))


def storm_figures(waits: list[float], elapsed: float, most: int, made: int) -> Figures:
    """A storm's figures (asyncio or threads): when the last waiter was served, its waits, the
    most connects at once and how many were made."""
    waits.sort()
    return {
        "all_served_s": waits[-1] if waits else NAN,
        "elapsed_s": elapsed,
        "wait_p50_ms": pctl(waits, 0.5) * 1e3,
        "wait_p99_ms": pctl(waits, 0.99) * 1e3,
        "connects_at_once": float(most),
        "connects": float(made),
    }


def storm_workload(
    key: str,
    who: str,
    where: str,
    reference: str,
    server: Literal["pg", "redis"],
    note: str,
    contenders: tuple[Contender, ...],
) -> Workload:
    """A storm workload: ``who`` (``"1,000 tasks"``) arrive at an empty pool of ``where``."""
    return Workload(
        key=key,
        group="W7",
        title=f"storm: {who} at an empty pool (max {POOL_MAX}), connect +50 ms, {where}",
        metric="all_served_s",
        higher=False,
        reference=f"{reference} ({AS_SHIPPED})",
        server=server,
        sample_every=0.01,
        columns=COLUMNS,
        note=note,
        contenders=contenders,
    )


def _c(
    name: str, role: Any, build: StormBuild, needs: tuple[str, ...], note: str = ""
) -> Contender:
    return Contender(name, role, AS_SHIPPED, storm_run(build), needs, note=note)


def w7_pg(tasks: int) -> Workload:
    ap, pg = ("asyncpg",), ("psycopg", "psycopg_pool")
    return storm_workload(
        "W7-pg",
        f"{tasks:,} tasks",
        "PostgreSQL (asyncio)",
        "asyncpg.create_pool",
        "pg",
        "Each task: one `SELECT 1`. poolkit's builders make one connection before they "
        "return (a wrong DSN fails there): that one is made before the storm, not counted.",
        (
            _c("poolkit.backends.asyncpg", "poolkit", poolkit_asyncpg, ap),
            _c("asyncpg.create_pool", "peer", asyncpg_pool, ap),
            _c("SQLAlchemy AsyncAdaptedQueuePool (asyncpg)", "peer", sqlalchemy_asyncpg,
               ("asyncpg", "sqlalchemy", "greenlet")),
            _c("poolkit.backends.psycopg.create_async_pool", "poolkit", poolkit_psycopg, pg),
            _c("psycopg_pool.AsyncConnectionPool", "peer", psycopg_pool, pg),
        ),
    )  # fmt: skip


def w7_redis(tasks: int) -> Workload:
    rd = ("redis",)
    return storm_workload(
        "W7-redis",
        f"{tasks:,} tasks",
        "Redis (asyncio)",
        "redis.asyncio.BlockingConnectionPool",
        "redis",
        "Each task: one `GET` through one shared `redis.asyncio.Redis`.",
        (
            _c("poolkit.backends.redis.AsyncBlockingConnectionPool", "poolkit",
               redis_blocking("poolkit"), rd),
            _c("redis.asyncio.BlockingConnectionPool", "peer", redis_blocking("redis-py"), rd),
        ),
    )  # fmt: skip
