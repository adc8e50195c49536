"""The leak watch: leases out for longer than ``leak_timeout``, and leases garbage-collected while
out.

Rules of this module
--------------------
* A watched lease is a :class:`~poolkit._core.records.Hold` made by the front end at checkout.
  It has one LEAK entry in the timer heap until it is given back (``unhold``: the entry goes
  stale) or reported as garbage-collected; a lease still out when its entry surfaces is reported
  once and not re-armed.
* A leak is always reported (a ``LeaseLeakedEvent`` whether or not the pool is observed: the
  front end logs a warning for it).
* It never closes a connection: ``collected`` returns the one the pool must discard.
"""

from __future__ import annotations

from typing import final

from ..events import LeaseLeakedEvent, PoolEvent
from .records import FORGOTTEN_AT_FORK, Conn, Hold
from .timers import TimerEntry, TimerHeap, TimerKind


@final
class LeakWatch:
    """Watches leases for leaks; reports them to the pool's ``events``."""

    __slots__ = ("address", "timeout", "timers")

    def __init__(self, timers: TimerHeap, timeout: float | None, address: str) -> None:
        self.timers = timers
        self.timeout = timeout  #: ``leak_timeout`` (``None``: leases are not watched)
        self.address = address

    def hold(self, held: Hold, now: float) -> None:
        """Watch ``held`` (just checked out): report it if still out ``timeout`` from now."""
        timeout = self.timeout
        assert timeout is not None
        self.timers.push(now + timeout, TimerKind.LEAK, held)

    def unhold(self, held: Hold) -> None:
        """The watched lease ``held`` was given back."""
        if not held.done:
            held.done = True
            self.timers.note_stale()

    def collected(self, lease: Hold | Conn, now: float, events: list[PoolEvent]) -> Conn | None:
        """A lease was garbage-collected while still out (``lease``: its watch if it was watched,
        else its connection): report it and return the connection the pool must discard, or
        ``None`` if it is none of the pool's business any more (given back, or from before a
        fork)."""
        if type(lease) is Hold:
            if lease.done or lease.conn.close_reason is FORGOTTEN_AT_FORK:
                return None
            self.unhold(lease)
            self.report(lease, now, events, collected=True)
            return lease.conn
        assert type(lease) is Conn
        if lease.close_reason is FORGOTTEN_AT_FORK:
            return None  # a lease from before a fork, collected in the child: not this pool's
        events.append(
            LeaseLeakedEvent(
                address=self.address, connection_id=lease.id, held=None, stack="", collected=True
            )
        )
        return lease

    def report(self, held: Hold, now: float, events: list[PoolEvent], *, collected: bool) -> None:
        """Report the lease ``held`` as leaked (its LEAK entry surfaced, or it was collected)."""
        events.append(
            LeaseLeakedEvent(
                address=self.address,
                connection_id=held.conn.id,
                held=now - held.since,
                stack=held.stack,
                collected=collected,
            )
        )

    @staticmethod
    def timer_is_live(entry: TimerEntry) -> bool:
        held: Hold = entry.target
        return not held.done
