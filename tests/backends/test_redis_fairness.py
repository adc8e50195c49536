"""Fairness of the drop-in ``BlockingConnectionPool`` against redis-py's own: many threads on few
connections, each running short commands through ``redis.Redis``.

``python tests/backends/test_redis_fairness.py [--threads 64] [--connections 4] [--seconds 5]``
prints the figures for both pools; the test runs the drop-in only and asserts generous bounds
(a 2-core machine shared with other work is noisy).
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pytest
import redis

from poolkit.backends.redis import BlockingConnectionPool

if TYPE_CHECKING:
    from services import RedisServer


@dataclass(frozen=True)
class Fairness:
    """What one run measured: per-command waits (seconds) and completed commands per thread."""

    pool: str
    waits: list[float]
    ops: list[int]

    @property
    def max_wait(self) -> float:
        return max(self.waits)

    @property
    def median_wait(self) -> float:
        return statistics.median(self.waits)

    @property
    def p99_wait(self) -> float:
        return statistics.quantiles(self.waits, n=100)[98]

    def line(self) -> str:
        ops = sorted(self.ops)
        return (
            f"{self.pool:>24}: {sum(ops)} ops; per-command wait median "
            f"{self.median_wait * 1e3:.2f} ms, p99 {self.p99_wait * 1e3:.1f} ms, "
            f"max {self.max_wait * 1e3:.1f} ms; ops per thread min {ops[0]}, "
            f"median {statistics.median(ops):.0f}, max {ops[-1]}"
        )


def measure(
    name: str, make_pool: Callable[[], Any], *, threads: int, seconds: float, key: str
) -> Fairness:
    """``threads`` threads run ``INCR key`` through ``redis.Redis(connection_pool=make_pool())``
    for ``seconds``; each command's time (waiting for a connection included) is recorded."""
    pool = make_pool()
    client = redis.Redis(connection_pool=pool)
    client.ping()
    waits: list[list[float]] = [[] for _ in range(threads)]
    start = threading.Barrier(threads + 1)
    stop = threading.Event()

    def run(mine: list[float]) -> None:
        start.wait()
        clock = time.perf_counter
        while not stop.is_set():
            t0 = clock()
            client.incr(key)
            mine.append(clock() - t0)

    workers = [threading.Thread(target=run, args=(waits[i],)) for i in range(threads)]
    for worker in workers:
        worker.start()
    start.wait()
    time.sleep(seconds)
    stop.set()
    for worker in workers:
        worker.join()
    pool.close()
    return Fairness(name, [w for mine in waits for w in mine], [len(mine) for mine in waits])


@pytest.mark.timing
def test_drop_in_serves_every_thread(redis_server: RedisServer) -> None:
    """64 threads on 4 connections for 3 s: every thread completes commands, none waits long."""
    result = measure(
        "poolkit BlockingConnectionPool",
        lambda: BlockingConnectionPool.from_url(
            redis_server.url, max_connections=4, client_name=redis_server.name
        ),
        threads=64,
        seconds=3.0,
        key=f"{redis_server.name}:n",
    )
    print(result.line())
    # (redis-py's BlockingConnectionPool, same run: most threads complete 1 command and wait
    # the whole run; here every thread completes hundreds, max wait tens of ms: the bounds leave
    # room for a loaded 2-core machine)
    assert min(result.ops) >= 10, result.line()
    assert result.max_wait < 2.0, result.line()
    assert min(result.ops) >= statistics.median(result.ops) / 4, result.line()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--url", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--threads", type=int, default=64)
    parser.add_argument("--connections", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=5.0)
    args = parser.parse_args()
    pools: dict[str, Callable[[], Any]] = {
        "redis BlockingConnectionPool": lambda: redis.BlockingConnectionPool.from_url(
            args.url, max_connections=args.connections, timeout=None
        ),
        "poolkit BlockingConnectionPool": lambda: BlockingConnectionPool.from_url(
            args.url, max_connections=args.connections, timeout=None
        ),
    }
    for name, make_pool in pools.items():
        print(
            measure(
                name, make_pool, threads=args.threads, seconds=args.seconds, key="fairness:n"
            ).line(),
            flush=True,
        )


if __name__ == "__main__":
    main()
