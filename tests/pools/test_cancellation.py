"""Systematic cancellation (issue 14, point 23): every await point of checkout, connect,
keep-alive, check-in and ``close()`` cancelled in turn, not by chance; afterwards nothing is lost
or leaked.

A scenario runs on a fresh virtual-time loop with one cut, chosen by a number:

* ``OWN``: the task under test is cancelled at its k-th suspension. A :class:`Stepper` drives its
  coroutine, counts the times it suspends and, inside the very step that suspends for the k-th
  time, cancels its own task: the task then cancels the future just awaited, exactly what
  ``task.cancel()`` from outside does at that point.
* ``SPIN``: the task under test is cancelled from outside after j loop iterations (a task that
  awaits ``sleep(0)`` j times, then cancels). This hits the windows between the other tasks'
  steps, e.g. a waiter handed a connection that has not resumed yet. Only for scenarios whose
  every await is ``sleep(0)`` (a spinning task keeps virtual time from moving).
* The pool's own tasks (connect, keep-alive probe, a connection's async close) are cut from
  outside, as a loop shutdown or a stray ``task.cancel()`` cuts them: a task factory finds the
  first such task and cancels it at its k-th suspension (through a Stepper), or before its first
  step (k = 0).

``sweep`` runs a scenario with k (or j) = 1, 2, ... until one run ends without hitting its cut,
so every point is cut once, and returns how many points it cut. After each run the scenario
checks (``World.check``, ``World.use``, ``World.close``) that each connection the connect
function made is either closed exactly once or still in the pool; that ``stats()`` adds up
(total = available + pending + in use + backing off); that nobody waits and nothing is in use once
every lease is back; with a listener, that every checkout that began ended once and every
connection handed out came back; that a cancelled checkout was never served (the checkout behind
it is); that the next checkout still works; that after ``await pool.close()`` every connection is
closed once and no task is left; and (``run``) that no task was left pending when the loop closed.
"""

from __future__ import annotations

import asyncio
import gc
import warnings
from collections import Counter
from collections.abc import Awaitable, Callable, Coroutine, Generator
from typing import Any, TypeVar

import pytest

import poolkit
from core_view import state_of
from poolkit import events as ev
from poolkit._core import ConnState
from poolkit.testing import run as run_on_virtual_time

T = TypeVar("T")
OWN = "own"
SPIN = "spin"
#: no scenario here has this many cancellation points: a sweep that gets there never ends
LIMIT = 200


# ---------------------------------------------------------------------- the cutting machinery


#: the worlds made in the current run (to find the tasks left pending on their loops)
_worlds: list[World] = []


def run(main: Coroutine[Any, Any, T]) -> T:
    """``poolkit.testing.run``, then the check that no task was left pending when the loop
    closed: such a task is destroyed with its loop, and its coroutine, closed when garbage
    collected, runs its handlers against a closed loop. What is left is closed here (each error
    that raises is reported) so that it cannot disturb later tests."""
    _worlds.clear()
    try:
        result = run_on_virtual_time(main)
    except BaseException:
        _close_left_tasks()
        raise
    left = _close_left_tasks()
    assert left == [], f"tasks left pending when the loop closed: {left}"
    return result


def _close_left_tasks() -> list[str]:
    left = []
    for world in _worlds:
        for task in asyncio.all_tasks(world.loop):
            try:
                task.get_coro().close()
                outcome = ""
            except BaseException as exc:
                outcome = f" (closing its coroutine raised {exc!r})"
            left.append(task.get_name() + outcome)
    _worlds.clear()
    return left


class Stepper:
    """Awaits ``awaitable`` for the task awaiting this, counting its suspensions; at the
    ``cut_at``-th it cancels that task (from inside the suspending step, see the module doc)."""

    def __init__(self, awaitable: Awaitable[Any], cut_at: int | None = None) -> None:
        self._it = awaitable.__await__()
        self.cut_at = cut_at
        self.started = False
        self.suspensions = 0
        self.cut = False

    def close_unstarted(self) -> None:
        if not self.started:
            self._it.close()

    def __await__(self) -> Generator[Any, Any, Any]:
        self.started = True
        it = self._it
        value: Any = None
        error: BaseException | None = None
        while True:
            try:
                yielded = it.send(value) if error is None else it.throw(error)
            except StopIteration as stop:
                return stop.value
            self.suspensions += 1
            if self.suspensions == self.cut_at:
                task = asyncio.current_task()
                assert task is not None
                task.cancel()
                self.cut = True
            try:
                value, error = (yield yielded), None
            except GeneratorExit:
                it.close()
                raise
            except BaseException as exc:
                value, error = None, exc


