"""The pool's own path in SQLAlchemy's async engine, without a database: SQLAlchemy's
``AsyncAdaptedQueuePool`` as shipped, the same on the fair queue of the peers benchmark's "fair
queue" rows (``peerbench.sa_fair``), and poolkit's drop-in, in turns in one process; with
``--threads``, SQLAlchemy's ``QueuePool`` and poolkit's drop-in on threads.

The peers benchmark's SQLAlchemy async rows spend 10 % or less of the client's CPU in the
pool, under the engine, the driver and the event loop: a difference in the pool is lost in
their noise. Here the DBAPI connections do nothing (``rollback`` and ``close`` return at once)
and each task holds its connection over ``--hold`` turns of the event loop, so what is measured
is the pool's checkout and check-in as SQLAlchemy's async engine makes them: its connection
records and proxies, its reset, its greenlet bridge, and the pool's queue under contention::

    python benchmarks/sa_pool_path.py                    # 50 tasks on 10 connections, 8 rounds
    python benchmarks/sa_pool_path.py --tasks 10            # as many tasks as connections
    python benchmarks/sa_pool_path.py --threads --tasks 16 --size 8     # QueuePool, H3's shape

On threads a worker holds its connection over ``--hold`` calls of ``time.sleep(0)`` (each lets
the GIL go, as a query's I/O does), and the CPU time is the process's: the pools' code and the
thread switches their queues cause, which on a GIL-bound process are most of what a fair queue
costs.

Each round runs the three pools one after the other (the order reversed every other round),
each for ``--seconds``; reported, per pool, the medians over the rounds of its operations a
second and of the process's CPU time per operation, and per round the ratio of each pool's CPU
per operation to SQLAlchemy's as shipped (median and range).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # (run as a script from anywhere)

from sqlalchemy.pool import AsyncAdaptedQueuePool, QueuePool
from sqlalchemy.util.concurrency import await_, greenlet_spawn

from floors import NullConn  # (close and rollback, what SQLAlchemy's pool calls, do nothing)
from peerbench.sa_fair import FairAsyncAdaptedQueuePool
from poolkit.backends import sqlalchemy as dropin

#: label -> pool class, in the order of a round
POOLS: dict[str, Any] = {
    "SQLAlchemy AsyncAdaptedQueuePool (as shipped)": AsyncAdaptedQueuePool,
    "SQLAlchemy AsyncAdaptedQueuePool (fair queue)": FairAsyncAdaptedQueuePool,
    "poolkit.backends.sqlalchemy.AsyncAdaptedQueuePool": dropin.AsyncAdaptedQueuePool,
}
REFERENCE = "SQLAlchemy AsyncAdaptedQueuePool (as shipped)"
#: ``--threads``: the same, on threads
THREAD_POOLS: dict[str, Any] = {
    "SQLAlchemy QueuePool (as shipped)": QueuePool,
    "poolkit.backends.sqlalchemy.QueuePool": dropin.QueuePool,
}
THREAD_REFERENCE = "SQLAlchemy QueuePool (as shipped)"


async def drive(pool_class: Any, tasks: int, size: int, hold: int, seconds: float
                ) -> tuple[float, float]:  # fmt: skip
    """``tasks`` tasks checking out and in on a pool of ``size`` for ``seconds`` (after a tenth
    as long of warm-up): operations a second, CPU seconds an operation."""
    pool = pool_class(NullConn, pool_size=size, max_overflow=0, timeout=30)
    done = 0
    stop = False

    def one() -> None:  # (in SQLAlchemy's greenlet, as an engine's connect() and close())
        record = pool.connect()
        for _ in range(hold):
            await_(asyncio.sleep(0))
        record.close()

    async def worker() -> None:
        nonlocal done
        while not stop:
            await greenlet_spawn(one)
            done += 1

    workers = [asyncio.create_task(worker()) for _ in range(tasks)]
    try:
        await asyncio.sleep(seconds / 10)
        done = 0
        started, cpu = time.perf_counter(), time.process_time()
        await asyncio.sleep(seconds)
        ops, elapsed, spent = done, time.perf_counter() - started, time.process_time() - cpu
    finally:
        stop = True
        await asyncio.gather(*workers)
        await greenlet_spawn(pool.dispose)
    if not ops:
        raise RuntimeError(f"{pool_class.__name__}: no operation in {seconds:g} s")
    return ops / elapsed, spent / ops


def drive_threads(pool_class: Any, threads: int, size: int, hold: int, seconds: float
                  ) -> tuple[float, float]:  # fmt: skip
    """``threads`` threads checking out and in on a pool of ``size`` for ``seconds`` (after a
    tenth as long of warm-up): operations a second, CPU seconds an operation."""
    pool = pool_class(NullConn, pool_size=size, max_overflow=0, timeout=30)
    counts = [0] * threads
    stop = threading.Event()

    def worker(i: int) -> None:
        while not stop.is_set():
            record = pool.connect()
            for _ in range(hold):
                time.sleep(0)
            record.close()
            counts[i] += 1

    workers = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
    for thread in workers:
        thread.start()
    try:
        time.sleep(seconds / 10)
        before = sum(counts)
        started, cpu = time.perf_counter(), time.process_time()
        time.sleep(seconds)
        ops = sum(counts) - before
        elapsed, spent = time.perf_counter() - started, time.process_time() - cpu
    finally:
        stop.set()
        for thread in workers:
            thread.join()
        pool.dispose()
    if not ops:
        raise RuntimeError(f"{pool_class.__name__}: no operation in {seconds:g} s")
    return ops / elapsed, spent / ops


def turns(labels: list[str], rounds: int) -> Iterator[str]:
    """Each label once a round, the order reversed every other round."""
    for r in range(rounds):
        yield from labels if r % 2 == 0 else labels[::-1]


async def rounds(args: argparse.Namespace) -> dict[str, list[tuple[float, float]]]:
    results: dict[str, list[tuple[float, float]]] = {label: [] for label in POOLS}
    for label in turns(list(POOLS), args.rounds):
        results[label].append(
            await drive(POOLS[label], args.tasks, args.size, args.hold, args.seconds)
        )
    return results


def thread_rounds(args: argparse.Namespace) -> dict[str, list[tuple[float, float]]]:
    results: dict[str, list[tuple[float, float]]] = {label: [] for label in THREAD_POOLS}
    for label in turns(list(THREAD_POOLS), args.rounds):
        results[label].append(
            drive_threads(THREAD_POOLS[label], args.tasks, args.size, args.hold, args.seconds)
        )
    return results


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--tasks", type=int, default=50, help="tasks, or threads (50)")
    ap.add_argument("--threads", action="store_true", help="QueuePool and its drop-in, on threads")
    ap.add_argument("--size", type=int, default=10, help="pool_size, no overflow (10)")
    ap.add_argument(
        "--hold",
        type=int,
        default=1,
        help="event loop turns (threads: sleep(0) calls) a connection is held, at least 1: a "
        "task that never yields would keep the loop (1)",
    )
    ap.add_argument("--rounds", type=int, default=8, help="rounds of the three pools (8)")
    ap.add_argument("--seconds", type=float, default=1.0, help="seconds a pool a round (1.0)")
    args = ap.parse_args(argv)
    if args.hold < 1:
        ap.error(f"--hold must be at least 1, got {args.hold}")
    if args.threads:
        results, reference_label = thread_rounds(args), THREAD_REFERENCE
        print(f"{args.tasks} threads on {args.size} null connections, held {args.hold} "
              f"sleep(0) calls; {args.rounds} rounds of {args.seconds:g} s a pool")  # fmt: skip
    else:
        results, reference_label = asyncio.run(rounds(args)), REFERENCE
        print(f"{args.tasks} tasks on {args.size} null connections, held {args.hold} loop turns; "
              f"{args.rounds} rounds of {args.seconds:g} s a pool")  # fmt: skip
    reference = [cpu for _, cpu in results[reference_label]]
    for label, figures in results.items():
        rate = statistics.median(ops for ops, _ in figures)
        cpu = statistics.median(c for _, c in figures)
        ratios = [c / ref for (_, c), ref in zip(figures, reference, strict=True)]
        print(f"  {label:52} {rate:10,.0f} ops/s  {cpu * 1e6:7.2f} µs/op  CPU / as shipped "
              f"{statistics.median(ratios):.3f} ({min(ratios):.3f}-{max(ratios):.3f})")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
