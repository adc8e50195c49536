"""Pool (threads) behaviour, time driven by FakeClock: bad input, timeouts, connect failures and
hangs, fairness across threads, listeners, fork."""

from __future__ import annotations

import gc
import os
import sys
import threading
import warnings
import weakref
from collections.abc import Coroutine
from typing import Any, cast

import pytest

import poolkit
from doubles import Conn
from poolkit import events as ev
from poolkit.testing import FakeClock


def pool_of(
    clock: FakeClock | None = None, delay: float = 0.0, **kw: Any
) -> tuple[poolkit.Pool[Conn], list[Conn], list[ev.PoolEvent]]:
    made: list[Conn] = []
    events: list[ev.PoolEvent] = []

    def connect(ctx: poolkit.ConnectContext) -> Conn:
        if delay:
            assert clock is not None
            clock.sleep(delay)
        conn = Conn(ctx.connection_id)
        made.append(conn)
        return conn

    pool: poolkit.Pool[Conn] = poolkit.Pool(
        connect,
        address="db:1",
        options=poolkit.PoolOptions(**kw),
        listeners=[events.append],
        clock=clock,
    )
    return pool, made, events


class Outcome:
    """A checkout run on a clock-tracked thread."""

    def __init__(self, clock: FakeClock, pool: poolkit.Pool[Conn], timeout: Any = None) -> None:
        self.lease: poolkit.Lease[Conn] | None = None
        self.error: BaseException | None = None
        self.done = False

        def run() -> None:
            try:
                self.lease = pool.checkout() if timeout is None else pool.checkout(timeout)
            except BaseException as exc:
                self.error = exc
            self.done = True

        clock.start_thread(run)


def test_sequential_leases_reuse_one_connection() -> None:
    pool, made, _ = pool_of()
    with pool:
        for _ in range(1000):
            pool.checkout().release()
        assert len(made) == 1
    assert made[0].closed == 1


def test_checkin_foreign_or_twice_raises_and_changes_nothing() -> None:
    pool, _, events = pool_of()
    other, _, _ = pool_of()
    with pool, other:
        lease = pool.checkout()
        foreign = other.checkout()
        before = pool.stats()
        with pytest.raises(poolkit.InvalidLeaseError) as info:
            pool.checkin(foreign)
        assert info.value.reason == "foreign" and pool.stats() == before
        lease.release()
        n = len(events)
        with pytest.raises(poolkit.InvalidLeaseError) as info:
            pool.checkin(lease)
        assert info.value.reason == "already returned" and len(events) == n
        foreign.release()