class Victim:
    """The task under test, running ``coro``: cut at its ``at``-th suspension (``OWN``) or
    cancelled from outside after ``at`` loop iterations (``SPIN``)."""

    def __init__(self, coro: Coroutine[Any, Any, Any], mode: str, at: int) -> None:
        self.mode = mode
        self._spun = False
        if mode == OWN:
            self.stepper = Stepper(coro, at)
            self.task: asyncio.Task[Any] = asyncio.create_task(self._own())
        else:
            self.task = asyncio.create_task(coro)
            self._canceller = asyncio.create_task(self._spin(at))

    async def _own(self) -> Any:
        return await self.stepper

    async def _spin(self, iterations: int) -> None:
        for _ in range(iterations):
            await asyncio.sleep(0)
        if not self.task.done():
            self.task.cancel()
            self._spun = True

    @property
    def cut(self) -> bool:
        return self.stepper.cut if self.mode == OWN else self._spun

    async def outcome(self) -> Any:
        """What the task returned, or the exception it ended with. A task that was cut must end
        cancelled: nothing may swallow the cancellation."""
        if self.mode == SPIN:
            await self._canceller
        try:
            result = await self.task
        except BaseException as exc:  # CancelledError too
            result = exc
        if self.cut:
            assert self.task.cancelled(), f"cut, but the task ended with {result!r}"
        return result


def sweep(scenario: Callable[[int], Coroutine[Any, Any, bool]], first: int = 1) -> int:
    """Run ``scenario(at)`` for at = first, first + 1, ... until a run ends without its cut; the
    number of runs that cut."""
    at = first
    while run(scenario(at)):
        at += 1
        assert at - first < LIMIT, "the scenario never ran to its end without a cut"
    return at - first


def sweep_modes(scenario: Callable[[str, int], Coroutine[Any, Any, bool]], mode: str) -> int:
    return sweep(lambda at: scenario(mode, at), first=1 if mode == OWN else 0)


def give_back(lease: poolkit.Lease[Any]) -> None:
    lease.release()
    with pytest.raises(poolkit.InvalidLeaseError):
        lease.connection  # noqa: B018


# ---------------------------------------------------------------------- the world of one run


class Link:
    """A connection double: counts the pool's close calls, the closes that completed and those
    cut short (an async close, ``close_steps`` awaits long, cut by a cancellation)."""

    def __init__(self, cid: int, world: World) -> None:
        self.id = cid
        self.world = world
        self.close_calls = 0
        self.closed = 0
        self.cut_short = 0

    def close(self) -> Coroutine[Any, Any, None] | None:
        self.close_calls += 1
        if not self.world.close_steps:
            self.closed += 1
            return None
        return self._closing(self.world.close_steps)

    async def _closing(self, steps: int) -> None:
        try:
            for _ in range(steps):
                await asyncio.sleep(0)
        except asyncio.CancelledError:
            self.cut_short += 1
            raise
        self.closed += 1

    def __repr__(self) -> str:
        return f"<Link {self.id} close_calls={self.close_calls} closed={self.closed}>"


#: the pool's own tasks, by the start of their names
POOL_TASKS = {
    "connect": "poolkit-connect-",
    "keep-alive": "poolkit-keep-alive-",
    "close": "poolkit-close-",
}


class NamedTask(asyncio.Task):  # type: ignore[type-arg]
    """A task made by a world's task factory: its coroutine is driven by a :class:`Stepper`, and
    when it is named (which ``loop.create_task`` does after the factory returns) the world may
    choose it as the task to cut."""

    world: World
    stepper: Stepper

    def set_name(self, value: object) -> None:
        super().set_name(value)
        self.world._named(self)


