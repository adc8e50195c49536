"""The pool's life and its timers: ready, clear, close, fork; deadlines, idle sweeps, background
runs; parking a connection (which arms its timers) and failing requests. :class:`Lifecycle` is
one of the classes that make up :class:`~poolkit._core.pool.PoolCore` (see ``fields``).

Rules of this module
--------------------
* Same as ``pool``: pure, ``now`` from the caller, output only through ``actions``/``events``.
* ``clear`` increments the generation *before* the PoolClearedEvent and always schedules a
  background run at once. Outside load-balanced mode it emits nothing if the pool was already
  paused, and interrupts old connections before it fails the waiters (the order of the CMAP spec
  tests); in that mode the pool stays as it is and the wait queue stays (``_clear_service``).
* A timer entry is live only while its target still wants it (``_timer_is_live``, which asks
  the collaborator that owns the entry); everything else is skipped when it surfaces.
* A failed request is completed here only (``_fail``): counted, told, and handed back.
"""

from __future__ import annotations

from typing import Any, assert_never

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
from .actions import CompleteRequest
from .failures import ConnectFailures
from .health import Health
from .hooks import HookRuns
from .keepalive import Probes
from .leaks import LeakWatch
from .records import (
    _BACKING_OFF,
    _CHECKING,
    _CLOSED,
    _CONNECTING,
    _DRAINING,
    _LEASED,
    _PAUSED,
    _READY,
    _RESETTING,
    FORGOTTEN_AT_FORK,
    Conn,
    ConnInput,
    ConnState,
    Request,
    RequestState,
)
from .timers import TimerEntry, TimerKind
from .waiters import WaitQueue


