"""The workloads over null connections (no server: the pool's own cost), on both front ends.

* W1, uncontended: one task (thread) checks a connection out of a pool of 10 and gives it back,
  ``w1_cycles`` times, in each form a user writes: ``async with pool.connection()``,
  ``checkout()`` + ``lease.release()``, ``checkout()`` + ``await pool.checkin(lease)`` (threads:
  ``with pool.connection()``, ``checkout()`` + ``release()``, + ``pool.checkin(lease)``);
  SQLAlchemy's ``QueuePool`` (``connect()`` + ``close()``) on threads. ns per cycle.
* W2, contended: 1,000 tasks (32 threads) on a pool of 10, each operation check out ->
  ``await asyncio.sleep(0)`` (``time.sleep(0)``: give up the GIL) -> give back, for a time;
  dedicated "connections" is the same loop with no pool at all (what the loop itself costs).
* W5, scaling: W1's ``checkout()`` + ``release()`` with 10 and with 10,000 idle connections in
  the pool; and (asyncio) 1,000 and 100,000 tasks arriving at once at a pool of 10, each one
  operation: ns per operation. The large case's ratio is to the same pool's small case.
"""

from __future__ import annotations

import asyncio
import gc
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

from floors import (
    NAN,
    AsyncFloor,
    NullConn,
    ThreadFloor,
    null_async_pool,
    null_thread_pool,
    pctl,
)

from .core import AS_SHIPPED, Column, Contender, Env, Figures, Workload
from .drive import (
    AsyncOne,
    Record,
    Shape,
    SyncOne,
    async_contention,
    thread_contention,
)
from .pg_rows import DEDICATED, FLOOR

POOL_SIZE = 10
pc = time.perf_counter
CYCLE_COLUMNS = (Column("ns_per_cycle", "ns/cycle"),)
WAIT_COLUMNS = (
    Column("ops_per_s", "ops/s"),
    Column("wait_p50_us", "wait p50 µs", 1),
    Column("wait_p99_us", "wait p99 µs", 1),
    Column("wait_max_us", "wait max µs"),
    Column("ops_worker_min", "ops/worker min"),
    Column("ops_worker_max", "ops/worker max"),
)


# ---------------------------------------------------------------------- W1: one task, cycles

AsyncCycles = Callable[
    [int, int], Coroutine[Any, Any, float]
]  # (pool size, cycles) -> ns per cycle
SyncCycles = Callable[[int, int], float]


async def floor_cycles_async(size: int, cycles: int) -> float:
    floor = AsyncFloor(NullConn() for _ in range(size))
    acquire, release = floor.acquire, floor.release
    gc.collect()
    t0 = time.perf_counter_ns()
    for _ in range(cycles):
        conn = await acquire()
        release(conn)
    return (time.perf_counter_ns() - t0) / cycles


def poolkit_cycles_async(form: str) -> AsyncCycles:
    """poolkit's ``AsyncPool`` used in ``form``: ``connection``, ``release`` or ``checkin``."""

    async def cycles_of(size: int, cycles: int) -> float:
        pool = await null_async_pool(size)
        try:
            gc.collect()
            t0 = time.perf_counter_ns()
            if form == "connection":
                for _ in range(cycles):
                    async with pool.connection():
                        pass
            elif form == "release":
                for _ in range(cycles):
                    lease = await pool.checkout()
                    lease.release()
            else:
                for _ in range(cycles):
                    lease = await pool.checkout()
                    await pool.checkin(lease)
            return (time.perf_counter_ns() - t0) / cycles
        finally:
            await pool.close()

    return cycles_of


def floor_cycles_threads(size: int, cycles: int) -> float:
    floor = ThreadFloor(NullConn() for _ in range(size))
    acquire, release = floor.acquire, floor.release
    gc.collect()
    t0 = time.perf_counter_ns()
    for _ in range(cycles):
        conn = acquire()
        release(conn)
    return (time.perf_counter_ns() - t0) / cycles


