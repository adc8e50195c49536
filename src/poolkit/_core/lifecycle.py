"""The pool's life and its timers: ready, clear, close, fork; deadlines, idle sweeps, background
runs. :class:`Lifecycle` is the top collaborator of :class:`~poolkit._core.pool.PoolCore`: it
calls ``Health``, ``Handout`` and ``ConnectionLife`` and reads ``CoreState`` (``state`` says who
calls whom).

Rules of this module
--------------------
* Same as ``handout``: pure, ``now`` from the caller, output only through ``actions``/``events``.
* ``clear`` increments the generation *before* the PoolClearedEvent and always schedules a
  background run at once. Outside load-balanced mode it emits nothing if the pool was already
  paused, and interrupts old connections before it fails the waiters (the order of the CMAP spec
  tests); in that mode the pool stays as it is and the wait queue stays (``_clear_service``).
* ``resize`` decides everything before it changes anything: a closed pool, an adaptive one or
  limits that ``PoolOptions`` refuses raise, the pool unchanged. Then the options, the size
  limit and the roles change together, the available connections beyond the new limits close
  (overflow ones, the ones a checkout would take last), and the waiters are served and the pool
  filled as after any change (``Handout.dispatch``); connections out, checked or reset beyond
  them are overflow, closed when they come back (``Handout.surplus``).
* A timer entry is live only while its target still wants it (``CoreState.timer_is_live``,
  which asks the collaborator that owns the entry); everything else is skipped when it surfaces.
"""

from __future__ import annotations

import dataclasses
from typing import Any, assert_never

from ..errors import ConnectTimeoutError, PoolClosedError
from ..events import (
    CHECKOUT_CONNECTION_ERROR,
    CHECKOUT_POOL_CLOSED,
    CLOSE_IDLE,
    CLOSE_POOL_CLOSED,
    CLOSE_STALE,
    PoolClearedEvent,
    PoolClosedEvent,
    PoolReadyEvent,
)
from ..options import PoolOptions
from .connection_life import ConnectionLife
from .handout import Handout
from .health import Health
from .records import (
    _BACKING_OFF,
    _CHECKING,
    _CLOSED,
    _CONNECTING,
    _DRAINING,
    _IDLE,
    _LEASED,
    _OVERFLOW,
    _PAUSED,
    _READY,
    _RESETTING,
    FORGOTTEN_AT_FORK,
    Conn,
    ConnInput,
    ConnState,
    Request,
    regate,
)
from .state import CoreState
from .timers import TimerKind


