"""Systematic cancellation under trio (issue 41, point 2), after ``test_cancellation.py``'s
asyncio sweep: every await point of checkout, connect, keep-alive, check-in and ``close()`` is
cut in turn, and afterwards nothing is lost or leaked.

A scenario runs inside a cancel scope, in a fresh pool's block, on trio's ``MockClock``; a cutter
task cancels that scope at one point (``at``, ``spins``): when the virtual clock reaches ``at``,
after ``spins`` more scheduling rounds. The scenarios put their awaits at distinct instants
(connects, probes, hooks and closes take whole seconds of virtual time), so that the grid of
instants (every quarter second, and a few rounds after each) reaches every await point, and the
windows between one task's wake-up and its resumption. The sweep goes on until the scope is no
longer cut (the scenario ran to its end) and returns how many runs it cut.

After each run (``World.check``): nobody waits and nothing is in use (the cut scenario's blocks
gave back what they held), the counts add up, every checkout that began ended once, every
connection checked out was checked in once; the next checkout works; and after the pool's block
every connection the connect function made was closed exactly once, with no task of the pool
left running.

The last sweep cuts the scope around the pool's ``async with`` block itself (trio's "loop
shutdown"): the block ends at each point with connects, probes, checks, resets and closes in
flight, and still closes every connection exactly once and leaves no task or nursery behind.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import trio

import poolkit
from frontends import run_trio
from poolkit import events as ev

#: instants (seconds of virtual time) the sweep cuts at, and scheduling rounds after each
STEP = 0.25
SPINS = 4
#: no scenario here lasts longer: a sweep that gets there never ends
LIMIT = 20.0


class Session:
    def __init__(self, cid: int, close_delay: float) -> None:
        self.id = cid
        self.closed = 0
        self._close_delay = close_delay

    async def aclose(self) -> None:
        if self._close_delay:
            await trio.sleep(self._close_delay)
        self.closed += 1


class World:
    def __init__(
        self, *, connect_delay: float = 1.0, close_delay: float = 1.0, **options: Any
    ) -> None:
        self.made: list[Session] = []
        self.events: list[ev.PoolEvent] = []

        async def connect(ctx: poolkit.ConnectContext) -> Session:
            await trio.sleep(connect_delay)
            self.made.append(Session(ctx.connection_id, close_delay))
            return self.made[-1]

        self.pool: poolkit.AsyncPool[Session] = poolkit.AsyncPool(
            connect,
            address="db:1",
            options=poolkit.PoolOptions(**options),
            listeners=[self.events.append],
        )

    def count(self, kind: type[ev.PoolEvent]) -> int:
        return sum(isinstance(e, kind) for e in self.events)

    def check(self) -> None:
        s = self.pool.stats()
        # (a keep-alive probe in flight holds its connection's stream: counted in use)
        probing = self.count(ev.KeepAliveStartedEvent) - (
            self.count(ev.KeepAliveSucceededEvent) + self.count(ev.KeepAliveFailedEvent)
        )
        assert (s.waiting, s.in_use) == (0, probing), s
        assert s.total == s.available + s.pending + s.in_use + s.backing_off + s.resetting, s
        started = self.count(ev.ConnectionCheckOutStartedEvent)
        ended = self.count(ev.ConnectionCheckedOutEvent) + self.count(
            ev.ConnectionCheckOutFailedEvent
        )
        assert started == ended, (started, ended)
        assert self.count(ev.ConnectionCheckedOutEvent) == self.count(ev.ConnectionCheckedInEvent)

    def check_closed(self) -> None:
        assert [s.closed for s in self.made] == [1] * len(self.made)
        assert self.pool.stats().total == 0
        trio_io = self.pool._trio
        assert trio_io is not None and trio_io._tasks == set()


Scenario = Callable[[World], Awaitable[None]]


def cut_once(scenario: Scenario, at: float, spins: int, options: dict[str, Any]) -> bool:
    """One run cut at (``at``, ``spins``); whether the cut came before the scenario's end."""
    world = World(**options)
    ended: list[bool] = []

    async def main() -> None:
        async with world.pool:
            with trio.CancelScope() as cut:
                async with trio.open_nursery() as nursery:

                    async def cutter() -> None:
                        await trio.sleep_until(at)
                        for _ in range(spins):
                            await trio.lowlevel.checkpoint()
                        cut.cancel()

                    nursery.start_soon(cutter)
                    await scenario(world)
                    ended.append(True)
                    nursery.cancel_scope.cancel()
            for _ in range(50):  # (what the cut left to the pool's tasks: over in this step)
                await trio.lowlevel.checkpoint()
            await trio.sleep(5)  # connects, hooks and closes begun before the cut end
            world.check()
            if world.pool.state is not poolkit.PoolState.CLOSED:
                async with world.pool.connection(timeout=10):  # the next checkout still works
                    pass
                await trio.sleep(5)  # (its reset, if any)
                world.check()
        world.check_closed()

    run_trio(main)
    return not ended


def sweep(scenario: Scenario, **options: Any) -> int:
    """Cut ``scenario`` at each point of the grid until a run is not cut; how many were."""
    cuts = 0
    at = 0.0
    while at < LIMIT:
        hit = False
        for spins in range(SPINS):
            if cut_once(scenario, at, spins, options):
                cuts += 1
                hit = True
        if not hit:
            return cuts
        at += STEP
    raise AssertionError(f"the scenario was still cut at {LIMIT} s: it never ends")


# ---------------------------------------------------------------------- checkout


@pytest.mark.parametrize("observed", [True, False], ids=["observed", "fast-paths"])
def test_checkout_waiting_for_a_connect(observed: bool) -> None:
    async def scenario(world: World) -> None:
        lease = await world.pool.checkout()  # a connect of 1 s
        await trio.sleep(1)
        lease.release()
        async with world.pool.connection():  # the fast path (when nobody listens)
            await trio.sleep(1)

    assert sweep(scenario, max_size=1) >= 8


