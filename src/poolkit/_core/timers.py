"""One heap of deadlines for every timer of the pool.

Rules of this module
--------------------
* Entries are never removed from the middle: an entry whose target no longer wants it (a request
  served before its deadline, a rescheduled sweep) goes stale and is skipped when it surfaces.
  The owner says which entries are live through the ``is_live`` callback.
* Stale entries are counted (``note_stale``) and the heap is rebuilt from its live entries once
  they are more than half of it, so a busy pool with long timeouts does not grow without bound.
* The heap holds ``(when, seq, entry)``: C compares the tuples (the time, then the push's
  unique number: FIFO among equal times), never the entries (a Python ``__lt__`` on every
  comparison of a push cost a waiting checkout about 30 bytecodes, on the path of every
  checkout that waits with a timeout).
* ``dirty`` turns true when a push makes an entry the earliest; the front end then re-arms its
  one real timer with ``take_deadline``, which clears it (the one read here that writes what a
  caller sees: its name says it takes). Removing the earliest never sets it: an early wake-up is
  harmless.
"""

from __future__ import annotations

import enum
import heapq
import itertools
from collections.abc import Callable
from typing import Any, final


class TimerKind(enum.IntEnum):
    DEADLINE = 1  #: a waiting request's timeout
    IDLE_SWEEP = 2  #: the oldest available connection reaches max_idle_time
    BACKGROUND = 3  #: a background maintenance run
    CONNECT_TIMEOUT = 4  #: a connect attempt ran out of time
    KEEP_ALIVE = 5  #: an idle connection is due for a keep-alive probe
    PROBE_TIMEOUT = 6  #: a keep-alive probe ran out of time
    BACKOFF = 7  #: a backing-off slot's wait before its connect retry is over
    LEAK = 8  #: a watched lease has been out for leak_timeout
    HOOK_TIMEOUT = 9  #: a connection's check or reset (``Hooks``) ran out of time
    CONNECT_LOST = 10  #: an abandoned connect has not returned long after (``lost_after``)
    WAIT_LINE = 11  #: the earliest deadline of the waiting requests in line (``waiters``)


@final
class TimerEntry:
    __slots__ = ("kind", "seq", "target", "when")

    def __init__(self, when: float, seq: int, kind: TimerKind, target: Any) -> None:
        self.when = when
        self.seq = seq
        self.kind = kind
        self.target = target

    def __repr__(self) -> str:
        return f"<TimerEntry {self.kind.name} at {self.when}>"


@final
class TimerHeap:
    __slots__ = ("_heap", "_is_live", "_seq", "_stale", "dirty")

    def __init__(self, is_live: Callable[[TimerEntry], bool]) -> None:
        self._heap: list[tuple[float, int, TimerEntry]] = []
        self._seq = itertools.count()
        self._stale = 0
        self._is_live = is_live
        self.dirty = False

    def __len__(self) -> int:
        return len(self._heap)

    def push(self, when: float, kind: TimerKind, target: Any = None) -> TimerEntry:
        seq = next(self._seq)
        entry = TimerEntry(when, seq, kind, target)
        heap = self._heap
        if not heap or when < heap[0][0]:  # (seq is the largest yet: at an equal time, later)
            self.dirty = True
        heapq.heappush(heap, (when, seq, entry))
        return entry

    def note_stale(self) -> None:
        """One entry in the heap no longer matters; compact when they dominate."""
        self._stale += 1
        if self._stale > 64 and self._stale * 2 > len(self._heap):
            self._heap = [item for item in self._heap if self._is_live(item[2])]
            heapq.heapify(self._heap)
            self._stale = 0

    def next_deadline(self) -> float | None:
        """The earliest live deadline, dropping stale entries from the top."""
        heap = self._heap
        while heap:
            if self._is_live(heap[0][2]):
                return heap[0][0]
            heapq.heappop(heap)
            if self._stale:
                self._stale -= 1
        return None

    def take_deadline(self) -> float | None:
        """The earliest live deadline, for the front end to arm its timer with: taken, so
        ``dirty`` is cleared (until a push makes an entry the earliest again)."""
        self.dirty = False
        return self.next_deadline()

    def pop_due(self, now: float) -> TimerEntry | None:
        """The earliest live entry due at ``now``, removed; ``None`` when none is due."""
        heap = self._heap
        while heap and heap[0][0] <= now:
            entry = heapq.heappop(heap)[2]
            if self._is_live(entry):
                return entry
            if self._stale:
                self._stale -= 1
        return None

    def clear(self) -> None:
        self._heap.clear()
        self._stale = 0
        self.dirty = True
