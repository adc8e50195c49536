"""Exact-action tests of the core's health inputs: keep-alive probes and their timers, connect
retries with backoff, the circuit breaker, and the notices of a connection (draining, stream
limits). Each input, the actions and events it must produce."""

from __future__ import annotations

from typing import Any, cast

import pytest
from test_core_table import ADDRESS, kinds, queue, started

from core_view import core_view, state_of
from poolkit import Backoff, Hooks, KeepAlive, PoolOptions
from poolkit._core import (
    Conn,
    ConnState,
    Hold,
    PoolCore,
    Request,
    RequestState,
    StartConnect,
    StartKeepAlive,
    StartReset,
)
from poolkit.errors import CircuitOpenError, KeepAliveTimeoutError
from poolkit.events import (
    ConnectAttemptFailedEvent,
    ConnectFailingEvent,
    ConnectionCheckOutFailedEvent,
    ConnectionClosedEvent,
    ConnectionDrainingEvent,
    ConnectRecoveredEvent,
    KeepAliveFailedEvent,
    KeepAliveSucceededEvent,
    LeaseLeakedEvent,
    MaxStreamsChangedEvent,
)


def _probe(connection: Any) -> None:  # pragma: no cover - the core never calls it
    raise AssertionError


def make(rand: float = 0.5, **options: Any) -> PoolCore:
    """An observed ready core; ``rand`` is every random draw (0.5: no jitter)."""
    options.setdefault("background_interval", float("inf"))
    options.setdefault("connect_timeout", None)
    core = PoolCore(PoolOptions(**options), ADDRESS, observed=True, rand=lambda: rand)
    core.ready(0.0)
    core.take()
    return core


def parked(core: PoolCore, now: float = 0.0) -> Conn:
    """A connection made for a request at ``now``, then released: available."""
    req = queue(core, now)
    (conn,) = started(core.take()[0])
    core.connected(conn, now, object())
    core.take()
    assert req.conn is conn
    core.release(conn, now)
    core.take()
    assert conn.state is ConnState.IDLE
    return conn


def timers(core: PoolCore) -> list[tuple[float, str]]:
    """The live timers, earliest first."""
    live = [e for _, _, e in core.timers._heap if state_of(core).timer_is_live(e)]
    return sorted((e.when, e.kind.name) for e in live)


# ---------------------------------------------------------------------- keep-alive


def test_a_parked_connection_is_probed_one_interval_later() -> None:
    core = make(keep_alive=KeepAlive(10.0, _probe))
    conn = parked(core, 1.0)
    assert timers(core) == [(11.0, "KEEP_ALIVE")]
    core.fire_timers(10.999)
    assert core.take() == ([], [])
    core.fire_timers(11.0)
    actions, events = core.take()
    assert kinds(actions) == ["StartKeepAlive"] and cast(StartKeepAlive, actions[0]).conn is conn
    assert kinds(events) == ["KeepAliveStartedEvent"]
    assert conn.state is ConnState.LEASED and conn.streams == 1 and core_view(core).available == 0
    core.keep_alive_done(conn, 11.5)
    actions, events = core.take()
    assert actions == [] and kinds(events) == ["KeepAliveSucceededEvent"]
    assert cast(KeepAliveSucceededEvent, events[0]).duration == 0.5
    # a probe is not use (the cast: mypy keeps `conn.state` narrowed by the assert above)
    assert cast(ConnState, conn.state) is ConnState.IDLE and conn.idle_since == 1.0
    assert timers(core) == [(21.5, "KEEP_ALIVE")]


def test_a_lease_cancels_the_probe_and_a_release_rearms_it() -> None:
    core = make(keep_alive=KeepAlive(10.0, _probe))
    conn = parked(core, 0.0)
    req = queue_or_serve(core, 5.0)
    assert req.conn is conn and timers(core) == []
    core.fire_timers(10.0)
    assert core.take() == ([], [])
    core.release(conn, 12.0)
    core.take()
    assert timers(core) == [(22.0, "KEEP_ALIVE")]


def queue_or_serve(core: PoolCore, now: float) -> Request:
    req = Request(started=now, deadline=None)
    core.fast.request(req, now)
    core.take()
    assert req.state is RequestState.SERVED
    return req


