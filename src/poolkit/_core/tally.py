"""The pool's running totals, and the statistics snapshot built from them and from its state.

Rules of this module
--------------------
* Pure bookkeeping: the core adds to a :class:`Tally` on its slow paths (connects, closes, failed
  checkouts, waits); successful checkouts are one integer of the core itself (``checkouts``),
  the only count its fast paths touch.
* A snapshot is built only when asked (``snapshot``); it copies everything, so it never changes
  afterwards and holds no reference into the core.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final, final

from ..stats import PoolStats
from .records import Conn, ConnState, Request, Role

if TYPE_CHECKING:
    from .pool import PoolCore

_IDLE: Final = ConnState.IDLE
_LEASED: Final = ConnState.LEASED
_CONNECTING: Final = ConnState.CONNECTING
_S_CLOSED: Final = ConnState.CLOSED


@final
class Tally:
    """Cumulative counts of one pool, from its creation."""

    __slots__ = (
        "closed",
        "connect_attempts",
        "connect_failures",
        "created",
        "failed",
        "wait_max",
        "wait_total",
        "waits",
    )

    def __init__(self) -> None:
        self.connect_attempts = 0  #: connects started
        self.connect_failures = 0  #: connects that raised or timed out
        self.created = 0  #: connections established
        self.closed: dict[str, int] = {}  #: connections closed, by reason
        self.failed: dict[str, int] = {}  #: checkouts failed, by reason
        self.waits = 0  #: checkouts that waited in the queue (until served, failed, cancelled)
        self.wait_total = 0.0  #: seconds they waited, in all
        self.wait_max = 0.0  #: the longest of those waits

    def waited(self, seconds: float) -> None:
        self.waits += 1
        self.wait_total += seconds
        if seconds > self.wait_max:
            self.wait_max = seconds

    def count(self, table: dict[str, int], reason: str) -> None:
        table[reason] = table.get(reason, 0) + 1


# ---------------------------------------------------------------------- views of the core
# (methods and properties of PoolCore, bound there by name)


def total(self: PoolCore) -> int:
    return len(self.conns)


def available(self: PoolCore) -> int:
    return len(self._idle)


def pending(self: PoolCore) -> int:
    return self._counts[_CONNECTING]


def in_use(self: PoolCore) -> int:
    return self.count(_LEASED) + self._counts[ConnState.DRAINING]


def waiting(self: PoolCore) -> int:
    return len(self._waiters)


def count(self: PoolCore, state: ConnState) -> int:
    """Connections in ``state`` (closed ones are not kept: 0)."""
    if state is _IDLE:
        return len(self._idle)
    if state is _LEASED:
        counts = self._counts
        return (
            len(self.conns)
            - len(self._idle)
            - counts[_CONNECTING]
            - counts[ConnState.BACKING_OFF]
            - counts[ConnState.DRAINING]
        )
    if state is _S_CLOSED:
        return 0
    return self._counts[state]


def waiters(self: PoolCore) -> list[Request]:
    """The waiting requests, oldest first (for tests and diagnostics)."""
    return list(self._waiters)


def idle_connections(self: PoolCore) -> list[Conn]:
    """Available connections, longest parked first (for tests and diagnostics)."""
    return list(self._idle)


def snapshot(core: PoolCore) -> PoolStats:
    """The statistics of ``core`` now (O(connections))."""
    counts = core._counts
    kept = demand = overflow = 0
    in_use = capacity = 0
    for conn in core.conns.values():
        role = conn.role
        if role is Role.KEPT:
            kept += 1
        elif role is Role.DEMAND:
            demand += 1
        else:
            overflow += 1
        state = conn.state
        in_use += conn.streams
        if state is ConnState.IDLE or state is ConnState.LEASED:
            capacity += conn.max_streams
    tally = core.tally
    return PoolStats(
        state=core.state,
        generation=core.generation,
        total=len(core.conns),
        available=len(core._idle),
        pending=counts[ConnState.CONNECTING],
        in_use=core.in_use,
        waiting=len(core._waiters),
        backing_off=counts[ConnState.BACKING_OFF],
        abandoned=core._abandoned,
        kept=kept,
        demand=demand,
        overflow=overflow,
        streams_in_use=in_use,
        stream_capacity=capacity,
        connections_created=tally.created,
        connections_closed=dict(tally.closed),
        connect_attempts=tally.connect_attempts,
        connect_failures=tally.connect_failures,
        checkouts=core.checkouts,
        checkout_failures=dict(tally.failed),
        waits=tally.waits,
        wait_time_total=tally.wait_total,
        wait_time_max=tally.wait_max,
        circuit_open=core._failing is not None and core._failing.open,
    )
