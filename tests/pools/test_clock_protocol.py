"""A clock reaches a pool through a declared protocol: ``Clock`` (time) or ``DrivenClock`` (time,
timers, threads and waits: the test clock), asked once when the pool is made."""

from __future__ import annotations

import poolkit
from poolkit.testing import FakeClock


def test_a_clock_reaches_a_pool_through_its_protocol_only() -> None:
    """The test clock is a ``DrivenClock`` (timers, threads and waits run by it); a clock with
    only some of those methods is a plain ``Clock`` (its time, nothing more): no method of a
    clock is looked for one by one."""
    assert isinstance(FakeClock(), poolkit.DrivenClock)

    class Partial:  # (time and timers, but not threads nor waits)
        def __init__(self) -> None:
            self.timers = 0

        def monotonic(self) -> float:
            return 0.0

        def call_at(self, when: float, callback: object) -> object:
            self.timers += 1
            raise AssertionError("a plain clock's call_at is not the pool's")

    clock = Partial()
    assert not isinstance(clock, poolkit.DrivenClock)
    options = poolkit.PoolOptions(max_size=1, background_interval=0.5)
    with poolkit.Pool(lambda ctx: object(), options=options, clock=clock) as pool:
        pool.checkout(timeout=1.0).release()  # (the pool's timer armed: its own thread's)
    assert clock.timers == 0