def test_a_failed_probe_closes_and_refills_min_size() -> None:
    core = make(min_size=1, keep_alive=KeepAlive(10.0, _probe))
    (conn,) = state_of(core).conns.values()  # min_size's connect, started on ready
    core.connected(conn, 0.0, object())
    core.take()
    core.fire_timers(10.0)
    core.take()
    boom = ConnectionResetError()
    core.keep_alive_done(conn, 10.25, boom)
    actions, events = core.take()
    assert kinds(actions) == ["CloseConnection", "StartConnect"]
    assert kinds(events) == [
        "KeepAliveFailedEvent",
        "ConnectionClosedEvent",
        "ConnectionCreatedEvent",
    ]
    failed, closed = cast(KeepAliveFailedEvent, events[0]), cast(ConnectionClosedEvent, events[1])
    assert failed.error is boom and closed.reason == "error" and closed.error is boom
    assert core_view(core).total == 1 and conn.state is ConnState.CLOSED


def test_a_probe_past_its_timeout_fails_and_its_late_result_is_ignored() -> None:
    core = make(keep_alive=KeepAlive(10.0, _probe, timeout=2.0))
    conn = parked(core, 0.0)
    core.fire_timers(10.0)
    core.take()
    assert timers(core) == [(12.0, "PROBE_TIMEOUT")]
    core.fire_timers(12.0)
    actions, events = core.take()
    assert kinds(actions) == ["CloseConnection"]
    assert kinds(events) == ["KeepAliveFailedEvent", "ConnectionClosedEvent"]
    assert isinstance(cast(KeepAliveFailedEvent, events[0]).error, KeepAliveTimeoutError)
    core.keep_alive_done(conn, 30.0)
    assert core.take() == ([], []) and conn.streams == 0


def test_a_probe_whose_idle_time_ran_out_closes_the_connection_idle() -> None:
    core = make(max_idle_time=12.0, keep_alive=KeepAlive(10.0, _probe))
    conn = parked(core, 0.0)
    core.fire_timers(10.0)
    core.take()
    core.fire_timers(12.0)  # the idle sweep: the connection is being probed, not available
    assert core.take() == ([], [])
    core.keep_alive_done(conn, 13.0)
    actions, events = core.take()
    assert kinds(actions) == ["CloseConnection"] and conn.close_reason == "idle"
    assert kinds(events) == ["KeepAliveSucceededEvent", "ConnectionClosedEvent"]


def test_a_waiter_gets_the_probed_connection_when_the_probe_returns() -> None:
    core = make(max_size=1, max_idle_time=12.0, keep_alive=KeepAlive(10.0, _probe))
    conn = parked(core, 0.0)
    core.fire_timers(10.0)
    core.take()
    req = queue(core, 11.0)
    actions, events = core.take()
    assert actions == [] and kinds(events) == ["ConnectionCheckOutStartedEvent"]
    core.fire_timers(12.0)
    assert core.take() == ([], [])
    core.keep_alive_done(conn, 15.0)
    actions, events = core.take()
    assert kinds(actions) == ["CompleteRequest"] and req.conn is conn
    assert kinds(events) == ["KeepAliveSucceededEvent", "ConnectionCheckedOutEvent"]


def test_close_gives_a_probed_connection_back_and_closes_it() -> None:
    core = make(keep_alive=KeepAlive(10.0, _probe))
    conn = parked(core, 0.0)
    core.fire_timers(10.0)
    core.take()
    core.close(11.0)
    actions, events = core.take()
    assert kinds(actions) == ["CloseConnection"] and conn.close_reason == "poolClosed"
    assert kinds(events) == ["ConnectionClosedEvent", "PoolClosedEvent"]
    core.keep_alive_done(conn, 12.0, ConnectionResetError())
    assert core.take() == ([], []) and state_of(core).conns == {}


# ---------------------------------------------------------------------- connect retries


def attempt(events: list[Any]) -> Any:
    """The ConnectAttemptFailedEvent among ``events``."""
    (found,) = [e for e in events if kinds([e]) == ["ConnectAttemptFailedEvent"]]
    return found


