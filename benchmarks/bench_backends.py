"""Benchmark the PostgreSQL backends against the drivers' own pools on a real server.

The new user's workload of issue 16: ``--ops`` (10,000) ``SELECT 1`` from ``--workers`` (50)
tasks or threads sharing a pool of ``--size`` (10) connections.

* asyncpg: ``poolkit.backends.asyncpg.create_pool`` (full reset on check-in, ``check="closed"``)
  against ``asyncpg.create_pool`` (which resets the same way), 50 asyncio tasks.
* psycopg: ``poolkit.backends.psycopg.create_pool`` and ``pool.connection()`` (commit on
  success, full reset on check-in: rollback and ``RESET ALL``...), and the same with
  ``reset=False`` (roll back only: what psycopg_pool does), against
  ``psycopg_pool.ConnectionPool.connection()``, 50 threads.

Each repeat makes fresh pools, warms them (every connection made) and times the workload; the
pools of a backend alternate which goes first. Printed: the median ops/s of each and the ratio of
the medians (poolkit / the driver's pool). A measurement, not a test.

    python benchmarks/bench_backends.py [--dsn DSN] [--repeat 5] [--ops 10000] [--workers 50]
                                        [--size 10] [--only asyncpg|psycopg]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

import poolkit

DSN = os.environ.get("POOLKIT_TEST_PG_DSN", "postgresql://postgres@127.0.0.1:5432/test")
APP = "poolkit-bench"


# ---------------------------------------------------------------------- asyncpg


async def drive_async(
    acquire: Callable[[], Any], query: Callable[[Any], Awaitable[Any]], ops: int, workers: int
) -> float:
    """``ops`` queries from ``workers`` tasks; ops/s."""
    share = ops // workers

    async def worker() -> None:
        for _ in range(share):
            async with acquire() as conn:
                await query(conn)

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(workers)))
    return share * workers / (time.perf_counter() - start)


async def asyncpg_round(
    dsn: str, args: argparse.Namespace, poolkit_first: bool
) -> dict[str, float]:
    import asyncpg

    from poolkit.backends import asyncpg as pk_asyncpg

    async def select_one(conn: Any) -> None:
        assert await conn.fetchval("SELECT 1") == 1

    async def theirs() -> float:
        pool = await asyncpg.create_pool(
            dsn, min_size=args.size, max_size=args.size, server_settings={"application_name": APP}
        )
        try:
            await drive_async(pool.acquire, select_one, args.size * 20, args.workers)  # warm
            return await drive_async(pool.acquire, select_one, args.ops, args.workers)
        finally:
            await pool.close()

    async def ours() -> float:
        options = poolkit.PoolOptions(max_size=args.size)
        pool = await pk_asyncpg.create_pool(dsn, options=options, application_name=APP)
        try:
            await drive_async(pool.connection, select_one, args.size * 20, args.workers)
            return await drive_async(pool.connection, select_one, args.ops, args.workers)
        finally:
            await pool.close()

    runs = {"poolkit": ours, "asyncpg": theirs}
    names = list(runs) if poolkit_first else list(reversed(runs))
    return {name: await runs[name]() for name in names}


# ---------------------------------------------------------------------- psycopg


def drive_threads(
    acquire: Callable[[], Any], query: Callable[[Any], Any], ops: int, workers: int
) -> float:
    """``ops`` queries from ``workers`` threads; ops/s."""
    share = ops // workers
    go = threading.Barrier(workers + 1)

    def worker() -> None:
        go.wait()
        for _ in range(share):
            with acquire() as conn:
                query(conn)

    threads = [threading.Thread(target=worker) for _ in range(workers)]
    for t in threads:
        t.start()
    go.wait()
    start = time.perf_counter()
    for t in threads:
        t.join()
    return share * workers / (time.perf_counter() - start)


def psycopg_round(dsn: str, args: argparse.Namespace, poolkit_first: bool) -> dict[str, float]:
    import psycopg_pool

    from poolkit.backends import psycopg as pk

    def select_one(conn: Any) -> None:
        assert conn.execute("SELECT 1").fetchone() == (1,)

    def theirs() -> float:
        kwargs = {"application_name": APP}
        with psycopg_pool.ConnectionPool(
            dsn, min_size=args.size, max_size=args.size, kwargs=kwargs, open=True
        ) as pool:
            pool.wait()
            drive_threads(pool.connection, select_one, args.size * 20, args.workers)
            return drive_threads(pool.connection, select_one, args.ops, args.workers)

    def ours(reset: bool) -> float:
        options = poolkit.PoolOptions(max_size=args.size)
        with pk.create_pool(dsn, options=options, reset=reset, application_name=APP) as pool:
            drive_threads(pool.connection, select_one, args.size * 20, args.workers)
            return drive_threads(pool.connection, select_one, args.ops, args.workers)

    runs: dict[str, Callable[[], float]] = {
        "poolkit": lambda: ours(True),
        "poolkit, rollback only": lambda: ours(False),
        "psycopg_pool": theirs,
    }
    names = list(runs) if poolkit_first else list(reversed(runs))
    return {name: runs[name]() for name in names}


# ---------------------------------------------------------------------- main


def report(title: str, rounds: list[dict[str, float]], other: str) -> None:
    theirs = statistics.median(r[other] for r in rounds)
    print(f"{title}")
    for name in [n for n in rounds[0] if n != other] + [other]:
        ops = statistics.median(r[name] for r in rounds)
        ratio = "" if name == other else f"  ratio to {other}: {ops / theirs:.2f}"
        print(f"  {name:<24} {ops:10,.0f} ops/s (median of {len(rounds)}){ratio}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--dsn", default=DSN)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--ops", type=int, default=10_000)
    ap.add_argument("--workers", type=int, default=50)
    ap.add_argument("--size", type=int, default=10)
    ap.add_argument("--only", choices=("asyncpg", "psycopg"))
    args = ap.parse_args(argv)

    print(
        f"{args.ops:,} x SELECT 1, {args.workers} workers, pool of {args.size}, "
        f"{args.repeat} interleaved repeats, {args.dsn}"
    )
    if args.only != "psycopg":
        rounds = [
            asyncio.run(asyncpg_round(args.dsn, args, r % 2 == 0))
            for r in range(args.repeat)
        ]
        report(f"asyncpg, {args.workers} tasks", rounds, "asyncpg")
    if args.only != "asyncpg":
        rounds = [
            psycopg_round(args.dsn, args, r % 2 == 0)
            for r in range(args.repeat)
        ]
        report(f"psycopg, {args.workers} threads", rounds, "psycopg_pool")
    return 0


if __name__ == "__main__":
    sys.exit(main())
