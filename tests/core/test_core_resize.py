"""``PoolCore.resize``: new ``min_size`` and ``max_size`` for a running pool, in place (the front
ends' ``resize``). The connections are kept, the waiters served in their order as the room
grows, the available connections beyond smaller limits closed at once (those a checkout takes
last), those out when they come back; bad values and a closed pool leave everything as it was.
Exact actions, no clock but the times passed in."""

from __future__ import annotations

from typing import Any

import pytest

from core_scene import leased, ready_core
from core_view import core_view, state_of
from poolkit import Adaptive, Backoff, Hooks, PoolOptions
from poolkit._core import (
    CloseConnection,
    CompleteRequest,
    Conn,
    PoolCore,
    Request,
    RequestState,
    Role,
    StartConnect,
    StartReset,
)
from poolkit.errors import PoolClosedError

INF = float("inf")


def _started(actions: list[Any]) -> list[Conn]:
    return [a.conn for a in actions if isinstance(a, StartConnect)]


def _closed(actions: list[Any]) -> list[int]:
    return [a.conn.id for a in actions if isinstance(a, CloseConnection)]


def _completed(actions: list[Any]) -> list[Request]:
    return [a.request for a in actions if isinstance(a, CompleteRequest)]


def _request(core: PoolCore, now: float) -> Request:
    req = Request(started=now, deadline=None)
    core.fast.request(req, now)
    return req


# ------------------------------------------------------------------ growing


def test_growing_past_max_size_serves_the_waiters_in_order_max_connecting_at_a_time() -> None:
    core = ready_core(max_size=2, max_connecting=2)
    held = leased(core, 2)
    waiters = [_request(core, 1.0) for _ in range(4)]
    assert core.take()[0] == []  # (full: nobody connects for them)
    options = core.resize(2.0, 0, 5)
    assert options.max_size == 5 and state_of(core).options is options
    first = _started(core.take()[0])
    assert len(first) == 2  # max_connecting
    core.connected(first[1], 3.0, "late")  # (the second connect ends first)
    actions = core.take()[0]
    assert _completed(actions) == [waiters[0]]  # the oldest first
    assert len(_started(actions)) == 1  # (two waiters uncovered, one connect in flight)
    core.connected(first[0], 3.0, "early")
    assert _completed(core.take()[0]) == [waiters[1]]
    third = _started(core.take()[0])  # (nothing more: 5 made or connecting)
    assert third == []
    assert core.stats().total == 5 and core.stats().waiting == 2
    core.release(held[0], 4.0)  # the room is 5: a check-in serves the next one
    assert _completed(core.take()[0]) == [waiters[2]]


def test_after_growing_a_new_checkout_connects_for_itself() -> None:
    core = ready_core(max_size=1, max_connecting=2)
    leased(core, 1)
    core.resize(1.0, 0, 2)
    assert core.take()[0] == []  # (nobody waits: nothing to make)
    req = _request(core, 2.0)
    assert req.queued and len(_started(core.take()[0])) == 1  # under the new max_size


def test_growing_min_size_fills_the_pool_and_keeps_what_is_there() -> None:
    core = ready_core(max_size=5, min_size=0, max_connecting=2)
    made = leased(core, 1)
    core.release(made[0], 1.0)
    assert state_of(core).roles.kept == 0
    core.resize(2.0, 3, 5)
    assert made[0].role is Role.KEPT  # the one there is kept now
    started = _started(core.take()[0])
    assert len(started) == 2  # the two missing, max_connecting at a time
    for conn in started:
        core.connected(conn, 3.0, "c")
    assert _started(core.take()[0]) == []
    assert core.stats().total == core.stats().kept == 3 and core.stats().available == 3


def test_a_paused_pool_fills_its_new_min_size_when_ready() -> None:
    core = PoolCore(PoolOptions(background_interval=INF, max_size=4), "db:5432")
    core.resize(0.0, 2, 4)
    assert core.take()[0] == []
    core.ready(1.0)
    assert len(_started(core.take()[0])) == 2


# ------------------------------------------------------------------ shrinking