class Lifecycle:
    """The pool's life (ready, clear, close, fork) and its timers."""

    __slots__ = ("_hand", "_health", "_life", "_st")

    def __init__(self, st: CoreState, life: ConnectionLife, hand: Handout, health: Health) -> None:
        self._st = st
        self._life = life
        self._hand = hand
        self._health = health

    def ready(self, now: float) -> None:
        st = self._st
        if st.state is _CLOSED:
            raise PoolClosedError(address=st.address, operation="mark ready a")
        if st.state is _READY:
            return
        self._hand.set_state(_READY, st.generation)
        if st.observed:
            st.events.append(PoolReadyEvent(address=st.address))
        self._life.maybe_connect(now, fill_min=True)
        if st.background is None:
            self._schedule_background(now + st.options.background_interval)

    def clear(
        self,
        now: float,
        *,
        interrupt_in_use: bool = False,
        service_id: Any = None,
        cause: BaseException | None = None,
    ) -> None:
        st = self._st
        if st.state is _CLOSED:
            return
        if st.lb:
            self._clear_service(now, service_id, interrupt_in_use)
            return
        if service_id is not None:
            raise ValueError(
                "clear(service_id=...) needs a pool with PoolOptions(load_balanced=True)"
            )
        was_paused = st.state is _PAUSED
        old_generation = st.generation
        self._hand.set_state(_PAUSED, st.generation + 1)
        st.clear_cause = cause
        if not was_paused and st.observed:
            st.events.append(
                PoolClearedEvent(address=st.address, interrupt_in_use_connections=interrupt_in_use)
            )
        if interrupt_in_use:
            self._interrupt(lambda c: c.generation <= old_generation)
        self._hand.fail_all_waiters(now, self._hand.cleared_error, CHECKOUT_CONNECTION_ERROR)
        self._schedule_background(now)

    def _clear_service(self, now: float, service_id: Any, interrupt_in_use: bool) -> None:
        st = self._st
        if service_id is None:
            self._hand.set_state(st.state, st.generation + 1)
            for entry in st.service_generations.values():
                entry[0] += 1
            generations = {sid: entry[0] - 1 for sid, entry in st.service_generations.items()}
        else:
            found = st.service_generations.get(service_id)
            generations = {}
            if found is not None:
                found[0] += 1
                generations[service_id] = found[0] - 1
        if st.observed:
            st.events.append(
                PoolClearedEvent(
                    address=st.address,
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
            self._hand.dispatch(now)
        self._schedule_background(now)

    def _interrupt(self, applies: Any) -> None:
        """Close in-use and pending connections of the cleared generation (CMAP interrupt).
        Not a backing-off slot (it takes the new generation), nor a connection being checked or
        reset (in use by no one: stale now, it closes when its check or reset ends, and a check
        keeps covering its waiter till then)."""
        for conn in list(self._st.conns.values()):
            state = conn.state
            if (state is _LEASED or state is _DRAINING or state is _CONNECTING) and applies(conn):
                self._life.close(conn, CLOSE_STALE)

    def close(self, now: float) -> None:
        st = self._st
        if st.state is _CLOSED:
            return
        self._hand.set_state(_CLOSED, st.generation)
        for conn in st.idle_set.drain():
            self._life.close(conn, CLOSE_POOL_CLOSED)
        for conn in list(st.conns.values()):
            if conn.state is _CONNECTING:
                self._life.close(conn, CLOSE_POOL_CLOSED)
            elif conn.state is _BACKING_OFF:
                self._life.drop(conn)  # a slot for a retry: never announced
            elif conn.probe_started is not None:
                self._health.end_probe_at_close(conn)  # the pool's own lease: given back now
            elif conn.state is _CHECKING or conn.state is _RESETTING:
                self._life.close(conn, CLOSE_POOL_CLOSED)  # its check or reset is ignored
        st.failures.stop()
        self._hand.fail_all_waiters(
            now, lambda: PoolClosedError(address=st.address), CHECKOUT_POOL_CLOSED
        )
        st.timers.clear()
        st.idle_set.sweep = st.background = None
        if st.observed:
            st.events.append(PoolClosedEvent(address=st.address))

    def resize(
        self, now: float, min_size: int, max_size: int, max_connecting: int | None = None
    ) -> PoolOptions:
        """New ``min_size`` and ``max_size`` (and ``max_connecting``, unless ``None``) for the
        running pool; returns the options now in force. ``PoolBase.resize`` says what it does."""
        st = self._st
        if st.state is _CLOSED:
            raise PoolClosedError(address=st.address, operation="resize a")
        if st.adaptive is not None:
            raise ValueError(
                "resize() of a pool with PoolOptions.adaptive: the limit it finds stays within "
                "max_size; make a new pool to change it"
            )
        old = st.options
        connecting = old.max_connecting if max_connecting is None else max_connecting
        # validated as the constructor validates them (soft_max_size apart: then kept within)
        options = dataclasses.replace(
            old,
            min_size=min_size,
            max_size=max_size,
            max_connecting=connecting,
            soft_max_size=None,
        )
        if old.soft_max_size is not None:
            soft = max(old.soft_max_size, options.min_size)
            if options.max_size:
                soft = min(soft, options.max_size)
            options = dataclasses.replace(options, soft_max_size=soft)
        # decided: nothing below raises
        st.options = options
        st.size_limit = options.max_size or 1 << 62
        self._hand.limits_changed()
        idle = st.idle_set
        # the roles: first lost by the available connections a checkout takes last, then by
        # the others (out, connecting, checked, reset), the newest first
        last_taken = list(reversed(idle.stack)) if st.fifo else list(idle.stack)
        others = [c for c in reversed(st.conns.values()) if c.state is not _IDLE]
        soft_limit = st.size_limit if options.soft_max_size is None else options.soft_max_size
        st.roles.resize(options.min_size, soft_limit, last_taken + others)
        life = self._life
        # available ones beyond the limits (now overflow) close, and those no longer kept that
        # were idle for max_idle_time (or perished otherwise: the checkout would close them)
        idle.take_if(
            lambda c: CLOSE_IDLE if c.role is _OVERFLOW else life.perished(c, now), life.close
        )
        if self._hand.over_limit():  # (multiplexed ones out take no new lease: "surplus")
            for conn in [c for c in idle.open if c.role is _OVERFLOW]:
                idle.discard_open(conn)
        if st.max_idle is not None:  # (connections no longer kept may close for idleness)
            if idle.sweep is not None:
                st.timers.note_stale()
            idle.arm_sweep()
        self._hand.dispatch(now)
        return options

    def align_to_wall(self, offset: float) -> None:
        """The wall clock's reading less the front end's clock's (``time.time() - now``): what
        keeps time across hosts; the adaptive limit's base rounds align on it. Not called (a
        test clock): they align on the front end's clock."""
        adaptive = self._st.adaptive
        if adaptive is not None:
            adaptive.epoch = offset

    def client_lag(self, lag: float, now: float) -> None:
        """The client's own delay at ``now``, as the front end measures it (its event loop's:
        how long a callback made ready waited to run): an adaptive pool reads its operations'
        time less it (``AdaptiveLimit.client_lag``). Nothing else changes; no output."""
        adaptive = self._st.adaptive
        if adaptive is not None:
            adaptive.client_lag(lag, now)

    def client_load(self, load: float, now: float) -> None:
        """The client's own saturation over the interval ending at ``now``, as the front end
        measures it (the part of it its event loop's thread ran or waited for a processor): an
        adaptive pool does not read its operations' slowing as the server queueing where it is
        0.9 or more (``AdaptiveLimit.client_load``). Nothing else changes; no output."""
        adaptive = self._st.adaptive
        if adaptive is not None:
            adaptive.client_load(load, now)

    def reset_after_fork(self) -> None:
        """Forget every connection and waiter without closing anything (they belong to the
        parent process) and move to a new generation; the pool keeps its state.

        The records forgotten are closed (reason ``FORGOTTEN_AT_FORK``, no action, no event): a
        lease from before the fork released, discarded or garbage-collected in the child then comes
        back to a closed connection, which closes nothing (the parent's session stays open)."""
        st = self._st
        for conn in st.conns.values():
            self._life.fire(conn, ConnInput.CLOSE)
            regate(conn)
            conn.close_reason = FORGOTTEN_AT_FORK
        st.conns.clear()
        st.idle_set.clear()
        st.wait_queue.clear()
        st.counts[:] = [0] * len(ConnState)  # (in place: the containers are never replaced)
        st.abandoned = 0
        st.roles.clear()
        st.service_generations.clear()
        st.failures.stop()
        self._hand.set_state(st.state, st.generation + 1)
        st.timers.clear()
        st.background = None
        st.actions.clear()
        st.events.clear()
        if st.state is not _CLOSED:
            if st.observed:
                st.events.append(PoolClearedEvent(address=st.address))
            self._schedule_background(float("-inf"))

    def fire_timers(self, now: float) -> None:
        """Run every timer due at ``now``."""
        st = self._st
        timers = st.timers
        while (entry := timers.pop_due(now)) is not None:
            kind = entry.kind
            if kind is TimerKind.DEADLINE:
                req: Request = entry.target
                st.wait_queue.expire(req)
                self._hand.fail_timeout(req, now)
            elif kind is TimerKind.WAIT_LINE:
                for req in st.wait_queue.line_due(entry.when):
                    self._hand.fail_timeout(req, now)
            elif kind is TimerKind.IDLE_SWEEP:
                st.idle_set.sweep = None
                self._sweep_idle(now)
            elif kind is TimerKind.BACKGROUND:
                st.background = None
                self._run_background(now)
            elif kind is TimerKind.KEEP_ALIVE:
                self._health.start_probe(entry.target, now)
            elif kind is TimerKind.PROBE_TIMEOUT:
                self._health.probe_timed_out(entry.target, now)
            elif kind is TimerKind.BACKOFF:
                self._health.backoff_over(entry.target, now)
            elif kind is TimerKind.LEAK:
                st.leaks.report(entry.target, now, st.events, collected=False)  # once
            elif kind is TimerKind.HOOK_TIMEOUT:
                self._health.hook_timed_out(entry.target, now)
            elif kind is TimerKind.CONNECT_LOST:
                self._life.connect_lost(entry.target, now)
            elif kind is TimerKind.CONNECT_TIMEOUT:
                conn: Conn = entry.target
                timeout = st.options.connect_timeout
                assert timeout is not None
                error = ConnectTimeoutError(address=st.address, timeout=timeout)
                self._health.connect_failed(conn, now, error, returned=False)
            else:  # (a new kind of timer is a type error until it is handled here)
                assert_never(kind)

    def _schedule_background(self, when: float) -> None:
        st = self._st
        if st.state is _CLOSED or when == float("inf"):
            return
        current = st.background
        if current is not None:
            if current.when <= when:
                return
            st.timers.note_stale()
        st.background = st.timers.push(when, TimerKind.BACKGROUND)

    def _run_background(self, now: float) -> None:
        """A background run: close perished available connections, refill ``min_size``."""
        st = self._st
        if st.idle_set.stack:
            st.idle_set.take_if(lambda c: self._life.perished(c, now), self._life.close)
        self._life.maybe_connect(now, fill_min=True)
        self._schedule_background(now + st.options.background_interval)

    def _sweep_idle(self, now: float) -> None:
        """Close the available connections idle for ``max_idle_time`` (kept ones never are).

        Waiting requests are served first: an available connection a waiter can take is used, not
        closed (with hand-off at once this is only a safeguard)."""
        st = self._st
        self._hand.dispatch(now)
        for conn in st.idle_set.take_expired(now):
            self._life.close(conn, CLOSE_IDLE)
        st.idle_set.arm_sweep()
        self._hand.dispatch(now)
