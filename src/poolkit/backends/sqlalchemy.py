"""SQLAlchemy pools served by poolkit: ``QueuePool`` for ``create_engine`` and
``AsyncAdaptedQueuePool`` for ``create_async_engine``.

Moving from SQLAlchemy's ``QueuePool`` is one argument::

    engine = create_engine(url)                                    # before
    engine = create_engine(url, poolclass=QueuePool)               # after
    # (from poolkit.backends.sqlalchemy import QueuePool)

Each class is a :class:`sqlalchemy.pool.Pool` with ``QueuePool``'s constructor (``pool_size``,
``max_overflow``, ``timeout``, ``use_lifo``, and ``Pool``'s ``recycle``, ``pre_ping``,
``reset_on_return``, ``echo``, ``logging_name``, ``events``, ``dialect``) and its methods
(``dispose``, ``recreate``, ``status``, ``size``, ``checkedin``, ``overflow``, ``checkedout``,
``timeout``). SQLAlchemy's own connection records (``_ConnectionRecord``) and proxies
(``_ConnectionFairy``) are kept, so every pool event (``connect``, ``first_connect``,
``checkout``, ``checkin``, ``reset``, ``invalidate``, ``soft_invalidate``, ``close``,
``detach``, ``close_detached``), the recycling, the pre-ping and the reset on return are
SQLAlchemy's own code, as on ``QueuePool``. Which record a caller gets, who waits, in what order,
for how long, and how many records there may be, is a poolkit pool's: waiting callers are served
in arrival order (``QueuePool``'s ``threading.Condition`` lets a newcomer take a connection that a
waiter was woken for), and a cancelled or timed-out wait leaves the queue without losing a
connection.

Rules of this module
--------------------
* The poolkit pool's connections are *records*: its connect function makes an unconnected
  ``_ConnectionRecord`` (no I/O: it cannot fail and needs no thread or greenlet). The caller that
  gets a new record connects it, in its own thread or greenlet, as ``QueuePool`` does; if that
  fails the record is discarded and the error raised, as ``QueuePool`` drops the overflow slot.
  A record invalidated later stays in the pool and reconnects at its next checkout, as on
  ``QueuePool``.
* Limits: ``max_size`` is ``pool_size + max_overflow`` (no limit when ``max_overflow`` is -1 or
  ``pool_size`` 0). A record given back while ``pool_size`` records are idle already is closed
  (``QueuePool``'s "queue full"), decided under one lock so that concurrent check-ins cannot
  both keep theirs; the lock is held over no I/O and no greenlet switch (the record is closed
  after it is let go). Idle records are handed out first in, first out (``use_lifo``: last in).
* For each record out, the pool keeps its lease and the poolkit pool it is from:
  ``_do_return_conn`` releases it (the poolkit pool hands it to the oldest waiter, or parks it)
  or discards it (closed).
* ``timeout`` bounds each checkout's wait; running out raises ``sqlalchemy.exc.TimeoutError``
  with ``QueuePool``'s message. ``timeout=0`` (or less) never waits for a record to come back
  (it waits, at most ``_MAKE_TIMEOUT``, for one the pool has room to make).
* ``dispose()`` puts a new poolkit pool in the old one's place and closes the old one: its idle
  records at once, here. A record out at the time is taken back when it comes back, as
  ``QueuePool`` takes it back into its queue: the new poolkit pool's connect function hands it
  out before it makes new records (beyond ``pool_size`` idle, it is closed).
* An asyncio pool's poolkit pool is made at its first checkout, and never asked anything
  before (asking binds an ``AsyncPool`` to the running loop): engines are made before any loop
  runs, and ``asyncio.run(engine.dispose())`` runs in another loop than the engine's; a
  ``dispose()`` from another loop closes the old pool's idle records itself.

Why ``AsyncAdaptedQueuePool`` stands on :class:`~poolkit.AsyncPool`
--------------------------------------------------------------------
SQLAlchemy's async engine runs the pool's synchronous API inside a greenlet on the event loop:
``connect()``, the check-in, the reset, all of it. A blocking wait there (the threaded
:class:`~poolkit.Pool`'s ``checkout``) would block the event loop, and with it every connection
that could be given back: one exhausted pool would hang the process. So the waits are the
asyncio pool's, reached through SQLAlchemy's ``await_`` (``await_only``), which suspends the
greenlet and awaits on the loop: the wait is an ordinary asyncio wait, cancelled with its task
(poolkit's ``AsyncPool`` withdraws a cancelled request and never hands it a record). A check-in is
synchronous on both pools (``Lease.release()``), which is what SQLAlchemy's check-in needs: it
runs in the greenlet, during a garbage collection, or while a cancellation unwinds, and must
return the record in all those cases.
"""

