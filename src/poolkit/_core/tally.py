"""The pool's running totals, and the statistics snapshot built from them and from its state.

Rules of this module
--------------------
* Pure bookkeeping: the core adds to a :class:`Tally` on its slow paths (connects, closes, failed
  checkouts, waits); successful checkouts are one integer of the core itself (``checkouts``),
  the only count its fast paths touch.
* A snapshot is built only when asked (``snapshot``, from the facts the core gives it); it copies
  everything, so it never changes afterwards and holds no reference into the core.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import final

from ..stats import AdaptiveStats, PoolState, PoolStats
from .records import Conn, ConnState, Role


@final
class Tally:
    """Cumulative counts of one pool, from its creation."""

    __slots__ = (
        "checks",
        "checks_failed",
        "closed",
        "connect_attempts",
        "connect_failures",
        "created",
        "failed",
        "resets",
        "resets_failed",
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
        self.checks = 0  #: ``Hooks.check`` runs ended (passed, failed or timed out)
        self.checks_failed = 0  #: those that failed or timed out
        self.resets = 0  #: ``Hooks.reset`` runs ended
        self.resets_failed = 0  #: those that failed or timed out
        self.waits = 0  #: checkouts that waited in the queue (until served, failed, cancelled)
        self.wait_total = 0.0  #: seconds they waited, in all
        self.wait_max = 0.0  #: the longest of those waits

    def waited(self, seconds: float) -> None:
        self.waits += 1
        self.wait_total += seconds
        if seconds > self.wait_max:
            self.wait_max = seconds

    def waited_all(self, seconds: Collection[float]) -> None:
        """:meth:`waited` for each of ``seconds`` at once (the front ends' hand-offs, folded)."""
        if seconds:
            self.waits += len(seconds)
            self.wait_total += sum(seconds)
            longest = max(seconds)
            if longest > self.wait_max:
                self.wait_max = longest

    def hook_ended(self, checked: bool, *, failed: bool) -> None:
        """A check (``checked``) or a reset ended, ``failed`` or passed."""
        if checked:
            self.checks += 1
            self.checks_failed += failed
        else:
            self.resets += 1
            self.resets_failed += failed

    def count(self, table: dict[str, int], reason: str) -> None:
        table[reason] = table.get(reason, 0) + 1

    def snapshot(
        self,
        *,
        state: PoolState,
        generation: int,
        conns: Collection[Conn],
        counts: list[int],
        available: int,
        in_use: int,
        waiting: int,
        abandoned: int,
        checkouts: int,
        circuit_open: bool,
        adaptive: AdaptiveStats | None = None,
    ) -> PoolStats:
        """The statistics now, from these counts and the pool's facts given (O(connections))."""
        kept = demand = overflow = 0
        streams = capacity = 0
        for conn in conns:
            role = conn.role
            if role is Role.KEPT:
                kept += 1
            elif role is Role.DEMAND:
                demand += 1
            else:
                overflow += 1
            state_ = conn.state
            streams += conn.streams
            if state_ is ConnState.IDLE or state_ is ConnState.LEASED:
                capacity += conn.max_streams
        return PoolStats(
            state=state,
            generation=generation,
            total=len(conns),
            available=available,
            pending=counts[ConnState.CONNECTING],
            in_use=in_use,
            waiting=waiting,
            backing_off=counts[ConnState.BACKING_OFF],
            checking=counts[ConnState.CHECKING],
            resetting=counts[ConnState.RESETTING],
            abandoned=abandoned,
            kept=kept,
            demand=demand,
            overflow=overflow,
            streams_in_use=streams,
            stream_capacity=capacity,
            connections_created=self.created,
            connections_closed=dict(self.closed),
            connect_attempts=self.connect_attempts,
            connect_failures=self.connect_failures,
            checkouts=checkouts,
            checkout_failures=dict(self.failed),
            checks=self.checks,
            checks_failed=self.checks_failed,
            resets=self.resets,
            resets_failed=self.resets_failed,
            waits=self.waits,
            wait_time_total=self.wait_total,
            wait_time_max=self.wait_max,
            circuit_open=circuit_open,
            adaptive=adaptive,
        )
