"""``AsyncPool``: the pool on an asyncio event loop.

Rules of this module
--------------------
* Every decision is the core's; this module turns the core's actions into tasks, futures and
  one ``call_at`` timer, and delivers the core's events.
* The pool binds to the running loop on first use that needs one (``ready``, a checkout that
  waits) and refuses any other loop afterwards, like asyncio's own primitives.
* Connects run in tasks the pool owns, never in the checkout's task: cancelling a checkout never
  cancels or leaks a connect.
* A waiting checkout waits on a plain future. When its task is cancelled it tells the core as
  soon as it resumes; if the core handed it a connection in the meantime (the same loop
  iteration), it gives that connection straight back, so nothing is lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from _thread import get_ident as _get_ident
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from functools import partial
from typing import Any, Generic, TypeVar, final

from . import _asyncio_io as _io
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
    carry_out,
    check_lease,
    check_max_streams,
    check_timeout,
    checkout_stack,
    invalid_lease,
    lease_for,
    listener_tuple,
    redact,
    register_for_fork,
    report_unstarted,
    watched,
)
from ._requests import RequestBook, check_requests, deliver
from .errors import InvalidLeaseError, RequestCancelledError
from .events import Listener
from .log import cached_level as _cached_level
from .log import enabled as _log_enabled
from .options import PoolOptions
from .stats import PoolState, PoolStats

__all__ = ["AsyncPool"]

C = TypeVar("C")
_log = logging.getLogger("poolkit.pool")
_DEFAULT: Any = object()
_SERVED = RequestState.SERVED
_WAITING = RequestState.WAITING
_S_CLOSED = ConnState.CLOSED


def _wake(waiter: Any) -> None:
    """Tell a completed request's owner: a checkout's future (a cancelled waiter's task resumes
    with CancelledError and gives back what it was handed, see checkout), or a request object's
    completion."""
    if isinstance(waiter, asyncio.Future):
        if not waiter.done():
            waiter.set_result(None)
    else:
        waiter()


class _AsyncLease(Lease[Any]):
    """AsyncPool's lease: ``release`` is the check-in fast path, inlined."""

    __slots__ = ()

    def release(self) -> None:
        pool = self._pool
        # The fast path: nobody listening (no listener, DEBUG known to be off: the logger's
        # cached answer for level 10) and the core can take it back without more ado.
        if type(pool) is AsyncPool and pool._quick and _cached_level(10) is False:
            core = pool._core
            taken = core.release_idle(self._conn)
            if taken is not False:
                self._pool = pool._returned
                if taken is not True:  # handed to a waiter: wake it
                    core.note_wait(pool._time() - taken.started)
                    _wake(taken.owner)
                return
        if type(pool) is not AsyncPool:
            pool._release(self)  # the Returned marker: raises "already returned"
            return
        self._pool = pool._returned
        core = pool._core
        core.observed = pool._listened or _log_enabled()
        if core.release(self._conn, pool._time()):
            pool._after_core()


_WatchedAsyncLease = watched(_AsyncLease)