def poolkit_cycles_threads(form: str) -> SyncCycles:
    def cycles_of(size: int, cycles: int) -> float:
        pool = null_thread_pool(size)
        try:
            gc.collect()
            t0 = time.perf_counter_ns()
            if form == "connection":
                for _ in range(cycles):
                    with pool.connection():
                        pass
            elif form == "release":
                for _ in range(cycles):
                    lease = pool.checkout()
                    lease.release()
            else:
                for _ in range(cycles):
                    lease = pool.checkout()
                    pool.checkin(lease)
            return (time.perf_counter_ns() - t0) / cycles
        finally:
            pool.close()

    return cycles_of


def sqlalchemy_queue_pool(size: int) -> Any:
    """SQLAlchemy's ``QueuePool`` of ``size`` null connections, all made (its defaults
    otherwise: rollback at check-in, which a null connection takes as a no-op)."""
    from sqlalchemy.pool import QueuePool

    pool = QueuePool(NullConn, pool_size=size, max_overflow=0)  # type: ignore[arg-type]
    held = [pool.connect() for _ in range(size)]
    for conn in held:
        conn.close()
    return pool


def sqlalchemy_cycles(size: int, cycles: int) -> float:
    pool = sqlalchemy_queue_pool(size)
    try:
        gc.collect()
        t0 = time.perf_counter_ns()
        for _ in range(cycles):
            conn = pool.connect()
            conn.close()
        return (time.perf_counter_ns() - t0) / cycles
    finally:
        pool.dispose()


def _cycles_async(measure: AsyncCycles, size: int, cycles: int) -> Callable[[Env], Figures]:
    def run(env: Env) -> Figures:
        n = cycles or env.sizes.w1_cycles
        return {"ns_per_cycle": asyncio.run(measure(size, n))}

    return run


def _cycles_threads(measure: SyncCycles, size: int, cycles: int) -> Callable[[Env], Figures]:
    def run(env: Env) -> Figures:
        return {"ns_per_cycle": measure(size, cycles or env.sizes.w1_cycles)}

    return run


def w1_async() -> Workload:
    def c(name: str, role: Any, measure: AsyncCycles, note: str = "") -> Contender:
        variant = AS_SHIPPED if role == "poolkit" else ""
        return Contender(name, role, variant, _cycles_async(measure, POOL_SIZE, 0), note=note)

    return Workload(
        key="W1-async",
        group="W1",
        title=f"one task, pool of {POOL_SIZE} null connections, uncontended cycle (asyncio)",
        metric="ns_per_cycle",
        higher=False,
        floor=FLOOR,
        reference="poolkit: checkout() + lease.release() (as shipped)",
        columns=CYCLE_COLUMNS,
        contenders=(
            c("poolkit: async with pool.connection()", "poolkit",
              poolkit_cycles_async("connection")),
            c("poolkit: checkout() + lease.release()", "poolkit",
              poolkit_cycles_async("release")),
            c("poolkit: checkout() + await pool.checkin(lease)", "poolkit",
              poolkit_cycles_async("checkin")),
            c(FLOOR, "floor", floor_cycles_async, note="a deque pop/append and a future"),
        ),
    )  # fmt: skip


def w1_threads() -> Workload:
    def c(name: str, role: Any, measure: SyncCycles, needs: tuple[str, ...] = (),
          note: str = "") -> Contender:  # fmt: skip
        variant = AS_SHIPPED if role in ("poolkit", "peer") else ""
        run = _cycles_threads(measure, POOL_SIZE, 0)
        return Contender(name, role, variant, run, needs, note=note)

    return Workload(
        key="W1-threads",
        group="W1",
        title=f"one thread, pool of {POOL_SIZE} null connections, uncontended cycle (threads)",
        metric="ns_per_cycle",
        higher=False,
        floor=FLOOR,
        reference="poolkit: checkout() + lease.release() (as shipped)",
        columns=CYCLE_COLUMNS,
        contenders=(
            c("poolkit: with pool.connection()", "poolkit",
              poolkit_cycles_threads("connection")),
            c("poolkit: checkout() + lease.release()", "poolkit",
              poolkit_cycles_threads("release")),
            c("poolkit: checkout() + pool.checkin(lease)", "poolkit",
              poolkit_cycles_threads("checkin")),
            c("SQLAlchemy QueuePool: connect() + close()", "peer", sqlalchemy_cycles,
              ("sqlalchemy",), "rollback at check-in (a no-op here)"),
            c(FLOOR, "floor", floor_cycles_threads, note="a deque pop/append under a lock"),
        ),
    )  # fmt: skip


