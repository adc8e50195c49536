"""The idle sweep ends: a connection whose sweep is due is closed, whatever the float sums say."""

from __future__ import annotations

from poolkit._core import PoolCore, Request, StartConnect
from poolkit.options import PoolOptions


def test_a_sweep_due_closes_its_connection_even_where_floats_disagree() -> None:
    # 0.3 + 2.0 == 2.3, yet 2.3 - 0.3 < 2.0: the sweep armed at 2.3 must close the connection
    # parked at 0.3 (it used to be re-armed at 2.3 for ever, and fire_timers never returned)
    assert 0.3 + 2.0 <= 2.3 and not 2.3 - 0.3 >= 2.0
    core = PoolCore(PoolOptions(max_idle_time=2.0), "a:1")
    core.ready(0.0)
    req = Request(0.0, None)
    core.request(req, 0.0)
    (conn,) = [a.conn for a in core.take()[0] if isinstance(a, StartConnect)]
    core.connected(conn, 0.1, object())
    assert req.conn is conn
    core.release(conn, 0.3)
    assert core.available == 1
    core.fire_timers(2.3)
    assert core.available == 0 and conn.close_reason == "idle"
    assert core.next_deadline() != 2.3
