"""With asyncpg's type stubs (``asyncpg-stubs``, a test dependency), a user's mypy sees an
``asyncpg.Connection`` where the asyncpg backend hands out its proxy: its methods, typed.

Not a test module: ``mypy --strict`` checks it in the lint step (see ``check_pool_types.py``
for the ``# type: ignore[code]`` convention: each marks an error that must be reported).
"""

from __future__ import annotations

from typing import Any, assert_type

import asyncpg

import poolkit
from poolkit.backends import asyncpg as pk


async def use() -> None:
    pool = await pk.create_pool("postgresql://db/app")
    assert_type(pool, pk.Pool)
    assert_type(pool.pool, poolkit.AsyncPool[asyncpg.Connection])
    async with pool.acquire() as conn:  # (asyncpg's way: the drop-in)
        assert_type(conn, asyncpg.Connection)
        assert_type(await conn.fetchval("SELECT 1"), Any)
        await conn.fetchvall("SELECT 1")  # type: ignore[attr-defined]
    conn = await pool.acquire()
    assert_type(conn, asyncpg.Connection)
    await pool.release(conn, timeout=5.0)
    assert_type(pool.get_size(), int)
    assert_type(await pool.fetchval("SELECT 1"), Any)
    async with pool.connection() as conn:
        assert_type(conn, asyncpg.Connection)
        assert_type(conn.is_closed(), bool)
        await conn.fetchvall("SELECT 1")  # type: ignore[attr-defined]
    lease = await pool.checkout()
    assert_type(lease.connection, asyncpg.Connection)
    proxy: asyncpg.Connection = pk.PooledConnection(lease.connection, lease)
    pk.PooledConnection(lease.connection)  # type: ignore[call-arg]
