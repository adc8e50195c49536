"""The pool's pure core: every decision, no I/O, no clock, no threads, no asyncio.

``PoolCore`` keeps checkout, check-in and hand-off (here). It is built on the classes that hold
the rest of its inputs, one concern a module (``fields`` says how): a connection's life
(``connection_life``), connect results and health (``health``), the pool's lifecycle and timers
(``lifecycle``). The state that has rules of its own is owned by collaborators, each in its
module: the wait queue (``waiters.WaitQueue``), the idle set (``idle.IdleSet``), connect failures
(``failures.ConnectFailures``), keep-alive probes (``keepalive.Probes``), the leak watch
(``leaks.LeakWatch``), roles (``roles.Roles``), the counts (``tally.Tally``) and the timer heap
(``timers.TimerHeap``).

Rules of this module
--------------------
* Each public method is one input (a checkout, a check-in, a connect result, a timer, clear,
  ready, close, cancel) and takes ``now`` from its caller. It mutates the state and appends what
  the front end must do to ``actions`` and what listeners must see to ``events``; the front end
  takes both (``take``) and carries them out outside its lock.
* Connection states change only as the table in ``records`` says: through ``_fire``, except the
  two hot transitions (idle -> leased on checkout, leased -> idle on check-in), which
  ``lease_idle``, ``_lease``, ``release_idle`` and ``_give_back`` assign directly with the result
  read from the same table at import, and which change no counter. Counters of states change only
  in ``_fire``, ``_new_record`` (a birth) and ``reset_after_fork`` (all to zero). ``total`` is
  ``len(conns)``; ``available`` is the size of the idle set; ``leased`` is what remains.
* The pool's state and generation change only in ``_set_state``, which also refreshes the gates
  the fast paths compare with (below).
* A request that was served, failed, timed out or cancelled is out of the wait queue and is
  never handed a connection. A connection that becomes free goes to the oldest waiter first.
* Connections are made by the pool: a connect, check or reset in flight covers "a waiter", not
  "this waiter". A new connect starts only for a waiter not covered by those, or to reach
  ``min_size``, and only while the pool is ready, under ``max_size`` and ``max_connecting``.
* Events are built only when ``observed`` is true. ``lease_idle`` and ``release_idle`` (the fast
  paths, used only when nobody observes the pool) build no event and push no timer. When the gate
  matches (below) they allocate nothing, and the one thing either does to the timer heap is
  ``release_idle`` counting a stale entry (``note_stale``) when it hands the connection to a
  waiter that had a deadline. Otherwise ``release_idle`` changes nothing, and ``lease_idle`` takes
  the full check (``_take``, ``_lease``), which may close perished connections (actions) and stop
  a keep-alive timer (``note_stale``).
* ``idle_since`` is kept only in a clocked pool (one that reads idle times); ``release_idle``
  applies only in an unclocked one, so it needs no ``now``.

Gates
-----
The fast paths decide "nothing to check" with one integer comparison: a connection's ``gate``
against one of the pool's three gate values.

* ``conn.gate`` (kept by ``_regate``) is the connection's generation while it is *plain* (a
  limit of one stream, at most one in use, not overflow, neither draining nor closed), else
  ``_NO_GATE`` (-2), which no gate value equals. ``_NO_GATE`` is always safe: a plain connection
  that has it takes the full paths until it is re-gated.
* ``_lease_gen`` (``lease_idle``): the generation when the pool is ready, not load-balanced and
  not clocked (no idle time, lifetime or keep-alive to check at checkout); else -1.
* ``_release_gen`` (``_give_back``): the generation when the pool is not closed, not
  load-balanced, with no ``max_lifetime`` nor reset hook (nothing to check at check-in); else -1.
* ``_quick_gen`` (``release_idle``): ``_release_gen``, and -1 when the pool is clocked (a
  check-in there must park the connection with its time, which ``release_idle`` does not take).

A connection whose gate equals a gate value is current (its generation is the pool's) and plain,
and the pool needs nothing else checked: the fast path may lease it or take it back as is. -1 and
-2 never equal a generation (which starts at 0), so a pool or a connection "off the fast paths"
is one comparison too. The gate values change only in ``_set_state``.

Fast paths
----------
``lease_idle``, ``release_idle``, ``request``, ``release``/``_give_back`` (``_release_stream`` for
a multiplexed connection), ``_serve``, ``_lease``, ``_take``, ``_pop_idle`` and ``_dispatch`` run
on every checkout and check-in, so they read and change the idle set's and the wait queue's
containers directly, through ``_idle`` (``IdleSet.stack``), ``_open`` (``IdleSet.open``) and
``_waiters`` (``WaitQueue.queue``), the same objects the collaborators own (never replaced, only
changed in place). They also inline the two hot transitions (``_IDLE_LEASE``, ``_LEASED_IDLE``),
``WaitQueue.pop_oldest`` in ``release_idle``, ``WaitQueue.add`` and
``ConnectFailures.circuit_open`` in ``request``, and ``IdleSet.add_open`` in ``_release_stream``:
each call saved there is a measurable share of a checkout (with the two calls of ``request``, a
checkout that waits ran several per cent slower on the core alone; ``benchmarks/bench_pool.py``
measures the pools). Everything else goes through the collaborators' methods.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Final

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
from ..stats import PoolState, PoolStats
from .actions import Action, CompleteRequest
from .failures import ConnectFailures
from .hooks import HookRuns
from .idle import IdleSet
from .keepalive import Probes
from .leaks import LeakWatch
from .lifecycle import Lifecycle
from .records import (
    _BACKING_OFF,
    _CHECKING,
    _CLOSED,
    _CONNECTING,
    _DRAINING,
    _IDLE,
    _LEASE,
    _LEASED,
    _OVERFLOW,
    _PAUSED,
    _READY,
    _RELEASE,
    _RELEASE_LAST,
    _RESETTING,
    _S_CLOSED,
    _SERVED,
    _WAITING,
    STEPS,
    Conn,
    ConnInput,
    ConnState,
    Request,
    RequestState,
)
from .roles import Roles
from .tally import Tally
from .timers import TimerHeap, TimerKind
from .waiters import WaitQueue


def _plain_step(state: ConnState, event: ConnInput) -> ConnState:
    """The two hot transitions are inlined; the table must agree that they touch no counter."""
    step = STEPS[state][event]
    assert step is not None and not step[1], (state, event)
    return step[0]


_IDLE_LEASE: Final = _plain_step(ConnState.IDLE, ConnInput.LEASE)
_LEASED_IDLE: Final = _plain_step(ConnState.LEASED, ConnInput.RELEASE_LAST)


class PoolCore(Lifecycle):
    """The state of one pool and the rules that change it."""

    __slots__ = ()

    def __init__(
        self,
        options: PoolOptions,
        address: str,
        *,
        observed: bool = False,
        rand: Callable[[], float] = random.random,
    ) -> None:
        self.options = options
        self.address = address
        self.observed = observed
        self._lb = options.load_balanced
        self._max_idle = options.max_idle_time
        self._max_size = options.max_size or 1 << 62  # 0: no limit
        self._lifetime = options.max_lifetime
        self._max_waiting = options.max_waiting
        self.tally = Tally()  #: cumulative counts (``stats``)
        self.checkouts = 0  #: checkouts served, ever (the one count the fast paths keep)
        #: ``max_lifetime``'s jitter: a uniform draw in [0, 1) (an input, like the time)
        self._rand = rand
        #: load-balanced mode: service id -> [generation, connection count]
        self.service_generations = {}
        #: every connection not closed, by id
        self.conns = {}
        self._counts = [0] * len(ConnState)  # connections per state, indexed by state
        #: connects given up on whose function has not returned (they count against the limits)
        self._abandoned = 0
        self._next_id = 1
        self.clear_cause = None
        self.timers = TimerHeap(self._timer_is_live)
        self._background = None  # the one live BACKGROUND timer
        self.wait_queue = WaitQueue(self.timers)
        self.idle_set = IdleSet(self.timers, options.max_idle_time)
        # the collaborators' containers, read directly on the fast paths ("Fast paths" above)
        self._waiters = self.wait_queue.queue
        self._idle = self.idle_set.stack
        self._open = self.idle_set.open
        self.failures = ConnectFailures(options.connect_retry, rand, address)
        self.probes = Probes(self.timers, options.keep_alive)
        self.hooks = HookRuns(self.timers, options.hooks)
        self.leaks = LeakWatch(self.timers, options.leak_timeout, address)
        #: ``HookRuns.check_after``, read on the checkout paths (``_pop_idle``, ``lease_idle``)
        self._check_after = self.hooks.check_after
        #: whether ``lease_idle`` reads ``now``; when false a front end may pass 0.0 there and skip
        #: the clock (it only closes perished connections, and starts nothing, on that path).
        #: Every other input needs the real time: a check-in, say, may start a connect.
        self.clocked = (
            options.max_idle_time is not None
            or options.max_lifetime is not None
            or options.keep_alive is not None
            or self._check_after is not None  # (idle times decide the checks)
        )
        self._set_state(_PAUSED, 0)  # (sets state, generation and the gates: "Gates" above)
        soft = options.soft_max_size
        self.roles = Roles(options.min_size, self._max_size if soft is None else soft, self._regate)
        self.actions: list[Action] = []
        self.events: list[PoolEvent] = []
        if observed:
            self.events.append(PoolCreatedEvent(address=address, options=options.cmap_options()))

    # ------------------------------------------------------------------ views

    @property
    def total(self) -> int:
        return len(self.conns)

    @property
    def available(self) -> int:
        return len(self._idle)

    @property
    def pending(self) -> int:
        return self._counts[_CONNECTING]

    @property
    def in_use(self) -> int:
        return self.count(_LEASED) + self._counts[_DRAINING]

    @property
    def waiting(self) -> int:
        return len(self._waiters)

    def count(self, state: ConnState) -> int:
        """Connections in ``state`` (closed ones are not kept: 0)."""
        if state is _IDLE:
            return len(self._idle)
        if state is _LEASED:
            counts = self._counts
            return (
                len(self.conns)
                - len(self._idle)
                - counts[_CONNECTING]
                - counts[_BACKING_OFF]
                - counts[_DRAINING]
                - counts[_CHECKING]
                - counts[_RESETTING]
            )
        if state is _S_CLOSED:
            return 0
        return self._counts[state]

    def waiters(self) -> list[Request]:
        """The waiting requests, oldest first (for tests and diagnostics)."""
        return list(self._waiters)

    def idle_connections(self) -> list[Conn]:
        """Available connections, longest parked first (for tests and diagnostics)."""
        return list(self._idle)

    def stats(self) -> PoolStats:
        """The statistics now (O(connections))."""
        return self.tally.snapshot(
            state=self.state,
            generation=self.generation,
            conns=self.conns.values(),
            counts=self._counts,
            available=len(self._idle),
            in_use=self.in_use,
            waiting=len(self._waiters),
            abandoned=self._abandoned,
            checkouts=self.checkouts,
            circuit_open=self.failures.circuit_open,
        )

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
        if idle and not self._open:  # (a multiplexed connection with a free stream goes first)
            conn = idle.pop()  # the newest: if ready, plain, current, nothing to check, then
            if conn.gate == self._lease_gen:  # _fire(conn, LEASE) inlined (see _IDLE_LEASE)
                conn.state = _IDLE_LEASE
                conn.streams = 1
                self.checkouts += 1
                return conn
            idle.append(conn)  # (put back where it was: the full check below decides)
        if self.state is not _READY or self._check_after is not None:
            return None  # (with a check hook, ``request`` decides: a check may start)
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
        failing = self.failures.failing  # (ConnectFailures.circuit_open inlined)
        if failing is not None and failing.open:
            self._fail(req, self.failures.circuit_error(now), CHECKOUT_CIRCUIT_OPEN, now)
            return
        deadline = req.deadline
        if deadline is not None and deadline <= now:
            self._connect_for_one(now)  # (it may not wait, but the pool still grows for it)
            self._fail_timeout(req, now)
            return
        max_waiting = self._max_waiting
        if max_waiting and len(waiters) >= max_waiting:
            error = TooManyWaitersError(address=self.address, max_waiting=max_waiting)
            self._fail(req, error, CHECKOUT_TOO_MANY_WAITERS, now)
            return
        waiters[req] = None  # WaitQueue.add inlined
        req.queued = True
        if deadline is not None:
            self.timers.push(deadline, TimerKind.DEADLINE, req)
        checking = self._counts[_CHECKING]
        if checking and self._idle and len(waiters) > checking:
            self._dispatch(now)  # (available ones wait beside waiters only for checks: start one)
            return
        # (room first: a pool with waiters is most often full; a check or reset running covers one)
        if (
            len(self.conns) + self._abandoned < self._max_size
            and len(waiters) > self._counts[_CONNECTING] + checking + self._counts[_RESETTING]
        ):
            self._maybe_connect(now, fill_min=False)

    def cancel(self, req: Request, now: float) -> bool:
        """The requester gave up. True if it was still waiting (it is now cancelled)."""
        if req.state is not _WAITING:
            return False
        if req.queued:
            self.wait_queue.cancel(req)
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
            req = waiters.popitem(last=False)[0]  # WaitQueue.pop_oldest inlined
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

    def release(self, conn: Conn, now: float, clean: bool = False) -> bool:
        """A lease on ``conn`` came back (the front end checked that it was out); ``clean``: the
        caller reset the connection itself (``Hooks.end`` said so), no reset is started for it.
        Returns whether there may be output (actions, events, a new earliest timer) for the
        front end to take: false only on the plain path, where the connection just goes back."""
        if clean:
            self.tally.hook_ended(False, failed=False)  # (a reset all the same, run by the caller)
        if self.observed:
            self.events.append(
                ConnectionCheckedInEvent(address=self.address, connection_id=conn.id)
            )
            self._give_back(conn, now, now, used=not clean)
            return True
        return self._give_back(conn, now, now, used=not clean)

    def _give_back(self, conn: Conn, now: float, idle_since: float, *, used: bool = True) -> bool:
        """One stream of ``conn`` came back (a lease's, or, not ``used``, a keep-alive probe's);
        if it was the last, the connection has been idle since ``idle_since`` (and is reset first
        if ``Hooks.reset`` is set and a lease used it: this one, or one back meanwhile, ``dirty``).
        Returns whether there may be output (actions, a new earliest timer) besides events."""
        conn.streams -= 1
        if conn.state is not _LEASED:
            if conn.state is _DRAINING:
                if conn.streams == 1 and conn.probe_started is not None:
                    self.probes.drop(conn)  # only its keep-alive probe left: not waited for
                if not conn.streams:
                    self._close(conn, CLOSE_WILL_CLOSE, how=_RELEASE_LAST)
                    self._dispatch(now)
                    return True
            self._fire(conn, _RELEASE if conn.streams else _RELEASE_LAST)
            return False  # draining, or closed while it was out
        if conn.streams:
            conn.dirty = conn.dirty or used
            return self._release_stream(conn, now)
        # _fire(conn, RELEASE_LAST) inlined: LEASED -> IDLE changes no counter (see _LEASED_IDLE).
        conn.state = _LEASED_IDLE
        if conn.gate != self._release_gen:
            # stale, closed pool, a service, lifetime, overflow or streams to check
            if conn.max_streams > 1:
                self.idle_set.discard_open(conn)
            else:
                self._regate(conn)  # (no lease left: plain again if its limit went back to 1)
            reason = self._perished(conn, now, check_idle=False)
            if reason is None and conn.role is _OVERFLOW and not self._waiters:
                reason = CLOSE_IDLE  # overflow connections close as soon as they are idle
            if reason is not None:
                self._close(conn, reason)
                self._dispatch(now)
                return True
            if (used or conn.dirty) and self.hooks.resets:
                conn.dirty = False
                self._start_reset(conn, now)
                return True
        conn.idle_since = idle_since
        if self._waiters:
            self._serve(self.wait_queue.pop_oldest(), conn, now)
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
            self.idle_set.discard_open(conn)  # no new leases; closed when its last lease is back
            return False
        if conn.streams >= conn.max_streams:
            return False  # its limit went down meanwhile: no new lease until use falls below it
        if self._waiters:
            self._serve(self.wait_queue.pop_oldest(), conn, now)
            return True
        self._open[conn] = None  # IdleSet.add_open inlined
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

    # ------------------------------------------------------------------ internals

    def _set_state(self, state: PoolState, generation: int) -> None:
        """The one place the pool's state and generation change, with the gate values that
        derive from them ("Gates" above)."""
        self.state = state
        self.generation = generation
        plain = not self._lb
        self._lease_gen = generation if plain and not self.clocked and state is _READY else -1
        plain_release = (
            plain and state is not _CLOSED and self._lifetime is None and not self.hooks.resets
        )
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
                self.probes.stop(conn)  # its keep-alive probe is off
        else:
            self._fire(conn, _LEASE)
        conn.streams += 1
        if conn.max_streams > 1:
            if conn.streams < conn.max_streams:
                self._open[conn] = None
            else:
                self._open.pop(conn, None)

    def _pop_idle(self, now: float) -> Conn | None:
        """Pop the most recently used available connection that is not perished, closing the
        perished ones met on the way (CMAP checkout). One that needs a check (``Hooks.check``)
        starts it and ``None`` is returned: the check, once passed, serves the oldest waiter."""
        idle = self._idle
        while idle:
            conn = idle.pop()
            reason = self._perished(conn, now)
            if reason is None:
                if self._check_after is not None and self.hooks.needs_check(conn, now):
                    self._start_check(conn, now)
                    return None
                return conn
            self._close(conn, reason)
        return None

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
        """Hand available connections to waiters, oldest first (or start their checks, one for
        each waiter not covered by a check running); then connect if needed."""
        waiters = self._waiters
        counts = self._counts
        while waiters and (self._idle or self._open) and len(waiters) > counts[_CHECKING]:
            conn = self._take(now)
            if conn is not None:
                self._serve(self.wait_queue.pop_oldest(), conn, now)
        self._maybe_connect(now, fill_min=True)
