"""Checkout, check-in and hand-off: :class:`Handout`, the collaborator of
:class:`~poolkit._core.pool.PoolCore` that leases connections, takes them back, hands them to
the oldest waiter and fails the requests that cannot be served; it also keeps the pool's state
and the gates of the fast paths. It calls only ``ConnectionLife`` and reads ``CoreState``
(``state`` says who calls whom). The state that has rules of its own is owned by the
collaborators in ``CoreState``: the wait queue (``waiters.WaitQueue``), the idle set
(``idle.IdleSet``), connect failures (``failures.ConnectFailures``), keep-alive probes
(``keepalive.Probes``), the counts (``tally.Tally``) and the timer heap (``timers.TimerHeap``).

Rules of this module
--------------------
* Each public method is one input (a checkout, a check-in, a connect result, a timer, clear,
  ready, close, cancel) and takes ``now`` from its caller. It mutates the state and appends what
  the front end must do to ``actions`` and what listeners must see to ``events``; the front end
  takes both (``take``) and carries them out outside its lock.
* Connection states change only as the table in ``records`` (``STEPS``) says: through
  ``ConnectionLife.fire``, except the two hot transitions (idle -> leased on checkout, leased ->
  idle on check-in), which ``lease_idle``, ``lease``, ``release_idle`` and ``give_back`` assign
  directly with the result read from the same table at import, and which change no counter.
  Counters of states change only in ``fire``, ``new_record`` (a birth) and
  ``Lifecycle.reset_after_fork`` (all to zero). ``total`` is ``len(conns)``; ``available`` is
  the size of the idle set; ``leased`` is what remains.
* The pool's state and generation change only in ``set_state``, which also refreshes the gates
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
  waiter whose deadline had an entry of its own (``Request.heaped``: see ``waiters``). Otherwise
  ``release_idle`` changes nothing, and ``lease_idle`` takes the full check (``_take``,
  ``lease``), which may close perished connections (actions) and stop a keep-alive timer
  (``note_stale``).
* A failed request is completed here only (``fail``): counted, told, and handed back.
* ``idle_since`` is kept only in a clocked pool (one that reads idle times), and read only while
  the connection is available (parking stamps it). ``release_idle`` parks a connection only in
  an unclocked pool (in a clocked one it hands connections to waiters only, leaving their
  ``idle_since`` as it was: a lease reads none), so it needs no ``now``.

Gates
-----
The fast paths decide "nothing to check" with one integer comparison: a connection's ``gate``
against one of the pool's three gate values.

* ``conn.gate`` (kept by ``records.regate``) is the connection's generation while it is *plain* (a
  limit of one stream, at most one in use, not overflow, neither draining nor closed), else
  ``_NO_GATE`` (-2), which no gate value equals. ``_NO_GATE`` is always safe: a plain connection
  that has it takes the full paths until it is re-gated.
* ``_lease_gen`` (``lease_idle``): the generation when the pool is ready, not load-balanced,
  not clocked (no idle time, lifetime or keep-alive to check at checkout); else -1. ``lease_idle``
  takes the newest (the oldest with ``idle_order="fifo"``), as ``_pop_idle`` does.
* ``_release_gen`` (``give_back``): the generation when the pool is not closed, not
  load-balanced, with no ``max_lifetime`` nor reset hook (nothing to check at check-in); else -1.
* ``_clean_gen`` (``release_idle_clean``, the fast check-in of a connection its caller reset,
  ``Lease.release(reset=False)``): ``_release_gen`` whatever the reset hook (the caller ran the
  reset).

* ``_adapted_gen`` (``release_adapted``, an adaptive pool's fast check-in under contention: a
  hand-off to the oldest waiter when the limit has room, its operation's time sampled): the
  generation when the pool is adaptive, not closed, not load-balanced, with no ``max_lifetime``
  nor reset hook; else -1.

  ``release_idle`` takes ``_release_gen``; in a clocked pool it only hands the connection to a
  waiter, and declines to park it (a check-in there parks the connection with its time and arms
  its timers, which ``release_idle`` does not take): under contention every check-in is a
  hand-off, the fast one.

A connection whose gate equals a gate value is current (its generation is the pool's) and plain,
and the pool needs nothing else checked: the fast path may lease it or take it back as is. -1 and
-2 never equal a generation (which starts at 0), so a pool or a connection "off the fast paths"
is one comparison too. The gate values change only in ``set_state``.

Fast paths
----------
``lease_idle``, ``release_idle``, ``request``, ``release``/``give_back`` (``_release_stream`` for
a multiplexed connection), ``serve``, ``lease``, ``_take``, ``_pop_idle`` and ``dispatch`` run
on every checkout and check-in, so they read what they need of ``CoreState`` from slots of
their own, set once (the containers and values it never replaces; what changes, such as the
pool's state and ``observed``, they read from ``CoreState``), and the idle set's and the wait
queue's containers directly, through ``_idle`` (``IdleSet.stack``), ``_open`` (``IdleSet.open``)
and ``_waiters`` (``WaitQueue.queue``), the same objects the collaborators own (never replaced,
only changed in place). They also inline the two hot transitions (``_IDLE_LEASE``,
``_LEASED_IDLE``), ``WaitQueue.pop_oldest`` in ``release_idle``, ``WaitQueue.add`` and
``ConnectFailures.circuit_open`` in ``request``, and ``IdleSet.add_open`` in ``_release_stream``:
each call saved there is a measurable share of a checkout (with the two calls of ``request``, a
checkout that waits ran several per cent slower on the core alone; ``benchmarks/bench_pool.py``
measures the pools). Everything else goes through the collaborators' methods.

The two hot transitions are the table's own, not a copy of it: ``_IDLE_LEASE`` and
``_LEASED_IDLE`` are read from ``records.STEPS`` at import, where ``_plain_step`` also asserts
that they change no counter, so assigning them is what ``ConnectionLife.fire`` would do. Calling
``fire`` in their place costs a call and a lookup on every checkout and check-in that leaves the
quick paths (measured, issue 38 point 3: ``lease`` and ``give_back`` through ``fire`` made the
core's ``request`` + ``release`` cycle 20-25 % slower, about 140 ns of 570-710 ns, in a clocked
and an unclocked pool; ``ab_pool``'s forms, which take ``lease_idle``/``release_idle``, moved
within noise, 0.99-1.01), so they stay assigned; every other transition goes through ``fire``.
"""

