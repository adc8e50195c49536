"""Pool events: frozen, slotted, keyword-only values named as the CMAP monitoring interfaces.

A listener is any callable taking one event, or a :class:`PoolListener` subclass whose methods
(``pool_created``, ``connection_checked_out``...) are called by event type. A listener that raises
is logged on ``poolkit.events`` and never breaks the pool.

Durations are seconds as floats. ``reason`` values are the spec's strings (the ``CLOSE_*`` and
``CHECKOUT_*`` constants); poolkit adds, where the spec has no case: ``"cancelled"`` for a checkout
whose caller gave up (task cancelled), ``"tooManyWaiters"`` for one refused by ``max_waiting``,
``"circuitOpen"`` for one refused by ``connect_retry``'s open circuit, ``"lifetime"`` for a
connection retired by ``max_lifetime`` and ``"willClose"`` for one that said it will close.

Beside the CMAP events the pool has its own (connect attempts, keep-alive probes, draining,
stream limits, the circuit breaker, leaked leases), delivered the same way.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterable
from typing import Any, ClassVar, Final

__all__ = [
    "CHECKOUT_CANCELLED",
    "CHECKOUT_CONNECTION_ERROR",
    "CHECKOUT_POOL_CLOSED",
    "CHECKOUT_TIMEOUT",
    "CHECKOUT_CIRCUIT_OPEN",
    "CHECKOUT_TOO_MANY_WAITERS",
    "CLOSE_ERROR",
    "CLOSE_IDLE",
    "CLOSE_LIFETIME",
    "CLOSE_WILL_CLOSE",
    "CLOSE_POOL_CLOSED",
    "CLOSE_STALE",
    "AdaptiveLimitChangedEvent",
    "CircuitClosedEvent",
    "ConnectFailingEvent",
    "ConnectLostEvent",
    "ConnectRecoveredEvent",
    "CircuitOpenedEvent",
    "ConnectAttemptFailedEvent",
    "ConnectionCheckFailedEvent",
    "ConnectionCheckOutFailedEvent",
    "ConnectionCheckOutStartedEvent",
    "ConnectionCheckedInEvent",
    "ConnectionCheckedOutEvent",
    "ConnectionClosedEvent",
    "ConnectionCreatedEvent",
    "ConnectionDrainingEvent",
    "ConnectionReadyEvent",
    "ConnectionResetFailedEvent",
    "KeepAliveFailedEvent",
    "KeepAliveStartedEvent",
    "KeepAliveSucceededEvent",
    "LeaseLeakedEvent",
    "Listener",
    "MaxStreamsChangedEvent",
    "PoolClearedEvent",
    "PoolClosedEvent",
    "PoolCreatedEvent",
    "PoolEvent",
    "PoolListener",
    "PoolReadyEvent",
]

# ConnectionClosedEvent.reason
CLOSE_STALE: Final = "stale"
CLOSE_IDLE: Final = "idle"
CLOSE_ERROR: Final = "error"
CLOSE_POOL_CLOSED: Final = "poolClosed"
CLOSE_LIFETIME: Final = "lifetime"  #: poolkit's: older than max_lifetime
CLOSE_WILL_CLOSE: Final = "willClose"  #: poolkit's: the connection said it will close (GOAWAY)
# ConnectionCheckOutFailedEvent.reason
CHECKOUT_POOL_CLOSED: Final = "poolClosed"
CHECKOUT_TIMEOUT: Final = "timeout"
CHECKOUT_CONNECTION_ERROR: Final = "connectionError"
CHECKOUT_CANCELLED: Final = "cancelled"
CHECKOUT_TOO_MANY_WAITERS: Final = "tooManyWaiters"  #: poolkit's: max_waiting reached
CHECKOUT_CIRCUIT_OPEN: Final = "circuitOpen"  #: poolkit's: connect_retry's circuit is open


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class PoolEvent:
    """Base of every pool event. ``address`` is the pool's endpoint."""

    cmap_name: ClassVar[str] = ""
    address: str


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class PoolCreatedEvent(PoolEvent):
    """The pool was created. ``options``: the non-default options, CMAP names, ms values."""

    cmap_name: ClassVar[str] = "ConnectionPoolCreated"
    options: dict[str, Any]


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class PoolReadyEvent(PoolEvent):
    """The pool was marked ready."""

    cmap_name: ClassVar[str] = "ConnectionPoolReady"


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class PoolClearedEvent(PoolEvent):
    """The pool was cleared (after the generation was incremented)."""

    cmap_name: ClassVar[str] = "ConnectionPoolCleared"
    service_id: Any = None
    interrupt_in_use_connections: bool = False


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class PoolClosedEvent(PoolEvent):
    """The pool was closed."""

    cmap_name: ClassVar[str] = "ConnectionPoolClosed"


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ConnectionCreatedEvent(PoolEvent):
    """The pool created a connection record and starts establishing it."""

    cmap_name: ClassVar[str] = "ConnectionCreated"
    connection_id: int


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ConnectionReadyEvent(PoolEvent):
    """A connection finished establishing; ``duration`` since its ConnectionCreatedEvent."""

    cmap_name: ClassVar[str] = "ConnectionReady"
    connection_id: int
    duration: float


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ConnectionClosedEvent(PoolEvent):
    """The pool closed a connection; ``error`` is set when ``reason`` is ``"error"``."""

    cmap_name: ClassVar[str] = "ConnectionClosed"
    connection_id: int
    reason: str
    error: BaseException | None = None


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ConnectionCheckOutStartedEvent(PoolEvent):
    """A checkout began."""

    cmap_name: ClassVar[str] = "ConnectionCheckOutStarted"


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ConnectionCheckOutFailedEvent(PoolEvent):
    """A checkout failed; ``duration`` since its ConnectionCheckOutStartedEvent."""

    cmap_name: ClassVar[str] = "ConnectionCheckOutFailed"
    reason: str
    duration: float
    error: BaseException | None = None


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ConnectionCheckedOutEvent(PoolEvent):
    """A checkout succeeded; ``duration`` since its ConnectionCheckOutStartedEvent."""

    cmap_name: ClassVar[str] = "ConnectionCheckedOut"
    connection_id: int
    duration: float


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ConnectionCheckedInEvent(PoolEvent):
    """A connection was checked back in."""

    cmap_name: ClassVar[str] = "ConnectionCheckedIn"
    connection_id: int