from __future__ import annotations

import asyncio
import math
import threading
import weakref
from collections import deque
from collections.abc import Coroutine
from typing import Any

from ._common import hold
from ._extras import require
from ._steps import Rest

require("sqlalchemy", "sqlalchemy", "sqlalchemy")

from sqlalchemy import exc  # noqa: E402
from sqlalchemy.pool import ConnectionPoolEntry  # noqa: E402
from sqlalchemy.pool import Pool as _SAPool  # noqa: E402
from sqlalchemy.pool.base import _AsyncConnDialect, _ConnectionRecord  # noqa: E402
from sqlalchemy.util.concurrency import await_, greenlet_spawn, in_greenlet  # noqa: E402

from .. import (  # noqa: E402
    ConnectContext,
    Lease,
    PoolClosedError,
    PoolOptions,
    PoolState,
    PoolStats,
    WaitQueueTimeoutError,
)
from ..asyncio import AsyncPool  # noqa: E402
from ..threaded import Pool  # noqa: E402

__all__ = ["AsyncAdaptedQueuePool", "QueuePool"]

#: the most a checkout with ``timeout=0`` waits for the record it made room for (no I/O: it comes
#: at once unless the machine stalls)
_MAKE_TIMEOUT = 5.0


class _NotYet:
    """An asyncio pool's poolkit pool before its first checkout (paused, holding nothing)."""

    state = PoolState.PAUSED


_NOT_YET: Any = _NotYet()


class _NoStats:
    """The counts of a poolkit pool not made ready yet (it holds nothing)."""

    available = 0
    total = 0


_NO_STATS = _NoStats()


class _Empty(Exception):
    """A checkout outside a greenlet found no record ready."""


class _Entry:
    """A poolkit connection: one SQLAlchemy connection record. ``new`` until it first connects;
    closing it closes the record (SQLAlchemy's ``close`` event, the DBAPI connection's close).
    An async pool's record closed outside a greenlet (by the pool's own task) is closed in one
    that the returned coroutine spawns (the ``AsyncPool`` awaits it)."""

    __slots__ = ("__weakref__", "closed", "is_async", "new", "pool", "record")

    def __init__(self, record: _ConnectionRecord, is_async: bool, pool: Any) -> None:
        self.record = record
        self.new = True
        self.is_async = is_async
        self.pool = pool  #: the poolkit pool it belongs to
        #: closed already, or to be closed by the caller that gave it back (outside the lock)
        self.closed = False

    def close(self) -> Any:
        if self.closed:
            return None
        self.closed = True
        if self.is_async and not in_greenlet():
            return greenlet_spawn(self.record.close)
        self.record.close()
        return None