@pytest.mark.parametrize(("order", "closing"), [("lifo", [0, 1]), ("fifo", [2, 3])])
def test_shrinking_closes_the_idle_connections_a_checkout_takes_last(
    order: str, closing: list[int]
) -> None:
    core = ready_core(max_size=4, max_connecting=4, idle_order=order)
    made = leased(core, 4)
    for t, conn in enumerate(made, 1):
        core.release(conn, float(t))  # parked in this order
    core.take()
    core.resize(5.0, 0, 2)
    assert sorted(_closed(core.take()[0])) == [made[i].id for i in closing]
    assert core.stats().total == 2 and core.stats().overflow == 0


def test_shrinking_closes_connections_in_use_when_they_come_back() -> None:
    core = ready_core(max_size=4, max_connecting=4)
    made = leased(core, 4)
    core.release(made[3], 1.0)
    core.take()
    core.resize(2.0, 0, 2)
    assert _closed(core.take()[0]) == [made[3].id]  # the idle one, now
    assert [c.role for c in made[:3]] == [Role.DEMAND, Role.DEMAND, Role.OVERFLOW]  # the newest
    assert core.stats().total == 3  # over max_size until the surplus is back
    core.release(made[2], 3.0)
    assert _closed(core.take()[0]) == [made[2].id]
    core.release(made[1], 3.0)
    core.release(made[0], 3.0)
    assert core.take()[0] == []
    assert core.stats().total == core.stats().available == 2


def test_below_the_connections_in_use_the_waiters_wait_for_those_within_the_limit() -> None:
    core = ready_core(max_size=3, max_connecting=3)
    made = leased(core, 3)
    waiters = [_request(core, 1.0) for _ in range(2)]
    core.take()
    core.resize(2.0, 0, 1)
    assert core.take()[0] == []
    assert [c.role for c in made] == [Role.DEMAND, Role.OVERFLOW, Role.OVERFLOW]
    core.release(made[2], 3.0)  # beyond max_size: closed though a checkout waits
    actions = core.take()[0]
    assert _closed(actions) == [made[2].id] and _completed(actions) == [] == _started(actions)
    core.release(made[1], 3.0)
    actions = core.take()[0]
    assert _closed(actions) == [made[1].id] and _completed(actions) == [] == _started(actions)
    core.release(made[0], 4.0)  # within the limit: serves the oldest
    assert _completed(core.take()[0]) == [waiters[0]]
    assert core.stats().total == 1 and waiters[1].state is RequestState.WAITING


def test_a_connect_beyond_the_new_max_size_is_closed_once_established() -> None:
    core = ready_core(max_size=2, max_connecting=2)
    (held,) = leased(core, 1)
    waiter = _request(core, 1.0)
    (pending,) = _started(core.take()[0])
    core.resize(2.0, 0, 1)
    assert core.take()[0] == []
    assert pending.role is Role.OVERFLOW and held.role is Role.DEMAND  # (the newest goes)
    core.connected(pending, 3.0, "late")
    actions = core.take()[0]
    assert _closed(actions) == [pending.id] and _completed(actions) == []
    core.release(held, 4.0)
    assert _completed(core.take()[0]) == [waiter]


def test_a_connection_reset_beyond_the_new_max_size_is_closed_after_its_reset() -> None:
    core = ready_core(max_size=2, max_connecting=2, hooks=Hooks(reset=_never))
    made = leased(core, 2)
    waiter = _request(core, 1.0)
    core.release(made[1], 1.0)  # a waiter: reset for it
    assert [type(a) for a in core.take()[0]] == [StartReset]
    core.resize(2.0, 0, 1)
    assert made[1].role is Role.OVERFLOW
    core.reset_done(made[1], 3.0)
    actions = core.take()[0]
    assert _closed(actions) == [made[1].id] and _completed(actions) == []
    assert waiter.state is RequestState.WAITING and core.stats().total == 1


def test_shrinking_min_size_lets_the_idle_ones_go_after_max_idle_time() -> None:
    core = ready_core(max_size=3, min_size=3, max_connecting=3, max_idle_time=10.0)
    for conn in _started(core.take()[0]):
        core.connected(conn, 0.0, "c")
    core.take()
    core.resize(20.0, 1, 3)  # idle for 20 s: the two no longer kept go now
    assert len(_closed(core.take()[0])) == 2
    assert core.stats().kept == 1 and core.stats().total == 1


