"""``AsyncPool`` under trio (issue 41): cancellation as trio means it, structured concurrency,
the trio clock, and the asyncio paths left without trio.

Every run is on trio's ``MockClock`` (``frontends.run_trio``): virtual time that jumps to the
next deadline when every task is blocked, and a deadlock fails the run at once.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import trio

import poolkit
from frontends import run_trio
from poolkit import _trio
from poolkit import events as ev


class Session:
    """A connection whose close is async and takes ``close_delay`` seconds of trio time."""

    close_delay = 0.0

    def __init__(self, cid: int) -> None:
        self.id = cid
        self.closed = 0

    async def aclose(self) -> None:
        if self.close_delay:
            await trio.sleep(self.close_delay)
        self.closed += 1


class World:
    """A pool under trio, the sessions its connect made and the events it emitted."""

    def __init__(self, *, connect_delay: float = 0.0, **options: Any) -> None:
        self.made: list[Session] = []
        self.events: list[ev.PoolEvent] = []
        self.connect_delay = connect_delay

        async def connect(ctx: poolkit.ConnectContext) -> Session:
            if self.connect_delay:
                await trio.sleep(self.connect_delay)
            self.made.append(Session(ctx.connection_id))
            return self.made[-1]

        self.pool: poolkit.AsyncPool[Session] = poolkit.AsyncPool(
            connect,
            address="db:1",
            options=poolkit.PoolOptions(**options),
            listeners=[self.events.append],
        )

    def count(self, kind: type[ev.PoolEvent]) -> int:
        return sum(isinstance(e, kind) for e in self.events)

    def check_settled(self) -> None:
        """Nobody waits, nothing is in use, and the counts add up."""
        s = self.pool.stats()
        assert (s.waiting, s.in_use) == (0, 0), s
        assert s.total == s.available + s.pending + s.in_use + s.backing_off, s
        started = self.count(ev.ConnectionCheckOutStartedEvent)
        ended = self.count(ev.ConnectionCheckedOutEvent) + self.count(
            ev.ConnectionCheckOutFailedEvent
        )
        assert started == ended  # every checkout that began ended once
        assert self.count(ev.ConnectionCheckedOutEvent) == self.count(ev.ConnectionCheckedInEvent)

    def check_closed(self) -> None:
        """After the pool's block: every connection made was closed exactly once."""
        assert [s.closed for s in self.made] == [1] * len(self.made)
        assert self.pool.stats().total == 0


def on_trio(main: Callable[[], Awaitable[None]]) -> None:
    run_trio(main)


async def settle() -> None:
    for _ in range(50):
        await trio.lowlevel.checkpoint()


# ---------------------------------------------------------------------- checkout, cancelled


@pytest.mark.parametrize("how", ["move_on_after", "cancel_scope.cancel", "fail_after"])
def test_a_cancelled_waiting_checkout_leaves_no_lease_and_no_waiter(how: str) -> None:
    world = World(max_size=1)
    pool = world.pool

    async def main() -> None:
        async with pool:
            held = await pool.checkout()
            if how == "move_on_after":
                with trio.move_on_after(2) as scope:
                    await pool.checkout()
                assert scope.cancelled_caught and trio.current_time() == 2
            elif how == "fail_after":
                with pytest.raises(trio.TooSlowError):
                    with trio.fail_after(2):
                        await pool.checkout()
            else:
                async with trio.open_nursery() as nursery:
                    cancel = trio.CancelScope()

                    async def waiter() -> None:
                        with cancel:
                            await pool.checkout()

                    nursery.start_soon(waiter)
                    await settle()
                    assert pool.stats().waiting == 1
                    cancel.cancel()
            assert pool.stats().waiting == 0
            assert pool.stats().checkout_failures == {"cancelled": 1}
            held.release()
            assert pool.stats().available == 1  # not handed to the cancelled waiter
            world.check_settled()
            (await pool.checkout()).release()  # the next checkout still works
        world.check_closed()

    on_trio(main)


def test_a_checkout_cancelled_after_it_was_handed_the_connection_gives_it_back() -> None:
    # the waiter's scope is cancelled, then (same step, before the waiter resumes) a release
    # hands it the connection: the checkout raises Cancelled and gives the connection back
    world = World(max_size=1)
    pool = world.pool

    async def main() -> None:
        async with pool:
            held = await pool.checkout()
            cancel = trio.CancelScope()
            got: list[Any] = []
            async with trio.open_nursery() as nursery:

                async def waiter() -> None:
                    with cancel:
                        got.append(await pool.checkout())

                nursery.start_soon(waiter)
                await settle()
                cancel.cancel()
                held.release()  # handed to the waiter, whose task was cancelled already
            assert got == [] and cancel.cancelled_caught
            stats = pool.stats()
            assert (stats.available, stats.in_use, stats.waiting) == (1, 0, 0)
            world.check_settled()
        world.check_closed()

    on_trio(main)