from __future__ import annotations

import math
from collections.abc import Collection
from typing import Any, Final

from ..errors import (
    PoolClearedError,
    PoolClosedError,
    TooManyWaitersError,
    WaitQueueTimeoutError,
)
from ..events import (
    CHECKOUT_CANCELLED,
    CHECKOUT_CIRCUIT_OPEN,
    CHECKOUT_CONNECTION_ERROR,
    CHECKOUT_POOL_CLOSED,
    CHECKOUT_TIMEOUT,
    CHECKOUT_TOO_MANY_WAITERS,
    CLOSE_ERROR,
    CLOSE_IDLE,
    CLOSE_WILL_CLOSE,
    AdaptiveLimitChangedEvent,
    ConnectionCheckedInEvent,
    ConnectionCheckedOutEvent,
    ConnectionCheckOutFailedEvent,
    ConnectionCheckOutStartedEvent,
)
from ..stats import PoolState, PoolStats
from .actions import CompleteRequest, StartCheck, StartReset
from .adaptive import GAINS
from .connection_life import ConnectionLife
from .records import (
    _BACKING_OFF,
    _CHECKING,
    _CLOSED,
    _CONNECTING,
    _DRAINING,
    _IDLE,
    _KEPT,
    _LEASE,
    _LEASED,
    _OVERFLOW,
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
    regate,
)
from .state import CoreState


def _plain_step(state: ConnState, event: ConnInput) -> ConnState:
    """The two hot transitions are inlined; the table must agree that they touch no counter."""
    step = STEPS[state][event]
    assert step is not None and not step[1], (state, event)
    return step[0]


_IDLE_LEASE: Final = _plain_step(ConnState.IDLE, ConnInput.LEASE)
_LEASED_IDLE: Final = _plain_step(ConnState.LEASED, ConnInput.RELEASE_LAST)


