"""``AsyncPool``'s I/O under trio: imported by ``poolkit.asyncio`` only when the pool binds and
trio (not asyncio) is the async library running, so that neither the asyncio paths nor a user
without trio pay anything for it (trio comes with the ``poolkit[trio]`` extra).

``AsyncPool`` decides nothing here either: the core decides, and the pool's one module carries
out its actions. What differs between the libraries is only how the pool waits, wakes, spawns,
times and closes, and that is this module's ``TrioIO``, one per pool, chosen once at bind.

Rules of this module
--------------------
* Structured concurrency. The pool's own tasks (connects, hooks awaited apart, async closes, the
  one timer) run in a nursery the pool owns, opened by ``async with pool:`` and closed at the end
  of that block, after ``close()``: no task of the pool outlives the block. Under trio a pool
  that needs a task (``ready()``, a checkout, ``clear()``...) outside such a block raises
  ``RuntimeError`` naming the call: there is no hidden system task.
* Each of those tasks runs in a cancel scope of its own, shielded: as on asyncio, only the pool
  cancels its tasks (a connect abandoned by ``clear``/``close``, a hook whose connection is
  closed); a caller's cancellation never cuts a connect or a close in the middle.
* A waiting checkout waits on a ``Waiter`` (trio's ``wait_task_rescheduled``). Cancelled, it
  raises ``trio.Cancelled`` into the checkout, which tells the core (``AsyncPool.checkout``);
  if the core handed it a connection meanwhile, the checkout gives it straight back.
* ``close()`` runs shielded, bounded by ``CLOSE_TIMEOUT``: under a cancelled scope it still closes
  every connection; what has not ended by then is cancelled.
* Time is trio's clock (a ``MockClock`` in tests), unless the pool has a clock of its own. On
  trio's own clock, which is ``time.perf_counter()`` plus a constant offset, the pool reads
  ``time.perf_counter`` itself (a C call, where ``trio.current_time()`` is three Python calls on
  every clocked checkout) and adds the offset to the deadlines it hands trio (``deadline``). The
  one timer is a task whose cancel scope's deadline is the core's earliest deadline.
* An adaptive pool on trio's own clock tells the core the run's lag (issue 40) every
  ``LAG_EVERY`` seconds, as on asyncio: how long a task made ready waits to run (a checkpoint's
  round trip through the run queue), from a task of the pool's that ends with ``close``.
"""

from __future__ import annotations

import contextvars
import logging
import math
import time
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, final

import trio

from ._frontend import ThreadLoad, tell_client

if TYPE_CHECKING:
    from .asyncio import AsyncPool

__all__ = ["CLOSE_TIMEOUT", "Cancelled", "PoolTask", "TrioIO", "Waiter", "current_time"]

#: what a cancellation raises under trio, and trio's clock (the pool's time under trio)
Cancelled = trio.Cancelled
current_time = trio.current_time

_log = logging.getLogger("poolkit.pool")
#: seconds ``close()`` waits, shielded, for the pool's tasks (closes, abandoned connects) to end
#: before it cancels those left
CLOSE_TIMEOUT = 30.0

#: the handle of the pool task running in this context (each trio task has its own context)
_CURRENT: contextvars.ContextVar[PoolTask | None] = contextvars.ContextVar(
    "poolkit_trio_task", default=None
)


def _aborted(waiter: Waiter) -> Callable[[Any], trio.lowlevel.Abort]:
    def abort(_: Any) -> trio.lowlevel.Abort:
        waiter._task = None  # (woken from now on, it has no task to reschedule)
        return trio.lowlevel.Abort.SUCCEEDED

    return abort


@final
class Waiter:
    """What a waiting checkout awaits under trio (asyncio's is a future): called, it wakes it
    (``AsyncPool._wake`` calls a request's owner that is not a future)."""

    __slots__ = ("_done", "_task")

    def __init__(self) -> None:
        self._done = False
        self._task: Any = None

    def __call__(self) -> None:
        if self._done:
            return
        self._done = True
        task = self._task
        if task is not None:
            self._task = None
            trio.lowlevel.reschedule(task)

    def __await__(self) -> Any:
        if self._done:  # (served in the step that queued it)
            return
        self._task = trio.lowlevel.current_task()
        # (awaited: ``yield from`` its ``__await__`` is what ``await`` does, in this ``__await__``)
        yield from trio.lowlevel.wait_task_rescheduled(_aborted(self)).__await__()  # noqa: ASYNC105