def test_a_checkout_waiting_for_a_connect_cancelled_leaves_the_connect_running() -> None:
    world = World(max_size=1, connect_delay=5)
    pool = world.pool

    async def main() -> None:
        async with pool:
            with trio.move_on_after(1):
                await pool.checkout()
            assert pool.stats().pending == 1  # the connect goes on, for the next checkout
            lease = await pool.checkout()
            assert trio.current_time() == 5 and lease.connection_id == 1
            lease.release()
            world.check_settled()
        world.check_closed()

    on_trio(main)


# ---------------------------------------------------------------------- a block, cancelled


@pytest.mark.parametrize("cancel_safe", [False, True], ids=["discarded", "cancel-safe"])
def test_a_block_cancelled_while_holding_gives_the_connection_back_once(
    cancel_safe: bool,
) -> None:
    world = World(max_size=1, hooks=poolkit.Hooks(cancel_safe=cancel_safe))
    pool = world.pool

    async def main() -> None:
        async with pool:
            with trio.move_on_after(3):
                async with pool.connection() as session:
                    await trio.sleep_forever()
            assert world.count(ev.ConnectionCheckedInEvent) == 1  # given back once
            stats = pool.stats()
            if cancel_safe:
                assert (stats.available, stats.total) == (1, 1)
                assert session.closed == 0
            else:  # mid-protocol, maybe: discarded
                assert (stats.available, stats.total) == (0, 0)
                await settle()
                assert session.closed == 1
            world.check_settled()
        world.check_closed()

    on_trio(main)


# ---------------------------------------------------------------------- close


def test_close_in_a_cancelled_scope_still_closes_every_connection() -> None:
    world = World(max_size=3, min_size=3)
    Session.close_delay = 1.0
    pool = world.pool

    async def main() -> None:
        with trio.CancelScope() as scope:
            async with pool:
                await settle()
                assert pool.stats().available == 3
                scope.cancel()
                await trio.sleep(10)  # (raises Cancelled: the block's exit closes the pool)
        assert trio.current_time() == 1  # the async closes ran, shielded
        world.check_closed()

    try:
        on_trio(main)
    finally:
        Session.close_delay = 0.0


def test_close_is_bounded_by_close_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_trio, "CLOSE_TIMEOUT", 5.0)
    cut: list[bool] = []
    world = World(max_size=1)
    pool = world.pool

    async def main() -> None:
        async with pool:
            lease = await pool.checkout()
            session = lease.connection

            async def hangs() -> None:
                try:
                    await trio.sleep(1000)  # (for good, but not forever: a test that fails fast)
                except trio.Cancelled:
                    cut.append(True)
                    raise

            session.aclose = hangs  # type: ignore[method-assign]
            lease.release()
        assert trio.current_time() == 5.0 and cut == [True]

    on_trio(main)


# ---------------------------------------------------------------------- structured concurrency


def test_no_task_of_the_pool_outlives_its_block() -> None:
    world = World(max_size=4, min_size=2, connect_delay=10)
    pool = world.pool

    async def main() -> None:
        async with pool:
            await trio.sleep(1)
            assert pool.stats().pending == 2  # connects in flight at the block's end
            children = trio.lowlevel.current_task().child_nurseries
            assert len(children) == 1  # the pool's nursery, the block's own
        assert trio.lowlevel.current_task().child_nurseries == []
        assert pool._trio is not None and pool._trio._tasks == set()
        assert trio.current_time() == 1  # the connects were cancelled, not awaited
        assert pool.stats().total == 0 and world.made == []

    on_trio(main)


def test_a_trio_user_without_async_with_is_told_at_the_call() -> None:
    async def connect(ctx: poolkit.ConnectContext) -> Session:
        return Session(ctx.connection_id)

    async def main() -> None:
        pool = poolkit.AsyncPool(connect)
        with pytest.raises(RuntimeError, match=r"AsyncPool\.ready\(\) under trio.*async with pool"):
            pool.ready()
        with pytest.raises(RuntimeError, match=r"AsyncPool\.checkout\(\) under trio"):
            await pool.checkout(timeout=0)
        assert pool.stats().state is poolkit.PoolState.PAUSED
        await pool.close()  # (allowed: nothing to close)
        async with poolkit.AsyncPool(connect) as used:
            pass
        with pytest.raises(RuntimeError, match=r"has ended"):
            used.ready()
        with pytest.raises(RuntimeError, match="may be entered once"):
            async with used:
                pass

    on_trio(main)


def test_a_user_error_leaves_the_block_as_it_came() -> None:
    # (not wrapped in an ExceptionGroup by the pool's nursery)
    world = World(max_size=1)

    async def main() -> None:
        caught: list[BaseException] = []
        try:
            async with world.pool as pool, pool.connection():
                raise ValueError("the user's")
        except BaseException as exc:  # (pytest.raises would accept a group holding it)
            caught.append(exc)
        assert type(caught[0]) is ValueError and str(caught[0]) == "the user's"
        world.check_closed()

    on_trio(main)