def test_a_failed_connect_backs_off_and_the_waiter_keeps_waiting() -> None:
    core = make(connect_retry=Backoff())
    shared = state_of(core)
    req = queue(core, 0.0)
    (conn,) = started(core.take()[0])
    boom = ConnectionRefusedError()
    core.connect_failed(conn, 0.5, boom)
    actions, events = core.take()
    assert kinds(actions) == ["CloseConnection"]
    # the first failure of a run that no checkout is told of is said once (ConnectFailing)
    assert kinds(events) == [
        "ConnectionClosedEvent",
        "ConnectAttemptFailedEvent",
        "ConnectFailingEvent",
    ]
    tried = cast(ConnectAttemptFailedEvent, events[1])
    failing = cast(ConnectFailingEvent, events[2])
    # (ignore: mypy sees no overlap with an Approx, which compares equal to a float)
    assert (tried.failures, tried.retry_in) == (1, pytest.approx(0.1))  # type: ignore[comparison-overlap]
    assert (failing.failures, failing.error) == (1, boom)
    assert req.state is RequestState.WAITING
    (slot,) = [c for c in shared.conns.values()]
    assert slot.state is ConnState.BACKING_OFF and slot.id == conn.id + 1
    # (ignore: mypy sees no overlap with an Approx, which compares equal to a float)
    assert timers(core) == [(pytest.approx(0.6), "BACKOFF")]  # type: ignore[comparison-overlap]
    # no other connect while failing, however many wait
    queue(core, 0.55)
    assert kinds(core.take()[0]) == []
    core.fire_timers(0.6)
    actions, events = core.take()
    assert kinds(actions) == ["StartConnect"] and cast(StartConnect, actions[0]).conn is slot
    assert kinds(events) == ["ConnectionCreatedEvent"]
    # (the cast: mypy keeps `slot.state` narrowed by the assert above)
    assert cast(ConnState, slot.state) is ConnState.CONNECTING and slot.created_at == 0.6
    core.connected(slot, 0.7, object())
    actions, events = core.take()
    assert kinds(actions) == ["CompleteRequest", "StartConnect"]  # then connects as usual
    assert req.conn is slot and shared.failures.failing is None
    (found,) = [e for e in events if kinds([e]) == ["ConnectRecoveredEvent"]]
    recovered = cast(ConnectRecoveredEvent, found)
    # (ignore: mypy sees no overlap with an Approx, which compares equal to a float)
    assert (recovered.failures, recovered.failing_for) == (1, pytest.approx(0.2))  # type: ignore[comparison-overlap]


@pytest.mark.parametrize(
    ("rand", "factor"),
    [(0.0, 0.97), (0.5, 1.0), (0.999999, 1.03)],
)
def test_the_delay_is_the_formula_with_its_jitter(rand: float, factor: float) -> None:
    core = make(rand=rand, connect_retry=Backoff())
    queue(core, 0.0)
    conn = started(core.take()[0])[0]
    now = 0.0
    for n in range(1, 32):
        core.connect_failed(conn, now, OSError())
        _, events = core.take()
        delay = attempt(events).retry_in
        assert delay == pytest.approx(min(0.1 * 1.25 ** (n - 1), 60.0) * factor, rel=1e-5)
        now += delay
        core.fire_timers(now)
        (conn,) = started(core.take()[0])


def test_the_circuit_opens_only_with_no_connection_open_and_closes_on_success() -> None:
    core = make(max_size=2, connect_retry=Backoff(base=1.0, circuit_breaker_after=5.0))
    first = queue(core, 0.0)
    (a,) = started(core.take()[0])
    core.connected(a, 0.0, object())
    core.take()
    assert first.conn is a  # one connection open, leased
    waiter = queue(core, 1.0)
    (b,) = started(core.take()[0])
    now = 1.0
    for _ in range(6):  # fails for longer than 5 s, but connection a is open
        core.connect_failed(b, now, OSError())
        now += attempt(core.take()[1]).retry_in
        core.fire_timers(now)
        (b,) = started(core.take()[0])
    assert waiter.state is RequestState.WAITING
    core.discard(a, now)  # the open connection goes
    core.take()
    core.connect_failed(b, now, OSError("last"))
    actions, events = core.take()
    assert kinds(actions) == ["CloseConnection", "CompleteRequest"]
    assert kinds(events) == [
        "ConnectionClosedEvent",
        "CircuitOpenedEvent",
        "ConnectionCheckOutFailedEvent",
        "ConnectAttemptFailedEvent",
    ]  # (the run was told at its first failure)
    failed = cast(ConnectionCheckOutFailedEvent, events[2])
    assert isinstance(waiter.error, CircuitOpenError) and failed.reason == "circuitOpen"
    assert waiter.error.failures == 7 and str(waiter.error.cause) == "last"
    refused = Request(started=now, deadline=None)
    core.fast.request(refused, now)
    assert isinstance(refused.error, CircuitOpenError) and not refused.queued
    now += attempt(events).retry_in
    core.fire_timers(now)
    (b,) = started(core.take()[0])
    core.connected(b, now, object())
    _, events = core.take()
    assert "CircuitClosedEvent" in kinds(events)
    assert queue_or_serve(core, now).conn is b


