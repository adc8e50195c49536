"""An adaptive AsyncPool (``PoolOptions(adaptive=...)``, issue 28) over the embedded server, on
virtual time (``poolkit.testing.loop``): real sockets, the server's cores' queue, the clock
jumping when nothing is ready. 32 tasks on a server of 8 cores at 1 ms: the pool finds the knee
instead of holding ``max_size``; when the server loses half its cores, the limit follows."""

from __future__ import annotations

import asyncio
import itertools
import logging
import pathlib
import statistics
import time
from typing import Any

import pytest

import poolkit
import poolkit.events
from core_view import state_of
from poolkit.testing.loop import run
from poolkit.testing.sim import SimChange, SimConnection, SimServer, SimSettings, sim_async_connect


async def _load(pool: poolkit.AsyncPool[SimConnection], tasks: int, until: float) -> list[int]:
    """``tasks`` callers, each a request at a time until ``until``; the limit every 10 ms."""
    loop = asyncio.get_running_loop()
    limits: list[int] = []

    async def caller() -> None:
        while loop.time() < until:
            async with pool.connection() as conn:
                await conn.request(b"x")

    async def watch() -> None:
        while loop.time() < until:
            await asyncio.sleep(0.01)
            adaptive = pool.stats().adaptive
            assert adaptive is not None
            limits.append(adaptive.limit)
            # (a limit lowered takes no lease back: in use may stay above it until they return)

    # (5 s past ``until`` at most: a caller never woken fails the test, not the run's timeout)
    async with asyncio.timeout(until - loop.time() + 5.0):
        await asyncio.gather(watch(), *(caller() for _ in range(tasks)))
    return limits


@pytest.mark.parametrize("listened", [True, False], ids=["listened", "fast"])
def test_an_adaptive_pool_finds_the_knee_and_follows_the_server(
    caplog: pytest.LogCaptureFixture, listened: bool
) -> None:
    """The limit in ``stats()``, found and followed; its changes told to listeners and logged
    at INFO, the probe's and the drain's excursions not. Without a listener the check-ins take
    the adaptive fast path (``Handout.release_adapted``), which must sample the same times: a
    connection handed to a waiter starts the waiter's operation then, not at its first lease."""
    settings = SimSettings(
        service_time=("exp", 0.001),
        concurrency=8,
        seed=3,
        schedule=(SimChange(at=6.0, concurrency=4),),
    )

    async def main() -> None:
        async with SimServer(settings) as server:
            options = poolkit.PoolOptions(max_size=32, adaptive=poolkit.Adaptive())
            changes: list[poolkit.events.AdaptiveLimitChangedEvent] = []
            pool = poolkit.AsyncPool(
                sim_async_connect("127.0.0.1", server.port),
                address="sim",
                options=options,
                listeners=[
                    lambda e: (
                        changes.append(e)
                        if isinstance(e, poolkit.events.AdaptiveLimitChangedEvent)
                        else None
                    )
                ]
                if listened
                else [],
            )
            assert pool._adapted_quick is not listened
            pool.ready()
            initial = pool.stats().adaptive
            assert initial == poolkit.AdaptiveStats(
                limit=2, floor=1, ceiling=32, knee=2.0, share=32.0
            )
            with caplog.at_level(logging.INFO, logger="poolkit.pool"):
                limits = await _load(pool, 32, 12.0)
            steady = limits[300:600]  # (t = 3..6 s)
            after = limits[900:]  # (t = 9..12 s, cores 8 -> 4 at 6 s)
            assert 7 <= statistics.median(steady) <= 12, statistics.median(steady)
            assert 3 <= statistics.median(after) <= 6, statistics.median(after)
            stats = pool.stats()
            assert stats.total < 32
            found = stats.adaptive
            assert found is not None and found.rounds > 100 and found.ceiling == 32
            assert 3 <= found.knee <= 7 and found.elasticity is not None, found
            assert 0.0008 <= found.base_op_time <= 0.0015, found  # (1 ms and the round trip)
            assert found.op_time >= found.base_op_time
            logged = [r for r in caplog.records if "adaptive limit" in r.getMessage()]
            if not listened:  # (the changes as logged: the fast path's events too)
                assert len(logged) == found.changes and logged[0].levelno == logging.INFO
                assert "went from 2 to " in logged[0].getMessage()
                await pool.close()
                return
            # the changes: from the initial 2 up to the knee, down after the cores went, each
            # one by more than a fifth of the one before it; far fewer than the rounds
            assert changes and changes[0].previous == 2 and found.changes == len(changes)
            assert len(changes) < found.rounds / 10
            for earlier, later in itertools.pairwise(changes):
                assert later.previous == earlier.limit
            for change in changes:
                assert abs(change.limit - change.previous) > 0.2 * change.previous
            assert max(c.limit for c in changes) >= 7 and changes[-1].limit <= 6
            assert len(logged) == len(changes) and logged[0].levelno == logging.INFO
            assert f"went from 2 to {changes[0].limit} connections" in logged[0].getMessage()
            assert all(c.queued >= 0.0 for c in changes)
            assert logged[0].getMessage().endswith(f"{changes[0].queued:.1f} queueing)")
            await pool.close()

    run(main())


