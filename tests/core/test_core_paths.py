"""The core's fast paths against its slow ones, and an observed core against an unobserved one.

A front end that nobody observes checks out with ``PoolCore.lease_idle`` and falls back to
``request`` when it returns ``None``, and checks in with ``release_idle`` and falls back to
``release`` when it returns false (``poolkit.asyncio``, ``poolkit.threaded``); everything else
goes through the one slow input. The fast paths are only shortcuts: the same inputs must leave the
same state whichever path ran. A Hypothesis state machine feeds one sequence of inputs to four
cores with the same options:

* ``fast``: unobserved, the fast paths wherever the front ends take them;
* ``slow``: unobserved, ``request`` and ``release`` only (the reference);
* ``observed``: observed, slow paths (the front ends never take a fast path then);
* ``mixed``: observed or not as a rule toggles it (a listener or DEBUG logging coming and
  going), the fast paths whenever it is unobserved.

After every step their observable states must be equal: the connections (state, role,
generation, service, streams, timers...), which are available (in order), open for more streams
and waiting (in order), the service generations, ``stats()``, the live timers, what each checkout
became, and the actions of the step (connects, closes with their reasons, requests completed, in
order). Only events may differ: an unobserved core tells only what is always told (a leak, say),
the same on either path and no more than an observed core tells. What the fast paths are
documented to skip is not compared: ``idle_since`` in an unclocked pool (never read there) and
of a connection not available (stamped anew before it is read: ``_idle_time_read``), and
the wait of a request ``release_idle`` hands a connection to is noted by the caller
(``note_waits``, here at once as ``AsyncPool`` does).

Example counts are modest for CI; ``POOLKIT_HYPOTHESIS_EXAMPLES=5000`` (say) runs that many.
"""

from __future__ import annotations

import collections
import dataclasses
import math
import os
import random
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from core_view import core_view, state_of
from poolkit import Backoff, Hooks, KeepAlive, PoolOptions
from poolkit._core import (
    CloseConnection,
    CompleteRequest,
    Conn,
    ConnState,
    PoolCore,
    Request,
    RequestState,
    StartConnect,
    StartKeepAlive,
    StartReset,
)
from poolkit.errors import PoolClosedError
from poolkit.stats import PoolState


def _examples(default: int) -> int:
    return int(os.environ.get("POOLKIT_HYPOTHESIS_EXAMPLES", default))


def _no_probe(connection: Any) -> None:  # pragma: no cover - the machine reports probes itself
    raise AssertionError("never called: the core only asks for probes")


class ConnectError(Exception):
    pass


_RETRIES = [
    None,
    None,
    None,
    Backoff(base=0.25, factor=2.0, max_delay=1.0, jitter=0.03, circuit_breaker_after=None),
    Backoff(base=0.5, factor=1.5, max_delay=2.0, circuit_breaker_after=1.0),
]
_SERVICES = [1, 2, 3, None]
_START = 100.0  # like a monotonic clock: 0.0, what an unclocked fast checkout passes, is past


@st.composite
def pool_options(draw: st.DrawFn) -> PoolOptions:
    """Options where the fast paths apply (unclocked, not load-balanced) more often than not,
    and every kind of pool besides: clocked, load-balanced, overflow, multiplexed, retrying."""
    max_size = draw(st.integers(0, 4))
    min_size = draw(st.integers(0, max_size if max_size else 2))
    soft = draw(st.one_of(st.none(), st.integers(min_size, max_size if max_size else 4)))
    clocked = draw(st.sampled_from([False, False, True]))
    # (a reset hook keeps release_idle off; release_idle_clean, a check-in its caller reset,
    # takes the fast path all the same)
    resets = draw(st.sampled_from([False, False, True]))
    return PoolOptions(
        hooks=Hooks(reset=_no_reset) if resets else None,
        max_size=max_size,
        min_size=min_size,
        soft_max_size=soft,
        max_connecting=draw(st.integers(1, 3)),
        max_waiting=draw(st.sampled_from([0, 0, 1, 3])),
        background_interval=draw(st.sampled_from([0.5, 2.0, math.inf])),
        connect_timeout=draw(st.sampled_from([None, 1.0, 3.0])),
        connect_retry=draw(st.sampled_from(_RETRIES)),
        load_balanced=draw(st.sampled_from([False, False, True])),
        max_idle_time=draw(st.sampled_from([None, 1.0, 2.5])) if clocked else None,
        max_lifetime=draw(st.sampled_from([None, 1.5, 4.0])) if clocked else None,
        max_lifetime_jitter=draw(st.sampled_from([0.0, 0.1])),
        keep_alive=(
            draw(st.sampled_from([None, KeepAlive(1.0, _no_probe, timeout=0.25)]))
            if clocked
            else None
        ),
    )