class Lifecycle(Health):
    """The pool's life (ready, clear, close, fork), its timers, and failing requests."""

    __slots__ = ()

    def ready(self, now: float) -> None:
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
        self,
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
            raise ValueError(
                "clear(service_id=...) needs a pool with PoolOptions(load_balanced=True)"
            )
        was_paused = self.state is _PAUSED
        old_generation = self.generation
        self._set_state(_PAUSED, self.generation + 1)
        self.clear_cause = cause
        if not was_paused and self.observed:
            self.events.append(
                PoolClearedEvent(
                    address=self.address, interrupt_in_use_connections=interrupt_in_use
                )
            )
        if interrupt_in_use:
            self._interrupt(lambda c: c.generation <= old_generation)
        self._fail_all_waiters(now, self._cleared_error, CHECKOUT_CONNECTION_ERROR)
        self._schedule_background(now)

    def _clear_service(self, now: float, service_id: Any, interrupt_in_use: bool) -> None:
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
                lambda c: (
                    c.state is not _CONNECTING
                    and c.service_id in generations
                    and c.generation <= generations[c.service_id]
                )
            )
            # The wait queue stays (CMAP): the room the closed connections leave serves it now.
            self._dispatch(now)
        self._schedule_background(now)

    def _interrupt(self, applies: Any) -> None:
        """Close in-use and pending connections of the cleared generation (CMAP interrupt).
        Not a backing-off slot (it takes the new generation), nor a connection being checked or
        reset (in use by no one: stale now, it closes when its check or reset ends, and a check
        keeps covering its waiter till then)."""
        for conn in list(self.conns.values()):
            state = conn.state
            if (state is _LEASED or state is _DRAINING or state is _CONNECTING) and applies(conn):
                self._close(conn, CLOSE_STALE)

    def close(self, now: float) -> None:
        if self.state is _CLOSED:
            return
        self._set_state(_CLOSED, self.generation)
        for conn in self.idle_set.drain():
            self._close(conn, CLOSE_POOL_CLOSED)
        for conn in list(self.conns.values()):
            if conn.state is _CONNECTING:
                self._close(conn, CLOSE_POOL_CLOSED)
            elif conn.state is _BACKING_OFF:
                self._drop(conn)  # a slot for a retry: never announced
            elif conn.probe_started is not None:
                self._end_probe_at_close(conn)  # the pool's own lease: given back now
            elif conn.state is _CHECKING or conn.state is _RESETTING:
                self._close(conn, CLOSE_POOL_CLOSED)  # its check or reset is ignored
        self.failures.stop()
        self._fail_all_waiters(
            now, lambda: PoolClosedError(address=self.address), CHECKOUT_POOL_CLOSED
        )
        self.timers.clear()
        self.idle_set.sweep = self._background = None
        if self.observed:
            self.events.append(PoolClosedEvent(address=self.address))

    def reset_after_fork(self) -> None:
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
        self.idle_set.clear()
        self.wait_queue.clear()
        self._counts = [0] * len(ConnState)
        self._abandoned = 0
        self.roles.clear()
        self.service_generations.clear()
        self.failures.stop()
        self._set_state(self.state, self.generation + 1)
        self.timers.clear()
        self._background = None
        self.actions = []
        self.events = []
        if self.state is not _CLOSED:
            if self.observed:
                self.events.append(PoolClearedEvent(address=self.address))
            self._schedule_background(float("-inf"))

    def fire_timers(self, now: float) -> None:
        """Run every timer due at ``now``."""
        timers = self.timers
        while (entry := timers.pop_due(now)) is not None:
            kind = entry.kind
            if kind is TimerKind.DEADLINE:
                req: Request = entry.target
                self.wait_queue.expire(req)
                self._fail_timeout(req, now)
            elif kind is TimerKind.IDLE_SWEEP:
                self.idle_set.sweep = None
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
                self.leaks.report(entry.target, now, self.events, collected=False)  # once
            elif kind is TimerKind.HOOK_TIMEOUT:
                self._hook_timed_out(entry.target, now)
            elif kind is TimerKind.CONNECT_LOST:
                self._connect_lost(entry.target, now)
            elif kind is TimerKind.CONNECT_TIMEOUT:
                conn: Conn = entry.target
                timeout = self.options.connect_timeout
                assert timeout is not None
                error = ConnectTimeoutError(address=self.address, timeout=timeout)
                self.connect_failed(conn, now, error, returned=False)
            else:  # (a new kind of timer is a type error until it is handled here)
                assert_never(kind)

    def _timer_is_live(self, entry: TimerEntry) -> bool:
        """Whether ``entry`` still matters (the timer heap's ``is_live``): asked of its owner."""
        kind = entry.kind
        if kind is TimerKind.DEADLINE:
            return WaitQueue.timer_is_live(entry)
        if kind is TimerKind.IDLE_SWEEP:
            return entry is self.idle_set.sweep
        if kind is TimerKind.BACKGROUND:
            return entry is self._background
        if kind is TimerKind.CONNECT_TIMEOUT:
            conn: Conn = entry.target
            return conn.state is _CONNECTING
        if kind is TimerKind.LEAK:
            return LeakWatch.timer_is_live(entry)
        if kind is TimerKind.BACKOFF:
            return ConnectFailures.timer_is_live(entry)
        if kind is TimerKind.HOOK_TIMEOUT:
            return HookRuns.timer_is_live(entry)
        if kind is TimerKind.CONNECT_LOST:
            lost: Conn = entry.target
            return lost.abandoned
        if kind is TimerKind.KEEP_ALIVE or kind is TimerKind.PROBE_TIMEOUT:
            return Probes.timer_is_live(entry)
        assert_never(kind)  # (a new kind of timer is a type error until it is handled here)

    def _schedule_background(self, when: float) -> None:
        if self.state is _CLOSED or when == float("inf"):
            return
        current = self._background
        if current is not None:
            if current.when <= when:
                return
            self.timers.note_stale()
        self._background = self.timers.push(when, TimerKind.BACKGROUND)

    def _run_background(self, now: float) -> None:
        """A background run: close perished available connections, refill ``min_size``."""
        if self.idle_set.stack:
            self.idle_set.take_if(lambda c: self._perished(c, now), self._close)
        self._maybe_connect(now, fill_min=True)
        self._schedule_background(now + self.options.background_interval)

    def _sweep_idle(self, now: float) -> None:
        """Close the available connections idle for ``max_idle_time`` (kept ones never are).

        Waiting requests are served first: an available connection a waiter can take is used, not
        closed (with hand-off at once this is only a safeguard)."""
        self._dispatch(now)
        for conn in self.idle_set.take_expired(now):
            self._close(conn, CLOSE_IDLE)
        self.idle_set.arm_sweep()
        self._dispatch(now)

    # ------------------------------------------------------------------ parking, failing requests

    def _push_idle(self, conn: Conn, now: float) -> None:
        """Park ``conn`` (a new connection): available from ``now``."""
        self.idle_set.push(conn)
        if self.clocked:
            self._parked(conn, now)

    def _parked(self, conn: Conn, now: float) -> bool:
        """``conn`` was just made available in a clocked pool: arm its keep-alive probe and the
        idle sweep for it. Returns whether a timer was pushed."""
        pushed = False
        if self.probes.options is not None:
            self.probes.arm(conn, now)
            pushed = True
        return self.idle_set.parked(conn) or pushed

    def _fail(self, req: Request, error: BaseException, reason: str, now: float) -> None:
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

    def _fail_timeout(self, req: Request, now: float) -> None:
        error = WaitQueueTimeoutError(address=self.address, waited=now - req.started, stats=None)
        self._fail(req, error, CHECKOUT_TIMEOUT, now)
        error.stats = self.stats()
        error.explain(self.options.max_size)

    def _fail_all_waiters(self, now: float, make_error: Any, reason: str) -> None:
        queue = self.wait_queue
        while queue:
            self._fail(queue.pop_oldest(), make_error(), reason, now)

    def _cleared_error(self) -> PoolClearedError:
        return PoolClearedError(address=self.address, cause=self.clear_cause)