# ---------------------------------------------------------------------- poolkit's own events
# (the generic pool's; no CMAP counterpart, so their ``cmap_name`` is empty)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ConnectAttemptFailedEvent(PoolEvent):
    """A connect function raised (or ran out of ``connect_timeout``). ``failures``: connects
    failed in a row; ``retry_in``: seconds until the pool retries (``connect_retry``), ``None``
    when it does not."""

    connection_id: int
    error: BaseException
    failures: int
    retry_in: float | None


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ConnectFailingEvent(PoolEvent):
    """Connects are failing where no checkout is told (filling ``min_size``, refilling after a
    close, retrying with ``connect_retry``): once per run of failures, at its first such failure,
    whether or not anyone listens (logged as a warning on ``poolkit.pool``). ``failures``: in a
    row so far."""

    connection_id: int
    error: BaseException
    failures: int


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ConnectRecoveredEvent(PoolEvent):
    """A connect succeeded after a :class:`ConnectFailingEvent`: ``failures`` in a row over
    ``failing_for`` seconds (logged at INFO on ``poolkit.pool``)."""

    failures: int
    failing_for: float


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ConnectLostEvent(PoolEvent):
    """A connect the pool gave up on (its ``connect_timeout``, a clear) has still not returned,
    ``running_for`` seconds after it started (10 times ``connect_timeout``, at least a minute):
    it no longer counts
    against ``max_size`` and ``max_connecting``, so that a connect function that never returns
    cannot hold the pool's slots for good. Its thread (``Pool``) may linger; whatever it returns
    is closed. Logged as a warning on ``poolkit.pool``, whether or not anyone listens."""

    connection_id: int
    running_for: float


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class KeepAliveStartedEvent(PoolEvent):
    """An idle connection's keep-alive probe started."""

    connection_id: int


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class KeepAliveSucceededEvent(PoolEvent):
    """A keep-alive probe returned after ``duration`` seconds."""

    connection_id: int
    duration: float


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class KeepAliveFailedEvent(PoolEvent):
    """A keep-alive probe raised (or timed out); the connection is closed (reason ``error``)."""

    connection_id: int
    duration: float
    error: BaseException


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ConnectionCheckFailedEvent(PoolEvent):
    """``Hooks.check`` raised (or timed out) on a connection about to be handed out; it is
    closed (reason ``error``) and the checkout goes on with another."""

    connection_id: int
    duration: float
    error: BaseException


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ConnectionResetFailedEvent(PoolEvent):
    """``Hooks.reset`` raised (or timed out) on a connection just checked in; it is closed
    (reason ``error``)."""

    connection_id: int
    duration: float
    error: BaseException


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ConnectionDrainingEvent(PoolEvent):
    """A connection in use said it will close: no new leases; it closes when ``streams_in_use``
    leases have come back."""

    connection_id: int
    streams_in_use: int


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class MaxStreamsChangedEvent(PoolEvent):
    """A connection's stream limit changed (``set_max_streams``)."""

    connection_id: int
    max_streams: int
    previous: int


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class CircuitOpenedEvent(PoolEvent):
    """Connects have failed for ``failing_for`` seconds with no connection open: checkouts fail
    at once with :class:`~poolkit.CircuitOpenError` until a connect succeeds."""

    failing_for: float
    failures: int
    error: BaseException


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class CircuitClosedEvent(PoolEvent):
    """A connect succeeded after the circuit had opened; checkouts are served again."""

    failing_for: float


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class LeaseLeakedEvent(PoolEvent):
    """A lease was held longer than ``leak_timeout`` (``collected`` false: reported once, the
    lease stays valid) or was garbage-collected without being given back (``collected`` true:
    its connection is closed). ``held``: seconds it was out, and ``stack``: where it was checked
    out, both known only for leases watched with ``leak_timeout`` (else ``None`` and ``""``)."""

    connection_id: int
    held: float | None
    stack: str
    collected: bool


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class AdaptiveLimitChangedEvent(PoolEvent):
    """An adaptive pool's limit on connections in use (``PoolOptions.adaptive``) changed by more
    than ``Adaptive.report_change`` of the one last reported (``previous``: at first the initial
    limit). What it was decided from (see :class:`~poolkit.AdaptiveStats`): ``knee``, the
    connections worth holding by the throughput's ``elasticity``; ``share``, the most the
    server's queueing allows, from ``queued`` (the connections in use whose time is queueing
    in the server, by ``op_time``, typical, against ``base_op_time``, on a server the pool left;
    seconds)."""

    limit: int
    previous: int
    knee: float
    elasticity: float | None
    share: float
    op_time: float
    base_op_time: float
    queued: float = 0.0


