"""A connection's health and what it says of itself: keep-alive probes, failed connects and their
retries (backoff and the circuit breaker), "will close" and stream-limit notices. These are
methods of :class:`~poolkit._core.pool.PoolCore` (bound there by name), kept in a module of their
own so that each module has one concern; they work on the same state.

Rules of this module
--------------------
* Same as ``pool``: pure, ``now`` from the caller, output only through ``actions``/``events``.
* A keep-alive probe is a lease the pool holds: it takes one stream (``_lease``), so a
  one-stream connection is not available while probed and a multiplexed one has a stream less.
  ``probe_started`` is set exactly while a probe is in flight; its end (``keep_alive_done``, a
  timeout, or the pool giving the stream back at close) clears it first, so a late result of a
  probe already ended is ignored. A probe is not use: it leaves ``idle_since`` alone, and a
  connection that only its probe holds counts as available for will-close and draining (the
  probe is dropped, not waited for).
* Only idle connections are probed: the probe timer of a connection (``ka_timer``) is armed when
  it is parked and goes stale when it is leased or closed.
* With ``connect_retry`` a failed connect does not fail a waiter. The pool enters the *failing*
  state (``_failing``): one slot (a record in BACKING_OFF, unseen by the front end until its
  retry starts) holds the place of the next attempt, and no other connect starts until a connect
  succeeds. Failures are counted pool-wide. The circuit opens only on a failure, after
  ``circuit_breaker_after`` seconds of failing with no connection open; it closes on a success.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final, final

from ..errors import CircuitOpenError, KeepAliveTimeoutError
from ..events import (
    CHECKOUT_CIRCUIT_OPEN,
    CHECKOUT_CONNECTION_ERROR,
    CLOSE_ERROR,
    CLOSE_IDLE,
    CLOSE_POOL_CLOSED,
    CLOSE_WILL_CLOSE,
    CircuitClosedEvent,
    CircuitOpenedEvent,
    ConnectAttemptFailedEvent,
    ConnectFailingEvent,
    ConnectionDrainingEvent,
    ConnectRecoveredEvent,
    KeepAliveFailedEvent,
    KeepAliveStartedEvent,
    KeepAliveSucceededEvent,
    LeaseLeakedEvent,
    MaxStreamsChangedEvent,
)
from ..stats import PoolState
from .actions import StartKeepAlive
from .records import FORGOTTEN_AT_FORK, Conn, ConnInput, ConnState, Hold, Role
from .timers import TimerEntry, TimerKind

if TYPE_CHECKING:
    from .pool import PoolCore

_READY: Final = PoolState.READY
_IDLE: Final = ConnState.IDLE
_LEASED: Final = ConnState.LEASED
_DRAINING: Final = ConnState.DRAINING
_CONNECTING: Final = ConnState.CONNECTING
_BACKING_OFF: Final = ConnState.BACKING_OFF
_S_CLOSED: Final = ConnState.CLOSED


@final
class Failing:
    """The pool's failing state (``connect_retry``): connects fail in a row."""

    __slots__ = ("error", "failures", "open", "pending", "since")

    def __init__(self, since: float) -> None:
        self.since = since  #: when the first failure of the row happened
        self.failures = 0  #: failed connects in the row
        self.error: BaseException | None = None  #: the last one's error
        #: the record of the next attempt (backing off, then connecting); ``None`` when none is
        #: planned (the pool was paused when it was due): the next connect needed becomes it
        self.pending: Conn | None = None
        self.open = False  #: whether the circuit is open


# ---------------------------------------------------------------------- keep-alive


def _stop_ka_timer(self: PoolCore, conn: Conn) -> None:
    """``conn``'s keep-alive timer (its next probe, or its probe's timeout) is off, if any."""
    if conn.ka_timer is not None:
        conn.ka_timer = None
        self.timers.note_stale()


def _arm_keep_alive(self: PoolCore, conn: Conn, now: float) -> None:
    """``conn`` was just parked: its next probe is one interval from now."""
    keep_alive = self._keep_alive
    assert keep_alive is not None
    self._stop_ka_timer(conn)
    conn.ka_timer = self.timers.push(now + keep_alive.interval, TimerKind.KEEP_ALIVE, conn)


def _start_probe(self: PoolCore, conn: Conn, now: float) -> None:
    """``conn``'s probe timer fired while it was idle: probe it, unless it perished."""
    conn.ka_timer = None
    self._idle.remove(conn)
    reason = self._perished(conn, now)
    if reason is not None:
        self._close(conn, reason)
        self._dispatch(now)
        return
    self._lease(conn)
    conn.probe_started = now
    keep_alive = self._keep_alive
    assert keep_alive is not None
    if keep_alive.timeout is not None:
        conn.ka_timer = self.timers.push(now + keep_alive.timeout, TimerKind.PROBE_TIMEOUT, conn)
    if self.observed:
        self.events.append(KeepAliveStartedEvent(address=self.address, connection_id=conn.id))
    self.actions.append(StartKeepAlive(conn))