def test_a_success_elsewhere_ends_the_failing_state_and_drops_the_slot() -> None:
    core = make(max_connecting=2, connect_retry=Backoff())
    shared = state_of(core)
    queue(core, 0.0)
    queue(core, 0.0)
    a, b = started(core.take()[0])
    core.connect_failed(a, 0.1, OSError())
    core.take()
    (slot,) = [c for c in shared.conns.values() if c.state is ConnState.BACKING_OFF]
    core.connected(b, 0.15, object())
    actions, _ = core.take()
    assert kinds(actions) == ["CompleteRequest", "StartConnect"]  # the other waiter's connect
    assert slot.state is ConnState.CLOSED and slot.id not in shared.conns
    core.fire_timers(10.0)  # the slot's timer is stale
    assert kinds(core.take()[0]) == []


# ---------------------------------------------------------------------- a connection's notices


def test_draining_and_stream_limit_events() -> None:
    core = make()
    req = queue(core, 0.0)
    (conn,) = started(core.take()[0])
    core.connected(conn, 0.0, object(), max_streams=4)
    core.take()
    assert req.conn is conn
    assert core.set_max_streams(conn.id, 2, 1.0)
    _, events = core.take()
    assert kinds(events) == ["MaxStreamsChangedEvent"]
    changed = cast(MaxStreamsChangedEvent, events[0])
    assert (changed.max_streams, changed.previous) == (2, 4)
    assert core.will_close(conn.id, 2.0)
    _, events = core.take()
    assert (
        kinds(events) == ["ConnectionDrainingEvent"]
        and cast(ConnectionDrainingEvent, events[0]).streams_in_use == 1
    )


# ---------------------------------------------------------------------- leaked leases


def test_a_watched_lease_is_reported_once_when_out_too_long() -> None:
    core = make(leak_timeout=5.0)
    conn = parked(core, 0.0)
    req = queue_or_serve(core, 1.0)
    assert req.conn is conn
    held = Hold(conn, 1.0, "  File stack\n")
    core.hold(held, 1.0)
    assert timers(core) == [(6.0, "LEAK")]
    core.fire_timers(5.999)
    assert core.take() == ([], [])
    core.fire_timers(6.0)
    actions, events = core.take()
    assert actions == [] and kinds(events) == ["LeaseLeakedEvent"]
    leak = cast(LeaseLeakedEvent, events[0])
    assert (leak.connection_id, leak.held, leak.stack, leak.collected) == (
        conn.id,
        5.0,
        "  File stack\n",
        False,
    )
    assert timers(core) == []  # once
    core.unhold(held)
    core.release(conn, 7.0)
    assert conn.state is ConnState.IDLE


def test_a_lease_given_back_in_time_is_never_reported() -> None:
    core = make(leak_timeout=5.0)
    conn = parked(core, 0.0)
    queue_or_serve(core, 0.0)
    held = Hold(conn, 0.0, "")
    core.hold(held, 0.0)
    core.unhold(held)
    core.release(conn, 1.0)
    core.take()
    core.fire_timers(100.0)
    assert core.take() == ([], [])


def test_a_collected_lease_is_reported_and_its_connection_closed_even_unobserved() -> None:
    core = make(leak_timeout=5.0)
    core.observed = False
    conn = parked(core, 0.0)
    queue_or_serve(core, 0.0)
    held = Hold(conn, 0.0, "stack")
    core.hold(held, 0.0)
    core.lease_collected(held, 2.0)
    actions, events = core.take()
    assert kinds(actions) == ["CloseConnection"] and conn.close_reason == "error"
    # a leak is always told
    assert kinds(events) == ["LeaseLeakedEvent"] and cast(LeaseLeakedEvent, events[0]).collected
    assert core_view(core).total == 0
    core.lease_collected(held, 3.0)  # reported once, closed once
    core.fire_timers(10.0)
    assert core.take() == ([], [])