class World:
    """One pool on the running loop, with its connect function (``connect_steps`` awaits of
    ``connect_delay``), async close (``close_steps`` awaits) and keep-alive probe, and the
    checks. ``cut=(kind, k)`` cancels the first of the pool's own tasks of that kind (named as in
    ``POOL_TASKS``) at its k-th suspension, k = 0 meaning before its first step (as a loop
    shutdown cancels a task made in the same iteration)."""

    def __init__(
        self,
        *,
        observed: bool = True,
        connect_steps: int = 2,
        connect_delay: float = 0.0,
        close_steps: int = 0,
        probe_every: float | None = None,
        probe_steps: int = 0,
        probe_delay: float = 0.0,
        cut: tuple[str, int] | None = None,
        **options: Any,
    ) -> None:
        self.loop = loop = asyncio.get_running_loop()
        _worlds.append(self)
        self.loop_errors: list[dict[str, Any]] = []
        loop.set_exception_handler(lambda loop, context: self.loop_errors.append(context))
        self.made: list[Link] = []
        self.events: list[ev.PoolEvent] = []
        self.observed = observed
        self.connect_steps, self.connect_delay = connect_steps, connect_delay
        self.close_steps = close_steps
        self.probe_steps, self.probe_delay = probe_steps, probe_delay
        self.probing = 0
        self.probe_started = asyncio.Event()
        self._cut = cut
        self.cut_task: NamedTask | None = None
        if cut is not None:
            assert cut[0] in POOL_TASKS
            loop.set_task_factory(self._task_factory)
        if probe_every is not None:
            options["keep_alive"] = poolkit.KeepAlive(probe_every, self.probe)
        self.pool: poolkit.AsyncPool[Link] = poolkit.AsyncPool(
            self.connect,
            address="db:1",
            options=poolkit.PoolOptions(**options),
            listeners=[self.events.append] if observed else [],
        )

    def _task_factory(
        self, loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any
    ) -> asyncio.Task[Any]:
        stepper = Stepper(coro)
        task = NamedTask(self._drive(stepper), loop=loop, **kwargs)
        task.world, task.stepper = self, stepper
        # a task cancelled before its first step never starts its coroutine: closed, as a plain
        # task's would be (never "never awaited")
        task.add_done_callback(lambda _: stepper.close_unstarted())
        if kwargs.get("name") is not None:  # (Python >= 3.13 names it here)
            self._named(task)
        return task

    def _named(self, task: NamedTask) -> None:
        assert self._cut is not None
        kind, at = self._cut
        if self.cut_task is None and task.get_name().startswith(POOL_TASKS[kind]):
            self.cut_task = task
            task.stepper.cut_at = at
            if at == 0:
                task.cancel()

    @staticmethod
    async def _drive(stepper: Stepper) -> Any:
        return await stepper

    @property
    def cut(self) -> bool:
        """Whether the pool task to cut was cut."""
        if not isinstance(self.cut_task, NamedTask):
            return False
        stepper = self.cut_task.stepper
        return stepper.cut or stepper.cut_at == 0

    # the user's functions

    async def connect(self, ctx: poolkit.ConnectContext) -> Link:
        for _ in range(self.connect_steps):
            await asyncio.sleep(self.connect_delay)
        link = Link(ctx.connection_id, self)
        self.made.append(link)
        return link

    async def probe(self, link: Link) -> None:
        assert link.close_calls == 0, "probing a closed connection"
        await self._probing()

    async def _probing(self) -> None:
        self.probing += 1
        self.probe_started.set()
        try:
            for _ in range(self.probe_steps):
                await asyncio.sleep(self.probe_delay)
        finally:
            self.probing -= 1

    # checks

    def check(self, *, out: int = 0, waiting: int = 0) -> poolkit.PoolStats:
        """The invariants, with ``out`` leases out and ``waiting`` checkouts waiting."""
        pool = self.pool
        stats = pool.stats()
        assert stats.total == stats.available + stats.pending + stats.in_use + stats.backing_off, (
            stats
        )
        assert stats.waiting == waiting, stats
        assert stats.in_use == out + self.probing, stats
        held = [
            record.connection
            for record in state_of(pool._core).conns.values()
            if record.state not in (ConnState.CONNECTING, ConnState.BACKING_OFF)
        ]
        assert len(held) == stats.available + stats.in_use, (held, stats)
        for link in held:
            assert any(link is made for made in self.made), f"{link!r} was never made"
        for link in self.made:
            assert link.close_calls <= 1, f"{link!r} closed twice"
            inside = any(link is h for h in held)
            # closed exactly once, or still the pool's (never both, never neither)
            assert inside != (link.close_calls == 1), (link, "in the pool" if inside else "lost")
        if self.observed:
            n = Counter(type(e) for e in self.events)
            began = n[ev.ConnectionCheckOutStartedEvent]
            ended = n[ev.ConnectionCheckedOutEvent] + n[ev.ConnectionCheckOutFailedEvent]
            assert began == ended + waiting
            assert n[ev.ConnectionCheckedOutEvent] - n[ev.ConnectionCheckedInEvent] == out
            assert n[ev.ConnectionCreatedEvent] == (
                n[ev.ConnectionClosedEvent] + stats.total - stats.backing_off
            )
        assert self.loop_errors == []
        return stats

    async def use(self) -> None:
        """The next checkout still works, with a live connection."""
        lease = await self.pool.checkout(timeout=60)
        link = lease.connection
        assert any(link is made for made in self.made) and link.close_calls == 0, link
        self.check(out=1)
        give_back(lease)
        self.check()

    async def close(self, *, cut_short: int = 0) -> None:
        """Close the pool: every connection closed once (``cut_short`` of them by a cut), nothing
        left in the pool, no task left behind."""
        await self.pool.close()
        stats = self.check()
        assert stats.total == 0 and stats.state is poolkit.PoolState.CLOSED, stats
        for link in self.made:
            assert link.close_calls == 1 and link.closed + link.cut_short == 1, link
        assert sum(link.cut_short for link in self.made) == cut_short
        assert [t for t in asyncio.all_tasks() if t is not asyncio.current_task()] == []


