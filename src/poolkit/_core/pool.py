"""The pool's pure core: every decision, no I/O, no clock, no threads, no asyncio.

This module holds the state, checkout, check-in and hand-off. Bound into ``PoolCore`` by name from
modules of their own: ``connections`` (a connection's life: connects, roles, close),
``maintenance`` (the pool's lifecycle: ready, clear, close, fork, and its timers), ``health``
(keep-alive, connect retries, leaks, a connection's notices) and ``tally`` (counts and stats).

Rules of this module
--------------------
* Each public method is one input (a checkout, a check-in, a connect result, a timer, clear,
  ready, close, cancel) and takes ``now`` from its caller. It mutates the state and appends what
  the front end must do to ``actions`` and what listeners must see to ``events``; the front end
  takes both (``take``) and carries them out outside its lock.
* Connection states change only as the table in ``records`` says: through ``_fire``, except the
  two hot transitions (idle -> leased on checkout, leased -> idle on check-in), whose result is
  read from the same table at import and which change no counter. Counters of states change only
  in ``_fire`` (and at a connection's birth in ``connections._new_record``). ``total`` is
  ``len(conns)``; ``available`` is ``len(_idle)``; ``leased`` is what remains.
* The pool's state and generation change only in ``_set_state``, which also refreshes the two
  values the hot paths compare with (``_lease_gen``, ``_release_gen``).
* Requests wait in one FIFO (an ``OrderedDict``: O(1) append, pop-oldest and cancel). A request
  that was served, failed, timed out or cancelled is out of the queue and is never handed a
  connection.
* Connections are made by the pool, not by a waiter: a connect covers "a waiter", not "this
  waiter". A new connect starts only for a waiter not covered by the connects in flight, or to
  reach ``min_size``, and only while the pool is ready, under ``max_size`` and ``max_connecting``.
* ``_idle`` is a stack: check-in pushes on the right, checkout pops from the right (the most
  recently used first), so the left end is the longest parked (a connection back from a
  keep-alive probe is parked anew, its idle time running on).
* Events are built only when ``observed`` is true. ``lease_idle`` and ``release_idle`` (the fast
  paths) never build an event, never touch the timer heap and allocate nothing.
* ``idle_since`` is kept only in a clocked pool (one that reads idle times); ``release_idle``
  applies only in an unclocked one, so it needs no ``now``.
"""

from __future__ import annotations

import random
from collections import OrderedDict, deque
from collections.abc import Callable
from typing import Any, Final

from ..errors import (
    PoolClosedError,
    TooManyWaitersError,
)
from ..events import (
    CHECKOUT_CANCELLED,
    CHECKOUT_CIRCUIT_OPEN,
    CHECKOUT_CONNECTION_ERROR,
    CHECKOUT_POOL_CLOSED,
    CHECKOUT_TOO_MANY_WAITERS,
    CLOSE_ERROR,
    CLOSE_IDLE,
    CLOSE_WILL_CLOSE,
    ConnectionCheckedInEvent,
    ConnectionCheckedOutEvent,
    ConnectionCheckOutFailedEvent,
    ConnectionCheckOutStartedEvent,
    PoolCreatedEvent,
    PoolEvent,
)
from ..options import PoolOptions
from ..stats import PoolState
from . import connections as _c
from . import health as _h
from . import maintenance as _m
from . import tally as _t
from .actions import Action, CompleteRequest
from .records import STEPS as _STEPS
from .records import Conn, ConnInput, ConnState, InvalidTransition, Request, RequestState, Role
from .tally import Tally
from .timers import TimerEntry, TimerHeap, TimerKind

_READY: Final = PoolState.READY
_PAUSED: Final = PoolState.PAUSED
_CLOSED: Final = PoolState.CLOSED
_WAITING: Final = RequestState.WAITING
_SERVED: Final = RequestState.SERVED
_IDLE: Final = ConnState.IDLE
_CONNECTING: Final = ConnState.CONNECTING
_LEASED: Final = ConnState.LEASED
_S_CLOSED: Final = ConnState.CLOSED
_LEASE: Final = ConnInput.LEASE
_RELEASE: Final = ConnInput.RELEASE
_RELEASE_LAST: Final = ConnInput.RELEASE_LAST
_DRAINING: Final = ConnState.DRAINING
_KEPT: Final = Role.KEPT
_DEMAND: Final = Role.DEMAND
_OVERFLOW: Final = Role.OVERFLOW
_NO_GATE: Final = -2  # a connection's gate that no fast path matches


