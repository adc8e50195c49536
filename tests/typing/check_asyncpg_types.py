"""With asyncpg's type stubs (``asyncpg-stubs``, a test dependency), a user's mypy sees an
``asyncpg.Connection`` where the asyncpg backend hands out its proxy: its methods, typed.

Not a test module: ``mypy --strict`` checks it in the lint step (see ``check_pool_types.py``
for the ``# type: ignore[code]`` convention: each marks an error that must be reported).
"""

from __future__ import annotations

from typing import assert_type

import asyncpg

import poolkit
from poolkit.backends import asyncpg as pk


async def use() -> None:
    pool = await pk.create_pool("postgresql://db/app")
    assert_type(pool, poolkit.AsyncPool[asyncpg.Connection])
    async with pool.connection() as conn:
        assert_type(conn, asyncpg.Connection)
        assert_type(conn.is_closed(), bool)
        await conn.fetchvall("SELECT 1")  # type: ignore[attr-defined]
    lease = await pool.checkout()
    assert_type(lease.connection, asyncpg.Connection)
    proxy: asyncpg.Connection = pk.PooledConnection(lease.connection, lease)
    pk.PooledConnection(lease.connection)  # type: ignore[call-arg]