async def hold_for(pool: poolkit.AsyncPool[Link], iterations: int) -> None:
    lease = await pool.checkout()
    for _ in range(iterations):
        await asyncio.sleep(0)
    give_back(lease)


async def settle(iterations: int = 20) -> None:
    for _ in range(iterations):
        await asyncio.sleep(0)


def expect_cancelled_or_lease(result: Any, cut: bool) -> poolkit.Lease[Link] | None:
    if cut:
        assert isinstance(result, asyncio.CancelledError), result
        return None
    assert isinstance(result, poolkit.Lease), result
    return result


def window(pool: poolkit.AsyncPool[Link]) -> str:
    """Where the one cut checkout of a run was cancelled: while it waited (counted as a failed
    checkout), or after it was handed a connection but before it resumed (counted as served)."""
    return "waiting" if pool.stats().checkout_failures.get("cancelled") else "handed"


def check_windows(mode: str, windows: set[str]) -> None:
    """Spinning hits both windows, not by chance: the sweep shows it."""
    assert windows == ({"waiting"} if mode == OWN else {"waiting", "handed"}), windows


# ---------------------------------------------------------------------- checkout


@pytest.mark.parametrize("observed", [True, False], ids=["observed", "fast-paths"])
@pytest.mark.parametrize("mode", [OWN, SPIN])
def test_checkout_waiting_for_a_connect(mode: str, observed: bool) -> None:
    """A checkout on an empty pool waits for the connect it caused (3 awaits long)."""

    async def scenario(mode: str, at: int) -> bool:
        w = World(observed=observed, connect_steps=3, max_size=1)
        w.pool.ready()
        victim = Victim(w.pool.checkout(), mode, at)
        lease = expect_cancelled_or_lease(await victim.outcome(), victim.cut)
        if victim.cut:
            windows.add(window(w.pool))
        w.check(out=lease is not None)
        await settle()  # the connect goes on without its waiter
        stats = w.check(out=lease is not None)
        assert len(w.made) == 1 and stats.total == 1 and stats.pending == 0
        if lease is not None:
            give_back(lease)
        w.check()
        await w.use()
        await w.close()
        return victim.cut

    windows: set[str] = set()
    assert sweep_modes(scenario, mode) >= (1 if mode == OWN else 3)
    check_windows(mode, windows)


@pytest.mark.parametrize("observed", [True, False], ids=["observed", "fast-paths"])
@pytest.mark.parametrize("mode", [OWN, SPIN])
def test_checkout_waiting_for_a_release(mode: str, observed: bool) -> None:
    """A checkout waits for the one connection, held for 3 iterations; another waits behind it
    and must get the connection whenever the first one was cancelled."""

    async def scenario(mode: str, at: int) -> bool:
        w = World(observed=observed, max_size=1)
        w.pool.ready()
        await w.use()  # one connection, available
        holder = asyncio.create_task(hold_for(w.pool, 3))
        await asyncio.sleep(0)
        victim = Victim(w.pool.checkout(), mode, at)
        follower = asyncio.create_task(w.pool.checkout())
        lease = expect_cancelled_or_lease(await victim.outcome(), victim.cut)
        if victim.cut:
            windows.add(window(w.pool))
        await holder
        if lease is not None:
            assert not follower.done()
            w.check(out=1, waiting=1)
            give_back(lease)
        second = await follower  # served, whatever happened to the victim
        assert second.connection is w.made[0]
        w.check(out=1)
        give_back(second)
        stats = w.check()
        assert stats.available == 1 and len(w.made) == 1
        await w.use()
        await w.close()
        return victim.cut

    windows: set[str] = set()
    assert sweep_modes(scenario, mode) >= (1 if mode == OWN else 3)
    check_windows(mode, windows)


@pytest.mark.parametrize("close_steps", [0, 2], ids=["sync-close", "async-close"])
@pytest.mark.parametrize("mode", [OWN, SPIN])
def test_connection_block_whose_body_awaits(mode: str, close_steps: int) -> None:
    """``async with pool.connection()``: the checkout waits for a connect, the body awaits 3
    times. Cut in the body, the connection is discarded (closed once); before it, never served."""

    async def scenario(mode: str, at: int) -> bool:
        w = World(close_steps=close_steps, max_size=1)
        w.pool.ready()
        used: list[Link] = []

        async def user() -> None:
            async with w.pool.connection() as link:
                used.append(link)
                for _ in range(3):
                    await asyncio.sleep(0)

        victim = Victim(user(), mode, at)
        result = await victim.outcome()
        assert (result is None) != victim.cut, result
        w.check()
        await settle()  # a discarded connection's async close completes
        w.check()
        if victim.cut and used:
            assert used[0].close_calls == 1 and used[0].closed == 1  # discarded
        elif w.made:
            assert w.made[0].close_calls == 0  # released, or never handed out
        await w.use()
        await w.close()
        return victim.cut

    assert sweep_modes(scenario, mode) >= (4 if mode == OWN else 7)


