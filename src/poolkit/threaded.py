"""``Pool``: the pool for threads, safe to use from any thread.

Rules of this module
--------------------
* Every decision is the core's, and everything the two pools share is in ``_base``; this module
  adds the blocking checkout, the check-out and check-in fast paths, and ``connection()``'s block
  (``_Block``), which inlines them (its exit is the most common check-in: the call saved is
  measurable there, 9 % of an uncontended cycle): each is written twice (``checkout`` and
  ``_Block.__enter__``, ``_ThreadLease.release``, which ``checkin`` calls, and
  ``_Block.__exit__``); a hand-off to a waiter is ``_handed_off``. A change to one is a change to
  both: ``tests/pools/test_handoffs.py`` holds them to one behaviour, and
  ``python tools/mutate_handoffs.py`` removes each step of each in turn.
* A waiting checkout blocks on a per-request signal that only the core's completion sets: the
  checkout's timeout is a deadline in the core, not a local wait.
* After ``os.fork()`` the child's pool gets new locks and forgets the parent's connections without
  closing them (``_reset_after_fork``).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from types import TracebackType
from typing import Any, Generic, TypeVar, Unpack, final, overload

from ._base import DEFAULT, FOLD_WAITS, NO_OUTPUT, PoolArguments
from ._core import ConnState, Request
from ._frontend import ConnectContext, Established, Lease, block_repr, check_timeout, watched
from ._threaded_io import ThreadIO
from .log import _cached_level

__all__ = ["Pool"]

C = TypeVar("C")
_log = logging.getLogger("poolkit.pool")
_CHECKING = ConnState.CHECKING
#: a ``connection()`` block's ``_state`` once entered (see ``_Block``)
_ENTERED: Any = object()


class _ThreadLease(Lease[Any]):
    """Pool's lease: ``release`` is the check-in fast path, inlined (see ``PoolCore``'s "Fast
    paths")."""

    __slots__ = ()

    def release(self) -> None:
        # the pool, or its ``Returned`` marker once given back: ``Returned._quick`` is false, so
        # that a lease given back takes the slow path, which raises
        pool: Pool[Any] = self._pool  # type: ignore[assignment]  # (or Returned)
        # nobody listening (no listener, DEBUG known to be off: the logger's cached answer for
        # level 10), and the core takes it back without more ado
        if pool._quick and _cached_level(10) is False:
            lock = pool._lock
            lock.acquire()  # by hand, not ``with``: half the cost (the ``finally`` lets it go)
            try:
                taken = self._pool is pool and pool._hand.release_idle(self._conn)
                if taken is not False:
                    self._pool = pool._returned
            finally:
                lock.release()
            if taken is True:
                return
            if taken is not False:  # handed to a waiter: woken outside the lock
                pool._handed_off(taken)
                return
        pool._release(self)  # the slow path (the Returned marker: raises "already returned")


