"""``Pool``: the pool for threads, safe to use from any thread.

Rules of this module
--------------------
* Every decision is the core's, and everything the two pools share is in ``_base``; this module
  adds the blocking checkout and the check-out and check-in fast paths.
* A waiting checkout blocks on a per-request signal that only the core's completion sets: the
  checkout's timeout is a deadline in the core, not a local wait.
* After ``os.fork()`` the child's pool gets new locks and forgets the parent's connections without
  closing them (``_reset_after_fork``).
"""

from __future__ import annotations

import contextlib
import threading
from _thread import allocate_lock as _allocate_lock
from collections.abc import Callable, Iterator
from typing import Any, TypeVar, Unpack, final, overload

from ._base import DEFAULT, NO_OUTPUT, PoolArguments
from ._core import Request
from ._frontend import ConnectContext, Established, Lease, check_timeout, watched
from ._threaded_io import ThreadIO
from .log import cached_level as _cached_level

__all__ = ["Pool"]

C = TypeVar("C")
#: how many hand-off waits may be noted before they are added to the tally (bounded memory for a
#: pool whose statistics are never read)
_FOLD_WAITS = 256


class _ThreadLease(Lease[Any]):
    """Pool's lease: ``release`` is the check-in fast path, inlined (see ``PoolCore``'s "Fast
    paths")."""

    __slots__ = ()

    def release(self) -> None:
        pool = self._pool
        # nobody listening (no listener, DEBUG known to be off: the logger's cached answer for
        # level 10), and the core takes it back without more ado
        if type(pool) is Pool and pool._quick and _cached_level(10) is False:
            core = pool._core
            lock = pool._lock
            lock.acquire()  # not ``with``: half the cost, and nothing in between can raise
            try:
                taken = self._pool is pool and core.release_idle(self._conn)
                if taken is not False:
                    self._pool = pool._returned
            finally:
                lock.release()
            if taken is True:
                return
            if taken is not False:
                # handed to a waiter: its wait is noted and it is woken, outside the lock
                waits = pool._handoff_waits
                waits.append(pool._time() - taken.started)
                taken.owner()
                if len(waits) >= _FOLD_WAITS:
                    pool._fold_waits()
                return
        pool._release(self)  # the slow path (the Returned marker: raises "already returned")


@final
class Pool(ThreadIO[C]):
    """A connection pool for threads.

    ``connect`` is a function taking a :class:`~poolkit.ConnectContext` and returning the
    connection (anything with a ``close()`` method) or an :class:`~poolkit.Established`; the
    pool's type follows from it. Keyword arguments: ``address``, ``options``, ``listeners``,
    ``clock`` (see the README). A new pool is paused: call :meth:`ready` (or use ``with pool:``)
    before checking out.
    """

    _lease_class = _ThreadLease
    _watched_class = watched(_ThreadLease)

    @overload
    def __init__(
        self: Pool[C],
        connect: Callable[[ConnectContext], Established[C]],
        **kwargs: Unpack[PoolArguments],
    ) -> None: ...
    @overload
    def __init__(
        self: Pool[C], connect: Callable[[ConnectContext], C], **kwargs: Unpack[PoolArguments]
    ) -> None: ...
    def __init__(
        self, connect: Callable[[ConnectContext], Any], **kwargs: Unpack[PoolArguments]
    ) -> None:
        super().__init__(connect, threading.Lock(), **kwargs)
        self._init_io()
        self._after_core()

    def close(self) -> None:
        """Close the pool: close available and pending connections, fail waiting checkouts.
        Leased connections are closed when they come back."""
        self._feed(self._close_step)

    def __enter__(self) -> Pool[C]:
        self.ready()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def checkout(self, timeout: float | None = DEFAULT) -> Lease[C]:
        """Check out a connection, waiting at most ``timeout`` seconds (default:
        ``options.wait_queue_timeout``; ``None`` waits without limit)."""
        if timeout is not DEFAULT and timeout is not None:
            timeout = check_timeout(timeout)  # bad input fails before anything changes
        # The fast path (see PoolCore's "Fast paths"): nobody listening (no listener, DEBUG
        # known to be off) and a connection available, in one turn of the lock.
        if self._quick and _cached_level(10) is False:
            core = self._core
            lock = self._lock
            lock.acquire()  # not ``with``: half the cost, and nothing in between can raise
            try:
                conn = core.lease_idle(self._time() if self._clocked else 0.0)
                left = conn is not None and bool(core.actions)
            finally:
                lock.release()
            if conn is not None:
                if left:
                    self._after_core()  # perished connections closed on the way
                return _ThreadLease(conn, self)
        if self._orphans:
            self._reap()  # a lease lost to the garbage collector may free a connection
        if timeout is DEFAULT:
            timeout = self.options.wait_queue_timeout
        wait: Callable[[], Any] | None = None
        actions = NO_OUTPUT
        with self._lock:  # (``_feed`` inlined: the path of every checkout that waits)
            core = self._input()
            now = self._time()
            req = Request(now, None if timeout is None else now + timeout)
            core.request(req, now)
            if req.queued:  # (its owner is set before the lock is let go: a connect may serve it)
                if self._fake_signals:
                    wait, req.owner = self._new_signal()
                else:  # _lock_signal inlined
                    signal = _allocate_lock()
                    signal.acquire()
                    wait, req.owner = signal.acquire, signal.release
            if core.actions or core.events or core.timers.dirty:
                actions = self._take_locked()
        if actions is not NO_OUTPUT:
            self._carry_out(actions)
        if wait is not None:
            try:
                wait()
            except BaseException:
                self._abandon(req)
                raise
        return self._served(req)

    def checkin(self, lease: Lease[C]) -> None:
        """Give ``lease`` back (same as ``lease.release()``)."""
        self._checkin(lease, "Pool.checkin()")

    @contextlib.contextmanager
    def connection(self, timeout: float | None = DEFAULT) -> Iterator[C]:
        """``with pool.connection() as conn:`` checks out and always gives back (left by a
        ``KeyboardInterrupt``, say, the connection is discarded: it may be mid-protocol), after
        ``hooks.end`` if set."""
        with self._scope(self.checkout(timeout)) as connection, self._ending(connection):
            yield connection

    def _fold_waits(self) -> None:
        with self._lock:
            self._fold_waits_locked()
