"""AsyncPool behaviour on a virtual-time loop: bad input, cancellation, timeouts, connect
failures and hangs, listeners."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

import poolkit
from doubles import Conn
from poolkit import events as ev
from poolkit.testing import run


class AsyncConn(Conn):
    async def close(self) -> None:  # type: ignore[override]
        await asyncio.sleep(0.01)
        self.closed += 1


def make_connect(
    made: list[Conn] | None = None, delay: float = 0.0, cls: type[Conn] = Conn
) -> Callable[[poolkit.ConnectContext], Awaitable[Conn]]:
    async def connect(ctx: poolkit.ConnectContext) -> Conn:
        if delay:
            await asyncio.sleep(delay)
        conn = cls(ctx.connection_id)
        if made is not None:
            made.append(conn)
        return conn

    return connect


def pool_of(**kw: Any) -> tuple[poolkit.AsyncPool[Conn], list[Conn], list[ev.PoolEvent]]:
    made: list[Conn] = []
    events: list[ev.PoolEvent] = []
    delay = kw.pop("delay", 0.0)
    pool: poolkit.AsyncPool[Conn] = poolkit.AsyncPool(
        make_connect(made, delay),
        address="db:1",
        options=poolkit.PoolOptions(**kw),
        listeners=[events.append],
    )
    return pool, made, events


def names(events: list[ev.PoolEvent]) -> list[str]:
    return [e.cmap_name for e in events]


def test_new_pool_is_paused_and_announced() -> None:
    async def main() -> None:
        pool, _, events = pool_of(max_size=5)
        assert pool.state is poolkit.PoolState.PAUSED
        assert events == [ev.PoolCreatedEvent(address="db:1", options={"maxPoolSize": 5})]
        with pytest.raises(poolkit.PoolClearedError) as info:
            await pool.checkout()
        assert info.value.retryable
        await pool.close()

    run(main())


def test_sequential_leases_reuse_one_connection() -> None:
    async def main() -> None:
        pool, made, _ = pool_of()
        async with pool:
            for _ in range(1000):
                lease = await pool.checkout()
                lease.release()
            assert len(made) == 1
            assert pool.stats().total == 1
        assert made[0].closed == 1

    run(main())


def test_checkin_foreign_or_twice_raises_and_changes_nothing() -> None:
    async def main() -> None:
        pool, _, events = pool_of()
        other, _, _ = pool_of()
        async with pool, other:
            lease = await pool.checkout()
            foreign = await other.checkout()
            before = pool.stats()
            with pytest.raises(poolkit.InvalidLeaseError) as info:
                await pool.checkin(foreign)
            assert info.value.reason == "foreign"
            assert pool.stats() == before
            assert foreign.active
            await pool.checkin(lease)
            n = len(events)
            with pytest.raises(poolkit.InvalidLeaseError) as info:
                lease.release()
            assert info.value.reason == "already returned"
            assert len(events) == n
            assert pool.stats().available == 1
            foreign.release()

    run(main())


def test_closed_pool_refuses_checkout_and_ready() -> None:
    async def main() -> None:
        pool, _, events = pool_of()
        pool.ready()
        await pool.close()
        with pytest.raises(poolkit.PoolClosedError) as info:
            await pool.checkout()
        assert str(info.value) == "Attempted to check out a connection from closed connection pool"
        assert info.value.address == "db:1"
        with pytest.raises(poolkit.PoolClosedError):
            pool.ready()
        assert isinstance(events[-1], ev.ConnectionCheckOutFailedEvent)
        assert events[-1].reason == "poolClosed"
        await pool.close()  # idempotent

    run(main())


def test_wait_queue_timeout_fires_at_its_deadline_and_carries_stats() -> None:
    async def main() -> None:
        pool, _, events = pool_of(max_size=1, wait_queue_timeout=2.5)
        async with pool:
            held = await pool.checkout()
            loop = asyncio.get_running_loop()
            start = loop.time()
            with pytest.raises(poolkit.WaitQueueTimeoutError) as info:
                await pool.checkout()
            assert loop.time() - start == pytest.approx(2.5)
            err = info.value
            assert str(err) == "Timed out while checking out a connection from connection pool"
            assert err.waited == pytest.approx(2.5)
            assert err.stats is not None and err.stats.in_use == 1 and err.stats.waiting == 0
            failed = [e for e in events if isinstance(e, ev.ConnectionCheckOutFailedEvent)]
            assert failed[-1].reason == "timeout" and failed[-1].duration == pytest.approx(2.5)
            # per-call timeout overrides the option; 0 never waits
            with pytest.raises(poolkit.WaitQueueTimeoutError):
                await pool.checkout(timeout=0)
            assert pool.stats().waiting == 0
            held.release()

    run(main())


def test_invalid_timeout_names_the_call() -> None:
    async def main() -> None:
        pool, _, _ = pool_of()
        async with pool:
            with pytest.raises(ValueError, match=r"checkout\(timeout=...\)"):
                await pool.checkout(timeout=-1)
            assert pool.stats().waiting == 0

    run(main())


def test_cancelled_waiter_leaves_queue_and_is_never_served() -> None:
    async def main() -> None:
        pool, _, events = pool_of(max_size=1)
        async with pool:
            held = await pool.checkout()
            first = asyncio.create_task(pool.checkout())
            second = asyncio.create_task(pool.checkout())
            await asyncio.sleep(0)
            assert pool.stats().waiting == 2
            first.cancel()
            await asyncio.sleep(0)
            assert pool.stats().waiting == 1
            held.release()
            lease = await second
            assert lease.connection_id == held.connection_id
            assert first.cancelled()
            cancelled = [e for e in events if isinstance(e, ev.ConnectionCheckOutFailedEvent)]
            assert [e.reason for e in cancelled] == ["cancelled"]
            lease.release()
            assert pool.stats().available == 1

    run(main())


def test_cancelled_after_hand_off_gives_the_connection_back() -> None:
    async def main() -> None:
        pool, _, _ = pool_of(max_size=1)
        async with pool:
            held = await pool.checkout()
            waiter = asyncio.create_task(pool.checkout())
            await asyncio.sleep(0)
            held.release()  # handed to the waiter; its task has not run yet
            waiter.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiter
            stats = pool.stats()
            assert stats.in_use == 0 and stats.available == 1
            lease = await pool.checkout(timeout=0)
            lease.release()

    run(main())


def test_wait_for_timeout_around_checkout_loses_nothing() -> None:
    async def main() -> None:
        pool, made, _ = pool_of(max_size=2, delay=1.0)
        async with pool:
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(pool.checkout(), 0.5)
            # the connect went on without its waiter and parked the connection
            await asyncio.sleep(1.0)
            assert pool.stats().available == 1 and len(made) == 1
            lease = await pool.checkout(timeout=0)
            lease.release()

    run(main())


def test_connect_error_fails_the_checkout_with_that_error() -> None:
    async def main() -> None:
        events: list[ev.PoolEvent] = []
        boom = OSError("connection refused")

        async def connect(ctx: poolkit.ConnectContext) -> Conn:
            raise boom

        pool: poolkit.AsyncPool[Conn] = poolkit.AsyncPool(
            connect, address="db:1", listeners=[events.append]
        )
        async with pool:
            with pytest.raises(OSError, match="connection refused") as info:
                await pool.checkout()
            assert info.value is boom
            assert pool.stats().total == 0
        closed = [e for e in events if isinstance(e, ev.ConnectionClosedEvent)]
        failed = [e for e in events if isinstance(e, ev.ConnectionCheckOutFailedEvent)]
        assert closed[0].reason == "error" and closed[0].error is boom
        assert failed[0].reason == "connectionError" and failed[0].error is boom

    run(main())


def test_hanging_connect_is_abandoned_after_connect_timeout() -> None:
    async def main() -> None:
        seen: list[poolkit.ConnectContext] = []

        async def connect(ctx: poolkit.ConnectContext) -> Conn:
            seen.append(ctx)
            await asyncio.sleep(3600)
            return Conn(ctx.connection_id)

        pool: poolkit.AsyncPool[Conn] = poolkit.AsyncPool(
            connect, address="db:1", options=poolkit.PoolOptions(connect_timeout=5)
        )
        async with pool:
            with pytest.raises(poolkit.ConnectTimeoutError) as info:
                await pool.checkout()
            assert info.value.timeout == 5
            assert seen[0].cancelled
            assert pool.stats().total == 0 and pool.stats().pending == 0

    run(main())


def test_async_close_of_connections_is_awaited_by_close() -> None:
    async def main() -> None:
        made: list[Conn] = []
        pool: poolkit.AsyncPool[Conn] = poolkit.AsyncPool(
            make_connect(made, cls=AsyncConn), address="db:1"
        )
        async with pool:
            lease = await pool.checkout()
            lease.discard(RuntimeError("broken"))
            lease2 = await pool.checkout()
            lease2.release()
        assert [c.closed for c in made] == [1, 1]

    run(main())


def test_listener_that_raises_is_logged_and_pool_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    calls: list[str] = []

    class Bad(poolkit.PoolListener):
        def connection_checked_out(self, event: ev.ConnectionCheckedOutEvent) -> None:
            calls.append("out")
            raise RuntimeError("listener bug")

    async def main() -> None:
        pool: poolkit.AsyncPool[Conn] = poolkit.AsyncPool(
            make_connect(), address="db:1", listeners=[Bad()]
        )
        async with pool:
            lease = await pool.checkout()
            lease.release()
            assert pool.stats().available == 1

    with caplog.at_level(logging.ERROR, logger="poolkit.events"):
        run(main())
    assert calls == ["out"]
    assert "listener bug" in caplog.text


def test_connection_context_manager_releases_or_discards() -> None:
    async def main() -> None:
        pool, made, _ = pool_of()
        async with pool:
            async with pool.connection() as conn:
                assert conn is made[0]
            assert pool.stats().available == 1
            with pytest.raises(KeyError):
                async with pool.connection():
                    raise KeyError("app error")
            assert pool.stats().available == 1 and made[0].closed == 0

            async def hold() -> None:
                async with pool.connection():
                    await asyncio.sleep(10)

            task = asyncio.create_task(hold())
            await asyncio.sleep(1)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert made[0].closed == 1  # cancelled mid-use: discarded
            assert pool.stats().total == 0

    run(main())


def test_min_size_populated_on_ready_and_replaced() -> None:
    async def main() -> None:
        pool, made, _ = pool_of(min_size=3, background_interval=10)
        await asyncio.sleep(1)
        assert made == []  # paused: nothing made
        async with pool:
            await asyncio.sleep(0.1)
            assert pool.stats().available == 3
            lease = await pool.checkout()
            lease.discard()
            await asyncio.sleep(0.1)
            assert pool.stats().total == 3 and len(made) == 4

    run(main())


def test_max_idle_time_closes_idle_connections_at_the_instant() -> None:
    async def main() -> None:
        pool, made, events = pool_of(max_idle_time=30)
        async with pool:
            lease = await pool.checkout()
            lease.release()
            await asyncio.sleep(29.9)
            assert made[0].closed == 0
            await asyncio.sleep(0.2)
            assert made[0].closed == 1
            closed = [e for e in events if isinstance(e, ev.ConnectionClosedEvent)]
            assert closed[0].reason == "idle"

    run(main())


def test_clear_fails_waiters_at_once_and_interrupts_in_use() -> None:
    async def main() -> None:
        pool, made, events = pool_of(max_size=1)
        async with pool:
            lease = await pool.checkout()
            waiters = [asyncio.create_task(pool.checkout()) for _ in range(3)]
            await asyncio.sleep(0)
            cause = OSError("server went away")
            pool.clear(interrupt_in_use=True, cause=cause)
            results = await asyncio.gather(*waiters, return_exceptions=True)
            assert all(isinstance(r, poolkit.PoolClearedError) for r in results)
            err = results[0]
            assert isinstance(err, poolkit.PoolClearedError) and err.cause is cause
            assert "server went away" in str(err)
            assert made[0].closed == 1  # interrupted
            cleared = [e for e in events if isinstance(e, ev.PoolClearedEvent)]
            assert cleared == [
                ev.PoolClearedEvent(address="db:1", interrupt_in_use_connections=True)
            ]
            lease.release()  # checking in an interrupted connection is fine
            assert pool.stats().total == 0
            pool.ready()
            lease = await pool.checkout()
            assert lease.generation == 1
            lease.release()

    run(main())


def test_pool_bound_to_one_loop() -> None:
    pool, _, _ = pool_of()

    async def first() -> None:
        pool.ready()
        (await pool.checkout()).release()

    async def second() -> None:
        with pytest.raises(RuntimeError, match="belongs to the event loop it first ran on"):
            pool.ready()

    run(first())
    run(second())


def test_bad_constructor_arguments_name_the_argument() -> None:
    with pytest.raises(TypeError, match="options"):
        poolkit.AsyncPool(make_connect(), options={"max_size": 1})  # type: ignore[call-overload]
    with pytest.raises(TypeError, match="connect"):
        poolkit.AsyncPool(None)  # type: ignore[call-overload]
    with pytest.raises(TypeError, match="listeners"):
        poolkit.AsyncPool(make_connect(), listeners=[42])  # type: ignore[arg-type, list-item]
    with pytest.raises(ValueError, match="address"):
        poolkit.AsyncPool(make_connect(), address="")


@pytest.mark.parametrize("seed", range(5))
def test_cancellation_storm_loses_nothing(seed: int) -> None:
    """Tasks cancelled at random points (waiting, just handed a connection, holding one) never
    leak a connection nor leave a waiter behind."""
    import random

    rng = random.Random(seed)

    async def main() -> None:
        pool, made, events = pool_of(max_size=3, delay=0.01)
        async with pool:

            async def user() -> None:
                async with pool.connection():
                    await asyncio.sleep(rng.choice([0, 0.001, 0.01]))

            tasks = [asyncio.create_task(user()) for _ in range(200)]
            for _ in range(300):
                await asyncio.sleep(rng.choice([0, 0, 0.0005, 0.002]))
                victim = rng.choice(tasks)
                victim.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            stats = pool.stats()
            assert stats.in_use == 0 and stats.waiting == 0 and stats.pending == 0
            assert stats.total <= 3
            live = [c for c in made if not c.closed]
            assert len(live) == stats.available
        started = sum(isinstance(e, ev.ConnectionCheckOutStartedEvent) for e in events)
        ended = sum(
            isinstance(e, ev.ConnectionCheckedOutEvent | ev.ConnectionCheckOutFailedEvent)
            for e in events
        )
        assert started == ended > 0  # every checkout that began ended once
        assert all(c.closed == 1 for c in made)

    run(main())


def test_invalid_timeout_fails_even_with_a_connection_available() -> None:
    async def main() -> None:
        # unobserved: fast path
        pool: poolkit.AsyncPool[Conn] = poolkit.AsyncPool(make_connect(), address="db:1")
        async with pool:
            (await pool.checkout()).release()
            before = pool.stats()
            with pytest.raises(ValueError, match=r"checkout\(timeout=...\)"):
                await pool.checkout(timeout=-1)
            assert pool.stats() == before

    run(main())


def test_a_plain_connect_fails_the_checkout_clearly_and_closes_what_it_made() -> None:
    made: list[Conn] = []

    def connect(ctx: poolkit.ConnectContext) -> Conn:
        made.append(Conn(ctx.connection_id))
        return made[-1]

    async def main() -> None:
        # (ignore: the test passes a plain function where an async one is due, on purpose)
        pool: poolkit.AsyncPool[Conn] = poolkit.AsyncPool(connect, address="db:1")  # type: ignore[arg-type]
        async with pool:
            with pytest.raises(TypeError, match="must be an async function"):
                await pool.checkout()
            assert pool.stats().total == 0

    run(main())
    assert [c.closed for c in made] == [1]


def test_checkin_is_done_when_called_and_its_awaitable_works_wherever_one_goes() -> None:
    """``checkin`` gives the lease back when called and returns an awaitable already done (no
    coroutine made per call): ``await``, ``gather``, ``ensure_future`` and a hand-stepped
    ``__await__`` all take it, dropping it unawaited loses nothing, ``create_task`` refuses it
    (after the check-in), and a wrong lease raises at the call."""

    async def main() -> None:
        options = poolkit.PoolOptions(max_size=2)
        async with poolkit.AsyncPool(make_connect(), options=options) as pool:
            first, second = await pool.checkout(), await pool.checkout()
            pending = pool.checkin(first)
            assert not first.active and pool.stats().in_use == 1  # done before the await
            await pending
            await asyncio.gather(pool.checkin(second))
            lease = await pool.checkout()
            await asyncio.ensure_future(pool.checkin(lease))
            lease = await pool.checkout()
            stepped = pool.checkin(lease).__await__()  # (stepped by hand: done at once)
            with pytest.raises(StopIteration):
                stepped.send(None)
            with pytest.raises(poolkit.InvalidLeaseError, match="already returned"):
                pool.checkin(lease)
            lease = await pool.checkout()
            pool.checkin(lease)  # (dropped unawaited: nothing lost, no "never awaited" warning)
            lease = await pool.checkout()
            with pytest.raises(TypeError):  # (create_task wants a coroutine: as documented)
                asyncio.create_task(pool.checkin(lease))  # type: ignore[arg-type]  # noqa: RUF006
            assert not lease.active  # (given back all the same)
            stats = pool.stats()
            assert (stats.in_use, stats.checkouts) == (0, 6)

    run(main())