def keep_alive_done(
    self: PoolCore, conn: Conn, now: float, error: BaseException | None = None
) -> None:
    """``conn``'s keep-alive probe returned (``error`` ``None``) or raised ``error``."""
    started = conn.probe_started
    if started is None:
        return  # ended already (timed out, or the pool closed): a late result
    conn.probe_started = None
    self._stop_ka_timer(conn)
    if self.observed:
        if error is None:
            self.events.append(
                KeepAliveSucceededEvent(
                    address=self.address, connection_id=conn.id, duration=now - started
                )
            )
        else:
            self.events.append(
                KeepAliveFailedEvent(
                    address=self.address,
                    connection_id=conn.id,
                    duration=now - started,
                    error=error,
                )
            )
    if error is None or conn.state is _S_CLOSED:
        max_idle = self._max_idle
        if (
            max_idle is not None
            and conn.streams == 1
            and conn.state is _LEASED
            and conn.role is not Role.KEPT
            and not self._waiters
            and now - conn.idle_since >= max_idle
        ):
            # Its idle time ran out during the probe: closed now rather than parked.
            conn.streams = 0
            self._fire(conn, ConnInput.RELEASE_LAST)
            self._close(conn, CLOSE_IDLE)
            self._dispatch(now)
            return
        # The probe's stream comes back like a lease; a probe is not use: idle time runs on.
        self._give_back(conn, now, conn.idle_since)
        return
    conn.streams -= 1
    # Closed even with other leases out (multiplexed): they come back to a closed connection.
    self._close(conn, CLOSE_ERROR, error)
    self._dispatch(now)


def _probe_timed_out(self: PoolCore, conn: Conn, now: float) -> None:
    keep_alive = self._keep_alive
    assert keep_alive is not None and keep_alive.timeout is not None
    conn.ka_timer = None
    error = KeepAliveTimeoutError(
        address=self.address, connection_id=conn.id, timeout=keep_alive.timeout
    )
    self.keep_alive_done(conn, now, error)


def _drop_probe(self: PoolCore, conn: Conn) -> None:
    """Forget the probe in flight on ``conn`` (its result will be ignored) and the stream it
    holds; the caller fires the connection's transition."""
    conn.probe_started = None
    self._stop_ka_timer(conn)
    conn.streams -= 1


def _end_probe_at_close(self: PoolCore, conn: Conn) -> None:
    """The pool closes: a probe in flight gives its stream back now (its result is ignored);
    a connection used by nothing else then closes."""
    self._drop_probe(conn)
    self._open.pop(conn, None)
    if conn.state is _S_CLOSED:
        return
    if conn.streams:
        self._fire(conn, ConnInput.RELEASE)
    elif conn.state is _DRAINING:
        self._close(conn, CLOSE_WILL_CLOSE, how=ConnInput.RELEASE_LAST)
    else:
        self._fire(conn, ConnInput.RELEASE_LAST)  # -> IDLE, off _idle: then closed
        self._close(conn, CLOSE_POOL_CLOSED)


# ---------------------------------------------------------------------- connect results


def connect_failed(
    self: PoolCore, conn: Conn, now: float, error: BaseException, *, returned: bool = True
) -> None:
    """``conn``'s connect function raised ``error``, or (``returned`` false) the pool gives up on
    it (``connect_timeout``): then it is abandoned until its function returns."""
    if conn.state is not _CONNECTING:
        if returned:
            self._connect_returned(conn, now)
        return
    self.tally.connect_failures += 1
    if not self._fail_row:
        self._fail_since = now
    self._fail_row += 1
    self._close(conn, CLOSE_ERROR, error, ConnInput.CONNECT_FAILED)
    if returned:
        conn.abandoned = False  # (not abandoned: its function is done)
        self._abandoned -= 1
    if self._retry is None:
        if self.observed:
            self._attempt_failed(conn, error, self._fail_row, None)
        # CMAP: the checkout that needed this connection fails with the connect error.
        if len(self._waiters) > self._counts[_CONNECTING]:
            self._fail(self._pop_waiter(), error, CHECKOUT_CONNECTION_ERROR, now)
        else:
            self._failing_unseen(conn, error)
        self._maybe_connect(now, fill_min=False)
        return
    failing = self._failing
    if failing is None:
        failing = self._failing = Failing(now)
    retry_in = self._plan_retry(failing, conn, error, now)
    if self.observed:
        self._attempt_failed(conn, error, failing.failures, retry_in)
    self._failing_unseen(conn, error)  # (waiters keep waiting: none is told)


