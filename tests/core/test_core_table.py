"""Exact-action tests of the pure core: each input, the actions and events it must produce."""

from __future__ import annotations

from typing import Any, cast

import pytest
from hypothesis import given
from hypothesis import strategies as st

from core_view import core_view, state_of
from poolkit import PoolOptions
from poolkit._core import (
    STEPS,
    CloseConnection,
    CompleteRequest,
    Conn,
    ConnInput,
    ConnState,
    InvalidTransition,
    PoolCore,
    Request,
    RequestState,
    Role,
    StartConnect,
)
from poolkit._core.connection_life import ConnectionLife
from poolkit._core.records import COUNTED
from poolkit._core.state import CoreState
from poolkit.errors import (
    ConnectTimeoutError,
    PoolClearedError,
    PoolClosedError,
    WaitQueueTimeoutError,
)
from poolkit.events import (
    ConnectAttemptFailedEvent,
    ConnectionCheckedInEvent,
    ConnectionCheckedOutEvent,
    ConnectionCheckOutFailedEvent,
    ConnectionCheckOutStartedEvent,
    ConnectionClosedEvent,
    ConnectionCreatedEvent,
    ConnectionReadyEvent,
    PoolClearedEvent,
    PoolClosedEvent,
    PoolReadyEvent,
)
from poolkit.stats import PoolState

ADDRESS = "db:27017"


def make(ready: bool = True, **options: Any) -> PoolCore:
    """An observed core (creation events taken), ready at t=0 unless told otherwise."""
    options.setdefault("background_interval", float("inf"))
    options.setdefault("connect_timeout", None)
    core = PoolCore(PoolOptions(**options), ADDRESS, observed=True)
    if ready:
        core.ready(0.0)
    core.take()
    return core


def kinds(items: list[Any]) -> list[str]:
    return [type(item).__name__ for item in items]


def started(actions: list[Any]) -> list[Conn]:
    assert all(isinstance(a, StartConnect) for a in actions), actions
    return [a.conn for a in actions]


def queue(core: PoolCore, now: float = 0.0, deadline: float | None = None) -> Request:
    req = Request(started=now, deadline=deadline)
    core.fast.request(req, now)
    assert req.queued and req.state is RequestState.WAITING
    return req


def leased(core: PoolCore, now: float = 0.0) -> Conn:
    """A connection established for a request and leased."""
    req = queue(core, now)
    actions, _ = core.take()
    (conn,) = started(actions)
    core.connected(conn, now, object())
    actions, _ = core.take()
    assert [a.request for a in actions if isinstance(a, CompleteRequest)] == [req]
    assert req.conn is conn
    return conn


def idle(core: PoolCore, now: float = 0.0) -> Conn:
    conn = leased(core, now)
    core.release(conn, now)
    core.take()
    assert conn.state is ConnState.IDLE
    return conn


def pending_beside(core: PoolCore, rest: Conn, now: float = 0.0) -> Conn:
    """A connect in flight while ``rest`` stays available: lease ``rest``, queue a request (which
    starts a connect), cancel it, and return ``rest``."""
    assert core.fast.lease_idle(now) is rest
    req = queue(core, now)
    (conn,) = started(core.take()[0])
    assert core.cancel(req, now)
    core.release(rest, now)
    core.take()
    assert rest.state is ConnState.IDLE and conn.state is ConnState.CONNECTING
    return conn


# ---------------------------------------------------------------------- lifecycle


def test_ready_with_min_size_starts_one_connect_per_missing_connection() -> None:
    core = make(ready=False, min_size=2, max_connecting=2)
    core.ready(0.0)
    actions, events = core.take()
    conns = started(actions)
    assert len(conns) == 2
    assert [c.role for c in conns] == [Role.KEPT, Role.KEPT]
    assert kinds(events) == ["PoolReadyEvent", "ConnectionCreatedEvent", "ConnectionCreatedEvent"]
    created = cast(list[ConnectionCreatedEvent], events[1:])
    assert [e.connection_id for e in created] == [c.id for c in conns]
    core.ready(0.0)  # already ready: nothing more
    assert core.take() == ([], [])


