"""Test support: a ready :class:`~poolkit._core.PoolCore` and connections leased from it, the
scene the core's table tests start from (exact actions, no clock but the times passed in)."""

from __future__ import annotations

from typing import Any

from poolkit import PoolOptions
from poolkit._core import Conn, PoolCore, Request, RequestState, StartConnect

INF = float("inf")


def ready_core(**options: Any) -> PoolCore:
    """A core made ready at 0, with no background run and no connect timeout (``options``
    besides)."""
    core = PoolCore(
        PoolOptions(background_interval=INF, connect_timeout=None, **options), "db:5432"
    )
    core.ready(0.0)
    return core


def leased(core: PoolCore, n: int, now: float = 0.0) -> list[Conn]:
    """``n`` connections made and leased, in order of their ids."""
    reqs = []
    for _ in range(n):
        req = Request(started=now, deadline=None)
        core.fast.request(req, now)
        reqs.append(req)
    while True:
        started = [a.conn for a in core.take()[0] if isinstance(a, StartConnect)]
        if not started:
            break
        for conn in started:
            core.connected(conn, now, f"c{conn.id}")
    out = []
    for req in reqs:
        assert req.state is RequestState.SERVED and req.conn is not None
        out.append(req.conn)
    core.take()
    return out
