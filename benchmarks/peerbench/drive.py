"""The contention harness: ``workers`` tasks (threads) repeating one operation for a time.

A contender supplies a *builder*: given the run's :class:`~peerbench.core.Env`, a ``record``
function and the workload's :class:`Shape`, it makes its pool (as its documentation says to),
and yields ``one(worker)``: one operation, as a user writes it (check out, query, give back),
which passes the checkout's wait to ``record``. The harness runs every worker for
``sizes.warmup`` seconds (connections made, caches warm), forgets the waits, then for
``sizes.duration`` seconds, and counts each worker's operations finished before the time was up.

Figures: ``ops_per_s``; ``wait_p50_us`` / ``wait_p99_us`` / ``wait_max_us`` (the checkout's wait,
every operation of the measured time); ``ops_worker_min`` / ``ops_worker_max`` and ``fairness``
(their ratio: 1 is every worker served alike, 0 a worker that never got a connection);
``cpu_us_per_op``: the client's CPU per operation, the benchmark process's CPU time
(``time.process_time()``: every thread's, the pool's own included) over the measured time,
divided by the operations.
"""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import threading
import time
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from typing import Any

from floors import NAN, pctl

from .core import Env, Figures

Record = Callable[[float], None]
AsyncOne = Callable[[int], Awaitable[None]]
SyncOne = Callable[[int], None]
#: how long a run may overrun its time before it is declared hung (a starved worker, a lost
#: connection): the run fails with an error naming the workers still out
HANG_GRACE = 60.0
#: a worker that failed pauses this long before its next operation (W8: not a busy loop while
#: the server is away)
ERROR_PAUSE = 0.01


@dataclasses.dataclass(frozen=True)
class Shape:
    """How many workers, and the pool size they share."""

    workers: int
    size: int


AsyncBuild = Callable[[Env, Record, Shape], AbstractAsyncContextManager[AsyncOne]]
SyncBuild = Callable[[Env, Record, Shape], AbstractContextManager[SyncOne]]


@dataclasses.dataclass
class Tally:
    """What the workers of one drive did: operations per worker (finished in time), and with
    ``timeline`` on, every operation's end (``time.perf_counter()``) and whether it succeeded."""

    counts: list[int]
    elapsed: float = 0.0
    #: the process's CPU seconds over the measured time (set by the contention runs)
    cpu: float = NAN
    errors: int = 0
    first_error: str = ""
    timeline: list[tuple[float, bool]] | None = None


def contention_figures(waits: list[float], tally: Tally) -> Figures:
    """The figures of a measured drive (see the module's docstring)."""
    waits.sort()
    ops = sum(tally.counts)
    low, high = min(tally.counts), max(tally.counts)
    return {
        "ops_per_s": ops / tally.elapsed if tally.elapsed else NAN,
        "ops": float(ops),
        "wait_p50_us": pctl(waits, 0.50) * 1e6,
        "wait_p99_us": pctl(waits, 0.99) * 1e6,
        "wait_max_us": waits[-1] * 1e6 if waits else NAN,
        "ops_worker_min": float(low),
        "ops_worker_max": float(high),
        "fairness": low / high if high else NAN,
        "cpu_us_per_op": tally.cpu / ops * 1e6 if ops else NAN,
        "errors": float(tally.errors),
    }


# ---------------------------------------------------------------------- asyncio


async def drive_async(
    one: AsyncOne, workers: int, duration: float, *, tolerate: bool = False, timeline: bool = False
) -> Tally:
    """Every worker repeats ``one(i)`` until ``duration`` seconds are up. ``tolerate``: an
    operation that raises is counted as an error (the worker pauses, then goes on) instead of
    ending the drive."""
    loop = asyncio.get_running_loop()
    tally = Tally([0] * workers, timeline=[] if timeline else None)
    counts = tally.counts
    stopped = False
    pc = time.perf_counter
    start = pc()

    async def worker(i: int) -> None:
        while not stopped:
            try:
                await one(i)
            except Exception as exc:
                if not tolerate:
                    raise
                tally.errors += 1
                tally.first_error = tally.first_error or f"{type(exc).__name__}: {exc}"
                if tally.timeline is not None:
                    tally.timeline.append((pc(), False))
                await asyncio.sleep(ERROR_PAUSE)
                continue
            if not stopped:
                counts[i] += 1
                if tally.timeline is not None:
                    tally.timeline.append((pc(), True))

    def stop() -> None:
        nonlocal stopped
        stopped = True
        tally.elapsed = pc() - start

    loop.call_later(duration, stop)
    tasks = [asyncio.ensure_future(worker(i)) for i in range(workers)]
    done, pending = await asyncio.wait(tasks, timeout=duration + HANG_GRACE)
    if pending:
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        raise RuntimeError(f"{len(pending)} of {workers} workers hung (ops done: {sum(counts)})")
    for task in done:
        task.result()
    return tally


