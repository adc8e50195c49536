"""``Pool``: the pool for threads, safe to use from any thread.

Rules of this module
--------------------
* One lock guards the core. It is held only around core calls; connects, closes and listener
  calls happen after it is released, in the order the core asked for them.
* Connects run on threads of their own (one per connect in flight, at most ``max_connecting``);
  a waiting checkout blocks on a per-request signal that only the core's completion sets: the
  checkout's timeout is a deadline in the core, not a local wait.
* One timer thread per pool, started on first need, sleeps until the core's earliest deadline.
  A clock with ``call_at`` (the test clock) replaces it, and a clock with ``start_thread`` and
  ``new_signal`` also runs the worker threads and the blocking waits.
* After ``os.fork()`` the child's pool gets new locks and forgets the parent's connections without
  closing them (see ``_reset_after_fork``).
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import threading
import time
from _thread import allocate_lock as _allocate_lock
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from functools import partial
from typing import Any, Generic, TypeVar, final

from . import _threaded_io as _io
from ._core import (
    Conn,
    ConnState,
    PoolCore,
    Request,
    RequestState,
)
from ._core.records import Hold
from ._frontend import (
    Clock,
    ConnectContext,
    EventSink,
    Lease,
    Returned,
    check_lease,
    check_max_streams,
    check_timeout,
    checkout_stack,
    invalid_lease,
    lease_for,
    listener_tuple,
    redact,
    register_for_fork,
    watched,
)
from ._requests import RequestBook, check_requests, deliver
from .errors import InvalidLeaseError, RequestCancelledError
from .events import Listener
from .log import cached_level as _cached_level
from .log import enabled as _log_enabled
from .options import PoolOptions
from .stats import PoolState, PoolStats

__all__ = ["Pool"]

C = TypeVar("C")
_log = logging.getLogger("poolkit.pool")
_DEFAULT: Any = object()
_SERVED = RequestState.SERVED
#: how many hand-off waits may be noted before they are added to the tally (bounded memory for a
#: pool whose statistics are never read)
_FOLD_WAITS = 256
_S_CLOSED = ConnState.CLOSED


def _lock_signal() -> tuple[Callable[[], Any], Callable[[], Any]]:
    """A one-shot wake-up as ``(wait, wake)``: a lock taken at birth that ``wake`` releases."""
    lock = _allocate_lock()
    lock.acquire()
    return lock.acquire, lock.release


def _clock_signal(clock: Any) -> Callable[[], tuple[Callable[[], Any], Callable[[], Any]]]:
    def make() -> tuple[Callable[[], Any], Callable[[], Any]]:
        signal = clock.new_signal()
        return signal.wait, signal.set

    return make


class _ThreadLease(Lease[Any]):
    """Pool's lease: ``release`` is the check-in fast path, inlined."""

    __slots__ = ()

    def release(self) -> None:
        pool = self._pool
        # The fast path: nobody listening (no listener, DEBUG known to be off: the logger's
        # cached answer for level 10) and the core can take it back without more ado.
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
        if type(pool) is not Pool:
            pool._release(self)  # the Returned marker: raises "already returned"
            return
        observed = pool._listened or _log_enabled()
        with pool._lock:
            if self._pool is not pool:  # released meanwhile by another thread
                raise pool._invalid_lease(self)
            self._pool = pool._returned
            core = pool._core
            core.observed = observed
            actions = pool._take_locked() if core.release(self._conn, pool._time()) else None
        if actions is not None:
            pool._carry_out(actions)


_WatchedThreadLease = watched(_ThreadLease)