def test_will_close_on_a_connection_used_only_by_its_probe_closes_it_now() -> None:
    core = make(keep_alive=KeepAlive(10.0, _probe))
    conn = parked(core, 0.0)
    core.fire_timers(10.0)
    core.take()
    assert core.will_close(conn.id, 11.0)
    actions, events = core.take()
    assert kinds(actions) == ["CloseConnection"] and conn.close_reason == "willClose"
    assert kinds(events) == ["ConnectionClosedEvent"]  # not draining: closed at once
    assert conn.probe_started is None and conn.streams == 0
    core.keep_alive_done(conn, 12.0)  # the probe's late result
    assert core.take() == ([], [])


def test_a_draining_connection_closes_on_its_last_release_without_waiting_for_its_probe() -> None:
    # PostgresNIO's testConnectionWillCloseOnLeasedWithKeepAlive_ClosesOnRelease
    core = make(keep_alive=KeepAlive(10.0, _probe))
    req = queue(core, 0.0)
    (conn,) = started(core.take()[0])
    core.connected(conn, 0.0, object(), max_streams=100)
    core.take()
    assert req.conn is conn
    core.release(conn, 0.0)  # idle: probed at 10
    core.take()
    core.fire_timers(10.0)
    core.take()
    lease = queue_or_serve(core, 10.5)  # a user lease beside the probe
    assert lease.conn is conn and conn.streams == 2
    assert core.will_close(conn.id, 11.0)
    core.take()
    assert conn.state is ConnState.DRAINING
    core.release(conn, 12.0)
    actions, events = core.take()
    assert kinds(actions) == ["CloseConnection"] and conn.close_reason == "willClose"
    assert kinds(events) == ["ConnectionCheckedInEvent", "ConnectionClosedEvent"]
    core.keep_alive_done(conn, 13.0)
    assert core.take() == ([], []) and conn.streams == 0


def test_an_unwatched_collected_lease_is_reported_without_time_or_stack() -> None:
    core = make(max_size=1)
    conn = parked(core, 0.0)
    queue_or_serve(core, 0.0)
    waiter = queue(core, 1.0)
    core.take()
    core.lease_collected(conn, 2.0)
    actions, events = core.take()
    assert kinds(actions) == ["CloseConnection", "StartConnect"]  # for the waiter
    leak = cast(LeaseLeakedEvent, events[0])
    assert kinds(events)[0] == "LeaseLeakedEvent" and leak.collected
    assert (leak.held, leak.stack) == (None, "")
    assert waiter.state is RequestState.WAITING and core_view(core).total == 1


# ---------------------------------------------------------------------- resets


@pytest.mark.parametrize("retry", [None, Backoff()])
def test_a_reset_running_covers_a_waiter_as_a_connect_in_flight_does(retry: Any) -> None:
    """Issue 24, point 5: a waiter that arrives while a connection is being reset is covered by
    that reset (no connect); the next one is not; a failed reset uncovers its waiter."""
    core = make(max_size=4, hooks=Hooks(reset=_probe), connect_retry=retry)
    lease = Request(started=1.0, deadline=None)
    core.fast.request(lease, 1.0)
    (conn,) = started(core.take()[0])
    core.connected(conn, 1.0, object())
    core.take()
    assert lease.conn is conn
    core.release(conn, 2.0)
    actions, _ = core.take()
    assert kinds(actions) == ["StartReset"] and cast(StartReset, actions[0]).conn is conn
    first = Request(started=3.0, deadline=None)
    core.fast.request(first, 3.0)
    assert first.queued and kinds(core.take()[0]) == []  # covered: no connect
    second = Request(started=3.0, deadline=None)
    core.fast.request(second, 3.0)
    (made,) = started(core.take()[0])  # not covered: one connect
    core.reset_done(conn, 4.0)
    actions, _ = core.take()
    assert kinds(actions) == ["CompleteRequest"] and first.conn is conn
    core.connected(made, 5.0, object())
    core.take()
    assert second.conn is made

    core.release(conn, 6.0)
    core.take()
    third = Request(started=6.0, deadline=None)
    core.fast.request(third, 6.0)
    assert kinds(core.take()[0]) == []
    core.reset_done(conn, 7.0, RuntimeError("ROLLBACK failed"))  # the cover is gone
    actions, _ = core.take()
    assert kinds(actions) == ["CloseConnection", "StartConnect"]
    assert third.state is RequestState.WAITING