def test_min_size_beyond_max_connecting_continues_as_connects_finish() -> None:
    core = make(ready=False, min_size=3, max_connecting=1)
    core.ready(0.0)
    (first,) = started(core.take()[0])
    core.connected(first, 1.0, object())
    actions, events = core.take()
    (second,) = started(actions)
    assert kinds(events) == ["ConnectionReadyEvent", "ConnectionCreatedEvent"]
    assert first.state is ConnState.IDLE and second.state is ConnState.CONNECTING


def test_request_with_nothing_idle_queues_and_starts_one_connect() -> None:
    core = make(max_size=3, max_connecting=1)
    req = queue(core)
    actions, events = core.take()
    (conn,) = started(actions)
    assert conn.role is Role.DEMAND
    assert kinds(events) == ["ConnectionCheckOutStartedEvent", "ConnectionCreatedEvent"]
    assert core_view(core).waiters() == [req]
    # max_connecting=1: a second waiter waits for the same connect to finish first
    queue(core)
    actions, events = core.take()
    assert actions == []
    assert kinds(events) == ["ConnectionCheckOutStartedEvent"]
    assert core.stats().waiting == 2 and core.stats().pending == 1


def test_request_at_max_size_starts_no_connect() -> None:
    core = make(max_size=1)
    view = core_view(core)
    leased(core)
    queue(core)
    assert core.take()[0] == []
    assert view.total == 1 and view.pending == 0


def test_connected_serves_the_head_waiter() -> None:
    core = make()
    first, second = queue(core), queue(core)
    conns = started(core.take()[0])
    core.connected(conns[1], 2.0, "socket")
    actions, events = core.take()
    assert (
        kinds(actions) == ["CompleteRequest"] and cast(CompleteRequest, actions[0]).request is first
    )
    assert first.state is RequestState.SERVED and first.conn is conns[1]
    assert second.state is RequestState.WAITING
    assert kinds(events) == ["ConnectionReadyEvent", "ConnectionCheckedOutEvent"]
    ready, out = cast(ConnectionReadyEvent, events[0]), cast(ConnectionCheckedOutEvent, events[1])
    assert ready.duration == 2.0 and out.duration == 2.0


def test_request_served_from_idle_at_once_most_recent_first() -> None:
    core = make(max_connecting=2)
    a, b = leased(core), leased(core)
    core.release(a, 1.0)
    core.release(b, 2.0)
    core.take()
    req = Request(started=3.0, deadline=None)
    core.fast.request(req, 3.0)
    actions, events = core.take()
    assert req.state is RequestState.SERVED and not req.queued
    assert req.conn is b  # the most recently used
    assert actions == []  # served at once: no CompleteRequest
    assert kinds(events) == ["ConnectionCheckOutStartedEvent", "ConnectionCheckedOutEvent"]


def test_lease_idle_fast_path() -> None:
    core = make(max_connecting=2)
    a, b = leased(core), leased(core)
    core.release(a, 1.0)
    core.release(b, 2.0)
    core.take()
    assert core.fast.lease_idle(3.0) is b
    assert core.take() == ([], [])
    assert core.fast.lease_idle(3.0) is a
    assert core.fast.lease_idle(3.0) is None  # nothing idle
    queue(core)
    core.release(a, 3.0)  # handed to the waiter
    core.take()
    core.clear(4.0)
    core.take()
    core.release(b, 4.0)
    assert core.fast.lease_idle(4.0) is None  # paused


# ---------------------------------------------------------------------- check-in


def test_release_hands_the_connection_to_the_oldest_waiter() -> None:
    core = make(max_size=1)
    conn = leased(core)
    first, second = queue(core, 1.0), queue(core, 2.0)
    core.take()
    core.release(conn, 3.0)
    actions, events = core.take()
    assert (
        kinds(actions) == ["CompleteRequest"] and cast(CompleteRequest, actions[0]).request is first
    )
    assert first.conn is conn and second.state is RequestState.WAITING
    assert kinds(events) == ["ConnectionCheckedInEvent", "ConnectionCheckedOutEvent"]
    checked_in = cast(ConnectionCheckedInEvent, events[0])
    out = cast(ConnectionCheckedOutEvent, events[1])
    assert checked_in.connection_id == out.connection_id == conn.id
    assert out.duration == 2.0
    assert conn.state is ConnState.LEASED and conn.streams == 1


