"""``available``: the connections available now, a glance without the pool's lock, agrees with
``stats().available`` on both front ends."""

from __future__ import annotations

import asyncio
from typing import Any

import poolkit


class _Conn:
    def close(self) -> None:
        pass


def test_available_follows_check_outs_and_check_ins_threads() -> None:
    with poolkit.Pool(lambda ctx: _Conn(), options=poolkit.PoolOptions(max_size=3)) as pool:
        assert pool.available == 0 == pool.stats().available
        a, b = pool.checkout(), pool.checkout()
        assert pool.available == 0
        a.release()
        assert pool.available == 1 == pool.stats().available
        b.release()
        assert pool.available == 2 == pool.stats().available
        with pool.connection():
            assert pool.available == 1 == pool.stats().available
    assert pool.available == 0  # (closed: its available connections closed)


def test_available_follows_check_outs_and_check_ins_asyncio() -> None:
    async def connect(ctx: Any) -> _Conn:
        return _Conn()

    async def main() -> None:
        async with poolkit.AsyncPool(connect, options=poolkit.PoolOptions(max_size=3)) as pool:
            a = await pool.checkout()
            assert pool.available == 0
            a.release()
            assert pool.available == 1 == pool.stats().available
            async with pool.connection():
                assert pool.available == 0 == pool.stats().available

    asyncio.run(main())
