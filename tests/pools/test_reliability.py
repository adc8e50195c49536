"""Issue 14's defects, one test each (each failed before its fix): what testing as users would
found in the front ends."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import inspect
import logging
import os
import warnings
from typing import Any

import pytest
import trio

import poolkit
from doubles import Conn
from frontends import Front, ThreadFront, TrioFront, drive
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
        pool: poolkit.AsyncPool[RedisLikeConn] = poolkit.AsyncPool(
            connect, options=poolkit.PoolOptions(min_size=2)
        )
        async with pool:
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
        pool: poolkit.AsyncPool[None] = poolkit.AsyncPool(connect, options=options)
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


def test_cancelled_close_still_closes_every_connection() -> None:
    # Issue 14, defect 2: cancelling the task running ``await pool.close()`` at its first await
    # left 3 of 3 connections open (the gather of the close tasks was cancelled with it).
    made: list[Conn] = []

    class SlowClose(Conn):
        async def close(self) -> None:  # type: ignore[override]
            await asyncio.sleep(0.5)
            self.closed += 1

    async def connect(ctx: poolkit.ConnectContext) -> Conn:
        made.append(SlowClose(ctx.connection_id))
        return made[-1]

    async def main() -> None:
        for stop in ("cancel", "timeout"):
            made.clear()
            pool: poolkit.AsyncPool[Conn] = poolkit.AsyncPool(
                connect, options=poolkit.PoolOptions(min_size=3)
            )
            pool.ready()
            await asyncio.sleep(0.1)
            assert pool.stats().available == 3
            if stop == "cancel":
                task = asyncio.ensure_future(pool.close())
                await asyncio.sleep(0)  # close() runs to its first await
                task.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await task
            else:
                with pytest.raises(TimeoutError):
                    async with asyncio.timeout(0.1):
                        await pool.close()
            assert [c.closed for c in made] == [0, 0, 0]  # still closing
            await pool.close()  # waits for the same work
            assert [c.closed for c in made] == [1, 1, 1]
            assert [t for t in asyncio.all_tasks() if t is not asyncio.current_task()] == []

    run(main())


def test_request_book_is_changed_under_the_pool_lock() -> None:
    # Issue 14, defect 3: a completion struck the request's entry from the book outside the lock,
    # so an id reused at once could lose its entry and cancel_request missed a waiting request.
    import threading

    from poolkit._core import PoolCore, StartConnect
    from poolkit._requests import RequestBook

    class Req:
        def __init__(self, rid: int) -> None:
            self.id = rid
            self.results: list[Any] = []

        def complete(self, result: Any) -> None:
            self.results.append(result)

    lock = threading.Lock()
    book = RequestBook(lock)
    core = PoolCore(poolkit.PoolOptions(max_size=1, min_size=1), "db:1")
    core.ready(0.0)
    (start,) = core.take()[0]
    assert isinstance(start, StartConnect)
    core.connected(start.conn, 0.0, Conn(1))
    core.take()
    holder = core.fast.lease_idle(0.0)
    assert holder is not None
    first = Req(7)
    with lock:
        assert book.enqueue(core, [first], 0.0, None, lambda conn: conn) == []
        req = book._waiting[7][0]
        assert core.fast.release_idle(holder) is req  # served: its completion is due
    done = threading.Event()
    with lock:  # the front end holds the lock while the id is reused at once
        # (ignore: the lambda's tuple only makes two calls in one expression)
        threading.Thread(target=lambda: (req.owner(), done.set())).start()  # type: ignore[func-returns-value]
        assert not done.wait(0.2), "the completion changed the book without the lock"
        second = Req(7)
        book.check_free([second], "test")
        book.enqueue(core, [second], 0.0, None, lambda conn: conn)  # waits: the one is out
    assert done.wait(5)
    assert first.results == [holder] and second.results == []
    with lock:
        assert book.cancel(core, 7, 1.0) is second  # still found: its entry was kept


def test_a_pool_call_returns_after_its_events_are_delivered() -> None:
    # Issue 14, defect 4: a flush that found the queue empty returned at once, though another
    # thread had taken this call's events off it and was still delivering them.
    import threading

    seen: list[str] = []
    first_gate, second_gate, closing = threading.Event(), threading.Event(), threading.Event()
    close_gate, at_second = threading.Event(), threading.Event()

    class GatedClose(Conn):
        def close(self) -> None:
            closing.set()
            assert close_gate.wait(5)
            super().close()

    def listener(event: Any) -> None:
        if isinstance(event, poolkit.events.PoolClearedEvent):
            assert first_gate.wait(5)  # thread A delivers slowly...
        if isinstance(event, poolkit.events.ConnectionClosedEvent):
            at_second.set()
            assert second_gate.wait(5)  # ...and takes thread B's event too
        seen.append(type(event).__name__)

    pool: poolkit.Pool[GatedClose] = poolkit.Pool(
        lambda ctx: GatedClose(ctx.connection_id), listeners=[listener]
    )
    pool.ready()
    lease = pool.checkout()
    a = threading.Thread(target=pool.clear)  # A: delivering, blocked in the listener
    a.start()
    b_done = threading.Event()

    def b() -> None:
        lease.discard()  # B: its events queued, then its close runs (blocked)
        b_done.set()

    threading.Thread(target=b).start()
    assert closing.wait(5)
    first_gate.set()  # A goes on and takes B's events off the queue
    assert at_second.wait(5)
    close_gate.set()  # B's close returns: its flush must wait for A to deliver them
    assert not b_done.wait(0.3), "discard() returned before its events were delivered"
    second_gate.set()
    assert b_done.wait(5)
    assert "ConnectionClosedEvent" in seen
    a.join(5)
    pool.close()


def test_huge_durations_do_not_kill_the_threaded_timer() -> None:
    # Issue 14, defect 14: a deadline of 1e10 s raised OverflowError in the timer thread, which
    # died: no deadline fired any more and a checkout with timeout=0.2 blocked for ever.
    import threading
    import time

    options = poolkit.PoolOptions(max_size=1, background_interval=1e10)
    pool: poolkit.Pool[Conn] = poolkit.Pool(lambda ctx: Conn(ctx.connection_id), options=options)
    with pool:
        lease = pool.checkout()
        waiting = threading.Thread(target=lambda: pool.checkout(timeout=1e10).release())
        waiting.start()
        while pool.stats().waiting < 1:
            time.sleep(0.01)
        with pytest.raises(poolkit.WaitQueueTimeoutError):
            pool.checkout(timeout=0.2)
        assert [t for t in threading.enumerate() if t.name.startswith("poolkit-timer")]
        lease.release()
        waiting.join(5)


def test_hand_off_waits_are_bounded_without_stats() -> None:
    # Issue 14, defect 18: each contended fast hand-off appended its wait to a deque only stats()
    # drained: memory grew without bound in a pool whose statistics are never read.
    import threading

    pool: poolkit.Pool[Conn] = poolkit.Pool(
        lambda ctx: Conn(ctx.connection_id), options=poolkit.PoolOptions(max_size=1)
    )
    with pool:

        def work() -> None:
            for _ in range(3000):
                pool.checkout().release()

        threads = [threading.Thread(target=work) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(pool._handoff_waits) <= 256
        stats = pool.stats()
        assert stats.checkouts == 12000 and stats.waits > 0


def test_an_async_pool_refuses_a_second_event_loop_clearly() -> None:
    # Issue 14, defect 8: raw asyncio errors ("attached to a different loop", "Event loop is
    # closed") and a "coroutine was never awaited" warning (an error here).
    made: list[Conn] = []

    async def connect(ctx: poolkit.ConnectContext) -> Conn:
        made.append(Conn(ctx.connection_id))
        return made[-1]

    pool: poolkit.AsyncPool[Conn] = poolkit.AsyncPool(
        connect, options=poolkit.PoolOptions(max_size=2)
    )
    kept: list[poolkit.Lease[Conn]] = []

    async def first() -> None:
        pool.ready()
        kept.append(await pool.checkout())  # stays out: the next checkout must connect

    async def second() -> None:
        before = pool.stats()
        rule = "belongs to the event loop it first ran on"
        with pytest.raises(RuntimeError, match=rule):
            await pool.checkout()
        with pytest.raises(RuntimeError, match=rule):
            pool.clear()
        with pytest.raises(RuntimeError, match=rule):
            await pool.close()
        assert pool.stats() == before

    asyncio.run(first())
    asyncio.run(second())
    assert len(made) == 1


def test_a_connect_thread_that_cannot_start_is_a_failed_connect(monkeypatch: Any) -> None:
    # Issue 14, defect 19: the checkout got the error, but the pool kept the connect pending for
    # ever: the next checkout timed out although a connection came back.
    import poolkit.threaded as io

    real = io._start_daemon
    refuse = [True]

    def start(target: Any, name: str) -> None:
        if name.startswith("poolkit-connect-") and len(made) == 1 and refuse:
            refuse.clear()
            raise RuntimeError("can't start new thread")
        real(target, name)

    monkeypatch.setattr(io, "_start_daemon", start)
    made: list[Conn] = []

    def connect(ctx: poolkit.ConnectContext) -> Conn:
        made.append(Conn(ctx.connection_id))
        return made[-1]

    pool: poolkit.Pool[Conn] = poolkit.Pool(connect, options=poolkit.PoolOptions(max_size=2))
    with pool:
        lease = pool.checkout(timeout=5)
        with pytest.raises(RuntimeError, match="can't start new thread"):
            pool.checkout(timeout=5)
        stats = pool.stats()
        assert (stats.pending, stats.in_use, stats.connect_failures) == (0, 1, 1)
        lease.release()
        pool.checkout(timeout=5).release()
        pool.checkout(timeout=5).release()
    assert [c.closed for c in made] == [1]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_leases_from_before_a_fork_are_foreign_to_the_child() -> None:
    # Issue 14, defect 15: released in the child, a lease from before the fork raised KeyError
    # from the core; collected there, it killed the timer thread, and the child's next
    # checkout blocked for ever.
    made: list[Conn] = []

    def connect(ctx: poolkit.ConnectContext) -> Conn:
        made.append(Conn(ctx.connection_id))
        return made[-1]

    pool: poolkit.Pool[Conn] = poolkit.Pool(connect, options=poolkit.PoolOptions(max_size=3))
    with pool:
        released, collected, discarded = pool.checkout(), pool.checkout(), pool.checkout()
        read_fd, write_fd = os.pipe()
        with warnings.catch_warnings():  # 3.12+ warns about fork() with threads alive
            warnings.simplefilter("ignore", DeprecationWarning)
            pid = os.fork()
        if pid == 0:  # the child
            status, report = 1, b""
            try:
                os.close(read_fd)
                released.release()
                discarded.discard()
                del collected
                gc.collect()
                lease = pool.checkout(timeout=2)  # a connection of the child's own
                ok = lease.connection_id == 4 and [c.closed for c in made] == [0, 0, 0, 0]
                lease.release()
                stats = pool.stats()
                ok = ok and (stats.total, stats.in_use, stats.available) == (1, 0, 1)
                status, report = (0, b"ok") if ok else (2, repr((made, stats)).encode())
            except BaseException as exc:
                report = repr(exc).encode()
            finally:
                os.write(write_fd, report)
                os._exit(status)
        os.close(write_fd)
        _, status = os.waitpid(pid, 0)
        message = os.read(read_fd, 10000)
        os.close(read_fd)
        assert os.waitstatus_to_exitcode(status) == 0, message
        assert [c.closed for c in made] == [0, 0, 0]  # the parent's are untouched
        for lease in (released, collected, discarded):
            lease.release()
    assert [c.closed for c in made] == [1, 1, 1]


def test_a_lease_collected_after_close_is_closed_at_once(front_kind: str) -> None:
    # Issue 14, defect 16: the closed pool had no next step, so the connection stayed open and
    # in use for ever.
    async def scenario(f: Front) -> None:
        lease = await f.lease()
        await f.close()
        assert f.pool.stats().in_use == 1 and f.made[0].closed == 0
        with warnings.catch_warnings():  # (the pool's warning about the leak: logged, not raised)
            del lease
            gc.collect()
        await f.settle()
        assert f.made[0].closed == 1
        assert f.pool.stats().in_use == 0 and f.pool.stats().total == 0
        assert [e.collected for e in f.of(poolkit.events.LeaseLeakedEvent)] == [True]

    drive(front_kind, scenario)


def test_abandoned_connects_count_against_the_limits_until_they_return(front_kind: str) -> None:
    # Issue 14, defect 20: against a server whose handshake takes 0.5 s, connect_timeout=0.05
    # let a Pool of max_size=2 reach 21 connects in flight: each connect it gave up on kept its
    # thread and socket while the pool started another.
    async def scenario(f: Front) -> None:
        running = [0]
        connect = f.pool._connect
        if isinstance(f, ThreadFront):

            def counted(ctx: poolkit.ConnectContext) -> Any:
                running[0] += 1
                try:
                    return connect(ctx)
                finally:
                    running[0] -= 1
        else:

            async def counted(ctx: poolkit.ConnectContext) -> Any:  # type: ignore[misc]
                running[0] += 1
                try:
                    return await connect(ctx)
                finally:  # (a cancelled connect has ended too)
                    running[0] -= 1

        f.pool._connect = counted
        f.connect_delay = 0.5
        waiters = [f.start(timeout=2.0) for _ in range(5)]
        most = 0
        for _ in range(60):
            await f.advance(0.05)
            in_flight = running[0]
            most = max(most, in_flight)
            stats = f.pool.stats()
            assert in_flight <= 2 and stats.total + stats.abandoned <= 2, (in_flight, stats)
        assert most == 2  # (the limit is reached: the test does test something)
        assert all(w.done for w in waiters)
        assert all(c.closed == 1 for c in f.made)  # what came back late was closed
        assert f.pool.stats().abandoned == 0

    drive(front_kind, scenario, max_size=2, connect_timeout=0.05)


def test_background_connect_failures_are_warned_once_per_run(
    front_kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    # Issue 14, defect 10: with min_size=2 and a failing connect, six attempts in 2.5 s logged
    # nothing above DEBUG.
    caplog.set_level(logging.INFO, logger="poolkit.pool")

    async def scenario(f: Front) -> None:
        f.connect_errors = [ConnectionRefusedError("down")] * 6
        f.pool.ready()
        for _ in range(6):
            await f.advance(0.5)  # background runs retry min_size
        assert f.pool.stats().connect_failures == 6 and f.pool.stats().total == 2
        records = [(r.levelno, r.getMessage()) for r in caplog.records]
        warned = [m for level, m in records if level == logging.WARNING]
        assert len(warned) == 1 and "failing" in warned[0] and "down" in warned[0], records
        told = [m for level, m in records if level == logging.INFO]
        assert len(told) == 1 and "succeed again, after 6 failures" in told[0], records
        assert len(f.of(poolkit.events.ConnectFailingEvent)) == 1
        # a new run of failures is warned again
        caplog.clear()
        f.connect_errors = [ConnectionRefusedError("down again")] * 2
        for conn_id in [c.id for c in f.made]:
            f.pool.connection_will_close(conn_id)
        for _ in range(4):
            await f.advance(0.5)
        warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert len(warned) == 1 and "down again" in warned[0]

    drive(front_kind, scenario, ready=False, min_size=2, background_interval=0.5)


def test_connects_failing_unseen_are_not_warned_of_when_the_pool_says_so(
    front_kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    # PoolOptions(warn_connects_failing=False), the psycopg_pool drop-ins' (they log each failed
    # connect themselves): no warning on poolkit.pool; listeners still get the
    # event, and the CMAP debug log still has it.
    caplog.set_level(logging.DEBUG, logger="poolkit")

    async def scenario(f: Front) -> None:
        f.connect_errors = [ConnectionRefusedError("down")] * 3
        f.pool.ready()
        for _ in range(3):
            await f.advance(0.5)
        assert f.pool.stats().connect_failures == 3
        assert len(f.of(poolkit.events.ConnectFailingEvent)) == 1
        warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert warned == [], warned
        debug = [r.getMessage() for r in caplog.records if r.name == "poolkit.connection"]
        assert any(m.startswith("ConnectFailingEvent") for m in debug), debug

    drive(
        front_kind,
        scenario,
        ready=False,
        min_size=2,
        background_interval=0.5,
        warn_connects_failing=False,
    )


SECRET_ADDRESS = "user:s3cr3t@host:27017"


def _shown(obj: Any) -> str:
    """Everything a user or a log may see of ``obj``."""
    parts = [str(obj), repr(obj)]
    if isinstance(obj, BaseException):
        parts += [*getattr(obj, "__notes__", []), repr(vars(obj))]
    return " ".join(parts)


def test_a_password_in_the_address_is_never_shown(
    front_kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    # Issue 14, defect 7: with address="user:s3cr3t@host:27017" the password appeared in 47
    # places: reprs of the pool and its leases, every event, the CMAP log records, errors.
    caplog.set_level(logging.DEBUG, logger="poolkit")
    events: list[Any] = []
    seen: list[str] = []
    told: list[str] = []
    options = poolkit.PoolOptions(max_size=1, wait_queue_timeout=0.01)

    def check(pool: Any, lease: Any, errors: list[BaseException]) -> None:
        seen.extend([_shown(pool), _shown(lease), pool.address, _shown(pool.stats())])
        seen.extend(_shown(e) for e in events + errors)
        seen.extend(r.getMessage() + repr(getattr(r, "cmap", "")) for r in caplog.records)
        assert pool.address == "user:***@host:27017"
        assert told and all(address == SECRET_ADDRESS for address in told)  # it connects
        assert all("s3cr3t" not in text for text in seen), [t for t in seen if "s3cr3t" in t]

    errors: list[BaseException] = []
    if front_kind == "threads":

        def connect(ctx: poolkit.ConnectContext) -> Conn:
            told.append(ctx.address)
            seen.append(repr(ctx))
            return Conn(ctx.connection_id)

        pool: poolkit.Pool[Conn] = poolkit.Pool(
            connect, address=SECRET_ADDRESS, options=options, listeners=[events.append]
        )
        for call in (pool.checkout, pool.clear):
            try:
                call()
            except poolkit.PoolError as exc:
                errors.append(exc)
        pool.ready()
        lease = pool.checkout()
        try:
            pool.checkout()
        except poolkit.PoolError as exc:
            errors.append(exc)
        lease.release()
        try:
            lease.release()
        except poolkit.PoolError as exc:
            errors.append(exc)
        pool.close()
        try:
            pool.checkout()
        except poolkit.PoolError as exc:
            errors.append(exc)
        check(pool, lease, errors)
        return

    async def aconnect(ctx: poolkit.ConnectContext) -> Conn:
        told.append(ctx.address)
        seen.append(repr(ctx))
        return Conn(ctx.connection_id)

    async def main() -> None:
        pool: poolkit.AsyncPool[Conn] = poolkit.AsyncPool(
            aconnect, address=SECRET_ADDRESS, options=options, listeners=[events.append]
        )
        try:
            await pool.checkout()
        except poolkit.PoolError as exc:
            errors.append(exc)
        pool.ready()
        lease = await pool.checkout()
        try:
            await pool.checkout()
        except poolkit.PoolError as exc:
            errors.append(exc)
        lease.release()
        try:
            lease.release()
        except poolkit.PoolError as exc:
            errors.append(exc)
        await pool.close()
        try:
            await pool.checkout()
        except poolkit.PoolError as exc:
            errors.append(exc)
        check(pool, lease, errors)

    run(main())


def test_redact_masks_only_a_password() -> None:
    from poolkit._frontend import redact

    assert redact("host:27017") == "host:27017"
    assert redact("user@host:27017") == "user@host:27017"
    assert redact("user:pw@host:1") == "user:***@host:1"
    assert redact("mongodb://u:p@w@h1,h2/db?x=1") == "mongodb://u:***@h1,h2/db?x=1"
    assert redact("postgresql://me:secret@db:5432/app") == "postgresql://me:***@db:5432/app"


def test_huge_durations_work_on_the_asyncio_pool_too() -> None:
    async def connect(ctx: poolkit.ConnectContext) -> Conn:
        return Conn(ctx.connection_id)

    async def main() -> None:
        options = poolkit.PoolOptions(max_size=1, background_interval=1e10)
        pool: poolkit.AsyncPool[Conn] = poolkit.AsyncPool(connect, options=options)
        async with pool:
            lease = await pool.checkout()
            far = asyncio.ensure_future(pool.checkout(timeout=1e10))
            await asyncio.sleep(0)
            with pytest.raises(poolkit.WaitQueueTimeoutError):
                await pool.checkout(timeout=0.2)
            lease.release()
            (await far).release()

    asyncio.run(main())


def test_a_connect_that_never_returns_holds_its_slot_for_a_while_not_for_good(
    front_kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    # Issue 24, defect 3: a psycopg connect stuck for good (on a descriptor another thread had
    # closed under it) was abandoned at connect_timeout but counted against max_size until its
    # function returned, which was never: the pool was dead for good. Now an abandoned connect is
    # lost lost_after() after it started (a minute here): it counts no more, with a warning.
    async def scenario(f: Front) -> None:
        connect = f.pool._connect
        stuck = [True]
        if isinstance(f, ThreadFront):

            def hanging(ctx: poolkit.ConnectContext) -> Any:
                if stuck[0]:
                    stuck[0] = False
                    f.clock.sleep(10_000)
                return connect(ctx)
        elif isinstance(f, TrioFront):

            async def hanging(ctx: poolkit.ConnectContext) -> Any:  # type: ignore[misc]
                if stuck[0]:
                    stuck[0] = False
                    with trio.CancelScope(shield=True):  # (it ignores its cancel)
                        await trio.sleep(10_000)
                return await connect(ctx)
        else:

            async def hanging(ctx: poolkit.ConnectContext) -> Any:  # type: ignore[misc]
                if stuck[0]:
                    stuck[0] = False
                    with contextlib.suppress(asyncio.CancelledError):  # (it ignores its cancel)
                        await asyncio.sleep(10_000)
                    await asyncio.sleep(10_000)
                return await connect(ctx)

        f.pool._connect = hanging
        first = f.start(timeout=5)
        await f.advance(2.5)
        assert isinstance(first.error, poolkit.ConnectTimeoutError)
        assert f.pool.stats().abandoned == 1
        second = f.start(timeout=5)
        await f.advance(5)
        assert isinstance(second.error, poolkit.WaitQueueTimeoutError)  # its slot is held
        assert f.pool.stats().connect_attempts == 1
        await f.advance(60 - 7.5)
        stats = f.pool.stats()
        assert stats.abandoned == 0
        (lost,) = f.of(poolkit.events.ConnectLostEvent)
        assert lost.connection_id == 1 and lost.running_for == pytest.approx(60.0)
        assert "has not returned in 60.000 s" in caplog.text
        lease = await f.lease(timeout=5)  # the pool connects again
        assert lease.connection_id == 2
        lease.release()
        if isinstance(f, ThreadFront):  # the lost connect returns at last: what it made is closed
            await f.advance(10_000)
            assert {c.id: c.closed for c in f.made} == {1: 1, 2: 0}

    with caplog.at_level(logging.WARNING, logger="poolkit.pool"):
        drive(front_kind, scenario, max_size=1, connect_timeout=2.0)