@pytest.mark.parametrize("mode", [OWN, SPIN])
def test_checkin_in_a_finally_after_a_body_that_awaits(mode: str) -> None:
    """``lease = await checkout()`` then a body of 3 awaits and ``await pool.checkin(lease)`` in a
    ``finally``: the check-in never suspends, so no cancellation can cut it half-way."""

    async def scenario(mode: str, at: int) -> bool:
        w = World(max_size=1)
        w.pool.ready()
        checkins: list[Stepper] = []

        async def user() -> None:
            lease = await w.pool.checkout()
            try:
                for _ in range(3):
                    await asyncio.sleep(0)
            finally:
                checkins.append(Stepper(w.pool.checkin(lease)))
                await checkins[-1]
                assert not lease.active

        victim = Victim(user(), mode, at)
        result = await victim.outcome()
        assert (result is None) != victim.cut, result
        assert all(s.suspensions == 0 for s in checkins)
        stats = w.check()
        assert stats.available == len(w.made) == 1 or (victim.cut and not checkins)
        await w.use()
        await w.close()
        return victim.cut

    assert sweep_modes(scenario, mode) >= (4 if mode == OWN else 7)


@pytest.mark.parametrize("mode", [OWN, SPIN])
def test_checkout_waiting_for_a_probed_connection(mode: str) -> None:
    """The one connection is being probed (3 awaits); a checkout waits for it, another behind."""

    async def scenario(mode: str, at: int) -> bool:
        w = World(probe_every=1.0, probe_steps=3, min_size=1, max_size=1)
        w.pool.ready()
        await w.probe_started.wait()
        victim = Victim(w.pool.checkout(), mode, at)
        follower = asyncio.create_task(w.pool.checkout())
        lease = expect_cancelled_or_lease(await victim.outcome(), victim.cut)
        if victim.cut:
            windows.add(window(w.pool))
        if lease is not None:
            give_back(lease)
        second = await follower
        assert second.connection is w.made[0]
        w.check(out=1)
        give_back(second)
        assert w.check().available == 1
        await w.use()
        await w.close()
        return victim.cut

    windows: set[str] = set()
    assert sweep_modes(scenario, mode) >= (1 if mode == OWN else 3)
    check_windows(mode, windows)


# ---------------------------------------------------------------------- the pool's own tasks


def test_background_connect_task_cut_at_each_suspension() -> None:
    """A ``min_size`` connect (a handshake of 3 awaits of 0.1 s), its task cancelled from outside
    at each of its suspensions: it counts as failed (nothing pending, nothing made), and the next
    background run refills ``min_size``."""

    async def scenario(at: int) -> bool:
        w = World(connect_steps=3, connect_delay=0.1, cut=("connect", at), min_size=1)
        w.pool.ready()
        await asyncio.sleep(0.35)
        stats = w.check()
        expected = (0, 0, 0) if w.cut else (1, 1, 1)
        assert (stats.total, stats.available, len(w.made)) == expected, stats
        await asyncio.sleep(1.0)  # a background run refills min_size
        stats = w.check()
        assert stats.total == stats.available == len(w.made) == 1, stats
        await w.use()
        await w.close()
        return w.cut

    assert sweep(scenario) == 3


def test_connect_task_cut_under_a_waiting_checkout() -> None:
    """The connect a checkout waits for (3 awaits), its task cancelled from outside (not by the
    pool, nor the checkout's task) at each suspension. The checkout's task was not cancelled, so
    it must not end cancelled (a CancelledError out of a task nobody cancelled: a TaskGroup takes
    it for a cancellation and drops it) but be served or fail with an ordinary error; nothing stays
    pending, and the next checkout works."""

    async def scenario(at: int) -> bool:
        w = World(connect_steps=3, cut=("connect", at), max_size=1, connect_timeout=None)
        w.pool.ready()
        checkout = asyncio.create_task(w.pool.checkout(timeout=60))
        try:
            result: Any = await checkout
        except BaseException as exc:  # CancelledError too
            result = exc
        assert not checkout.cancelled(), f"cut at {at}: a checkout nobody cancelled ended cancelled"
        assert isinstance(result, poolkit.Lease | Exception), result
        if isinstance(result, poolkit.Lease):
            w.check(out=1)
            give_back(result)
        await settle()
        w.check()
        await w.use()
        await w.close()
        return w.cut

    assert sweep(scenario) == 3


