"""The wait queue: checkouts that wait for a connection, oldest first.

Rules of this module
--------------------
* One FIFO of :class:`~poolkit._core.records.Request` (an ``OrderedDict`` used as an ordered
  set): O(1) append, pop-oldest and cancel. A queued request is in it exactly while it waits;
  what it becomes once out (served, failed, timed out, cancelled) is the caller's business, and
  a request out of the queue is never put back.
* Deadlines in line: a request whose deadline is no earlier than every deadline queued before
  it since the queue was last empty (the common case: every checkout waits the same timeout) is
  *in line* and pushes nothing on the timer heap. One entry, ``line`` (``TimerKind.WAIT_LINE``),
  stands for them all: at the earliest deadline of the requests in line when it was armed, or
  earlier (that request left since: the line is checked early, which is harmless). When it
  surfaces, ``line_due`` takes out every request at the front that is due and re-arms the line at
  the next one's deadline. Every request in line is behind the requests in line with earlier
  deadlines and behind nothing that outlives it, so the front is the only place to look: a request
  without a deadline ends the line until the queue is empty (``tail`` is then infinite), and a
  request out of line has an earlier deadline than every request in line queued after it.
* A request out of line (its deadline earlier than one queued before it) has an entry of its own
  in the heap (``TimerKind.DEADLINE``), and ``heaped`` set. Taken out before its deadline, the
  entry goes stale (``note_stale``); taken out because the entry surfaced (``expire``), it does
  not: the heap popped it already.
* A checkout that waits with a deadline costs a comparison, not a push on the heap (about 100
  bytecodes of a waiting checkout: the push, the entry, the stale count and the liveness checks
  when it surfaces or the heap is compacted).
* It knows nothing of connections, events or the pool's state.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator
from typing import Final, final

from .records import _WAITING, Request
from .timers import TimerEntry, TimerHeap, TimerKind

_INF: Final = float("inf")


@final
class WaitQueue:
    """The pool's waiting requests, oldest first."""

    __slots__ = ("line", "queue", "tail", "timers")

    def __init__(self, timers: TimerHeap) -> None:
        #: the requests, oldest first (values unused). ``PoolCore`` reads it directly on its fast
        #: paths (see "Fast paths" in ``handout``); everything else goes through the methods here.
        self.queue: OrderedDict[Request, None] = OrderedDict()
        self.timers = timers
        #: the latest deadline in line since the queue was last empty (inf: a request without a
        #: deadline ended the line; read only while the queue holds requests)
        self.tail = _INF
        #: the line's timer entry (None: not armed)
        self.line: TimerEntry | None = None

    def __len__(self) -> int:
        return len(self.queue)

    def __iter__(self) -> Iterator[Request]:
        return iter(self.queue)

    def add(self, req: Request) -> None:
        """Queue ``req`` (waiting, not queued before) and arm its deadline: in line, or on the
        heap."""
        queue = self.queue
        deadline = req.deadline
        if deadline is None:
            self.tail = _INF
        elif queue and deadline < self.tail:  # out of line
            req.heaped = True
            self.timers.push(deadline, TimerKind.DEADLINE, req)
        else:
            if not queue:  # a new line (behind others, the line is armed at or before it already)
                line = self.line  # (armed perhaps for a request gone, at a deadline later)
                if line is None or line.when > deadline:
                    if line is not None:
                        self.timers.note_stale()
                    self.line = self.timers.push(deadline, TimerKind.WAIT_LINE)
            self.tail = deadline
        queue[req] = None
        req.queued = True

    def pop_oldest(self) -> Request:
        """Take the oldest waiting request out (the queue must not be empty)."""
        req, _ = self.queue.popitem(last=False)
        if req.heaped:
            self.timers.note_stale()
        return req

    def cancel(self, req: Request) -> None:
        """Take the waiting ``req`` out before its deadline."""
        del self.queue[req]
        if req.heaped:
            self.timers.note_stale()

    def expire(self, req: Request) -> None:
        """Take ``req`` out: its deadline entry surfaced (and is off the heap already)."""
        del self.queue[req]

    def line_due(self, when: float) -> list[Request]:
        """The line's entry surfaced at ``when``: the requests at the front whose deadlines are
        due then, taken out (the caller fails them), oldest first; the line re-armed at the
        deadline of the first one left, if it has one."""
        self.line = None
        queue = self.queue
        due: list[Request] = []
        for req in queue:
            deadline = req.deadline
            if deadline is None:  # (nothing in line behind it)
                break
            if deadline > when:
                self.line = self.timers.push(deadline, TimerKind.WAIT_LINE)
                break
            due.append(req)
        for req in due:
            del queue[req]
            if req.heaped:  # (due with its own entry: that one is stale now)
                self.timers.note_stale()
        return due

    def clear(self) -> None:
        """Forget every request (after a fork: they are the parent's); the heap is cleared too."""
        self.queue.clear()
        self.line = None

    @staticmethod
    def timer_is_live(entry: TimerEntry) -> bool:
        """Whether a DEADLINE entry still matters: its request still waits for that deadline."""
        req: Request = entry.target
        return req.state is _WAITING and req.deadline == entry.when