Listener = Callable[[PoolEvent], object]


class PoolListener:
    """Base class for listeners with one method per event type (pymongo style).

    Override the methods you need; the others do nothing. An instance is itself a listener.
    """

    def pool_created(self, event: PoolCreatedEvent) -> None: ...
    def pool_ready(self, event: PoolReadyEvent) -> None: ...
    def pool_cleared(self, event: PoolClearedEvent) -> None: ...
    def pool_closed(self, event: PoolClosedEvent) -> None: ...
    def connection_created(self, event: ConnectionCreatedEvent) -> None: ...
    def connection_ready(self, event: ConnectionReadyEvent) -> None: ...
    def connection_closed(self, event: ConnectionClosedEvent) -> None: ...
    def connection_check_out_started(self, event: ConnectionCheckOutStartedEvent) -> None: ...
    def connection_check_out_failed(self, event: ConnectionCheckOutFailedEvent) -> None: ...
    def connection_checked_out(self, event: ConnectionCheckedOutEvent) -> None: ...
    def connection_checked_in(self, event: ConnectionCheckedInEvent) -> None: ...
    def connect_attempt_failed(self, event: ConnectAttemptFailedEvent) -> None: ...
    def connect_failing(self, event: ConnectFailingEvent) -> None: ...
    def connect_recovered(self, event: ConnectRecoveredEvent) -> None: ...
    def connect_lost(self, event: ConnectLostEvent) -> None: ...
    def keep_alive_started(self, event: KeepAliveStartedEvent) -> None: ...
    def keep_alive_succeeded(self, event: KeepAliveSucceededEvent) -> None: ...
    def keep_alive_failed(self, event: KeepAliveFailedEvent) -> None: ...
    def connection_check_failed(self, event: ConnectionCheckFailedEvent) -> None: ...
    def connection_reset_failed(self, event: ConnectionResetFailedEvent) -> None: ...
    def connection_draining(self, event: ConnectionDrainingEvent) -> None: ...
    def max_streams_changed(self, event: MaxStreamsChangedEvent) -> None: ...
    def circuit_opened(self, event: CircuitOpenedEvent) -> None: ...
    def circuit_closed(self, event: CircuitClosedEvent) -> None: ...
    def lease_leaked(self, event: LeaseLeakedEvent) -> None: ...
    def adaptive_limit_changed(self, event: AdaptiveLimitChangedEvent) -> None: ...

    def __call__(self, event: PoolEvent) -> None:
        getattr(self, _METHODS[type(event)])(event)