@final
class AsyncPool(Generic[C]):
    """A connection pool for asyncio.

    ``connect`` is an async function taking a :class:`~poolkit.ConnectContext` and returning the
    connection (anything with ``close()``, sync or async), or an :class:`~poolkit.Established`.
    A new pool is paused: call :meth:`ready` (or use ``async with pool:``) before checking out.
    """

    def __init__(
        self,
        connect: Callable[[ConnectContext], Awaitable[Any]],
        *,
        address: str = "localhost",
        options: PoolOptions | None = None,
        listeners: Iterable[Listener] = (),
        clock: Clock | None = None,
    ) -> None:
        if not callable(connect):
            raise TypeError(f"AsyncPool(connect=...) must be an async function, got {connect!r}")
        if options is None:
            options = PoolOptions()
        elif not isinstance(options, PoolOptions):
            raise TypeError(
                f"AsyncPool(options=...) must be a PoolOptions, got {type(options).__name__}"
            )
        if not isinstance(address, str) or not address:
            raise ValueError(f"AsyncPool(address=...) must be a non-empty string, got {address!r}")
        self._connect = connect
        #: the address shown (reprs, events, logs, errors): a password in it is masked
        self.address = redact(address)
        self._connect_address = address  #: the real one, only for the connect function
        self.options = options
        self._clock = clock
        self._time: Callable[[], float] = clock.monotonic if clock is not None else time.monotonic
        self._call_at: Any = getattr(clock, "call_at", None)
        self._sink = EventSink(listener_tuple(listeners))
        self._listened = bool(self._sink.listeners)
        #: whether the fast paths may run at all (no listener; leases not watched for leaks)
        self._quick = not self._listened and options.leak_timeout is None
        #: leases garbage-collected while out, appended by their ``__del__``: the watch of a
        #: watched one, the connection of another
        self._orphans: deque[Hold | Conn] = deque()
        self._returned = Returned(self)
        self._book = RequestBook(contextlib.nullcontext())  # one thread: nothing to guard
        self._core = PoolCore(options, self.address, observed=self._sink.observed())
        self._clocked = self._core.clocked
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread = 0  #: the thread the loop ran on when the pool bound to it
        self._timer: Any = None
        self._timer_at: float | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        #: the end of closing, once ``close()`` began it (shielded from its callers)
        self._closing: asyncio.Task[None] | None = None
        register_for_fork(self)
        self._maybe_bind()
        self._after_core()

    # ------------------------------------------------------------------ lifecycle

    def ready(self) -> None:
        """Mark the pool ready: checkouts may proceed, ``min_size`` is populated in the background.

        Must be called from the event loop the pool will run on. Does nothing if already ready.
        """
        self._bind_loop("ready")
        core = self._core
        core.observed = self._sink.observed()
        core.ready(self._time())
        self._after_core()

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
        self._maybe_bind("clear")
        core = self._core
        core.observed = self._sink.observed()
        core.clear(
            self._time(), interrupt_in_use=interrupt_in_use, service_id=service_id, cause=cause
        )
        self._after_core()

    async def close(self) -> None:
        """Close the pool: close available and pending connections, fail waiting checkouts.
        Leased connections are closed when they come back. Waits for the pool's own tasks.

        The closing goes on to its end even if the caller stops waiting (a cancelled ``close()``
        leaks nothing); a second call waits for the same work, and for the closes of leases given
        back since."""
        closing = self._closing
        if closing is not None and closing.done() and self._tasks:
            # closes begun since the first call ended (leases given back after it): wait too
            closing = self._closing = self._bind_loop("close").create_task(
                self._wait_tasks(), name="poolkit-close"
            )
        if closing is None:
            loop = self._bind_loop("close")
            core = self._core
            core.observed = self._sink.observed()
            core.close(self._time())
            self._after_core()
            self._cancel_timer()
            closing = self._closing = loop.create_task(self._wait_tasks(), name="poolkit-close")
        await asyncio.shield(closing)

    async def _wait_tasks(self) -> None:
        """The end of closing: the pool's own tasks (closes, abandoned connects) run out."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def __aenter__(self) -> AsyncPool[C]:
        self.ready()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    # ------------------------------------------------------------------ checkout / checkin

    async def checkout(self, timeout: float | None = _DEFAULT) -> Lease[C]:
        """Check out a connection, waiting at most ``timeout`` seconds (default:
        ``options.wait_queue_timeout``; ``None`` waits without limit)."""
        if timeout is not _DEFAULT and timeout is not None:
            timeout = check_timeout(timeout)  # bad input fails before anything changes
        core = self._core
        # The fast path: nobody listening (no listener, DEBUG known to be off: the logger's
        # cached answer for level 10), and a connection available.
        if self._quick and _cached_level(10) is False:
            conn = core.lease_idle(self._time() if self._clocked else 0.0)
            if conn is not None:
                if core.actions:
                    self._after_core()
                return _AsyncLease(conn, self)
        loop = self._loop
        # (before anything changes; the cheap exact test: the pool's loop runs, in this thread)
        if loop is None or not loop.is_running() or _get_ident() != self._loop_thread:
            loop = self._bind_loop("checkout")
        if self._orphans:
            self._reap()
        core.observed = self._listened or (_cached_level(10) is not False and _log_enabled())
        now = self._time()
        if timeout is _DEFAULT:
            timeout = self.options.wait_queue_timeout
        req = Request(now, None if timeout is None else now + timeout)
        core.request(req, now)
        if req.queued:
            req.owner = waiter = loop.create_future()
            if core.actions or core.events or core.timers.dirty:
                self._after_core()
            try:
                await waiter
            except asyncio.CancelledError:
                if req.state is _WAITING:
                    self._cancel_request(req)
                elif req.state is _SERVED and req.conn is not None:
                    # Handed a connection while being cancelled: give it straight back.
                    self._give_back(req.conn)
                raise
        else:
            self._after_core()
        conn = req.conn
        if conn is not None:
            if self._quick and conn.state is not _S_CLOSED:
                return _AsyncLease(conn, self)
            return lease_for(self, conn)  # type: ignore[no-any-return]
        assert req.error is not None
        raise req.error

    async def checkin(self, lease: Lease[C]) -> None:
        """Give ``lease`` back (same as ``lease.release()``)."""
        check_lease(lease, "AsyncPool.checkin()")
        self._release(lease)

    @contextlib.asynccontextmanager
    async def connection(self, timeout: float | None = _DEFAULT) -> AsyncIterator[C]:
        """``async with pool.connection() as conn:`` checks out and always gives back.

        If the block is left by cancellation (or any ``BaseException`` that is not an
        ``Exception``) the connection is discarded, since it may be mid-protocol; after an
        ordinary exception it is released.
        """
        lease = await self.checkout(timeout)
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
        lease.release()

    def _discard(self, lease: Lease[Any], error: BaseException | None) -> None:
        if lease._pool is not self:
            raise self._invalid_lease(lease)
        lease._pool = self._returned
        core = self._core
        core.observed = self._sink.observed()
        core.discard(lease._conn, self._time(), error)
        self._after_core()

    def _invalid_lease(self, lease: Lease[Any]) -> InvalidLeaseError:
        return invalid_lease(self, self._returned, lease)

    def _give_back(self, conn: Conn) -> None:
        core = self._core
        core.release(conn, self._time())
        self._after_core()

    def _cancel_request(self, req: Request) -> None:
        core = self._core
        if core.cancel(req, self._time()):
            self._after_core()

    # ------------------------------------------------------------------ request objects

    def lease_request(self, request: Any) -> None:
        """Ask for a connection on behalf of ``request`` (an object with a hashable ``id`` and a
        ``complete(result)`` method), without waiting. ``complete`` is called once, from the
        event loop, with a :class:`~poolkit.Lease` or the error (a timeout after
        ``wait_queue_timeout``, :class:`~poolkit.RequestCancelledError`...)."""
        self.lease_requests((request,))

    def lease_requests(self, requests: Iterable[Any]) -> None:
        """:meth:`lease_request` for many requests at once, queued in the order given. A
        malformed request or an id already waiting raises before any is queued."""
        batch = check_requests(requests, "AsyncPool.lease_requests()")
        self._book.check_free(batch, "AsyncPool.lease_requests()")
        self._bind_loop("lease_requests")
        core = self._core
        core.observed = self._sink.observed()
        timeout = self.options.wait_queue_timeout
        done = self._book.enqueue(core, batch, self._time(), timeout, partial(lease_for, self))
        self._after_core()
        for finish in done:
            finish()

    def cancel_request(self, request_id: Any) -> bool:
        """Take the waiting request ``request_id`` out of the queue: its ``complete`` receives a
        :class:`~poolkit.RequestCancelledError`. False if no such request is waiting (it may
        have been served or failed already: then it is never served again)."""
        core = self._core
        core.observed = self._sink.observed()
        request = self._book.cancel(core, request_id, self._time())
        if request is None:
            return False
        self._after_core()
        deliver(request, RequestCancelledError(address=self.address, request_id=request_id))
        return True

    def _make_lease(self, conn: Conn) -> Lease[C]:
        if self.options.leak_timeout is None:
            return _AsyncLease(conn, self)
        held = Hold(conn, self._time(), checkout_stack())
        self._core.hold(held, held.since)
        if self._core.timers.dirty:
            self._rearm()
        lease: Lease[C] = _WatchedAsyncLease(conn, self, held)
        return lease

    def _unhold(self, held: Hold) -> None:
        self._core.unhold(held)
        if self._orphans:
            self._reap()

    def _reap_soon(self) -> None:
        """``_reap`` from wherever a lease was collected (a closed pool has no next step to do
        it): soon on the pool's loop (the collection may have happened inside a core call), or
        at once if that loop is gone."""
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._reap)
        else:
            self._reap()

    def _reap(self) -> None:
        """Report the leases garbage-collected while out, and close their connections."""
        core = self._core
        orphans = self._orphans
        while orphans:
            core.observed = self._sink.observed()
            core.lease_collected(orphans.popleft(), self._time())
        self._after_core()

    # ------------------------------------------------------------------ what a connection says

    def set_max_streams(self, connection_id: int, max_streams: int) -> bool:
        """Connection ``connection_id`` now serves at most ``max_streams`` leases at once (its own
        notice, e.g. HTTP/2 SETTINGS). An increase serves waiting checkouts at once; a decrease
        takes no lease back but gives no new one until the connection's use falls below it.
        Returns false (and changes nothing) if the pool has no such established connection."""
        max_streams = check_max_streams(max_streams)
        core = self._core
        core.observed = self._sink.observed()
        known = core.set_max_streams(connection_id, max_streams, self._time())
        self._after_core()
        return known

    def connection_will_close(self, connection_id: int) -> bool:
        """Connection ``connection_id`` said it will close (e.g. HTTP/2 GOAWAY): if available it
        is closed now; if in use it drains (no new leases) and closes on its last check-in.
        ``min_size`` is refilled. Returns false if the pool has no such connection."""
        core = self._core
        core.observed = self._sink.observed()
        known = core.will_close(connection_id, self._time())
        self._after_core()
        return known

    # ------------------------------------------------------------------ views

    def stats(self) -> PoolStats:
        """A snapshot of the pool's state and counts."""
        return self._core.stats()

    @property
    def state(self) -> PoolState:
        return self._core.state

    @property
    def generation(self) -> int:
        return self._core.generation

    def __repr__(self) -> str:
        s = self._core
        return (
            f"<AsyncPool {self.address} {s.state.value} total={s.total} available={s.available} "
            f"pending={s.pending} in_use={s.in_use} waiting={s.waiting}>"
        )

    # ------------------------------------------------------------------ carrying out actions

    def _bind_loop(self, operation: str) -> asyncio.AbstractEventLoop:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            raise RuntimeError(
                f"AsyncPool.{operation}() must be called from a running event loop"
            ) from None
        if self._loop is None:
            self._loop = loop
            self._loop_thread = _get_ident()
            if self._clock is None:
                # The loop's clock; time.monotonic itself when that is what loop.time() reads.
                base = type(loop).time is asyncio.BaseEventLoop.time
                self._time = time.monotonic if base else loop.time
        elif self._loop is not loop:
            raise RuntimeError(
                f"AsyncPool.{operation}(): an AsyncPool belongs to the event loop it first ran "
                "on, and this is another one (make one pool per event loop)"
            )
        return loop

    def _maybe_bind(self, operation: str = "bind") -> None:
        """Bind to the running loop if there is one (refusing another loop than the pool's); a
        pool already bound may not be used with no loop running."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            if self._loop is not None:
                raise RuntimeError(
                    f"AsyncPool.{operation}() must be called from the event loop the pool runs on"
                ) from None
            return
        self._bind_loop(operation)

    def _after_core(self) -> None:
        core = self._core
        actions, events = core.take()
        if core.timers.dirty:
            self._rearm()
        while actions:
            unstarted = carry_out(self, actions, _wake)
            if not unstarted:
                break
            # a connect or probe that could not start: the core learns it failed
            report_unstarted(core, unstarted, self._time())
            actions, more = core.take()
            events += more
        if events:
            sink = self._sink
            sink.push(events)
            sink.flush()

    # (connects, probes, closes and the timer: in ``_asyncio_io``)
    _start_connect = _io._start_connect
    _run_connect = _io._run_connect
    _connect_ended = _io._connect_ended
    _probe_ended = _io._probe_ended
    _start_keep_alive = _io._start_keep_alive
    _run_keep_alive = _io._run_keep_alive
    _close_connection = _io._close_connection
    _rearm = _io._rearm
    _cancel_timer = _io._cancel_timer
    _on_timer = _io._on_timer

    def _reset_after_fork(self) -> None:
        self._core.reset_after_fork()
        self._sink.reinit_after_fork()
        self._book.clear()
        self._loop = None
        self._timer = None
        self._timer_at = None
        self._tasks = set()
        self._closing = None
        if self._clock is None:
            self._time = time.monotonic