class Handout:
    """Checkout, check-in and hand-off; failing requests; the pool's state and the gates."""

    __slots__ = (
        "_adapted_gen",
        "_check_after",
        "_clean_gen",
        "_counts",
        "_idle",
        "_lb",
        "_lease_gen",
        "_life",
        "_lifetime",
        "_max_size",
        "_max_waiting",
        "_next_idle",
        "_open",
        "_release_gen",
        "_st",
        "_unnext",
        "_waiters",
        "actions",
        "address",
        "checkouts",
        "clocked",
        "conns",
        "events",
        "failures",
        "hooks",
        "idle_set",
        "options",
        "probes",
        "tally",
        "timers",
        "wait_queue",
    )

    def __init__(self, st: CoreState, life: ConnectionLife) -> None:
        self._st = st
        self._life = life
        # what the paths below read from ``st``, held here: never replaced there ("Fast paths"),
        # but for ``options`` and ``_max_size``, read again when a resize changes them
        # (``limits_changed``)
        self.options = st.options
        self.address = st.address
        self.clocked = st.clocked
        self._lb = st.lb
        self._lifetime = st.lifetime
        self._max_size = st.size_limit
        self._max_waiting = st.max_waiting
        self._check_after = st.check_after
        self.conns = st.conns
        self._counts = st.counts
        self.actions = st.actions
        self.events = st.events
        self.timers = st.timers
        self.tally = st.tally
        self.failures = st.failures
        self.probes = st.probes
        self.hooks = st.hooks
        self.wait_queue = st.wait_queue
        self.idle_set = st.idle_set
        self._waiters = st.wait_queue.queue
        self._idle = st.idle_set.stack
        #: the available connection a checkout takes (the idle order's), and its way back
        self._next_idle = st.idle_set.take
        self._unnext = st.idle_set.put_back
        self._open = st.idle_set.open
        self.checkouts = 0  #: checkouts served, ever (the one count the fast paths keep)
        self.set_state(st.state, st.generation)  # (the gates: "Gates" above)

    @property
    def in_use(self) -> int:
        """Connections leased or draining."""
        counts = self._counts
        return (
            len(self.conns)
            - len(self._idle)
            - counts[_CONNECTING]
            - counts[_BACKING_OFF]
            - counts[_CHECKING]
            - counts[_RESETTING]
        )

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
            conn = self._next_idle()  # the newest (oldest: FIFO): if ready, plain, current,
            if conn.gate == self._lease_gen:  # nothing to check, then fire(conn, LEASE) inlined
                conn.state = _IDLE_LEASE  # (see _IDLE_LEASE)
                conn.streams = 1
                self.checkouts += 1
                return conn
            self._unnext(conn)  # (put back where it was: the full check below decides)
        if self._st.state is not _READY or self._check_after is not None:
            return None  # (with a check hook, ``request`` decides: a check may start)
        if self._st.adaptive is not None and self.full():
            return None  # (at the adaptive limit: ``request`` queues it)
        found = self._take(now)  # the full check; closes perished ones on the way
        if found is not None:
            self.lease(found, now)
            self.checkouts += 1
        return found

    def request(self, req: Request, now: float) -> None:
        """A checkout. On return ``req`` is served, failed, or queued (``req.queued``)."""
        if self._st.observed:
            self.events.append(ConnectionCheckOutStartedEvent(address=self.address))
        state = self._st.state
        if state is not _READY:
            if state is _CLOSED:
                self.fail(req, PoolClosedError(address=self.address), CHECKOUT_POOL_CLOSED, now)
            else:
                self.fail(req, self.cleared_error(), CHECKOUT_CONNECTION_ERROR, now)
            return
        waiters = self._waiters
        if not waiters and (self._st.adaptive is None or not self.full()):
            conn = self._take(now)
            if conn is not None:
                self.serve(req, conn, now)
                return
        failing = self.failures.failing  # (ConnectFailures.circuit_open inlined)
        if failing is not None and failing.open:
            self.fail(req, self.failures.circuit_error(now), CHECKOUT_CIRCUIT_OPEN, now)
            return
        deadline = req.deadline
        if deadline is not None and deadline <= now:
            self._life.connect_for_one(now)  # (it may not wait, but the pool still grows for it)
            self.fail_timeout(req, now)
            return
        max_waiting = self._max_waiting
        if max_waiting and len(waiters) >= max_waiting:
            error = TooManyWaitersError(address=self.address, max_waiting=max_waiting)
            self.fail(req, error, CHECKOUT_TOO_MANY_WAITERS, now)
            return
        self.wait_queue.add(req)
        checking = self._counts[_CHECKING]
        if checking and (self._idle or self._open) and len(waiters) > checking:
            # (available connections and free streams wait beside waiters only for checks: this
            # one is not covered by one, so serve it or start a check for it)
            self.dispatch(now)
            return
        # (room first: a pool with waiters is most often full; a check or reset running covers one)
        if (
            len(self.conns) + self._st.abandoned < self._max_size
            and len(waiters)
            > self._counts[_CONNECTING] * self._st.expected_streams
            + checking
            + self._counts[_RESETTING]
        ):
            self._life.maybe_connect(now, fill_min=False)

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
        if self._st.observed:
            self.events.append(
                ConnectionCheckOutFailedEvent(
                    address=self.address, reason=CHECKOUT_CANCELLED, duration=now - req.started
                )
            )
        return True

    def release_idle(self, conn: Conn) -> Request | bool:
        """The fast check-in: hand ``conn`` to the oldest waiter or put it back as available at
        once, or return false.

        False means the check-in must go through :meth:`release` (a stale or multiplexed
        connection, a load-balanced pool, a closed pool; no waiter in a clocked pool) and nothing
        was changed. True means the connection is available again. A ``Request`` means it was
        handed to that waiting request, now served, which the caller must wake (nothing is
        appended to ``actions``) and the caller reports the wait it ended (``note_waits``). Needs
        no ``now``: it applies only where the time of a check-in is never read. The caller uses
        it only when nobody observes the pool (it builds no event).
        """
        if conn.gate != self._release_gen:  # (a plain connection out: leased, one stream)
            return False
        # <hand-back copy>
        waiters = self._waiters
        if waiters:
            # serve without lease: the connection stays leased, now on the waiter's behalf.
            req = waiters.popitem(last=False)[0]  # WaitQueue.pop_oldest inlined
            if req.heaped:
                self.timers.note_stale()
            req.state = _SERVED
            req.conn = conn
            self.checkouts += 1
            return req
        if self.clocked:  # parked with its time and timers: the full path
            return False
        # fire(conn, RELEASE_LAST) inlined: LEASED -> IDLE changes no counter (see _LEASED_IDLE).
        conn.streams = 0
        conn.state = _LEASED_IDLE
        self._idle.append(conn)
        return True
        # </hand-back copy>

    def release_idle_clean(self, conn: Conn) -> Request | bool:
        """:meth:`release_idle` for a connection its caller reset itself (``release(conn, now,
        clean=True)``'s fast path, ``Lease.release(reset=False)``): it applies in a pool with a
        reset hook too (the ``_clean_gen`` gate), and counts the caller's reset among the resets,
        as ``release`` does, when it takes the connection."""
        if conn.gate != self._clean_gen:
            return False
        taken = self._hand_back(conn)
        if taken is not False:
            self.tally.hook_ended(False, failed=False)  # (a reset all the same, run by the caller)
        return taken

    def _hand_back(self, conn: Conn) -> Request | bool:
        """What the fast check-ins do once the gate let ``conn`` through (``release_idle``
        holds a copy inlined: ``tools/inline_copies.py``)."""
        # <hand-back>
        waiters = self._waiters
        if waiters:
            # serve without lease: the connection stays leased, now on the waiter's behalf.
            req = waiters.popitem(last=False)[0]  # WaitQueue.pop_oldest inlined
            if req.heaped:
                self.timers.note_stale()
            req.state = _SERVED
            req.conn = conn
            self.checkouts += 1
            return req
        if self.clocked:  # parked with its time and timers: the full path
            return False
        # fire(conn, RELEASE_LAST) inlined: LEASED -> IDLE changes no counter (see _LEASED_IDLE).
        conn.streams = 0
        conn.state = _LEASED_IDLE
        self._idle.append(conn)
        return True
        # </hand-back>

    def note_waits(self, seconds: Collection[float]) -> None:
        """Requests handed connections by ``release_idle`` had waited ``seconds`` (their front
        end measures each, from ``Request.started``, and reports them in batches)."""
        self.tally.waited_all(seconds)

    def release(self, conn: Conn, now: float, clean: bool = False) -> bool:
        """A lease on ``conn`` came back (the front end checked that it was out); ``clean``: the
        caller reset the connection itself (``Hooks.end`` said so), no reset is started for it.
        Returns whether there may be output (actions, events, a new earliest timer) for the
        front end to take: false only on the plain path, where the connection just goes back."""
        if clean:
            self.tally.hook_ended(False, failed=False)  # (a reset all the same, run by the caller)
        observed = self._st.observed
        if observed:
            self.events.append(
                ConnectionCheckedInEvent(address=self.address, connection_id=conn.id)
            )
        if self._st.adaptive is not None:
            return self._adapted(conn, now, clean)
        if observed:
            self.give_back(conn, now, now, used=not clean)
            return True
        return self.give_back(conn, now, now, used=not clean)

    def release_adapted(self, conn: Conn, now: float) -> Request | None:
        """An adaptive pool's fast check-in, under contention: hand ``conn`` to the oldest waiter
        when the limit has room for it (the one coming back counted), restamped (the waiter's
        operation starts ``now``), with the operation's time a sample of the limit; return that
        request, which the caller wakes (it reports the wait it ended, as after
        :meth:`release_idle`). None (nothing changed) where the check-in must take
        :meth:`release`: nobody waiting, or no room under the limit (an adaptive pool is clocked:
        a connection parks with its time and timers), or the ``_adapted_gen`` gate (a stale,
        multiplexed or overflow connection, a load-balanced or closed pool, a lifetime or a
        reset to check). A round that ends here may leave output (the limit raised serves
        waiters, connections shed, a change reported): the caller takes it when ``actions`` or
        ``events`` hold any, or the timers are dirty. Unobserved pools only (it builds no
        check-in event)."""
        if conn.gate != self._adapted_gen:  # (a plain connection out: leased, one stream)
            return None
        adaptive = self._st.adaptive
        assert adaptive is not None
        waiters = self._waiters
        in_use = self.in_use  # (this one's included)
        if not waiters or in_use > adaptive.limit:
            return None
        # served without lease: the connection stays leased, now on the waiter's behalf
        req = self.wait_queue.pop_oldest()
        req.state = _SERVED
        req.conn = conn
        self.checkouts += 1
        op_time = now - conn.leased_at
        conn.leased_at = now
        before = adaptive.limit
        if adaptive.sample(op_time, now, True, in_use):
            self._round_ended(now, before)
        return req

    def _adapted(self, conn: Conn, now: float, clean: bool) -> bool:
        """``release``'s giving back in an adaptive pool: the operation's time is a sample of the
        limit (a single-stream connection's: a multiplexed one's streams share its
        ``leased_at``); a limit raised serves waiters at once."""
        adaptive = self._st.adaptive
        assert adaptive is not None
        sampled = conn.max_streams == 1 and conn.state is _LEASED
        op_time = now - conn.leased_at  # (before give_back: a waiter served restamps it)
        queued = bool(self._waiters)
        in_use = self.in_use  # (this one's included)
        self.give_back(conn, now, now, used=not clean)
        before = adaptive.limit
        if sampled and adaptive.sample(op_time, now, queued, in_use):  # (a round ended: decided)
            self._round_ended(now, before)
        return True

    def _round_ended(self, now: float, before: int) -> None:
        """An adaptive round ended at a check-in (the limit was ``before``): a limit raised
        serves waiters, surplus connections are shed, a change is reported."""
        adaptive = self._st.adaptive
        assert adaptive is not None
        if adaptive.limit > before:
            self.dispatch(now)  # (raised: waiters get connections; lowered: none taken back)
        self._shed(now)
        previous = adaptive.take_report()
        if previous is not None:
            est = adaptive.estimate
            assert est is not None
            self.events.append(  # (observed or not: the front end logs it at INFO)
                AdaptiveLimitChangedEvent(
                    address=self.address,
                    limit=adaptive.limit,
                    previous=previous,
                    knee=est.knee,
                    elasticity=est.elasticity,
                    share=est.share,
                    op_time=est.op_time,
                    base_op_time=est.base_op_time,
                    queued=est.queued,
                )
            )

    def _shed(self, now: float) -> None:
        """At an adaptive round's end: close the available connections beyond what the next
        probe could use (``Adaptive.shed_after``), longest parked first."""
        adaptive = self._st.adaptive
        after = self._st.options.adaptive.shed_after if self._st.options.adaptive else None
        if adaptive is None or after is None or adaptive.estimate is None:
            return
        est = adaptive.estimate
        probe = math.ceil(min(est.knee, est.share) * GAINS[0]) + 1
        excess = len(self.conns) - max(probe, adaptive.limit, adaptive.floor)
        if excess <= 0 or not self._idle:
            return

        def surplus(conn: Conn) -> str | None:
            nonlocal excess
            if excess > 0 and conn.role is not _KEPT and now - conn.idle_since >= after:
                excess -= 1
                return CLOSE_IDLE
            return None

        self.idle_set.take_if(surplus, self._life.close)

    def over_limit(self) -> bool:
        """Whether the pool holds more connections than ``max_size`` (connects given up on
        included): only after a resize lowered it, until what is beyond it comes back."""
        return len(self.conns) + self._st.abandoned > self._max_size

    def beyond_limit(self, conn: Conn) -> bool:
        """Whether ``conn`` takes no new lease because the pool is over ``max_size`` (a resize
        lowered it) and it is an overflow connection: closed when its last lease is back."""
        return conn.role is _OVERFLOW and self.over_limit()

    def surplus(self, conn: Conn) -> bool:
        """Whether ``conn``, back from its last lease, just made, or out of its check or reset,
        closes instead of serving a waiter or being parked: an overflow connection with nobody
        waiting for it, or while the pool is over ``max_size`` (a resize lowered it: the waiters
        are served by the connections within it)."""
        return conn.role is _OVERFLOW and (not self._waiters or self.over_limit())

    def limits_changed(self) -> None:
        """``Lifecycle.resize`` changed the options and ``max_size``: what is held here of them
        is read again."""
        self.options = self._st.options
        self._max_size = self._st.size_limit

    def full(self) -> bool:
        """Whether the connections in use reached the adaptive limit (only asked when the pool
        has one)."""
        adaptive = self._st.adaptive
        return adaptive is not None and self.in_use >= adaptive.limit

    def room_for_held(self) -> bool:
        """Whether a connection held in hand (established, or back from its check, reset or
        lease, and not yet parked: ``in_use`` counts it) may serve a waiter under the adaptive
        limit (always, without one)."""
        adaptive = self._st.adaptive
        return adaptive is None or self.in_use <= adaptive.limit

    def give_back(self, conn: Conn, now: float, idle_since: float, *, used: bool = True) -> bool:
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
                    self._life.close(conn, CLOSE_WILL_CLOSE, how=_RELEASE_LAST)
                    self.dispatch(now)
                    return True
            self._life.fire(conn, _RELEASE if conn.streams else _RELEASE_LAST)
            return False  # draining, or closed while it was out
        if conn.streams:
            conn.dirty = conn.dirty or used
            return self._release_stream(conn, now)
        # fire(conn, RELEASE_LAST) inlined: LEASED -> IDLE changes no counter (see _LEASED_IDLE).
        conn.state = _LEASED_IDLE
        if conn.gate != self._release_gen:
            # stale, closed pool, a service, lifetime, overflow or streams to check
            if conn.max_streams > 1:
                self.idle_set.discard_open(conn)
            else:
                regate(conn)  # (no lease left: plain again if its limit went back to 1)
            reason = self._life.perished(conn, now, check_idle=False)
            if reason is None and self.surplus(conn):
                reason = CLOSE_IDLE  # overflow connections close as soon as they are idle
            if reason is not None:
                self._life.close(conn, reason)
                self.dispatch(now)
                return True
            if (used or conn.dirty) and self.hooks.resets:
                conn.dirty = False
                self._start_reset(conn, now)
                return True
        conn.idle_since = idle_since
        if self._waiters and (self._st.adaptive is None or self.room_for_held()):
            self.serve(self.wait_queue.pop_oldest(), conn, now)
            return True
        self._idle.append(conn)
        if self.clocked:
            return self._parked(conn, now)
        return False

    def _release_stream(self, conn: Conn, now: float) -> bool:
        """One stream of a multiplexed connection came back and others are still in use."""
        self._life.fire(conn, _RELEASE)
        if conn.streams == 1 and conn.probe_started is not None:
            conn.idle_since = now  # only the keep-alive probe is left: idle from now
        if self._life.perished(conn, now, check_idle=False) is not None:
            self.idle_set.discard_open(conn)  # no new leases; closed when its last lease is back
            return False
        if conn.streams >= conn.max_streams:
            return False  # its limit went down meanwhile: no new lease until use falls below it
        if self.beyond_limit(conn):
            return False  # beyond max_size (a resize): no new lease; closed when its last is back
        if self._waiters:
            self.serve(self.wait_queue.pop_oldest(), conn, now)
            return True
        self._open[conn] = None  # IdleSet.add_open inlined
        return False

    def discard(self, conn: Conn, now: float, error: BaseException | None = None) -> None:
        """A lease on ``conn`` came back to be closed (reason ``error``)."""
        if self._st.observed:
            self.events.append(
                ConnectionCheckedInEvent(address=self.address, connection_id=conn.id)
            )
        conn.streams -= 1
        if conn.state is _S_CLOSED:
            self._life.fire(conn, _RELEASE if conn.streams else _RELEASE_LAST)
            return
        self._life.close(conn, CLOSE_ERROR, error)
        self.dispatch(now)

    def set_state(self, state: PoolState, generation: int) -> None:
        """The one place the pool's state and generation change, with the gate values that
        derive from them ("Gates" above)."""
        self._st.state = state
        self._st.generation = generation
        adaptive = self._st.adaptive is not None
        plain = not self._lb and not adaptive
        quick = plain and not self.clocked and state is _READY
        self._lease_gen = generation if quick else -1
        # (nothing to check at a check-in: not load-balanced, not closed, no lifetime)
        unchecked = not self._lb and state is not _CLOSED and self._lifetime is None
        self._clean_gen = generation if unchecked and not adaptive else -1
        unreset = unchecked and not self.hooks.resets
        self._release_gen = generation if unreset and not adaptive else -1
        self._adapted_gen = generation if unreset and adaptive else -1

    def _take(self, now: float) -> Conn | None:
        """A connection to lease now, or ``None``: a multiplexed one in use with a stream free
        first, then the most recently used available one (closing perished ones on the way)."""
        open_ = self._open
        while open_:
            conn = next(iter(open_))
            if self._life.perished(conn, now, check_idle=False) is None:
                return conn
            del open_[conn]  # no new leases; closed when its last lease comes back
        return self._pop_idle(now)

    def lease(self, conn: Conn, now: float) -> None:
        """One more lease on ``conn`` (idle, or multiplexed with a stream free), from ``now``
        (an adaptive pool's operation time starts there)."""
        conn.leased_at = now
        if conn.state is _IDLE:
            conn.state = _IDLE_LEASE  # fire(conn, LEASE) inlined: no counter (see _IDLE_LEASE)
            if conn.ka_timer is not None:  # (no call on the usual path)
                self.probes.stop(conn)  # its keep-alive probe is off
        else:
            self._life.fire(conn, _LEASE)
        conn.streams += 1
        if conn.max_streams > 1:
            if conn.streams < conn.max_streams:
                self._open[conn] = None
            else:
                self._open.pop(conn, None)

    def _pop_idle(self, now: float) -> Conn | None:
        """Pop the most recently used available connection (the longest parked with
        ``idle_order="fifo"``) that is not perished, closing the perished ones met on the way
        (CMAP checkout). One that needs a check (``Hooks.check``) starts it and ``None`` is
        returned: the check, once passed, serves the oldest waiter."""
        idle = self._idle
        take = self._next_idle
        while idle:
            conn = take()
            reason = self._life.perished(conn, now)
            if reason is None:
                if self._check_after is not None and self.hooks.needs_check(conn, now):
                    self._start_check(conn, now)
                    return None
                return conn
            self._life.close(conn, reason)
        return None

    def serve(self, req: Request, conn: Conn, now: float) -> None:
        self.lease(conn, now)
        req.state = _SERVED
        req.conn = conn
        self.checkouts += 1
        if self._st.observed:
            self.events.append(
                ConnectionCheckedOutEvent(
                    address=self.address, connection_id=conn.id, duration=now - req.started
                )
            )
        if req.queued:
            self.tally.waited(now - req.started)
            self.actions.append(CompleteRequest(req))

    def dispatch(self, now: float) -> None:
        """Hand available connections to waiters, oldest first (or start their checks, one for
        each waiter not covered by a check running); then connect if needed."""
        waiters = self._waiters
        counts = self._counts
        while waiters and (self._idle or self._open) and len(waiters) > counts[_CHECKING]:
            if self._st.adaptive is not None and self.full():
                break
            conn = self._take(now)
            if conn is not None:
                self.serve(self.wait_queue.pop_oldest(), conn, now)
        self._life.maybe_connect(now, fill_min=True)

    def stats(self) -> PoolStats:
        """The statistics now (O(connections))."""
        return self.tally.snapshot(
            state=self._st.state,
            generation=self._st.generation,
            conns=self.conns.values(),
            counts=self._counts,
            available=len(self._idle),
            in_use=self.in_use,
            waiting=len(self._waiters),
            abandoned=self._st.abandoned,
            checkouts=self.checkouts,
            circuit_open=self.failures.circuit_open,
            adaptive=None if self._st.adaptive is None else self._st.adaptive.stats(),
        )

    def push_idle(self, conn: Conn, now: float) -> None:
        """Park ``conn`` (a new connection): available from ``now``."""
        self.idle_set.push(conn)
        if self.clocked:
            self._parked(conn, now)

    def _parked(self, conn: Conn, now: float) -> bool:
        """``conn`` was just made available in a clocked pool: arm its keep-alive probe and the
        idle sweep for it. Returns whether a timer was pushed."""
        pushed = False
        if self.probes.options is not None:
            self.probes.arm(conn, now)
            pushed = True
        return self.idle_set.parked(conn) or pushed

    def fail(self, req: Request, error: BaseException, reason: str, now: float) -> None:
        req.state = RequestState.FAILED
        req.error = error
        tally = self.tally
        tally.count(tally.failed, reason)
        if req.queued:
            tally.waited(now - req.started)
        if self._st.observed:
            self.events.append(
                ConnectionCheckOutFailedEvent(
                    address=self.address, reason=reason, duration=now - req.started, error=error
                )
            )
        if req.queued:
            self.actions.append(CompleteRequest(req))

    def fail_timeout(self, req: Request, now: float) -> None:
        error = WaitQueueTimeoutError(address=self.address, waited=now - req.started, stats=None)
        self.fail(req, error, CHECKOUT_TIMEOUT, now)
        error.stats = self.stats()
        error.explain(self.options.max_size)

    def fail_all_waiters(self, now: float, make_error: Any, reason: str) -> None:
        queue = self.wait_queue
        while queue:
            self.fail(queue.pop_oldest(), make_error(), reason, now)

    def cleared_error(self) -> PoolClearedError:
        return PoolClearedError(address=self.address, cause=self._st.clear_cause)

    def _start_check(self, conn: Conn, now: float) -> None:
        """The available ``conn`` (off the idle set) is checked before it is handed out."""
        self.begin_check(conn, now)
        self.actions.append(StartCheck(conn))

    def begin_check(self, conn: Conn, now: float) -> None:
        """``conn`` (available, off the idle set) is CHECKING from ``now``, timed by
        ``HookRuns``; who runs the check is the caller's to say (an action, or the caller)."""
        if conn.ka_timer is not None:
            self.probes.stop(conn)  # not idle while checked: no keep-alive probe
        self._life.fire(conn, ConnInput.CHECK)
        self.hooks.start(conn, now)

    def _start_reset(self, conn: Conn, now: float) -> None:
        """``conn`` came back from its last lease (now IDLE, off the idle set): reset it before
        it is available again."""
        self._life.fire(conn, ConnInput.RESET)
        self.hooks.start(conn, now)
        self.actions.append(StartReset(conn))