_METHODS: Final[dict[type[PoolEvent], str]] = {
    PoolCreatedEvent: "pool_created",
    PoolReadyEvent: "pool_ready",
    PoolClearedEvent: "pool_cleared",
    PoolClosedEvent: "pool_closed",
    ConnectionCreatedEvent: "connection_created",
    ConnectionReadyEvent: "connection_ready",
    ConnectionClosedEvent: "connection_closed",
    ConnectionCheckOutStartedEvent: "connection_check_out_started",
    ConnectionCheckOutFailedEvent: "connection_check_out_failed",
    ConnectionCheckedOutEvent: "connection_checked_out",
    ConnectionCheckedInEvent: "connection_checked_in",
    ConnectAttemptFailedEvent: "connect_attempt_failed",
    ConnectFailingEvent: "connect_failing",
    ConnectRecoveredEvent: "connect_recovered",
    ConnectLostEvent: "connect_lost",
    KeepAliveStartedEvent: "keep_alive_started",
    KeepAliveSucceededEvent: "keep_alive_succeeded",
    KeepAliveFailedEvent: "keep_alive_failed",
    ConnectionCheckFailedEvent: "connection_check_failed",
    ConnectionResetFailedEvent: "connection_reset_failed",
    ConnectionDrainingEvent: "connection_draining",
    MaxStreamsChangedEvent: "max_streams_changed",
    CircuitOpenedEvent: "circuit_opened",
    CircuitClosedEvent: "circuit_closed",
    LeaseLeakedEvent: "lease_leaked",
    AdaptiveLimitChangedEvent: "adaptive_limit_changed",
}

_log = logging.getLogger("poolkit.events")


def deliver(listeners: Iterable[Listener], event: PoolEvent) -> None:
    """Call every listener with ``event``; log, never propagate, what a listener raises."""
    for listener in listeners:
        try:
            listener(event)
        except Exception:
            _log.exception("poolkit listener %r raised on %s", listener, type(event).__name__)
