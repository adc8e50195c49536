"""A user's mypy sees a ``psycopg.Connection[Row]`` (``AsyncConnection[Row]``) where the psycopg
backend hands out each lease's own connection object (``pg.lend``): psycopg's typed methods, a
typo refused, and ``ConnectionReleasedError`` a ``psycopg.InterfaceError``.

Not a test module: ``mypy --strict`` checks it in the lint step (see ``check_pool_types.py``
for the ``# type: ignore[code]`` convention: each marks an error that must be reported).
"""

from __future__ import annotations

from typing import Any, assert_type

import psycopg
from psycopg.rows import DictRow

import poolkit
from poolkit.backends import psycopg as pg


def use() -> None:
    with pg.create_pool("postgresql://db/app") as pool:
        assert_type(pool, poolkit.Pool[psycopg.Connection[Any]])
        with pool.connection() as conn:
            assert_type(conn, psycopg.Connection[Any])
            assert_type(conn.execute("SELECT 1"), psycopg.Cursor[Any])
            conn.executee("SELECT 1")  # type: ignore[attr-defined]
        lease = pool.checkout()
        assert_type(lease.connection, psycopg.Connection[Any])
        assert_type(pg.lend(lease.connection, lease), psycopg.Connection[Any])
        lease.release()


def use_rows(conn: psycopg.Connection[DictRow], lease: poolkit.Lease[Any]) -> None:
    lent = pg.lend(conn, lease)
    assert_type(lent, psycopg.Connection[DictRow])
    row = lent.execute("SELECT 1 AS one").fetchone()
    assert_type(row, DictRow | None)
    pg.lend(object(), lease)  # type: ignore[type-var]


async def use_async() -> None:
    async with pg.create_async_pool("postgresql://db/app") as pool:
        assert_type(pool, poolkit.AsyncPool[psycopg.AsyncConnection[Any]])
        async with pool.connection() as conn:
            assert_type(conn, psycopg.AsyncConnection[Any])
            cur = await conn.execute("SELECT 1")
            assert_type(cur, psycopg.AsyncCursor[Any])


def refused(error: pg.ConnectionReleasedError) -> psycopg.InterfaceError:
    assert_type(error.address, str)
    assert_type(error.connection_id, int)
    assert_type(error.attribute, str)
    return error