def test_discard_closes_with_error_and_connects_for_a_waiter() -> None:
    core = make(max_size=1)
    conn = leased(core)
    waiter = queue(core)
    core.take()
    boom = OSError("reset")
    core.discard(conn, 1.0, boom)
    actions, events = core.take()
    assert kinds(actions) == ["CloseConnection", "StartConnect"]
    assert cast(CloseConnection, actions[0]).conn is conn and conn.close_reason == "error"
    assert kinds(events) == [
        "ConnectionCheckedInEvent",
        "ConnectionClosedEvent",
        "ConnectionCreatedEvent",
    ]
    closed = cast(ConnectionClosedEvent, events[1])
    assert closed.reason == "error" and closed.error is boom
    assert waiter.state is RequestState.WAITING


def test_stale_connection_is_closed_at_checkin() -> None:
    core = make()
    conn = leased(core)
    core.clear(1.0)
    core.ready(1.0)
    core.take()
    core.release(conn, 2.0)
    actions, events = core.take()
    assert kinds(actions) == ["CloseConnection"] and cast(CloseConnection, actions[0]).conn is conn
    assert conn.close_reason == "stale" and conn.state is ConnState.CLOSED
    assert kinds(events) == ["ConnectionCheckedInEvent", "ConnectionClosedEvent"]
    assert cast(ConnectionClosedEvent, events[1]).reason == "stale"
    assert core_view(core).total == 0


# ---------------------------------------------------------------------- clear and close


def test_clear_fails_every_waiter_in_order_after_the_cleared_event() -> None:
    core = make(max_size=1)
    leased(core)
    waiters = [queue(core, now=float(i)) for i in range(3)]
    core.take()
    cause = OSError("network")
    core.clear(5.0, cause=cause)
    actions, events = core.take()
    assert core.generation == 1 and core.state is PoolState.PAUSED
    assert [a.request for a in cast(list[CompleteRequest], actions)] == waiters
    for req in waiters:
        assert req.state is RequestState.FAILED
        assert isinstance(req.error, PoolClearedError) and req.error.cause is cause
    assert kinds(events) == ["PoolClearedEvent"] + ["ConnectionCheckOutFailedEvent"] * 3
    assert cast(PoolClearedEvent, events[0]).interrupt_in_use_connections is False
    failed = cast(list[ConnectionCheckOutFailedEvent], events[1:])
    assert [e.reason for e in failed] == ["connectionError"] * 3
    assert [e.duration for e in failed] == [5.0, 4.0, 3.0]
    # already paused: the generation moves on, but no second event
    core.clear(6.0)
    assert core.take() == ([], [])
    assert core.generation == 2


def test_clear_with_interrupt_closes_leased_and_pending_as_stale() -> None:
    core = make(max_connecting=3)
    busy = leased(core)
    rest = idle(core)
    pending = pending_beside(core, rest)
    core.clear(1.0, interrupt_in_use=True)
    actions, events = core.take()
    closes = [a.conn for a in actions if isinstance(a, CloseConnection)]
    assert {c.id for c in closes} == {busy.id, pending.id}
    # what to close is fixed now: the leased one's object; the pending one's connect abandoned
    fixed = {
        a.conn.id: (a.connection, a.pending) for a in actions if isinstance(a, CloseConnection)
    }
    assert fixed == {busy.id: (busy.connection, False), pending.id: (None, True)}
    assert busy.close_reason == pending.close_reason == "stale"
    assert rest.state is ConnState.IDLE and state_of(core).conns == {rest.id: rest}
    assert events[0] == PoolClearedEvent(address=ADDRESS, interrupt_in_use_connections=True)
    closed = [e for e in events if isinstance(e, ConnectionClosedEvent)]
    assert {e.connection_id for e in closed} == {busy.id, pending.id}
    assert {e.reason for e in closed} == {"stale"}
    # the interrupted lease comes back: nothing more to close
    core.release(busy, 2.0)
    actions, events = core.take()
    assert actions == [] and kinds(events) == ["ConnectionCheckedInEvent"]
    assert busy.streams == 0
    # the abandoned connect returns a connection anyway: close it, no second Closed event
    sock = object()
    core.connected(pending, 2.0, sock)
    actions, events = core.take()
    assert (
        kinds(actions) == ["CloseConnection"] and cast(CloseConnection, actions[0]).conn is pending
    )
    close = cast(CloseConnection, actions[0])
    assert close.connection is sock and not close.pending and events == []
    assert pending.connection is None  # the closed record is left as it was


