"""``AsyncPool`` under anyio (issue 41), on both of its backends: asyncio (the pool binds to the
loop) and trio (the pool binds to the trio run). anyio's cancel scopes (``fail_after``,
``move_on_after``, a task group's cancellation) leave no lease and no waiter behind, and a block
they cancel gives its connection back exactly once. On asyncio anyio cancels a task again at
each of its awaits until it leaves the scope: the checkout copes.

Time is virtual on both: ``poolkit.testing.VirtualTimeLoop`` for asyncio, trio's ``MockClock``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import pytest
import trio.testing

import poolkit
from poolkit import events as ev
from poolkit.testing import VirtualTimeLoop

BACKENDS = ["asyncio", "trio"]


def run(backend: str, main: Callable[[], Awaitable[None]]) -> None:
    if backend == "asyncio":
        options: dict[str, Any] = {"loop_factory": VirtualTimeLoop}
    else:
        options = {"clock": trio.testing.MockClock(autojump_threshold=0)}

    async def guarded() -> None:
        with anyio.fail_after(24 * 3600):  # (a deadlock fails at once, on the virtual clock)
            await main()

    anyio.run(guarded, backend=backend, backend_options=options)


class Session:
    def __init__(self, cid: int) -> None:
        self.id = cid
        self.closed = 0

    async def aclose(self) -> None:
        await anyio.sleep(0.5)
        self.closed += 1


class World:
    def __init__(self, **options: Any) -> None:
        self.made: list[Session] = []
        self.events: list[ev.PoolEvent] = []

        async def connect(ctx: poolkit.ConnectContext) -> Session:
            await anyio.sleep(0.1)
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
        s = self.pool.stats()
        assert (s.waiting, s.in_use) == (0, 0), s
        assert s.total == s.available + s.pending + s.in_use + s.backing_off, s
        assert self.count(ev.ConnectionCheckedOutEvent) == self.count(ev.ConnectionCheckedInEvent)
        started = self.count(ev.ConnectionCheckOutStartedEvent)
        assert started == self.count(ev.ConnectionCheckedOutEvent) + self.count(
            ev.ConnectionCheckOutFailedEvent
        )

    def check_closed(self) -> None:
        assert [s.closed for s in self.made] == [1] * len(self.made)
        assert self.pool.stats().total == 0


async def settle() -> None:
    for _ in range(50):
        await anyio.lowlevel.checkpoint()


@pytest.mark.parametrize("backend", BACKENDS)
def test_fail_after_on_a_waiting_checkout_leaves_nothing(backend: str) -> None:
    world = World(max_size=1)
    pool = world.pool

    async def main() -> None:
        async with pool:
            held = await pool.checkout()
            with pytest.raises(TimeoutError):
                with anyio.fail_after(2):
                    await pool.checkout()
            stats = pool.stats()
            assert (stats.waiting, stats.checkout_failures) == (0, {"cancelled": 1})
            held.release()
            assert pool.stats().available == 1  # not handed to the cancelled checkout
            world.check_settled()
        world.check_closed()

    run(backend, main)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_cancelled_task_group_of_waiting_checkouts_leaves_no_waiter(backend: str) -> None:
    world = World(max_size=2)
    pool = world.pool

    async def main() -> None:
        async with pool:
            held = [await pool.checkout(), await pool.checkout()]
            got: list[poolkit.Lease[Session]] = []

            async def wait() -> None:
                got.append(await pool.checkout())

            async with anyio.create_task_group() as group:
                for _ in range(10):
                    group.start_soon(wait)
                await settle()
                assert pool.stats().waiting == 10
                held[0].release()  # handed to the first waiter, which has not resumed yet
                group.cancel_scope.cancel()
            # (served before the cancellation reached it, or given back: never lost)
            stats = pool.stats()
            assert len(got) <= 1 and stats.waiting == 0 and stats.in_use == 1 + len(got)
            assert stats.checkout_failures == {"cancelled": 10 - len(got)}
            for lease in [*got, held[1]]:
                lease.release()
            world.check_settled()
            assert pool.stats().available == 2
        world.check_closed()

    run(backend, main)


@pytest.mark.parametrize("cancel_safe", [False, True], ids=["discarded", "cancel-safe"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_task_group_cancelled_while_its_blocks_hold_gives_each_back_once(
    backend: str, cancel_safe: bool
) -> None:
    world = World(max_size=3, hooks=poolkit.Hooks(cancel_safe=cancel_safe))
    pool = world.pool

    async def hold() -> None:
        async with pool.connection():
            await anyio.sleep_forever()

    async def main() -> None:
        async with pool:
            with anyio.move_on_after(5):
                async with anyio.create_task_group() as group:
                    for _ in range(5):  # three hold, two wait
                        group.start_soon(hold)
            assert anyio.current_time() == pytest.approx(5)
            # each checkout given back once (a waiter may be served by a block given back,
            # cancel-safe, before the cancellation reaches it: then its block gives it back)
            out = world.count(ev.ConnectionCheckedOutEvent)
            assert out >= 3 and world.count(ev.ConnectionCheckedInEvent) == out
            stats = pool.stats()
            assert stats.available == (3 if cancel_safe else 0)
            assert stats.checkout_failures == ({"cancelled": 5 - out} if out < 5 else {})
            world.check_settled()
        world.check_closed()

    run(backend, main)


@pytest.mark.parametrize("backend", BACKENDS)
def test_close_in_a_cancelled_scope_closes_every_connection(backend: str) -> None:
    world = World(max_size=3, min_size=3)
    pool = world.pool

    async def main() -> None:
        with anyio.CancelScope() as scope:
            async with pool:
                await anyio.sleep(1)
                assert pool.stats().available == 3
                scope.cancel()
                await anyio.sleep(10)
        if backend == "asyncio":  # (asyncio's close goes on in a task of its own, shielded)
            await anyio.sleep(1)
        world.check_closed()

    run(backend, main)