@pytest.mark.parametrize("how", ["discard", "pool-close"])
def test_close_task_cut_at_each_suspension(how: str) -> None:
    """A connection's async close (3 awaits), its task cancelled from outside at each
    suspension: the pool called it once and never again, lost nothing else, and closes the
    rest."""

    async def scenario(at: int) -> bool:
        w = World(close_steps=3, cut=("close", at), max_size=2)
        w.pool.ready()
        lease = await w.pool.checkout()
        if how == "discard":
            lease.discard(OSError("broken"))
            await settle()
            w.check()
            await w.use()
        else:
            give_back(lease)
        await w.pool.close()
        first = w.made[0]
        assert first.close_calls == 1
        if at <= 3:
            assert first.cut_short == 1
        else:
            assert first.closed == 1
        await w.close(cut_short=first.cut_short)
        return w.cut

    assert sweep(scenario) == 3


@pytest.mark.parametrize("waiter", [False, True], ids=["idle", "awaited"])
def test_keep_alive_task_cut_at_each_suspension(waiter: bool) -> None:
    """A keep-alive probe (3 awaits of 0.1 s), its task cancelled from outside at each
    suspension: the probe failed, its connection is closed once and ``min_size`` refilled; a
    checkout waiting for the probed connection is served."""

    async def scenario(at: int) -> bool:
        w = World(
            probe_every=1.0,
            probe_steps=3,
            probe_delay=0.1,
            cut=("keep-alive", at),
            min_size=1,
            max_size=1,
        )
        w.pool.ready()
        await asyncio.sleep(1.0)  # the probe's task is made now
        if waiter:
            lease = await w.pool.checkout(timeout=5)
            w.check(out=1)
            give_back(lease)
        else:
            await asyncio.sleep(0.35)
            w.check()
        await asyncio.sleep(0.05)  # a refill
        stats = w.check()
        assert stats.total == stats.available == 1, stats
        assert w.made[-1].close_calls == 0 and all(link.close_calls == 1 for link in w.made[:-1])
        await w.use()
        await w.close()
        return w.cut

    assert sweep(scenario) == 3


# ---------------------------------------------------------------------- close()


@pytest.mark.parametrize("after", ["close-again", "no-second-close"])
@pytest.mark.parametrize("setup", ["idle", "busy", "probing"])
@pytest.mark.parametrize("mode", [OWN, SPIN])
def test_pool_close_cut(mode: str, setup: str, after: str) -> None:
    """``await pool.close()`` cancelled at each point, with connections whose async close awaits
    3 times: ``idle``, an available one, a lease out, a discarded one closing and a ``min_size``
    connect in flight; ``busy``, a lease out, a discarded one closing, and two checkouts waiting,
    one of them for a connect in flight; ``probing``, a lease out and a keep-alive probe (3
    awaits) in flight. The closing goes on to its end: a second ``close()`` waits for the same
    work, and without one it still ends; every connection is closed once and no task is left."""

    async def scenario(mode: str, at: int) -> bool:
        waiting: list[asyncio.Task[Any]] = []
        if setup == "idle":
            w = World(close_steps=3, connect_steps=4, min_size=3, max_size=3)
            w.pool.ready()
            await settle()
            assert w.pool.stats().available == 3
            kept = await w.pool.checkout()
            (await w.pool.checkout()).discard()
            expected = (1, 1)  # (pending, in use)
        elif setup == "busy":
            w = World(close_steps=3, connect_steps=4, max_size=2)
            w.pool.ready()
            kept = await w.pool.checkout()
            dropped = await w.pool.checkout()
            waiting = [asyncio.create_task(w.pool.checkout()) for _ in range(2)]
            await asyncio.sleep(0)
            dropped.discard()
            expected = (1, 1)
        else:
            w = World(close_steps=3, probe_every=1.0, probe_steps=3, min_size=2, max_size=2)
            w.pool.ready()
            await settle()
            kept = await w.pool.checkout()
            await w.probe_started.wait()
            expected = (0, 2)
        stats = w.pool.stats()
        assert (stats.pending, stats.in_use) == expected, stats
        victim = Victim(w.pool.close(), mode, at)
        result = await victim.outcome()
        assert (result is None) != victim.cut, result
        for task in waiting:
            with pytest.raises(poolkit.PoolClosedError):
                await task
        give_back(kept)  # closed as it comes back
        if after == "close-again":
            await w.close()
        else:
            await asyncio.sleep(1)
            stats = w.check()
            assert stats.total == 0, stats
            for link in w.made:
                assert link.close_calls == 1 and link.closed == 1, link
            assert [t for t in asyncio.all_tasks() if t is not asyncio.current_task()] == []
        return victim.cut

    assert sweep_modes(scenario, mode) >= (1 if mode == OWN else 3)