def test_clear_without_interrupt_leaves_leases_and_connects_alone() -> None:
    core = make(max_connecting=2)
    busy = leased(core)
    queue(core)
    (pending,) = started(core.take()[0])
    core.clear(1.0)
    actions, _ = core.take()
    assert kinds(actions) == ["CompleteRequest"]
    assert busy.state is ConnState.LEASED and pending.state is ConnState.CONNECTING
    # the connect finishes while paused: stale, it waits idle for the background run
    core.connected(pending, 2.0, object())
    # (the cast: mypy keeps `pending.state` narrowed by the assert above)
    assert core.take()[0] == [] and cast(ConnState, pending.state) is ConnState.IDLE
    core.fire_timers(2.0)  # clear scheduled a background run at once
    actions, _ = core.take()
    assert kinds(actions) == ["CloseConnection"] and pending.close_reason == "stale"


def test_close_fails_waiters_with_pool_closed_error() -> None:
    core = make(max_size=1)
    leased(core)
    waiters = [queue(core), queue(core)]
    core.take()
    core.close(1.0)
    actions, events = core.take()
    assert [a.request for a in cast(list[CompleteRequest], actions)] == waiters
    assert all(isinstance(w.error, PoolClosedError) for w in waiters)
    assert kinds(events) == ["ConnectionCheckOutFailedEvent"] * 2 + ["PoolClosedEvent"]
    failed = cast(list[ConnectionCheckOutFailedEvent], events[:2])
    assert {e.reason for e in failed} == {"poolClosed"}


def test_close_closes_idle_and_pending_at_once_and_leased_at_checkin() -> None:
    core = make(max_size=3)
    shared = state_of(core)
    busy = leased(core)
    rest = idle(core)
    pending = pending_beside(core, rest)
    core.close(1.0)
    actions, events = core.take()
    assert kinds(actions) == ["CloseConnection", "CloseConnection"]
    assert [a.conn for a in cast(list[CloseConnection], actions)] == [rest, pending]
    assert rest.close_reason == pending.close_reason == "poolClosed"
    assert kinds(events) == ["ConnectionClosedEvent", "ConnectionClosedEvent", "PoolClosedEvent"]
    assert shared.conns == {busy.id: busy}
    core.release(busy, 2.0)
    actions, _ = core.take()
    assert kinds(actions) == ["CloseConnection"] and busy.close_reason == "poolClosed"
    core.connect_failed(pending, 2.0, OSError())
    assert core.take() == ([], [])
    assert shared.conns == {}
    with pytest.raises(PoolClosedError):
        core.ready(3.0)
    core.close(3.0)  # closing twice is a no-op
    assert core.take() == ([], [])


@pytest.mark.parametrize(("close", "error"), [(False, PoolClearedError), (True, PoolClosedError)])
def test_request_on_paused_or_closed_pool_fails_at_once(close: bool, error: type) -> None:
    core = make(ready=False)
    if close:
        core.close(0.0)
        core.take()
    req = Request(started=0.0, deadline=None)
    core.fast.request(req, 0.0)
    actions, events = core.take()
    assert req.state is RequestState.FAILED and isinstance(req.error, error) and not req.queued
    assert actions == []
    assert kinds(events) == ["ConnectionCheckOutStartedEvent", "ConnectionCheckOutFailedEvent"]
    failed = cast(ConnectionCheckOutFailedEvent, events[1])
    assert failed.reason == ("poolClosed" if close else "connectionError")


# ---------------------------------------------------------------------- connect results