def _no_reset(conn: Any) -> None:
    """(A reset hook the core never calls: the drivers report its end, ``reset_done``.)"""


class ConnectionObject:
    def __init__(self, conn_id: int) -> None:
        self.conn_id = conn_id

    def __repr__(self) -> str:
        return f"ConnectionObject({self.conn_id})"


class Driver:
    """One core and what its front end knows: leases out, connects and probes owed, and the
    request (if any) of each checkout, numbered the same in every driver."""

    def __init__(self, name: str, options: PoolOptions, seed: int, *, fast: bool, observed: bool):
        self.name = name
        self.core = PoolCore(
            options, "host:27017", observed=observed, rand=random.Random(seed).random
        )
        self.core.take()
        self.fast = fast  #: takes the fast paths when unobserved
        self.requests: dict[int, Request] = {}  #: checkout number -> its request
        self.number: dict[int, int] = {}  #: id(request) -> checkout number
        self.leased_at_once: dict[int, Conn] = {}  #: checkouts that lease_idle served
        self.leases: list[Conn] = []
        self.owed: list[Conn] = []
        self.probing: list[Conn] = []
        self.resetting: list[Conn] = []
        self.served: list[int] = []  #: queued checkouts served, in the order they were
        self.step: list[tuple[Any, ...]] = []  #: the actions of the last step, normalized
        self.events: list[Any] = []  #: the events of the last step
        self.told = observed  #: whether the core was observed in the last step

    @property
    def quick(self) -> bool:
        """Whether the front end takes its fast paths now (nobody observes the pool)."""
        return self.fast and not self.core.observed

    # ------------------------------------------------------------------ inputs

    def checkout(self, number: int, now: float, timeout: float | None) -> None:
        core = self.core
        if self.quick:
            conn = core.fast.lease_idle(now if core.clocked else 0.0)
            if conn is not None:
                # what AsyncPool relies on: output of a fast lease is actions at most
                assert not core.timers.dirty and not core.events, self.name
                self.leased_at_once[number] = conn
                self.leases.append(conn)
                return
        req = Request(now, None if timeout is None else now + timeout)
        self.requests[number] = req
        self.number[id(req)] = number
        core.fast.request(req, now)
        if req.state is RequestState.SERVED and not req.queued:
            assert req.conn is not None
            self.leases.append(req.conn)

    def release(self, index: int, now: float, clean: bool = False) -> None:
        """A check-in (``clean``: of a connection its caller reset, ``release(reset=False)``)."""
        conn = self.leases.pop(index % len(self.leases))
        core = self.core
        if self.quick:
            fast = core.fast
            taken = fast.release_idle_clean(conn) if clean else fast.release_idle(conn)
            if taken is not False:
                assert not core.actions and not core.events and not core.timers.dirty
                if taken is not True:
                    core.fast.note_waits((now - taken.started,))  # as AsyncPool does, at once
                    self._complete(taken)
                return
        may_output = core.release(conn, now, clean)
        if not may_output:  # the front end takes nothing: there must be nothing to take
            assert not core.actions and not core.timers.dirty, self.name
            assert not core.events or core.observed, self.name

    def discard(self, index: int, now: float) -> None:
        conn = self.leases.pop(index % len(self.leases))
        self.core.discard(conn, now, ConnectError("broken"))

    def collected(self, index: int, now: float) -> None:
        conn = self.leases.pop(index % len(self.leases))
        self.core.lease_collected(conn, now)

    def cancel(self, number: int, now: float) -> None:
        assert self.core.cancel(self.requests[number], now)

    def connected(self, index: int, now: float, service: Any, max_streams: int) -> None:
        conn = self.owed.pop(index % len(self.owed))
        self.core.connected(conn, now, ConnectionObject(conn.id), service, max_streams)

    def connect_failed(self, index: int, now: float) -> None:
        conn = self.owed.pop(index % len(self.owed))
        self.core.connect_failed(conn, now, ConnectError(f"connect {conn.id}"))

    def reset_done(self, index: int, now: float, fail: bool) -> None:
        conn = self.resetting.pop(index % len(self.resetting))
        self.core.reset_done(conn, now, ConnectError("reset") if fail else None)

    def probe_done(self, index: int, now: float, fail: bool) -> None:
        conn = self.probing.pop(index % len(self.probing))
        self.core.keep_alive_done(conn, now, ConnectError("probe") if fail else None)

    # ------------------------------------------------------------------ output

    def _complete(self, req: Request) -> None:
        number = self.number[id(req)]
        self.step.append(("complete", number, req.state.value, _conn_id(req.conn)))
        if req.state is RequestState.SERVED:
            assert req.conn is not None
            self.leases.append(req.conn)
            self.served.append(number)

    def carry_out(self) -> None:
        """Take the step's output, as the front end does, and keep a normalized copy."""
        core = self.core
        actions, self.events = core.take()
        for action in actions:
            if isinstance(action, StartConnect):
                self.owed.append(action.conn)
                self.step.append(("connect", action.conn.id))
            elif isinstance(action, CloseConnection):
                conn = action.conn
                obj = action.connection
                self.step.append(
                    ("close", conn.id, conn.close_reason, action.pending, _obj_id(obj))
                )
            elif isinstance(action, StartKeepAlive):
                self.probing.append(action.conn)
                self.step.append(("probe", action.conn.id))
            elif isinstance(action, StartReset):
                self.resetting.append(action.conn)
                self.step.append(("reset", action.conn.id))
            else:
                assert isinstance(action, CompleteRequest), action
                self._complete(action.request)
        self.told = core.observed
        if core.timers.dirty:
            core.take_deadline()  # the front end re-arms its timer

    # ------------------------------------------------------------------ state

    def outcome(self, number: int) -> tuple[Any, ...]:
        """What checkout ``number`` became (so far)."""
        if number in self.leased_at_once:
            return ("served", False, self.leased_at_once[number].id, None)
        req = self.requests[number]
        if req.state is RequestState.SERVED and not req.queued:
            return ("served", False, _conn_id(req.conn), None)
        error = None if req.error is None else (type(req.error).__name__, str(req.error))
        return (req.state.value, req.queued, _conn_id(req.conn), error)

    def snapshot(self, checkouts: int) -> dict[str, Any]:
        core = self.core
        view = core_view(core)
        shared = state_of(core)
        clocked = core.clocked
        failing = shared.failures.failing
        live = [e for _, _, e in core.timers._heap if shared.timer_is_live(e)]
        return {
            "state": (
                core.state,
                core.generation,
                core.stats().checkouts,
                shared.failures.row,
            ),
            "services": {sid: tuple(entry) for sid, entry in core.service_generations.items()},
            "conns": sorted(_conn_state(c, clocked) for c in shared.conns.values()),
            "idle": [c.id for c in view.idle_connections()],
            "open": [c.id for c in shared.idle_set.open],
            "waiters": [self.number[id(r)] for r in view.waiters()],
            "counts": (
                list(shared.counts),
                shared.roles.kept,
                shared.roles.overflow,
                shared.next_id,
            ),
            "stats": dataclasses.asdict(core.stats()),
            "timers": sorted((e.when, e.kind, self._target(e.target)) for e in live),
            "sweep": None if shared.idle_set.sweep is None else shared.idle_set.sweep.when,
            "background": None if shared.background is None else shared.background.when,
            "failing": None
            if failing is None
            else (
                failing.since,
                failing.failures,
                failing.open,
                _conn_id(failing.pending),
                repr(failing.error),
            ),
            "leases": [(c.id, c.state) for c in self.leases],
            "owed": [c.id for c in self.owed],
            "probing": [c.id for c in self.probing],
            "served": list(self.served),
            "outcomes": [self.outcome(n) for n in range(checkouts)],
            "step": list(self.step),
        }

    def _target(self, target: Any) -> Any:
        if isinstance(target, Request):
            return ("request", self.number[id(target)])
        if isinstance(target, Conn):
            return ("conn", target.id)
        assert target is None, target
        return None


