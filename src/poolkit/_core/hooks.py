"""Checks and resets (``PoolOptions.hooks``): when an available connection needs a check before
it is handed out, and the check or reset running on a connection.

Rules of this module
--------------------
* It owns two fields of a connection record: ``hook_started`` (set exactly while a check or a
  reset runs on it, which its state says: CHECKING or RESETTING) and ``hook_timer`` (that run's
  timeout). Nothing else assigns them.
* A run's end (its result, its timeout, or the pool closing the connection) clears
  ``hook_started`` first (``end``), so a late result of a run already ended is ignored.
* It changes no state, parks, serves or closes nothing, and builds no event: the pool does,
  around the calls here (``Health`` in ``health``).
* ``configure`` and ``is_broken`` are the front ends' alone (part of a connect; a judgement on an
  error in the caller's block); the core never sees them.
"""

from __future__ import annotations

from typing import final

from ..errors import HookTimeoutError
from ..options import Hooks
from .records import _CHECKING, Conn
from .timers import TimerEntry, TimerHeap, TimerKind


@final
class HookRuns:
    """The checks and resets of one pool."""

    __slots__ = ("check_after", "resets", "timeout", "timers")

    def __init__(self, timers: TimerHeap, hooks: Hooks | None) -> None:
        self.timers = timers
        #: how long a connection may sit available and still be handed out unchecked; ``None``:
        #: no check hook
        self.check_after = None if hooks is None or hooks.check is None else hooks.check_after
        #: whether connections are reset on check-in
        self.resets = hooks is not None and hooks.reset is not None
        self.timeout = None if hooks is None else hooks.timeout

    def needs_check(self, conn: Conn, now: float) -> bool:
        """Whether the available ``conn`` must be checked before it is handed out."""
        after = self.check_after
        # (the sum, as timers are computed: available at 9.9, checked at 19.9 for 10 s)
        return after is not None and conn.idle_since + after <= now

    def start(self, conn: Conn, now: float) -> None:
        """A check or reset of ``conn`` runs from ``now`` (its state says which)."""
        conn.hook_started = now
        timeout = self.timeout
        if timeout is not None:
            conn.hook_timer = self.timers.push(now + timeout, TimerKind.HOOK_TIMEOUT, conn)

    def end(self, conn: Conn) -> float | None:
        """The run on ``conn`` is over: when it started, or ``None`` if it was over already."""
        started = conn.hook_started
        if started is not None:
            conn.hook_started = None
            if conn.hook_timer is not None:
                conn.hook_timer = None
                self.timers.note_stale()
        return started

    def timeout_error(self, conn: Conn, address: str) -> HookTimeoutError:
        """The run on ``conn`` timed out (its HOOK_TIMEOUT entry surfaced)."""
        timeout = self.timeout
        assert timeout is not None
        conn.hook_timer = None
        hook = "check" if conn.state is _CHECKING else "reset"
        return HookTimeoutError(address=address, connection_id=conn.id, hook=hook, timeout=timeout)

    @staticmethod
    def timer_is_live(entry: TimerEntry) -> bool:
        """Whether a HOOK_TIMEOUT entry still matters."""
        conn: Conn = entry.target
        return conn.hook_timer is entry and conn.hook_started is not None