def test_connect_failure_fails_the_head_waiter_with_the_same_error() -> None:
    core = make(max_connecting=1)
    first, second = queue(core), queue(core)
    (conn,) = started(core.take()[0])
    boom = ConnectionRefusedError("refused")
    core.connect_failed(conn, 1.0, boom)
    actions, events = core.take()
    assert kinds(actions) == ["CloseConnection", "CompleteRequest", "StartConnect"]
    assert cast(CompleteRequest, actions[1]).request is first and first.error is boom
    assert second.state is RequestState.WAITING
    assert kinds(events) == [
        "ConnectionClosedEvent",
        "ConnectAttemptFailedEvent",
        "ConnectionCheckOutFailedEvent",
        "ConnectionCreatedEvent",
    ]
    closed = cast(ConnectionClosedEvent, events[0])
    assert closed.reason == "error" and closed.error is boom
    attempt = cast(ConnectAttemptFailedEvent, events[1])
    assert (attempt.connection_id, attempt.error, attempt.failures, attempt.retry_in) == (
        conn.id,
        boom,
        1,
        None,
    )
    failed = cast(ConnectionCheckOutFailedEvent, events[2])
    assert failed.reason == "connectionError" and failed.error is boom
    assert conn.state is ConnState.CLOSED and core_view(core).pending == 1


def test_connect_failure_does_not_fail_a_waiter_covered_by_another_connect() -> None:
    core = make(ready=False, min_size=2, max_connecting=2)
    core.ready(0.0)
    a, _b = started(core.take()[0])
    waiter = queue(core)
    assert core.take()[0] == []  # the min_size connects cover the waiter
    core.connect_failed(a, 1.0, OSError())
    actions, _ = core.take()
    assert kinds(actions) == ["CloseConnection"]
    assert waiter.state is RequestState.WAITING


def test_connect_timeout() -> None:
    core = make(connect_timeout=2.0)
    waiter = queue(core, 0.0)
    (conn,) = started(core.take()[0])
    core.fire_timers(1.5)
    assert core.take() == ([], [])
    core.fire_timers(2.0)
    actions, events = core.take()
    assert kinds(actions) == ["CloseConnection", "CompleteRequest"]  # no waiter left: no connect
    assert cast(CloseConnection, actions[0]).conn is conn and conn.close_reason == "error"
    assert isinstance(waiter.error, ConnectTimeoutError) and waiter.error.timeout == 2.0
    assert kinds(events)[:3] == [
        "ConnectionClosedEvent",
        "ConnectAttemptFailedEvent",
        "ConnectionCheckOutFailedEvent",
    ]
    # the abandoned connect reports late: its connection is closed; a late failure is ignored
    core.connected(conn, 3.0, "late")
    actions, events = core.take()
    assert kinds(actions) == ["CloseConnection"] and events == []
    core.connect_failed(conn, 3.0, OSError())
    assert core.take() == ([], [])


# ---------------------------------------------------------------------- timers


def test_wait_queue_deadline() -> None:
    core = make(max_size=1)
    leased(core)
    waiter = queue(core, 1.0, deadline=3.0)
    core.take()
    core.fire_timers(2.999)
    assert core.take() == ([], [])
    core.fire_timers(3.0)
    actions, events = core.take()
    assert [a.request for a in cast(list[CompleteRequest], actions)] == [waiter]
    assert isinstance(waiter.error, WaitQueueTimeoutError)
    assert waiter.error.waited == 2.0
    assert waiter.error.stats is not None and waiter.error.stats.in_use == 1
    assert (
        kinds(events) == ["ConnectionCheckOutFailedEvent"]
        and cast(ConnectionCheckOutFailedEvent, events[0]).reason == "timeout"
    )
    assert core_view(core).waiting == 0


def test_expired_deadline_fails_at_once_without_queueing_but_connects() -> None:
    core = make()
    req = Request(started=1.0, deadline=1.0)
    core.fast.request(req, 1.0)
    actions, events = core.take()
    assert req.state is RequestState.FAILED and not req.queued
    assert isinstance(req.error, WaitQueueTimeoutError)
    # The connect it would have waited for starts anyway (issue 24, defect 4: a pool tried
    # only with timeout=0 never connected); a second such checkout is covered by it.
    assert kinds(actions) == ["StartConnect"]
    assert cast(ConnectionCheckOutFailedEvent, events[-1]).reason == "timeout"
    again = Request(started=1.0, deadline=1.0)
    core.fast.request(again, 1.0)
    assert core.take()[0] == [] and again.state is RequestState.FAILED