def _told(events: list[Any]) -> list[tuple[Any, ...]]:
    """Events as comparable across cores (their errors are each core's own objects)."""
    return [
        (type(e).__name__, getattr(e, "connection_id", None), getattr(e, "reason", None))
        for e in events
    ]


def _conn_id(conn: Conn | None) -> int | None:
    return None if conn is None else conn.id


def _obj_id(obj: Any) -> int | None:
    return None if obj is None else obj.conn_id


def _conn_state(conn: Conn, clocked: bool) -> tuple[Any, ...]:
    ka = conn.ka_timer
    return (
        conn.id,
        conn.state,
        conn.role.value,
        conn.generation,
        repr(conn.service_id),
        conn.streams,
        conn.max_streams,
        conn.gate,
        conn.created_at,
        conn.expires,
        # kept only in a clocked pool (see PoolCore), read only while it is available
        conn.idle_since if clocked and _idle_time_read(conn) else None,
        conn.probe_started,
        None if ka is None else (ka.kind, ka.when),
        _obj_id(conn.connection),
    )


def _idle_time_read(conn: Conn) -> bool:
    """Whether the pool may read ``conn.idle_since`` now: while it is available, or held by its
    keep-alive probe only (which leaves the idle time running). Every way into those stamps it
    (parked, connected, checked, reset, a multiplexed connection's last stream back but the
    probe's), so it is not compared otherwise: release_idle's hand-off leaves it as it was."""
    return conn.state is ConnState.IDLE or conn.probe_started is not None


class PathsMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.drivers: list[Driver] = []
        self.now = _START
        self.checkouts = 0  #: checkouts made so far (each numbered in every driver)

    @initialize(
        options=pool_options(),
        seed=st.integers(0, 2**16),
        start_ready=st.sampled_from([True, True, False]),
    )
    def setup(self, options: PoolOptions, seed: int, start_ready: bool) -> None:
        self.drivers = [
            Driver("slow", options, seed, fast=False, observed=False),
            Driver("fast", options, seed, fast=True, observed=False),
            Driver("observed", options, seed, fast=False, observed=True),
            Driver("mixed", options, seed, fast=True, observed=False),
        ]
        if start_ready:
            self._each(lambda d: d.core.ready(self.now))

    @property
    def ref(self) -> Driver:
        return self.drivers[0]

    def _each(self, fn: Any) -> list[Any]:
        """Feed one input to every core and carry out what each asks."""
        results = []
        for driver in self.drivers:
            driver.step = []
            results.append(fn(driver))
            driver.carry_out()
        return results

    # ------------------------------------------------------------------ rules

    @rule(timeout=st.sampled_from([None, 0.0, 0.5, 0.5, 2.0]))
    def checkout(self, timeout: float | None) -> None:
        number = self.checkouts
        self.checkouts += 1
        self._each(lambda d: d.checkout(number, self.now, timeout))

    @rule(timeout=st.sampled_from([0.0, 0.5]))
    def checkout_more(self, timeout: float | None) -> None:
        """(Checkouts and check-ins weigh more than other inputs: the paths under test; these
        wait little, so that a queue does not keep the fast checkout away for good.)"""
        self.checkout(timeout)

    @precondition(lambda self: self.ref.leases)
    @rule(index=st.integers(min_value=0), how=st.sampled_from(["release"] * 4 + ["discard", "gc"]))
    def checkin(self, index: int, how: str) -> None:
        if how == "release":
            self._each(lambda d: d.release(index, self.now))
        elif how == "discard":
            self._each(lambda d: d.discard(index, self.now))
        else:
            self._each(lambda d: d.collected(index, self.now))

    @precondition(lambda self: self.ref.leases)
    @rule(index=st.integers(min_value=0))
    def release(self, index: int) -> None:
        self._each(lambda d: d.release(index, self.now))

    @precondition(lambda self: self.ref.leases)
    @rule(index=st.integers(min_value=0))
    def release_more(self, index: int) -> None:
        self.release(index)

    @precondition(lambda self: self.ref.leases)
    @rule(index=st.integers(min_value=0))
    def release_clean(self, index: int) -> None:
        """A check-in whose caller reset the connection (``Lease.release(reset=False)``)."""
        self._each(lambda d: d.release(index, self.now, clean=True))

    @precondition(lambda self: self.ref.resetting)
    @rule(index=st.integers(min_value=0), fail=st.booleans())
    def reset_done(self, index: int, fail: bool) -> None:
        self._each(lambda d: d.reset_done(index, self.now, fail))

    @precondition(lambda self: bool(core_view(self.ref.core).waiting))
    @rule(index=st.integers(min_value=0))
    def cancel(self, index: int) -> None:
        waiting = [self.ref.number[id(r)] for r in core_view(self.ref.core).waiters()]
        number = waiting[index % len(waiting)]
        self._each(lambda d: d.cancel(number, self.now))

    @precondition(lambda self: self.ref.owed)
    @rule(
        index=st.integers(min_value=0),
        service=st.sampled_from(_SERVICES),
        max_streams=st.sampled_from([1, 1, 1, 2, 3]),
    )
    def connected(self, index: int, service: Any, max_streams: int) -> None:
        self._each(lambda d: d.connected(index, self.now, service, max_streams))

    @precondition(lambda self: self.ref.owed)
    @rule(index=st.integers(min_value=0))
    def connected_more(self, index: int) -> None:
        self.connected(index, 1, 1)

    @precondition(lambda self: self.ref.owed)
    @rule(index=st.integers(min_value=0))
    def connect_failed(self, index: int) -> None:
        self._each(lambda d: d.connect_failed(index, self.now))

    @precondition(lambda self: self.ref.probing)
    @rule(index=st.integers(min_value=0), fail=st.booleans())
    def probe_done(self, index: int, fail: bool) -> None:
        self._each(lambda d: d.probe_done(index, self.now, fail))

    @rule(dt=st.sampled_from([0.0, 0.25, 0.5, 1.0, 2.0, 5.0]))
    def advance(self, dt: float) -> None:
        self.now += dt
        self._each(lambda d: d.core.fire_timers(self.now))

    @rule(kind=st.sampled_from(["ready", "ready", "clear", "interrupt"]))
    def lifecycle(self, kind: str) -> None:
        if kind == "ready":
            if self.ref.core.state is PoolState.CLOSED:
                return
            self._each(lambda d: d.core.ready(self.now))
        else:
            self._each(lambda d: d.core.clear(self.now, interrupt_in_use=kind == "interrupt"))

    @rule(now=st.sampled_from([False, False, False, True]))
    def close(self, now: bool) -> None:
        """(Rarely: what follows a close is less varied.)"""
        if now:
            self._each(lambda d: d.core.close(self.now))

    @rule()
    def bounce(self) -> None:
        """Clear and ready again at once: stale leases out while the pool is ready."""
        if self.ref.core.state is PoolState.CLOSED:
            return
        self._each(lambda d: d.core.clear(self.now))
        self._each(lambda d: d.core.ready(self.now))

    @precondition(lambda self: state_of(self.ref.core).options.load_balanced)
    @rule(service=st.sampled_from(_SERVICES), interrupt=st.booleans())
    def clear_service(self, service: Any, interrupt: bool) -> None:
        self._each(lambda d: d.core.clear(self.now, interrupt_in_use=interrupt, service_id=service))

    @precondition(lambda self: bool(state_of(self.ref.core).conns))
    @rule(index=st.integers(min_value=0))
    def will_close(self, index: int) -> None:
        ids = sorted(state_of(self.ref.core).conns)
        conn_id = ids[index % len(ids)]
        self._each(lambda d: d.core.will_close(conn_id, self.now))

    @precondition(lambda self: bool(state_of(self.ref.core).conns))
    @rule(index=st.integers(min_value=0), max_streams=st.sampled_from([1, 1, 2, 4]))
    def set_max_streams(self, index: int, max_streams: int) -> None:
        ids = sorted(state_of(self.ref.core).conns)
        conn_id = ids[index % len(ids)]
        self._each(lambda d: d.core.set_max_streams(conn_id, max_streams, self.now))

    @rule(on=st.booleans())
    def listen(self, on: bool) -> None:
        """A listener (or DEBUG logging) comes or goes on the mixed core: it is observed from now
        on, or takes the fast paths again."""
        self.drivers[3].core.observed = on
        for driver in self.drivers:
            driver.step = []
            driver.events = []

    # ------------------------------------------------------------------ the check

    @invariant()
    def same_state(self) -> None:
        if not self.drivers:
            return
        expected = self.ref.snapshot(self.checkouts)
        for driver in self.drivers[1:]:
            got = driver.snapshot(self.checkouts)
            for key, value in expected.items():
                assert got[key] == value, (
                    f"{driver.name} differs from slow in {key}:\n  {got[key]}\n  {value}"
                )

    @invariant()
    def events_only_when_observed(self) -> None:
        """An unobserved core builds only the events that are always told (a leak, say): the
        same whichever path ran, and no more than an observed core tells. The mixed core, when
        observed, tells what the observed one does."""
        if not self.drivers:
            return
        slow, fast, observed, mixed = self.drivers
        told = _told(observed.events)
        assert _told(fast.events) == _told(slow.events)
        assert not collections.Counter(_told(slow.events)) - collections.Counter(told)
        assert _told(mixed.events) == (told if mixed.told else _told(slow.events))

    def teardown(self) -> None:
        """Close, give everything back and report every owed result: the cores end equal and
        empty."""
        if not self.drivers:
            return
        self._each(lambda d: d.core.close(self.now))
        while self.ref.leases:
            self._each(lambda d: d.release(0, self.now))
            self.same_state()
        while self.ref.owed or self.ref.probing:
            if self.ref.owed:
                self._each(lambda d: d.connected(0, self.now, 1, 1))
            else:
                self._each(lambda d: d.probe_done(0, self.now, False))
            self.same_state()
        self.advance(1000.0)
        self.same_state()
        for driver in self.drivers:
            assert state_of(driver.core).conns == {}, driver.name
            try:
                driver.core.ready(self.now)
            except PoolClosedError:
                pass
            else:  # pragma: no cover
                raise AssertionError("a closed pool became ready")
            assert all(c.state is ConnState.CLOSED for c in driver.leases)