# ---------------------------------------------------------------------- W2: contention


@asynccontextmanager
async def floor_async(env: Env, record: Record, shape: Shape) -> AsyncIterator[AsyncOne]:
    floor = AsyncFloor(NullConn() for _ in range(shape.size))
    acquire, release, sleep = floor.acquire, floor.release, asyncio.sleep

    async def one(i: int) -> None:
        t = pc()
        conn = await acquire()
        record(pc() - t)
        await sleep(0)
        release(conn)

    yield one


def poolkit_async(form: str) -> Any:
    @asynccontextmanager
    async def build(env: Env, record: Record, shape: Shape) -> AsyncIterator[AsyncOne]:
        pool = await null_async_pool(shape.size)
        sleep = asyncio.sleep
        if form == "connection":

            async def one(i: int) -> None:
                t = pc()
                async with pool.connection():
                    record(pc() - t)
                    await sleep(0)

        else:

            async def one(i: int) -> None:
                t = pc()
                lease = await pool.checkout()
                record(pc() - t)
                await sleep(0)
                lease.release()

        try:
            yield one
        finally:
            await pool.close()

    return build


@asynccontextmanager
async def no_pool_async(env: Env, record: Record, shape: Shape) -> AsyncIterator[AsyncOne]:
    sleep = asyncio.sleep

    async def one(i: int) -> None:
        record(0.0)
        await sleep(0)

    yield one


@contextmanager
def floor_threads(env: Env, record: Record, shape: Shape) -> Iterator[SyncOne]:
    floor = ThreadFloor(NullConn() for _ in range(shape.size))
    acquire, release, sleep = floor.acquire, floor.release, time.sleep

    def one(i: int) -> None:
        t = pc()
        conn = acquire()
        record(pc() - t)
        sleep(0)
        release(conn)

    yield one


def poolkit_threads(form: str) -> Any:
    @contextmanager
    def build(env: Env, record: Record, shape: Shape) -> Iterator[SyncOne]:
        pool = null_thread_pool(shape.size)
        sleep = time.sleep
        if form == "connection":

            def one(i: int) -> None:
                t = pc()
                with pool.connection():
                    record(pc() - t)
                    sleep(0)

        else:

            def one(i: int) -> None:
                t = pc()
                lease = pool.checkout()
                record(pc() - t)
                sleep(0)
                lease.release()

        try:
            yield one
        finally:
            pool.close()

    return build


@contextmanager
def sqlalchemy_threads(env: Env, record: Record, shape: Shape) -> Iterator[SyncOne]:
    pool = sqlalchemy_queue_pool(shape.size)
    sleep = time.sleep

    def one(i: int) -> None:
        t = pc()
        conn = pool.connect()
        record(pc() - t)
        sleep(0)
        conn.close()

    try:
        yield one
    finally:
        pool.dispose()


@contextmanager
def no_pool_threads(env: Env, record: Record, shape: Shape) -> Iterator[SyncOne]:
    sleep = time.sleep

    def one(i: int) -> None:
        record(0.0)
        sleep(0)

    yield one


def w2_async(sizes_tasks: int) -> Workload:
    shape = Shape(sizes_tasks, POOL_SIZE)

    def c(name: str, role: Any, build: Any, note: str = "") -> Contender:
        variant = AS_SHIPPED if role == "poolkit" else ""
        return Contender(name, role, variant, async_contention(build, shape), note=note)

    return Workload(
        key="W2-async",
        group="W2",
        title=f"{sizes_tasks:,} tasks, pool of {POOL_SIZE} null connections (asyncio)",
        metric="ops_per_s",
        higher=True,
        floor=FLOOR,
        columns=WAIT_COLUMNS,
        note="Each operation: check out, `await asyncio.sleep(0)`, give back.",
        contenders=(
            c("poolkit: async with pool.connection()", "poolkit", poolkit_async("connection")),
            c("poolkit: checkout() + lease.release()", "poolkit", poolkit_async("release")),
            c(FLOOR, "floor", floor_async),
            c(DEDICATED, "dedicated", no_pool_async, "no pool: the loop alone"),
        ),
    )


