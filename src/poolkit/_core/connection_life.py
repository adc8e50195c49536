"""A connection's life in the pool: made (and retried), given a role (``Roles``), closed; its state
transitions and its gate. :class:`ConnectionLife` is the lowest of the collaborators of
:class:`~poolkit._core.pool.PoolCore` that decide: it reads and writes ``CoreState`` and calls
no other (``state`` says who calls whom).

Rules of this module
--------------------
* Same as ``handout``: pure, ``now`` from the caller, output only through ``actions``/``events``.
* A connection's state changes in ``fire``, which looks the move up in ``records.STEPS`` (the one
  table), except on the two hot transitions of ``handout``'s fast paths (read from that table).
  Counters of states change only in ``fire`` and at a record's birth (``new_record``), and start
  again from zero at a fork.
* A record is counted from its birth (``new_record``) to its close (``close``, or ``drop``
  for a backing-off slot never announced): ``conns``, the state counters and the role counters
  change together, here.
* A connection that closes frees its role for the next one down (``Roles.promote``) before
  anything new is made.
* After a record's birth ``Conn.gate`` changes only in ``records.regate`` (what a gate is:
  "Gates" in ``handout``).
* A connect starts only while the pool is ready, under ``max_size`` and ``max_connecting``, for a
  waiter not covered by the connects, checks and resets in flight (``maybe_connect``) or to reach
  ``min_size``; while connects fail with ``connect_retry`` only the one retried attempt may run.
* A connect the pool gave up on while its function runs (a clear's interrupt, close, the connect
  timeout) is *abandoned*: its record is closed, but it still counts against ``max_size`` and
  ``max_connecting`` (``_abandoned``) until its function returns (``connected`` or
  ``connect_failed`` with ``returned``), so that a slow server never sees more connects than the
  limits allow. Not for ever: a connect whose function has not returned ``lost_after()`` after
  it started (10 times ``connect_timeout``, at least a minute) is *lost* (``connect_lost``): it
  counts no more (a ``ConnectLostEvent``, logged as a warning), and what it may still return is
  closed. A slow server still sees no more connects than the limits allow; a function that never
  returns no longer holds a slot of the pool for good.
"""

from __future__ import annotations

from ..events import (
    CLOSE_IDLE,
    CLOSE_LIFETIME,
    CLOSE_POOL_CLOSED,
    CLOSE_STALE,
    ConnectionClosedEvent,
    ConnectionCreatedEvent,
    ConnectLostEvent,
)
from .actions import CloseConnection, StartConnect
from .idle import idle_expired
from .records import (
    _CHECKING,
    _CLOSED,
    _CONNECTING,
    _KEPT,
    _READY,
    _RESETTING,
    STEPS,
    Conn,
    ConnInput,
    ConnState,
    InvalidTransition,
    regate,
)
from .state import CoreState
from .timers import TimerKind

#: an abandoned connect is lost (counts against the limits no more) this long after it started,
#: at the least, and at least this many times ``connect_timeout``
LOST_AFTER_MIN = 60.0
LOST_AFTER_TIMEOUTS = 10


def lost_after(connect_timeout: float | None) -> float:
    """How long after its start an abandoned connect that has not returned is given up for good."""
    if connect_timeout is None:
        return LOST_AFTER_MIN
    return max(LOST_AFTER_MIN, LOST_AFTER_TIMEOUTS * connect_timeout)