def test_the_base_rounds_align_on_the_wall_clock_where_the_pool_keeps_monotonic_time() -> None:
    """On ``time.monotonic`` (a thread pool, an AsyncPool on asyncio's own loop) the pool tells
    its core the wall clock's offset, on which the base rounds of pools on other hosts align;
    on a clock of its own (a test clock, a loop's virtual time) its time is the only one."""
    options = poolkit.PoolOptions(max_size=4, adaptive=poolkit.Adaptive())

    def connect(ctx: poolkit.ConnectContext) -> object:
        return object()

    def epoch(pool: poolkit.Pool[object] | poolkit.AsyncPool[SimConnection]) -> float:
        adaptive = state_of(pool._core).adaptive
        assert adaptive is not None
        return adaptive.epoch

    before = time.time() - time.monotonic()
    pool = poolkit.Pool(connect, options=options)
    after = time.time() - time.monotonic()
    assert min(before, after) - 0.01 <= epoch(pool) <= max(before, after) + 0.01
    pool.close()

    async def main() -> None:  # (virtual time: the loop's own clock)
        async with SimServer(SimSettings()) as server, poolkit.AsyncPool(
            sim_async_connect("127.0.0.1", server.port), options=options
        ) as virtual:
            async with virtual.connection():
                pass
            assert epoch(virtual) == 0.0

    run(main())

    async def on_asyncio() -> None:  # (asyncio's own loop: time.monotonic)
        async with SimServer(SimSettings()) as server, poolkit.AsyncPool(
            sim_async_connect("127.0.0.1", server.port), options=options
        ) as real:
            async with real.connection():
                pass
            offset = time.time() - time.monotonic()
            assert abs(epoch(real) - offset) <= 0.01

    asyncio.run(on_asyncio())


def test_an_adaptive_pool_under_trio_tells_its_core_the_runs_lag() -> None:
    """The same signal under trio (issue 41): a task of the pool's measures how long a task made
    ready waits to run, every ``LAG_EVERY`` seconds, while tasks keep the run busy (2 ms each
    turn); a static pool tells nothing, nor a closed one, nor one on a virtual clock."""
    import trio
    import trio.testing

    from poolkit.asyncio import LAG_EVERY

    told: list[float] = []
    loads: list[float] = []

    def watch(pool: poolkit.AsyncPool[object]) -> None:
        real, real_load = pool._core.client_lag, pool._core.client_load

        def note(lag: float, now: float) -> None:
            told.append(lag)
            real(lag, now)

        def note_load(load: float, now: float) -> None:
            loads.append(load)
            real_load(load, now)

        pool._core.client_lag = note  # (spies)
        pool._core.client_load = note_load

    async def connect(ctx: poolkit.ConnectContext) -> object:
        return object()

    def pools() -> tuple[poolkit.AsyncPool[object], poolkit.AsyncPool[object]]:
        static = poolkit.AsyncPool(connect, options=poolkit.PoolOptions(max_size=2))
        pool = poolkit.AsyncPool(
            connect, options=poolkit.PoolOptions(max_size=2, adaptive=poolkit.Adaptive())
        )
        watch(pool)
        watch(static)
        return static, pool

    async def busy(until: float) -> None:  # (a run with work of its own: 2 ms a turn)
        while trio.current_time() < until:
            end = time.perf_counter() + 0.002
            while time.perf_counter() < end:
                pass
            await trio.lowlevel.checkpoint()

    async def main() -> None:
        static, pool = pools()
        async with static, pool, trio.open_nursery() as nursery:
            async with pool.connection():
                pass
            nursery.start_soon(busy, trio.current_time() + 30 * LAG_EVERY)
            await trio.sleep(35 * LAG_EVERY)
            assert len(told) >= 5 and max(told) >= 0.001, told  # (the adaptive pool's only)
            assert loads and max(loads) >= 0.5, loads  # (its thread's load too)
        seen = len(told), len(loads)
        await trio.sleep(15 * LAG_EVERY)
        assert (len(told), len(loads)) == seen  # (closed: no more)

    trio.run(main)

    async def virtual() -> None:
        static, pool = pools()
        async with static, pool:
            await trio.sleep(100 * LAG_EVERY)
        assert told == [] and loads == []

    told.clear()
    loads.clear()
    trio.run(virtual, clock=trio.testing.MockClock(autojump_threshold=0))