@final
class Pool(Generic[C]):
    """A connection pool for threads.

    ``connect`` is a function taking a :class:`~poolkit.ConnectContext` and returning the
    connection (anything with a ``close()`` method) or an :class:`~poolkit.Established`. A new pool
    is paused: call :meth:`ready` (or use ``with pool:``) before checking out.
    """

    def __init__(
        self,
        connect: Callable[[ConnectContext], Any],
        *,
        address: str = "localhost",
        options: PoolOptions | None = None,
        listeners: Iterable[Listener] = (),
        clock: Clock | None = None,
    ) -> None:
        if not callable(connect):
            raise TypeError(f"Pool(connect=...) must be a function, got {connect!r}")
        if inspect.iscoroutinefunction(connect):
            raise TypeError(
                f"Pool(connect=...) must be a plain function (Pool runs on threads), got the "
                f"async function {connect!r}: use poolkit.AsyncPool for it"
            )
        if options is None:
            options = PoolOptions()
        elif not isinstance(options, PoolOptions):
            raise TypeError(
                f"Pool(options=...) must be a PoolOptions, got {type(options).__name__}"
            )
        if options.keep_alive is not None and inspect.iscoroutinefunction(options.keep_alive.probe):
            raise TypeError(
                "PoolOptions.keep_alive.probe must be a plain function for Pool, got the async "
                f"function {options.keep_alive.probe!r}"
            )
        if not isinstance(address, str) or not address:
            raise ValueError(f"Pool(address=...) must be a non-empty string, got {address!r}")
        self._connect = connect
        #: the address shown (reprs, events, logs, errors): a password in it is masked
        self.address = redact(address)
        self._connect_address = address  #: the real one, only for the connect function
        self.options = options
        self._time: Callable[[], float] = clock.monotonic if clock is not None else time.monotonic
        self._call_at: Any = getattr(clock, "call_at", None)
        self._start_thread: Callable[[Callable[[], None], str], Any] = getattr(
            clock, "start_thread", _io._start_daemon
        )
        self._fake_signals = hasattr(clock, "new_signal")
        self._new_signal = _clock_signal(clock) if self._fake_signals else _lock_signal
        self._lock = threading.Lock()
        self._timer_cv = threading.Condition(self._lock)
        self._timer_at: float | None = None
        self._timer_handle: Any = None
        self._timer_thread = False
        self._sink = EventSink(listener_tuple(listeners))
        self._listened = bool(self._sink.listeners)
        self._wait_timeout = options.wait_queue_timeout
        #: whether the fast paths may run at all (no listener; leases not watched for leaks)
        self._quick = not self._listened and options.leak_timeout is None
        #: leases garbage-collected while out, appended by their ``__del__``: the watch of a
        #: watched one, the connection of another
        self._orphans: deque[Hold | Conn] = deque()
        #: waits ended by fast hand-offs, noted outside the lock (a deque append is atomic) and
        #: added to the core's tally when the statistics are read
        self._handoff_waits: deque[float] = deque()
        self._returned = Returned(self)
        self._book = RequestBook(self._lock)
        self._core = PoolCore(options, self.address, observed=self._sink.observed())
        self._clocked = self._core.clocked
        register_for_fork(self)
        self._sink.push(self._core.take()[1])
        self._sink.flush()

    # ------------------------------------------------------------------ lifecycle

    def ready(self) -> None:
        """Mark the pool ready: checkouts may proceed, ``min_size`` is populated in the background.
        Does nothing if already ready; raises :class:`~poolkit.PoolClosedError` if closed."""
        with self._lock:
            core = self._core
            core.observed = self._sink.observed()
            core.ready(self._time())
            actions = self._take_locked()
        self._carry_out(actions)

    def clear(
        self,
        *,
        interrupt_in_use: bool = False,
        service_id: Any = None,
        cause: BaseException | None = None,
    ) -> None:
        """Start a new generation: pause the pool, fail every waiting checkout with a retryable
        :class:`~poolkit.PoolClearedError`, close old connections as they are met (at once if
        ``interrupt_in_use``). In load-balanced mode, clear only ``service_id``'s connections and
        do not pause. ``cause`` is the error that made you clear, quoted in the waiters' errors.
        """
        with self._lock:
            core = self._core
            core.observed = self._sink.observed()
            core.clear(
                self._time(), interrupt_in_use=interrupt_in_use, service_id=service_id, cause=cause
            )
            actions = self._take_locked()
        self._carry_out(actions)

    def close(self) -> None:
        """Close the pool: close available and pending connections, fail waiting checkouts.
        Leased connections are closed when they come back."""
        with self._lock:
            core = self._core
            core.observed = self._sink.observed()
            core.close(self._time())
            actions = self._take_locked()
            self._timer_cv.notify_all()
        self._carry_out(actions)

    def __enter__(self) -> Pool[C]:
        self.ready()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # ------------------------------------------------------------------ checkout / checkin

    def checkout(self, timeout: float | None = _DEFAULT) -> Lease[C]:
        """Check out a connection, waiting at most ``timeout`` seconds (default:
        ``options.wait_queue_timeout``; ``None`` waits without limit)."""
        if timeout is not _DEFAULT and timeout is not None:
            timeout = check_timeout(timeout)  # bad input fails before anything changes
        # The fast path: nobody listening (no listener, DEBUG known to be off: the logger's
        # cached answer for level 10). One turn of the lock leases an available connection or
        # queues the request.
        if self._quick and _cached_level(10) is False:
            core = self._core
            lock = self._lock
            lock.acquire()  # not ``with``: half the cost, and nothing in between can raise
            try:
                conn = core.lease_idle(self._time() if self._clocked else 0.0)
                if conn is None:
                    # _enqueue inlined: this is the path of every checkout that waits
                    core.observed = False
                    now = self._time()
                    if timeout is _DEFAULT:
                        timeout = self._wait_timeout
                    req = Request(now, None if timeout is None else now + timeout)
                    core.request(req, now)
                    wait: Callable[[], Any] | None = None
                    if req.queued:
                        if self._fake_signals:
                            wait, req.owner = self._new_signal()
                        else:  # _lock_signal inlined
                            signal = _allocate_lock()
                            signal.acquire()
                            wait = signal.acquire
                            req.owner = signal.release
                elif not core.actions:
                    return _ThreadLease(conn, self)
                # perished connections met on the way, connects, a deadline to arm
                actions = self._take_locked() if core.actions or core.timers.dirty else None
            finally:
                lock.release()
            if actions:
                self._carry_out(actions)
            if conn is not None:
                return _ThreadLease(conn, self)
        else:
            if self._orphans:
                self._reap()
            observed = self._listened or _log_enabled()
            with self._lock:
                self._core.observed = observed
                req, wait = self._enqueue(timeout)
                actions = self._take_locked()
            self._carry_out(actions)
        if wait is not None:
            if self._orphans:
                self._reap()  # a lease lost to the garbage collector may free a connection
            try:
                wait()
            except BaseException:
                self._abandon(req)
                raise
        conn = req.conn
        if conn is not None:
            if self._quick and conn.state is not _S_CLOSED:
                return _ThreadLease(conn, self)
            return lease_for(self, conn)  # type: ignore[no-any-return]
        assert req.error is not None
        raise req.error

    def _enqueue(self, timeout: float | None) -> tuple[Request, Callable[[], Any] | None]:
        """Under the lock: the full checkout (events when observed). Returns the request and,
        if it was queued, the wait for its completion."""
        now = self._time()
        if timeout is _DEFAULT:
            timeout = self._wait_timeout
        req = Request(now, None if timeout is None else now + timeout)
        self._core.request(req, now)
        if not req.queued:
            return req, None
        wait, req.owner = self._new_signal()
        return req, wait

    def _abandon(self, req: Request) -> None:
        """The wait for ``req`` was interrupted (KeyboardInterrupt...): leave the queue, or give
        back what came."""
        core = self._core
        with self._lock:
            cancelled = core.cancel(req, self._time())
            actions = self._take_locked()
        self._carry_out(actions)
        if not cancelled and req.state is _SERVED and req.conn is not None:
            self._give_back(req.conn)

    def checkin(self, lease: Lease[C]) -> None:
        """Give ``lease`` back (same as ``lease.release()``)."""
        check_lease(lease, "Pool.checkin()")
        self._release(lease)

    @contextlib.contextmanager
    def connection(self, timeout: float | None = _DEFAULT) -> Iterator[C]:
        """``with pool.connection() as conn:`` checks out and always gives back.

        If the block is left by a ``BaseException`` that is not an ``Exception`` (e.g.
        ``KeyboardInterrupt``) the connection is discarded, since it may be mid-protocol; after an
        ordinary exception it is released.
        """
        lease = self.checkout(timeout)
        try:
            yield lease.connection
        except Exception:
            lease.release()
            raise
        except BaseException as exc:
            lease.discard(exc)
            raise
        else:
            lease.release()

    def _release(self, lease: Lease[Any]) -> None:
        if lease._pool is not self:
            raise self._invalid_lease(lease)
        lease.release()  # checked again under the lock: another thread may be releasing it

    def _discard(self, lease: Lease[Any], error: BaseException | None) -> None:
        observed = self._sink.observed()
        with self._lock:
            if lease._pool is not self:
                raise self._invalid_lease(lease)
            lease._pool = self._returned
            core = self._core
            core.observed = observed
            core.discard(lease._conn, self._time(), error)
            actions = self._take_locked()
        self._carry_out(actions)

    def _invalid_lease(self, lease: Lease[Any]) -> InvalidLeaseError:
        return invalid_lease(self, self._returned, lease)

    def _give_back(self, conn: Conn) -> None:
        with self._lock:
            self._core.release(conn, self._time())
            actions = self._take_locked()
        self._carry_out(actions)

    # ------------------------------------------------------------------ request objects

    def lease_request(self, request: Any) -> None:
        """Ask for a connection on behalf of ``request`` (an object with a hashable ``id`` and a
        ``complete(result)`` method), without blocking. ``complete`` is called once, outside the
        pool's lock, with a :class:`~poolkit.Lease` or the error (a timeout after
        ``wait_queue_timeout``, :class:`~poolkit.RequestCancelledError`...)."""
        self.lease_requests((request,))

    def lease_requests(self, requests: Iterable[Any]) -> None:
        """:meth:`lease_request` for many requests at once, queued in the order given under one
        lock. A malformed request or an id already waiting raises before any is queued."""
        batch = check_requests(requests, "Pool.lease_requests()")
        with self._lock:
            self._book.check_free(batch, "Pool.lease_requests()")
            core = self._core
            core.observed = self._sink.observed()
            timeout = self.options.wait_queue_timeout
            done = self._book.enqueue(core, batch, self._time(), timeout, partial(lease_for, self))
            actions = self._take_locked()
        self._carry_out(actions)
        for finish in done:
            finish()

    def cancel_request(self, request_id: Any) -> bool:
        """Take the waiting request ``request_id`` out of the queue: its ``complete`` receives a
        :class:`~poolkit.RequestCancelledError`. False if no such request is waiting (it may
        have been served or failed already: then it is never served again)."""
        with self._lock:
            core = self._core
            core.observed = self._sink.observed()
            request = self._book.cancel(core, request_id, self._time())
            if request is None:
                return False
            actions = self._take_locked()
        self._carry_out(actions)
        deliver(request, RequestCancelledError(address=self.address, request_id=request_id))
        return True

    def _make_lease(self, conn: Conn) -> Lease[C]:
        """The lease on ``conn``, just handed out (outside the lock)."""
        if self.options.leak_timeout is None:
            return _ThreadLease(conn, self)
        stack = checkout_stack()
        with self._lock:
            held = Hold(conn, self._time(), stack)
            self._core.hold(held, held.since)
            actions = self._take_locked()
        self._carry_out(actions)
        lease: Lease[C] = _WatchedThreadLease(conn, self, held)
        return lease

    def _unhold(self, held: Hold) -> None:
        with self._lock:
            self._core.unhold(held)
        if self._orphans:
            self._reap()

    def _reap_soon(self) -> None:
        """``_reap`` from wherever a lease was collected (a closed pool has no next step to do
        it): at once if the lock is free, else on a thread of its own (the collection may have
        happened inside this thread's locked section)."""
        if self._lock.acquire(blocking=False):
            self._lock.release()
            self._reap()
        else:
            self._start_thread(self._reap, "poolkit-reap")

    def _reap(self) -> None:
        """Report the leases garbage-collected while out, and close their connections."""
        observed = self._sink.observed()
        with self._lock:
            core = self._core
            core.observed = observed
            orphans = self._orphans
            while orphans:
                core.lease_collected(orphans.popleft(), self._time())
            actions = self._take_locked()
        self._carry_out(actions)

    # ------------------------------------------------------------------ what a connection says

    def set_max_streams(self, connection_id: int, max_streams: int) -> bool:
        """Connection ``connection_id`` now serves at most ``max_streams`` leases at once (its own
        notice, e.g. HTTP/2 SETTINGS). An increase serves waiting checkouts at once; a decrease
        takes no lease back but gives no new one until the connection's use falls below it.
        Returns false (and changes nothing) if the pool has no such established connection."""
        max_streams = check_max_streams(max_streams)
        with self._lock:
            core = self._core
            core.observed = self._sink.observed()
            known = core.set_max_streams(connection_id, max_streams, self._time())
            actions = self._take_locked()
        self._carry_out(actions)
        return known

    def connection_will_close(self, connection_id: int) -> bool:
        """Connection ``connection_id`` said it will close (e.g. HTTP/2 GOAWAY): if available it
        is closed now; if in use it drains (no new leases) and closes on its last check-in.
        ``min_size`` is refilled. Returns false if the pool has no such connection."""
        with self._lock:
            core = self._core
            core.observed = self._sink.observed()
            known = core.will_close(connection_id, self._time())
            actions = self._take_locked()
        self._carry_out(actions)
        return known

    # ------------------------------------------------------------------ views

    def stats(self) -> PoolStats:
        """A snapshot of the pool's state and counts, taken under the lock."""
        with self._lock:
            self._fold_waits_locked()
            return self._core.stats()

    def _fold_waits(self) -> None:
        with self._lock:
            self._fold_waits_locked()

    def _fold_waits_locked(self) -> None:
        """Add the waits noted by fast hand-offs to the core's tally (under the lock)."""
        core = self._core
        waits = self._handoff_waits
        while waits:
            core.note_wait(waits.popleft())

    @property
    def state(self) -> PoolState:
        return self._core.state

    @property
    def generation(self) -> int:
        return self._core.generation

    def __repr__(self) -> str:
        s = self.stats()
        return (
            f"<Pool {self.address} {s.state.value} total={s.total} available={s.available} "
            f"pending={s.pending} in_use={s.in_use} waiting={s.waiting}>"
        )

    # ------------------------------------------------------------------ carrying out actions, timer
    # (in ``_threaded_io``)

    _take_locked = _io._take_locked
    _carry_out = _io._carry_out
    _start_connect = _io._start_connect
    _run_connect = _io._run_connect
    _start_keep_alive = _io._start_keep_alive
    _run_keep_alive = _io._run_keep_alive
    _close_connection = _io._close_connection
    _rearm_locked = _io._rearm_locked
    _timer_loop = _io._timer_loop
    _on_timer = _io._on_timer

    def _reset_after_fork(self) -> None:
        self._lock = threading.Lock()
        self._timer_cv = threading.Condition(self._lock)
        self._timer_at = None
        self._timer_handle = None
        self._timer_thread = False
        self._sink.reinit_after_fork()
        self._book = RequestBook(self._lock)
        self._orphans.clear()
        self._handoff_waits.clear()
        self._core.reset_after_fork()
