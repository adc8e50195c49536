"""Waiting checkouts' deadlines "in line" (``_core.waiters``): requests whose deadlines come in
the order they queued share one timer entry; the others have one each. Either way each request
times out at its own deadline, no earlier and no later, in the order of the deadlines, and the
timer heap stays small however many checkouts wait and are served. Exact times, no clock."""

from __future__ import annotations

import pytest

from core_scene import leased, ready_core
from poolkit import Adaptive
from poolkit._core import PoolCore, Request, RequestState
from poolkit.errors import WaitQueueTimeoutError


def _wait(core: PoolCore, now: float, timeout: float | None) -> Request:
    req = Request(now, None if timeout is None else now + timeout)
    core.fast.request(req, now)
    return req


def _timed_out_at(core: PoolCore, reqs: list[Request], times: list[float]) -> dict[int, float]:
    """Step the timers through ``times``: which of ``reqs`` (by index) timed out when."""
    out: dict[int, float] = {}
    for now in times:
        core.fire_timers(now)
        for i, req in enumerate(reqs):
            if i not in out and req.state is RequestState.FAILED:
                assert isinstance(req.error, WaitQueueTimeoutError)
                out[i] = now
        core.take()
    return out


def test_waiters_with_one_timeout_share_one_timer_entry_each_timing_out_at_its_deadline() -> None:
    core = ready_core(max_size=1)
    leased(core, 1)
    reqs = [_wait(core, float(i), 10.0) for i in range(5)]
    assert len(core.timers) == 1  # (one entry for the line, not one per waiter)
    assert all(not r.heaped for r in reqs)
    out = _timed_out_at(core, reqs, [9.99, 10.0, 10.5, 11.0, 12.999, 13.0, 14.0])
    assert out == {0: 10.0, 1: 11.0, 2: 12.999, 3: 13.0, 4: 14.0}
    assert not core.queue and len(core.timers) == 0


def test_a_shorter_timeout_behind_a_longer_one_has_its_own_entry_and_times_out_first() -> None:
    core = ready_core(max_size=1)
    leased(core, 1)
    long_, short, after = _wait(core, 0.0, 10.0), _wait(core, 1.0, 2.0), _wait(core, 2.0, 9.0)
    assert not long_.heaped and short.heaped and not after.heaped
    out = _timed_out_at(core, [long_, short, after], [2.9, 3.0, 9.9, 10.0, 10.9, 11.0])
    assert out == {1: 3.0, 0: 10.0, 2: 11.0}


def test_a_waiter_without_a_deadline_ends_the_line_until_the_queue_is_empty() -> None:
    core = ready_core(max_size=1)
    (conn,) = leased(core, 1)
    forever = _wait(core, 0.0, None)
    behind = _wait(core, 1.0, 5.0)
    assert behind.heaped  # (the line ended: a deadline behind a request that has none)
    out = _timed_out_at(core, [forever, behind], [5.9, 6.0, 100.0])
    assert out == {1: 6.0} and forever.state is RequestState.WAITING
    taken = core.fast.release_idle(conn)  # the connection goes to the one left
    assert taken is forever and not core.queue
    again = _wait(core, 101.0, 5.0)  # the queue was empty: a new line
    assert not again.heaped
    assert _timed_out_at(core, [again], [105.9, 106.0]) == {0: 106.0}


def test_the_line_re_armed_earlier_when_a_new_line_starts_with_an_earlier_deadline() -> None:
    core = ready_core(max_size=1)
    (conn,) = leased(core, 1)
    first = _wait(core, 0.0, 30.0)  # the line armed at 30
    taken = core.fast.release_idle(conn)
    assert taken is first and not core.queue
    assert first.conn is not None
    soon = _wait(core, 1.0, 2.0)  # a new line, its deadline (3) before the armed one's (30)
    assert not soon.heaped
    assert core.take_deadline() == 3.0
    assert _timed_out_at(core, [soon], [2.9, 3.0]) == {0: 3.0}