def test_an_adaptive_pool_on_asyncio_tells_its_core_the_loops_lag() -> None:
    """Issue 40's client-side signal: on asyncio's own loop an adaptive pool tells its core,
    every ``LAG_EVERY`` seconds, how long a callback made ready waited to run, and every
    ``LOAD_EVERY`` its thread's load; a loop kept busy (callbacks of 2 ms one after another)
    shows both, an idle one a low load. A static pool, and a closed one, tell nothing (the
    watch ends with ``close``)."""
    from poolkit.asyncio import LAG_EVERY

    told: list[float] = []
    loads: list[float] = []

    def watch(pool: poolkit.AsyncPool[object]) -> None:
        real, real_load = pool._core.client_lag, pool._core.client_load

        def note(lag: float, now: float) -> None:
            told.append(lag)
            real(lag, now)

        def note_load(load: float, now: float) -> None:
            loads.append(load)
            real_load(load, now)

        pool._core.client_lag = note  # (spies)
        pool._core.client_load = note_load

    async def connect(ctx: poolkit.ConnectContext) -> object:
        return object()

    async def main() -> None:
        loop = asyncio.get_running_loop()
        busy_until = loop.time() + 30 * LAG_EVERY

        def busy() -> None:  # (a loop with work of its own: each callback 2 ms)
            end = time.perf_counter() + 0.002
            while time.perf_counter() < end:
                pass
            if loop.time() < busy_until:
                loop.call_soon(busy)

        static = poolkit.AsyncPool(connect, options=poolkit.PoolOptions(max_size=2))
        pool = poolkit.AsyncPool(
            connect, options=poolkit.PoolOptions(max_size=2, adaptive=poolkit.Adaptive())
        )
        watch(pool)
        watch(static)
        async with static, pool:
            async with pool.connection():
                pass
            loop.call_soon(busy)
            await asyncio.sleep(35 * LAG_EVERY)
            assert len(told) >= 5 and max(told) >= 0.001, told  # (the adaptive pool's only)
            assert loads and max(loads) >= 0.5, loads  # (busy: running, or waiting to run)
            await asyncio.sleep(30 * LAG_EVERY)  # (idle: the loop waits in its selector)
            assert loads[-1] < 0.5, loads
        seen = len(told), len(loads)
        await asyncio.sleep(15 * LAG_EVERY)
        assert (len(told), len(loads)) == seen  # (closed: no more)

    asyncio.run(main())


