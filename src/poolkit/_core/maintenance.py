"""The pool's life and its timers: ready, clear, close, fork; deadlines, idle sweeps, background
runs; parking a connection (which arms its timers) and failing requests. These are methods of
:class:`~poolkit._core.pool.PoolCore` (bound there by name), kept in a module of their own so
that each module has one concern; they work on the same state.

Rules of this module
--------------------
* Same as ``pool``: pure, ``now`` from the caller, output only through ``actions``/``events``.
* ``clear`` increments the generation *before* the PoolClearedEvent, emits nothing if the pool
  was already paused, interrupts old connections before it fails the waiters (the order of the
  CMAP spec tests), and always schedules a background run at once.
* A timer entry is live only while its target still wants it (``_timer_is_live``); everything
  else is skipped when it surfaces.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Any, Final

from ..errors import ConnectTimeoutError, PoolClearedError, PoolClosedError, WaitQueueTimeoutError
from ..events import (
    CHECKOUT_CONNECTION_ERROR,
    CHECKOUT_POOL_CLOSED,
    CHECKOUT_TIMEOUT,
    CLOSE_IDLE,
    CLOSE_POOL_CLOSED,
    CLOSE_STALE,
    ConnectionCheckOutFailedEvent,
    PoolClearedEvent,
    PoolClosedEvent,
    PoolReadyEvent,
)
from ..stats import PoolState
from .actions import CompleteRequest
from .records import FORGOTTEN_AT_FORK, Conn, ConnInput, ConnState, Request, RequestState, Role
from .timers import TimerEntry, TimerKind

if TYPE_CHECKING:
    from .pool import PoolCore

_READY: Final = PoolState.READY
_PAUSED: Final = PoolState.PAUSED
_CLOSED: Final = PoolState.CLOSED
_WAITING: Final = RequestState.WAITING
_IDLE: Final = ConnState.IDLE
_CONNECTING: Final = ConnState.CONNECTING
_KEPT: Final = Role.KEPT


def ready(self: PoolCore, now: float) -> None:
    if self.state is _CLOSED:
        raise PoolClosedError(address=self.address, operation="mark ready a")
    if self.state is _READY:
        return
    self._set_state(_READY, self.generation)
    if self.observed:
        self.events.append(PoolReadyEvent(address=self.address))
    self._maybe_connect(now, fill_min=True)
    if self._background is None:
        self._schedule_background(now + self.options.background_interval)


def clear(
    self: PoolCore,
    now: float,
    *,
    interrupt_in_use: bool = False,
    service_id: Any = None,
    cause: BaseException | None = None,
) -> None:
    if self.state is _CLOSED:
        return
    if self._lb:
        self._clear_service(now, service_id, interrupt_in_use)
        return
    if service_id is not None:
        raise ValueError("clear(service_id=...) needs a pool with PoolOptions(load_balanced=True)")
    was_paused = self.state is _PAUSED
    old_generation = self.generation
    self._set_state(_PAUSED, self.generation + 1)
    self.clear_cause = cause
    if not was_paused and self.observed:
        self.events.append(
            PoolClearedEvent(address=self.address, interrupt_in_use_connections=interrupt_in_use)
        )
    if interrupt_in_use:
        self._interrupt(lambda c: c.generation <= old_generation)
    self._fail_all_waiters(now, self._cleared_error, CHECKOUT_CONNECTION_ERROR)
    self._schedule_background(now)


def _clear_service(self: PoolCore, now: float, service_id: Any, interrupt_in_use: bool) -> None:
    if service_id is None:
        self._set_state(self.state, self.generation + 1)
        for entry in self.service_generations.values():
            entry[0] += 1
        generations = {sid: entry[0] - 1 for sid, entry in self.service_generations.items()}
    else:
        found = self.service_generations.get(service_id)
        generations = {}
        if found is not None:
            found[0] += 1
            generations[service_id] = found[0] - 1
    if self.observed:
        self.events.append(
            PoolClearedEvent(
                address=self.address,
                service_id=service_id,
                interrupt_in_use_connections=interrupt_in_use,
            )
        )
    if interrupt_in_use:
        # Established connections only: a pending connect has no service yet (its service_id
        # is unset, not the service None) and takes its service's generation once established.
        self._interrupt(
            lambda c: c.state is not _CONNECTING
            and c.service_id in generations
            and c.generation <= generations[c.service_id]
        )
        # The wait queue stays (CMAP): the room the closed connections leave serves it now.
        self._dispatch(now)
    self._schedule_background(now)


def _interrupt(self: PoolCore, applies: Any) -> None:
    """Close in-use and pending connections of the cleared generation (CMAP interrupt)."""
    for conn in list(self.conns.values()):
        state = conn.state
        if state is not _IDLE and state is not ConnState.BACKING_OFF and applies(conn):
            self._close(conn, CLOSE_STALE)  # (a backing-off slot takes the new generation)


def close(self: PoolCore, now: float) -> None:
    if self.state is _CLOSED:
        return
    self._set_state(_CLOSED, self.generation)
    self._open.clear()
    while self._idle:
        self._close(self._idle.popleft(), CLOSE_POOL_CLOSED)
    for conn in list(self.conns.values()):
        if conn.state is _CONNECTING:
            self._close(conn, CLOSE_POOL_CLOSED)
        elif conn.state is ConnState.BACKING_OFF:
            self._drop(conn)  # a slot for a retry: never announced
        elif conn.probe_started is not None:
            self._end_probe_at_close(conn)  # the pool's own lease: given back now
    self._failing = None
    self._fail_all_waiters(now, lambda: PoolClosedError(address=self.address), CHECKOUT_POOL_CLOSED)
    self.timers.clear()
    self._idle_sweep = self._background = None
    if self.observed:
        self.events.append(PoolClosedEvent(address=self.address))


def reset_after_fork(self: PoolCore) -> None:
    """Forget every connection and waiter without closing anything (they belong to the
    parent process) and move to a new generation; the pool keeps its state.

    The records forgotten are closed (reason ``FORGOTTEN_AT_FORK``, no action, no event): a
    lease from before the fork released, discarded or garbage-collected in the child then comes
    back to a closed connection, which closes nothing (the parent's session stays open)."""
    for conn in self.conns.values():
        self._fire(conn, ConnInput.CLOSE)
        self._regate(conn)
        conn.close_reason = FORGOTTEN_AT_FORK
    self.conns.clear()
    self._idle.clear()
    self._open.clear()
    self._waiters.clear()
    self._counts = [0] * len(ConnState)
    self._abandoned = 0
    self._kept = 0
    self._overflow = 0
    self.service_generations.clear()
    self._failing = None
    self._set_state(self.state, self.generation + 1)
    self.timers.clear()
    self._idle_sweep = self._background = None
    self.actions = []
    self.events = []
    if self.state is not _CLOSED:
        if self.observed:
            self.events.append(PoolClearedEvent(address=self.address))
        self._schedule_background(float("-inf"))


def fire_timers(self: PoolCore, now: float) -> None:
    """Run every timer due at ``now``."""
    timers = self.timers
    while (entry := timers.pop_due(now)) is not None:
        kind = entry.kind
        if kind is TimerKind.DEADLINE:
            req: Request = entry.target
            del self._waiters[req]
            self._fail_timeout(req, now)
        elif kind is TimerKind.IDLE_SWEEP:
            self._idle_sweep = None
            self._sweep_idle(now)
        elif kind is TimerKind.BACKGROUND:
            self._background = None
            self._run_background(now)
        elif kind is TimerKind.KEEP_ALIVE:
            self._start_probe(entry.target, now)
        elif kind is TimerKind.PROBE_TIMEOUT:
            self._probe_timed_out(entry.target, now)
        elif kind is TimerKind.BACKOFF:
            self._backoff_over(entry.target, now)
        elif kind is TimerKind.LEAK:
            self._report_leak(entry.target, now, collected=False)  # once: not re-armed
        else:  # CONNECT_TIMEOUT
            conn: Conn = entry.target
            timeout = self.options.connect_timeout
            assert timeout is not None
            error = ConnectTimeoutError(address=self.address, timeout=timeout)
            self.connect_failed(conn, now, error, returned=False)


def _timer_is_live(self: PoolCore, entry: TimerEntry) -> bool:
    kind = entry.kind
    if kind is TimerKind.DEADLINE:
        req: Request = entry.target
        return req.state is _WAITING and req.deadline == entry.when
    if kind is TimerKind.IDLE_SWEEP:
        return entry is self._idle_sweep
    if kind is TimerKind.BACKGROUND:
        return entry is self._background
    if kind is TimerKind.CONNECT_TIMEOUT:
        conn: Conn = entry.target
        return conn.state is _CONNECTING
    return self._health_timer_is_live(entry)


def _schedule_background(self: PoolCore, when: float) -> None:
    if self.state is _CLOSED or when == float("inf"):
        return
    current = self._background
    if current is not None:
        if current.when <= when:
            return
        self.timers.note_stale()
    self._background = self.timers.push(when, TimerKind.BACKGROUND)


def _run_background(self: PoolCore, now: float) -> None:
    """A background run: close perished available connections, refill ``min_size``."""
    if self._idle:
        keep: deque[Conn] = deque()
        for conn in self._idle:
            reason = self._perished(conn, now)
            if reason is None:
                keep.append(conn)
            else:
                self._close(conn, reason)
        self._idle = keep
    self._maybe_connect(now, fill_min=True)
    self._schedule_background(now + self.options.background_interval)


def _sweep_idle(self: PoolCore, now: float) -> None:
    """Close the available connections idle for ``max_idle_time`` (kept ones never are).

    Waiting requests are served first: an available connection a waiter can take is used, not
    closed (with hand-off at once this is only a safeguard)."""
    self._dispatch(now)
    max_idle = self._max_idle
    assert max_idle is not None
    expired = [
        conn
        for conn in self._idle
        if conn.role is not Role.KEPT and now - conn.idle_since >= max_idle
    ]
    if expired:
        gone = set(expired)
        self._idle = deque(conn for conn in self._idle if conn not in gone)
        for conn in expired:
            self._close(conn, CLOSE_IDLE)
    self._arm_idle_sweep()
    self._dispatch(now)


def _arm_idle_sweep(self: PoolCore) -> None:
    """Arm the sweep for the available connection that may next close for idleness, if any.
    (Not always the leftmost: a keep-alive probe returns a connection to the right end with its
    idle time running on.)"""
    max_idle = self._max_idle
    assert max_idle is not None
    since = min((c.idle_since for c in self._idle if c.role is not Role.KEPT), default=None)
    self._idle_sweep = (
        None if since is None else self.timers.push(since + max_idle, TimerKind.IDLE_SWEEP)
    )


# ---------------------------------------------------------------------- parking, failing requests


def _push_idle(self: PoolCore, conn: Conn, now: float) -> None:
    self._idle.append(conn)
    if self.clocked:
        self._parked(conn, now)


def _parked(self: PoolCore, conn: Conn, now: float) -> bool:
    """``conn`` was just put on ``_idle`` in a clocked pool: arm its keep-alive probe and
    the idle sweep for it. Returns whether a timer was pushed."""
    pushed = False
    if self._keep_alive is not None:
        self._arm_keep_alive(conn, now)
        pushed = True
    max_idle = self._max_idle
    if max_idle is not None and conn.role is not _KEPT:
        when = conn.idle_since + max_idle
        sweep = self._idle_sweep
        if sweep is None or when < sweep.when:
            if sweep is not None:
                self.timers.note_stale()
            self._idle_sweep = self.timers.push(when, TimerKind.IDLE_SWEEP)
            pushed = True
    return pushed


def _fail(self: PoolCore, req: Request, error: BaseException, reason: str, now: float) -> None:
    req.state = RequestState.FAILED
    req.error = error
    tally = self.tally
    tally.count(tally.failed, reason)
    if req.queued:
        tally.waited(now - req.started)
    if self.observed:
        self.events.append(
            ConnectionCheckOutFailedEvent(
                address=self.address, reason=reason, duration=now - req.started, error=error
            )
        )
    if req.queued:
        self.actions.append(CompleteRequest(req))


def _fail_timeout(self: PoolCore, req: Request, now: float) -> None:
    error = WaitQueueTimeoutError(address=self.address, waited=now - req.started, stats=None)
    self._fail(req, error, CHECKOUT_TIMEOUT, now)
    error.stats = self.stats()


def _fail_all_waiters(self: PoolCore, now: float, make_error: Any, reason: str) -> None:
    while self._waiters:
        self._fail(self._pop_waiter(), make_error(), reason, now)


def _cleared_error(self: PoolCore) -> PoolClearedError:
    return PoolClearedError(address=self.address, cause=self.clear_cause)
