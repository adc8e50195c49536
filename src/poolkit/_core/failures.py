"""Connect failures: the run of failed connects, its retries (``connect_retry``: backoff) and the
circuit breaker.

Rules of this module
--------------------
* ``row`` counts the connects failed since the last one that succeeded (with or without
  ``connect_retry``), from ``since``. A run that no checkout was told of is said once
  (``ConnectFailingEvent``, observed or not: the front end logs it as a warning), and then its end
  (``ConnectRecoveredEvent``).
* With ``connect_retry`` a failed connect does not fail a waiter: the pool enters the *failing*
  state (``failing``, a :class:`Failing`). One slot (a record in BACKING_OFF, unseen by the front
  end until its retry starts: ``Failing.pending``) holds the place of the next attempt, and no
  other connect starts until a connect succeeds. The circuit opens only on a failure, after
  ``circuit_breaker_after`` seconds of failing with no connection open; it closes on a success.
* It makes and closes no record and fails no request: it says what the pool must do (retry in
  how long, trip the circuit, drop a slot) and the pool does it (``Health`` in ``health``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import final

from ..errors import CircuitOpenError
from ..events import (
    CircuitClosedEvent,
    CircuitOpenedEvent,
    ConnectFailingEvent,
    ConnectRecoveredEvent,
    PoolEvent,
)
from ..options import Backoff
from .records import _BACKING_OFF, Conn
from .timers import TimerEntry


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


@final
class ConnectFailures:
    """The failed connects of one pool, and what they make it do."""

    __slots__ = ("address", "failing", "rand", "retry", "row", "since", "told")

    def __init__(self, retry: Backoff | None, rand: Callable[[], float], address: str) -> None:
        self.retry = retry  #: ``connect_retry`` (``None``: a failed connect fails a waiter)
        self.rand = rand  #: the jitter of the backoff: a uniform draw in [0, 1) (an input)
        self.address = address
        self.row = 0  #: connects failed since the last one that succeeded
        self.since = 0.0  #: when the first of them failed
        #: whether that run of failures was told (``ConnectFailingEvent``) as no checkout was
        self.told = False
        #: connect_retry's failing state, ``None`` while connects succeed
        self.failing: Failing | None = None

    @property
    def circuit_open(self) -> bool:
        failing = self.failing
        return failing is not None and failing.open

    def failed(self, now: float) -> int:
        """A connect failed: the run grows. Returns its length."""
        if not self.row:
            self.since = now
        self.row += 1
        return self.row

    def unseen(self, conn: Conn, error: BaseException, events: list[PoolEvent]) -> None:
        """A connect failed and no checkout is told: said once per run of failures."""
        if not self.told:
            self.told = True
            events.append(
                ConnectFailingEvent(
                    address=self.address, connection_id=conn.id, error=error, failures=self.row
                )
            )

    def retried(self, conn: Conn, error: BaseException, now: float) -> Failing | None:
        """connect_retry: ``conn``'s connect failed (the pool is failing from now if it was not).
        Returns the failing state if a retry of it is to be planned (``conn`` was the attempt
        retried, or none was), else ``None`` (another attempt is the one retried: this one is
        just gone)."""
        failing = self.failing
        if failing is None:
            failing = self.failing = Failing(now)
        failing.error = error
        if failing.pending is not None and failing.pending is not conn:
            return None
        failing.failures += 1
        failing.pending = None
        return failing

    def attempt(self, conn: Conn) -> None:
        """``conn`` (a backing-off slot, or a connect just started) is the next attempt."""
        failing = self.failing
        assert failing is not None
        failing.pending = conn

    def trips(self, now: float) -> bool:
        """Whether the circuit is due to open now (the pool checks that no connection is open)."""
        failing = self.failing
        assert failing is not None and self.retry is not None
        trip = self.retry.circuit_breaker_after
        return trip is not None and not failing.open and now - failing.since >= trip

    def delay(self) -> float:
        """The wait before the next attempt of the failing run."""
        failing = self.failing
        assert failing is not None and self.retry is not None
        return self.retry.delay(failing.failures, self.rand())

    def open_circuit(self, now: float, events: list[PoolEvent] | None) -> None:
        """Open the circuit (told to ``events`` when given: the pool is observed); the pool then
        fails its waiters with ``circuit_error``."""
        failing = self.failing
        assert failing is not None
        failing.open = True
        if events is not None:
            assert failing.error is not None
            events.append(
                CircuitOpenedEvent(
                    address=self.address,
                    failing_for=now - failing.since,
                    failures=failing.failures,
                    error=failing.error,
                )
            )

    def circuit_error(self, now: float) -> CircuitOpenError:
        failing = self.failing
        assert failing is not None
        return CircuitOpenError(
            address=self.address,
            failing_for=now - failing.since,
            failures=failing.failures,
            cause=failing.error,
        )

    def succeeded(self, now: float, events: list[PoolEvent], observed: bool) -> Conn | None:
        """A connect succeeded: the run of failures ends (told if it was told), and the failing
        state with it (an open circuit closes). Returns the backing-off slot the pool must drop
        (no retry needed any more), if any."""
        if self.told:
            self.told = False
            events.append(
                ConnectRecoveredEvent(
                    address=self.address, failures=self.row, failing_for=now - self.since
                )
            )
        self.row = 0
        failing = self.failing
        if failing is None:
            return None
        self.failing = None
        if failing.open and observed:
            events.append(CircuitClosedEvent(address=self.address, failing_for=now - failing.since))
        slot = failing.pending
        return slot if slot is not None and slot.state is _BACKING_OFF else None

    def forget(self, conn: Conn) -> None:
        """``conn`` closed: if it was the attempt retried, the retry is gone (plan another)."""
        failing = self.failing
        if failing is not None and failing.pending is conn:
            failing.pending = None

    def stop(self) -> None:
        """The pool closed or forked: no failing state any more."""
        self.failing = None

    @staticmethod
    def timer_is_live(entry: TimerEntry) -> bool:
        """Whether a BACKOFF entry still matters: its slot still backs off."""
        slot: Conn = entry.target
        return slot.state is _BACKING_OFF