def test_cancel_a_waiter() -> None:
    core = make()
    req = queue(core, deadline=5.0)
    (conn,) = started(core.take()[0])
    assert core.cancel(req, 1.0) is True
    actions, events = core.take()
    assert actions == [] and req.state is RequestState.CANCELLED
    assert (
        kinds(events) == ["ConnectionCheckOutFailedEvent"]
        and cast(ConnectionCheckOutFailedEvent, events[0]).reason == "cancelled"
    )
    assert core.cancel(req, 1.0) is False
    assert core.take() == ([], [])
    core.connected(conn, 2.0, object())
    actions, _ = core.take()
    assert actions == [] and conn.state is ConnState.IDLE  # nobody to hand it to
    core.fire_timers(5.0)  # the cancelled request's deadline is stale
    assert core.take() == ([], [])


def test_idle_connection_is_closed_at_checkout() -> None:
    core = make(max_idle_time=1.0)
    conn = idle(core, 0.0)
    req = Request(started=1.0, deadline=None)
    core.fast.request(req, 1.0)
    actions, events = core.take()
    assert kinds(actions) == ["CloseConnection", "StartConnect"]
    assert cast(CloseConnection, actions[0]).conn is conn and conn.close_reason == "idle"
    assert req.queued
    assert kinds(events) == [
        "ConnectionCheckOutStartedEvent",
        "ConnectionClosedEvent",
        "ConnectionCreatedEvent",
    ]
    assert cast(ConnectionClosedEvent, events[1]).reason == "idle"


def test_idle_sweep_closes_connections_idle_too_long() -> None:
    core = make(max_idle_time=2.0, max_connecting=2)
    a, b = leased(core), leased(core)
    core.release(a, 1.0)
    core.release(b, 2.0)
    core.take()
    assert core.take_deadline() == 3.0
    core.fire_timers(3.0)
    actions, events = core.take()
    closes = cast(list[CloseConnection], actions)
    assert [a.conn for a in closes] == [a] and a.close_reason == "idle"
    assert [e.reason for e in cast(list[ConnectionClosedEvent], events)] == ["idle"]
    assert core.take_deadline() == 4.0
    core.fire_timers(4.0)
    assert [a.conn for a in cast(list[CloseConnection], core.take()[0])] == [b]


def test_take_deadline_takes_the_dirty_flag() -> None:
    """The front end re-arms its timer when ``timers.dirty``: ``take_deadline`` hands it the
    earliest deadline and clears the flag until a push makes an entry the earliest again."""
    core = make(max_idle_time=2.0)
    conn = leased(core)
    core.release(conn, 1.0)  # pushes the idle sweep at 3.0: the earliest
    assert core.timers.dirty
    assert core.take_deadline() == 3.0 and not core.timers.dirty
    assert core.take_deadline() == 3.0 and not core.timers.dirty
    core.timers.dirty = True
    assert core.take_deadline() == 3.0 and not core.timers.dirty


def test_background_run_closes_stale_idle_and_refills_min_size() -> None:
    core = make(ready=False, min_size=1, background_interval=10.0)
    core.ready(0.0)
    (conn,) = started(core.take()[0])
    core.connected(conn, 0.0, object())
    core.take()
    core.clear(1.0)
    core.ready(1.0)
    core.take()
    core.fire_timers(1.0)  # clear asked for a background run at once
    actions, events = core.take()
    assert kinds(actions) == ["CloseConnection", "StartConnect"]
    assert conn.close_reason == "stale"
    start = cast(StartConnect, actions[1])
    assert start.conn.generation == 1 and start.conn.role is Role.KEPT
    assert kinds(events) == ["ConnectionClosedEvent", "ConnectionCreatedEvent"]
    assert core.take_deadline() == 11.0


def test_unobserved_core_builds_no_events() -> None:
    core = PoolCore(PoolOptions(min_size=1, connect_timeout=None), ADDRESS)
    core.ready(0.0)
    (conn,) = started(core.take()[0])
    core.connected(conn, 0.0, object())
    req = Request(started=0.0, deadline=None)
    core.fast.request(req, 0.0)
    core.release(conn, 1.0)
    core.clear(2.0)
    core.close(3.0)
    assert core.events == []
    assert not any(
        isinstance(
            e,
            PoolReadyEvent
            | ConnectionCreatedEvent
            | ConnectionReadyEvent
            | ConnectionCheckOutStartedEvent
            | ConnectionCheckedOutEvent
            | ConnectionCheckedInEvent
            | PoolClosedEvent,
        )
        for e in core.take()[1]
    )


