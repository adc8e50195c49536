"""Stateful (model-based) tests of the pure core, ``poolkit._core.PoolCore``.

A Hypothesis state machine plays the front end: it feeds the core every kind of input in any
order (checkouts, check-ins, discards, cancellations, connect results in any order, clear with and
without interrupt, ready, close, time moving forward with ``fire_timers``), carries out the
actions the core returns, keeps its own record of what is outstanding (leases, connects owed,
requests) and checks the core's invariants after every step. When the example ends the pool is
closed, every lease returned and every owed connect reported, and nothing may be left over.

The options drawn include load-balanced mode: connects then report a service id (one of a few,
or none), ``clear(service_id=...)`` clears one service or all, and the invariants check the
per-service generations (CMAP "Load Balancer Mode").

Example counts are modest for CI; ``POOLKIT_HYPOTHESIS_EXAMPLES=5000`` (say) runs each machine
that many examples for a longer local search.
"""

from __future__ import annotations

import collections
import dataclasses
import math
import os
from typing import Any, cast

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from core_view import core_view, handout_of, state_of
from poolkit import Adaptive, Backoff, Hooks, KeepAlive, PoolOptions
from poolkit._core import (
    CloseConnection,
    CompleteRequest,
    Conn,
    ConnState,
    Hold,
    PoolCore,
    Request,
    RequestState,
    Role,
    StartCheck,
    StartConnect,
    StartKeepAlive,
    StartReset,
)
from poolkit._core.connection_life import lost_after
from poolkit.errors import (
    CircuitOpenError,
    ConnectTimeoutError,
    PoolClearedError,
    PoolClosedError,
    TooManyWaitersError,
    WaitQueueTimeoutError,
)
from poolkit.events import (
    ConnectFailingEvent,
    ConnectionCheckedInEvent,
    ConnectionCheckedOutEvent,
    ConnectionCheckOutFailedEvent,
    ConnectionCheckOutStartedEvent,
    ConnectionClosedEvent,
    ConnectionCreatedEvent,
    ConnectionReadyEvent,
    ConnectLostEvent,
    ConnectRecoveredEvent,
    LeaseLeakedEvent,
    PoolClearedEvent,
)
from poolkit.stats import PoolState


class ConnectError(Exception):
    pass


_FAILURE_ERRORS: dict[str, Any] = {
    "timeout": WaitQueueTimeoutError,
    "poolClosed": PoolClosedError,
    "connectionError": (PoolClearedError, ConnectTimeoutError, ConnectError),
    "cancelled": None,
    "tooManyWaiters": TooManyWaitersError,
    "circuitOpen": CircuitOpenError,
}


def _no_probe(connection: Any) -> None:  # pragma: no cover - the machine reports probes itself
    raise AssertionError("never called: the core only asks for probes")


_KEEP_ALIVES = [None, None, KeepAlive(1.0, _no_probe), KeepAlive(0.5, _no_probe, timeout=0.25)]
_HOOKS = [
    None,
    None,
    Hooks(check=_no_probe),
    Hooks(check=_no_probe, check_after=1.0),
    Hooks(reset=_no_probe),
    Hooks(check=_no_probe, reset=_no_probe, timeout=0.5),
]
_RETRIES = [
    None,
    None,
    Backoff(base=0.25, factor=2.0, max_delay=1.0, jitter=0.0, circuit_breaker_after=None),
    Backoff(base=0.25, factor=2.0, max_delay=1.0, jitter=0.03, circuit_breaker_after=0.0),
    Backoff(base=0.5, factor=1.5, max_delay=2.0, circuit_breaker_after=1.0),
]
_TERMINAL = (RequestState.SERVED, RequestState.FAILED, RequestState.CANCELLED)


@st.composite
def pool_options(draw: st.DrawFn) -> PoolOptions:
    max_size = draw(st.integers(0, 5))
    min_size = draw(st.integers(0, max_size if max_size else 3))
    soft = draw(st.one_of(st.none(), st.integers(min_size, max_size if max_size else 5)))
    return PoolOptions(
        max_size=max_size,
        min_size=min_size,
        soft_max_size=soft,
        max_lifetime=draw(st.sampled_from([None, None, 1.5, 4.0])),
        max_lifetime_jitter=draw(st.sampled_from([0.0, 0.1])),
        max_waiting=draw(st.sampled_from([0, 0, 1, 3])),
        idle_order=draw(st.sampled_from(["lifo", "fifo"])),
        max_connecting=draw(st.integers(1, 3)),
        max_idle_time=draw(st.sampled_from([None, 1.0, 2.5])),
        background_interval=draw(st.sampled_from([0.5, 2.0, math.inf])),
        connect_timeout=draw(st.sampled_from([None, 1.0, 3.0])),
        keep_alive=draw(st.sampled_from(_KEEP_ALIVES)),
        connect_retry=draw(st.sampled_from(_RETRIES)),
        leak_timeout=draw(st.sampled_from([None, None, 1.0])),
        load_balanced=draw(st.sampled_from([False, False, True])),
        hooks=draw(st.sampled_from(_HOOKS)),
        adaptive=draw(st.sampled_from(_ADAPTIVE)) if max_size else None,
    )


#: adaptive pools among the drawn ones: rounds of two operations, so that the limit moves within
#: a run's few steps (and its surplus is shed after half a second)
_ADAPTIVE: tuple[Adaptive | None, ...] = (
    None,
    None,
    None,
    Adaptive(window=2, round_ops=2, shed_after=0.5),
)


#: the service ids a load-balanced connect reports (``None``: a connect function that returned
#: the bare connection, which the front ends report with no service id)
_SERVICES = [1, 2, 3, None]


def _examples(default: int) -> int:
    """The example count of a machine: ``default``, or ``POOLKIT_HYPOTHESIS_EXAMPLES``."""
    return int(os.environ.get("POOLKIT_HYPOTHESIS_EXAMPLES", default))


def _stale(core: PoolCore, conn: Conn) -> bool:
    """Whether ``conn`` is behind the generation that applies to it: the pool's, or in
    load-balanced mode its service's (CMAP "stale": perished, never leased again)."""
    if not state_of(core).options.load_balanced:
        return conn.generation != core.generation
    entry = core.service_generations.get(conn.service_id)
    return entry is None or conn.generation != entry[0]


_ESTABLISHED = (
    ConnState.IDLE,
    ConnState.LEASED,
    ConnState.DRAINING,
    ConnState.CHECKING,
    ConnState.RESETTING,
)


class ConnectionObject:
    """What the fake connect function returns."""

    def __init__(self, conn_id: int) -> None:
        self.conn_id = conn_id

    def __repr__(self) -> str:
        return f"ConnectionObject({self.conn_id})"


class PoolCoreMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.core: PoolCore | None = None
        self.now = 0.0
        #: time of the last fire_timers (time only moves through ``advance``)
        self.fired_at = 0.0
        #: connects the driver still owes a report for, in the order they were started
        self.owed: list[Conn] = []
        #: every connection record the core asked to connect, by id
        self.started: dict[int, Conn] = {}
        self.started_at: dict[int, float] = {}  # id -> the time its StartConnect came
        self.firing = False  # inside fire_timers
        #: ids named in at least one CloseConnection
        self.closed_named: set[int] = set()
        #: the object given to ``connected`` for each id
        self.objects: dict[int, ConnectionObject] = {}
        #: ids whose object was named in a CloseConnection after ``connected`` set it
        self.object_closed: set[int] = set()
        #: outstanding leases, one entry per lease
        self.leases: list[Conn] = []
        #: every request made, in the order made; and the queued ones, in the order queued
        self.requests: list[Request] = []
        self.queued: list[Request] = []
        self.completions: dict[int, int] = {}  # id(req) -> CompleteRequest count
        self.cancelled: set[int] = set()  # id(req) cancelled by the driver
        self.last_state: dict[int, RequestState] = {}
        #: queued requests served, in the order the core served them
        self.served_order: list[Request] = []
        self.releases = 0
        self.served_total = 0  #: leases handed out, ever
        self.holds: list[Hold | None] = []  #: the leak watch of each lease in ``leases``
        self.reported: set[str] = set()  #: the watched leases reported as out too long
        self.closed_at = math.inf  #: when the pool was closed
        self.established_ids: set[int] = set()  #: connects the core accepted as established
        self.arrived_stale: set[int] = set()  #: ...of a generation already cleared
        #: connections the core asked to probe whose result the driver still owes
        self.probing: list[Conn] = []
        #: the connection whose probe is returning now (``probe_done``), while it returns
        self.probe_returned: Conn | None = None
        #: checks and resets asked for and not yet reported back (``Hooks``): (record, is a check)
        self.hooking: list[tuple[Conn, bool]] = []
        #: checks started by ``lease_checking`` for the caller (``Pool``) and not yet reported
        self.caller_checks: list[Conn] = []
        #: events seen: checkouts started, checkouts ended (out or failed), check-ins
        self.ev_started = self.ev_ended = self.ev_checked_in = 0
        #: whether ``resize`` lowered ``max_size`` below what the pool held (then it may hold
        #: more until its surplus is back)
        self.shrunk = False

    # ------------------------------------------------------------------ driving

    @initialize(
        options=pool_options(),
        observed=st.booleans(),
        start_ready=st.sampled_from([True, True, True, False]),
    )
    def setup(self, options: PoolOptions, observed: bool, start_ready: bool) -> None:
        self.core = PoolCore(options, "host:27017", observed=observed)
        self.core.take()
        if start_ready:
            self._do(lambda core: core.ready(self.now))

    @property
    def c(self) -> PoolCore:
        assert self.core is not None
        return self.core

    def _do(self, fn: Any) -> Any:
        """Run one input, then carry out and check its actions and events."""
        result = fn(self.c)
        actions, events = self.c.take()
        for e in events:
            if isinstance(e, LeaseLeakedEvent) and not e.collected:
                assert e.stack not in self.reported, f"{e.stack} reported twice"
                self.reported.add(e.stack)
        assert self.c.actions == [] and self.c.events == []
        shared = state_of(self.c)
        if any(isinstance(a, StartConnect) for a in actions):
            # a connect starts only under max_size and max_connecting (after a resize lowered
            # them too)
            max_size = shared.options.max_size
            assert not max_size or len(shared.conns) + shared.abandoned <= max_size
            connecting = shared.counts[ConnState.CONNECTING] + shared.abandoned
            assert connecting <= shared.options.max_connecting
        max_size = shared.options.max_size
        if max_size and len(shared.conns) + shared.abandoned > max_size:
            # beyond max_size (a resize lowered it) the surplus serves nobody: it closes as it
            # comes back, and the connections within the limit serve the waiters
            for action in actions:
                if isinstance(action, CompleteRequest) and action.request.conn is not None:
                    assert action.request.conn.role is not Role.OVERFLOW, action.request.conn
        self._apply(actions)
        if self.c.observed:
            self._check_events(actions, events)
        else:  # only a leak, connects failing unseen and a connect lost are told unobserved
            told = (LeaseLeakedEvent, ConnectFailingEvent, ConnectRecoveredEvent, ConnectLostEvent)
            assert all(isinstance(e, told) for e in events), events
        return result, actions, events

    def _apply(self, actions: list[Any]) -> None:
        core = self.c
        for action in actions:
            if isinstance(action, StartConnect):
                conn = action.conn
                assert conn.id not in self.started, f"StartConnect twice for {conn}"
                assert conn.state is ConnState.CONNECTING
                assert conn.streams == 0
                self.started[conn.id] = conn
                self.owed.append(conn)
                self.started_at[conn.id] = self.now
            elif isinstance(action, StartCheck | StartReset):
                conn = action.conn
                checking = isinstance(action, StartCheck)
                expected = ConnState.CHECKING if checking else ConnState.RESETTING
                assert conn.state is expected and conn.hook_started == self.now, conn
                assert all(c is not conn for c, _ in self.hooking), f"a second run on {conn}"
                self.hooking.append((conn, checking))
            elif isinstance(action, CloseConnection):
                conn = action.conn
                assert conn.id in self.started, f"CloseConnection for unknown {conn}"
                assert conn.close_reason is not None
                if self.firing and conn.close_reason == "error" and conn in self.owed:
                    # a connect abandoned by its timer: never before connect_timeout has passed
                    timeout = state_of(core).options.connect_timeout
                    assert timeout is not None
                    assert self.now - self.started_at[conn.id] >= timeout, (
                        f"{conn} started at {self.started_at[conn.id]} timed out at {self.now}"
                    )
                self.closed_named.add(conn.id)
                if conn.id in self.objects:
                    # the object the connect returned, closed once (the action names it)
                    assert not action.pending, action
                    assert action.connection is self.objects[conn.id], action
                    assert conn.id not in self.object_closed, f"{action} closes it twice"
                    self.object_closed.add(conn.id)
                else:  # a connect abandoned or failed: nothing to close yet
                    assert action.pending and action.connection is None, action
            elif isinstance(action, StartKeepAlive):
                conn = action.conn
                assert conn.state is ConnState.LEASED and conn.probe_started == self.now, conn
                assert conn.connection is self.objects[conn.id]
                assert conn not in self.probing
                self.probing.append(conn)
            elif isinstance(action, CompleteRequest):
                req = action.request
                key = id(req)
                assert req.queued, f"CompleteRequest for a request never queued: {req}"
                assert key not in self.cancelled, f"CompleteRequest for a cancelled {req}"
                assert self.completions.get(key, 0) == 0, f"{req} completed twice"
                self.completions[key] = 1
                if req.state is RequestState.SERVED:
                    assert req.conn is not None and req.error is None
                    self._check_fresh(req.conn)
                    self._leased(req.conn)
                    self.served_order.append(req)
                else:
                    assert req.state is RequestState.FAILED, req
                    assert req.error is not None and req.conn is None
                    if isinstance(req.error, WaitQueueTimeoutError):  # never before its time
                        assert req.deadline is not None and req.deadline <= self.now, req
            else:  # pragma: no cover
                raise AssertionError(f"unknown action {action!r}")
        # the core removed every conn it closed from every count before handing the action out
        for action in actions:
            if isinstance(action, CloseConnection):
                assert state_of(core).conns.get(action.conn.id) is not action.conn

    def _check_fresh(self, conn: Conn) -> None:
        """A connection handed out is live, of the current generation and not idle too long."""
        core = self.c
        assert core.state is PoolState.READY
        assert state_of(core).conns.get(conn.id) is conn, conn
        assert conn.state is ConnState.LEASED, conn
        assert not _stale(core, conn), f"{conn} leased behind its generation"
        assert conn.streams <= conn.max_streams, f"{conn} leased beyond its stream limit"
        assert conn.expires > self.now, f"{conn} leased after its lifetime"
        # just taken from idle (not handed to a waiter as its probe returns: alive as of now,
        # it serves the waiter whatever its idle time, test_core_health_table's
        # test_a_waiter_gets_the_probed_connection_when_the_probe_returns)
        if conn.streams == 1 and conn.role is not Role.KEPT and conn is not self.probe_returned:
            max_idle = state_of(core).options.max_idle_time
            assert max_idle is None or self.now - conn.idle_since < max_idle, conn

    def _check_events(self, actions: list[Any], events: list[Any]) -> None:
        created = [e.connection_id for e in events if isinstance(e, ConnectionCreatedEvent)]
        started = [a.conn.id for a in actions if isinstance(a, StartConnect)]
        assert created == started
        closed_events = [e.connection_id for e in events if isinstance(e, ConnectionClosedEvent)]
        assert len(closed_events) == len(set(closed_events))
        # every ConnectionClosedEvent comes with a CloseConnection action
        named = {a.conn.id for a in actions if isinstance(a, CloseConnection)}
        assert set(closed_events) <= named
        for e in events:
            if isinstance(e, ConnectionReadyEvent):
                assert e.connection_id in self.objects
            elif isinstance(e, ConnectionCheckOutStartedEvent):
                self.ev_started += 1
            elif isinstance(e, ConnectionCheckedOutEvent):
                self.ev_ended += 1
                assert self.started[e.connection_id].state is ConnState.LEASED
            elif isinstance(e, ConnectionCheckOutFailedEvent):
                self.ev_ended += 1
                expected = _FAILURE_ERRORS[e.reason]
                if expected is None:
                    assert e.error is None
                else:
                    assert isinstance(e.error, expected), e
            elif isinstance(e, ConnectionClosedEvent):
                assert e.reason == self.started[e.connection_id].close_reason
                assert e.reason == "error" or e.error is None, e
            elif isinstance(e, ConnectionCheckedInEvent):
                self.ev_checked_in += 1

    def _lease_idle_time(self) -> float:
        return self.now

    def _leased(self, conn: Conn) -> None:
        self.leases.append(conn)
        self.served_total += 1
        held = None
        if state_of(self.c).options.leak_timeout is not None:  # as a front end watching leases does
            held = Hold(conn, self.now, f"lease {self.served_total}")
            self.c.hold(held, self.now)
        self.holds.append(held)

    def _drop_lease(self, conn: Conn) -> Hold | None:
        for i, leased in enumerate(self.leases):
            if leased is conn:
                del self.leases[i]
                held = self.holds.pop(i)
                if held is not None:
                    self.c.unhold(held)
                return held
        raise AssertionError(f"no lease on {conn}")  # pragma: no cover

    # ------------------------------------------------------------------ rules

    @rule(kind=st.sampled_from(["ready", "ready", "ready", "clear", "interrupt", "close"]))
    def lifecycle(self, kind: str) -> None:
        """One rule for the pool's own inputs, weighted so a pool is mostly ready."""
        if kind == "ready":
            self.ready()
        elif kind == "close":
            self.close()
        else:
            self.clear(kind == "interrupt")

    @rule()
    def bounce(self) -> None:
        """Clear and mark ready again at once (a monitor's error, then a good heartbeat): the
        leases out become stale while the pool is ready."""
        self.clear(False)
        self.ready()

    def ready(self) -> None:
        if self.c.state is PoolState.CLOSED:
            try:
                self.c.ready(self.now)
            except PoolClosedError:
                pass
            else:  # pragma: no cover
                raise AssertionError("ready() on a closed pool did not raise")
            assert self.c.take() == ([], [])
            return
        self._do(lambda core: core.ready(self.now))
        assert self.c.state is PoolState.READY

    def clear(self, interrupt: bool) -> None:
        if state_of(self.c).options.load_balanced:
            self.clear_service(None, interrupt)  # every service
            return
        before = self.c.state
        generation = self.c.generation
        waiting = core_view(self.c).waiters()
        _, _, events = self._do(lambda core: core.clear(self.now, interrupt_in_use=interrupt))
        cleared = [e for e in events if isinstance(e, PoolClearedEvent)]
        if self.c.observed and before is PoolState.READY:
            assert len(cleared) == 1 and cleared[0].interrupt_in_use_connections is interrupt
        else:
            assert cleared == []
        if before is PoolState.CLOSED:
            assert self.c.generation == generation
            return
        assert self.c.state is PoolState.PAUSED
        assert self.c.generation == generation + 1
        assert core_view(self.c).waiting == 0
        for req in waiting:
            assert req.state is RequestState.FAILED
            assert isinstance(req.error, PoolClearedError)
        if interrupt:
            for conn in state_of(self.c).conns.values():
                assert (
                    # (slots: see _retry; a check or reset is not interrupted: its connection
                    # closes, stale, when it ends)
                    conn.state
                    in (
                        ConnState.IDLE,
                        ConnState.BACKING_OFF,
                        ConnState.CHECKING,
                        ConnState.RESETTING,
                    )
                    or conn.generation == self.c.generation
                )

    @precondition(lambda self: state_of(self.c).options.load_balanced)
    @rule(service=st.sampled_from(_SERVICES), interrupt=st.sampled_from([False, True]))
    def clear_service(self, service: Any, interrupt: bool) -> None:
        """Load-balanced clear: one service (``None``: all of them) moves to a new generation.
        CMAP: the pool is not paused and its wait queue is not cleared; with interrupt, the
        established connections in use of the services cleared close (stale) at once; a pending
        connect has no service yet (it takes its service's generation when it is established)
        and goes on."""
        core = self.c
        view = core_view(core)
        shared = state_of(core)
        before = core.state
        waiting = view.waiters()
        entries = {sid: tuple(entry) for sid, entry in core.service_generations.items()}
        conns = {c.id: (c, c.state) for c in shared.conns.values()}
        cleared = set(entries) if service is None else {service} & set(entries)
        expected_closed = {
            c.id
            for c in shared.conns.values()
            if interrupt
            and c.state in (ConnState.LEASED, ConnState.DRAINING)
            and c.service_id in cleared
        }
        _, actions, events = self._do(
            lambda core: core.clear(self.now, interrupt_in_use=interrupt, service_id=service)
        )
        assert core.state is before, "a load-balanced clear changed the pool's state"
        # CMAP: a load-balanced clear neither fails nor reorders waiters. It may serve some:
        # interrupting in-use connections frees what an adaptive limit held them back for, and
        # the pool hands a free stream of another service to the oldest waiter.
        still = view.waiters()
        assert still == [r for r in waiting if r in still], "a load-balanced clear reordered"
        for req in waiting:
            if req in still:
                assert req.state is RequestState.WAITING
            else:
                assert req.state is RequestState.SERVED, "a load-balanced clear failed a waiter"
                assert req.conn is not None and req.conn.service_id not in cleared
                assert interrupt, "a load-balanced clear without interrupt served a waiter"
        events_cleared = [e for e in events if isinstance(e, PoolClearedEvent)]
        if before is PoolState.CLOSED:
            assert actions == [] and events_cleared == []
            assert {s: tuple(e) for s, e in core.service_generations.items()} == entries
            return
        if core.observed:
            assert len(events_cleared) == 1
            assert events_cleared[0].service_id == service
            assert events_cleared[0].interrupt_in_use_connections is interrupt
        for sid, (generation, count) in entries.items():
            entry = core.service_generations.get(sid)
            if sid in cleared:
                if entry is not None:  # (gone if every connection of it was interrupted)
                    assert entry[0] == generation + 1, (sid, entry, generation)
            else:
                assert entry is not None and tuple(entry) == (generation, count), sid
        closed = {a.conn.id for a in actions if isinstance(a, CloseConnection)}
        assert closed == expected_closed, (closed, expected_closed)
        for conn_id in closed:
            assert conns[conn_id][0].close_reason == "stale"
        served = [r for r in waiting if r not in still]
        serving = {r.conn.id for r in served if r.conn is not None}
        checking = {a.conn.id for a in actions if isinstance(a, StartCheck)}
        for conn_id, (conn, state) in conns.items():
            if conn_id not in closed and conn.state is not state:
                # (only what serves the waiters it freed room for: leased, or its check started)
                assert (conn_id in serving and conn.state is ConnState.LEASED) or (
                    conn_id in checking and conn.state is ConnState.CHECKING
                ), f"{conn} changed by a clear"
        completed = [a.request for a in actions if isinstance(a, CompleteRequest)]
        assert all(any(r is c for r in served) for c in completed), "a clear completed a request"

    @precondition(lambda self: not state_of(self.c).options.load_balanced)
    @rule(service=st.sampled_from([1, "a"]))
    def clear_service_not_lb(self, service: Any) -> None:
        """``clear(service_id=...)`` needs load-balanced mode: refused, nothing changed."""
        core = self.c
        view = core_view(core)
        state, generation, waiting = core.state, core.generation, view.waiters()
        try:
            core.clear(self.now, service_id=service)
        except ValueError:
            assert state is not PoolState.CLOSED
        else:
            assert state is PoolState.CLOSED
        assert (core.state, core.generation, view.waiters()) == (
            state,
            generation,
            waiting,
        )
        assert core.take() == ([], [])

    def close(self) -> None:
        waiting = core_view(self.c).waiters()
        if self.c.state is not PoolState.CLOSED:
            self.closed_at = self.now
        self._do(lambda core: core.close(self.now))
        assert self.c.state is PoolState.CLOSED
        assert core_view(self.c).waiting == 0
        for req in waiting:
            assert req.state is RequestState.FAILED
            assert isinstance(req.error, PoolClosedError)
        for conn in state_of(self.c).conns.values():
            assert conn.state in (ConnState.LEASED, ConnState.DRAINING), conn

    @rule()
    def lease_idle(self) -> None:
        waiting = core_view(self.c).waiting
        state = self.c.state
        parked = core_view(self.c).idle_connections()
        conn, actions, _ = self._do(lambda core: core.fast.lease_idle(self._lease_idle_time()))
        if conn is not None:
            assert state is PoolState.READY and waiting == 0
            if conn in parked:  # taken by idle_order: those before it were perished and closed
                order = parked if state_of(self.c).options.idle_order == "fifo" else parked[::-1]
                passed = order[: order.index(conn)]
                assert all(c.state is ConnState.CLOSED for c in passed), "idle order not kept"
            assert conn.state is ConnState.LEASED
            assert conn.id in state_of(self.c).conns
            self._check_fresh(conn)
            self._leased(conn)
        assert not any(isinstance(a, StartConnect | CompleteRequest) for a in actions)

    @precondition(
        lambda self: state_of(self.c).hooks.check_after is not None and not self.c.observed
    )
    @rule()
    def lease_checking(self) -> None:
        """``Pool``'s checkout fast path with a check hook: a connection leased at once, or its
        check started for the caller (who runs it and reports with ``checked``)."""
        waiting = core_view(self.c).waiting
        state = self.c.state
        conn, actions, _ = self._do(lambda core: core.lease_checking(self.now))
        assert not any(isinstance(a, StartCheck | StartReset | CompleteRequest) for a in actions)
        if conn is None:
            return
        assert state is PoolState.READY and waiting == 0
        if conn.state is ConnState.CHECKING:
            assert state_of(self.c).hooks.check_after is not None
            assert conn.hook_started == self.now and conn.streams == 0, conn
            assert all(c is not conn for c, _ in self.hooking), f"a second run on {conn}"
            self.caller_checks.append(conn)
        else:
            self._check_fresh(conn)
            self._leased(conn)

    @precondition(lambda self: self.caller_checks)
    @rule(index=st.integers(min_value=0), fail=st.booleans())
    def checked(self, index: int, fail: bool) -> None:
        """The caller's check returns (or raises), possibly after the core ended it itself (its
        timeout, a clear, a close): the connection is the caller's, or the caller queues."""
        conn = self.caller_checks.pop(index % len(self.caller_checks))
        running = conn.hook_started is not None and conn.state is ConnState.CHECKING
        error = ConnectError(f"check of {conn.id} failed") if fail else None
        passed, actions, _ = self._do(lambda core: core.checked(conn, self.now, error))
        assert conn.hook_started is None and conn.hook_timer is None
        if not running:
            assert not passed and actions == [], "a late check result changed things"
        elif fail:
            assert not passed
            assert conn.state is ConnState.CLOSED and conn.close_reason == "error", conn
        if passed:
            self._check_fresh(conn)
            self._leased(conn)
        else:
            assert conn.state is not ConnState.LEASED or conn not in self.leases, conn
        if self.now == self.fired_at:
            self.advance(0.0)  # as a front end re-arms its timer: what fell due runs now

    @rule(timeout=st.sampled_from([None, None, 0.0, 0.5, 1.0, 3.0]))
    def request(self, timeout: float | None) -> None:
        req = Request(started=self.now, deadline=None if timeout is None else self.now + timeout)
        state = self.c.state
        self.requests.append(req)
        _, actions, _ = self._do(lambda core: core.fast.request(req, self.now))
        assert not any(isinstance(a, CompleteRequest) and a.request is req for a in actions)
        if req.queued:
            assert req.state is RequestState.WAITING
            assert state is PoolState.READY
            self.queued.append(req)
        elif req.state is RequestState.SERVED:
            assert state is PoolState.READY
            assert req.conn is not None
            self._check_fresh(req.conn)
            self._leased(req.conn)
        else:
            assert req.state is RequestState.FAILED, req
            if state is PoolState.CLOSED:
                assert isinstance(req.error, PoolClosedError)
            elif state is PoolState.PAUSED:
                assert isinstance(req.error, PoolClearedError)
        self.last_state[id(req)] = req.state

    @precondition(lambda self: any(r.state is RequestState.WAITING for r in self.queued))
    @rule(index=st.integers(min_value=0))
    def cancel_waiting(self, index: int) -> None:
        waiting = [r for r in self.queued if r.state is RequestState.WAITING]
        req = waiting[index % len(waiting)]
        cancelled, actions, _ = self._do(lambda core: core.cancel(req, self.now))
        assert cancelled is True
        assert req.state is RequestState.CANCELLED
        assert req not in core_view(self.c).waiters()
        assert actions == []
        self.cancelled.add(id(req))

    @precondition(lambda self: any(r.state is not RequestState.WAITING for r in self.requests))
    @rule(index=st.integers(min_value=0))
    def cancel_finished(self, index: int) -> None:
        """A cancellation that lost the race with the core: nothing changes."""
        done = [r for r in self.requests if r.state is not RequestState.WAITING]
        req = done[index % len(done)]
        state = req.state
        cancelled, actions, events = self._do(lambda core: core.cancel(req, self.now))
        assert cancelled is False
        assert req.state is state
        assert actions == [] and events == []

    @precondition(lambda self: self.leases)
    @rule(index=st.integers(min_value=0), discard=st.booleans())
    def release(self, index: int, discard: bool) -> None:
        conn = self.leases[index % len(self.leases)]
        self._drop_lease(conn)
        self.releases += 1
        # the lease is returned: from here on the model no longer counts it
        stale = conn.state is ConnState.LEASED and _stale(self.c, conn)
        self._do(
            lambda core: core.discard(conn, self.now) if discard else core.release(conn, self.now)
        )
        if discard:
            assert state_of(self.c).conns.get(conn.id) is not conn
        else:
            self._checked_in_stale(conn, stale)

    def _checked_in_stale(self, conn: Conn, stale: bool) -> None:
        """CMAP check-in: a stale (perished) connection is closed when its last lease comes
        back, and takes no new lease meanwhile."""
        if not stale:
            return
        if conn.streams == 0:
            assert conn.state is ConnState.CLOSED, f"stale {conn} kept at check-in"
            assert conn.close_reason in ("stale", "poolClosed"), conn
        else:
            assert conn not in state_of(self.c).idle_set.open, f"stale {conn} open for new leases"

    @precondition(lambda self: self.leases and not self.c.observed)
    @rule(index=st.integers(min_value=0), clean=st.sampled_from([False, False, True]))
    def release_quick(self, index: int, clean: bool) -> None:
        """The front ends' check-in: ``release_idle`` first, the full one if it says no;
        ``clean`` (``Lease.release(reset=False)``): ``release_idle_clean``, and the full one with
        ``clean=True``."""
        conn = self.leases[index % len(self.leases)]
        self._drop_lease(conn)
        self.releases += 1
        core = self.c
        view = core_view(core)
        shared = state_of(core)
        before = (
            conn.state,
            conn.streams,
            view.waiting,
            view.available,
            len(shared.conns),
        )
        stale = conn.state is ConnState.LEASED and _stale(core, conn)
        oldest = view.waiters()[:1]
        resets = core.stats().resets
        fast = core.fast.release_idle_clean if clean else core.fast.release_idle
        taken, actions, _ = self._do(lambda core: fast(conn))
        if isinstance(taken, Request):
            core.fast.note_waits((self.now - taken.started,))  # as the front ends do
        if taken:
            assert before[0] is ConnState.LEASED and before[1] == 1
            assert core.state is not PoolState.CLOSED
            # the caller's reset is counted, as the full check-in counts it
            assert core.stats().resets == resets + clean
            assert conn.generation == core.generation
            # a clocked pool parks a connection with its time and timers: only the full path
            assert oldest or not core.clocked, "parked by the fast path in a clocked pool"
            if oldest:  # handed straight to the oldest waiter
                req = oldest[0]
                assert taken is req and req.state is RequestState.SERVED and req.conn is conn
                assert actions == []  # the caller wakes the request it was given
                self._apply([CompleteRequest(req)])  # ...which the model checks as one
                assert conn.state is ConnState.LEASED and conn.streams == 1
                assert view.waiting == before[2] - 1 and view.available == before[3]
            else:
                assert taken is True and actions == []
                assert conn.state is ConnState.IDLE and view.idle_connections()[-1] is conn
                assert view.available == before[3] + 1
        else:
            assert taken is False and actions == []
            after = (
                conn.state,
                conn.streams,
                view.waiting,
                view.available,
                len(shared.conns),
            )
            assert after == before, "a refused quick release changed something"
            assert core.stats().resets == resets, "a refused quick release counted a reset"
            self._do(lambda core: core.release(conn, self.now, clean))
            self._checked_in_stale(conn, stale)

    @precondition(lambda self: self.owed)
    @rule(index=st.integers(min_value=0), service=st.sampled_from(_SERVICES))
    def connected(self, index: int, service: Any = 1, max_streams: int = 1) -> None:
        conn = self.owed.pop(index % len(self.owed))
        obj = ConnectionObject(conn.id)
        self.objects[conn.id] = obj
        core = self.c
        lb = state_of(core).options.load_balanced
        was_connecting = conn.state is ConnState.CONNECTING
        if was_connecting:
            self.established_ids.add(conn.id)
        entry = core.service_generations.get(service)
        generation = 0 if entry is None else entry[0]
        self._do(lambda core: core.connected(conn, self.now, obj, service, max_streams))
        assert conn.connection is obj or not was_connecting
        if conn.state in _ESTABLISHED and _stale(core, conn):
            # a connect started before a clear that did not interrupt it: parked as it is, met
            # (and closed) like any stale one; only outside load-balanced mode, where the
            # generation is the pool's when the connect started
            assert not lb, conn
            self.arrived_stale.add(conn.id)
        if not lb:
            assert conn.service_id is None and core.service_generations == {}
        elif was_connecting:
            # CMAP: once established, the connection takes its service's generation
            assert conn.service_id == service and conn.generation == generation, conn
        else:
            assert conn.service_id is None  # abandoned: never counted in a service

    @precondition(lambda self: self.owed)
    @rule(
        index=st.integers(min_value=0),
        service=st.sampled_from(_SERVICES),
        max_streams=st.sampled_from([2, 3]),
    )
    def connected_multiplexed(self, index: int, service: Any, max_streams: int) -> None:
        self.connected(index, service, max_streams)

    @precondition(lambda self: bool(state_of(self.c).conns))
    @rule(index=st.integers(min_value=0), max_streams=st.sampled_from([1, 1, 2, 4]))
    def set_max_streams(self, index: int, max_streams: int) -> None:
        conns = list(state_of(self.c).conns.values())
        conn = conns[index % len(conns)]
        state = conn.state
        waiting = core_view(self.c).waiting
        known, _, _ = self._do(lambda core: core.set_max_streams(conn.id, max_streams, self.now))
        assert known == (state not in (ConnState.CONNECTING, ConnState.BACKING_OFF))
        if known:
            assert conn.max_streams == max_streams
            # an increase serves at most the new free streams (and other free connections)
            assert core_view(self.c).waiting <= waiting

    @precondition(lambda self: bool(state_of(self.c).conns))
    @rule(index=st.integers(min_value=0))
    def will_close(self, index: int) -> None:
        conns = list(state_of(self.c).conns.values())
        conn = conns[index % len(conns)]
        state = conn.state
        probe_only = conn.streams == 1 and conn.probe_started is not None
        known, _, _ = self._do(lambda core: core.will_close(conn.id, self.now))
        if state is ConnState.IDLE or (state is ConnState.LEASED and probe_only):
            # available, or used only by its keep-alive probe: closed now
            assert known and conn.state is ConnState.CLOSED and conn.close_reason == "willClose"
            assert conn.probe_started is None
        elif state in (ConnState.LEASED, ConnState.DRAINING):
            assert known and conn.state is ConnState.DRAINING
        elif state in (ConnState.CHECKING, ConnState.RESETTING):
            # used by no one (a check or reset runs on it): closed now, its run ignored
            assert known and conn.state is ConnState.CLOSED and conn.close_reason == "willClose"
            assert conn.hook_started is None
        else:
            assert not known and conn.state is state

    @precondition(lambda self: self.owed)
    @rule(index=st.integers(min_value=0))
    def connect_failed(self, index: int) -> None:
        conn = self.owed.pop(index % len(self.owed))
        error = ConnectError(f"connect {conn.id} failed")
        head = core_view(self.c).waiters()[:1]
        was_connecting = conn.state is ConnState.CONNECTING
        _, actions, _ = self._do(lambda core: core.connect_failed(conn, self.now, error))
        assert conn.id not in state_of(self.c).conns
        if not was_connecting:  # a connect given up on returned: its room may start others
            assert all(isinstance(a, StartConnect) for a in actions), actions
        for req in head:
            if req.state is RequestState.FAILED:
                if state_of(self.c).options.connect_retry is None:
                    assert req.error is error
                else:  # waiters keep waiting, unless the circuit opened
                    assert isinstance(req.error, CircuitOpenError), req
        if (
            was_connecting
            and state_of(self.c).options.connect_retry is not None
            and self.c.state is not PoolState.CLOSED
        ):
            failing = state_of(self.c).failures.failing
            assert failing is not None and failing.failures >= 1
            slot = failing.pending
            if slot is not None:
                assert slot.state in (ConnState.BACKING_OFF, ConnState.CONNECTING), slot

    @precondition(lambda self: self.leases)
    @rule(index=st.integers(min_value=0))
    def lease_collected(self, index: int) -> None:
        """A lease is garbage-collected while out (watched or not): reported, its connection
        closed."""
        i = index % len(self.leases)
        conn, held = self.leases.pop(i), self.holds.pop(i)
        self.releases += 1  # it comes back, to be closed
        lost = conn if held is None else held
        _, _, events = self._do(lambda core: core.lease_collected(lost, self.now))
        leaks = [e for e in events if isinstance(e, LeaseLeakedEvent)]
        assert len(leaks) == 1 and leaks[0].collected and leaks[0].connection_id == conn.id
        assert conn.state is ConnState.CLOSED

    @precondition(lambda self: self.probing)
    @rule(index=st.integers(min_value=0), fail=st.booleans())
    def probe_done(self, index: int, fail: bool) -> None:
        """A keep-alive probe returns (or raises), possibly after the core ended it itself."""
        conn = self.probing.pop(index % len(self.probing))
        was_probing = conn.probe_started is not None
        streams = conn.streams
        error = ConnectError(f"probe of {conn.id} failed") if fail else None
        self.probe_returned = conn
        try:
            _, actions, _ = self._do(lambda core: core.keep_alive_done(conn, self.now, error))
        finally:
            self.probe_returned = None
        assert conn.probe_started is None
        if not was_probing:
            assert actions == [] and conn.streams == streams, "a late probe result changed things"
        elif fail:
            assert conn.state is ConnState.CLOSED and conn.close_reason in ("error", "stale"), conn
        if self.now == self.fired_at:
            self.advance(0.0)  # as a front end re-arms its timer: what fell due runs now

    @precondition(lambda self: self.hooking)
    @rule(index=st.integers(min_value=0), fail=st.booleans())
    def hook_done(self, index: int, fail: bool) -> None:
        """A check or reset returns (or raises), possibly after the core ended it itself (its
        timeout, a close)."""
        conn, checking = self.hooking.pop(index % len(self.hooking))
        running = conn.hook_started is not None
        error = ConnectError(f"hook on {conn.id} failed") if fail else None
        done = self.c.check_done if checking else self.c.reset_done
        _, actions, _ = self._do(lambda core: done(conn, self.now, error))
        assert conn.hook_started is None and conn.hook_timer is None
        if not running:
            assert actions == [], "a late check or reset result changed things"
        elif fail:
            assert conn.state is ConnState.CLOSED and conn.close_reason == "error", conn
        else:
            assert conn.state in (ConnState.IDLE, ConnState.LEASED, ConnState.CLOSED), conn
        if self.now == self.fired_at:
            self.advance(0.0)  # as a front end re-arms its timer: what fell due runs now

    @rule(
        min_size=st.integers(-1, 4),
        max_size=st.integers(0, 6),
        max_connecting=st.sampled_from([None, None, 1, 3]),
    )
    def resize(self, min_size: int, max_size: int, max_connecting: int | None) -> None:
        """New sizes for the running pool: refused (a closed or adaptive pool, bad values) with
        nothing changed, or in force at once; the invariants say the rest (the surplus is
        overflow and closes as it comes back, waiters served in order, no connect over
        max_size, roles within the new limits)."""
        core = self.c
        shared = state_of(core)
        conns = list(shared.conns.values())
        before = (shared.options, shared.size_limit, [c.role for c in conns], core.stats())
        if core.state is PoolState.CLOSED:
            refused: type[Exception] | None = PoolClosedError
        elif shared.adaptive is not None or min_size < 0 or (max_size and min_size > max_size):
            refused = ValueError
        else:
            refused = None
        if refused is not None:
            try:
                core.resize(self.now, min_size, max_size, max_connecting)
            except refused:
                pass
            else:  # pragma: no cover
                raise AssertionError(f"resize({min_size}, {max_size}) did not raise")
            after = (shared.options, shared.size_limit, [c.role for c in conns], core.stats())
            assert after == before and core.take() == ([], [])
            return
        held = len(conns) + shared.abandoned
        options, _, _ = self._do(
            lambda core: core.resize(self.now, min_size, max_size, max_connecting)
        )
        assert options is state_of(core).options
        assert (options.min_size, options.max_size) == (min_size, max_size)
        if max_connecting is not None:
            assert options.max_connecting == max_connecting
        if max_size and held > max_size:
            self.shrunk = True
        if state_of(core).counts[ConnState.CONNECTING] + state_of(core).abandoned > (
            options.max_connecting
        ):
            self.shrunk = True
        # connections kept (none closed but available ones beyond the limits, or perished);
        # the statistics go on
        stats = core.stats()
        assert stats.checkouts == before[3].checkouts
        assert stats.connections_created == before[3].connections_created
        for conn in conns:
            if conn.state is ConnState.CLOSED:
                assert conn.close_reason in ("idle", "stale", "lifetime"), conn

    @rule(dt=st.sampled_from([0.0, 0.25, 0.5, 1.0, 2.0, 5.0]))
    def advance(self, dt: float) -> None:
        self.now += dt
        self.firing = True
        try:
            self._do(lambda core: core.fire_timers(self.now))
        finally:
            self.firing = False
        self.fired_at = self.now

    # ------------------------------------------------------------------ invariants

    @invariant()
    def fast_path_generations(self) -> None:
        """What the hot paths compare with is what the state, generation and options say."""
        core = self.c
        # (an adaptive pool takes no fast path: each check-in is a sample of its limit)
        plain = not state_of(core).options.load_balanced and state_of(core).options.adaptive is None
        ready = core.state is PoolState.READY
        # (either idle order: ``lease_idle`` takes from the end ``idle_order`` says)
        lease = core.generation if plain and not core.clocked and ready else -1
        hooks = state_of(core).options.hooks
        resets = hooks is not None and hooks.reset is not None
        clean = (
            core.generation
            if plain
            and core.state is not PoolState.CLOSED
            and state_of(core).options.max_lifetime is None
            else -1
        )
        release = -1 if resets else clean
        hand = handout_of(core)
        assert (hand._lease_gen, hand._release_gen, hand._clean_gen) == (lease, release, clean)

    @invariant()
    def request_states(self) -> None:
        if self.core is None:
            return
        for req in self.requests:
            key = id(req)
            before = self.last_state.get(key)
            if before in _TERMINAL:
                assert req.state is before, f"{req} left {before}"
            self.last_state[key] = req.state
            if req.queued and req.state in (RequestState.SERVED, RequestState.FAILED):
                assert self.completions.get(key) == 1, f"{req} finished without CompleteRequest"
            if req.state is RequestState.WAITING:
                assert req.queued
                assert self.completions.get(key, 0) == 0
        waiting = [r for r in self.queued if r.state is RequestState.WAITING]
        assert core_view(self.c).waiters() == waiting, (
            "the core's queue is not the waiting requests in order"
        )

    @invariant()
    def fifo(self) -> None:
        if self.core is None:
            return
        position = {id(r): i for i, r in enumerate(self.queued)}
        served = [position[id(r)] for r in self.served_order]
        assert served == sorted(served), "queued requests served out of order"
        for req in self.served_order:
            for earlier in self.queued[: position[id(req)]]:
                assert earlier.state is not RequestState.WAITING, (
                    f"{req} served while the earlier {earlier} still waits"
                )

    @invariant()
    def counts(self) -> None:
        if self.core is None:
            return
        core = self.c
        view = core_view(core)
        shared = state_of(core)
        opts = state_of(core).options
        conns = list(shared.conns.values())
        by_state = {s: sum(1 for c in conns if c.state is s) for s in ConnState}
        stats = core.stats()
        # a connect given up on whose function has not returned yet (still owed a result) is
        # abandoned, and counts against both limits, until it is lost: lost_after() after it
        # started (issue 24, defect 3: a connect that never returns held its slot for good)
        abandoned = sum(1 for c in self.owed if c.state is ConnState.CLOSED and c.abandoned)
        lost_at = lost_after(opts.connect_timeout)
        for c in self.owed:
            lost = c.state is ConnState.CLOSED and not c.abandoned
            if lost and core.state is not PoolState.CLOSED:
                assert self.now >= c.created_at + lost_at, c
        assert shared.abandoned == stats.abandoned == abandoned
        if opts.max_size and len(conns) + abandoned > opts.max_size:
            # only after a resize lowered max_size: the surplus is overflow, and closes as it
            # comes back (no connect starts meanwhile: ``_do``)
            assert self.shrunk, "more connections than max_size"
            assert len(conns) - shared.roles.overflow <= opts.max_size
        # (more only after a resize lowered max_connecting: no connect starts meanwhile, ``_do``)
        assert by_state[ConnState.CONNECTING] + abandoned <= opts.max_connecting or self.shrunk
        assert stats.total == view.total == len(conns)
        assert stats.available == view.available == by_state[ConnState.IDLE]
        assert stats.pending == view.pending == by_state[ConnState.CONNECTING]
        assert stats.in_use == by_state[ConnState.LEASED] + by_state[ConnState.DRAINING]
        assert stats.waiting == view.waiting
        assert stats.generation == core.generation and stats.state is core.state
        assert stats.checking == by_state[ConnState.CHECKING]
        assert stats.resetting == by_state[ConnState.RESETTING]
        assert stats.total == (
            stats.available
            + stats.pending
            + stats.in_use
            + by_state[ConnState.BACKING_OFF]
            + stats.checking
            + stats.resetting
        )
        for s in ConnState:
            if s is not ConnState.CLOSED:
                assert view.count(s) == by_state[s], s
        assert by_state[ConnState.CLOSED] == 0
        for conn_id, conn in shared.conns.items():
            assert conn.id == conn_id
            # a backing-off slot is the core's own until its retry starts
            assert conn_id in self.started or conn.state is ConnState.BACKING_OFF, conn
            if conn.state is ConnState.BACKING_OFF:
                failing = shared.failures.failing
                assert failing is not None and failing.pending is conn, conn
        failing = shared.failures.failing
        if failing is not None and failing.pending is not None:
            assert shared.conns.get(failing.pending.id) is failing.pending
        if failing is None or not failing.open:
            pass
        else:
            assert view.waiting == 0, "requests wait while the circuit is open"
        idle = view.idle_connections()
        assert len({c.id for c in idle}) == len(idle)
        assert {c.id for c in idle} == {c.id for c in conns if c.state is ConnState.IDLE}
        assert shared.roles.kept == sum(1 for c in conns if c.role is Role.KEPT)
        assert shared.roles.overflow == sum(1 for c in conns if c.role is Role.OVERFLOW)
        assert shared.roles.kept <= opts.min_size
        soft = opts.soft_limit if opts.soft_max_size is not None or opts.max_size else None
        if soft is not None and core.state is not PoolState.CLOSED:
            # an overflow connection exists only while the others fill the soft limit
            assert shared.roles.overflow == 0 or len(conns) - shared.roles.overflow >= soft
        for conn in conns:
            plain = (
                conn.max_streams == 1
                and conn.streams <= 1
                and conn.role is not Role.OVERFLOW
                and conn.state is not ConnState.DRAINING
            )
            # a gate only on a plain connection, and then its generation (-2 is always safe)
            assert conn.gate == -2 or (plain and conn.gate == conn.generation), conn
            if plain and conn.state in (ConnState.IDLE, ConnState.CONNECTING):
                assert conn.gate == conn.generation, f"{conn} kept off the fast paths"
            if conn.gate == handout_of(core)._release_gen and conn.state is ConnState.LEASED:
                assert conn.streams == 1, conn  # what release_idle relies on
        # multiplexed connections with a free stream, in use, are where leases go first
        for conn in shared.idle_set.open:
            assert conn.state is ConnState.LEASED and conn.max_streams > 1, conn
            assert conn.streams < conn.max_streams, conn
        for conn in conns:
            if conn.state is ConnState.DRAINING:
                assert conn not in shared.idle_set.open and conn.streams >= 1

    @invariant()
    def service_generations(self) -> None:
        """CMAP "Load Balancer Mode": a map service id -> (generation, connection count), the
        count being the connections of that service that exist (established, not closed), the
        entry removed when it reaches zero. Outside that mode the map stays empty."""
        if self.core is None:
            return
        core = self.c
        shared = state_of(core)
        established = [c for c in shared.conns.values() if c.state in _ESTABLISHED]
        if not state_of(core).options.load_balanced:
            assert core.service_generations == {}
            for conn in established:
                assert conn.service_id is None and conn.generation <= core.generation, conn
            return
        per_service = collections.Counter(c.service_id for c in established)
        counts = {sid: entry[1] for sid, entry in core.service_generations.items()}
        assert counts == dict(per_service), (counts, per_service)
        for conn in established:
            assert conn.generation <= core.service_generations[conn.service_id][0], conn
        for conn in shared.conns.values():
            if conn.state not in _ESTABLISHED:
                assert conn.service_id is None, f"{conn} has a service before its handshake"

    @invariant()
    def stale_idle_swept(self) -> None:
        """A clear leaves old available connections to be closed when met; the background run it
        schedules at once closes the rest: a connection that went stale while available exists
        only while that run is due."""
        if self.core is None:
            return
        core = self.c
        if any(
            _stale(core, c) and c.id not in self.arrived_stale
            for c in core_view(core).idle_connections()
        ):
            run = state_of(core).background
            assert run is not None and run.when <= self.now, "stale connections left available"

    @invariant()
    def statistics(self) -> None:
        """The snapshot agrees with the connections and with what the driver saw."""
        if self.core is None:
            return
        core = self.c
        stats = core.stats()
        conns = list(state_of(core).conns.values())
        assert stats.kept + stats.demand + stats.overflow == stats.total
        assert stats.backing_off == sum(c.state is ConnState.BACKING_OFF for c in conns)
        assert stats.streams_in_use == sum(c.streams for c in conns)
        assert stats.stream_capacity == sum(
            c.max_streams for c in conns if c.state in (ConnState.IDLE, ConnState.LEASED)
        )
        assert stats.checkouts == self.served_total
        closed = sum(c.state is ConnState.CLOSED for c in self.started.values())
        assert sum(stats.connections_closed.values()) == closed
        assert stats.connections_closed.keys() <= {
            "stale",
            "idle",
            "error",
            "poolClosed",
            "lifetime",
            "willClose",
        }
        assert stats.connect_attempts == len(self.started)
        assert stats.connections_created == len(self.established_ids)
        finished = [r for r in self.requests if r.state is not RequestState.WAITING]
        failed = sum(r.state is not RequestState.SERVED for r in finished)
        assert sum(stats.checkout_failures.values()) == failed
        assert stats.waits == sum(r.queued for r in finished)
        assert stats.wait_time_max <= self.now and stats.wait_time_total >= stats.wait_time_max

    @invariant()
    def leases_match_streams(self) -> None:
        if self.core is None:
            return
        probes = [c for c in self.started.values() if c.probe_started is not None]
        live = sum(1 for c in self.leases if state_of(self.c).conns.get(c.id) is c)
        live += sum(1 for c in probes if state_of(self.c).conns.get(c.id) is c)
        assert sum(c.streams for c in state_of(self.c).conns.values()) == live
        per_conn: dict[int, int] = {}
        for c in self.leases + probes:
            per_conn[c.id] = per_conn.get(c.id, 0) + 1
        for c in probes:
            assert c in self.probing, f"{c} probed with no StartKeepAlive outstanding"
        for conn in self.started.values():
            assert conn.streams == per_conn.get(conn.id, 0), conn
            if conn.state in (ConnState.IDLE, ConnState.CONNECTING):
                assert conn.streams == 0, conn
            if conn.state is ConnState.LEASED:
                assert conn.streams >= 1, conn

    @invariant()
    def nothing_lost(self) -> None:
        if self.core is None:
            return
        core = self.c
        shared = state_of(core)
        for conn_id, conn in self.started.items():
            live = shared.conns.get(conn_id) is conn
            assert live or conn_id in self.closed_named, f"{conn} lost"
            assert live != (conn.state is ConnState.CLOSED), conn
        for conn_id, obj in self.objects.items():
            conn = self.started[conn_id]
            live = shared.conns.get(conn_id) is conn and conn.connection is obj
            assert live or conn_id in self.object_closed, f"{obj} leaked"

    @invariant()
    def timers_honoured(self) -> None:
        """After fire_timers(now) nothing is due: no expired waiter, connect or idle connection."""
        if self.core is None or self.now != self.fired_at:
            return
        core = self.c
        for req in core_view(core).waiters():
            assert req.deadline is None or req.deadline > self.now, f"{req} outlived its deadline"
        leak_timeout = state_of(core).options.leak_timeout
        for held in self.holds:
            if held is not None and leak_timeout is not None:
                # watched while the pool is open: reported once its time is up, never before
                watched_until = min(self.now, self.closed_at)
                out_too_long = watched_until - held.since >= leak_timeout
                assert out_too_long == (held.stack in self.reported), held
        opts = state_of(core).options
        timeout = opts.connect_timeout
        max_idle = opts.max_idle_time
        for conn in state_of(core).conns.values():
            if timeout is not None and conn.state is ConnState.CONNECTING:
                assert conn.created_at + timeout > self.now, f"{conn} outlived connect_timeout"
            if max_idle is not None and conn.state is ConnState.IDLE and conn.role is not Role.KEPT:
                assert self.now - conn.idle_since < max_idle, f"{conn} outlived max_idle_time"
            if conn.state is ConnState.IDLE:
                assert conn.role is not Role.OVERFLOW, f"{conn} is overflow and idle"
                if opts.keep_alive is not None:  # an idle connection's probe is due
                    timer = conn.ka_timer
                    assert timer is not None and timer.when > self.now, conn
                    assert timer.when - conn.idle_since <= opts.keep_alive.interval or (
                        timer.when - self.now <= opts.keep_alive.interval
                    ), conn
            timeout_ka = opts.keep_alive and opts.keep_alive.timeout
            if conn.probe_started is not None and timeout_ka:
                assert self.now - conn.probe_started < timeout_ka, f"{conn} probe outlived"

    @invariant()
    def progress(self) -> None:
        """A ready pool with waiters always has a connect on its way, unless it is full."""
        if self.core is None:
            return
        core = self.c
        view = core_view(core)
        shared = state_of(core)
        if core.state is not PoolState.READY or not view.waiting:
            return
        opts = state_of(core).options
        # (connects given up on count against both limits until their function returns)
        abandoned = shared.abandoned
        room = not opts.max_size or view.total + abandoned < opts.max_size
        # (an adaptive pool makes no connection beyond its limit, and serves none beyond it:
        # at the limit, waiters wait for a check-in)
        adaptive = shared.adaptive
        if adaptive is not None:
            room = room and view.total + abandoned < adaptive.limit
            if view.in_use >= adaptive.limit:
                return
        failing = shared.failures.failing
        if failing is not None:
            # connect_retry: one attempt at a time, backing off or connecting
            # (a connect started before the failures covers it: if it fails, it is the retry)
            planned = failing.pending is not None or view.pending > 0
            hooked = view.count(ConnState.CHECKING) + view.count(ConnState.RESETTING)
            planned = planned or hooked > 0  # (a check or a reset running covers a waiter)
            # (or planned once a connect given up on returns and frees max_connecting)
            assert planned or not room or abandoned, "failing with no retry planned"
            assert view.available == 0 or view.waiting <= core_view(core).count(
                ConnState.CHECKING
            ), "a connection is available while a request waits that no check covers"
            return
        # (a check or a reset running, Hooks.check or Hooks.reset, covers a waiter as a connect in
        # flight does; a connect covers as many as a connection is expected to serve: the stream
        # limit of the last one made, PoolOptions.expected_streams before)
        checking = view.count(ConnState.CHECKING)
        expected = shared.expected_streams
        covered = view.pending * expected + checking + view.count(ConnState.RESETTING)
        assert covered > 0 or not room or abandoned, "a waiter is stuck with no connect"
        # stronger: every waiter not covered by a connect in flight gets one while there is room
        if room and view.pending + abandoned < opts.max_connecting:
            assert view.waiting <= covered, "waiters not covered by connects"
        # and nothing sits available while a request waits that no check covers: neither an
        # available connection nor a free stream of a multiplexed one in use (one the pool would
        # lease: not stale, not past its lifetime)
        life = handout_of(core)._life
        free = [
            c
            for c in shared.idle_set.open
            if not _stale(core, c) and life.perished(c, self.now, check_idle=False) is None
        ]
        assert view.available == 0 or view.waiting <= checking, (
            "a connection is available while a request waits"
        )
        assert not free or view.waiting <= checking, "a stream is free while a request waits"

    @invariant()
    def events_pair(self) -> None:
        """With events on: one CheckOutStarted per request, one end per finished request."""
        if self.core is None or not self.c.observed:
            return
        assert self.ev_started == len(self.requests)
        assert self.ev_ended == sum(r.state is not RequestState.WAITING for r in self.requests)
        assert self.ev_checked_in == self.releases

    @invariant()
    def closed_pool(self) -> None:
        if self.core is None or self.c.state is not PoolState.CLOSED:
            return
        for conn in state_of(self.c).conns.values():
            assert conn.state in (ConnState.LEASED, ConnState.DRAINING), conn
        assert core_view(self.c).waiting == 0

    # ------------------------------------------------------------------ the end

    def teardown(self) -> None:
        if self.core is None:
            return
        self.close()
        while self.leases:
            self.release(0, False)
        while self.owed or self.probing:
            while self.owed:
                conn = self.owed[0]
                if conn.id % 2:
                    self.connected(0)
                else:
                    self.connect_failed(0)
            while self.probing:
                self.probe_done(0, False)
        self.advance(1000.0)
        core = self.c
        view = core_view(core)
        shared = state_of(core)
        assert shared.conns == {}, f"left over after close: {shared.conns}"
        assert view.total == view.available == view.pending == view.in_use == view.waiting == 0
        for conn_id in self.started:
            assert conn_id in self.closed_named
        for conn_id in self.objects:
            assert conn_id in self.object_closed
        for req in self.requests:
            assert req.state in _TERMINAL, req
        for inv in (
            self.request_states,
            self.fifo,
            self.counts,
            self.leases_match_streams,
            self.nothing_lost,
            self.events_pair,
        ):
            inv()


