"""Connect results and a connection's health: connects that return or fail (their retries and
the circuit breaker are ``ConnectFailures``'), keep-alive probes (timed by ``Probes``), checks
and resets (``Hooks``, timed by ``HookRuns``), what a connection says of itself ("will close", a
new stream limit), and leaked leases (watched by ``LeakWatch``). :class:`Health` is one of the
classes that make up :class:`~poolkit._core.pool.PoolCore` (see ``fields``): the pool's inputs
here, and what they make the pool do.

Rules of this module
--------------------
* Same as ``pool``: pure, ``now`` from the caller, output only through ``actions``/``events``.
* A keep-alive probe is a lease the pool holds: it takes one stream (``_lease``), so a
  one-stream connection is not available while probed and a multiplexed one has a stream less.
  A probe is not use: it leaves ``idle_since`` alone, and a connection that only its probe holds
  counts as available for will-close and draining (the probe is dropped, not waited for).
* Only idle connections are probed: the probe timer of a connection (``ka_timer``) is armed when
  it is parked and goes stale when it is leased or closed.
* A check runs on an available connection the pool popped for a waiter (``_pop_idle``); a reset
  runs on a connection whose last lease came back. Either covers a waiter as a connect in flight
  does: no connect starts for it (a caller back for more while its connection is reset waits for
  that reset, not for a second connection). While either runs the connection is neither
  available nor in use, and only its result, its timeout, will-close or the pool's close ends it.
  Passed, it serves the oldest waiter or is parked, alive as of then; failed, it is closed and the
  waiters go on (``_dispatch`` starts the connect it no longer covers).
* Without ``connect_retry`` a failed connect fails the oldest waiter if the waiters outnumber the
  connects still in flight (CMAP); with it, no waiter is told and the retry is planned here.
"""

from __future__ import annotations

from typing import Any

from ..events import (
    CHECKOUT_CIRCUIT_OPEN,
    CHECKOUT_CONNECTION_ERROR,
    CLOSE_ERROR,
    CLOSE_IDLE,
    CLOSE_POOL_CLOSED,
    CLOSE_WILL_CLOSE,
    ConnectAttemptFailedEvent,
    ConnectionCheckFailedEvent,
    ConnectionDrainingEvent,
    ConnectionReadyEvent,
    ConnectionResetFailedEvent,
    KeepAliveFailedEvent,
    KeepAliveStartedEvent,
    KeepAliveSucceededEvent,
    MaxStreamsChangedEvent,
)
from .actions import CloseConnection, StartCheck, StartKeepAlive, StartReset
from .connection_life import ConnectionLife
from .failures import Failing
from .idle import idle_expired
from .records import (
    _BACKING_OFF,
    _CHECKING,
    _CLOSED,
    _CONNECTING,
    _DRAINING,
    _IDLE,
    _KEPT,
    _LEASED,
    _OVERFLOW,
    _READY,
    _RESETTING,
    _S_CLOSED,
    Conn,
    ConnInput,
    Hold,
)
from .timers import TimerKind


