"""The idle sweep ends: a connection whose sweep is due is closed, whatever the float sums say."""

from __future__ import annotations

from core_view import core_view
from poolkit._core import PoolCore, Request, StartConnect
from poolkit._core.idle import idle_expired
from poolkit.options import PoolOptions


def test_a_sweep_due_closes_its_connection_even_where_floats_disagree() -> None:
    # 0.3 + 2.0 == 2.3, yet 2.3 - 0.3 < 2.0: the sweep armed at 2.3 must close the connection
    # parked at 0.3 (it used to be re-armed at 2.3 for ever, and fire_timers never returned)
    assert 0.3 + 2.0 <= 2.3 and not 2.3 - 0.3 >= 2.0
    core = PoolCore(PoolOptions(max_idle_time=2.0), "a:1")
    view = core_view(core)
    core.ready(0.0)
    req = Request(0.0, None)
    core.fast.request(req, 0.0)
    (conn,) = [a.conn for a in core.take()[0] if isinstance(a, StartConnect)]
    core.connected(conn, 0.1, object())
    assert req.conn is conn
    core.release(conn, 0.3)
    assert view.available == 1
    core.fire_timers(2.3)
    assert view.available == 0 and conn.close_reason == "idle"
    assert core.take_deadline() != 2.3


def _parked_at(since: float, max_idle: float) -> tuple[PoolCore, Request]:
    core = PoolCore(PoolOptions(max_idle_time=max_idle), "a:1")
    core.ready(0.0)
    req = Request(0.0, None)
    core.fast.request(req, 0.0)
    (conn,) = [a.conn for a in core.take()[0] if isinstance(a, StartConnect)]
    core.connected(conn, 0.0, object())
    core.release(conn, since)
    core.take()
    return core, req


def test_a_checkout_at_the_sweeps_own_time_agrees_with_the_sweep() -> None:
    # Issue 24, defect 21: _perished tested ``now - idle_since >= max_idle`` while the sweep is
    # due at ``idle_since + max_idle``; at 49.544 + 4.495 the two disagree, so a checkout at the
    # sweep's own time handed out the connection the sweep would have closed. One definition now
    # (idle.idle_expired, the sum), and both close it at that time, not a moment before.
    since, max_idle = 49.544, 4.495
    due = since + max_idle
    assert not due - since >= max_idle  # (the case where the old test said "not yet")
    assert idle_expired(since, max_idle, due)
    before = due - 1e-9
    assert not idle_expired(since, max_idle, before)

    core, _ = _parked_at(since, max_idle)  # a checkout just before the boundary gets it
    early = Request(before, None)
    core.fast.request(early, before)
    assert early.conn is not None and early.conn.close_reason is None

    core, served = _parked_at(since, max_idle)  # at the boundary it is closed as idle first
    conn = served.conn
    assert conn is not None
    late = Request(due, None)
    core.fast.request(late, due)
    assert conn.close_reason == "idle" and late.conn is not conn

    core, served = _parked_at(since, max_idle)  # and the sweep, due then, closes it too
    core.fire_timers(due)
    assert core_view(core).available == 0 and served.conn is not None
    assert served.conn.close_reason == "idle"