def test_shrinking_min_size_arms_the_idle_sweep_for_those_no_longer_kept() -> None:
    core = ready_core(max_size=2, min_size=2, max_connecting=2, max_idle_time=10.0)
    for conn in _started(core.take()[0]):
        core.connected(conn, 0.0, "c")
    core.take()
    core.take_deadline()
    core.resize(5.0, 0, 2)
    assert core.take()[0] == []
    assert core.take_deadline() == 10.0  # (kept ones never close for idleness: no sweep before)
    core.fire_timers(10.0)
    assert len(_closed(core.take()[0])) == 2


def test_an_explicit_soft_limit_is_kept_within_the_new_sizes() -> None:
    core = ready_core(max_size=6, soft_max_size=4, max_connecting=6)
    core.resize(0.0, 0, 3)
    assert state_of(core).options.soft_max_size == 3
    core.resize(0.0, 5, 8)
    assert state_of(core).options.soft_max_size == 5


# ------------------------------------------------------------------ refused


def _never(connection: Any) -> None:  # pragma: no cover - the core only asks for resets
    raise AssertionError("never called")


@pytest.mark.parametrize(
    ("min_size", "max_size", "error", "match"),
    [
        (5, 2, ValueError, r"PoolOptions\.min_size \(5\) must be <= max_size \(2\)"),
        (-1, 2, ValueError, r"PoolOptions\.min_size must be an integer >= 0"),
        (0, -3, ValueError, r"PoolOptions\.max_size must be an integer >= 0"),
        ("1", 2, TypeError, r"PoolOptions\.min_size must be an int"),
        (1, 2.5, TypeError, r"PoolOptions\.max_size must be an int"),
    ],
)
def test_bad_sizes_are_refused_as_the_constructor_refuses_them_and_change_nothing(
    min_size: Any, max_size: Any, error: type[Exception], match: str
) -> None:
    core = ready_core(max_size=3, min_size=1, max_connecting=3)
    made = leased(core, 2)
    options = state_of(core).options
    before = core.stats()
    with pytest.raises(error, match=match):
        core.resize(1.0, min_size, max_size)
    with pytest.raises(error, match=match):
        PoolOptions(min_size=min_size, max_size=max_size)  # (the same words)
    assert state_of(core).options is options
    assert state_of(core).size_limit == 3 and state_of(core).roles.min_size == 1
    assert core.take() == ([], []) and core.stats() == before
    assert [c.role for c in made] == [Role.KEPT, Role.DEMAND]


def test_a_bad_max_connecting_is_refused() -> None:
    core = ready_core(max_size=3)
    with pytest.raises(ValueError, match=r"PoolOptions\.max_connecting must be an integer >= 1"):
        core.resize(0.0, 0, 3, max_connecting=0)
    assert state_of(core).options.max_connecting == 2


def test_a_closed_pool_refuses() -> None:
    core = ready_core(max_size=3)
    core.close(1.0)
    core.take()
    with pytest.raises(PoolClosedError, match="Attempted to resize a closed connection pool"):
        core.resize(2.0, 0, 5)
    assert state_of(core).options.max_size == 3 and core.take() == ([], [])


def test_an_adaptive_pool_refuses() -> None:
    core = ready_core(max_size=8, adaptive=Adaptive())
    with pytest.raises(ValueError, match=r"resize\(\) of a pool with PoolOptions\.adaptive"):
        core.resize(0.0, 0, 4)
    assert state_of(core).options.max_size == 8 and state_of(core).adaptive is not None


def test_the_statistics_go_on() -> None:
    core = ready_core(max_size=2, max_connecting=2)
    made = leased(core, 2)
    for conn in made:
        core.release(conn, 1.0)
    before = core.stats()
    core.resize(2.0, 0, 1)
    after = core.stats()
    assert after.connections_created == before.connections_created == 2
    assert after.checkouts == before.checkouts == 2
    assert after.connections_closed == {"idle": 1}
    assert core_view(core).total == 1


def _two_multiplexed(core: PoolCore, out_on_second: int) -> tuple[Conn, Conn, list[Request]]:
    """Two connections of two streams: the first with both out, the second with
    ``out_on_second``."""
    reqs = [_request(core, 0.0)]
    (first,) = _started(core.take()[0])
    core.connected(first, 0.0, "a", max_streams=2)
    reqs.append(_request(core, 0.0))  # (its second stream)
    reqs += [_request(core, 0.0) for _ in range(out_on_second)]
    (second,) = _started(core.take()[0])
    core.connected(second, 0.0, "b", max_streams=2)
    core.take()
    assert [r.conn for r in reqs] == [first, first] + [second] * out_on_second
    return first, second, reqs


