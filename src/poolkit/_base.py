"""What ``AsyncPool`` and ``Pool`` share, written once: ``PoolBase``, the one base class of each
(psycopg_pool's ``BasePool``): the arguments, the core's output taken and dispatched, the steps
of the public surface that only feed the core, and a lease's way back. Each front end, in one
module of its own (``asyncio``, ``threaded``), adds how it feeds the core (``_feed``: under a lock
in ``Pool``, on one thread in ``AsyncPool``), how it runs I/O (tasks or threads), how it waits,
its timer, and its check-out and check-in fast paths.

Rules of this module
--------------------
* A front end defines no method this class defines, and this class defines none of the front
  end's (``tests/project/test_frontends.py``): what it needs of the front end is declared in
  ``FrontEnd`` below (``_feed``, ``_release``, the I/O), and implemented there once.
* Every input reaches the core through the front end's ``_feed`` (``_input`` first, the one place
  that tells the core whether anyone observes it), then its output is taken (``_take_locked``,
  under the front end's lock if it has one) and, the lock released, carried out in the core's
  order (``_dispatch``) and then the events delivered. The exceptions are the fast paths
  (``lease_idle``, ``release_idle``, and ``note_waits`` for what they hand off), which build no
  event and run only when nobody observes the pool.
* No user code (connect, probe, close, listener, a request's ``complete``) runs under the lock.
* A :class:`~poolkit.Lease` is valid for one check-in: its ``_pool`` is this pool while it is
  out and turns into the pool's ``Returned`` marker, under the lock, when it is given back.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections import deque
from collections.abc import Callable, Hashable, Iterable
from functools import partial
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypedDict, TypeVar, assert_never

from ._core import (
    Action,
    CloseConnection,
    CompleteRequest,
    Conn,
    ConnState,
    PoolCore,
    Request,
    RequestState,
    StartCheck,
    StartConnect,
    StartKeepAlive,
    StartReset,
)
from ._core.records import Hold
from ._frontend import (
    Clock,
    DrivenClock,
    EventSink,
    Lease,
    Returned,
    check_lease,
    check_max_streams,
    checkout_stack,
    invalid_lease,
    listener_tuple,
    new_lease,
    redact,
    register_for_fork,
    unwrap,
)
from ._requests import LeaseRequest, RequestBook, check_requests, deliver
from .errors import InvalidLeaseError, PoolClearedError, RequestCancelledError
from .events import Listener
from .options import PoolOptions
from .stats import PoolState, PoolStats

C = TypeVar("C")
T = TypeVar("T")
_log = logging.getLogger("poolkit.pool")
#: the numbers of pools made without ``address=`` (their address is ``pool-N``)
_POOL_NUMBERS = itertools.count(1)
#: ``checkout(timeout=...)`` not given: ``options.wait_queue_timeout``
DEFAULT: Any = object()
_SERVED = RequestState.SERVED
_S_CLOSED = ConnState.CLOSED
#: ``_take_locked``'s answer when the core has no output (never appended to: nothing to carry out)
NO_OUTPUT: list[Action] = []
#: how many hand-off waits a front end notes before they are added to the tally (bounded memory
#: for a pool whose statistics are never read)
FOLD_WAITS = 256


class PoolArguments(TypedDict, total=False):
    """The keyword arguments of both pools, after ``connect`` (see :class:`PoolBase`)."""

    address: str
    options: PoolOptions | None
    listeners: Iterable[Listener]
    clock: Clock | None


class PoolBase(Generic[C]):
    """What ``AsyncPool`` and ``Pool`` share: each front end's one base class (see the module's
    rules). Not a pool of its own: a front end's ``__init__`` calls ``_setup``."""

    #: the front end's lease classes: plain, and watched for leaks (``leak_timeout``)
    _lease_class: ClassVar[type[Lease[Any]]]
    _watched_class: ClassVar[Any]
    #: the waiting request objects (the front end makes it, with the lock it guards it with)
    _book: RequestBook

    if TYPE_CHECKING:  # what each front end provides, in its own module, and this class calls

        def _step(self, step: Callable[[PoolCore, float], T]) -> tuple[T, list[Action]]:
            """``step(self._input(), now)`` under the front end's lock, and the core's output
            taken (``_take_locked``): the locked half of ``_feed``."""

        def _release(self, lease: Lease[Any], clean: bool = False) -> None:
            """A check-in that the lease's fast path did not take."""

        def _bind(self, operation: str, *, required: bool = True) -> None:
            """Before ``operation``: ``AsyncPool`` binds to the running event loop."""

        def _wake(self, owner: Any) -> None:
            """Wake a completed request's owner (a waiting checkout, a request object)."""

        def _start_connect(self, conn: Conn) -> None:
            """Start ``conn``'s connect (a task, a thread)."""

        def _close_connection(self, conn: Conn, connection: Any, pending: bool) -> None:
            """Close ``connection`` (``pending``: abandon ``conn``'s connect)."""

        def _run_hook(
            self, action: StartCheck | StartReset | StartKeepAlive
        ) -> tuple[BaseException | None] | None:
            """Run ``Hooks.check``/``Hooks.reset`` or the keep-alive probe on ``action.conn``:
            ``(error,)`` if it ran to its end here (``error`` ``None``: it passed), ``None`` if
            it runs apart and reports itself through ``_hook_ended``."""

        def _rearm_locked(self) -> None:
            """Under the lock: arm the timer for the core's earliest deadline."""

    def _setup(
        self,
        connect: Callable[..., Any],
        connect_kind: str,
        refuse: Callable[[Callable[..., Any], PoolOptions], None],
        *,
        address: str | None = None,
        options: PoolOptions | None = None,
        listeners: Iterable[Listener] = (),
        clock: Clock | None = None,
    ) -> None:
        """Check the arguments (``refuse``: the front end's own refusals) and set up what both
        pools hold. ``connect`` makes a connection (``connect_kind``: what it must be); ``address``
        names the server in reprs, events, logs and errors (a password in it is masked; the
        connect function sees it whole); ``options`` a :class:`~poolkit.PoolOptions`;
        ``listeners`` callables taking each event; ``clock`` a :class:`~poolkit.Clock` (tests:
        :class:`poolkit.testing.FakeClock`)."""
        name = type(self).__name__
        if not callable(connect):
            raise TypeError(f"{name}(connect=...) must be {connect_kind}, got {connect!r}")
        if options is None:
            options = PoolOptions()
        elif not isinstance(options, PoolOptions):
            raise TypeError(
                f"{name}(options=...) must be a PoolOptions, got {type(options).__name__}"
            )
        refuse(connect, options)
        if address is None:  # (named as psycopg_pool names its pools: pool-1, pool-2...)
            address = f"pool-{next(_POOL_NUMBERS)}"
        if not isinstance(address, str) or not address:
            raise ValueError(f"{name}(address=...) must be a non-empty string, got {address!r}")
        self._connect = connect
        #: the address shown (reprs, events, logs, errors): a password in it is masked
        self.address = redact(address)
        self._connect_address = address  #: the real one, only for the connect function
        self.options = options
        self._clock = clock
        self._time: Callable[[], float] = clock.monotonic if clock is not None else time.monotonic
        #: a driven clock's timers (the test clock), in place of the loop's or a timer thread
        self._call_at: Any = clock.call_at if isinstance(clock, DrivenClock) else None
        self._timer_at: float | None = None  #: the deadline the timer is armed for
        self._timer_handle: Any = None  #: the armed ``call_at`` timer, if any
        self._sink = EventSink(
            listener_tuple(listeners), warn_connects_failing=options.warn_connects_failing
        )
        self._listened = bool(self._sink.listeners)
        #: whether the fast paths may run at all (no listener; leases not watched for leaks);
        #: each one also checks that DEBUG logging is off (``log._cached_level(10) is False``)
        self._quick = not self._listened and options.leak_timeout is None
        #: leases garbage-collected while out, appended by their ``__del__``: the watch of a
        #: watched one, the connection of another
        self._orphans: deque[Hold | Conn] = deque()
        #: waits ended by the fast hand-offs (``_handed_off``), noted outside the lock (a deque
        #: append is atomic) and added to the core's tally when the statistics are read
        self._handoff_waits: deque[float] = deque()
        self._returned = Returned(self)
        #: what a cancellation raises (``AsyncPool`` bound to trio adds ``trio.Cancelled``)
        self._cancel_errors: tuple[type[BaseException], ...] = (asyncio.CancelledError,)
        core = self._core = PoolCore(options, self.address, observed=self._sink.observed())
        self._align_to_wall()
        self._clocked = core.clocked
        #: the core's check-out and check-in inputs, as methods (``PoolCore.fast``: the fast paths'
        #: port), held for the lease's check-in
        self._fast = core.fast
        #: the checkouts waiting (the core's queue, read without the lock only to skip a fast
        #: path that would fail)
        self._waiting = core.queue
        #: ``hooks.configure``, run on each new connection as part of its connect
        self._configure = None if options.hooks is None else options.hooks.configure
        #: ``hooks.end``, run by ``connection()`` when its block ends
        self._end = None if options.hooks is None else options.hooks.end
        #: whether ``connection()``'s exit may take the check-in fast path: ``_quick``, and no
        #: ``hooks.end`` to run first (the exit also checks that DEBUG logging is off)
        self._quick_exit = self._quick and self._end is None
        #: whether an adaptive pool's check-in may take its fast hand-off (``AsyncPool._release``:
        #: ``Handout.release_adapted``): ``_quick``, and an adaptive pool
        self._adapted_quick = self._quick and options.adaptive is not None
        #: ``hooks.lend``, what a lease hands out in place of its connection (``Lease.connection``)
        self._lend = None if options.hooks is None else options.hooks.lend
        #: ``hooks.check`` and ``hooks.reset``, for the front ends that run them in the caller
        self._check = None if options.hooks is None else options.hooks.check
        self._reset = None if options.hooks is None else options.hooks.reset
        register_for_fork(self)

    def _align_to_wall(self) -> None:
        """Tell the core the wall clock's offset from ``_time`` (an adaptive pool's base rounds
        align on the wall clock: pools on other hosts measure with it), when ``_time`` is
        ``time.monotonic``; another (a test clock, a loop's own) keeps time of its own."""
        if self.options.adaptive is not None:
            real = self._time is time.monotonic
            self._core.align_to_wall(time.time() - time.monotonic() if real else 0.0)

    # ------------------------------------------------------------------ feeding the core

    def _input(self) -> PoolCore:
        """The core, told whether anyone observes it now (a listener, or DEBUG logging): the one
        place that decides it. Under the lock, before every input but the fast paths'."""
        core = self._core
        core.observed = self._sink.observed()
        return core

    def _feed(self, step: Callable[[PoolCore, float], T]) -> T:
        """One input: ``step(core, now)`` under the lock (``_step``), then its output carried
        out. (A checkout that waits takes this path inlined, in each pool's ``checkout``.)"""
        result, actions = self._step(step)
        if actions is not NO_OUTPUT:
            self._carry_out(actions)
        return result

    def _after_core(self) -> None:
        """Carry out what a fast path left in the core (closes of perished connections...)."""
        self._feed(_nothing)

    def _take_locked(self) -> list[Action]:
        """Under the lock: take the core's output, queue its events, re-arm the timer."""
        core = self._core
        if not (core.actions or core.events):
            if core.timers.dirty:
                self._rearm_locked()
            return NO_OUTPUT
        actions, events = core.take()
        if events:
            self._sink.push(events)
        if core.timers.dirty:
            self._rearm_locked()
        return actions

    def _carry_out(self, actions: list[Action]) -> None:
        """Outside the lock: do what the core asked, in order; then deliver the events.

        What ends at once is reported back to the core in one locked step, and its output
        carried out in turn: a connect or probe that could not even start (no thread, no loop),
        which the core counts as running until it is told, and a check or reset run inline
        (``Pool``: in the thread that carries out the action, as psycopg_pool does)."""
        interrupt: BaseException | None = None
        while actions:
            ended = self._dispatch(actions)
            if not ended:
                break
            stop, actions = self._step(partial(self._report_ended, ended))
            interrupt = stop or interrupt
        self._sink.flush()
        if interrupt is not None:
            raise interrupt

    def _dispatch(self, actions: list[Action]) -> list[tuple[Action, BaseException | None]]:
        """Carry out ``actions`` through the front end's I/O, in order: what ended at once (and
        how) is returned, for ``_carry_out`` to report."""
        ended: list[tuple[Action, BaseException | None]] = []
        for action in actions:
            if type(action) is CompleteRequest:
                self._wake(action.request.owner)
            elif type(action) is CloseConnection:
                self._close_connection(action.conn, action.connection, action.pending)
            elif type(action) is StartConnect:
                try:
                    self._start_connect(action.conn)
                except Exception as exc:  # it could not even start
                    ended.append((action, exc))
            elif (
                type(action) is StartCheck
                or type(action) is StartReset
                or type(action) is StartKeepAlive
            ):
                try:
                    outcome = self._run_hook(action)
                except Exception as exc:  # it could not even start
                    outcome = (exc,)
                if outcome is not None:
                    ended.append((action, outcome[0]))
            else:  # (a new kind of action is a type error until it is handled here)
                assert_never(action)
        return ended

    def _report_ended(
        self, ended: list[tuple[Action, BaseException | None]], core: PoolCore, now: float
    ) -> BaseException | None:
        """Under the lock: report each of ``ended``; a ``BaseException`` that is not an
        ``Exception`` (KeyboardInterrupt in a hook) is returned, to be raised once all is done."""
        stop: BaseException | None = None
        for done, error in ended:
            self._report(core, now, done, error)
            if error is not None and not isinstance(error, Exception):
                stop = error
        return stop

    @staticmethod
    def _report(core: PoolCore, now: float, done: Action, error: BaseException | None) -> None:
        """Tell the core that ``done``'s work ended (``error``: how it failed)."""
        if type(done) is StartCheck:
            core.check_done(done.conn, now, error)
        elif type(done) is StartReset:
            core.reset_done(done.conn, now, error)
        elif type(done) is StartConnect:
            assert error is not None
            core.connect_failed(done.conn, now, error)
        elif type(done) is StartKeepAlive:
            core.keep_alive_done(done.conn, now, error)
        elif type(done) is CompleteRequest or type(done) is CloseConnection:
            raise AssertionError(f"{done!r} is carried out, never reported back")
        else:  # (a new kind of action is a type error until it is handled here)
            assert_never(done)

    def _hook_ended(
        self, action: StartCheck | StartReset | StartKeepAlive, error: BaseException | None
    ) -> None:
        """A check, reset or probe run apart (a task, a thread) ended."""
        self._feed(lambda core, now: self._report(core, now, action, error))

    def _hook_of(
        self, action: StartCheck | StartReset | StartKeepAlive
    ) -> tuple[Callable[[Any], Any], str]:
        """The function ``action`` runs on its connection, and its name."""
        if type(action) is StartKeepAlive:
            assert self.options.keep_alive is not None
            return self.options.keep_alive.probe, "keep-alive"
        hooks = self.options.hooks
        assert hooks is not None
        hook = hooks.check if type(action) is StartCheck else hooks.reset
        assert hook is not None
        return hook, "check" if type(action) is StartCheck else "reset"

    # ------------------------------------------------------------------ what the I/O reports

    def _connect_over(self, conn: Conn, result: Any, error: BaseException | None = None) -> None:
        """``conn``'s connect function returned ``result``, or raised ``error``: the core learns
        it; an error that is not an ``Exception`` (KeyboardInterrupt...) goes on up."""
        if error is not None:
            self._connect_ended(conn, error)
            if not isinstance(error, Exception):
                raise error
            return
        connection, max_streams, service_id = unwrap(result)
        self._feed(lambda core, now: core.connected(conn, now, connection, service_id, max_streams))

    def _connect_ended(self, conn: Conn, error: BaseException) -> None:
        """``conn``'s connect ended without a connection (a report the core takes more than once
        without harm: a connect it has closed and not abandoned is ignored)."""
        self._feed(lambda core, now: core.connect_failed(conn, now, error))

    def _on_timer(self) -> None:
        """The timer fired: the core's deadlines up to now (never before the one armed)."""

        def step(core: PoolCore, now: float) -> None:
            armed = self._timer_at
            self._timer_at = None
            self._timer_handle = None
            if armed is not None and now < armed:
                now = armed
            orphans = self._orphans
            while orphans:  # leases garbage-collected while out
                core.lease_collected(orphans.popleft(), now)
            core.fire_timers(now)
            core.timers.dirty = True

        self._feed(step)

    # ------------------------------------------------------------------ lifecycle

    def ready(self) -> None:
        """Mark the pool ready: checkouts may proceed, ``min_size`` is populated in the background.
        Does nothing if already ready; raises :class:`~poolkit.PoolClosedError` if closed.
        (``AsyncPool``: call it from the event loop the pool will run on.)"""
        self._bind("ready")
        self._feed(lambda core, now: core.ready(now))

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
        self._bind("clear", required=False)
        self._feed(
            lambda core, now: core.clear(
                now, interrupt_in_use=interrupt_in_use, service_id=service_id, cause=cause
            )
        )

    def resize(self, min_size: int, max_size: int, *, max_connecting: int | None = None) -> None:
        """Change ``min_size`` and ``max_size`` (and ``max_connecting``, unless ``None``) of the
        running pool, in place: no connection is dropped for it, no waiter failed, the
        statistics go on (``options`` is then the pool's options with the new values).

        * The values are checked as :class:`~poolkit.PoolOptions` checks them (its
          ``ValueError`` or ``TypeError``, naming the option at fault), and the pool is left as
          it was if one is refused; a closed pool raises :class:`~poolkit.PoolClosedError`; a
          pool with ``adaptive`` set refuses (``ValueError``: the limit it finds has
          ``max_size`` for ceiling). An explicit ``soft_max_size`` is kept, moved into
          ``[min_size, max_size]`` when it falls outside (``None`` follows ``max_size``).
        * Larger: the room is used at once, as the pool's own growth uses it: the waiting
          checkouts are served oldest first by the connects it starts (``max_connecting`` at a
          time), and connects start to reach the new ``min_size`` (a paused pool starts them
          when it is made ready).
        * Smaller: connections beyond the new limits become *overflow* connections (those beyond
          ``max_size`` and the soft limit): the available ones close now, those a checkout would
          take last first (the longest parked with ``idle_order="lifo"``, the most recently used
          with ``"fifo"``); those in use, being checked or reset close when they come back, even
          with checkouts waiting while the pool is over ``max_size`` (the connections within it
          serve those); pending connects go on, and what one beyond ``max_size`` makes is closed
          when it is established. Until then ``stats().total`` may exceed ``max_size``; no
          connect starts while it does. Connections beyond ``min_size`` are no longer kept: the
          idle ones close after ``max_idle_time`` (at once if they were idle that long).
        """
        self._bind("resize", required=False)

        def step(core: PoolCore, now: float) -> None:
            self.options = core.resize(now, min_size, max_size, max_connecting)

        self._feed(step)

    # ------------------------------------------------------------------ checkout and check-in

    def _served(self, req: Request) -> Lease[C]:
        """The end of a checkout: the lease on what ``req`` was handed, or its error raised."""
        conn = req.conn
        if conn is not None:
            if self._quick and conn.state is not _S_CLOSED:
                return new_lease(self._lease_class, conn, self)
            return self._lease_for(conn)
        assert req.error is not None
        raise req.error

    def _lease_for(self, conn: Conn) -> Lease[C]:
        """The lease on ``conn``, just handed to a waiter (outside the lock). If a
        ``clear(interrupt_in_use=True)`` closed it before the waiter resumed, it is given back and
        the checkout fails with the retryable ``PoolClearedError``: a closed connection is never
        returned."""
        if conn.state is _S_CLOSED:
            self._give_back(conn)
            raise PoolClearedError(address=self.address, interrupted=True)
        if self.options.leak_timeout is None:
            return new_lease(self._lease_class, conn, self)
        stack = checkout_stack()

        def step(core: PoolCore, now: float) -> Hold:
            held = Hold(conn, now, stack)
            core.hold(held, now)
            return held

        held = self._feed(step)
        lease: Lease[C] = new_lease(self._watched_class, conn, self)
        lease._held = held  # type: ignore[attr-defined]  # (the watched class's own slot)
        return lease

    def _abandon(self, req: Request) -> None:
        """The wait for ``req`` was interrupted (a cancellation, KeyboardInterrupt...): leave
        the queue, or give back what came meanwhile, so that nothing is lost."""
        if (
            not self._feed(lambda core, now: core.cancel(req, now))
            and req.state is _SERVED
            and req.conn is not None
        ):
            self._give_back(req.conn)

    def _checkin(self, lease: Lease[C], call: str) -> None:
        """``checkin`` of a lease that is not a plain lease of this pool, out (a watched one, a
        foreign one, one given back): refused with ``InvalidLeaseError``, or given back."""
        check_lease(lease, call)
        if lease._pool is not self:
            raise self._invalid_lease(lease)
        lease.release()  # (a watched lease's own release ends its watch)

    def _left(self, lease: Lease[C], error: BaseException) -> None:
        """``connection()``'s block was left by ``error``: give ``lease`` back. Left by a
        ``BaseException`` that is not an ``Exception`` (a cancellation, ``KeyboardInterrupt``)
        the connection is discarded, since it may be mid-protocol (unless ``hooks.cancel_safe``
        says a cancellation leaves it usable); left by an ``Exception``, it is discarded if
        ``hooks.is_broken`` says so, else released."""
        if isinstance(error, Exception):
            if not self._is_broken(lease, error):
                lease.release()
                return
        elif isinstance(error, self._cancel_errors):
            hooks = self.options.hooks
            if hooks is not None and hooks.cancel_safe:
                lease.release()
                return
        lease.discard(error)

    def _is_broken(self, lease: Lease[C], error: Exception) -> bool:
        """``hooks.is_broken(connection, error)``; one that raises counts as "broken" (and is
        logged): a connection the pool cannot judge is not handed to the next caller."""
        hooks = self.options.hooks
        if hooks is None or hooks.is_broken is None:
            return False
        try:
            return bool(hooks.is_broken(lease._conn.connection, error))
        except Exception:
            _log.exception("hooks.is_broken of pool %s raised", self.address)
            return True

    def _check_in(self, core: PoolCore, lease: Lease[Any], now: float, clean: bool) -> None:
        """Under the lock: ``lease`` comes back to ``core`` (``clean``: ``hooks.end`` reset its
        connection); raises if it is not out from this pool (given back meanwhile, by another
        thread)."""
        if lease._pool is not self:
            raise self._invalid_lease(lease)
        lease._pool = self._returned
        core.release(lease._conn, now, clean)

    def _release_clean(self, lease: Lease[Any]) -> None:
        """The check-in after ``hooks.end`` reset the connection itself (it returned ``True``):
        no reset is started for it."""
        if type(lease) is self._watched_class and lease._pool is self:
            self._unhold(lease._held)  # type: ignore[attr-defined]  # (the watched class's slot)
        self._release(lease, clean=True)

    def _discard(self, lease: Lease[Any], error: BaseException | None) -> None:
        def step(core: PoolCore, now: float) -> None:
            if lease._pool is not self:
                raise self._invalid_lease(lease)
            lease._pool = self._returned
            core.discard(lease._conn, now, error)

        self._feed(step)

    def _invalid_lease(self, lease: Lease[Any]) -> InvalidLeaseError:
        return invalid_lease(self, self._returned, lease)

    def _give_back(self, conn: Conn) -> None:
        self._feed(lambda core, now: core.release(conn, now))

    def _unhold(self, held: Hold) -> None:
        self._feed(lambda core, now: core.unhold(held))
        if self._orphans:
            self._reap()

    def _reap(self) -> None:
        """Report the leases garbage-collected while out, and close their connections."""

        def step(core: PoolCore, now: float) -> None:
            orphans = self._orphans
            while orphans:
                core.lease_collected(orphans.popleft(), now)

        self._feed(step)

    def _fold_waits(self, core: PoolCore, now: float) -> None:
        """Under the lock: add the waits noted by fast hand-offs to the core's tally."""
        waits = self._handoff_waits
        core.fast.note_waits(waits)
        waits.clear()

    # ------------------------------------------------------------------ request objects

    def lease_request(self, request: LeaseRequest) -> None:
        """Ask for a connection on behalf of ``request`` (an object with a hashable ``id`` and a
        ``complete(result)`` method), without waiting. ``complete`` is called once, never under
        the pool's lock (``AsyncPool``: on its event loop), with a :class:`~poolkit.Lease` or
        the error (a timeout after ``wait_queue_timeout``,
        :class:`~poolkit.RequestCancelledError`...)."""
        self.lease_requests((request,))

    def lease_requests(self, requests: Iterable[LeaseRequest]) -> None:
        """:meth:`lease_request` for many requests at once, queued in the order given in one
        step. A malformed request or an id already waiting raises before any is queued."""
        call = f"{type(self).__name__}.lease_requests()"
        batch = check_requests(requests, call)
        self._bind("lease_requests")
        book = self._book
        timeout = self.options.wait_queue_timeout

        def step(core: PoolCore, now: float) -> list[Callable[[], None]]:
            book.check_free(batch, call)
            return book.enqueue(core, batch, now, timeout, self._lease_for)

        for finish in self._feed(step):
            finish()

    def cancel_request(self, request_id: Hashable) -> bool:
        """Take the waiting request ``request_id`` out of the queue: its ``complete`` receives a
        :class:`~poolkit.RequestCancelledError`. False if no such request is waiting (it may
        have been served or failed already: then it is never served again)."""
        request = self._feed(lambda core, now: self._book.cancel(core, request_id, now))
        if request is None:
            return False
        deliver(request, RequestCancelledError(address=self.address, request_id=request_id))
        return True

    # ------------------------------------------------------------------ what a connection says

    def set_max_streams(self, connection_id: int, max_streams: int) -> bool:
        """Connection ``connection_id`` now serves at most ``max_streams`` leases at once (its own
        notice, e.g. HTTP/2 SETTINGS). An increase serves waiting checkouts at once; a decrease
        takes no lease back but gives no new one until the connection's use falls below it.
        Returns false (and changes nothing) if the pool has no such established connection."""
        max_streams = check_max_streams(max_streams)
        return self._feed(lambda core, now: core.set_max_streams(connection_id, max_streams, now))

    def connection_will_close(self, connection_id: int) -> bool:
        """Connection ``connection_id`` said it will close (e.g. HTTP/2 GOAWAY): if available it
        is closed now; if in use it drains (no new leases) and closes on its last check-in.
        ``min_size`` is refilled. Returns false if the pool has no such connection."""
        return self._feed(lambda core, now: core.will_close(connection_id, now))

    # ------------------------------------------------------------------ views

    def stats(self) -> PoolStats:
        """A snapshot of the pool's state and counts."""

        def step(core: PoolCore, now: float) -> PoolStats:
            self._fold_waits(core, now)
            return core.stats()

        return self._feed(step)

    def service_generation(self, service_id: Any) -> int | None:
        """In load-balanced mode, the generation of ``service_id``'s connections now (None: the
        pool has none of that service): an error on a connection of an older generation is
        stale, and clears nothing (SDAM)."""
        entry = self._feed(lambda core, now: core.service_generations.get(service_id))
        return None if entry is None else entry[0]

    @property
    def available(self) -> int:
        """The connections available now (``stats().available``), read without the pool's lock
        and without folding anything: a glance for gauges and heuristics (a drop-in counting the
        callers that will wait), at no cost on a hot path; it may be stale by the time it is
        used. ``stats()`` is the consistent snapshot."""
        return len(self._core.idle)

    @property
    def state(self) -> PoolState:
        return self._core.state

    @property
    def generation(self) -> int:
        return self._core.generation

    def __repr__(self) -> str:
        s = self.stats()
        return (
            f"<{type(self).__name__} {self.address} {s.state.value} total={s.total} "
            f"available={s.available} pending={s.pending} in_use={s.in_use} waiting={s.waiting}>"
        )

    # ------------------------------------------------------------------ fork

    def _forget_after_fork(self) -> None:
        """In the child after ``os.fork()`` (the front end's ``_reset_after_fork``, once it made
        new locks): the parent's connections are forgotten, not closed (they are the parent's
        sockets); the pool starts over."""
        self._timer_at = None
        self._timer_handle = None
        self._sink.reinit_after_fork()
        self._orphans.clear()
        self._handoff_waits.clear()
        self._core.reset_after_fork()


def _nothing(core: PoolCore, now: float) -> None:
    """The step of ``_after_core``: no input, only the output taken."""