@pytest.mark.parametrize("route", ["min_size", "waiter"])
def test_checkin_of_a_stale_connection_starts_a_connect_at_now(route: str) -> None:
    """A check-in may start a connect (refilling min_size, or for a waiter), so ``release``
    needs the real time even on a pool that is not clocked; the connect's timeout counts from
    it."""
    options = PoolOptions(
        max_size=1 if route == "waiter" else 0,
        min_size=1 if route == "min_size" else 0,
        connect_timeout=5.0,
        background_interval=float("inf"),
    )
    core = PoolCore(options, ADDRESS)  # unobserved, no max_idle_time: not clocked
    assert not core.clocked
    core.ready(100.0)  # times as a monotonic clock gives them
    conn: Conn | None
    if route == "waiter":
        conn = leased(core, 100.0)
    else:
        (first,) = started(core.take()[0])
        core.connected(first, 100.0, object())
        conn = core.fast.lease_idle(0.0)  # 0.0: allowed on lease_idle when not clocked
        assert conn is first
    core.clear(101.0)
    core.ready(101.0)
    waiter = queue(core, 101.0) if route == "waiter" else None
    core.take()
    core.release(conn, 101.5)
    actions, _ = core.take()
    assert kinds(actions) == ["CloseConnection", "StartConnect"]
    replacement = cast(StartConnect, actions[1]).conn
    assert replacement.created_at == 101.5
    core.fire_timers(106.4)
    assert core.take() == ([], [])
    assert replacement.state is ConnState.CONNECTING
    assert waiter is None or waiter.state is RequestState.WAITING
    core.fire_timers(106.5)  # five seconds after the connect started: abandoned
    # (the cast: mypy keeps `replacement.state` narrowed by the assert above)
    assert cast(ConnState, replacement.state) is ConnState.CLOSED


# ---------------------------------------------------------------------- the transition table


def _life_with(state: ConnState) -> tuple[ConnectionLife, CoreState, Conn]:
    """A connection life whose one record is in ``state``, counted as a birth counts it."""
    shared = CoreState(PoolOptions(), ADDRESS, observed=False, rand=lambda: 0.0)
    life = ConnectionLife(shared)
    conn = life.new_record(0.0, state)
    return life, shared, conn


def _counted(state: ConnState) -> dict[ConnState, int]:
    """The counters of the states that have one (``COUNTED``) when the one connection is in
    ``state``."""
    return {s: int(s is state) for s in COUNTED}


def _counters(shared: CoreState) -> dict[ConnState, int]:
    return {s: shared.counts[s] for s in COUNTED}


@given(st.sampled_from(ConnState), st.sampled_from(ConnInput))
def test_every_transition_is_in_the_table_or_invalid(state: ConnState, event: ConnInput) -> None:
    """``ConnectionLife.fire``, the one way the core moves a connection, looks the pair up in
    ``STEPS``, the one table: a move there is made, with the counters of the states that have
    one kept; a pair absent raises and changes nothing."""
    life, shared, conn = _life_with(state)
    step = STEPS[state][event]
    if step is not None:
        new = life.fire(conn, event)
        assert isinstance(new, ConnState)
        assert (new, conn.state) == (step[0], step[0])
        assert _counters(shared) == _counted(new)  # (the step's flag said whether they changed)
        assert step[1] == (_counted(new) != _counted(state))
    else:
        with pytest.raises(InvalidTransition) as info:
            life.fire(conn, event)
        assert info.value.connection_id == conn.id
        assert info.value.state is state and info.value.input is event
        assert conn.state is state and _counters(shared) == _counted(state)


def test_the_table_covers_every_state_and_input() -> None:
    """Dense: indexed by the enums' values, one row per state and one entry per input."""
    assert len(STEPS) == len(ConnState)
    assert all(len(row) == len(ConnInput) for row in STEPS)


@pytest.mark.parametrize("event", list(ConnInput))
def test_closed_is_absorbing(event: ConnInput) -> None:
    """A closed connection only sees its leases come back, and stays closed."""
    life, _, conn = _life_with(ConnState.CLOSED)
    if event in (ConnInput.RELEASE, ConnInput.RELEASE_LAST):
        assert life.fire(conn, event) is ConnState.CLOSED
    else:
        with pytest.raises(InvalidTransition):
            life.fire(conn, event)


