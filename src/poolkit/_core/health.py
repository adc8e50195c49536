"""Connect results and a connection's health: connects that return or fail (their retries and
the circuit breaker are ``ConnectFailures``'), keep-alive probes (timed by ``Probes``), checks
and resets (``Hooks``, timed by ``HookRuns``), what a connection says of itself ("will close", a
new stream limit), and leaked leases (watched by ``LeakWatch``). :class:`Health` is a
collaborator of :class:`~poolkit._core.pool.PoolCore`: the pool's inputs here, and what they
make the pool do. It calls ``Handout`` and ``ConnectionLife`` and reads ``CoreState`` (``state``
says who calls whom).

Rules of this module
--------------------
* Same as ``handout``: pure, ``now`` from the caller, output only through ``actions``/``events``.
* A keep-alive probe is a lease the pool holds: it takes one stream (``Handout.lease``), so a
  one-stream connection is not available while probed and a multiplexed one has a stream less.
  A probe is not use: it leaves ``idle_since`` alone, and a connection that only its probe holds
  counts as available for will-close and draining (the probe is dropped, not waited for).
* Only idle connections are probed: the probe timer of a connection (``ka_timer``) is armed when
  it is parked and goes stale when it is leased or closed.
* A check runs on an available connection the pool popped for a waiter
  (``Handout._pop_idle``); a reset runs on a connection whose last lease came back. Either
  covers a waiter as a connect in flight does: no connect starts for it (a caller back for more
  while its connection is reset waits for that reset, not for a second connection). While either
  runs the connection is neither available nor in use, and only its result, its timeout,
  will-close or the pool's close ends it.
  Passed, it serves the oldest waiter or is parked, alive as of then; failed, it is closed and the
  waiters go on (``Handout.dispatch`` starts the connect it no longer covers).
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
from .actions import CloseConnection, StartKeepAlive
from .connection_life import ConnectionLife
from .failures import Failing
from .handout import Handout
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
    regate,
)
from .state import CoreState
from .timers import TimerKind


class Health:
    """Connect results, keep-alive, checks and resets, a connection's notices, leaks."""

    __slots__ = ("_hand", "_life", "_st")

    def __init__(self, st: CoreState, life: ConnectionLife, hand: Handout) -> None:
        self._st = st
        self._life = life
        self._hand = hand

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
        st = self._st
        if conn.state is not _CONNECTING:
            # The pool gave up on this connect (interrupted, closed, timed out): close what came.
            # The record is closed and stays as it is: only this action names ``connection``.
            st.actions.append(CloseConnection(conn, connection))
            self._life.connect_returned(conn, now)
            return
        conn.connection = connection
        if st.lb:
            conn.service_id = service_id
            entry = st.service_generations.get(service_id)
            if entry is None:
                entry = st.service_generations[service_id] = [0, 0]
            entry[1] += 1
            conn.generation = entry[0]
        conn.max_streams = max_streams
        st.expected_streams = max_streams  # (what the next connect is counted to serve)
        regate(conn)
        self._life.fire(conn, ConnInput.ESTABLISHED)
        st.tally.created += 1
        failures = st.failures
        if failures.row:
            slot = failures.succeeded(now, st.events, st.observed)
            if slot is not None:
                self._life.drop(
                    slot
                )  # no retry needed any more: the connects needed start as usual
        if st.observed:
            st.events.append(
                ConnectionReadyEvent(
                    address=st.address, connection_id=conn.id, duration=now - conn.created_at
                )
            )
        conn.idle_since = now
        if (
            st.wait_queue
            and st.state is _READY
            and self._life.perished(conn, now) is None
            and (st.adaptive is None or self._hand.room_for_held())
            and not self._hand.surplus(conn)  # (beyond max_size after a resize: closed)
        ):
            self._hand.serve(st.wait_queue.pop_oldest(), conn, now)
        elif conn.role is _OVERFLOW and st.state is not _CLOSED:
            self._life.close(conn, CLOSE_IDLE)  # made for a waiter that is gone: idle at once
        else:
            self._hand.push_idle(conn, now)
        self._hand.dispatch(now)

    def connect_failed(
        self, conn: Conn, now: float, error: BaseException, *, returned: bool = True
    ) -> None:
        """``conn``'s connect function raised ``error``, or (``returned`` false) the pool gives
        up on it (``connect_timeout``): then it is abandoned until its function returns."""
        st = self._st
        if conn.state is not _CONNECTING:
            if returned:
                self._life.connect_returned(conn, now)
            return
        st.tally.connect_failures += 1
        failures = st.failures
        row = failures.failed(now)
        self._life.close(conn, CLOSE_ERROR, error, ConnInput.CONNECT_FAILED)
        if returned:
            conn.abandoned = False  # (not abandoned: its function is done)
            st.abandoned -= 1
        if failures.retry is None:
            if st.observed:
                self._attempt_failed(conn, error, row, None)
            # CMAP: the checkout that needed this connection fails with the connect error.
            if len(st.wait_queue) > st.counts[_CONNECTING]:
                self._hand.fail(st.wait_queue.pop_oldest(), error, CHECKOUT_CONNECTION_ERROR, now)
            else:
                failures.unseen(conn, error, st.events)
            self._life.maybe_connect(now, fill_min=False)
            return
        retried = failures.retried(conn, error, now)  # the failing state, if this one is retried
        retry_in = None if retried is None else self._plan_retry(retried, now)
        if st.observed:
            failing = failures.failing
            assert failing is not None
            self._attempt_failed(conn, error, failing.failures, retry_in)
        failures.unseen(conn, error, st.events)  # (waiters keep waiting: none is told)

    def _plan_retry(self, failing: Failing, now: float) -> float | None:
        """connect_retry: plan the next attempt of the failing run (a backing-off slot) and
        return in how many seconds it starts, or ``None`` if none is planned from here."""
        st = self._st
        if st.state is not _READY:
            return None
        counts = st.counts
        failures = st.failures
        if failures.trips(now) and len(st.conns) == counts[_CONNECTING] + counts[_BACKING_OFF]:
            failures.open_circuit(now, st.events if st.observed else None)
            self._hand.fail_all_waiters(
                now, lambda: failures.circuit_error(now), CHECKOUT_CIRCUIT_OPEN
            )
        if len(st.conns) + st.abandoned >= st.size_limit:
            # no room for the slot: connects given up on fill it; the retry starts when one of
            # them returns (``ConnectionLife.connect_returned``), its own wait standing for the
            # backoff
            return None
        delay = failures.delay()
        slot = self._life.new_record(now, _BACKING_OFF)
        failures.attempt(slot)
        st.timers.push(now + delay, TimerKind.BACKOFF, slot)
        return delay

    def _attempt_failed(
        self, conn: Conn, error: BaseException, failures: int, retry_in: float | None
    ) -> None:
        st = self._st
        st.events.append(
            ConnectAttemptFailedEvent(
                address=st.address,
                connection_id=conn.id,
                error=error,
                failures=failures,
                retry_in=retry_in,
            )
        )

    def backoff_over(self, slot: Conn, now: float) -> None:
        """A backing-off slot's wait is over: retry its connect, or give the slot up."""
        st = self._st
        failing = st.failures.failing
        if (
            failing is None
            or failing.pending is not slot
            or st.state is not _READY
            or st.counts[_CONNECTING] + st.abandoned >= st.options.max_connecting
            or self._hand.over_limit()
        ):
            # Recovered meanwhile (another connect succeeded), paused, connects given up on
            # still run, or beyond ``max_size`` (a resize lowered it): no retry from this slot
            # (``ConnectionLife.drop`` forgets it as the pending one); the connects needed start
            # as usual (the retry when an abandoned connect returns).
            self._life.drop(slot)
            self._hand.dispatch(now)
            return
        self._life.fire(slot, ConnInput.RETRY)
        slot.generation = st.generation
        slot.created_at = slot.idle_since = now
        regate(slot)
        self._life.begin_connect(slot, now)

    def start_probe(self, conn: Conn, now: float) -> None:
        """``conn``'s probe timer fired while it was idle: probe it, unless it perished."""
        st = self._st
        st.probes.fired(conn)
        st.idle_set.remove(conn)
        reason = self._life.perished(conn, now)
        if reason is not None:
            self._life.close(conn, reason)
            self._hand.dispatch(now)
            return
        self._hand.lease(conn, now)
        st.probes.start(conn, now)
        if st.observed:
            st.events.append(KeepAliveStartedEvent(address=st.address, connection_id=conn.id))
        st.actions.append(StartKeepAlive(conn))

    def keep_alive_done(self, conn: Conn, now: float, error: BaseException | None = None) -> None:
        """``conn``'s keep-alive probe returned (``error`` ``None``) or raised ``error``."""
        st = self._st
        started = st.probes.end(conn)
        if started is None:
            return  # ended already (timed out, or the pool closed): a late result
        if st.observed:
            if error is None:
                st.events.append(
                    KeepAliveSucceededEvent(
                        address=st.address, connection_id=conn.id, duration=now - started
                    )
                )
            else:
                st.events.append(
                    KeepAliveFailedEvent(
                        address=st.address,
                        connection_id=conn.id,
                        duration=now - started,
                        error=error,
                    )
                )
        if error is None or conn.state is _S_CLOSED:
            max_idle = st.max_idle
            if (
                max_idle is not None
                and conn.streams == 1
                and conn.state is _LEASED
                and conn.role is not _KEPT
                and not st.wait_queue
                and idle_expired(conn.idle_since, max_idle, now)
            ):
                # Its idle time ran out during the probe: closed now rather than parked.
                conn.streams = 0
                self._life.fire(conn, ConnInput.RELEASE_LAST)
                self._life.close(conn, CLOSE_IDLE)
                self._hand.dispatch(now)
                return
            # The probe's stream comes back like a lease; a probe is not use: idle time runs on
            # (and nothing is reset).
            self._hand.give_back(conn, now, conn.idle_since, used=False)
            return
        conn.streams -= 1
        # Closed even with other leases out (multiplexed): they come back to a closed connection.
        self._life.close(conn, CLOSE_ERROR, error)
        self._hand.dispatch(now)

    def probe_timed_out(self, conn: Conn, now: float) -> None:
        st = self._st
        self.keep_alive_done(conn, now, st.probes.timeout_error(conn, st.address))

    def end_probe_at_close(self, conn: Conn) -> None:
        """The pool closes: a probe in flight gives its stream back now (its result is ignored);
        a connection used by nothing else then closes."""
        st = self._st
        st.probes.drop(conn)
        st.idle_set.discard_open(conn)
        if conn.state is _S_CLOSED:
            return
        if conn.streams:
            self._life.fire(conn, ConnInput.RELEASE)
        elif conn.state is _DRAINING:
            self._life.close(conn, CLOSE_WILL_CLOSE, how=ConnInput.RELEASE_LAST)
        else:
            self._life.fire(
                conn, ConnInput.RELEASE_LAST
            )  # -> IDLE, not in the idle set: then closed
            self._life.close(conn, CLOSE_POOL_CLOSED)

    def check_done(self, conn: Conn, now: float, error: BaseException | None = None) -> None:
        """``conn``'s check returned (``error`` ``None``) or raised ``error``: it serves the
        oldest waiter (or is available again, alive as of now), or it is closed and the waiters
        go on with another connection."""
        self._hook_done(conn, now, error, checked=True)

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
        st = self._st
        started = st.hooks.end(conn)
        if started is None or conn.state is not (_CHECKING if checked else _RESETTING):
            return False  # ended already (timed out, closed by the pool): a late result
        st.tally.hook_ended(checked, failed=error is not None)
        if error is not None:
            if st.observed:
                failed = ConnectionCheckFailedEvent if checked else ConnectionResetFailedEvent
                st.events.append(
                    failed(
                        address=st.address,
                        connection_id=conn.id,
                        duration=now - started,
                        error=error,
                    )
                )
            self._life.close(conn, CLOSE_ERROR, error)
            self._hand.dispatch(now)
            return False
        self._life.fire(conn, ConnInput.CHECKED if checked else ConnInput.RESET_DONE)
        conn.idle_since = now  # alive (or clean) as of now: no new check for check_after
        return True

    def lease_checking(self, now: float) -> Conn | None:
        """The checkout fast path of a pool with a check hook, for a front end that runs the
        check in the caller (``Pool``): ``None`` when the checkout must go through
        :meth:`request` (not ready, requests waiting, nothing available, a multiplexed connection
        with a free stream); else the most recently used available connection, either leased to
        the caller (no check needed: the checkout is done) or CHECKING, its check started on the
        caller's behalf (the caller runs it and reports with :meth:`checked`). Perished
        connections met on the way are closed. No event is built: the caller uses this only
        when nobody observes the pool."""
        st = self._st
        if st.wait_queue.queue or st.idle_set.open or st.state is not _READY:
            return None
        if st.adaptive is not None and self._hand.full():
            return None  # (at the adaptive limit: ``request`` queues it)
        idle = st.idle_set.stack
        hooks = st.hooks
        closed = False
        found = None
        take = st.idle_set.take  # (the idle order's end)
        while idle:
            conn = take()
            reason = self._life.perished(conn, now)
            if reason is not None:
                self._life.close(conn, reason)
                closed = True
                continue
            if hooks.needs_check(conn, now):
                self._hand.begin_check(conn, now)
            else:
                self._hand.lease(conn, now)
                self._hand.checkouts += 1
            found = conn
            break
        if closed:
            self._life.maybe_connect(now, fill_min=True)  # (min_size refilled)
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
        self._hand.lease(conn, now)
        self._hand.checkouts += 1
        if self._st.wait_queue.queue:
            self._hand.dispatch(now)
        return True

    def _back_to_work(self, conn: Conn, now: float) -> None:
        """``conn`` passed its check or reset (IDLE, off the idle set): unless it perished
        meanwhile (a clear, its lifetime, the pool closed), it serves the oldest waiter or is
        parked."""
        st = self._st
        if self._closed_if_perished(conn, now):
            return
        if self._hand.surplus(conn):  # (overflow: closed as soon as it is idle)
            self._life.close(conn, CLOSE_IDLE)
            self._hand.dispatch(now)
            return
        if st.wait_queue and (st.adaptive is None or self._hand.room_for_held()):
            self._hand.serve(st.wait_queue.pop_oldest(), conn, now)
        else:
            self._hand.push_idle(conn, now)
        self._hand.dispatch(now)

    def _closed_if_perished(self, conn: Conn, now: float) -> bool:
        """Whether ``conn``, just out of its check or reset, perished meanwhile (a clear, its
        lifetime, the pool closed): then it is closed, and the waiters go on."""
        reason = self._life.perished(conn, now, check_idle=False)
        if reason is None:
            return False
        self._life.close(conn, reason)
        self._hand.dispatch(now)
        return True

    def hook_timed_out(self, conn: Conn, now: float) -> None:
        st = self._st
        error = st.hooks.timeout_error(conn, st.address)
        if conn.state is _CHECKING:
            self.check_done(conn, now, error)
        else:
            self.reset_done(conn, now, error)

    def will_close(self, conn_id: int, now: float) -> bool:
        """Connection ``conn_id`` said it will close (e.g. HTTP/2 GOAWAY): an available one
        closes now, one in use drains (no new leases) and closes when its last lease comes back.
        ``min_size`` is refilled. False if the pool has no such established connection."""
        st = self._st
        conn = st.conns.get(conn_id)
        if conn is None:
            return False
        state = conn.state
        if state is _IDLE:
            st.idle_set.remove(conn)
            self._life.close(conn, CLOSE_WILL_CLOSE, how=ConnInput.WILL_CLOSE)
            self._hand.dispatch(now)
            return True
        if state is _CHECKING or state is _RESETTING:  # used by no one: closed now
            self._life.close(conn, CLOSE_WILL_CLOSE, how=ConnInput.WILL_CLOSE)
            self._hand.dispatch(now)
            return True
        if state is _LEASED:
            st.idle_set.discard_open(conn)
            if conn.streams == 1 and conn.probe_started is not None:
                # in use only by its keep-alive probe: as good as idle, closed now
                st.probes.drop(conn)
                self._life.close(conn, CLOSE_WILL_CLOSE)
                self._hand.dispatch(now)
                return True
            self._life.fire(conn, ConnInput.WILL_CLOSE)
            regate(conn)  # draining: no fast path
            if st.observed:
                st.events.append(
                    ConnectionDrainingEvent(
                        address=st.address, connection_id=conn.id, streams_in_use=conn.streams
                    )
                )
            return True
        return state is _DRAINING

    def set_max_streams(self, conn_id: int, max_streams: int, now: float) -> bool:
        """Connection ``conn_id`` now serves at most ``max_streams`` leases at once (e.g. HTTP/2
        SETTINGS). An increase serves waiting requests at once; a decrease takes no lease back
        but gives no new one until its use falls below the new limit. False if the pool has no
        such established connection (the change is then ignored)."""
        st = self._st
        conn = st.conns.get(conn_id)
        if conn is None or conn.state is _CONNECTING or conn.state is _BACKING_OFF:
            return False
        previous = conn.max_streams
        conn.max_streams = max_streams
        regate(conn)
        if conn.state is _LEASED:
            if (
                conn.streams < max_streams
                and self._life.perished(conn, now, check_idle=False) is None
                # (beyond max_size, a resize's surplus: no new lease, as ``_release_stream``)
                and not self._hand.beyond_limit(conn)
            ):
                if max_streams > 1:
                    st.idle_set.add_open(conn)
            else:
                st.idle_set.discard_open(conn)
        if st.observed and previous != max_streams:
            st.events.append(
                MaxStreamsChangedEvent(
                    address=st.address,
                    connection_id=conn.id,
                    max_streams=max_streams,
                    previous=previous,
                )
            )
        self._hand.dispatch(now)
        return True

    def hold(self, held: Hold, now: float) -> None:
        """Watch the lease ``held`` (just checked out): report it if still out ``leak_timeout``
        seconds from now."""
        self._st.leaks.hold(held, now)

    def unhold(self, held: Hold) -> None:
        """The watched lease ``held`` was given back."""
        self._st.leaks.unhold(held)

    def lease_collected(self, lease: Hold | Conn, now: float) -> None:
        """A lease was garbage-collected while still out (``lease``: its watch if it was
        watched, else its connection): report it and close its connection (it may be
        mid-protocol), so that it is not lost. Reported whether or not the pool is observed."""
        st = self._st
        conn = st.leaks.collected(lease, now, st.events)
        if conn is not None:
            error = ResourceWarning(f"lease on connection {conn.id} garbage-collected while out")
            self._hand.discard(conn, now, error)
