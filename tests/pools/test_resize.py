"""``Pool.resize`` / ``AsyncPool.resize`` on both front ends, driven by fake time: the sizes change
in place, the connections and the statistics stay, the waiters are served in their order as
the room grows, and what is beyond smaller limits closes (available now, in use when back)."""

from __future__ import annotations

import pytest

import poolkit
from frontends import Front, drive


def test_growing_serves_the_blocked_waiters_in_order(front_kind: str) -> None:
    async def scenario(f: Front) -> None:
        held = [await f.lease() for _ in range(2)]
        f.connect_delay = 1.0
        waiters = [f.start() for _ in range(3)]
        await f.settle()
        assert not any(w.done for w in waiters) and f.pool.stats().waiting == 3
        f.pool.resize(0, 5)
        assert f.pool.options.max_size == 5
        done = []
        for _ in range(3):  # one connect at a time (max_connecting=1), each for the oldest
            await f.advance(1.0)
            done.append([w.done for w in waiters])
        assert done == [[True, False, False], [True, True, False], [True, True, True]]
        assert [w.lease.connection.id for w in waiters if w.lease] == [3, 4, 5]
        stats = f.pool.stats()
        assert stats.total == 5 and stats.connections_created == 5 and f.closed() == []
        for lease in held + [w.lease for w in waiters if w.lease]:
            lease.release()

    drive(front_kind, scenario, max_size=2, max_connecting=1, connect_timeout=None)


def test_growing_min_size_fills_the_pool(front_kind: str) -> None:
    async def scenario(f: Front) -> None:
        assert f.pool.stats().total == 1
        f.pool.resize(3, 4)
        await f.settle()
        stats = f.pool.stats()
        assert stats.total == stats.kept == stats.available == 3 and f.created() == 3

    drive(front_kind, scenario, min_size=1, max_size=4)


def test_shrinking_closes_the_idle_now_and_those_in_use_when_back(front_kind: str) -> None:
    async def scenario(f: Front) -> None:
        leases = [await f.lease() for _ in range(4)]
        leases[2].release()
        leases[3].release()
        await f.settle()
        checkouts = f.pool.stats().checkouts
        f.pool.resize(0, 1)
        await f.settle()
        assert sorted(f.closed()) == [3, 4]  # the available ones, now
        assert f.pool.stats().total == 2  # (one in use beyond the limit)
        waiter = f.start()
        await f.settle()
        leases[1].release()  # the newest in use: beyond the limit, closed though one waits
        await f.settle()
        assert sorted(f.closed()) == [2, 3, 4] and not waiter.done
        leases[0].release()  # within it: serves the waiter
        await f.settle()
        assert waiter.lease is not None and waiter.lease.connection.id == 1
        waiter.lease.release()
        stats = f.pool.stats()
        assert stats.total == 1 and f.created() == 4
        assert stats.checkouts == checkouts + 1  # the statistics go on
        assert set(f.close_reasons().values()) == {"idle"}

    drive(front_kind, scenario, max_size=4, max_connecting=4)


def test_bad_sizes_and_a_closed_pool_are_refused(front_kind: str) -> None:
    async def scenario(f: Front) -> None:
        lease = await f.lease()
        options = f.pool.options
        with pytest.raises(ValueError, match=r"PoolOptions\.min_size \(3\) must be <= max_size"):
            f.pool.resize(3, 2)
        with pytest.raises(TypeError, match=r"PoolOptions\.max_size must be an int"):
            f.pool.resize(0, "2")
        assert f.pool.options is options and f.pool.stats().total == 1
        lease.release()
        await f.close()
        with pytest.raises(poolkit.PoolClosedError, match="Attempted to resize a closed"):
            f.pool.resize(0, 5)
        assert f.pool.options is options

    drive(front_kind, scenario, max_size=2)
