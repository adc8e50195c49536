"""The idle set: the pool's available connections, the multiplexed ones with a stream free, and
the idle sweep that closes those idle for ``max_idle_time``.

Rules of this module
--------------------
* ``stack`` holds the available connections (state IDLE); one leaves it before it is leased,
  probed or closed. It is a stack: check-in pushes on the right, checkout pops from the right
  (the most recently used first; from the left with ``idle_order="fifo"``, the pool's
  ``CoreState.fifo``: ``take``, the one definition of that order), so the left end is the
  longest parked (a connection back from a keep-alive probe is parked anew, its idle time
  running on). It is only ever changed in place: ``PoolCore`` holds the same deque (and the
  same ``open`` dict), and ``take`` and ``put_back`` are its methods.
* ``open`` holds multiplexed connections in use with a stream free (and not perished when put
  there): an ordered set, oldest first; leases go there before they take an idle connection.
* ``sweep`` is the one live IDLE_SWEEP timer (or ``None``); it is armed for the available
  connection that may next close for idleness (kept ones never do).
* It closes nothing: it hands back the connections to close (idle too long, or perished as the
  pool says), and the pool closes them.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import final

from .records import _KEPT, Conn
from .timers import TimerEntry, TimerHeap, TimerKind


def idle_expired(idle_since: float, max_idle: float, now: float) -> bool:
    """The one definition of "idle for ``max_idle_time``", used by the sweep, by a checkout
    meeting the connection (``_perished``) and by a probe's end: the time the sweep is due,
    ``idle_since + max_idle`` (the sum, as every timer is computed), has come. (``now -
    idle_since >= max_idle`` differs from it in floats: at the sweep's own time, a checkout
    could hand out what the sweep closes.)"""
    return idle_since + max_idle <= now


@final
class IdleSet:
    """Available connections (a LIFO stack), multiplexed ones with room, and the idle sweep."""

    __slots__ = ("max_idle", "open", "put_back", "stack", "sweep", "take", "timers")

    def __init__(self, timers: TimerHeap, max_idle: float | None, fifo: bool) -> None:
        #: available connections, longest parked first (``PoolCore`` reads it directly on its
        #: fast paths: see "Fast paths" in ``handout``)
        self.stack: deque[Conn] = deque()
        #: ``take()`` pops the connection a checkout takes: the most recently used, the longest
        #: parked with ``fifo`` (``idle_order="fifo"``, fixed for the pool's life);
        #: ``put_back(conn)`` returns one just taken to where it was (the stack's own methods,
        #: bound: the checkout's fast path calls them)
        self.take: Callable[[], Conn]
        self.put_back: Callable[[Conn], None]
        if fifo:
            self.take, self.put_back = self.stack.popleft, self.stack.appendleft
        else:
            self.take, self.put_back = self.stack.pop, self.stack.append
        #: multiplexed connections in use with a stream free, oldest first (values unused)
        self.open: dict[Conn, None] = {}
        self.sweep: TimerEntry | None = None
        self.timers = timers
        self.max_idle = max_idle

    def push(self, conn: Conn) -> None:
        """``conn`` is available (the most recently used)."""
        self.stack.append(conn)

    def add_open(self, conn: Conn) -> None:
        """The multiplexed ``conn``, in use, has a stream free for a new lease."""
        self.open[conn] = None

    def discard_open(self, conn: Conn) -> None:
        """The multiplexed ``conn`` takes no new lease (full, perished, draining or closed)."""
        self.open.pop(conn, None)

    def remove(self, conn: Conn) -> None:
        """Take the available ``conn`` off the stack (to probe or close it)."""
        self.stack.remove(conn)

    def take_if(self, why: Callable[[Conn], str | None], then: Callable[[Conn, str], None]) -> None:
        """Take off the stack every connection for which ``why`` gives a reason, calling
        ``then(conn, reason)`` for each as it is met (longest parked first; it must not change
        the stack); the others keep their order."""
        stack = self.stack
        keep: list[Conn] = []
        for conn in stack:
            reason = why(conn)
            if reason is None:
                keep.append(conn)
            else:
                then(conn, reason)
        if len(keep) != len(stack):
            stack.clear()
            stack.extend(keep)

    def take_expired(self, now: float) -> list[Conn]:
        """Take off the stack the connections idle for ``max_idle_time`` (never kept ones)."""
        max_idle = self.max_idle
        assert max_idle is not None
        stack = self.stack
        # (idle_expired is the sum the sweep's timer is due at: a connection left here would
        # re-arm the sweep at ``now`` and ``fire_timers`` would never end)
        expired = [
            c for c in stack if c.role is not _KEPT and idle_expired(c.idle_since, max_idle, now)
        ]
        if expired:
            gone = set(expired)
            keep = [c for c in stack if c not in gone]
            stack.clear()
            stack.extend(keep)
        return expired

    def parked(self, conn: Conn) -> bool:
        """``conn`` was just pushed in a pool with ``max_idle_time``: move the sweep earlier if it
        may close first. Returns whether a timer was pushed."""
        max_idle = self.max_idle
        if max_idle is None or conn.role is _KEPT:
            return False
        when = conn.idle_since + max_idle
        sweep = self.sweep
        if sweep is not None and sweep.when <= when:
            return False
        if sweep is not None:
            self.timers.note_stale()
        self.sweep = self.timers.push(when, TimerKind.IDLE_SWEEP)
        return True

    def arm_sweep(self) -> None:
        """Arm the sweep (after it ran) for the available connection that may next close for
        idleness, if any. (Not always the leftmost: a keep-alive probe returns a connection to
        the right end with its idle time running on.)"""
        max_idle = self.max_idle
        assert max_idle is not None
        since = min((c.idle_since for c in self.stack if c.role is not _KEPT), default=None)
        if since is None:
            self.sweep = None
        else:
            self.sweep = self.timers.push(since + max_idle, TimerKind.IDLE_SWEEP)

    def drain(self) -> list[Conn]:
        """Empty the set (the pool closes): the available connections, longest parked first."""
        self.open.clear()
        conns = list(self.stack)
        self.stack.clear()
        return conns

    def clear(self) -> None:
        """Forget everything (the pool closed or forked; the timer heap is cleared too)."""
        self.stack.clear()
        self.open.clear()
        self.sweep = None