def _plan_retry(
    self: PoolCore, failing: Failing, conn: Conn, error: BaseException, now: float
) -> float | None:
    """connect_retry: ``conn``'s connect failed; plan the next attempt (a backing-off slot) and
    return in how many seconds it starts, or ``None`` if none is planned from here."""
    failing.error = error
    if failing.pending is not None and failing.pending is not conn:
        return None  # another attempt is the one retried: this one is just gone
    failing.failures += 1
    failing.pending = None
    if self.state is not _READY:
        return None
    retry = self._retry
    assert retry is not None
    trip = retry.circuit_breaker_after
    if (
        trip is not None
        and not failing.open
        and now - failing.since >= trip
        and len(self.conns) == self._counts[_CONNECTING] + self._counts[_BACKING_OFF]
    ):
        self._open_circuit(now)
    if len(self.conns) + self._abandoned >= self._max_size:
        # no room for the slot: connects given up on fill it; the retry starts when one of them
        # returns (``_connect_returned``), its own wait standing for the backoff
        return None
    delay = retry.delay(failing.failures, self._rand())
    slot = self._new_record(now, _BACKING_OFF)
    failing.pending = slot
    self.timers.push(now + delay, TimerKind.BACKOFF, slot)
    return delay


def _failing_unseen(self: PoolCore, conn: Conn, error: BaseException) -> None:
    """A connect failed and no checkout is told: said once per run of failures (observed or not:
    the front end logs it as a warning), and its end too (``_connect_succeeded``)."""
    if not self._failing_told:
        self._failing_told = True
        self.events.append(
            ConnectFailingEvent(
                address=self.address, connection_id=conn.id, error=error, failures=self._fail_row
            )
        )


def _connect_succeeded(self: PoolCore, now: float) -> None:
    """A connect succeeded: a run of failures ends (told if it was told)."""
    if self._failing_told:
        self._failing_told = False
        self.events.append(
            ConnectRecoveredEvent(
                address=self.address, failures=self._fail_row, failing_for=now - self._fail_since
            )
        )
    self._fail_row = 0
    if self._failing is not None:
        self._recovered(now)


def _attempt_failed(
    self: PoolCore, conn: Conn, error: BaseException, failures: int, retry_in: float | None
) -> None:
    self.events.append(
        ConnectAttemptFailedEvent(
            address=self.address,
            connection_id=conn.id,
            error=error,
            failures=failures,
            retry_in=retry_in,
        )
    )


def _open_circuit(self: PoolCore, now: float) -> None:
    failing = self._failing
    assert failing is not None
    failing.open = True
    if self.observed:
        assert failing.error is not None
        self.events.append(
            CircuitOpenedEvent(
                address=self.address,
                failing_for=now - failing.since,
                failures=failing.failures,
                error=failing.error,
            )
        )
    self._fail_all_waiters(now, lambda: self._circuit_error(now), CHECKOUT_CIRCUIT_OPEN)


def _circuit_error(self: PoolCore, now: float) -> CircuitOpenError:
    failing = self._failing
    assert failing is not None
    return CircuitOpenError(
        address=self.address,
        failing_for=now - failing.since,
        failures=failing.failures,
        cause=failing.error,
    )


def _recovered(self: PoolCore, now: float) -> None:
    """A connect succeeded: the failing state (and an open circuit) ends."""
    failing = self._failing
    assert failing is not None
    self._failing = None
    slot = failing.pending
    if slot is not None and slot.state is _BACKING_OFF:
        self._drop(slot)  # no retry needed any more: the connects needed start as usual
    if failing.open and self.observed:
        self.events.append(
            CircuitClosedEvent(address=self.address, failing_for=now - failing.since)
        )


def _backoff_over(self: PoolCore, slot: Conn, now: float) -> None:
    """A backing-off slot's wait is over: retry its connect, or give the slot up."""
    failing = self._failing
    if (
        failing is None
        or failing.pending is not slot
        or self.state is not _READY
        or self._counts[_CONNECTING] + self._abandoned >= self.options.max_connecting
    ):
        # Recovered meanwhile (another connect succeeded), paused, or connects given up on still
        # run: no retry from this slot (``_drop`` forgets it as the pending one); the connects
        # needed start as usual (the retry when an abandoned connect returns).
        self._drop(slot)
        self._dispatch(now)
        return
    self._fire(slot, ConnInput.RETRY)
    slot.generation = self.generation
    slot.created_at = slot.idle_since = now
    self._regate(slot)
    self._begin_connect(slot, now)


# ---------------------------------------------------------------------- what a connection says


