"""The floors the benchmarks measure pools against, and the statistics they share.

* :class:`AsyncFloor` / :class:`ThreadFloor` / :class:`TrioFloor`: a minimal correct FIFO pool (a
  deque of idle connections, a deque of waiters, direct hand-off to the oldest waiter, no
  barging) for asyncio, for threads and on trio's own primitives (``poolkit[trio]``), over
  whatever connections it is given: null ones (``bench_pool.py``) or the drivers' real ones
  (``peers.py``). No check, no reset, no limit, no statistics: the least a pool can do.
* :class:`NullConn`: a connection that is nothing (``close()`` does nothing).
* :func:`null_async_pool` / :func:`null_thread_pool`: poolkit's pools over null connections,
  every connection made before they are returned (what the floors are compared with).
* :func:`pctl`: a percentile of sorted values.

Used by ``bench_pool.py``, ``bytecodes.py`` (through it) and ``peers.py``.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from collections.abc import Iterable
from typing import Any, Generic, TypeVar

import poolkit

__all__ = [
    "NAN",
    "AsyncFloor",
    "NullConn",
    "ThreadFloor",
    "TrioFloor",
    "null_async_pool",
    "null_options",
    "null_thread_pool",
    "pctl",
]

NAN = float("nan")
C = TypeVar("C")


class NullConn:
    """A connection with nothing behind it."""

    __slots__ = ()

    def close(self) -> None:
        pass

    def rollback(self) -> None:  # (what SQLAlchemy's pool calls at check-in: a DB-API method)
        pass


class AsyncFloor(Generic[C]):
    """Minimal correct FIFO pool for asyncio: idle deque + deque of waiter futures. Make it with
    the event loop running."""

    def __init__(self, connections: Iterable[C]) -> None:
        self._loop = asyncio.get_running_loop()
        self._idle: deque[C] = deque(connections)
        self._waiters: deque[asyncio.Future[C]] = deque()

    async def acquire(self) -> C:
        if self._idle and not self._waiters:
            return self._idle.popleft()
        fut: asyncio.Future[C] = self._loop.create_future()
        self._waiters.append(fut)
        try:
            return await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():
                self.release(fut.result())  # handed one, then cancelled: give it back
            else:
                try:
                    self._waiters.remove(fut)
                except ValueError:
                    pass
            raise

    def release(self, conn: C) -> None:
        waiters = self._waiters
        while waiters:
            fut = waiters.popleft()
            if not fut.done():
                fut.set_result(conn)
                return
        self._idle.append(conn)

    def idle(self) -> list[C]:
        """The connections in the pool now (to close them at the end)."""
        return list(self._idle)


class TrioFloor(Generic[C]):
    """Minimal correct FIFO pool on trio's primitives: idle deque + deque of parked tasks, each
    rescheduled with the connection it is handed (``trio.lowlevel``); a cancelled waiter leaves
    the queue. Make it inside ``trio.run`` (trio is imported here, not by this module)."""

    def __init__(self, connections: Iterable[C]) -> None:
        import outcome
        import trio

        self._lowlevel = trio.lowlevel
        self._value = outcome.Value
        self._idle: deque[C] = deque(connections)
        self._waiters: deque[Any] = deque()  # the parked tasks, oldest first

    async def acquire(self) -> C:
        if self._idle and not self._waiters:
            return self._idle.popleft()
        lowlevel = self._lowlevel
        task = lowlevel.current_task()
        self._waiters.append(task)

        def abort(_: Any) -> Any:  # (still parked: not handed anything)
            self._waiters.remove(task)
            return lowlevel.Abort.SUCCEEDED

        conn: C = await lowlevel.wait_task_rescheduled(abort)
        return conn

    def release(self, conn: C) -> None:
        if self._waiters:
            self._lowlevel.reschedule(self._waiters.popleft(), self._value(conn))
        else:
            self._idle.append(conn)

    def idle(self) -> list[C]:
        """The connections in the pool now (to close them at the end)."""
        return list(self._idle)


class _Slot:
    __slots__ = ("lock", "obj")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.lock.acquire()
        self.obj: object = None


class ThreadFloor(Generic[C]):
    """Minimal correct FIFO pool for threads: direct hand-off to the oldest waiter, no barging."""

    def __init__(self, connections: Iterable[C]) -> None:
        self._lock = threading.Lock()
        self._idle: deque[C] = deque(connections)
        self._waiters: deque[_Slot] = deque()

    def acquire(self) -> C:
        with self._lock:
            if self._idle and not self._waiters:
                return self._idle.popleft()
            slot = _Slot()
            self._waiters.append(slot)
        slot.lock.acquire()
        return slot.obj  # type: ignore[return-value]  # (set by release(), a C)

    def release(self, conn: C) -> None:
        with self._lock:
            if not self._waiters:
                self._idle.append(conn)
                return
            slot = self._waiters.popleft()
            slot.obj = conn
        slot.lock.release()

    def idle(self) -> list[C]:
        """The connections in the pool now (to close them at the end)."""
        with self._lock:
            return list(self._idle)


def pctl(sorted_values: list[float], q: float) -> float:
    """The ``q`` quantile (0..1) of ``sorted_values`` (nearest rank); NaN when empty."""
    if not sorted_values:
        return NAN
    return sorted_values[min(len(sorted_values) - 1, int(q * (len(sorted_values) - 1) + 0.5))]


# ---------------------------------------------------------------------- poolkit, null connections

WARM_TIMEOUT = 60.0  # seconds a pool may take to make its connections


def null_options(size: int) -> poolkit.PoolOptions:
    """``size`` connections, all kept, all made at once (the rest: poolkit's defaults)."""
    return poolkit.PoolOptions(max_size=size, min_size=size, max_connecting=size)


async def _null_connect(ctx: poolkit.ConnectContext) -> NullConn:
    return NullConn()


def _null_connect_sync(ctx: poolkit.ConnectContext) -> NullConn:
    return NullConn()


async def null_async_pool(
    size: int, options: poolkit.PoolOptions | None = None
) -> poolkit.AsyncPool[NullConn]:
    """A ready ``AsyncPool`` of ``size`` null connections, all made (``options``: instead of
    :func:`null_options`)."""
    pool = poolkit.AsyncPool(_null_connect, address="bench", options=options or null_options(size))
    pool.ready()
    deadline = time.monotonic() + WARM_TIMEOUT
    while pool.stats().available < size:
        if time.monotonic() > deadline:
            raise RuntimeError(f"poolkit did not pre-warm: {pool!r}")
        await asyncio.sleep(0.001)
    return pool


def null_thread_pool(
    size: int, options: poolkit.PoolOptions | None = None
) -> poolkit.Pool[NullConn]:
    """A ready ``Pool`` of ``size`` null connections, all made."""
    pool = poolkit.Pool(_null_connect_sync, address="bench", options=options or null_options(size))
    pool.ready()
    deadline = time.monotonic() + WARM_TIMEOUT
    while pool.stats().available < size:
        if time.monotonic() > deadline:
            raise RuntimeError(f"poolkit did not pre-warm: {pool!r}")
        time.sleep(0.001)
    return pool