@final
class _Block(_ThreadLease, Generic[C]):
    """What ``Pool.connection()`` returns: it checks out on entry and gives back on exit.

    A class, not a ``contextmanager`` (which cost four times a checkout and check-in). Where
    ``checkout``'s fast path applies the block is the lease itself (one object made, not two);
    else it holds the lease ``checkout`` returned. Until entered it is a lease given back (its
    ``_pool`` the pool's ``Returned`` marker): collected unentered, it has nothing to give
    back."""

    __slots__ = ("_owner", "_state")
    _owner: Pool[C]  #: the pool
    #: until entered, the ``timeout`` given to ``connection()``; then ``_ENTERED`` (the block is
    #: the lease, or its checkout failed) or the lease ``checkout`` returned
    _state: Any

    def __enter__(self) -> C:
        pool = self._owner
        state = self._state
        # ``checkout``'s fast path inlined (a call less; a timeout given is checked by
        # ``checkout``): nobody listening and a connection available
        if state is DEFAULT and pool._quick and not pool._waiting and _cached_level(10) is False:
            self._state = _ENTERED
            core = pool._core
            lock = pool._lock
            lock.acquire()  # by hand, not ``with``: half the cost (the ``finally`` lets it go)
            try:
                if pool._check is None:
                    conn = pool._hand.lease_idle(pool._time() if pool._clocked else 0.0)
                else:  # (the check, if one is due, runs here, in the caller)
                    conn = core.lease_checking(pool._time())
                    if conn is not None and conn.state is _CHECKING:
                        pool._hook_begun(conn)
                left = conn is not None and (bool(core.actions) or core.timers.dirty)
            finally:
                lock.release()
            if left:
                pool._after_core()  # perished connections closed on the way, the timer armed
            if conn is not None and (conn.state is not _CHECKING or pool._check_inline(conn)):
                self._conn = conn  # the block is the lease
                self._pool = pool
                if pool._lend is None:
                    return conn.connection  # type: ignore[no-any-return]  # (the core keeps Any)
                self._lent = None
                lease: Lease[C] = self
            else:
                lease = self._state = pool.checkout()
        else:
            if state is _ENTERED or isinstance(state, Lease):
                raise RuntimeError("a pool.connection() block can be entered only once")
            self._state = _ENTERED
            lease = self._state = pool.checkout(state)
        try:
            return lease.connection  # (``hooks.lend`` may raise)
        except BaseException as exc:
            pool._left(lease, exc)
            raise

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        # the pool while the block is the lease out; its ``Returned`` marker (``_quick_exit``
        # false) if the block holds a lease from ``checkout`` (or was given back meanwhile)
        pool: Pool[C] = self._pool  # type: ignore[assignment]  # (or Returned)
        if error is None and pool._quick_exit and _cached_level(10) is False:
            # ``_ThreadLease.release``'s fast path, inlined (a call less)
            lock = pool._lock
            lock.acquire()  # by hand, not ``with``: half the cost (the ``finally`` lets it go)
            try:
                taken = self._pool is pool and pool._hand.release_idle(self._conn)
                if taken is not False:
                    self._pool = pool._returned
            finally:
                lock.release()
            if taken is True:
                return
            if taken is not False:  # handed to the waiter (``_handed_off``)
                pool._handed_off(taken)
                return
        state = self._state
        lease: Lease[C] = self if state is _ENTERED else state
        owner = self._owner
        if owner._end is not None:
            self._ended(lease, owner._end, error)
        elif error is None:
            lease.release()
        else:
            owner._left(lease, error)

    def _ended(
        self,
        lease: Lease[C],
        end: Callable[[C, BaseException | None], Any],
        error: BaseException | None,
    ) -> None:
        """The exit with ``hooks.end``: run in the caller before the check-in. After an error
        what it raises is logged (the block's error is the one the caller sees); on success it
        is raised, as the block's error would be."""
        pool = self._owner
        # what the block got (``lease.connection``, which raises once a lease is given back)
        connection = lease._conn.connection if pool._lend is None else lease._lent
        if error is None:
            try:
                result = end(connection, None)
            except BaseException as exc:
                pool._left(lease, exc)
                raise
            if result is True:  # it reset the connection itself: no reset at check-in
                pool._release_clean(lease)
            else:
                lease.release()
            return
        if isinstance(error, Exception):
            try:
                end(connection, error)
            except Exception:
                _log.exception("hooks.end of pool %s raised after %r", pool.address, error)
            except BaseException as exc:
                lease.discard(exc)
                raise
        pool._left(lease, error)

    def __repr__(self) -> str:
        return block_repr(self, self._state, _ENTERED, self._owner.address)


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
        #: the checkouts waiting (the core's queue itself, read without the lock only to skip a
        #: fast path that would fail)
        self._waiting = self._core.queue
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
        # known to be off) and a connection available, in one turn of the lock. Not tried when
        # checkouts wait already (a peek without the lock): it would fail, and cost a turn of
        # the lock on the path of every checkout under contention.
        if self._quick and not self._waiting and _cached_level(10) is False:
            core = self._core
            lock = self._lock
            lock.acquire()  # by hand, not ``with``: half the cost (the ``finally`` lets it go)
            try:
                if self._check is None:
                    conn = self._hand.lease_idle(self._time() if self._clocked else 0.0)
                else:  # (the check, if one is due, runs here, in the caller)
                    conn = core.lease_checking(self._time())
                    if conn is not None and conn.state is _CHECKING:
                        self._hook_begun(conn)
                left = conn is not None and (bool(core.actions) or core.timers.dirty)
            finally:
                lock.release()
            if left:
                self._after_core()  # perished connections closed on the way, the timer armed
            if conn is not None and (conn.state is not _CHECKING or self._check_inline(conn)):
                lease = _ThreadLease()  # (``new_lease`` inlined)
                lease._conn = conn
                lease._lent = None
                lease._pool = self
                return lease
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
            self._hand.request(req, now)
            if req.queued:  # (its owner is set before the lock is let go: a connect may serve it)
                wait, req.owner = self._new_signal()
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
        if type(lease) is _ThreadLease and lease._pool is self:  # (a plain lease of this pool, out)
            lease.release()
        else:
            self._checkin(lease, "Pool.checkin()")

    def _handed_off(self, taken: Request) -> None:
        """A check-in's fast path handed the connection to the waiting ``taken``: its wait is
        noted and it is woken, outside the lock."""
        waits = self._handoff_waits
        waits.append(self._time() - taken.started)
        taken.owner()
        if len(waits) >= FOLD_WAITS:
            self._fold_waits()

    def connection(self, timeout: float | None = DEFAULT) -> AbstractContextManager[C]:
        """``with pool.connection() as conn:`` checks out and always gives back (left by a
        ``KeyboardInterrupt``, say, the connection is discarded: it may be mid-protocol), after
        ``hooks.end`` if set."""
        block: _Block[C] = _Block()  # (no ``__init__``: see ``Lease``)
        block._owner = self
        block._state = timeout
        block._pool = self._returned  # not out yet
        return block

    def _fold_waits(self) -> None:
        with self._lock:
            self._fold_waits_locked()