def test_a_multiplexed_connection_beyond_the_new_max_size_takes_no_new_lease() -> None:
    core = ready_core(max_size=2, max_connecting=2)
    first, second, _ = _two_multiplexed(core, 1)
    assert second in state_of(core).idle_set.open
    core.resize(1.0, 0, 1)
    assert second.role is Role.OVERFLOW and second not in state_of(core).idle_set.open
    waiter = _request(core, 2.0)
    assert waiter.state is RequestState.WAITING
    core.release(second, 2.0)  # its last lease: closed
    assert _closed(core.take()[0]) == [second.id]
    core.release(first, 3.0)
    assert _completed(core.take()[0]) == [waiter]


def test_a_multiplexed_stream_back_beyond_the_new_max_size_frees_no_stream() -> None:
    core = ready_core(max_size=2, max_connecting=2)
    _, second, _ = _two_multiplexed(core, 2)
    core.resize(1.0, 0, 1)
    core.release(second, 2.0)  # one of its two streams
    assert second not in state_of(core).idle_set.open
    waiter = _request(core, 2.0)
    assert waiter.state is RequestState.WAITING
    core.release(second, 3.0)
    assert _closed(core.take()[0]) == [second.id]


def test_growing_again_before_the_surplus_is_back_keeps_it() -> None:
    core = ready_core(max_size=3, max_connecting=3)
    made = leased(core, 3)
    core.resize(1.0, 0, 1)
    assert [c.role for c in made] == [Role.DEMAND, Role.OVERFLOW, Role.OVERFLOW]
    core.resize(2.0, 0, 3)
    assert [c.role for c in made] == [Role.DEMAND] * 3
    for conn in made:
        core.release(conn, 3.0)
    assert _closed(core.take()[0]) == []
    assert core.stats().available == 3


def test_a_connect_backing_off_beyond_a_lowered_max_size_is_not_retried() -> None:
    """A connect that timed out (given up on, still running: ``abandoned``) left its slot backing
    off; a resize to ``max_size=1`` puts the pool beyond it (the slot and the connect given up
    on). When the backoff is over the slot is dropped, not retried: a retry was a third
    connection towards a limit of one (the state machine found it)."""
    core = PoolCore(
        PoolOptions(
            min_size=2,
            max_connecting=2,
            background_interval=INF,
            connect_timeout=1.0,
            connect_retry=Backoff(base=0.25, factor=2.0, max_delay=1.0, jitter=0.0),
        ),
        "db:5432",
    )
    core.ready(0.0)
    first, _second = _started(core.take()[0])
    core.connected(first, 0.0, "c1")
    core.take()
    core.fire_timers(1.0)  # the second connect times out: given up on, its slot backs off
    core.take()
    assert state_of(core).abandoned == 1
    core.resize(1.0, 0, 1)
    core.take()
    core.fire_timers(1.25)  # the backoff is over
    actions = core.take()[0]
    assert _started(actions) == []
    shared = state_of(core)
    assert len(shared.conns) + shared.abandoned <= 1


def test_a_stream_limit_raised_on_a_surplus_connection_serves_nobody() -> None:
    # (after a resize lowered max_size, a connection beyond it serves no new lease: its streams
    # freed by a raised stream limit, as by a stream given back (``_release_stream``), do not
    # go to the waiters; the connections within the limit serve them)
    core = ready_core(max_size=2, max_connecting=2)
    held = leased(core, 2)
    waiters = [_request(core, 1.0), _request(core, 1.0)]
    core.take()
    core.resize(2.0, 0, 1)
    (surplus,) = [c for c in held if c.role is Role.OVERFLOW]
    assert core.set_max_streams(surplus.id, 2, 3.0)
    assert _completed(core.take()[0]) == []  # nobody served by the surplus connection
    assert all(w.state is RequestState.WAITING for w in waiters)
    (kept,) = [c for c in held if c is not surplus]
    core.release(kept, 4.0)  # the connection within the limit serves the oldest
    assert _completed(core.take()[0]) == [waiters[0]]