PathsMachine.TestCase.settings = settings(
    max_examples=_examples(200),
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestPaths = PathsMachine.TestCase


# ---------------------------------------------------------------------- regressions found above


def test_fast_checkout_prefers_a_free_stream_to_an_idle_connection() -> None:
    """Leases go to a multiplexed connection in use with a stream free before an idle one
    (``_take``); ``lease_idle`` popped the idle plain connection on top of the stack instead, so
    the same checkout got another connection on the fast path than on the slow one."""
    leased = []
    for fast in (True, False):
        core = PoolCore(PoolOptions(max_size=2, max_connecting=2), "host:27017")
        shared = state_of(core)
        core.ready(_START)
        first, second = Request(_START, None), Request(_START, None)
        core.fast.request(first, _START)
        core.fast.request(second, _START)
        plain, multiplexed = (a.conn for a in core.take()[0] if isinstance(a, StartConnect))
        core.connected(plain, _START, ConnectionObject(plain.id))
        core.connected(multiplexed, _START, ConnectionObject(multiplexed.id), None, 2)
        assert first.conn is plain and second.conn is multiplexed
        assert core.fast.release_idle(plain) is True  # available again, on top of the stack
        assert core_view(core).idle_connections() == [plain] and list(shared.idle_set.open) == [
            multiplexed
        ]
        if fast:
            conn = core.fast.lease_idle(0.0)
        else:
            third = Request(_START, None)
            core.fast.request(third, _START)
            conn = third.conn
        assert conn is multiplexed and multiplexed.streams == 2, (fast, conn)
        assert plain.state is ConnState.IDLE and list(shared.idle_set.open) == []
        leased.append(conn.id)
    assert leased[0] == leased[1]


def test_a_fast_check_in_of_a_clocked_pool_parks_nothing_and_hands_off_to_a_waiter() -> None:
    """In a clocked pool (``max_idle_time`` here) ``release_idle`` hands a connection to the
    oldest waiter, but never parks one: parking stamps the connection's idle time, which the
    idle sweep reads. Parked with the time of its last parking, the connection checked in at
    109 would be closed by the sweep at 110 as idle for 10 s; it has been idle for 1 s."""
    core = PoolCore(PoolOptions(max_size=1, max_idle_time=10.0), "host:27017")
    core.ready(_START)
    first = Request(_START, None)
    core.fast.request(first, _START)
    (connect,) = (a for a in core.take()[0] if isinstance(a, StartConnect))
    core.connected(connect.conn, _START, ConnectionObject(connect.conn.id))
    conn = first.conn
    assert conn is connect.conn
    # contended: the check-in hands the connection to the waiter, on the fast path
    waiter = Request(_START + 1.0, None)
    core.fast.request(waiter, _START + 1.0)
    assert waiter.queued and core.fast.release_idle(conn) is waiter
    assert waiter.state is RequestState.SERVED and waiter.conn is conn
    # uncontended: refused, nothing changed; the front end takes the full check-in
    assert core.fast.release_idle(conn) is False
    assert conn.state is ConnState.LEASED and core_view(core).available == 0
    core.release(conn, _START + 9.0)
    core.take()
    core.fire_timers(_START + 10.0)
    closes = [a for a in core.take()[0] if isinstance(a, CloseConnection)]
    assert closes == [] and core_view(core).idle_connections() == [conn]
    core.fire_timers(_START + 19.0)
    assert [a.conn for a in core.take()[0] if isinstance(a, CloseConnection)] == [conn]