# ---------------------------------------------------------------------- request objects


class Req:
    def __init__(self, rid: int) -> None:
        self.id = rid
        self.results: list[Any] = []

    def complete(self, result: Any) -> None:
        self.results.append(result)


@pytest.mark.parametrize("served_by", ["release", "connect"])
def test_cancel_request_at_each_iteration(served_by: str) -> None:
    """``lease_request`` then ``cancel_request`` after j loop iterations, while the request waits
    for a release (held 3 iterations) or a connect (3 awaits); a second request waits behind.
    ``complete`` is called exactly once: with the lease, or with RequestCancelledError if and
    only if ``cancel_request`` said it cancelled; the one behind is served."""

    async def scenario(at: int) -> bool:
        w = World(connect_steps=3, max_size=1)
        w.pool.ready()
        holder = None
        if served_by == "release":
            await w.use()
            holder = asyncio.create_task(hold_for(w.pool, 3))
            await asyncio.sleep(0)
        victim, follower = Req(1), Req(2)
        w.pool.lease_requests([victim, follower])
        for _ in range(at):
            await asyncio.sleep(0)
        was_waiting = not victim.results
        cancelled = w.pool.cancel_request(victim.id)
        assert cancelled == was_waiting
        assert len(victim.results) == 1, victim.results
        if cancelled:
            assert isinstance(victim.results[0], poolkit.RequestCancelledError)
        else:
            lease = victim.results[0]
            assert isinstance(lease, poolkit.Lease)
            w.check(out=1, waiting=1)
            give_back(lease)
        assert not w.pool.cancel_request(victim.id)  # never twice
        if holder is not None:
            await holder
        await settle()
        assert len(victim.results) == 1 and len(follower.results) == 1
        second = follower.results[0]
        assert isinstance(second, poolkit.Lease), second
        assert second.connection is w.made[0]
        w.check(out=1)
        give_back(second)
        w.check()
        await w.use()
        await w.close()
        return cancelled

    assert sweep(scenario, first=0) >= 3


# ---------------------------------------------------------------------- an interrupting clear


@pytest.mark.parametrize("observed", [True, False], ids=["observed", "fast-paths"])
def test_interrupting_clear_at_each_iteration_of_a_waiting_checkout(observed: bool) -> None:
    """Instead of a cancellation, ``clear(interrupt_in_use=True)`` (then ``ready()``) after j
    loop iterations of a checkout waiting for a release: the checkout gets a live connection or
    the retryable PoolClearedError, never a connection the clear closed. The sweep meets both
    windows: the clear finds the checkout waiting, or handed the connection but not resumed."""

    async def scenario(at: int) -> bool:
        w = World(observed=observed, max_size=1)
        w.pool.ready()
        await w.use()
        holder = asyncio.create_task(hold_for(w.pool, 3))
        await asyncio.sleep(0)
        checkout = asyncio.create_task(w.pool.checkout())
        for _ in range(at):
            await asyncio.sleep(0)
        hit = not checkout.done()
        if hit:
            w.pool.clear(interrupt_in_use=True)
            w.pool.ready()
        try:
            result: Any = await checkout
        except poolkit.PoolClearedError as exc:
            result = exc
        if isinstance(result, poolkit.PoolClearedError):
            assert result.retryable
            windows.add("handed" if result.interrupted else "waiting")
            result = None
        await holder
        if result is not None:
            assert result.connection.close_calls == 0, "handed a connection the clear closed"
            w.check(out=1)
            give_back(result)
        await settle()
        w.check()
        await w.use()
        await w.close()
        return hit

    windows: set[str] = set()
    assert sweep(scenario, first=0) >= 4
    assert windows == {"waiting", "handed"}, windows


# ---------------------------------------------------------------------- loop shutdown


async def shut_down(pool_first: bool) -> list[asyncio.Task[Any]]:
    """What ``asyncio.run`` does at its end, in a fixed order (the pool's tasks first, or the
    others first): cancel every other task and run until they are done. Returns the tasks still
    pending after that, which a real shutdown would destroy pending."""
    me = asyncio.current_task()

    def key(task: asyncio.Task[Any]) -> tuple[bool, str]:
        return (task.get_name().startswith("poolkit") != pool_first, task.get_name())

    tasks = sorted((t for t in asyncio.all_tasks() if t is not me), key=key)
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    return [t for t in asyncio.all_tasks() if t is not me and not t.done()]