@pytest.mark.parametrize("schedstat", [True, False], ids=["schedstat", "thread_time"])
def test_a_threads_load_is_the_part_of_the_time_it_ran(
    schedstat: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``ThreadLoad``, the client-side signal's measure (issue 40): the time the calling thread
    ran (or, from Linux's scheduler statistics, waited runnable for a processor) over the time
    passed, as the front end's clock says it passed; nothing before ``LOAD_EVERY``. Where the
    kernel keeps no statistics (not Linux), the thread's CPU time alone. The CPU time spun here
    is the thread's own, whatever else the machine runs."""
    from poolkit import _frontend

    if not schedstat:
        monkeypatch.setattr(_frontend, "_SCHEDSTAT", "/nonexistent/schedstat")
    load = _frontend.ThreadLoad(100.0)
    assert load.share(100.0 + _frontend.LOAD_EVERY / 2) is None  # (too soon)
    start = time.thread_time()
    while time.thread_time() < start + 0.08:  # (80 ms of this thread's CPU)
        pass
    busy = load.share(100.125)
    assert busy is not None and busy >= 0.64 - 1e-3, busy
    idle = load.share(100.25)  # (an eighth of a second on this clock, microseconds of CPU)
    assert idle is not None and idle <= 0.1, idle
    assert load.share(1000.0) is not None and load._schedstat is schedstat


def test_a_threads_load_counts_the_time_it_waited_for_a_processor(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Linux's figures for the thread (``/proc/thread-self/schedstat``: nanoseconds run,
    nanoseconds waited runnable, timeslices): a thread starved of processors by its neighbours is
    as saturated as one busy, so both count (here a file standing in for the kernel's)."""
    from poolkit import _frontend

    stat = tmp_path / "schedstat"
    stat.write_text("1000000000 500000000 3\n")
    monkeypatch.setattr(_frontend, "_SCHEDSTAT", str(stat))
    load = _frontend.ThreadLoad(0.0)
    stat.write_text("1040000000 580000000 9\n")  # (40 ms run, 80 ms waited)
    assert load.share(0.125) == pytest.approx(0.96)
    stat.write_text("1240000000 780000000 12\n")  # (more than the time passed: at most 1)
    assert load.share(0.25) == 1.0


@pytest.mark.parametrize("server", ["pinned", "4 cores"])
def test_the_adaptive_fast_check_in_hands_off_up_to_the_limit_and_leaves_no_output(
    server: str,
) -> None:
    """``Handout.release_adapted`` (an unobserved adaptive pool's check-in), on virtual time,
    16 callers, each operation holding its connection 1 ms: with the limit held at 4
    (``min_size`` = ``max_size``), or found on a server of 4 cores (a semaphore; ``max_size``
    8, connections shed after 10 ms available). After every check-in: a connection coming back
    went straight to the oldest waiter while the limit had room for it (the one coming back
    counted), the fast way (nine check-ins in ten): no waiter is left with a connection
    available and room under the limit; and the core holds no output the front end left behind
    (a round's end: waiters served, connections shed, changes reported). A connection handed
    off starts the waiter's operation then: the operation time sampled is the hold's, not the
    wait's."""
    pinned = server == "pinned"

    async def connect(ctx: poolkit.ConnectContext) -> object:
        return object()

    async def main() -> None:
        options = poolkit.PoolOptions(
            min_size=4 if pinned else 0,
            max_size=4 if pinned else 8,
            adaptive=poolkit.Adaptive(round_ops=8, shed_after=0.01),
        )
        cores = asyncio.Semaphore(4)
        async with poolkit.AsyncPool(connect, options=options) as pool:
            assert pool._adapted_quick
            core, hand = pool._core, pool._fast
            release = pool._release
            broken: list[str] = []
            fast: list[bool] = []

            class Spy:  # (the core's fast-path port, its adaptive check-in noted)
                def __getattr__(self, name: str) -> Any:
                    return getattr(hand, name)

                def release_adapted(self, conn: Any, now: float) -> Any:
                    taken = hand.release_adapted(conn, now)
                    fast.append(taken is not None)
                    return taken

            pool._fast = Spy()

            def checked(lease: object, clean: bool = False) -> None:
                release(lease, clean)  # type: ignore[arg-type]
                if core.actions or core.events or core.timers.dirty:
                    broken.append(f"output left: {core.actions} {core.events}")
                idle = list(hand._idle)  # type: ignore[attr-defined]
                adaptive = core.stats().adaptive
                assert adaptive is not None
                if pool._waiting and idle and hand.in_use < adaptive.limit:  # type: ignore[attr-defined]
                    broken.append("a waiter left with a connection available under the limit")

            pool._release = checked  # type: ignore[method-assign]  # (a spy)

            async def caller() -> None:
                for _ in range(100):
                    async with pool.connection(), cores:
                        await asyncio.sleep(0.001)

            async with asyncio.timeout(60):
                await asyncio.gather(*(caller() for _ in range(16)))
            assert broken == [], broken[:3]
            assert sum(fast) >= 0.9 * len(fast) and len(fast) >= 1500, (sum(fast), len(fast))
            found = pool.stats().adaptive
            assert found is not None and found.rounds >= 50
            if pinned:  # (each operation holds 1 ms, and waits 3 ms for a connection)
                assert found.op_time == pytest.approx(0.001), found
            else:
                assert found.changes >= 1 and pool.stats().connections_created > 4

    run(main())