class ConnectionLife:
    """A connection's life: records, transitions, roles, connects and closes."""

    __slots__ = ("_st",)

    def __init__(self, st: CoreState) -> None:
        self._st = st

    def fire(self, conn: Conn, event: ConnInput) -> ConnState:
        """Move ``conn`` on ``event`` as the table says (and keep the state counters)."""
        old = conn.state
        step = STEPS[old][event]
        if step is None:
            raise InvalidTransition(conn.id, old, event)
        new, recount = step
        conn.state = new
        if recount:
            counts = self._st.counts
            counts[old] -= 1
            counts[new] += 1
        return new

    def maybe_connect(self, now: float, *, fill_min: bool) -> None:
        st = self._st
        if st.state is not _READY:
            return
        opts = st.options
        counts = st.counts
        cap = st.connect_cap()
        failing = st.failures.failing
        if failing is not None:
            # connect_retry: no connect but the one retried (or, none planned, the next needed)
            covered = (
                counts[_CONNECTING] * st.expected_streams + counts[_CHECKING] + counts[_RESETTING]
            )
            if (
                failing.pending is None
                and counts[_CONNECTING] + st.abandoned < opts.max_connecting
                and len(st.conns) + st.abandoned < cap
                and ((fill_min and len(st.conns) < opts.min_size) or len(st.wait_queue) > covered)
            ):
                st.failures.attempt(self._start_connect(now))
            return
        while (
            counts[_CONNECTING] + st.abandoned < opts.max_connecting
            and len(st.conns) + st.abandoned < cap
        ):
            missing = opts.min_size - len(st.conns) if fill_min else 0
            covered = (
                counts[_CONNECTING] * st.expected_streams + counts[_CHECKING] + counts[_RESETTING]
            )
            if missing <= 0 and len(st.wait_queue) <= covered:
                return
            self._start_connect(now)

    def connect_for_one(self, now: float) -> None:
        """A checkout that may not wait (its deadline is now) found nothing to take: start the
        connect it would have waited for, counted as one waiter more than the queue holds, if
        the limits allow and the circuit is closed. Its result becomes available to the next
        checkout: a pool tried only with ``timeout=0`` still connects."""
        st = self._st
        if st.state is not _READY:
            return
        counts = st.counts
        if (
            counts[_CONNECTING] + st.abandoned >= st.options.max_connecting
            or len(st.conns) + st.abandoned >= st.connect_cap()
            or len(st.wait_queue) + 1
            <= counts[_CONNECTING] * st.expected_streams + counts[_CHECKING] + counts[_RESETTING]
        ):
            return
        failing = st.failures.failing
        if failing is None:
            self._start_connect(now)
        elif failing.pending is None and not failing.open:
            st.failures.attempt(self._start_connect(now))

    def _start_connect(self, now: float) -> Conn:
        conn = self.new_record(now, _CONNECTING)
        self.begin_connect(conn, now)
        return conn

    def new_record(self, now: float, state: ConnState) -> Conn:
        """A new connection record (connecting, or a backing-off slot), counted."""
        st = self._st
        role = st.roles.new_role(len(st.conns))
        conn = Conn(st.next_id, st.generation, role, now, state)
        st.next_id += 1
        st.roles.count(role, 1)
        regate(conn)
        st.conns[conn.id] = conn
        st.counts[state] += 1
        return conn

    def begin_connect(self, conn: Conn, now: float) -> None:
        """``conn`` is connecting from ``now``: announce it and ask the front end to connect."""
        st = self._st
        lifetime = st.lifetime
        if lifetime is not None:
            conn.expires = now + lifetime * (1.0 - st.options.max_lifetime_jitter * st.rand())
        st.tally.connect_attempts += 1
        if st.observed:
            st.events.append(ConnectionCreatedEvent(address=st.address, connection_id=conn.id))
        timeout = st.options.connect_timeout
        if timeout is not None:
            st.timers.push(now + timeout, TimerKind.CONNECT_TIMEOUT, conn)
        st.actions.append(StartConnect(conn))

    def _forget(self, conn: Conn, how: ConnInput) -> None:
        """Take ``conn`` out of every count (``how`` leads it to CLOSED); what else a close does is
        the caller's."""
        st = self._st
        self.fire(conn, how)
        regate(conn)  # closed: no gate
        st.failures.forget(conn)  # (the attempt retried, if it was it: plan another)
        del st.conns[conn.id]
        if conn.max_streams > 1:
            st.idle_set.discard_open(conn)
        st.roles.count(conn.role, -1)

    def drop(self, slot: Conn) -> None:
        """Forget a backing-off slot (never announced to the front end or listeners)."""
        st = self._st
        self._forget(slot, ConnInput.CLOSE)
        if st.state is not _CLOSED:
            st.roles.promote(slot.role, st.conns.values())

    def close(
        self,
        conn: Conn,
        reason: str,
        error: BaseException | None = None,
        how: ConnInput = ConnInput.CLOSE,
    ) -> None:
        """Close ``conn`` for ``reason``. An available connection must already be off the idle
        set. A pending one is abandoned: it counts against the limits until its function
        returns."""
        st = self._st
        pending = conn.state is _CONNECTING
        if conn.hook_started is not None:
            st.hooks.end(conn)  # a check or reset running: its result will be ignored
        self._forget(conn, how)
        if pending:
            conn.abandoned = True
            st.abandoned += 1
            if st.state is not _CLOSED:
                when = conn.created_at + lost_after(st.options.connect_timeout)
                st.timers.push(when, TimerKind.CONNECT_LOST, conn)
        if st.lb and not pending:  # (established: counted in its service since `connected`)
            entry = st.service_generations.get(conn.service_id)
            if entry is not None:
                entry[1] -= 1
                if entry[1] == 0:
                    del st.service_generations[conn.service_id]
        conn.close_reason = reason
        st.tally.count(st.tally.closed, reason)
        if st.observed:
            st.events.append(
                ConnectionClosedEvent(
                    address=st.address, connection_id=conn.id, reason=reason, error=error
                )
            )
        st.actions.append(CloseConnection(conn, conn.connection, pending))
        if st.state is not _CLOSED:
            st.roles.promote(conn.role, st.conns.values())

    def connect_returned(self, conn: Conn, now: float) -> None:
        """The connect function of ``conn``, closed already, returned: if it was abandoned it counts
        against the limits no more, and the room it leaves may start a connect."""
        if conn.abandoned:
            conn.abandoned = False
            self._st.abandoned -= 1
            self.maybe_connect(now, fill_min=True)

    def connect_lost(self, conn: Conn, now: float) -> None:
        """``conn``'s connect, abandoned, has not returned in ``lost_after``: it counts against the
        limits no more (its result, if it ever comes, is closed all the same)."""
        st = self._st
        if not conn.abandoned or st.state is _CLOSED:
            return
        conn.abandoned = False
        st.abandoned -= 1
        st.events.append(  # (observed or not: the front end logs it as a warning)
            ConnectLostEvent(
                address=st.address, connection_id=conn.id, running_for=now - conn.created_at
            )
        )
        self.maybe_connect(now, fill_min=True)

    def perished(self, conn: Conn, now: float, *, check_idle: bool = True) -> str | None:
        """Why ``conn`` must not be used any more, or ``None`` (CMAP "perished")."""
        st = self._st
        if st.state is _CLOSED:
            return CLOSE_POOL_CLOSED
        if not st.lb:
            if conn.generation != st.generation:
                return CLOSE_STALE
        else:
            entry = st.service_generations.get(conn.service_id)
            if entry is None or conn.generation != entry[0]:
                return CLOSE_STALE
        if conn.expires <= now:
            return CLOSE_LIFETIME
        if check_idle and conn.role is not _KEPT:
            max_idle = st.max_idle
            if max_idle is not None and idle_expired(conn.idle_since, max_idle, now):
                return CLOSE_IDLE
        return None