def w2_threads(threads: int) -> Workload:
    shape = Shape(threads, POOL_SIZE)

    def c(name: str, role: Any, build: Any, needs: tuple[str, ...] = (),
          note: str = "") -> Contender:  # fmt: skip
        variant = AS_SHIPPED if role in ("poolkit", "peer") else ""
        return Contender(name, role, variant, thread_contention(build, shape), needs, note=note)

    return Workload(
        key="W2-threads",
        group="W2",
        title=f"{threads} threads, pool of {POOL_SIZE} null connections (threads)",
        metric="ops_per_s",
        higher=True,
        floor=FLOOR,
        columns=WAIT_COLUMNS,
        note="Each operation: check out, `time.sleep(0)` (the GIL given up), give back.",
        contenders=(
            c("poolkit: with pool.connection()", "poolkit", poolkit_threads("connection")),
            c("poolkit: checkout() + lease.release()", "poolkit", poolkit_threads("release")),
            c("SQLAlchemy QueuePool: connect() + close()", "peer", sqlalchemy_threads,
              ("sqlalchemy",)),
            c(FLOOR, "floor", floor_threads),
            c(DEDICATED, "dedicated", no_pool_threads, note="no pool: the loop alone"),
        ),
    )  # fmt: skip


# ---------------------------------------------------------------------- W5: scaling


def w5_idle_async(small: int, large: int, cycles: int) -> Workload:
    def c(name: str, role: Any, measure: AsyncCycles, size: int, small_label: str | None,
          floor: str) -> Contender:  # fmt: skip
        variant = AS_SHIPPED if role == "poolkit" else ""
        run = _cycles_async(measure, size, cycles)
        return Contender(f"{name} @ {size:,} idle", role, variant, run, floor=floor,
                         versus=small_label)  # fmt: skip

    release = poolkit_cycles_async("release")
    pk, fl = "poolkit: checkout() + lease.release()", FLOOR
    return Workload(
        key="W5-idle-async",
        group="W5",
        title=f"{small:,} vs {large:,} idle connections, uncontended cycle (asyncio)",
        metric="ns_per_cycle",
        higher=False,
        columns=CYCLE_COLUMNS,
        note="The large pool's reference is the same pool with the small count.",
        contenders=(
            c(pk, "poolkit", release, small, None, f"{fl} @ {small:,} idle"),
            c(pk, "poolkit", release, large, f"{pk} @ {small:,} idle ({AS_SHIPPED})",
              f"{fl} @ {large:,} idle"),
            c(fl, "floor", floor_cycles_async, small, None, f"{fl} @ {small:,} idle"),
            c(fl, "floor", floor_cycles_async, large, f"{fl} @ {small:,} idle",
              f"{fl} @ {large:,} idle"),
        ),
    )  # fmt: skip


def w5_idle_threads(small: int, large: int, cycles: int) -> Workload:
    def c(name: str, role: Any, measure: SyncCycles, size: int, small_label: str | None,
          floor: str, needs: tuple[str, ...] = ()) -> Contender:  # fmt: skip
        variant = AS_SHIPPED if role in ("poolkit", "peer") else ""
        return Contender(f"{name} @ {size:,} idle", role, variant,
                         _cycles_threads(measure, size, cycles), needs, floor=floor,
                         versus=small_label)  # fmt: skip

    release = poolkit_cycles_threads("release")
    pk, sa, fl = "poolkit: checkout() + lease.release()", "SQLAlchemy QueuePool", FLOOR
    return Workload(
        key="W5-idle-threads",
        group="W5",
        title=f"{small:,} vs {large:,} idle connections, uncontended cycle (threads)",
        metric="ns_per_cycle",
        higher=False,
        columns=CYCLE_COLUMNS,
        note="The large pool's reference is the same pool with the small count.",
        contenders=(
            c(pk, "poolkit", release, small, None, f"{fl} @ {small:,} idle"),
            c(pk, "poolkit", release, large, f"{pk} @ {small:,} idle ({AS_SHIPPED})",
              f"{fl} @ {large:,} idle"),
            c(sa, "peer", sqlalchemy_cycles, small, None, f"{fl} @ {small:,} idle",
              ("sqlalchemy",)),
            c(sa, "peer", sqlalchemy_cycles, large, f"{sa} @ {small:,} idle ({AS_SHIPPED})",
              f"{fl} @ {large:,} idle", ("sqlalchemy",)),
            c(fl, "floor", floor_cycles_threads, small, None, f"{fl} @ {small:,} idle"),
            c(fl, "floor", floor_cycles_threads, large, f"{fl} @ {small:,} idle",
              f"{fl} @ {large:,} idle"),
        ),
    )  # fmt: skip