class QueuePool(_SAPool):
    """SQLAlchemy's ``QueuePool`` (same constructor, methods and events) on a poolkit
    :class:`~poolkit.Pool`: ``create_engine(url, poolclass=QueuePool)``."""

    _is_asyncio = False  # (SQLAlchemy's Pool's is a hybrid property; QueuePool's a plain bool)
    #: the pool logs where SQLAlchemy's QueuePool logs (``sqlalchemy.pool``'s loggers)
    _sqla_logger_namespace = "sqlalchemy.pool.impl.QueuePool"

    def __init__(
        self,
        creator: Any,
        pool_size: int = 5,
        max_overflow: int = 10,
        timeout: float = 30.0,
        use_lifo: bool = False,
        **kw: Any,
    ) -> None:
        for name, value in (("pool_size", pool_size), ("max_overflow", max_overflow)):
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"{type(self).__name__}({name}=...) must be an int, got {value!r}")
        if pool_size < 0:
            raise ValueError(f"{type(self).__name__}(pool_size=...) must be >= 0, got {pool_size}")
        if timeout is not None and (
            isinstance(timeout, bool) or not isinstance(timeout, int | float) or math.isnan(timeout)
        ):
            raise TypeError(
                f"{type(self).__name__}(timeout=...) must be a number of seconds or None, got "
                f"{timeout!r}"
            )
        _SAPool.__init__(self, creator, **kw)
        self._size = pool_size
        self._max_overflow = -1 if pool_size == 0 or max_overflow < 0 else max_overflow
        #: seconds a checkout waits; None: no limit; 0 or less: never waits for a record to
        #: come back (as QueuePool's, read at each checkout)
        self._timeout = timeout
        self._use_lifo = bool(use_lifo)
        #: record -> its lease and the poolkit pool it is from, for each record out
        self._leases: dict[ConnectionPoolEntry, tuple[Lease[_Entry], Any]] = {}
        #: records given back after a dispose() that the poolkit pool now in use takes (its
        #: connect function hands them out before it makes new ones), as QueuePool's queue takes
        #: them back
        self._adopted: deque[_ConnectionRecord] = deque()
        #: every record the poolkit pools hold (for a dispose() from another event loop)
        self._entries: weakref.WeakSet[_Entry] = weakref.WeakSet()
        #: the check-ins' decision (keep or close) and its release, one at a time
        self._overflow_lock = threading.Lock()
        self._pool = self._new_pool()

    # ------------------------------------------------------------------ the poolkit pool

    def _options(self) -> PoolOptions:
        unlimited = self._max_overflow == -1
        return PoolOptions(
            max_size=0 if unlimited else self._size + self._max_overflow,
            min_size=0,
            # records are made without I/O: as many at once as callers ask for
            max_connecting=max(2, self._size + max(self._max_overflow, 0)),
            background_interval=math.inf,
            connect_timeout=None,
            idle_order="lifo" if self._use_lifo else "fifo",  # (QueuePool's: FIFO by default)
        )

    def _make_entry(self, ctx: ConnectContext) -> _Entry:
        try:
            record = self._adopted.popleft()
        except IndexError:
            entry = _Entry(_ConnectionRecord(self, connect=False), self._is_asyncio, ctx.pool)
        else:
            entry = _Entry(record, self._is_asyncio, ctx.pool)
            entry.new = False  # (it reconnects at its checkout if it must, as any record)
        self._entries.add(entry)
        return entry

    def _new_pool(self) -> Any:
        pool = Pool(self._make_entry, options=self._options(), address="sqlalchemy")
        pool.ready()
        return pool

    def _checkout_lease(self, timeout: float) -> Lease[_Entry]:
        lease: Lease[_Entry] = self._pool.checkout(timeout=timeout)
        return lease

    @property
    def _max_overflow(self) -> int:
        return self._overflow_limit

    @_max_overflow.setter
    def _max_overflow(self, value: int) -> None:
        # SQLAlchemy's own testing engines set it (and ``_timeout``) on a pool just made: the
        # limits are the poolkit pool's, so a new one takes the old one's place
        if getattr(self, "_overflow_limit", value) == value:
            self._overflow_limit = value
            return
        self._overflow_limit = value
        self._replace_pool()

    def _stats(self) -> PoolStats | _NoStats:
        """The poolkit pool's statistics; an asyncio one never made ready (bound to no event
        loop yet, and holding nothing) is not asked, which would bind it to the loop running
        now, if any."""
        pool = self._pool
        if pool.state is PoolState.PAUSED:
            return _NO_STATS
        stats: PoolStats = pool.stats()
        return stats

    def _room(self) -> bool:
        """Whether a checkout would be served without waiting for a record to come back."""
        stats = self._stats()
        if stats.available or self._overflow_limit == -1:
            return True
        return int(stats.total) < self._size + self._overflow_limit

    # ------------------------------------------------------------------ SQLAlchemy's Pool API

    def _do_get(self) -> ConnectionPoolEntry:
        timeout = self._timeout
        if timeout is not None and timeout <= 0:
            # never wait for a record to come back, as QueuePool; a new record is made without
            # I/O, but on the poolkit pool's side: its wait is bounded by _MAKE_TIMEOUT
            timeout = _MAKE_TIMEOUT if self._room() else 0.0
        try:
            try:
                lease = self._checkout_lease(timeout)
            except PoolClosedError:  # (disposed while it waited: wait in the new pool)
                lease = self._checkout_lease(timeout)
        except (WaitQueueTimeoutError, _Empty):
            raise exc.TimeoutError(
                f"QueuePool limit of size {self.size()} overflow {self.overflow()} reached, "
                f"connection timed out, timeout {self._timeout or 0:0.2f}",
                code="3o7r",
            ) from None
        entry = lease.connection
        record = entry.record
        if entry.new:
            try:
                record.get_connection()  # (connects it, in this thread or greenlet)
            except BaseException:
                lease.discard()
                raise
            entry.new = False
        self._leases[record] = (lease, self._pool)
        return record

    def _do_return_conn(self, record: ConnectionPoolEntry) -> None:
        out = self._leases.pop(record, None)
        if out is None:
            return  # (not out of this pool)
        lease, owner = out
        size = self._size
        if owner is self._pool and (not size or self._overflow_limit == 0):
            lease.release()  # (the queue can never be full)
            return
        entry = lease.connection
        with self._overflow_lock:  # (nothing in it does I/O, or switches greenlets)
            idle = self._stats().available + len(self._adopted)
            full = bool(size) and idle >= size
            if full or owner is not self._pool:
                # QueuePool's "queue full": the record leaves the pool, closed below; or it is
                # from before a dispose(): it leaves the old pool, for the new one to take
                entry.closed = True
                lease.discard()
                if not full:
                    self._adopted.append(entry.record)
            else:
                lease.release()
        if full:
            record.close()

    def recreate(self) -> QueuePool:
        self.logger.info("Pool recreating")
        return self.__class__(
            self._creator,
            pool_size=self._size,
            max_overflow=self._max_overflow,
            pre_ping=self._pre_ping,
            use_lifo=self._use_lifo,
            timeout=self._timeout,
            recycle=self._recycle,
            echo=self.echo,
            logging_name=self._orig_logging_name,
            reset_on_return=self._reset_on_return,
            _dispatch=self.dispatch,
            dialect=self._dialect,
        )

    def dispose(self) -> None:
        self._replace_pool()
        self.logger.info("Pool disposed. %s", self.status())

    def _replace_pool(self) -> None:
        """A new poolkit pool, with the limits now set, in the old one's place, which closes."""
        old, self._pool = self._pool, self._new_pool()
        while self._adopted:  # (idle too: closed, as QueuePool.dispose() closes its queue's)
            self._adopted.popleft().close()
        if old.state is PoolState.PAUSED:
            return  # (an asyncio pool never used: bound to no loop, nothing to close)
        self._close_pool(old)

    def _close_pool(self, pool: Any) -> None:
        """Close a poolkit pool this pool no longer uses: its idle records at once, here; those
        out when they come back."""
        pool.close()

    def status(self) -> str:
        return (
            f"Pool size: {self.size()}  Connections in pool: {self.checkedin()} "
            f"Current Overflow: {self.overflow()} Current Checked out "
            f"connections: {self.checkedout()}"
        )

    def size(self) -> int:
        return self._size

    def timeout(self) -> float | None:
        return self._timeout

    def checkedin(self) -> int:
        return int(self._stats().available) + len(self._adopted)

    def overflow(self) -> int:
        return self._overflow if self._size else 0

    @property
    def _overflow(self) -> int:
        """QueuePool's counter of the same name, which code and tests read: the records there
        are, less ``pool_size`` (negative while fewer exist)."""
        return int(self._stats().total) + len(self._adopted) - self._size

    def checkedout(self) -> int:
        return len(self._leases)

    def __del__(self) -> None:
        pk = getattr(self, "_pool", None)
        if pk is not None and isinstance(pk, Pool):
            pk.close()


