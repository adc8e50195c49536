"""The wait queue: checkouts that wait for a connection, oldest first.

Rules of this module
--------------------
* One FIFO of :class:`~poolkit._core.records.Request` (an ``OrderedDict`` used as an ordered
  set): O(1) append, pop-oldest and cancel. A queued request is in it exactly while it waits;
  what it becomes once out (served, failed, timed out, cancelled) is the caller's business, and
  a request out of the queue is never put back.
* A queued request with a deadline has one entry in the timer heap (``TimerKind.DEADLINE``),
  pushed when it is queued. Taken out before its deadline, the entry goes stale (``note_stale``);
  taken out because the entry surfaced (``expire``), it does not: the heap popped it already.
* It knows nothing of connections, events or the pool's state.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator
from typing import final

from .records import _WAITING, Request
from .timers import TimerEntry, TimerHeap, TimerKind


@final
class WaitQueue:
    """The pool's waiting requests, oldest first."""

    __slots__ = ("queue", "timers")

    def __init__(self, timers: TimerHeap) -> None:
        #: the requests, oldest first (values unused). ``PoolCore`` reads it directly on its fast
        #: paths (see "Fast paths" in ``handout``); everything else goes through the methods here.
        self.queue: OrderedDict[Request, None] = OrderedDict()
        self.timers = timers

    def __len__(self) -> int:
        return len(self.queue)

    def __iter__(self) -> Iterator[Request]:
        return iter(self.queue)

    def add(self, req: Request) -> None:
        """Queue ``req`` (waiting, not queued before) and arm its deadline."""
        self.queue[req] = None
        req.queued = True
        if req.deadline is not None:
            self.timers.push(req.deadline, TimerKind.DEADLINE, req)

    def pop_oldest(self) -> Request:
        """Take the oldest waiting request out (the queue must not be empty)."""
        req, _ = self.queue.popitem(last=False)
        if req.deadline is not None:
            self.timers.note_stale()
        return req

    def cancel(self, req: Request) -> None:
        """Take the waiting ``req`` out before its deadline."""
        del self.queue[req]
        if req.deadline is not None:
            self.timers.note_stale()

    def expire(self, req: Request) -> None:
        """Take ``req`` out: its deadline entry surfaced (and is off the heap already)."""
        del self.queue[req]

    def clear(self) -> None:
        """Forget every request (after a fork: they are the parent's); the heap is cleared too."""
        self.queue.clear()

    @staticmethod
    def timer_is_live(entry: TimerEntry) -> bool:
        """Whether a DEADLINE entry still matters: its request still waits for that deadline."""
        req: Request = entry.target
        return req.state is _WAITING and req.deadline == entry.when
