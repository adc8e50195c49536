"""The core's inputs for a check run in the caller (``PoolCore.lease_checking`` and ``checked``):
what ``Pool``'s checkout takes instead of a queued request when a check hook is set.

Each test drives a core by hand, with ``now`` given, and reads what it decided.
"""

from __future__ import annotations

from typing import Any, cast

from core_view import state_of
from poolkit import Hooks, PoolOptions
from poolkit._core import CloseConnection, Conn, ConnState, PoolCore, Request, StartConnect
from poolkit.errors import HookTimeoutError


def _check(connection: Any) -> None:  # pragma: no cover - the core only asks for checks
    raise AssertionError("never called")


def _core(size: int = 1, *, check_after: float = 0.0, **options: Any) -> PoolCore:
    """A ready core with ``size`` connections made and available at time 0."""
    opts = PoolOptions(
        max_size=options.pop("max_size", size),
        min_size=options.pop("min_size", size),
        background_interval=float("inf"),
        hooks=Hooks(check=_check, check_after=check_after, timeout=options.pop("timeout", 5.0)),
        **options,
    )
    core = PoolCore(opts, "db:5432")
    core.ready(0.0)
    for conn in _started(core):
        core.connected(conn, 0.0, f"c{conn.id}")
    core.take()
    assert core.stats().available == size
    return core


def _started(core: PoolCore) -> list[Conn]:
    return [a.conn for a in core.take()[0] if isinstance(a, StartConnect)]


def test_a_connection_due_for_its_check_is_checked_for_the_caller_then_leased() -> None:
    core = _core()
    conn = core.lease_checking(1.0)
    assert conn is not None and conn.state is ConnState.CHECKING
    assert core.stats().checking == 1 and core.stats().available == 0
    assert core.take() == ([], [])  # nothing to carry out: the caller runs the check
    assert core.checked(conn, 1.5) is True
    assert cast(ConnState, conn.state) is ConnState.LEASED and conn.streams == 1
    stats = core.stats()
    assert (stats.in_use, stats.checking, stats.checks, stats.checks_failed) == (1, 0, 1, 0)
    assert core.release(conn, 2.0) is False and cast(ConnState, conn.state) is ConnState.IDLE
    assert conn.idle_since == 2.0


def test_a_connection_used_within_check_after_is_leased_without_a_check() -> None:
    core = _core(check_after=10.0)
    conn = core.lease_checking(5.0)
    assert conn is not None and conn.state is ConnState.LEASED
    assert core.stats().checks == 0
    core.release(conn, 6.0)
    again = core.lease_checking(16.0)  # idle since 6: due
    assert again is conn and cast(ConnState, conn.state) is ConnState.CHECKING


def test_a_failed_check_closes_the_connection_and_refills_min_size() -> None:
    core = _core()
    conn = core.lease_checking(1.0)
    assert conn is not None
    assert core.checked(conn, 1.0, ConnectionResetError("gone")) is False
    assert conn.state is ConnState.CLOSED and conn.close_reason == "error"
    actions = core.take()[0]
    assert [a.conn for a in actions if isinstance(a, CloseConnection)] == [conn]
    assert len([a for a in actions if isinstance(a, StartConnect)]) == 1  # min_size again
    assert core.stats().checks_failed == 1


def test_a_check_past_its_timeout_is_over_and_its_late_result_changes_nothing() -> None:
    core = _core(timeout=2.0)
    conn = core.lease_checking(1.0)
    assert conn is not None and core.take_deadline() == 3.0
    core.fire_timers(3.0)
    assert conn.state is ConnState.CLOSED
    actions = core.take()[0]
    close = [a for a in actions if isinstance(a, CloseConnection)]
    assert [a.conn for a in close] == [conn]  # (Pool puts the close off until the check returns)
    assert core.stats().checks_failed == 1
    assert core.checked(conn, 9.0) is False
    assert core.take() == ([], [])
    assert core.stats().checks == 1


def test_requests_that_came_during_the_check_get_a_connect_once_the_caller_takes_it() -> None:
    """A check running covers a waiter as a connect in flight does; when the caller takes the
    connection it checked, the waiter it covered is covered no more: a connect starts for it."""
    core = _core(1, max_size=3)
    conn = core.lease_checking(1.0)
    assert conn is not None
    waiter = Request(1.0, None)
    core.fast.request(waiter, 1.0)
    assert waiter.queued and _started(core) == []  # covered by the check
    assert core.checked(conn, 1.1) is True
    assert len(_started(core)) == 1  # now it is not


def test_a_connection_cleared_during_its_check_is_not_handed_to_the_caller() -> None:
    core = _core()
    conn = core.lease_checking(1.0)
    assert conn is not None
    core.clear(1.0, interrupt_in_use=False)
    core.ready(1.0)
    core.take()
    assert core.checked(conn, 1.2) is False
    assert conn.state is ConnState.CLOSED and conn.close_reason == "stale"


def test_no_caller_check_when_requests_wait_or_the_pool_is_paused() -> None:
    core = _core(1, max_size=1)
    held = core.lease_checking(1.0)
    assert held is not None and core.checked(held, 1.0)
    waiter = Request(1.0, None)
    core.fast.request(waiter, 1.0)
    assert waiter.queued
    assert core.lease_checking(1.0) is None  # first come, first served: the waiter is first
    core.clear(2.0)
    assert core.lease_checking(2.0) is None


def test_perished_connections_met_on_the_way_are_closed() -> None:
    core = _core(2, max_lifetime=5.0, max_lifetime_jitter=0.0)
    conn = core.lease_checking(6.0)  # both past their lifetime
    assert conn is None
    actions = core.take()[0]
    assert len([a for a in actions if isinstance(a, CloseConnection)]) == 2
    assert len([a for a in actions if isinstance(a, StartConnect)]) == 2  # min_size again


def test_the_timeout_error_names_the_check() -> None:
    core = _core(timeout=1.0)
    conn = core.lease_checking(0.0)
    assert conn is not None
    error = state_of(core).hooks.timeout_error(conn, state_of(core).address)
    assert isinstance(error, HookTimeoutError) and error.hook == "check"


def test_a_free_stream_serves_a_waiter_no_check_covers() -> None:
    """A check running covers one waiter; a request queued behind it while a multiplexed
    connection has a stream free is served from that stream at once (it waited, with the stream
    free, until something else moved the pool: found by the stateful test, in a load-balanced
    clear that served it)."""
    opts = PoolOptions(
        max_size=4,
        max_connecting=4,
        background_interval=float("inf"),
        connect_timeout=None,
        hooks=Hooks(check=_check, check_after=0.0, timeout=5.0),
    )
    core = PoolCore(opts, "db:5432")
    core.ready(0.0)

    def request(now: float) -> Request:
        req = Request(started=now, deadline=None)
        core.fast.request(req, now)
        return req

    first = request(0.0)
    (a,) = _started(core)
    core.connected(a, 0.0, "a")  # (new: handed out unchecked)
    assert first.conn is a
    core.release(a, 1.0)
    core.take()
    covered = request(2.0)  # takes a: its check starts, covering this request
    assert a.state is ConnState.CHECKING and covered.queued
    behind = request(2.0)  # not covered: a connect for it
    (b,) = _started(core)
    core.connected(b, 3.0, "b", max_streams=2)  # serves the oldest; one stream stays free
    assert covered.conn is b and b.streams == 1 and behind.conn is None
    late = request(4.0)  # queued behind: the free stream goes to the oldest waiter now
    assert behind.conn is b and b.streams == 2
    assert late.conn is None and late.queued and core.stats().waiting == 1  # (a's check covers it)