class AsyncAdaptedQueuePool(QueuePool):
    """SQLAlchemy's ``AsyncAdaptedQueuePool`` on a poolkit :class:`~poolkit.AsyncPool`, waited
    on through SQLAlchemy's greenlet bridge: ``create_async_engine(url,
    poolclass=AsyncAdaptedQueuePool)``."""

    _is_asyncio = True
    _dialect = _AsyncConnDialect()
    _sqla_logger_namespace = "sqlalchemy.pool.impl.AsyncAdaptedQueuePool"

    def _new_pool(self) -> Any:
        # (made at its first checkout: an AsyncPool binds to the event loop running when it is
        # made or first used; SQLAlchemy's async engines are made before any loop runs, or in
        # one loop and used in the next: asyncio.run(engine.dispose()) makes the next pool)
        return _NOT_YET

    async def _make_entry_async(self, ctx: ConnectContext) -> _Entry:
        return self._make_entry(ctx)

    def _close_pool(self, pool: Any) -> None:
        try:
            loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        try:
            if in_greenlet():
                await_(pool.close())
            elif loop is None:
                _run_now(pool.close())  # (no loop: what closes without waiting)
            else:
                hold(loop.create_task(pool.close()))
        except RuntimeError:
            # bound to another event loop (``asyncio.run(engine.dispose())`` after the engine
            # ran in an earlier one): its idle records are closed here, as SQLAlchemy's
            # ``dispose()`` closes them from any loop; the poolkit pool is dropped
            out = {id(record) for record in self._leases}
            for entry in list(self._entries):
                if entry.pool is pool and id(entry.record) not in out and not entry.closed:
                    entry.closed = True
                    entry.record.close()

    def _checkout_lease(self, timeout: float) -> Lease[_Entry]:
        pool: AsyncPool[_Entry] = self._pool
        if pool is _NOT_YET:
            pool = self._pool = AsyncPool(
                self._make_entry_async, options=self._options(), address="sqlalchemy"
            )
            pool.ready()
        # A connection idle: the checkout's first step here, served at once (nobody waits
        # while one is idle), it never leaves the greenlet, as AsyncAdaptedQueue's get_nowait().
        # Nothing idle, in a greenlet: it waits (or connects), the whole checkout awaited in the
        # task through SQLAlchemy's bridge (two greenlet switches), its first step there, before
        # any other task runs (the arrival order is kept), as the contended checkouts of a busy
        # pool all are. Should a first step taken here wait after all (``available`` is a
        # glance), the rest is awaited the same way. Outside a greenlet (SQLAlchemy's sync API
        # on an async pool) nothing can wait, as get_nowait() finding it empty: with timeout 0
        # the core fails the checkout at once; should it wait all the same, the request leaves
        # the queue.
        waits = in_greenlet()
        if waits and not pool.available:
            lease: Lease[_Entry] = await_(pool.checkout(timeout=timeout))
            return lease
        coro = pool.checkout(timeout=timeout if waits else 0)
        try:
            step = coro.send(None)
        except StopIteration as done:
            served: Lease[_Entry] = done.value
            return served
        if not waits:
            try:
                coro.throw(asyncio.CancelledError())  # (the request leaves the queue)
            except (asyncio.CancelledError, StopIteration):
                pass
            raise _Empty
        rest: Lease[_Entry] = await_(Rest(coro, step))
        return rest


def _run_now(coro: Coroutine[Any, Any, Any]) -> None:
    """Run ``coro`` as far as it goes without waiting, then drop it."""
    try:
        coro.send(None)
    except StopIteration:
        return
    coro.close()
