"""The pools' types as a user's type checker sees them: ``AsyncPool(connect)`` and
``Pool(connect)`` take the connection type from ``connect``'s return type (through
``Established`` too), a wrong hand annotation is refused, and ``Lease[C]`` carries it to
``lease.connection``.

Not a test module: ``mypy --strict`` checks it in the lint step (``.ci/run``), and nothing runs
it. Each line that must be refused carries ``# type: ignore[code]`` with the error expected:
strict mypy reports an ignore that no longer silences an error (``warn_unused_ignores``), so a
line that stops being refused fails the lint step, as one refused for another reason does.
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager, AbstractContextManager
from datetime import timedelta
from typing import assert_type

import poolkit
from poolkit import AsyncPool, ConnectContext, Established, Lease, Pool


class Conn:
    def close(self) -> None: ...


async def connect(ctx: ConnectContext) -> Conn:
    return Conn()


async def connect_streams(ctx: ConnectContext) -> Established[Conn]:
    return Established(Conn(), max_streams=4)


def connect_sync(ctx: ConnectContext) -> Conn:
    return Conn()


async def use() -> None:
    apool = AsyncPool(connect, address="db:1")
    assert_type(apool, AsyncPool[Conn])
    assert_type(AsyncPool(connect_streams), AsyncPool[Conn])
    lease = await apool.checkout()
    assert_type(lease, Lease[Conn])
    assert_type(lease.connection, Conn)
    async with apool.connection() as conn:
        assert_type(conn, Conn)
    block: AbstractAsyncContextManager[Conn] = apool.connection()
    wrong: AsyncPool[int] = AsyncPool(connect)  # type: ignore[arg-type]
    AsyncPool(connect, adress="db:1")  # type: ignore[call-overload]


async def under_trio() -> None:
    # (issue 41: the same pool under trio; its block, paused or ready, and trio's tcp builder)
    from poolkit.backends import tcp

    apool = AsyncPool(connect)
    async with apool.running(ready=False) as running:
        assert_type(running, AsyncPool[Conn])
    async with tcp.create_trio_pool("127.0.0.1", 6379) as streams:
        assert_type(streams, AsyncPool[tcp.TrioStreamConnection])
        async with streams.connection() as stream:
            assert_type(stream, tcp.TrioStreamConnection)
    apool.running(True)  # type: ignore[call-arg]  # (ready= is keyword-only)


def options() -> None:
    opts = poolkit.PoolOptions(max_idle_time=timedelta(seconds=5), wait_queue_timeout=1)
    assert_type(opts.max_idle_time, float | None)
    poolkit.KeepAlive(timedelta(seconds=1), lambda c: None, timeout=0.5)
    poolkit.Backoff(base=timedelta(milliseconds=50), circuit_breaker_after=None)
    poolkit.PoolOptions(max_size="10")  # type: ignore[arg-type]
    poolkit.PoolOptions(max_idel_time=1)  # type: ignore[call-arg]


def use_sync() -> None:
    pool = Pool(connect_sync, options=poolkit.PoolOptions(max_size=2))
    assert_type(pool, Pool[Conn])
    with pool.connection() as conn:
        assert_type(conn, Conn)
    block: AbstractContextManager[Conn] = pool.connection()
    assert_type(pool.checkout(), Lease[Conn])
    wrong: Pool[str] = Pool(connect_sync)  # type: ignore[arg-type]
