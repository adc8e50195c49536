"""Issue 14's defects, one test each (each failed before its fix): what testing as users would
found in the front ends."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import warnings
from typing import Any

import pytest

import poolkit
from conftest import Conn
from frontends import Front, ThreadFront, drive
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


def _hold_waiters(f: Front) -> Any:
    """A context in which a waiting checkout cannot resume: on threads the fake clock's lock (its
    wake-up waits on it), on asyncio nothing (no await happens inside)."""
    if isinstance(f, ThreadFront):
        return f.clock._cv
    return contextlib.nullcontext()


def test_a_lease_given_back_no_longer_gives_its_connection(front_kind: str) -> None:
    async def scenario(f: Front) -> None:
        for give_back in ("release", "discard", "checkin"):
            lease = await f.lease()
            assert lease.connection is f.made[-1]
            if give_back == "checkin":
                await _maybe_await(f.pool.checkin(lease))
            else:
                getattr(lease, give_back)()
            with pytest.raises(poolkit.InvalidLeaseError, match="given back") as info:
                lease.connection  # noqa: B018
            assert info.value.reason == "already returned"
            assert lease.connection_id == f.made[-1].id  # what it was stays readable
        assert f.pool.stats().in_use == 0

    drive(front_kind, scenario)


def test_checkin_of_a_non_lease_names_the_call(front_kind: str) -> None:
    async def scenario(f: Front) -> None:
        lease = await f.lease()
        before = f.pool.stats()
        for bad in (None, "x", object(), f.made[0]):
            with pytest.raises(TypeError, match=r"checkin\(\) takes a Lease"):
                await _maybe_await(f.pool.checkin(bad))
        assert f.pool.stats() == before
        lease.release()

    drive(front_kind, scenario)


def test_a_waiter_never_gets_a_connection_an_interrupting_clear_closed(front_kind: str) -> None:
    # Issue 14, defect 13: handed to a waiter that had not resumed yet, then closed by
    # clear(interrupt_in_use=True): the waiter returned it anyway (200 of 200 tries on Pool).
    async def scenario(f: Front) -> None:
        for _ in range(20):
            holder = await f.lease()
            waiter = f.start()
            await f.settle()
            assert f.pool.stats().waiting == 1
            with _hold_waiters(f):
                holder.release()  # handed to the waiter, which has not resumed
                f.pool.clear(interrupt_in_use=True)
                f.pool.ready()
            await f.settle()
            assert waiter.done and waiter.lease is None
            assert isinstance(waiter.error, poolkit.PoolClearedError)
            assert waiter.error.retryable and waiter.error.interrupted
            stats = f.pool.stats()
            assert stats.in_use == 0 and stats.waiting == 0, stats
        assert all(c.closed == 1 for c in f.made[:-1])

    drive(front_kind, scenario, max_size=1)


async def _maybe_await(result: Any) -> Any:
    if inspect.isawaitable(result):
        return await result
    return result