def test_concurrent_double_release_only_one_wins() -> None:
    pool, _, _ = pool_of()
    with pool:
        for _ in range(200):
            lease = pool.checkout()
            errors: list[BaseException] = []
            barrier = threading.Barrier(4)

            def release(
                lease: poolkit.Lease[Conn] = lease,
                barrier: threading.Barrier = barrier,
                errors: list[BaseException] = errors,
            ) -> None:
                barrier.wait()
                try:
                    lease.release()
                except poolkit.InvalidLeaseError as exc:
                    errors.append(exc)

            threads = [threading.Thread(target=release) for _ in range(4)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            assert len(errors) == 3
            assert pool.stats().available == 1


def test_timeout_at_the_fake_deadline() -> None:
    clock = FakeClock()
    pool, _, events = pool_of(clock, max_size=1, wait_queue_timeout=2.0)
    pool.ready()
    held = pool.checkout()
    waiter = Outcome(clock, pool)
    clock.advance(1.999)
    assert not waiter.done and pool.stats().waiting == 1
    clock.advance(0.001)
    clock.settle()
    # (the cast: mypy keeps `waiter.done` narrowed to False by the assert above)
    assert cast(bool, waiter.done) and isinstance(waiter.error, poolkit.WaitQueueTimeoutError)
    assert waiter.error.waited == pytest.approx(2.0)
    failed = [e for e in events if isinstance(e, ev.ConnectionCheckOutFailedEvent)]
    assert failed[0].duration == pytest.approx(2.0)
    held.release()
    pool.close()


def test_fifo_hand_off_across_threads() -> None:
    clock = FakeClock()
    pool, _, _ = pool_of(clock, max_size=1)
    pool.ready()
    held = pool.checkout()
    waiters = []
    for _ in range(5):
        waiters.append(Outcome(clock, pool))
        clock.settle()
    order: list[Outcome] = []
    lease = held
    for w in waiters:
        lease.release()
        clock.settle()
        assert w.done and w.lease is not None, "the oldest waiter is served first"
        assert all(not x.done for x in waiters[len(order) + 1 :])
        order.append(w)
        lease = w.lease
    lease.release()
    pool.close()


def test_connect_error_fails_the_checkout_with_that_error() -> None:
    boom = ConnectionRefusedError("refused")

    def connect(ctx: poolkit.ConnectContext) -> Conn:
        raise boom

    pool: poolkit.Pool[Conn] = poolkit.Pool(connect, address="db:1")
    with pool:
        with pytest.raises(ConnectionRefusedError) as info:
            pool.checkout()
        assert info.value is boom
        assert pool.stats().total == 0


def test_hanging_connect_abandoned_then_closed_when_it_returns() -> None:
    clock = FakeClock()
    contexts: list[poolkit.ConnectContext] = []
    made: list[Conn] = []

    def connect(ctx: poolkit.ConnectContext) -> Conn:
        contexts.append(ctx)
        clock.sleep(100)
        conn = Conn(ctx.connection_id)
        made.append(conn)
        return conn

    pool: poolkit.Pool[Conn] = poolkit.Pool(
        connect, address="db:1", options=poolkit.PoolOptions(connect_timeout=5), clock=clock
    )
    pool.ready()
    out = Outcome(clock, pool)
    clock.advance(5)
    clock.settle()
    assert isinstance(out.error, poolkit.ConnectTimeoutError)
    assert contexts[0].cancelled
    assert pool.stats().total == 0
    clock.advance(100)  # the connect finally returns: its connection is closed, not pooled
    assert made[0].closed == 1 and pool.stats().total == 0
    pool.close()


def test_background_run_refills_min_size_after_connect_failure() -> None:
    clock = FakeClock()
    attempts = []

    def connect(ctx: poolkit.ConnectContext) -> Conn:
        attempts.append(clock.monotonic())
        if len(attempts) == 1:
            raise OSError("down")
        return Conn(ctx.connection_id)

    pool: poolkit.Pool[Conn] = poolkit.Pool(
        connect,
        address="db:1",
        options=poolkit.PoolOptions(min_size=1, background_interval=10),
        clock=clock,
    )
    pool.ready()
    clock.settle()
    assert pool.stats().total == 0  # failed; no hot retry loop
    clock.advance(10)
    clock.settle()
    assert attempts == [0.0, 10.0] and pool.stats().available == 1
    pool.close()


def test_listener_sees_events_in_core_order_from_many_threads() -> None:
    events: list[ev.PoolEvent] = []
    lock = threading.Lock()

    def listener(event: ev.PoolEvent) -> None:
        with lock:
            events.append(event)

    pool: poolkit.Pool[Conn] = poolkit.Pool(
        lambda ctx: Conn(ctx.connection_id),
        address="db:1",
        options=poolkit.PoolOptions(max_size=3),
        listeners=[listener],
    )

    def work() -> None:
        for _ in range(300):
            pool.checkout().release()

    with pool:
        threads = [threading.Thread(target=work) for _ in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    # every lease's events are balanced and each connection alternates out/in
    state: dict[int, str] = {}
    for e in events:
        if isinstance(e, ev.ConnectionCheckedOutEvent):
            assert state.get(e.connection_id) != "out"
            state[e.connection_id] = "out"
        elif isinstance(e, ev.ConnectionCheckedInEvent):
            assert state[e.connection_id] == "out"
            state[e.connection_id] = "in"
    started = sum(isinstance(e, ev.ConnectionCheckOutStartedEvent) for e in events)
    assert started == 1800


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_fork_child_resets_without_closing_parent_connections() -> None:
    pool, made, _ = pool_of()
    with pool:
        lease = pool.checkout()
        lease.release()
        read_fd, write_fd = os.pipe()
        with warnings.catch_warnings():  # 3.12+ warns about fork() with threads alive
            warnings.simplefilter("ignore", DeprecationWarning)
            pid = os.fork()
        if pid == 0:  # child
            status = 1
            try:
                os.close(read_fd)
                stats = pool.stats()
                ok = stats.total == 0 and pool.generation == 1 and made[0].closed == 0
                child = pool.checkout()
                ok = ok and child.connection_id == 2
                child.release()
                status = 0 if ok else 2
                os.write(write_fd, b"ok" if ok else repr(stats).encode())
            finally:
                os._exit(status)
        os.close(write_fd)
        _, status = os.waitpid(pid, 0)
        message = os.read(read_fd, 1000)
        os.close(read_fd)
        assert os.waitstatus_to_exitcode(status) == 0, message
        assert made[0].closed == 0 and pool.stats().available == 1


def test_bad_constructor_arguments_name_the_argument() -> None:
    with pytest.raises(TypeError, match="options"):
        poolkit.Pool(lambda ctx: None, options=3)  # type: ignore[call-overload]
    with pytest.raises(TypeError, match="connect"):
        poolkit.Pool("nope")  # type: ignore[call-overload]


def test_closed_pool_refuses_checkout() -> None:
    pool, _, _ = pool_of()
    pool.ready()
    pool.close()
    with pytest.raises(poolkit.PoolClosedError):
        pool.checkout()
    pool.close()


if sys.platform == "win32":  # pragma: no cover
    pytestmark = pytest.mark.skip(reason="POSIX only")


def test_checkin_gets_the_real_time() -> None:
    """A check-in may start a connect (here: for a waiter, after a stale connection is closed);
    its connect timeout must count from the real now, also on an unobserved pool (which skips
    the clock where it safely can)."""
    clock = FakeClock(start=1000.0)
    slow = {"on": False}

    def connect(ctx: poolkit.ConnectContext) -> Conn:
        if slow["on"]:
            clock.sleep(1.0)
        return Conn(ctx.connection_id)

    options = poolkit.PoolOptions(max_size=1, connect_timeout=5)
    pool: poolkit.Pool[Conn] = poolkit.Pool(connect, address="db:1", options=options, clock=clock)
    pool.ready()
    lease = pool.checkout()
    pool.clear()
    pool.ready()
    waiter = Outcome(clock, pool)
    clock.settle()
    slow["on"] = True
    lease.release()  # stale: closed, and a connect starts for the waiter
    clock.advance(1.0)
    clock.settle()
    assert waiter.error is None and waiter.lease is not None
    assert waiter.lease.connection_id == 2
    waiter.lease.release()
    pool.close()


def test_invalid_timeout_fails_even_with_a_connection_available() -> None:
    # unobserved
    pool: poolkit.Pool[Conn] = poolkit.Pool(lambda ctx: Conn(ctx.connection_id), address="db:1")
    with pool:
        pool.checkout().release()
        before = pool.stats()
        with pytest.raises(ValueError, match=r"checkout\(timeout=...\)"):
            pool.checkout(timeout=float("nan"))
        assert pool.stats() == before


def test_an_async_connect_or_probe_is_refused_with_a_clear_error() -> None:
    async def connect(ctx: poolkit.ConnectContext) -> Conn:  # pragma: no cover - never run
        return Conn(ctx.connection_id)

    with pytest.raises(TypeError, match=r"Pool\(connect=...\) must be a plain function"):
        poolkit.Pool(connect, address="db:1")

    async def probe(conn: Conn) -> None:  # pragma: no cover - never run
        pass

    options = poolkit.PoolOptions(keep_alive=poolkit.KeepAlive(10, probe))
    with pytest.raises(TypeError, match=r"keep_alive\.probe must be a plain function for Pool"):
        poolkit.Pool(lambda ctx: Conn(ctx.connection_id), address="db:1", options=options)


def test_a_connect_object_returning_a_coroutine_fails_the_checkout_clearly() -> None:
    class AsyncConnect:  # an async __call__: not told apart before it is called
        async def __call__(self, ctx: poolkit.ConnectContext) -> Conn:  # pragma: no cover
            return Conn(ctx.connection_id)

    clock = FakeClock()
    # (what the connect returns, on purpose: a coroutine)
    pool: poolkit.Pool[Coroutine[Any, Any, Conn]] = poolkit.Pool(
        AsyncConnect(), address="db:1", clock=clock
    )
    with pool:
        with pytest.raises(TypeError, match="returned an awaitable"):
            pool.checkout()
        assert pool.stats().total == 0  # nothing left behind
    clock.settle()
    assert clock.errors == []


def test_a_lease_says_the_address_of_its_pool_masked_and_also_once_given_back() -> None:
    seen: list[str] = []

    def connect(ctx: poolkit.ConnectContext) -> Conn:
        seen.append(ctx.address)
        return Conn(ctx.connection_id)

    with poolkit.Pool(connect, address="postgresql://u:secret@db:5432/x") as pool:
        lease = pool.checkout()
        assert lease.address == pool.address and "secret" not in lease.address
        lease.release()
        assert lease.address == pool.address
    assert seen == ["postgresql://u:secret@db:5432/x"]  # (the connect function sees it whole)


def test_a_pool_dropped_unclosed_is_collected_and_its_timer_thread_ends() -> None:
    """A ``Pool`` that its user drops without ``close()`` is collected (with the connections it
    holds, as psycopg_pool's), and its timer thread ends: the thread holds the pool only while it
    fires, and ends at its next look. Integration: real threads, bounded waits."""

    def connect(ctx: poolkit.ConnectContext) -> Conn:
        return Conn(ctx.connection_id)

    options = poolkit.PoolOptions(max_size=1, max_idle_time=600.0)
    pool: poolkit.Pool[Conn] = poolkit.Pool(connect, address="db:dropped", options=options)
    pool.ready()
    pool.checkout().release()
    (timer,) = [t for t in threading.enumerate() if t.name == "poolkit-timer-db:dropped"]
    ref = weakref.ref(pool)
    del pool
    gc.collect()
    timer.join(8.0)  # (its longest wait between two looks is 5 s)
    assert ref() is None, "the pool was kept alive"
    assert not timer.is_alive(), "the timer thread of a collected pool runs on"