def will_close(self: PoolCore, conn_id: int, now: float) -> bool:
    """Connection ``conn_id`` said it will close (e.g. HTTP/2 GOAWAY): an available one closes
    now, one in use drains (no new leases) and closes when its last lease comes back.
    ``min_size`` is refilled. False if the pool has no such established connection."""
    conn = self.conns.get(conn_id)
    if conn is None:
        return False
    state = conn.state
    if state is _IDLE:
        self._idle.remove(conn)
        self._close(conn, CLOSE_WILL_CLOSE, how=ConnInput.WILL_CLOSE)
        self._dispatch(now)
        return True
    if state is _LEASED:
        self._open.pop(conn, None)
        if conn.streams == 1 and conn.probe_started is not None:
            # in use only by its keep-alive probe: as good as idle, closed now
            self._drop_probe(conn)
            self._close(conn, CLOSE_WILL_CLOSE)
            self._dispatch(now)
            return True
        self._fire(conn, ConnInput.WILL_CLOSE)
        self._regate(conn)  # draining: no fast path
        if self.observed:
            self.events.append(
                ConnectionDrainingEvent(
                    address=self.address, connection_id=conn.id, streams_in_use=conn.streams
                )
            )
        return True
    return state is _DRAINING


def set_max_streams(self: PoolCore, conn_id: int, max_streams: int, now: float) -> bool:
    """Connection ``conn_id`` now serves at most ``max_streams`` leases at once (e.g. HTTP/2
    SETTINGS). An increase serves waiting requests at once; a decrease takes no lease back but
    gives no new one until its use falls below the new limit. False if the pool has no such
    established connection (the change is then ignored)."""
    conn = self.conns.get(conn_id)
    if conn is None or conn.state is _CONNECTING or conn.state is _BACKING_OFF:
        return False
    previous = conn.max_streams
    conn.max_streams = max_streams
    self._regate(conn)
    if conn.state is _LEASED:
        if conn.streams < max_streams and self._perished(conn, now, check_idle=False) is None:
            if max_streams > 1:
                self._open[conn] = None
        else:
            self._open.pop(conn, None)
    if self.observed and previous != max_streams:
        self.events.append(
            MaxStreamsChangedEvent(
                address=self.address,
                connection_id=conn.id,
                max_streams=max_streams,
                previous=previous,
            )
        )
    self._dispatch(now)
    return True


# ---------------------------------------------------------------------- leaked leases


def hold(self: PoolCore, held: Hold, now: float) -> None:
    """Watch the lease ``held`` (just checked out): report it if still out ``leak_timeout``
    seconds from now."""
    timeout = self.options.leak_timeout
    assert timeout is not None
    self.timers.push(now + timeout, TimerKind.LEAK, held)


def unhold(self: PoolCore, held: Hold) -> None:
    """The watched lease ``held`` was given back."""
    if not held.done:
        held.done = True
        self.timers.note_stale()


def lease_collected(self: PoolCore, lease: Hold | Conn, now: float) -> None:
    """A lease was garbage-collected while still out (``lease``: its watch if it was watched,
    else its connection): report it and close its connection (it may be mid-protocol), so that
    it is not lost. Reported whether or not the pool is observed."""
    if type(lease) is Hold:
        if lease.done or lease.conn.close_reason is FORGOTTEN_AT_FORK:
            return
        self.unhold(lease)
        self._report_leak(lease, now, collected=True)
        conn = lease.conn
    else:
        assert type(lease) is Conn
        conn = lease
        if conn.close_reason is FORGOTTEN_AT_FORK:
            return  # a lease from before a fork, collected in the child: not this pool's
        self.events.append(
            LeaseLeakedEvent(
                address=self.address, connection_id=conn.id, held=None, stack="", collected=True
            )
        )
    error = ResourceWarning(f"lease on connection {conn.id} garbage-collected while out")
    self.discard(conn, now, error)


def _report_leak(self: PoolCore, held: Hold, now: float, *, collected: bool) -> None:
    # Built whether or not the pool is observed: a leak is always reported (the front end logs
    # a warning for it).
    self.events.append(
        LeaseLeakedEvent(
            address=self.address,
            connection_id=held.conn.id,
            held=now - held.since,
            stack=held.stack,
            collected=collected,
        )
    )


def _health_timer_is_live(self: PoolCore, entry: TimerEntry) -> bool:
    if entry.kind is TimerKind.LEAK:
        held: Hold = entry.target
        return not held.done
    conn: Conn = entry.target
    if entry.kind is TimerKind.BACKOFF:
        return conn.state is _BACKING_OFF
    if conn.ka_timer is not entry:
        return False
    if entry.kind is TimerKind.KEEP_ALIVE:
        return conn.state is _IDLE
    return conn.probe_started is not None  # PROBE_TIMEOUT
