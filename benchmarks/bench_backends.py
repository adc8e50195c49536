"""Benchmark the PostgreSQL backends against the drivers' own pools on a real server.

The new user's workload of issue 16: ``--ops`` (10,000) ``SELECT 1`` from ``--workers`` (50)
tasks or threads sharing a pool of ``--size`` (10) connections.

* asyncpg: ``poolkit.backends.asyncpg.create_pool`` (full reset on check-in, ``check="closed"``)
  against ``asyncpg.create_pool`` (which resets the same way), 50 asyncio tasks.
* psycopg: ``poolkit.backends.psycopg.create_pool`` with ``connection(pool)`` (commit on success,
  full reset on check-in) against ``psycopg_pool.ConnectionPool.connection()``, 50 threads.

Each repeat makes fresh pools, warms them (every connection made) and times the workload; the
two pools of a backend alternate which goes first. Printed: the median ops/s of each and the
ratio of the medians (poolkit / the driver's pool). A measurement, not a test.

    python benchmarks/bench_backends.py [--dsn DSN] [--repeat 5] [--ops 10000] [--workers 50]
                                        [--size 10] [--only asyncpg|psycopg]

If the pools do not run ``poolkit.Hooks`` yet (checked at start with a null connection),
poolkit's figures are without the reset and the check, and a caveat says so; a third run per
repeat then calls the backend's reset in the caller's block, as an estimate of what the hooks
will cost.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import sys
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import poolkit

DSN = os.environ.get("POOLKIT_TEST_PG_DSN", "postgresql://postgres@127.0.0.1:5432/test")
APP = "poolkit-bench"


class NullConn:
    def close(self) -> None:
        pass


def hooks_honoured() -> tuple[bool, bool]:
    """Whether ``AsyncPool`` and ``Pool`` run a ``Hooks.reset`` on check-in (a null connection,
    one checkout each)."""
    ran: list[str] = []

    async def areset(conn: Any) -> None:
        ran.append("async")

    async def aconnect(ctx: poolkit.ConnectContext) -> NullConn:
        return NullConn()

    async def amain() -> None:
        options = poolkit.PoolOptions(hooks=poolkit.Hooks(reset=areset))
        async with poolkit.AsyncPool(aconnect, options=options) as pool:
            async with pool.connection():
                pass
            for _ in range(10):  # (a reset may run in a task of the pool's)
                await asyncio.sleep(0)

    asyncio.run(amain())
    options = poolkit.PoolOptions(hooks=poolkit.Hooks(reset=lambda conn: ran.append("threads")))
    with poolkit.Pool(lambda ctx: NullConn(), options=options) as pool:
        with pool.connection():
            pass
        with pool.connection():  # (the second checkout waits for a reset run in the pool)
            pass
    return "async" in ran, "threads" in ran


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
    dsn: str, args: argparse.Namespace, poolkit_first: bool, by_hand: bool
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

    async def ours_by_hand() -> float:
        """The reset the hooks will run, called in the caller's block: an estimate now."""
        options = poolkit.PoolOptions(max_size=args.size)
        pool = await pk_asyncpg.create_pool(dsn, options=options, application_name=APP)

        @contextlib.asynccontextmanager
        async def acquire() -> AsyncIterator[Any]:
            async with pool.connection() as conn:
                yield conn
                await pk_asyncpg.reset(conn)

        try:
            await drive_async(acquire, select_one, args.size * 20, args.workers)
            return await drive_async(acquire, select_one, args.ops, args.workers)
        finally:
            await pool.close()

    runs = {"poolkit": ours, "asyncpg": theirs}
    if by_hand:
        runs["by hand"] = ours_by_hand
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


def psycopg_round(
    dsn: str, args: argparse.Namespace, poolkit_first: bool, by_hand: bool
) -> dict[str, float]:
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

    def ours() -> float:
        options = poolkit.PoolOptions(max_size=args.size)
        with pk.create_pool(dsn, options=options, application_name=APP) as pool:

            def acquire() -> Any:
                return pk.connection(pool)

            drive_threads(acquire, select_one, args.size * 20, args.workers)
            return drive_threads(acquire, select_one, args.ops, args.workers)

    def ours_by_hand() -> float:
        """The reset the hooks will run, called in the caller's block: an estimate now."""
        options = poolkit.PoolOptions(max_size=args.size)
        reset = pk.make_reset(pk.DEFAULT_RESET_QUERY)
        with pk.create_pool(dsn, options=options, application_name=APP) as pool:

            @contextlib.contextmanager
            def acquire() -> Iterator[Any]:
                with pool.connection() as conn:
                    yield conn
                    conn.commit()
                    reset(conn)

            drive_threads(acquire, select_one, args.size * 20, args.workers)
            return drive_threads(acquire, select_one, args.ops, args.workers)

    runs = {"poolkit": ours, "psycopg_pool": theirs}
    if by_hand:
        runs["by hand"] = ours_by_hand
    names = list(runs) if poolkit_first else list(reversed(runs))
    return {name: runs[name]() for name in names}


# ---------------------------------------------------------------------- main


def report(title: str, rounds: list[dict[str, float]], other: str, honoured: bool) -> None:
    ours = statistics.median(r["poolkit"] for r in rounds)
    theirs = statistics.median(r[other] for r in rounds)
    print(f"{title}")
    print(f"  poolkit       {ours:10,.0f} ops/s (median of {len(rounds)})")
    print(f"  {other:<13} {theirs:10,.0f} ops/s")
    print(f"  ratio poolkit / {other}: {ours / theirs:.2f}")
    if not honoured:
        by_hand = statistics.median(r["by hand"] for r in rounds)
        print(
            f"  CAVEAT: {'AsyncPool' if other == 'asyncpg' else 'Pool'} does not run Hooks yet: "
            "poolkit's figure is without the reset and the check.\n"
            f"  With the reset called in the block (an estimate): {by_hand:,.0f} ops/s, "
            f"ratio {by_hand / theirs:.2f}"
        )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--dsn", default=DSN)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--ops", type=int, default=10_000)
    ap.add_argument("--workers", type=int, default=50)
    ap.add_argument("--size", type=int, default=10)
    ap.add_argument("--only", choices=("asyncpg", "psycopg"))
    args = ap.parse_args(argv)

    honoured_async, honoured_threads = hooks_honoured()
    print(
        f"{args.ops:,} x SELECT 1, {args.workers} workers, pool of {args.size}, "
        f"{args.repeat} interleaved repeats, {args.dsn}"
    )
    if args.only != "psycopg":
        rounds = [
            asyncio.run(asyncpg_round(args.dsn, args, r % 2 == 0, not honoured_async))
            for r in range(args.repeat)
        ]
        report(f"asyncpg, {args.workers} tasks", rounds, "asyncpg", honoured_async)
    if args.only != "asyncpg":
        rounds = [
            psycopg_round(args.dsn, args, r % 2 == 0, not honoured_threads)
            for r in range(args.repeat)
        ]
        report(f"psycopg, {args.workers} threads", rounds, "psycopg_pool", honoured_threads)
    return 0


if __name__ == "__main__":
    sys.exit(main())
