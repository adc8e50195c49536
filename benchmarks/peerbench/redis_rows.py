"""The Redis workloads (``GET`` under contention, threads and asyncio) and every pool on them.

* poolkit's drop-in ``BlockingConnectionPool`` (``AsyncBlockingConnectionPool``) under one shared
  ``redis.Redis`` client, against redis-py's own ``BlockingConnectionPool``, used the same way:
  the client takes a connection from its pool for each command. Their checkout happens inside
  the command, so its wait is timed by wrapping the pool's ``get_connection`` (the same wrapper
  on both).
* poolkit's own pool of clients (``poolkit.backends.redis.create_pool``: ``with
  pool.connection() as r``), its lease contract on (a session changed by the lease is reset).
* floors: the minimal FIFO pool over single-connection clients
  (``redis.Redis(single_connection_client=True)``), and one such client per worker.

redis-py's pool has no setting that gives poolkit's guarantees (first-come first-served
hand-off), so there is no like-for-like row.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

from floors import AsyncFloor, ThreadFloor

from .core import AS_SHIPPED, Contender, Env, Workload
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
    time_checkouts,
)
from .pg_rows import CONTENTION_COLUMNS, DEDICATED, FLOOR

pc = time.perf_counter
KEY_TTL = 600  # seconds the key a run reads is kept (nothing is left behind for long)


def _key(env: Env) -> str:
    return f"{env.app}:key"


def _put_key(env: Env) -> None:
    import redis

    with redis.Redis.from_url(env.redis_url) as client:
        client.set(_key(env), b"v" * 16, ex=KEY_TTL)


# ---------------------------------------------------------------------- threads


def shared_client(which: str) -> SyncBuild:
    """One ``redis.Redis`` on ``which`` pool: ``"poolkit"`` (the drop-in) or ``"redis-py"``."""

    @contextmanager
    def build(env: Env, record: Record, shape: Shape) -> Iterator[SyncOne]:
        import redis

        blocking: Any = redis.BlockingConnectionPool
        if which == "poolkit":
            from poolkit.backends import redis as pk

            blocking = pk.BlockingConnectionPool
        _put_key(env)
        pool: Any = blocking.from_url(
            env.redis_url, max_connections=shape.size, client_name=env.app
        )
        time_checkouts(pool, record)
        client = redis.Redis(connection_pool=pool)
        key = _key(env)

        def one(i: int) -> None:
            client.get(key)

        try:
            yield one
        finally:
            client.close()
            pool.close()

    return build


@contextmanager
def poolkit_clients(env: Env, record: Record, shape: Shape) -> Iterator[SyncOne]:
    from poolkit.backends import redis as pk

    _put_key(env)
    options = dataclasses.replace(pk.DEFAULT_OPTIONS, max_size=shape.size)
    pool = pk.create_pool(env.redis_url, options=options, client_name=env.app)
    key = _key(env)

    def one(i: int) -> None:
        t = pc()
        with pool.connection() as client:
            record(pc() - t)
            client.get(key)

    try:
        yield one
    finally:
        pool.close()


def _clients(env: Env, count: int) -> list[Any]:
    import redis

    return [
        redis.Redis.from_url(env.redis_url, client_name=env.app, single_connection_client=True)
        for _ in range(count)
    ]


@contextmanager
def redis_floor(env: Env, record: Record, shape: Shape) -> Iterator[SyncOne]:
    _put_key(env)
    clients = _clients(env, shape.size)
    floor = ThreadFloor(clients)
    key = _key(env)

    def one(i: int) -> None:
        t = pc()
        client = floor.acquire()
        record(pc() - t)
        try:
            client.get(key)
        finally:
            floor.release(client)

    try:
        yield one
    finally:
        for client in clients:
            client.close()


@contextmanager
def redis_dedicated(env: Env, record: Record, shape: Shape) -> Iterator[SyncOne]:
    _put_key(env)
    clients = _clients(env, shape.workers)
    key = _key(env)

    def one(i: int) -> None:
        record(0.0)
        clients[i].get(key)

    try:
        yield one
    finally:
        for client in clients:
            client.close()


# ---------------------------------------------------------------------- asyncio


def shared_async_client(which: str) -> AsyncBuild:
    """One ``redis.asyncio.Redis`` on ``which`` pool (``"poolkit"``: the drop-in)."""

    @asynccontextmanager
    async def build(env: Env, record: Record, shape: Shape) -> AsyncIterator[AsyncOne]:
        import redis.asyncio

        blocking: Any = redis.asyncio.BlockingConnectionPool
        if which == "poolkit":
            from poolkit.backends import redis as pk

            blocking = pk.AsyncBlockingConnectionPool
        _put_key(env)
        pool: Any = blocking.from_url(
            env.redis_url, max_connections=shape.size, client_name=env.app
        )
        time_checkouts(pool, record, coroutine=True)
        client = redis.asyncio.Redis(connection_pool=pool)
        key = _key(env)

        async def one(i: int) -> None:
            await client.get(key)

        try:
            yield one
        finally:
            await client.aclose()
            await pool.aclose()

    return build


@asynccontextmanager
async def poolkit_async_clients(env: Env, record: Record, shape: Shape) -> AsyncIterator[AsyncOne]:
    from poolkit.backends import redis as pk

    _put_key(env)
    options = dataclasses.replace(pk.DEFAULT_OPTIONS, max_size=shape.size)
    pool = await pk.create_async_pool(env.redis_url, options=options, client_name=env.app)
    key = _key(env)

    async def one(i: int) -> None:
        t = pc()
        async with pool.connection() as client:
            record(pc() - t)
            await client.get(key)

    try:
        yield one
    finally:
        await pool.close()


async def _async_clients(env: Env, count: int) -> list[Any]:
    import redis.asyncio

    async def connect() -> Any:
        client = redis.asyncio.Redis.from_url(
            env.redis_url, client_name=env.app, single_connection_client=True
        )
        await client.initialize()
        return client

    return await gather_all(connect, count)


@asynccontextmanager
async def redis_async_floor(env: Env, record: Record, shape: Shape) -> AsyncIterator[AsyncOne]:
    _put_key(env)
    clients = await _async_clients(env, shape.size)
    floor = AsyncFloor(clients)
    key = _key(env)

    async def one(i: int) -> None:
        t = pc()
        client = await floor.acquire()
        record(pc() - t)
        try:
            await client.get(key)
        finally:
            floor.release(client)

    try:
        yield one
    finally:
        await asyncio.gather(*(client.aclose() for client in clients))


@asynccontextmanager
async def redis_async_dedicated(env: Env, record: Record, shape: Shape) -> AsyncIterator[AsyncOne]:
    _put_key(env)
    clients = await _async_clients(env, shape.workers)
    key = _key(env)

    async def one(i: int) -> None:
        record(0.0)
        await clients[i].get(key)

    try:
        yield one
    finally:
        await asyncio.gather(*(client.aclose() for client in clients))


# ---------------------------------------------------------------------- the workloads

DROP_IN = "poolkit.backends.redis.BlockingConnectionPool"
REDIS_PY = "redis.BlockingConnectionPool"


def redis_threads_workload(key: str = "H4", workers: int = 32, size: int = 8) -> Workload:
    shape = Shape(workers, size)
    rd = ("redis",)

    def contender(name: str, role: Any, build: SyncBuild, note: str) -> Contender:
        variant = AS_SHIPPED if role in ("poolkit", "peer") else ""
        return Contender(name, role, variant, thread_contention(build, shape), rd, note=note)

    return Workload(
        key=key,
        group="headline",
        title=f"{workers} threads, {size} connections, GET, redis-py",
        metric="ops_per_s",
        higher=True,
        floor=FLOOR,
        reference=f"{REDIS_PY} ({AS_SHIPPED})",
        server="redis",
        headline=True,
        columns=CONTENTION_COLUMNS,
        contenders=(
            contender(DROP_IN, "poolkit", shared_client("poolkit"), "one shared redis.Redis"),
            contender("poolkit.backends.redis.create_pool", "poolkit", poolkit_clients,
                      "a client per lease, lease contract on"),
            contender(REDIS_PY, "peer", shared_client("redis-py"), "one shared redis.Redis"),
            contender(FLOOR, "floor", redis_floor, "single-connection clients"),
            contender(DEDICATED, "dedicated", redis_dedicated, f"{workers} clients"),
        ),
    )  # fmt: skip


def redis_async_workload(key: str = "H5", workers: int = 32, size: int = 8) -> Workload:
    shape = Shape(workers, size)
    rd = ("redis",)

    def contender(name: str, role: Any, build: AsyncBuild, note: str) -> Contender:
        variant = AS_SHIPPED if role in ("poolkit", "peer") else ""
        return Contender(name, role, variant, async_contention(build, shape), rd, note=note)

    return Workload(
        key=key,
        group="headline",
        title=f"{workers} tasks, {size} connections, GET, redis.asyncio",
        metric="ops_per_s",
        higher=True,
        floor=FLOOR,
        reference=f"redis.asyncio.BlockingConnectionPool ({AS_SHIPPED})",
        server="redis",
        headline=True,
        columns=CONTENTION_COLUMNS,
        contenders=(
            contender("poolkit.backends.redis.AsyncBlockingConnectionPool", "poolkit",
                      shared_async_client("poolkit"), "one shared redis.asyncio.Redis"),
            contender("poolkit.backends.redis.create_async_pool", "poolkit",
                      poolkit_async_clients, "a client per lease, lease contract on"),
            contender("redis.asyncio.BlockingConnectionPool", "peer",
                      shared_async_client("redis-py"), "one shared redis.asyncio.Redis"),
            contender(FLOOR, "floor", redis_async_floor, "single-connection clients"),
            contender(DEDICATED, "dedicated", redis_async_dedicated, f"{workers} clients"),
        ),
    )  # fmt: skip
