"""SQLAlchemy's ``AsyncAdaptedQueuePool`` given the guarantee poolkit's drop-in adds: a fair queue.

SQLAlchemy's ``AsyncAdaptedQueue`` is an ``asyncio.Queue``: a connection put back sits in it
until the getter it woke runs, and a task that asks in between (most often the one that just put
it back) takes it first. Under contention that spares the newcomer a wait, and its greenlet a
switch out and back, and leaves the woken getter to wait again. poolkit's drop-in hands the
connection to the oldest waiter instead. ``FairQueue`` does the same within SQLAlchemy's pool,
through its own extension point (``QueuePool._queue_class``), so that the peers benchmark can
show SQLAlchemy's pool with that guarantee beside the pool as shipped: the row named "fair
queue" (what it adds). It is a benchmark's instrument, not a pool for use: it has no blocking
``put`` (``QueuePool`` never blocks on one) and no LIFO order.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Any

from sqlalchemy.pool import AsyncAdaptedQueuePool
from sqlalchemy.util.concurrency import await_
from sqlalchemy.util.queue import AsyncAdaptedQueue, Empty, Full

__all__ = ["FairAsyncAdaptedQueuePool", "FairQueue"]


class FairQueue(AsyncAdaptedQueue[Any]):
    """First in, first out, handed over: an item put goes to the oldest waiting ``get``, and a
    ``get`` takes an item at once only when nobody waits (items wait only while no ``get``
    does). A waiter cancelled after it was handed an item passes it on to the next."""

    def __init__(self, maxsize: int = 0, use_lifo: bool = False) -> None:
        if use_lifo:
            raise ValueError("FairQueue hands items over first in, first out: use_lifo=False")
        self.maxsize = maxsize
        self.use_lifo = False
        self._items: deque[Any] = deque()
        self._waiters: deque[asyncio.Future[Any]] = deque()

    def empty(self) -> bool:
        return not self._items

    def full(self) -> bool:
        return 0 < self.maxsize <= len(self._items)

    def qsize(self) -> int:
        return len(self._items)

    def put_nowait(self, item: Any) -> None:
        waiters = self._waiters
        while waiters:
            waiter = waiters.popleft()
            if not waiter.done():
                waiter.set_result(item)
                return
        if self.full():
            raise Full()
        self._items.append(item)

    def put(self, item: Any, block: bool = True, timeout: float | None = None) -> None:
        self.put_nowait(item)  # (never full while QueuePool counts its overflow)

    def get_nowait(self) -> Any:
        if not self._items:
            raise Empty()
        return self._items.popleft()

    def get(self, block: bool = True, timeout: float | None = None) -> Any:
        if self._items:
            return self._items.popleft()
        if not block:
            raise Empty()
        try:
            return await_(self._wait(timeout))
        except TimeoutError as err:
            raise Empty() from err

    async def _wait(self, timeout: float | None) -> Any:
        waiter: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            async with asyncio.timeout(timeout):  # (as SQLAlchemy's wait on Python 3.11)
                return await waiter
        except BaseException:
            if waiter.done() and not waiter.cancelled():
                self.put_nowait(waiter.result())  # handed over as it gave up: to the next
            raise  # (else its future is cancelled: ``put_nowait`` passes over it)


class FairAsyncAdaptedQueuePool(AsyncAdaptedQueuePool):
    """SQLAlchemy's ``AsyncAdaptedQueuePool`` on a :class:`FairQueue`."""

    _queue_class = FairQueue