def test_a_pool_belongs_to_one_trio_run() -> None:
    world = World(max_size=1)

    async def first() -> None:
        async with world.pool.running(ready=False):
            await trio.lowlevel.checkpoint()
            await second_run_refused()

    async def second_run_refused() -> None:
        def other() -> None:
            async def use() -> None:
                world.pool.clear()

            trio.run(use)

        with pytest.raises(RuntimeError, match="runs in the trio run it first ran in"):
            await trio.to_thread.run_sync(other)

    on_trio(first)


# ---------------------------------------------------------------------- time


def test_wait_queue_timeout_and_idle_times_are_trio_time() -> None:
    world = World(max_size=1, wait_queue_timeout=2.5, max_idle_time=30.0, background_interval=1)
    pool = world.pool

    async def main() -> None:
        async with pool:
            held = await pool.checkout()
            with pytest.raises(poolkit.WaitQueueTimeoutError):
                await pool.checkout()
            assert trio.current_time() == 2.5
            held.release()
            await trio.sleep(29)
            assert pool.stats().available == 1
            await trio.sleep(2)  # perished at 32.5, closed by the next background run
            assert pool.stats().total == 0
            assert world.made[0].closed == 1
            assert [e.reason for e in world.events if isinstance(e, ev.ConnectionClosedEvent)] == [
                "idle"
            ]

    on_trio(main)


def test_on_trios_own_clock_the_pool_times_as_trio_does() -> None:
    # (real time, bounded: the pool reads time.perf_counter and hands trio its deadlines plus
    # the clock's offset; without it a deadline would be hours in trio's past, and fire at once)
    async def connect(ctx: poolkit.ConnectContext) -> Session:
        return Session(ctx.connection_id)

    async def main() -> None:
        options = poolkit.PoolOptions(max_size=1)
        with trio.fail_after(30):
            await timed(options)

    async def timed(options: poolkit.PoolOptions) -> None:
        async with poolkit.AsyncPool(connect, options=options) as pool:
            assert pool._trio is not None and pool._trio.system_clock
            held = await pool.checkout()
            started = trio.current_time()
            with pytest.raises(poolkit.WaitQueueTimeoutError):
                await pool.checkout(timeout=0.05)
            waited = trio.current_time() - started
            assert 0.05 <= waited < 5.0, waited
            held.release()

    trio.run(main)


# ---------------------------------------------------------------------- asyncio without trio


def test_the_asyncio_paths_do_not_import_trio() -> None:
    code = textwrap.dedent(
        """
        import asyncio, sys
        import poolkit, poolkit.asyncio, poolkit.threaded

        class C:
            def close(self):
                pass

        async def connect(ctx):
            return C()

        async def main():
            async with poolkit.AsyncPool(connect) as pool:
                async with pool.connection():
                    pass
                (await pool.checkout()).release()

        asyncio.run(main())
        assert "trio" not in sys.modules and "poolkit._trio" not in sys.modules, "imported"
        """
    )
    done = subprocess.run(
        [sys.executable, "-W", "error", "-c", code], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr


class SyncClosable(Session):
    """A connection with a plain ``close()`` beside its async ``aclose()``."""

    def close(self) -> None:
        self.closed += 1


@pytest.mark.parametrize("kind", ["async only", "plain close too"])
def test_a_lease_given_back_after_the_block_is_closed_or_says_why_not(kind: str) -> None:
    """After the pool's block (no nursery left to await a close in): a connection with a plain
    ``close()`` is closed with it at once; one whose close is async only is left open, and the
    call that gave it back raises ``RuntimeError`` saying so, the pool's books and events done."""
    made: list[Session] = []
    events: list[ev.PoolEvent] = []

    async def connect(ctx: poolkit.ConnectContext) -> Session:
        made.append((Session if kind == "async only" else SyncClosable)(ctx.connection_id))
        return made[-1]

    async def main() -> None:
        pool = poolkit.AsyncPool(connect, address="db:1", listeners=[events.append])
        async with pool:
            lease = await pool.checkout()
        assert made[0].closed == 0  # (still out when the block ended)
        if kind == "async only":
            with pytest.raises(RuntimeError, match=r"given back after the pool's `async with`"):
                lease.release()
            assert made[0].closed == 0
        else:
            lease.release()
            assert made[0].closed == 1
        stats = pool.stats()
        assert (stats.in_use, stats.total) == (0, 0)
        assert isinstance(events[-1], ev.ConnectionClosedEvent)
        assert any(isinstance(e, ev.ConnectionCheckedInEvent) for e in events)
        with pytest.raises(poolkit.InvalidLeaseError):  # (given back: once)
            lease.release()

    run_trio(main)