@pytest.mark.parametrize("close_steps", [0, 2], ids=["sync-close", "async-close"])
@pytest.mark.parametrize("pool_first", [False, True], ids=["users-first", "pool-first"])
def test_loop_shutdown_at_each_iteration(pool_first: bool, close_steps: int) -> None:
    """Loop shutdown (every task cancelled) after j iterations of: three ``connection()`` blocks
    on two connections (connects of 3 awaits, bodies of 2 and 3 awaits), one block failing with
    an ordinary error. Afterwards nothing is in use and nothing lost; the only tasks left for the
    shutdown to destroy are what the pool started in reaction to the cancellations (the closes
    of the connections discarded, a connect refilling the pool): a pool not closed before its
    loop stops cannot tell that the loop is stopping from a task cancelled in passing, and
    refills as usual (closing the pool first is the user's part). The pool then still closes."""

    async def scenario(at: int) -> bool:
        w = World(connect_steps=3, close_steps=close_steps, max_size=2)
        w.pool.ready()

        async def user(body: int, fail: bool = False) -> None:
            async with w.pool.connection():
                for _ in range(body):
                    await asyncio.sleep(0)
                if fail:
                    raise OSError("app error")

        users = [
            asyncio.create_task(user(3)),
            asyncio.create_task(user(2, fail=True)),
            asyncio.create_task(user(2)),
        ]
        for _ in range(at):
            await asyncio.sleep(0)
        me = asyncio.current_task()
        hit = any(not t.done() for t in asyncio.all_tasks() if t is not me)
        left = await shut_down(pool_first)
        assert all(task.done() for task in users)
        stats = w.pool.stats()
        assert stats.in_use == 0 and stats.waiting == 0, stats
        names = [t.get_name() for t in left]
        assert all(name.startswith(("poolkit-close-", "poolkit-connect-")) for name in names)
        if close_steps == 0:
            assert not any(name.startswith("poolkit-close-") for name in names), names
        await settle()
        w.check()
        await w.close(cut_short=sum(link.cut_short for link in w.made))
        return hit

    assert sweep(scenario, first=0) >= 8


def test_loop_shutdown_during_a_keep_alive_probe_breaks_nothing() -> None:
    """``asyncio.run`` ends (the pool not closed) while a keep-alive probe runs: the probe's task
    is cancelled, its connection closed and ``min_size`` refilled as after any failed probe. The
    refilling connect is left pending on the closed loop (the pool was not closed first: see
    above); when its coroutine is closed it tells the pool nothing and raises nothing (it ran
    its handlers against the closed loop and raised "Event loop is closed")."""
    box: list[World] = []

    async def main() -> None:
        w = World(probe_every=1.0, probe_steps=1, probe_delay=10.0, connect_delay=0.1, min_size=1)
        box.append(w)
        w.pool.ready()
        await w.probe_started.wait()

    _worlds.clear()
    run_on_virtual_time(main())
    left = _close_left_tasks()
    assert all(name.startswith("poolkit-connect-") and "raised" not in name for name in left), left
    stats = box[0].pool.stats()
    assert stats.in_use == 0 and stats.available == 0, stats


# ---------------------------------------------------------------------- the smallest cases


@pytest.mark.parametrize("kind", ["connect", "keep-alive", "close"])
def test_pool_task_cancelled_before_its_first_step(kind: str) -> None:
    """One of the pool's own tasks cancelled before its first step, as a loop shutdown (or any
    "cancel every task") does with a task made in the same loop iteration: its coroutine never
    runs. The pool must not wait for it for ever: a connect counts as failed (nothing stays
    pending; the next checkout connects), a probe as ended (its connection is not held in use for
    good), and a connection's async close is not dropped un-awaited."""

    async def main() -> None:
        w = World(
            cut=(kind, 0),
            close_steps=3,
            probe_every=1.0,
            min_size=1,
            max_size=1,
            connect_timeout=None,
            wait_queue_timeout=5,
        )
        w.pool.ready()
        if kind == "keep-alive":
            await asyncio.sleep(1.0)  # the probe's task is made (and cut) now
        elif kind == "close":
            await settle()
            (await w.pool.checkout()).discard()
        await settle()
        assert w.cut
        stats = w.check()
        assert stats.pending == 0 and stats.in_use == 0, stats
        await w.use()
        await w.pool.close()
        assert w.check().total == 0
        assert [t for t in asyncio.all_tasks() if t is not asyncio.current_task()] == []
        assert all(link.close_calls == 1 for link in w.made)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run(main())
        gc.collect()
    assert [str(w.message) for w in caught] == []


def test_a_second_close_waits_for_the_close_of_a_lease_returned_after_the_first() -> None:
    """``close()`` "waits for the pool's own tasks": a lease returned after a first ``close()``
    ended is closed then (an async close); a second ``close()`` must wait for that close too."""

    async def main() -> None:
        w = World(close_steps=3)
        w.pool.ready()
        lease = await w.pool.checkout()
        await w.pool.close()
        give_back(lease)  # closed now: its async close runs in a task of the pool's
        await w.close()  # waits for it

    run(main())
