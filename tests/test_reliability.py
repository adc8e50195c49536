"""Issue 14's defects, one test each (each failed before its fix): what testing as users would
found in the front ends."""

from __future__ import annotations

import asyncio
import warnings
from typing import Any

import poolkit
from conftest import Conn
from poolkit.testing import run


class RedisLikeConn(Conn):
    """As redis-py 5: ``close()`` is deprecated in favour of ``aclose()``."""

    def __init__(self, cid: int) -> None:
        super().__init__(cid)
        self.aclosed = 0

    def close(self) -> None:
        warnings.warn("Call to deprecated close. (Use aclose() instead)", DeprecationWarning, 2)
        super().close()

    async def aclose(self) -> None:
        await asyncio.sleep(0)
        self.aclosed += 1


def test_async_pool_prefers_aclose() -> None:
    made: list[RedisLikeConn] = []

    async def connect(ctx: poolkit.ConnectContext) -> RedisLikeConn:
        made.append(RedisLikeConn(ctx.connection_id))
        return made[-1]

    async def main() -> None:
        async with poolkit.AsyncPool(connect, options=poolkit.PoolOptions(min_size=2)) as pool:
            async with pool.connection():
                pass
            lease = await pool.checkout()
            lease.discard()
        assert [(c.aclosed, c.closed) for c in made] == [(1, 0)] * len(made) and len(made) >= 2

    run(main())  # warnings are errors: a close() call would fail here


def test_close_during_a_probe_of_a_connection_that_is_none() -> None:
    # A connect function may return None (a connection that is a token); closing the pool while
    # its keep-alive probe runs raised AttributeError out of close() and left the probe's task.
    probing = asyncio.Event()

    async def connect(ctx: poolkit.ConnectContext) -> None:
        return None

    async def probe(connection: Any) -> None:
        probing.set()
        await asyncio.sleep(100)

    async def main() -> None:
        options = poolkit.PoolOptions(min_size=1, keep_alive=poolkit.KeepAlive(1.0, probe))
        pool = poolkit.AsyncPool(connect, options=options)
        pool.ready()
        await probing.wait()
        await pool.close()
        assert pool.stats().total == 0
        assert [t for t in asyncio.all_tasks() if t is not asyncio.current_task()] == []

    run(main())