def async_contention(build: AsyncBuild, shape: Shape) -> Callable[[Env], Figures]:
    """A contender's run: ``build`` the pool on a fresh event loop, warm up, measure, close."""

    async def measure(env: Env) -> Figures:
        waits: list[float] = []
        async with build(env, waits.append, shape) as one:
            await drive_async(one, shape.workers, env.sizes.warmup)
            waits.clear()
            gc.collect()
            cpu = time.process_time()
            tally = await drive_async(one, shape.workers, env.sizes.duration)
            tally.cpu = time.process_time() - cpu
            return contention_figures(waits, tally)

    return lambda env: asyncio.run(measure(env))


# ---------------------------------------------------------------------- threads


def drive_threads(
    one: SyncOne, workers: int, duration: float, *, tolerate: bool = False, timeline: bool = False
) -> Tally:
    """:func:`drive_async` with a thread per worker (started together at a barrier)."""
    tally = Tally([0] * workers, timeline=[] if timeline else None)
    counts = tally.counts
    stopped = [False]
    failures: list[BaseException] = []
    note = threading.Lock()
    barrier = threading.Barrier(workers + 1)
    pc = time.perf_counter
    start = [0.0]

    def worker(i: int) -> None:
        try:
            barrier.wait()
            while not stopped[0]:
                try:
                    one(i)
                except Exception as exc:
                    if not tolerate:
                        raise
                    with note:
                        tally.errors += 1
                        tally.first_error = tally.first_error or f"{type(exc).__name__}: {exc}"
                        if tally.timeline is not None:
                            tally.timeline.append((pc(), False))
                    time.sleep(ERROR_PAUSE)
                    continue
                if not stopped[0]:
                    counts[i] += 1
                    if tally.timeline is not None:
                        tally.timeline.append((pc(), True))
        except BaseException as exc:
            failures.append(exc)
            stopped[0] = True

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(workers)]
    for thread in threads:
        thread.start()
    barrier.wait()
    start[0] = pc()
    time.sleep(duration)
    stopped[0] = True
    tally.elapsed = pc() - start[0]
    deadline = pc() + HANG_GRACE
    for thread in threads:
        thread.join(max(0.0, deadline - pc()))
    alive = sum(thread.is_alive() for thread in threads)
    if alive:
        raise RuntimeError(f"{alive} of {workers} workers hung (ops done: {sum(counts)})")
    if failures:
        raise failures[0]
    return tally


def thread_contention(build: SyncBuild, shape: Shape) -> Callable[[Env], Figures]:
    """A contender's run on threads: build, warm up, measure, close."""

    def measure(env: Env) -> Figures:
        waits: list[float] = []
        with build(env, waits.append, shape) as one:
            drive_threads(one, shape.workers, env.sizes.warmup)
            waits.clear()
            gc.collect()
            cpu = time.process_time()
            tally = drive_threads(one, shape.workers, env.sizes.duration)
            tally.cpu = time.process_time() - cpu
            return contention_figures(waits, tally)

    return measure


# ---------------------------------------------------------------------- builders' helpers


def time_checkouts(pool: Any, record: Record, *, coroutine: bool = False) -> None:
    """Wrap ``pool.get_connection`` (on the instance) to ``record`` its wait: the checkout of a
    pool that a client calls inside each command (redis-py's), which a caller cannot time from
    outside. ``coroutine``: the pool's ``get_connection`` is async (``redis.asyncio``'s)."""
    inner = pool.get_connection
    pc = time.perf_counter
    if coroutine:

        async def get_connection_async(*args: Any, **kwargs: Any) -> Any:
            t = pc()
            conn = await inner(*args, **kwargs)
            record(pc() - t)
            return conn

        pool.get_connection = get_connection_async
    else:

        def get_connection(*args: Any, **kwargs: Any) -> Any:
            t = pc()
            conn = inner(*args, **kwargs)
            record(pc() - t)
            return conn

        pool.get_connection = get_connection


async def gather_all(make: Callable[[], Awaitable[Any]], count: int) -> list[Any]:
    """``count`` results of ``make()``, made concurrently (a floor's connections)."""
    return list(await asyncio.gather(*(make() for _ in range(count))))