class Health(ConnectionLife):
    """Connect results, keep-alive, a connection's notices, leaks."""

    __slots__ = ()

    # ------------------------------------------------------------------ connect results

    def connected(
        self,
        conn: Conn,
        now: float,
        connection: Any,
        service_id: Any = None,
        max_streams: int = 1,
    ) -> None:
        """``conn``'s connect function returned ``connection`` (serving ``max_streams`` leases
        at once)."""
        if conn.state is not _CONNECTING:
            # The pool gave up on this connect (interrupted, closed, timed out): close what came.
            # The record is closed and stays as it is: only this action names ``connection``.
            self.actions.append(CloseConnection(conn, connection))
            self._connect_returned(conn, now)
            return
        conn.connection = connection
        if self._lb:
            conn.service_id = service_id
            entry = self.service_generations.get(service_id)
            if entry is None:
                entry = self.service_generations[service_id] = [0, 0]
            entry[1] += 1
            conn.generation = entry[0]
        conn.max_streams = max_streams
        self._regate(conn)
        self._fire(conn, ConnInput.ESTABLISHED)
        self.tally.created += 1
        failures = self.failures
        if failures.row:
            slot = failures.succeeded(now, self.events, self.observed)
            if slot is not None:
                self._drop(slot)  # no retry needed any more: the connects needed start as usual
        if self.observed:
            self.events.append(
                ConnectionReadyEvent(
                    address=self.address, connection_id=conn.id, duration=now - conn.created_at
                )
            )
        conn.idle_since = now
        if self.wait_queue and self.state is _READY and self._perished(conn, now) is None:
            self._serve(self.wait_queue.pop_oldest(), conn, now)
        elif conn.role is _OVERFLOW and self.state is not _CLOSED:
            self._close(conn, CLOSE_IDLE)  # made for a waiter that is gone: idle at once
        else:
            self._push_idle(conn, now)
        self._dispatch(now)

    def connect_failed(
        self, conn: Conn, now: float, error: BaseException, *, returned: bool = True
    ) -> None:
        """``conn``'s connect function raised ``error``, or (``returned`` false) the pool gives
        up on it (``connect_timeout``): then it is abandoned until its function returns."""
        if conn.state is not _CONNECTING:
            if returned:
                self._connect_returned(conn, now)
            return
        self.tally.connect_failures += 1
        failures = self.failures
        row = failures.failed(now)
        self._close(conn, CLOSE_ERROR, error, ConnInput.CONNECT_FAILED)
        if returned:
            conn.abandoned = False  # (not abandoned: its function is done)
            self._abandoned -= 1
        if failures.retry is None:
            if self.observed:
                self._attempt_failed(conn, error, row, None)
            # CMAP: the checkout that needed this connection fails with the connect error.
            if len(self.wait_queue) > self._counts[_CONNECTING]:
                self._fail(self.wait_queue.pop_oldest(), error, CHECKOUT_CONNECTION_ERROR, now)
            else:
                failures.unseen(conn, error, self.events)
            self._maybe_connect(now, fill_min=False)
            return
        retried = failures.retried(conn, error, now)  # the failing state, if this one is retried
        retry_in = None if retried is None else self._plan_retry(retried, now)
        if self.observed:
            failing = failures.failing
            assert failing is not None
            self._attempt_failed(conn, error, failing.failures, retry_in)
        failures.unseen(conn, error, self.events)  # (waiters keep waiting: none is told)

    def _plan_retry(self, failing: Failing, now: float) -> float | None:
        """connect_retry: plan the next attempt of the failing run (a backing-off slot) and
        return in how many seconds it starts, or ``None`` if none is planned from here."""
        if self.state is not _READY:
            return None
        counts = self._counts
        failures = self.failures
        if failures.trips(now) and len(self.conns) == counts[_CONNECTING] + counts[_BACKING_OFF]:
            failures.open_circuit(now, self.events if self.observed else None)
            self._fail_all_waiters(now, lambda: failures.circuit_error(now), CHECKOUT_CIRCUIT_OPEN)
        if len(self.conns) + self._abandoned >= self._max_size:
            # no room for the slot: connects given up on fill it; the retry starts when one of
            # them returns (``_connect_returned``), its own wait standing for the backoff
            return None
        delay = failures.delay()
        slot = self._new_record(now, _BACKING_OFF)
        failures.attempt(slot)
        self.timers.push(now + delay, TimerKind.BACKOFF, slot)
        return delay

    def _attempt_failed(
        self, conn: Conn, error: BaseException, failures: int, retry_in: float | None
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

    def _backoff_over(self, slot: Conn, now: float) -> None:
        """A backing-off slot's wait is over: retry its connect, or give the slot up."""
        failing = self.failures.failing
        if (
            failing is None
            or failing.pending is not slot
            or self.state is not _READY
            or self._counts[_CONNECTING] + self._abandoned >= self.options.max_connecting
        ):
            # Recovered meanwhile (another connect succeeded), paused, or connects given up on
            # still run: no retry from this slot (``_drop`` forgets it as the pending one); the
            # connects needed start as usual (the retry when an abandoned connect returns).
            self._drop(slot)
            self._dispatch(now)
            return
        self._fire(slot, ConnInput.RETRY)
        slot.generation = self.generation
        slot.created_at = slot.idle_since = now
        self._regate(slot)
        self._begin_connect(slot, now)

    # ------------------------------------------------------------------ keep-alive

    def _start_probe(self, conn: Conn, now: float) -> None:
        """``conn``'s probe timer fired while it was idle: probe it, unless it perished."""
        self.probes.fired(conn)
        self.idle_set.remove(conn)
        reason = self._perished(conn, now)
        if reason is not None:
            self._close(conn, reason)
            self._dispatch(now)
            return
        self._lease(conn)
        self.probes.start(conn, now)
        if self.observed:
            self.events.append(KeepAliveStartedEvent(address=self.address, connection_id=conn.id))
        self.actions.append(StartKeepAlive(conn))

    def keep_alive_done(self, conn: Conn, now: float, error: BaseException | None = None) -> None:
        """``conn``'s keep-alive probe returned (``error`` ``None``) or raised ``error``."""
        started = self.probes.end(conn)
        if started is None:
            return  # ended already (timed out, or the pool closed): a late result
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
                and conn.role is not _KEPT
                and not self.wait_queue
                and idle_expired(conn.idle_since, max_idle, now)
            ):
                # Its idle time ran out during the probe: closed now rather than parked.
                conn.streams = 0
                self._fire(conn, ConnInput.RELEASE_LAST)
                self._close(conn, CLOSE_IDLE)
                self._dispatch(now)
                return
            # The probe's stream comes back like a lease; a probe is not use: idle time runs on
            # (and nothing is reset).
            self._give_back(conn, now, conn.idle_since, used=False)
            return
        conn.streams -= 1
        # Closed even with other leases out (multiplexed): they come back to a closed connection.
        self._close(conn, CLOSE_ERROR, error)
        self._dispatch(now)

    def _probe_timed_out(self, conn: Conn, now: float) -> None:
        self.keep_alive_done(conn, now, self.probes.timeout_error(conn, self.address))

    def _end_probe_at_close(self, conn: Conn) -> None:
        """The pool closes: a probe in flight gives its stream back now (its result is ignored);
        a connection used by nothing else then closes."""
        self.probes.drop(conn)
        self.idle_set.discard_open(conn)
        if conn.state is _S_CLOSED:
            return
        if conn.streams:
            self._fire(conn, ConnInput.RELEASE)
        elif conn.state is _DRAINING:
            self._close(conn, CLOSE_WILL_CLOSE, how=ConnInput.RELEASE_LAST)
        else:
            self._fire(conn, ConnInput.RELEASE_LAST)  # -> IDLE, not in the idle set: then closed
            self._close(conn, CLOSE_POOL_CLOSED)

    # ------------------------------------------------------------------ checks and resets

    def _start_check(self, conn: Conn, now: float) -> None:
        """The available ``conn`` (off the idle set) is checked before it is handed out."""
        self._begin_check(conn, now)
        self.actions.append(StartCheck(conn))

    def _begin_check(self, conn: Conn, now: float) -> None:
        """``conn`` (available, off the idle set) is CHECKING from ``now``, timed by
        ``HookRuns``; who runs the check is the caller's to say (an action, or the caller)."""
        if conn.ka_timer is not None:
            self.probes.stop(conn)  # not idle while checked: no keep-alive probe
        self._fire(conn, ConnInput.CHECK)
        self.hooks.start(conn, now)

    def check_done(self, conn: Conn, now: float, error: BaseException | None = None) -> None:
        """``conn``'s check returned (``error`` ``None``) or raised ``error``: it serves the
        oldest waiter (or is available again, alive as of now), or it is closed and the waiters
        go on with another connection."""
        self._hook_done(conn, now, error, checked=True)

    def _start_reset(self, conn: Conn, now: float) -> None:
        """``conn`` came back from its last lease (now IDLE, off the idle set): reset it before
        it is available again."""
        self._fire(conn, ConnInput.RESET)
        self.hooks.start(conn, now)
        self.actions.append(StartReset(conn))

    def reset_done(self, conn: Conn, now: float, error: BaseException | None = None) -> None:
        """``conn``'s reset returned (``error`` ``None``) or raised ``error``: it serves the oldest
        waiter or is available again, or it is closed."""
        self._hook_done(conn, now, error, checked=False)

    def _hook_done(
        self, conn: Conn, now: float, error: BaseException | None, *, checked: bool
    ) -> None:
        """The end of a check (``checked``) or a reset on ``conn``."""
        if self._hook_passed(conn, now, error, checked):
            self._back_to_work(conn, now)

    def _hook_passed(
        self, conn: Conn, now: float, error: BaseException | None, checked: bool
    ) -> bool:
        """The end of a check (``checked``) or a reset on ``conn``: whether it passed (``conn``
        is then IDLE, off the idle set, alive as of now). A late result (the run ended already:
        timed out, closed by the pool) changes nothing; a failure closes the connection."""
        started = self.hooks.end(conn)
        if started is None or conn.state is not (_CHECKING if checked else _RESETTING):
            return False  # ended already (timed out, closed by the pool): a late result
        self.tally.hook_ended(checked, failed=error is not None)
        if error is not None:
            if self.observed:
                failed = ConnectionCheckFailedEvent if checked else ConnectionResetFailedEvent
                self.events.append(
                    failed(
                        address=self.address,
                        connection_id=conn.id,
                        duration=now - started,
                        error=error,
                    )
                )
            self._close(conn, CLOSE_ERROR, error)
            self._dispatch(now)
            return False
        self._fire(conn, ConnInput.CHECKED if checked else ConnInput.RESET_DONE)
        conn.idle_since = now  # alive (or clean) as of now: no new check for check_after
        return True

    # ------------------------------------------------------------------ the caller runs it

    def lease_checking(self, now: float) -> Conn | None:
        """The checkout fast path of a pool with a check hook, for a front end that runs the
        check in the caller (``Pool``): ``None`` when the checkout must go through
        :meth:`request` (not ready, requests waiting, nothing available, a multiplexed connection
        with a free stream); else the most recently used available connection, either leased to
        the caller (no check needed: the checkout is done) or CHECKING, its check started on the
        caller's behalf (the caller runs it and reports with :meth:`checked`). Perished
        connections met on the way are closed. No event is built: the caller uses this only
        when nobody observes the pool."""
        if self._waiters or self._open or self.state is not _READY:
            return None
        idle = self._idle
        hooks = self.hooks
        closed = False
        found = None
        while idle:
            conn = idle.pop()
            reason = self._perished(conn, now)
            if reason is not None:
                self._close(conn, reason)
                closed = True
                continue
            if hooks.needs_check(conn, now):
                self._begin_check(conn, now)
            else:
                self._lease(conn)
                self.checkouts += 1
            found = conn
            break
        if closed:
            self._maybe_connect(now, fill_min=True)  # (min_size refilled)
        return found

    def checked(self, conn: Conn, now: float, error: BaseException | None = None) -> bool:
        """The check that the caller ran on ``conn`` (:meth:`lease_checking`) returned
        (``error`` ``None``) or raised ``error``: true if ``conn`` is now leased to the caller;
        false if it failed, timed out or perished meanwhile (the caller then checks out through
        :meth:`request`). Requests that came meanwhile counted on the check as on a connect in
        flight: the caller, first, takes the connection, and a connect starts for them if
        needed."""
        if not self._hook_passed(conn, now, error, True) or self._closed_if_perished(conn, now):
            return False
        self._lease(conn)
        self.checkouts += 1
        if self._waiters:
            self._dispatch(now)
        return True

    def _back_to_work(self, conn: Conn, now: float) -> None:
        """``conn`` passed its check or reset (IDLE, off the idle set): unless it perished
        meanwhile (a clear, its lifetime, the pool closed), it serves the oldest waiter or is
        parked."""
        if self._closed_if_perished(conn, now):
            return
        if self.wait_queue:
            self._serve(self.wait_queue.pop_oldest(), conn, now)
        else:
            self._push_idle(conn, now)
        self._dispatch(now)

    def _closed_if_perished(self, conn: Conn, now: float) -> bool:
        """Whether ``conn``, just out of its check or reset, perished meanwhile (a clear, its
        lifetime, the pool closed): then it is closed, and the waiters go on."""
        reason = self._perished(conn, now, check_idle=False)
        if reason is None:
            return False
        self._close(conn, reason)
        self._dispatch(now)
        return True

    def _hook_timed_out(self, conn: Conn, now: float) -> None:
        error = self.hooks.timeout_error(conn, self.address)
        if conn.state is _CHECKING:
            self.check_done(conn, now, error)
        else:
            self.reset_done(conn, now, error)

    # ------------------------------------------------------------------ what a connection says

    def will_close(self, conn_id: int, now: float) -> bool:
        """Connection ``conn_id`` said it will close (e.g. HTTP/2 GOAWAY): an available one
        closes now, one in use drains (no new leases) and closes when its last lease comes back.
        ``min_size`` is refilled. False if the pool has no such established connection."""
        conn = self.conns.get(conn_id)
        if conn is None:
            return False
        state = conn.state
        if state is _IDLE:
            self.idle_set.remove(conn)
            self._close(conn, CLOSE_WILL_CLOSE, how=ConnInput.WILL_CLOSE)
            self._dispatch(now)
            return True
        if state is _CHECKING or state is _RESETTING:  # used by no one: closed now
            self._close(conn, CLOSE_WILL_CLOSE, how=ConnInput.WILL_CLOSE)
            self._dispatch(now)
            return True
        if state is _LEASED:
            self.idle_set.discard_open(conn)
            if conn.streams == 1 and conn.probe_started is not None:
                # in use only by its keep-alive probe: as good as idle, closed now
                self.probes.drop(conn)
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

    def set_max_streams(self, conn_id: int, max_streams: int, now: float) -> bool:
        """Connection ``conn_id`` now serves at most ``max_streams`` leases at once (e.g. HTTP/2
        SETTINGS). An increase serves waiting requests at once; a decrease takes no lease back
        but gives no new one until its use falls below the new limit. False if the pool has no
        such established connection (the change is then ignored)."""
        conn = self.conns.get(conn_id)
        if conn is None or conn.state is _CONNECTING or conn.state is _BACKING_OFF:
            return False
        previous = conn.max_streams
        conn.max_streams = max_streams
        self._regate(conn)
        if conn.state is _LEASED:
            if conn.streams < max_streams and self._perished(conn, now, check_idle=False) is None:
                if max_streams > 1:
                    self.idle_set.add_open(conn)
            else:
                self.idle_set.discard_open(conn)
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

    # ------------------------------------------------------------------ leaked leases

    def hold(self, held: Hold, now: float) -> None:
        """Watch the lease ``held`` (just checked out): report it if still out ``leak_timeout``
        seconds from now."""
        self.leaks.hold(held, now)

    def unhold(self, held: Hold) -> None:
        """The watched lease ``held`` was given back."""
        self.leaks.unhold(held)

    def lease_collected(self, lease: Hold | Conn, now: float) -> None:
        """A lease was garbage-collected while still out (``lease``: its watch if it was
        watched, else its connection): report it and close its connection (it may be
        mid-protocol), so that it is not lost. Reported whether or not the pool is observed."""
        conn = self.leaks.collected(lease, now, self.events)
        if conn is not None:
            error = ResourceWarning(f"lease on connection {conn.id} garbage-collected while out")
            self.discard(conn, now, error)
