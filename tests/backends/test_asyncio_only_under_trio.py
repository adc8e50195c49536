"""The backends whose driver runs on asyncio only (asyncpg, psycopg's AsyncConnection,
redis.asyncio, poolkit.mongodb's asyncio streams) say so at the
call under trio (issue 41, point 4), naming it, before any I/O: their connect functions, and
their builders (``async with create_async_pool(...)``). No server is needed: nothing is dialled.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import trio

import poolkit
from poolkit.backends import asyncpg, psycopg, redis
from poolkit.mongodb import async_connect as mongo_connect
from poolkit.mongodb import create_async_pool as mongo_pool

CONNECTS: dict[str, Callable[[], Any]] = {
    "asyncpg.async_connect": lambda: asyncpg.async_connect("postgresql://127.0.0.1:9/x"),
    "psycopg.async_connect": lambda: psycopg.async_connect("host=127.0.0.1 port=9"),
    "redis.async_connect": lambda: redis.async_connect("redis://127.0.0.1:9/0"),
    "mongodb.async_connect": lambda: mongo_connect("127.0.0.1", 9),
}
BUILDERS: dict[str, Callable[[], Any]] = {
    "psycopg.create_async_pool": lambda: psycopg.create_async_pool("host=127.0.0.1 port=9"),
    "redis.create_async_pool": lambda: redis.create_async_pool("redis://127.0.0.1:9/0"),
    "mongodb.create_async_pool": lambda: mongo_pool("mongodb://127.0.0.1:9"),
}


@pytest.mark.parametrize("call", list(CONNECTS))
def test_an_asyncio_only_connect_function_under_trio_says_so(call: str) -> None:
    connect = CONNECTS[call]()

    async def main() -> None:
        ctx = poolkit.ConnectContext(1, "127.0.0.1:9", None, 0)
        with pytest.raises(RuntimeError, match=rf"^{call}: .* asyncio only, and this is trio"):
            await connect(ctx)

    trio.run(main)


@pytest.mark.parametrize("call", list(BUILDERS))
def test_an_asyncio_only_builder_under_trio_says_so(call: str) -> None:
    starter = BUILDERS[call]()

    async def main() -> None:
        with pytest.raises(RuntimeError, match=rf"^{call}: .* asyncio only, and this is trio"):
            async with starter:
                pass

    trio.run(main)