def test_checkout_waiting_for_a_release() -> None:
    async def scenario(world: World) -> None:
        pool = world.pool
        async with trio.open_nursery() as nursery:

            async def holder() -> None:
                async with pool.connection():
                    await trio.sleep(1)

            async def waiter() -> None:
                await trio.sleep(0.5)
                async with pool.connection():
                    await trio.sleep(1)

            nursery.start_soon(holder)
            nursery.start_soon(waiter)

    assert sweep(scenario, max_size=1) >= 12


def test_many_waiters_and_holders_cut_together() -> None:
    async def scenario(world: World) -> None:
        async def user(delay: float) -> None:
            await trio.sleep(delay)
            async with world.pool.connection():
                await trio.sleep(1)

        async with trio.open_nursery() as nursery:
            for i in range(6):
                nursery.start_soon(user, i * 0.25)

    assert sweep(scenario, max_size=2, max_connecting=1) >= 12


# ---------------------------------------------------------------------- connect and configure


def test_connect_with_an_async_configure() -> None:
    async def configure(session: Session) -> None:
        await trio.sleep(1)

    async def scenario(world: World) -> None:
        async with world.pool.connection():  # connect 1 s, configure 1 s
            await trio.sleep(1)

    assert sweep(scenario, max_size=1, hooks=poolkit.Hooks(configure=configure)) >= 8


# ---------------------------------------------------------------------- keep-alive, check, reset


def test_checkout_waiting_for_a_probed_connection() -> None:
    async def probe(session: Session) -> None:
        await trio.sleep(1)

    async def scenario(world: World) -> None:
        pool = world.pool
        (await pool.checkout()).release()  # at 1 s, idle: probed at 3 s, for 1 s
        await trio.sleep(2.5)
        async with pool.connection():  # waits for the probe
            await trio.sleep(1)

    keep_alive = poolkit.KeepAlive(interval=2.0, probe=probe)
    assert sweep(scenario, max_size=1, keep_alive=keep_alive) >= 12


@pytest.mark.parametrize("hook", ["check", "reset"])
def test_async_check_and_reset(hook: str) -> None:
    async def run_hook(session: Session) -> None:
        await trio.sleep(1)

    async def scenario(world: World) -> None:
        pool = world.pool
        for _ in range(2):
            async with pool.connection():
                await trio.sleep(0.5)
            await trio.sleep(1.5)

    if hook == "check":
        hooks = poolkit.Hooks(check=run_hook, check_after=1.0)
    else:
        hooks = poolkit.Hooks(reset=run_hook)
    assert sweep(scenario, max_size=1, hooks=hooks) >= 12


# ---------------------------------------------------------------------- close


def test_close_cut_at_each_point_still_closes_every_connection() -> None:
    async def scenario(world: World) -> None:
        pool = world.pool

        async def user() -> None:
            async with pool.connection():
                await trio.sleep(1)

        async with trio.open_nursery() as nursery:
            for _ in range(3):
                nursery.start_soon(user)
        await trio.sleep(1)
        await pool.close()  # shielded: the closes take 1 s each
        await trio.sleep(1)

    assert sweep(scenario, max_size=3) >= 8


# ---------------------------------------------------------------------- the pool's block, cut


def cut_block_once(scenario: Scenario, at: float, spins: int, options: dict[str, Any]) -> bool:
    """One run whose cut scope holds the pool's block itself: the block ends at the cut, with
    connects, probes, hooks and closes in flight; whether the cut came before the scenario's
    end. Afterwards every connection made is closed once and no task of the pool is left."""
    world = World(**options)
    ended: list[bool] = []

    async def main() -> None:
        with trio.CancelScope() as cut:
            async with trio.open_nursery() as nursery:

                async def cutter() -> None:
                    await trio.sleep_until(at)
                    for _ in range(spins):
                        await trio.lowlevel.checkpoint()
                    cut.cancel()

                nursery.start_soon(cutter)
                async with world.pool:
                    await scenario(world)
                    ended.append(True)
                nursery.cancel_scope.cancel()
        assert world.pool.stats().state is poolkit.PoolState.CLOSED
        world.check_closed()
        assert trio.lowlevel.current_task().child_nurseries == []

    run_trio(main)
    return not ended


@pytest.mark.parametrize("hooks", [False, True], ids=["plain", "async-hooks"])
def test_the_pools_block_ended_at_each_point_closes_everything(hooks: bool) -> None:
    async def probe(session: Session) -> None:
        await trio.sleep(1)

    async def run_hook(session: Session) -> None:
        await trio.sleep(0.5)

    async def scenario(world: World) -> None:
        pool = world.pool

        async def user(delay: float) -> None:
            await trio.sleep(delay)
            async with pool.connection():
                await trio.sleep(1)

        async with trio.open_nursery() as nursery:
            for i in range(4):
                nursery.start_soon(user, i * 0.5)
        await trio.sleep(3)  # idle: probed

    options: dict[str, Any] = {
        "max_size": 3,
        "min_size": 1,
        "keep_alive": poolkit.KeepAlive(interval=2.0, probe=probe),
    }
    if hooks:
        options["hooks"] = poolkit.Hooks(check=run_hook, check_after=0.5, reset=run_hook)
    cuts = 0
    at = 0.0
    while at < LIMIT:
        hit = False
        for spins in range(SPINS):
            if cut_block_once(scenario, at, spins, options):
                cuts += 1
                hit = True
        if not hit:
            break
        at += STEP
    assert cuts >= 20 and at < LIMIT