@final
class PoolTask:
    """A task of the pool's own: its cancel scope (shielded: only the pool cancels it) and
    whether it ended. ``AsyncPool`` holds it where it holds an asyncio task."""

    __slots__ = ("_done", "name", "scope")

    def __init__(self, name: str) -> None:
        self.name = name
        self.scope = trio.CancelScope(shield=True)
        self._done = False

    def done(self) -> bool:
        return self._done

    def cancel(self) -> None:
        self.scope.cancel()

    def __repr__(self) -> str:
        return f"<PoolTask {self.name} {'done' if self._done else 'running'}>"


@final
class TrioIO:
    """One pool's I/O under trio (see the module's rules)."""

    def __init__(self, pool: AsyncPool[Any]) -> None:
        self._pool = pool
        self._root = trio.lowlevel.current_root_task()
        self._token = trio.lowlevel.current_trio_token()
        self._nursery: trio.Nursery | None = None
        self._manager: Any = None  # (the nursery's async context manager)
        self._opened = False
        self._tasks: set[PoolTask] = set()
        self._all_done = trio.Event()
        self._all_done.set()
        #: the timer: the deadline armed (trio's clock), the scope that sleeps until it
        self._when = math.inf
        self._timer_scope: trio.CancelScope | None = None
        self._timer_task: PoolTask | None = None
        self._lag_task: PoolTask | None = None
        clock = type(trio.lowlevel.current_clock())
        #: trio's own clock (not a virtual one): ``time.perf_counter`` plus a constant offset
        self.system_clock = clock.__name__ == "SystemClock" and clock.__module__.startswith("trio.")
        #: the pool's time when it has no clock of its own (``AsyncPool._bind_trio``), and what
        #: turns one of its instants into trio's
        self.time: Callable[[], float] = time.perf_counter if self.system_clock else current_time
        self._offset = (
            getattr(trio.lowlevel.current_clock(), "offset", 0.0) if self.system_clock else 0.0
        )

    # ------------------------------------------------------------------ binding

    def bound(self, operation: str) -> TrioIO:
        """Before ``operation``: this must be the pool's trio run, inside ``async with pool:``."""
        try:
            root = trio.lowlevel.current_root_task()
        except RuntimeError:
            root = None
        if root is not self._root:
            raise RuntimeError(
                f"AsyncPool.{operation}(): this pool runs in the trio run it first ran in, and it "
                "is not running here (make one pool per trio.run)"
            )
        if self._nursery is None and operation not in ("close", "init"):
            raise RuntimeError(
                f"AsyncPool.{operation}() under trio: the pool runs its connects, hooks and "
                "closes in a nursery of its own, which `async with pool:` opens (and closes, "
                "with the pool, at the end of the block); use `async with pool:` (a builder's "
                "pool: `async with builder(...) as pool:`, not `await builder(...)`)"
                + ("" if not self._opened else " (this pool's block has ended)")
            )
        return self

    @property
    def running(self) -> bool:
        """Whether the pool's nursery is open (inside ``async with pool:``)."""
        return self._nursery is not None

    def create_future(self) -> Waiter:
        """What a waiting checkout awaits (``AsyncPool.checkout``'s ``loop.create_future()``)."""
        return Waiter()

    @staticmethod
    def current_task() -> PoolTask | None:
        """The pool task running here, if any (``asyncio.current_task``'s place)."""
        return _CURRENT.get()

    # ------------------------------------------------------------------ the nursery

    async def open(self) -> None:
        """``async with pool:``'s entry: the pool's nursery, and its timer task."""
        if self._opened:
            raise RuntimeError(
                f"AsyncPool ({self._pool.address}): `async with pool:` may be entered once "
                "under trio (its nursery ends with the block)"
            )
        self._opened = True
        manager = trio.open_nursery()
        self._nursery = await manager.__aenter__()
        self._manager = manager
        self._timer_task = self.spawn(self._run_timer(), "poolkit-timer")
        pool = self._pool
        if (
            pool.options.adaptive is not None and pool._clock is None and self.system_clock
        ):  # (trio's own clock: a virtual one has no lag)
            self._lag_task = self.spawn(self._watch_lag(), "poolkit-lag")

    async def exit(self) -> None:
        """``async with pool:``'s exit, after ``close()``: the nursery ends (its tasks have
        ended, or been cancelled, in ``close``'s shielded wait)."""
        manager = self._manager
        if manager is None:
            return
        self._manager = None
        try:
            # (not the block's exception: a user's error leaves the block as it came, not
            # wrapped in an ExceptionGroup by the nursery)
            await manager.__aexit__(None, None, None)
        finally:
            self._nursery = None

    # ------------------------------------------------------------------ tasks

    def spawn(
        self,
        work: Coroutine[Any, Any, Any],
        name: str,
        if_cancelled: Callable[[], None] | None = None,
    ) -> PoolTask:
        """Run ``work`` in the pool's nursery, in a shielded scope of its own (see the rules).
        Raises ``RuntimeError`` (``work`` closed) if there is no nursery. ``if_cancelled`` is
        asyncio's (a task cancelled before its first step): here ``work`` always starts, and
        reports its own cancellation."""
        nursery = self._nursery
        if nursery is None:
            work.close()
            raise RuntimeError(
                f"AsyncPool ({self._pool.address}) under trio has no nursery to run {name} in: "
                "use the pool inside `async with pool:`"
            )
        task = PoolTask(name)
        try:
            nursery.start_soon(self._run, task, work, name=name)
        except BaseException:
            work.close()
            raise
        self._tasks.add(task)
        if self._all_done.is_set():
            self._all_done = trio.Event()
        return task

    async def _run(self, task: PoolTask, work: Coroutine[Any, Any, Any]) -> None:
        _CURRENT.set(task)
        try:
            with task.scope:
                await work
        finally:
            task._done = True
            self._tasks.discard(task)
            if not self._tasks:
                self._all_done.set()

    # ------------------------------------------------------------------ the timer

    def arm(self, when: float) -> None:
        """The one timer, for the core's deadline ``when`` (on the pool's clock)."""
        pool = self._pool
        if pool._clock is not None:  # a clock of the user's: its time is not trio's
            when = trio.current_time() + max(0.0, when - pool._time())
        else:
            when += self._offset  # (0 unless on trio's own clock: see the rules)
        self._when = when
        scope = self._timer_scope
        if scope is not None:
            scope.deadline = when

    def cancel(self) -> None:
        """The armed timer, dropped (``AsyncPool._cancel_timer``)."""
        self._when = math.inf
        scope = self._timer_scope
        if scope is not None:
            scope.deadline = math.inf

    async def _run_timer(self) -> None:
        while True:
            with trio.CancelScope(deadline=self._when) as scope:
                self._timer_scope = scope
                await trio.sleep_forever()
            self._timer_scope = None
            if self._when <= trio.current_time():
                self._when = math.inf
                try:
                    self._pool._on_timer()
                except Exception:  # (as asyncio's loop reports a callback's error)
                    _log.exception("the timer of pool %s raised", self._pool.address)

    async def _watch_lag(self) -> None:
        from .asyncio import LAG_EVERY

        pool = self._pool
        load = ThreadLoad(trio.current_time())
        while True:
            await trio.sleep(LAG_EVERY)
            made_ready = trio.current_time()
            await trio.lowlevel.cancel_shielded_checkpoint()  # (back of the run queue)
            tell_client(pool._core, load, made_ready, trio.current_time(), pool._time())

    # ------------------------------------------------------------------ close

    async def close(self) -> None:
        """The end of ``AsyncPool.close()`` (the core already told): the pool's tasks run out,
        shielded from the caller's cancellation, for at most ``CLOSE_TIMEOUT`` seconds; then
        those left are cancelled (and awaited: they are shielded from nothing else)."""
        for own in (self._timer_task, self._lag_task):
            if own is not None:
                own.cancel()
        with trio.CancelScope(shield=True):
            with trio.move_on_after(CLOSE_TIMEOUT):
                while self._tasks:
                    await self._all_done.wait()
            for task in list(self._tasks):
                task.cancel()
            while self._tasks:
                await self._all_done.wait()

    def reap_soon(self, reap: Callable[[], None]) -> bool:
        """``reap`` soon in the pool's trio run (a lease collected anywhere); false if that run
        is over."""
        try:
            self._token.run_sync_soon(reap)
        except trio.RunFinishedError:
            return False
        return True