def test_a_line_whose_front_was_served_fires_early_and_re_arms_at_the_next_deadline() -> None:
    core = ready_core(max_size=1)
    (conn,) = leased(core, 1)
    reqs = [_wait(core, float(i), 10.0) for i in range(3)]
    taken = core.fast.release_idle(conn)  # the oldest served: the line still armed at 10
    assert taken is reqs[0]
    core.fire_timers(10.0)  # early for the others: nothing times out, re-armed at 11
    assert reqs[1].state is RequestState.WAITING and core.take_deadline() == 11.0
    assert _timed_out_at(core, reqs[1:], [10.99, 11.0, 12.0]) == {0: 11.0, 1: 12.0}


@pytest.mark.parametrize("adaptive", [False, True], ids=["release_idle", "release_adapted"])
def test_many_waiters_served_leave_the_timer_heap_small(adaptive: bool) -> None:
    # (the fast check-ins take the oldest waiter and mark a heaped request's entry stale: a
    # plain pool's ``release_idle``, an adaptive one's ``release_adapted``)
    core = ready_core(max_size=1, adaptive=Adaptive() if adaptive else None)
    (conn,) = leased(core, 1)
    waiting = [_wait(core, 0.0, 30.0) for _ in range(4)]  # (a queue that never empties)
    now = 0.0
    heaped = 0
    for i in range(10_000):
        now += 0.001
        req = _wait(core, now, 30.0 if i % 10 else 1.0)  # one in ten out of line, behind others
        heaped += req.heaped
        waiting.append(req)
        # the oldest served, its deadline entry stale
        taken = core.fast.release_adapted(conn, now) if adaptive else core.fast.release_idle(conn)
        assert taken is waiting.pop(0)
        assert taken.conn is not None
        conn = taken.conn
        core.take()
    assert heaped == 1000
    assert len(core.timers) <= 2 * 64 + 2  # (the stale entries are compacted as they pile up)


def test_many_waiters_cancelled_or_served_the_slow_way_leave_the_timer_heap_small() -> None:
    # (the two other ways out of the queue: a cancel, and a check-in through the full path,
    # ``release``, which takes the oldest with ``WaitQueue.pop_oldest``; each marks a heaped
    # request's entry stale, or the heap keeps one per request gone)
    core = ready_core(max_size=1)
    (conn,) = leased(core, 1)
    waiting = [_wait(core, 0.0, 30.0) for _ in range(4)]  # (a queue that never empties)
    now = 0.0
    heaped = 0
    for i in range(10_000):
        now += 0.001
        req = _wait(core, now, 1.0 if i % 10 in (0, 5) else 30.0)  # one in five out of line
        heaped += req.heaped
        if i % 2:
            assert core.cancel(req, now)  # gone before its deadline
            continue
        waiting.append(req)
        core.release(conn, now)  # the full check-in: the oldest served
        taken = waiting.pop(0)
        assert taken.state is RequestState.SERVED and taken.conn is not None
        conn = taken.conn
        core.take()
    assert heaped == 2000  # (1,000 of them cancelled, 1,000 served)
    assert len(core.timers) <= 2 * 64 + 2  # (the stale entries are compacted as they pile up)


def test_a_deadline_behind_a_waiter_without_one_times_out_at_its_deadline() -> None:
    core = ready_core(max_size=1)
    leased(core, 1)
    first = _wait(core, 0.0, 10.0)  # the line, armed at 10
    forever = _wait(core, 1.0, None)  # ends it: nothing queued behind is in line
    behind = _wait(core, 2.0, 9.0)  # (11: later than the line's deadlines, but behind forever)
    assert behind.heaped
    out = _timed_out_at(core, [first, forever, behind], [10.0, 10.99, 11.0, 50.0])
    assert out == {0: 10.0, 2: 11.0} and forever.state is RequestState.WAITING


def test_a_new_line_that_starts_without_a_deadline_puts_the_deadlines_behind_it_on_the_heap() -> (
    None
):
    core = ready_core(max_size=1)
    (conn,) = leased(core, 1)
    first = _wait(core, 0.0, 10.0)  # a line, armed at 10
    assert core.fast.release_idle(conn) is first and not core.queue
    forever = _wait(core, 1.0, None)  # a new line, ended at once
    behind = _wait(core, 2.0, 9.0)
    assert behind.heaped
    out = _timed_out_at(core, [forever, behind], [10.0, 10.99, 11.0, 50.0])
    assert out == {1: 11.0} and forever.state is RequestState.WAITING