def _plain_step(state: ConnState, event: ConnInput) -> ConnState:
    """The two hot transitions are inlined; the table must agree that they touch no counter."""
    step = _STEPS[state][event]
    assert step is not None and not step[1], (state, event)
    return step[0]


_IDLE_LEASE: Final = _plain_step(ConnState.IDLE, ConnInput.LEASE)
_LEASED_IDLE: Final = _plain_step(ConnState.LEASED, ConnInput.RELEASE_LAST)


class PoolCore:
    """The state of one pool and the rules that change it."""

    # Slots: every attribute read on the hot paths is a slot read (with more than 30 instance
    # attributes CPython 3.11 falls back to a per-instance dict and slower lookups).
    __slots__ = (
        "_abandoned",
        "_background",
        "_counts",
        "_fail_row",
        "_fail_since",
        "_failing",
        "_failing_told",
        "_idle",
        "_idle_sweep",
        "_keep_alive",
        "_kept",
        "_lb",
        "_lease_gen",
        "_lifetime",
        "_max_idle",
        "_max_size",
        "_max_waiting",
        "_next_id",
        "_open",
        "_overflow",
        "_quick_gen",
        "_rand",
        "_release_gen",
        "_retry",
        "_soft",
        "_waiters",
        "actions",
        "address",
        "checkouts",
        "clear_cause",
        "clocked",
        "conns",
        "events",
        "generation",
        "observed",
        "options",
        "service_generations",
        "state",
        "tally",
        "timers",
    )

    def __init__(
        self,
        options: PoolOptions,
        address: str,
        *,
        observed: bool = False,
        rand: Callable[[], float] = random.random,
    ) -> None:
        self.options: Final = options
        self.address: Final = address
        self.observed = observed
        #: The generation an idle connection must have to be leased (released) with no further
        #: check; -1 when every connection needs the full check. Derived from the state, the
        #: generation and the options, and refreshed whenever they change (``_set_state``).
        self._lease_gen: int
        self._release_gen: int
        self._quick_gen: int  # release_idle's: as _release_gen, and -1 when the pool is clocked
        self.state: PoolState  # these four are set by _set_state, below
        self.generation: int
        self._lb = options.load_balanced
        self._max_idle = options.max_idle_time
        self._max_size = options.max_size or 1 << 62  # 0: no limit
        soft = options.soft_max_size
        self._soft = self._max_size if soft is None else soft
        self._lifetime = options.max_lifetime
        self._max_waiting = options.max_waiting
        self._keep_alive = options.keep_alive
        self._retry = options.connect_retry
        #: connect_retry's failing state (``health.Failing``), ``None`` while connects succeed
        self._failing: _h.Failing | None = None
        self.tally: Final = Tally()  #: cumulative counts (``stats``)
        self.checkouts = 0  #: checkouts served, ever (the one count the fast paths keep)
        self._fail_row = 0  #: connects failed since the last one that succeeded
        self._fail_since = 0.0  #: when the first of them failed
        #: whether that run of failures was told (``ConnectFailingEvent``) as no checkout was
        self._failing_told = False
        #: ``max_lifetime``'s jitter: a uniform draw in [0, 1) (an input, like the time)
        self._rand = rand
        #: whether ``lease_idle`` reads ``now``; when false a front end may pass 0.0 there and skip
        #: the clock (it only closes perished connections, and starts nothing, on that path).
        #: Every other input needs the real time: a check-in, say, may start a connect.
        self.clocked = (
            options.max_idle_time is not None
            or options.max_lifetime is not None
            or options.keep_alive is not None
        )
        self._set_state(_PAUSED, 0)
        #: load-balanced mode: service id -> [generation, connection count]
        self.service_generations: dict[Any, list[int]] = {}
        #: every connection not closed, by id
        self.conns: dict[int, Conn] = {}
        self._idle: deque[Conn] = deque()
        #: multiplexed connections in use with a stream free (and not perished when put there):
        #: an ordered set, oldest first; leases go here before they take an idle connection
        self._open: dict[Conn, None] = {}
        self._waiters: OrderedDict[Request, None] = OrderedDict()
        self._counts = [0] * len(ConnState)  # connections per state, indexed by state
        self._kept = 0  # connections whose role is KEPT
        #: connects given up on whose function has not returned (they count against the limits)
        self._abandoned = 0
        self._overflow = 0  # connections whose role is OVERFLOW
        self._next_id = 1
        self.clear_cause: BaseException | None = None
        self.timers: Final = TimerHeap(self._timer_is_live)
        self._idle_sweep: TimerEntry | None = None
        self._background: TimerEntry | None = None
        self.actions: list[Action] = []
        self.events: list[PoolEvent] = []
        if observed:
            self.events.append(PoolCreatedEvent(address=address, options=options.cmap_options()))

    # ------------------------------------------------------------------ views (in ``tally``)

    total = property(_t.total)
    available = property(_t.available)
    pending = property(_t.pending)
    in_use = property(_t.in_use)
    waiting = property(_t.waiting)
    count = _t.count
    stats = _t.snapshot
    waiters = _t.waiters
    idle_connections = _t.idle_connections

    def take(self) -> tuple[list[Action], list[PoolEvent]]:
        """Hand the pending actions and events to the front end and start fresh lists.

        The lists returned are the front end's for good: the core never appends to them again
        (a threaded front end carries them out after releasing its lock, while another thread may
        already be feeding the core; handing it the core's own empty list once let two threads
        carry out the same actions)."""
        actions, events = self.actions, self.events
        self.actions = []
        self.events = []
        return actions, events

    def next_deadline(self) -> float | None:
        self.timers.dirty = False
        return self.timers.next_deadline()

    # ------------------------------------------------------------------ lifecycle and timers
    # (in ``maintenance``)

    ready = _m.ready
    clear = _m.clear
    _clear_service = _m._clear_service
    _interrupt = _m._interrupt
    close = _m.close
    reset_after_fork = _m.reset_after_fork
    fire_timers = _m.fire_timers
    _timer_is_live = _m._timer_is_live
    _schedule_background = _m._schedule_background
    _run_background = _m._run_background
    _sweep_idle = _m._sweep_idle
    _arm_idle_sweep = _m._arm_idle_sweep
    _push_idle = _m._push_idle
    _parked = _m._parked
    _fail = _m._fail
    _fail_timeout = _m._fail_timeout
    _fail_all_waiters = _m._fail_all_waiters
    _cleared_error = _m._cleared_error

    # ------------------------------------------------------------------ connections
    # (in ``connections``)

    connected = _c.connected
    _perished = _c._perished
    _count_role = _c._count_role
    _regate = _c._regate
    _set_role = _c._set_role
    _new_role = _c._new_role
    _promote = _c._promote
    _maybe_connect = _c._maybe_connect
    _start_connect = _c._start_connect
    _new_record = _c._new_record
    _begin_connect = _c._begin_connect
    _forget = _c._forget
    _connect_returned = _c._connect_returned
    _drop = _c._drop
    _close = _c._close

    # ------------------------------------------------------------------ health and notices
    # (in ``health``)

    keep_alive_done = _h.keep_alive_done
    connect_failed = _h.connect_failed
    will_close = _h.will_close
    set_max_streams = _h.set_max_streams
    _arm_keep_alive = _h._arm_keep_alive
    _start_probe = _h._start_probe
    _probe_timed_out = _h._probe_timed_out
    _end_probe_at_close = _h._end_probe_at_close
    _drop_probe = _h._drop_probe
    _stop_ka_timer = _h._stop_ka_timer
    _attempt_failed = _h._attempt_failed
    _failing_unseen = _h._failing_unseen
    _plan_retry = _h._plan_retry
    _connect_succeeded = _h._connect_succeeded
    _open_circuit = _h._open_circuit
    _circuit_error = _h._circuit_error
    _recovered = _h._recovered
    _backoff_over = _h._backoff_over
    _health_timer_is_live = _h._health_timer_is_live
    hold = _h.hold
    unhold = _h.unhold
    lease_collected = _h.lease_collected
    _report_leak = _h._report_leak

    # ------------------------------------------------------------------ checkout

    def lease_idle(self, now: float) -> Conn | None:
        """The fast path: lease an available connection at once, or return ``None``.

        ``None`` means the checkout must go through :meth:`request` (not ready, requests already
        waiting, or nothing available). No events are built: the caller uses this only when
        nobody observes the pool.
        """
        if self._waiters:
            return None
        idle = self._idle
        if idle and idle[-1].gate == self._lease_gen and not self._open:
            # ready, a plain current connection, and no idle time, lifetime or service to check;
            # no multiplexed connection with a free stream (leases go there first: ``_take``)
            conn = idle.pop()
            # _fire(conn, LEASE) inlined: IDLE -> LEASED changes no counter (see _IDLE_LEASE).
            conn.state = _IDLE_LEASE
            conn.streams = 1
            self.checkouts += 1
            return conn
        if self.state is not _READY:
            return None
        found = self._take(now)  # the full check; closes perished ones on the way
        if found is not None:
            self._lease(found)
            self.checkouts += 1
        return found

    def request(self, req: Request, now: float) -> None:
        """A checkout. On return ``req`` is served, failed, or queued (``req.queued``)."""
        if self.observed:
            self.events.append(ConnectionCheckOutStartedEvent(address=self.address))
        state = self.state
        if state is not _READY:
            if state is _CLOSED:
                self._fail(req, PoolClosedError(address=self.address), CHECKOUT_POOL_CLOSED, now)
            else:
                self._fail(req, self._cleared_error(), CHECKOUT_CONNECTION_ERROR, now)
            return
        waiters = self._waiters
        if not waiters:
            conn = self._take(now)
            if conn is not None:
                self._serve(req, conn, now)
                return
        deadline = req.deadline
        if deadline is not None and deadline <= now:
            self._fail_timeout(req, now)
            return
        failing = self._failing
        if failing is not None and failing.open:
            self._fail(req, self._circuit_error(now), CHECKOUT_CIRCUIT_OPEN, now)
            return
        max_waiting = self._max_waiting
        if max_waiting and len(waiters) >= max_waiting:
            error = TooManyWaitersError(address=self.address, max_waiting=max_waiting)
            self._fail(req, error, CHECKOUT_TOO_MANY_WAITERS, now)
            return
        waiters[req] = None
        req.queued = True
        if deadline is not None:
            self.timers.push(deadline, TimerKind.DEADLINE, req)
        # (room first: a pool with waiters is most often full)
        if (
            len(self.conns) + self._abandoned < self._max_size
            and len(waiters) > self._counts[_CONNECTING]
        ):
            self._maybe_connect(now, fill_min=False)

    def cancel(self, req: Request, now: float) -> bool:
        """The requester gave up. True if it was still waiting (it is now cancelled)."""
        if req.state is not _WAITING:
            return False
        if req.queued:
            del self._waiters[req]
            if req.deadline is not None:
                self.timers.note_stale()
        req.state = RequestState.CANCELLED
        self.tally.count(self.tally.failed, CHECKOUT_CANCELLED)
        if req.queued:
            self.tally.waited(now - req.started)
        if self.observed:
            self.events.append(
                ConnectionCheckOutFailedEvent(
                    address=self.address, reason=CHECKOUT_CANCELLED, duration=now - req.started
                )
            )
        return True

    # ------------------------------------------------------------------ check-in

    def release_idle(self, conn: Conn) -> Request | bool:
        """The fast check-in: hand ``conn`` to the oldest waiter or put it back as available at
        once, or return false.

        False means the check-in must go through :meth:`release` (a stale or multiplexed
        connection, a clocked or load-balanced pool, a closed pool) and nothing was changed. True
        means the connection is available again. A ``Request`` means it was handed to that
        waiting request, now served, which the caller must wake (nothing is appended to
        ``actions``) and the caller reports the wait it ended (``note_wait``). Needs no ``now``:
        it applies only where the time of a check-in is never read. The caller uses it only when
        nobody observes the pool (it builds no event).
        """
        if conn.gate != self._quick_gen:  # (a plain connection out: leased, one stream)
            return False
        waiters = self._waiters
        if waiters:
            # _serve without _lease: the connection stays leased, now on the waiter's behalf.
            req = waiters.popitem(last=False)[0]  # _pop_waiter inlined
            if req.deadline is not None:
                self.timers.note_stale()
            req.state = _SERVED
            req.conn = conn
            self.checkouts += 1
            return req
        # _fire(conn, RELEASE_LAST) inlined: LEASED -> IDLE changes no counter (see _LEASED_IDLE).
        conn.streams = 0
        conn.state = _LEASED_IDLE
        self._idle.append(conn)
        return True

    def note_wait(self, seconds: float) -> None:
        """A request handed a connection by ``release_idle`` had waited ``seconds`` (its front
        end measures it, from ``Request.started``)."""
        self.tally.waited(seconds)

    def release(self, conn: Conn, now: float) -> bool:
        """A lease on ``conn`` came back (the front end checked that it was out).

        Returns whether there may be output (actions, events, a new earliest timer) for the
        front end to take: false only on the plain path, where the connection just goes back.
        """
        if self.observed:
            self.events.append(
                ConnectionCheckedInEvent(address=self.address, connection_id=conn.id)
            )
            self._give_back(conn, now, now)
            return True
        return self._give_back(conn, now, now)

    def _give_back(self, conn: Conn, now: float, idle_since: float) -> bool:
        """One stream of ``conn`` came back (a lease's, or a keep-alive probe's); if it was the
        last, the connection has been idle since ``idle_since``. Returns whether there may be
        output (actions, a new earliest timer) besides events."""
        conn.streams -= 1
        if conn.state is not _LEASED:
            if conn.state is _DRAINING:
                if conn.streams == 1 and conn.probe_started is not None:
                    self._drop_probe(conn)  # only its keep-alive probe left: not waited for
                if not conn.streams:
                    self._close(conn, CLOSE_WILL_CLOSE, how=_RELEASE_LAST)
                    self._dispatch(now)
                    return True
            self._fire(conn, _RELEASE if conn.streams else _RELEASE_LAST)
            return False  # draining, or closed while it was out
        if conn.streams:
            return self._release_stream(conn, now)
        # _fire(conn, RELEASE_LAST) inlined: LEASED -> IDLE changes no counter (see _LEASED_IDLE).
        conn.state = _LEASED_IDLE
        if conn.gate != self._release_gen:
            # stale, closed pool, a service, lifetime, overflow or streams to check
            if conn.max_streams > 1:
                self._open.pop(conn, None)
            else:
                self._regate(conn)  # (no lease left: plain again if its limit went back to 1)
            reason = self._perished(conn, now, check_idle=False)
            if reason is None and conn.role is _OVERFLOW and not self._waiters:
                reason = CLOSE_IDLE  # overflow connections close as soon as they are idle
            if reason is not None:
                self._close(conn, reason)
                self._dispatch(now)
                return True
        conn.idle_since = idle_since
        if self._waiters:
            self._serve(self._pop_waiter(), conn, now)
            return True
        self._idle.append(conn)
        if self.clocked:
            return self._parked(conn, now)
        return False

    def _release_stream(self, conn: Conn, now: float) -> bool:
        """One stream of a multiplexed connection came back and others are still in use."""
        self._fire(conn, _RELEASE)
        if conn.streams == 1 and conn.probe_started is not None:
            conn.idle_since = now  # only the keep-alive probe is left: idle from now
        if self._perished(conn, now, check_idle=False) is not None:
            self._open.pop(conn, None)  # no new leases; closed when its last lease comes back
            return False
        if conn.streams >= conn.max_streams:
            return False  # its limit went down meanwhile: no new lease until use falls below it
        if self._waiters:
            self._serve(self._pop_waiter(), conn, now)
            return True
        self._open[conn] = None
        return False

    def discard(self, conn: Conn, now: float, error: BaseException | None = None) -> None:
        """A lease on ``conn`` came back to be closed (reason ``error``)."""
        if self.observed:
            self.events.append(
                ConnectionCheckedInEvent(address=self.address, connection_id=conn.id)
            )
        conn.streams -= 1
        if conn.state is _S_CLOSED:
            self._fire(conn, _RELEASE if conn.streams else _RELEASE_LAST)
            return
        self._close(conn, CLOSE_ERROR, error)
        self._dispatch(now)

    # ------------------------------------------------------------------ connect results

    # ------------------------------------------------------------------ internals

    def _set_state(self, state: PoolState, generation: int) -> None:
        """The one place the pool's state and generation change (with what derives from them)."""
        self.state = state
        self.generation = generation
        plain = not self._lb
        self._lease_gen = generation if plain and not self.clocked and state is _READY else -1
        plain_release = plain and state is not _CLOSED and self._lifetime is None
        self._release_gen = generation if plain_release else -1
        self._quick_gen = -1 if self.clocked else self._release_gen

    def _take(self, now: float) -> Conn | None:
        """A connection to lease now, or ``None``: a multiplexed one in use with a stream free
        first, then the most recently used available one (closing perished ones on the way)."""
        open_ = self._open
        while open_:
            conn = next(iter(open_))
            if self._perished(conn, now, check_idle=False) is None:
                return conn
            del open_[conn]  # no new leases; closed when its last lease comes back
        return self._pop_idle(now)

    def _lease(self, conn: Conn) -> None:
        """One more lease on ``conn`` (idle, or multiplexed with a stream free)."""
        if conn.state is _IDLE:
            conn.state = _IDLE_LEASE  # _fire(conn, LEASE) inlined: no counter (see _IDLE_LEASE)
            if conn.ka_timer is not None:  # (no call on the usual path)
                self._stop_ka_timer(conn)  # its keep-alive probe is off
        else:
            self._fire(conn, _LEASE)
        conn.streams += 1
        if conn.max_streams > 1:
            if conn.streams < conn.max_streams:
                self._open[conn] = None
            else:
                self._open.pop(conn, None)

    def _fire(self, conn: Conn, event: ConnInput) -> ConnState:
        old = conn.state
        step = _STEPS[old][event]
        if step is None:
            raise InvalidTransition(conn.id, old, event)
        new, recount = step
        conn.state = new
        if recount:
            counts = self._counts
            counts[old] -= 1
            counts[new] += 1
        return new

    def _pop_idle(self, now: float) -> Conn | None:
        """Pop the most recently used available connection that is not perished, closing the
        perished ones met on the way (CMAP checkout)."""
        idle = self._idle
        while idle:
            conn = idle.pop()
            reason = self._perished(conn, now)
            if reason is None:
                return conn
            self._close(conn, reason)
        return None

    def _pop_waiter(self) -> Request:
        req, _ = self._waiters.popitem(last=False)
        if req.deadline is not None:
            self.timers.note_stale()
        return req

    def _serve(self, req: Request, conn: Conn, now: float) -> None:
        self._lease(conn)
        req.state = _SERVED
        req.conn = conn
        self.checkouts += 1
        if self.observed:
            self.events.append(
                ConnectionCheckedOutEvent(
                    address=self.address, connection_id=conn.id, duration=now - req.started
                )
            )
        if req.queued:
            self.tally.waited(now - req.started)
            self.actions.append(CompleteRequest(req))

    def _dispatch(self, now: float) -> None:
        """Hand available connections to waiters, oldest first; then connect if needed."""
        waiters = self._waiters
        while waiters and (self._idle or self._open):
            conn = self._take(now)
            if conn is None:
                break
            self._serve(self._pop_waiter(), conn, now)
        self._maybe_connect(now, fill_min=True)
