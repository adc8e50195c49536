"""Pool events: frozen, slotted, keyword-only values named as the CMAP monitoring interfaces.

A listener is any callable taking one event, or a :class:`PoolListener` subclass whose methods
(``pool_created``, ``connection_checked_out``...) are called by event type. A listener that raises
is logged on ``poolkit.events`` and never breaks the pool.

Durations are seconds as floats. ``reason`` values are the spec's strings (the ``CLOSE_*`` and
``CHECKOUT_*`` constants); poolkit adds, where the spec has no case: ``"cancelled"`` for a checkout
whose caller gave up (task cancelled), ``"tooManyWaiters"`` for one refused by ``max_waiting``,
``"lifetime"`` for a connection retired by ``max_lifetime`` and ``"willClose"`` for one that said
it will close.
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
    "CHECKOUT_TOO_MANY_WAITERS",
    "CLOSE_ERROR",
    "CLOSE_IDLE",
    "CLOSE_LIFETIME",
    "CLOSE_WILL_CLOSE",
    "CLOSE_POOL_CLOSED",
    "CLOSE_STALE",
    "ConnectionCheckOutFailedEvent",
    "ConnectionCheckOutStartedEvent",
    "ConnectionCheckedInEvent",
    "ConnectionCheckedOutEvent",
    "ConnectionClosedEvent",
    "ConnectionCreatedEvent",
    "ConnectionReadyEvent",
    "Listener",
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
}

_log = logging.getLogger("poolkit.events")


def deliver(listeners: Iterable[Listener], event: PoolEvent) -> None:
    """Call every listener with ``event``; log, never propagate, what a listener raises."""
    for listener in listeners:
        try:
            listener(event)
        except Exception:
            _log.exception("poolkit listener %r raised on %s", listener, type(event).__name__)