@pytest.mark.parametrize("state", [s for s in ConnState if s is not ConnState.CLOSED])
def test_the_pool_can_close_a_connection_in_any_state(state: ConnState) -> None:
    """Every live state has its CLOSE (the pool's close, a clear's interrupt)."""
    life, shared, conn = _life_with(state)
    assert life.fire(conn, ConnInput.CLOSE) is ConnState.CLOSED
    assert _counters(shared) == _counted(ConnState.CLOSED)


def test_take_hands_over_lists_the_core_never_appends_to_again() -> None:
    # Issue 14, defect 1: ``take`` with nothing pending handed out the core's own (empty) list;
    # a threaded front end carried it out after releasing its lock while another thread's input
    # appended to it, so both threads carried out the same StartConnect and CloseConnection.
    core = make(ready=False, min_size=1)
    actions, events = core.take()  # nothing pending
    core.ready(1.0)  # asks for a connect and announces it
    assert actions == [] and events == []  # what was handed out before is not touched
    actions, events = core.take()
    assert kinds(actions) == ["StartConnect"]
    assert kinds(events) == ["PoolReadyEvent", "ConnectionCreatedEvent"]
    assert core.take() == ([], [])


def test_a_late_connect_result_never_changes_the_closed_record() -> None:
    # Issue 14, defect 1: a connect abandoned by an interrupting clear came back while the
    # clearing thread was still closing: both read the record's connection and closed it twice.
    core = make(max_connecting=1)
    queue(core)
    (pending,) = started(core.take()[0])
    core.clear(1.0, interrupt_in_use=True)
    (abandon,) = [a for a in core.take()[0] if isinstance(a, CloseConnection)]
    assert abandon.pending and abandon.connection is None
    sock = object()
    core.connected(pending, 2.0, sock)
    (close,) = core.take()[0]
    assert isinstance(close, CloseConnection) and close.connection is sock and not close.pending
    assert abandon.connection is None and pending.connection is None


def test_a_connection_that_is_none_leaves_its_service_count_when_closed() -> None:
    # a connect function may return None (a token connection): it counts in its service as
    # any other, and its closing takes it out again (the entry goes at zero)
    core = make(load_balanced=True, max_connecting=1)
    req = queue(core)
    (pending,) = started(core.take()[0])
    core.connected(pending, 0.0, None, "svc")
    assert req.conn is pending and core.service_generations == {"svc": [0, 1]}
    core.discard(pending, 1.0)
    assert core.service_generations == {}


def test_expected_streams_counts_a_connect_for_that_many_waiters() -> None:
    """``expected_streams``: concurrent first checkouts of a multiplexed pool wait for one
    connection (httpcore's issue #80), and the limit the connection reports replaces the guess."""
    core = make(max_size=5, max_connecting=2, expected_streams=4)
    shared = state_of(core)
    waiters = [queue(core) for _ in range(4)]
    actions, _ = core.take()
    (conn,) = started(actions)  # four waiters, one connect: it is counted to serve four
    queue(core)  # a fifth is beyond what the connect covers: a second connect
    actions, _ = core.take()
    (second,) = started(actions)
    core.connected(conn, 0.1, "c1", max_streams=4)
    actions, _ = core.take()
    assert [req.conn for req in waiters] == [conn] * 4 and conn.streams == 4
    assert shared.expected_streams == 4
    core.connected(second, 0.2, "c2", max_streams=1)  # the server allows one stream after all
    core.take()
    assert shared.expected_streams == 1
    more = [queue(core) for _ in range(3)]  # each now needs a connect of its own (room: 3)
    actions, _ = core.take()
    assert len(started(actions)) == 2  # (max_connecting)
    assert all(req.state is RequestState.WAITING for req in more)


def test_expected_streams_one_is_cmap_one_connect_per_waiter() -> None:
    core = make(max_size=5, max_connecting=3)
    for _ in range(3):
        queue(core)
    actions, _ = core.take()
    assert len(started(actions)) == 3


@pytest.mark.parametrize("bad", [0, -1, 1.5, "2", True])
def test_expected_streams_must_be_a_positive_int(bad: Any) -> None:
    with pytest.raises((ValueError, TypeError), match="expected_streams"):
        PoolOptions(expected_streams=bad)