Pair = tuple[Callable[[], Awaitable[Any]], Callable[[Any], None], Callable[[], Awaitable[None]]]


async def _floor_pair() -> Pair:
    floor = AsyncFloor(NullConn() for _ in range(POOL_SIZE))

    async def close() -> None:
        pass

    return floor.acquire, floor.release, close


async def _poolkit_pair() -> Pair:
    pool = await null_async_pool(POOL_SIZE)
    return pool.checkout, _release, pool.close


def _release(lease: Any) -> None:
    lease.release()


async def waiting(make: Callable[[], Awaitable[Pair]], tasks: int) -> Figures:
    """``tasks`` tasks at once, each one operation (check out, ``sleep(0)``, give back)."""
    acquire, release, close = await make()
    waits: list[float] = []
    sleep = asyncio.sleep

    async def one() -> None:
        t = pc()
        conn = await acquire()
        waits.append(pc() - t)
        await sleep(0)
        release(conn)

    try:
        gc.collect()
        t0 = pc()
        await asyncio.gather(*(one() for _ in range(tasks)))
        elapsed = pc() - t0
    finally:
        await close()
    waits.sort()
    return {
        "ns_per_op": elapsed / tasks * 1e9,
        "wait_p50_us": pctl(waits, 0.5) * 1e6,
        "wait_p99_us": pctl(waits, 0.99) * 1e6,
        "wait_max_us": waits[-1] * 1e6 if waits else NAN,
    }


def w5_waiting(small: int, large: int) -> Workload:
    def c(name: str, role: Any, make: Callable[[], Awaitable[Pair]], tasks: int,
          small_label: str | None, floor: str) -> Contender:  # fmt: skip
        variant = AS_SHIPPED if role == "poolkit" else ""

        def run(env: Env) -> Figures:
            return asyncio.run(waiting(make, tasks))

        return Contender(f"{name} @ {tasks:,} tasks", role, variant, run, floor=floor,
                         versus=small_label)  # fmt: skip

    pk, fl = "poolkit: checkout() + lease.release()", FLOOR
    return Workload(
        key="W5-waiting",
        group="W5",
        title=f"{small:,} vs {large:,} tasks at once on a pool of {POOL_SIZE} (asyncio)",
        metric="ns_per_op",
        higher=False,
        columns=(
            Column("ns_per_op", "ns/op"),
            Column("wait_p50_us", "wait p50 µs"),
            Column("wait_p99_us", "wait p99 µs"),
            Column("wait_max_us", "wait max µs"),
        ),
        note="Each task: one operation (check out, `await asyncio.sleep(0)`, give back). The "
        "large count's reference is the same pool with the small count.",
        contenders=(
            c(pk, "poolkit", _poolkit_pair, small, None, f"{fl} @ {small:,} tasks"),
            c(pk, "poolkit", _poolkit_pair, large, f"{pk} @ {small:,} tasks ({AS_SHIPPED})",
              f"{fl} @ {large:,} tasks"),
            c(fl, "floor", _floor_pair, small, None, f"{fl} @ {small:,} tasks"),
            c(fl, "floor", _floor_pair, large, f"{fl} @ {small:,} tasks",
              f"{fl} @ {large:,} tasks"),
        ),
    )  # fmt: skip