PoolCoreMachine.TestCase.settings = settings(
    max_examples=_examples(400),
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestPoolCore = PoolCoreMachine.TestCase


class UnclockedLeaseMachine(PoolCoreMachine):
    """The same driver, but ``lease_idle`` gets ``now`` the way the front ends pass it.

    ``PoolCore.clocked`` says that when it is false (no ``max_idle_time`` nor ``max_lifetime``) a
    front end may pass 0.0
    to ``lease_idle`` and skip reading the clock; the front ends do so whenever the pool is not
    observed. Every other input gets the real time. (Passing 0.0 to ``release`` too was a bug: a
    check-in may start a connect, which then got a connect timeout long past;
    ``test_checkin_gets_the_real_time`` in the front-end tests guards it.) Time here starts at
    100 s, like a monotonic clock, so that 0.0 is far in the past.
    """

    def __init__(self) -> None:
        super().__init__()
        self.now = self.fired_at = 100.0

    @initialize(
        options=pool_options().map(
            lambda o: dataclasses.replace(
                o,
                min_size=max(o.min_size, 1),
                soft_max_size=None if o.soft_max_size is None else max(o.soft_max_size, 1),
                max_idle_time=None,
                max_lifetime=None,
                connect_timeout=1.0,
            )
        ),
        start_ready=st.just(True),
    )
    def setup(self, options: PoolOptions, start_ready: bool) -> None:
        """Only the options under which the front ends skip the clock: unobserved, no
        ``max_idle_time``; with a connect timeout and a ``min_size``, where a wrong ``now``
        would show."""
        super().setup(options, False, start_ready)

    @rule(kind=st.sampled_from(["ready", "ready", "clear", "clear", "interrupt", "close"]))
    def lifecycle(self, kind: str) -> None:
        """More clears: checkouts and check-ins of stale connections are where it would show."""
        super().lifecycle(kind)

    def _lease_idle_time(self) -> float:
        core = self.c
        return self.now if core.clocked or core.observed else 0.0


UnclockedLeaseMachine.TestCase.settings = settings(
    max_examples=_examples(200),
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestUnclockedLease = UnclockedLeaseMachine.TestCase


class CallerCheckMachine(PoolCoreMachine):
    """The same driver, on the options under which ``Pool`` runs checks in the caller
    (``lease_checking`` and ``checked``): a check hook (with timeouts, ``check_after``, a reset
    beside it), unobserved, and those two inputs tried three times as often as the others."""

    @initialize(
        options=pool_options().map(
            lambda o: dataclasses.replace(
                o,
                min_size=max(min(o.min_size, 2), 1),
                max_size=max(o.max_size, 2),
                soft_max_size=None,
                load_balanced=False,
                hooks=Hooks(check=_no_probe, check_after=o.max_lifetime_jitter * 10, timeout=1.0),
            )
        ),
        start_ready=st.just(True),
    )
    def setup(self, options: PoolOptions, start_ready: bool) -> None:
        super().setup(options, False, start_ready)

    @rule()
    def lease_checking_again(self) -> None:
        self.lease_checking()

    @rule()
    def lease_checking_once_more(self) -> None:
        self.lease_checking()

    @precondition(lambda self: self.caller_checks)
    @rule(index=st.integers(min_value=0), fail=st.booleans())
    def checked_again(self, index: int, fail: bool) -> None:
        self.checked(index, fail)


CallerCheckMachine.TestCase.settings = settings(
    max_examples=_examples(150),
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestCallerCheck = CallerCheckMachine.TestCase


# ---------------------------------------------------------------------- regressions found above


def _lb_core(**options: Any) -> PoolCore:
    core = PoolCore(PoolOptions(load_balanced=True, **options), "host:27017")
    core.ready(0.0)
    return core


def _started(actions: list[Any]) -> list[Conn]:
    return [a.conn for a in actions if isinstance(a, StartConnect)]


def test_lb_interrupt_spares_pending_connects_with_a_service_none() -> None:
    """A pending connect has no service yet. Its record's ``service_id`` is ``None`` like a
    connection whose connect function returned the bare connection (no service id); a
    load-balanced clear with interrupt took it for one of those and closed it as stale."""
    core = _lb_core(min_size=2, max_connecting=1)
    (first,) = _started(core.take()[0])
    core.connected(first, 0.0, "c1", None)  # established, service None
    (second,) = _started(core.take()[0])
    assert core.service_generations == {None: [0, 1]}
    core.clear(0.0, interrupt_in_use=True)  # every service
    actions, _ = core.take()
    assert not any(isinstance(a, CloseConnection) for a in actions), actions
    assert second.state is ConnState.CONNECTING and core_view(core).pending == 1
    core.connected(second, 0.0, "c2", None)
    # the service's generation, now (the cast: mypy keeps `second.state` narrowed from above)
    assert cast(ConnState, second.state) is ConnState.IDLE and second.generation == 1
    assert core.service_generations == {None: [1, 2]}


def test_lb_interrupt_serves_the_waiters_it_keeps() -> None:
    """A load-balanced clear keeps the wait queue (CMAP); when it interrupts the connections in
    use, the room they leave must serve the waiters at once, not at the next background run."""
    core = _lb_core(max_size=1, background_interval=math.inf)
    first = Request(0.0, None)
    core.fast.request(first, 0.0)
    (conn,) = _started(core.take()[0])
    core.connected(conn, 0.0, "c1", "service-a")
    assert first.conn is conn
    core.take()
    second = Request(0.0, None)
    core.fast.request(second, 0.0)
    assert second.queued and core.take() == ([], [])
    core.clear(1.0, interrupt_in_use=True, service_id="service-a")
    actions, _ = core.take()
    assert conn.state is ConnState.CLOSED and conn.close_reason == "stale"
    assert core.state is PoolState.READY and core_view(core).waiters() == [second]
    assert core.service_generations == {}  # its last connection gone: the entry too (CMAP)
    started = _started(actions)
    assert len(started) == 1, f"no connect started for the waiter: {actions}"
    core.connected(started[0], 1.0, "c2", "service-a")
    assert second.state is RequestState.SERVED and second.conn is started[0]
    assert core.service_generations == {"service-a": [0, 1]}
