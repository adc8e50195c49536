"""Keep-alive probes: when an idle connection is due for one, and the probe in flight.

Rules of this module
--------------------
* It owns two fields of a connection record: ``ka_timer`` (while the connection is idle, the
  timer of its next probe; while it is probed, the probe's timeout) and ``probe_started`` (set
  exactly while a probe is in flight). Nothing else assigns them.
* A probe's end (its result, a timeout, or the pool dropping it) clears ``probe_started`` first
  (``end``), so a late result of a probe already ended is ignored.
* It does not lease, park or close connections, and builds no event: the pool does, around the
  calls here (``Lifecycle``/``Health`` in ``lifecycle`` and ``health``). A probe is a lease the
  pool holds: it takes one stream, which ``drop`` gives back.
"""

from __future__ import annotations

from typing import final

from ..errors import KeepAliveTimeoutError
from ..options import KeepAlive
from .records import _IDLE, Conn
from .timers import TimerEntry, TimerHeap, TimerKind


@final
class Probes:
    """The keep-alive probes of one pool (``PoolOptions.keep_alive``)."""

    __slots__ = ("options", "timers")

    def __init__(self, timers: TimerHeap, options: KeepAlive | None) -> None:
        self.timers = timers
        self.options = options  #: ``None``: connections are never probed

    def stop(self, conn: Conn) -> None:
        """``conn``'s keep-alive timer (its next probe, or its probe's timeout) is off, if any."""
        if conn.ka_timer is not None:
            conn.ka_timer = None
            self.timers.note_stale()

    def arm(self, conn: Conn, now: float) -> None:
        """``conn`` was just parked: its next probe is one interval from now."""
        options = self.options
        assert options is not None
        self.stop(conn)
        conn.ka_timer = self.timers.push(now + options.interval, TimerKind.KEEP_ALIVE, conn)

    def fired(self, conn: Conn) -> None:
        """``conn``'s probe timer surfaced (the heap popped it): the pool probes it next."""
        conn.ka_timer = None

    def start(self, conn: Conn, now: float) -> None:
        """The pool leased ``conn`` for its probe (after ``fired``): the probe runs from
        ``now``, with its timeout armed."""
        conn.probe_started = now
        options = self.options
        assert options is not None
        if options.timeout is not None:
            conn.ka_timer = self.timers.push(now + options.timeout, TimerKind.PROBE_TIMEOUT, conn)

    def end(self, conn: Conn) -> float | None:
        """The probe on ``conn`` is over: when it started, or ``None`` if it was over already (a
        late result)."""
        started = conn.probe_started
        if started is not None:
            conn.probe_started = None
            self.stop(conn)
        return started

    def drop(self, conn: Conn) -> None:
        """Forget the probe in flight on ``conn`` (its result will be ignored) and the stream it
        holds; the caller fires the connection's transition."""
        conn.probe_started = None
        self.stop(conn)
        conn.streams -= 1

    def timeout_error(self, conn: Conn, address: str) -> KeepAliveTimeoutError:
        """The probe on ``conn`` timed out (its PROBE_TIMEOUT entry surfaced)."""
        options = self.options
        assert options is not None and options.timeout is not None
        conn.ka_timer = None
        return KeepAliveTimeoutError(
            address=address, connection_id=conn.id, timeout=options.timeout
        )

    @staticmethod
    def timer_is_live(entry: TimerEntry) -> bool:
        """Whether a KEEP_ALIVE or PROBE_TIMEOUT entry still matters."""
        conn: Conn = entry.target
        if conn.ka_timer is not entry:
            return False
        if entry.kind is TimerKind.KEEP_ALIVE:
            return conn.state is _IDLE
        return conn.probe_started is not None  # PROBE_TIMEOUT
