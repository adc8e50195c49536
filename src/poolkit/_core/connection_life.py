"""A connection's life in the pool: made (and retried), given a role (``Roles``), closed; its state
transitions and its gate. :class:`ConnectionLife` is the lowest of the classes that make up
:class:`~poolkit._core.pool.PoolCore` (see ``fields``).

Rules of this module
--------------------
* Same as ``pool``: pure, ``now`` from the caller, output only through ``actions``/``events``.
* A connection's state changes in ``_fire`` (the table in ``records``), except on the two hot
  transitions of ``pool``'s fast paths. Counters of states change only in ``_fire`` and at a
  record's birth (``_new_record``), and start again from zero at a fork.
* A record is counted from its birth (``_new_record``) to its close (``_close``, or ``_drop``
  for a backing-off slot never announced): ``conns``, the state counters and the role counters
  change together, here.
* A connection that closes frees its role for the next one down (``Roles.promote``) before
  anything new is made.
* After a record's birth ``Conn.gate`` changes only in ``_regate`` (what a gate is: "Gates" in
  ``pool``).
* A connect starts only while the pool is ready, under ``max_size`` and ``max_connecting``, for a
  waiter not covered by the connects, checks and resets in flight (``_maybe_connect``) or to reach
  ``min_size``; while connects fail with ``connect_retry`` only the one retried attempt may run.
* A connect the pool gave up on while its function runs (a clear's interrupt, close, the connect
  timeout) is *abandoned*: its record is closed, but it still counts against ``max_size`` and
  ``max_connecting`` (``_abandoned``) until its function returns (``connected`` or
  ``connect_failed`` with ``returned``), so that a slow server never sees more connects than the
  limits allow. Not for ever: a connect whose function has not returned ``lost_after()`` after
  it started (10 times ``connect_timeout``, at least a minute) is *lost* (``_connect_lost``): it
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
from .fields import CoreFields
from .idle import idle_expired
from .records import (
    _CHECKING,
    _CLOSED,
    _CONNECTING,
    _DRAINING,
    _KEPT,
    _NO_GATE,
    _OVERFLOW,
    _READY,
    _RESETTING,
    _S_CLOSED,
    STEPS,
    Conn,
    ConnInput,
    ConnState,
    InvalidTransition,
)
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


class ConnectionLife(CoreFields):
    """A connection's life: records, transitions, gates, roles, connects and closes."""

    __slots__ = ()

    def _fire(self, conn: Conn, event: ConnInput) -> ConnState:
        """Move ``conn`` on ``event`` as the table says (and keep the state counters)."""
        old = conn.state
        step = STEPS[old][event]
        if step is None:
            raise InvalidTransition(conn.id, old, event)
        new, recount = step
        conn.state = new
        if recount:
            counts = self._counts
            counts[old] -= 1
            counts[new] += 1
        return new

    def _regate(self, conn: Conn) -> None:
        """Refresh ``conn.gate`` after its generation, role, stream limit or state changed (see
        "Gates" in ``pool``)."""
        plain = (
            conn.max_streams == 1
            and conn.streams <= 1  # (a limit lowered to 1 under two leases: not yet)
            and conn.role is not _OVERFLOW
            and conn.state is not _DRAINING
            and conn.state is not _S_CLOSED
        )
        conn.gate = conn.generation if plain else _NO_GATE

    def _maybe_connect(self, now: float, *, fill_min: bool) -> None:
        if self.state is not _READY:
            return
        opts = self.options
        counts = self._counts
        failing = self.failures.failing
        if failing is not None:
            # connect_retry: no connect but the one retried (or, none planned, the next needed)
            covered = counts[_CONNECTING] + counts[_CHECKING] + counts[_RESETTING]
            if (
                failing.pending is None
                and counts[_CONNECTING] + self._abandoned < opts.max_connecting
                and len(self.conns) + self._abandoned < self._max_size
                and (
                    (fill_min and len(self.conns) < opts.min_size) or len(self.wait_queue) > covered
                )
            ):
                self.failures.attempt(self._start_connect(now))
            return
        while (
            counts[_CONNECTING] + self._abandoned < opts.max_connecting
            and len(self.conns) + self._abandoned < self._max_size
        ):
            missing = opts.min_size - len(self.conns) if fill_min else 0
            covered = counts[_CONNECTING] + counts[_CHECKING] + counts[_RESETTING]
            if missing <= 0 and len(self.wait_queue) <= covered:
                return
            self._start_connect(now)

    def _connect_for_one(self, now: float) -> None:
        """A checkout that may not wait (its deadline is now) found nothing to take: start the
        connect it would have waited for, counted as one waiter more than the queue holds, if
        the limits allow and the circuit is closed. Its result becomes available to the next
        checkout: a pool tried only with ``timeout=0`` still connects."""
        if self.state is not _READY:
            return
        counts = self._counts
        if (
            counts[_CONNECTING] + self._abandoned >= self.options.max_connecting
            or len(self.conns) + self._abandoned >= self._max_size
            or len(self.wait_queue) + 1
            <= counts[_CONNECTING] + counts[_CHECKING] + counts[_RESETTING]
        ):
            return
        failing = self.failures.failing
        if failing is None:
            self._start_connect(now)
        elif failing.pending is None and not failing.open:
            self.failures.attempt(self._start_connect(now))

    def _start_connect(self, now: float) -> Conn:
        conn = self._new_record(now, _CONNECTING)
        self._begin_connect(conn, now)
        return conn

    def _new_record(self, now: float, state: ConnState) -> Conn:
        """A new connection record (connecting, or a backing-off slot), counted."""
        role = self.roles.new_role(len(self.conns))
        conn = Conn(self._next_id, self.generation, role, now, state)
        self._next_id += 1
        self.roles.count(role, 1)
        self._regate(conn)
        self.conns[conn.id] = conn
        self._counts[state] += 1
        return conn

    def _begin_connect(self, conn: Conn, now: float) -> None:
        """``conn`` is connecting from ``now``: announce it and ask the front end to connect."""
        lifetime = self._lifetime
        if lifetime is not None:
            conn.expires = now + lifetime * (1.0 - self.options.max_lifetime_jitter * self._rand())
        self.tally.connect_attempts += 1
        if self.observed:
            self.events.append(ConnectionCreatedEvent(address=self.address, connection_id=conn.id))
        timeout = self.options.connect_timeout
        if timeout is not None:
            self.timers.push(now + timeout, TimerKind.CONNECT_TIMEOUT, conn)
        self.actions.append(StartConnect(conn))

    def _forget(self, conn: Conn, how: ConnInput) -> None:
        """Take ``conn`` out of every count (``how`` leads it to CLOSED); what else a close does is
        the caller's."""
        self._fire(conn, how)
        self._regate(conn)  # closed: no gate
        self.failures.forget(conn)  # (the attempt retried, if it was it: plan another)
        del self.conns[conn.id]
        if conn.max_streams > 1:
            self.idle_set.discard_open(conn)
        self.roles.count(conn.role, -1)

    def _drop(self, slot: Conn) -> None:
        """Forget a backing-off slot (never announced to the front end or listeners)."""
        self._forget(slot, ConnInput.CLOSE)
        if self.state is not _CLOSED:
            self.roles.promote(slot.role, self.conns.values())

    def _close(
        self,
        conn: Conn,
        reason: str,
        error: BaseException | None = None,
        how: ConnInput = ConnInput.CLOSE,
    ) -> None:
        """Close ``conn`` for ``reason``. An available connection must already be off the idle
        set. A pending one is abandoned: it counts against the limits until its function
        returns."""
        pending = conn.state is _CONNECTING
        if conn.hook_started is not None:
            self.hooks.end(conn)  # a check or reset running: its result will be ignored
        self._forget(conn, how)
        if pending:
            conn.abandoned = True
            self._abandoned += 1
            if self.state is not _CLOSED:
                when = conn.created_at + lost_after(self.options.connect_timeout)
                self.timers.push(when, TimerKind.CONNECT_LOST, conn)
        if self._lb and not pending:  # (established: counted in its service since `connected`)
            entry = self.service_generations.get(conn.service_id)
            if entry is not None:
                entry[1] -= 1
                if entry[1] == 0:
                    del self.service_generations[conn.service_id]
        conn.close_reason = reason
        self.tally.count(self.tally.closed, reason)
        if self.observed:
            self.events.append(
                ConnectionClosedEvent(
                    address=self.address, connection_id=conn.id, reason=reason, error=error
                )
            )
        self.actions.append(CloseConnection(conn, conn.connection, pending))
        if self.state is not _CLOSED:
            self.roles.promote(conn.role, self.conns.values())

    def _connect_returned(self, conn: Conn, now: float) -> None:
        """The connect function of ``conn``, closed already, returned: if it was abandoned it counts
        against the limits no more, and the room it leaves may start a connect."""
        if conn.abandoned:
            conn.abandoned = False
            self._abandoned -= 1
            self._maybe_connect(now, fill_min=True)

    def _connect_lost(self, conn: Conn, now: float) -> None:
        """``conn``'s connect, abandoned, has not returned in ``lost_after``: it counts against the
        limits no more (its result, if it ever comes, is closed all the same)."""
        if not conn.abandoned or self.state is _CLOSED:
            return
        conn.abandoned = False
        self._abandoned -= 1
        self.events.append(  # (observed or not: the front end logs it as a warning)
            ConnectLostEvent(
                address=self.address, connection_id=conn.id, running_for=now - conn.created_at
            )
        )
        self._maybe_connect(now, fill_min=True)

    def _perished(self, conn: Conn, now: float, *, check_idle: bool = True) -> str | None:
        """Why ``conn`` must not be used any more, or ``None`` (CMAP "perished")."""
        if self.state is _CLOSED:
            return CLOSE_POOL_CLOSED
        if not self._lb:
            if conn.generation != self.generation:
                return CLOSE_STALE
        else:
            entry = self.service_generations.get(conn.service_id)
            if entry is None or conn.generation != entry[0]:
                return CLOSE_STALE
        if conn.expires <= now:
            return CLOSE_LIFETIME
        if check_idle and conn.role is not _KEPT:
            max_idle = self._max_idle
            if max_idle is not None and idle_expired(conn.idle_since, max_idle, now):
                return CLOSE_IDLE
        return None
