"""W7 on threads: ``w7_threads`` (200) threads arrive at once at an empty pool (at most 10
connections) whose connect takes ``w7_connect`` (50 ms) more than the server's own; each makes
one operation. The same figures as the asyncio storm (``storm``): how long until every thread
had its connection, how many connects ran at once, how many were made, the server's count.

The connect is slowed through ``connection_class=``, as each pool lets a user supply it
(psycopg_pool and poolkit's psycopg backend; redis-py's pools and poolkit's drop-in).
"""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from .core import AS_SHIPPED, Contender, Env, Figures, Workload
from .drive import Record, time_checkouts
from .pg_rows import SELECT
from .storm import POOL_MAX, storm_figures, storm_workload

pc = time.perf_counter
SyncOne = Callable[[], None]
ThreadStormBuild = Callable[[Env, Record, "ThreadConnects"], Any]  # -> a context manager


class ThreadConnects:
    """The connects of one run, counted from any thread: in flight now, the most at once, how
    many in all."""

    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.now = self.most = self.made = 0
        self._lock = threading.Lock()

    def slowly(self, connect: Callable[[], Any]) -> Any:
        """``connect()`` after ``delay`` seconds, counted."""
        with self._lock:
            self.now += 1
            self.most = max(self.most, self.now)
        try:
            time.sleep(self.delay)
            result = connect()
            with self._lock:
                self.made += 1
            return result
        finally:
            with self._lock:
                self.now -= 1


def _slow_psycopg_class(connects: ThreadConnects) -> Any:
    import psycopg

    class SlowConnection(psycopg.Connection[Any]):
        @classmethod
        def connect(cls, *args: Any, **kwargs: Any) -> Any:
            parent = super().connect
            return connects.slowly(lambda: parent(*args, **kwargs))

    return SlowConnection


@contextmanager
def poolkit_psycopg(env: Env, record: Record, connects: ThreadConnects) -> Iterator[SyncOne]:
    from poolkit.backends import psycopg as pk

    pool = pk.create_pool(
        env.dsn,
        min_size=0,
        max_size=POOL_MAX,
        connection_class=_slow_psycopg_class(connects),
        application_name=env.app,
    )

    def one() -> None:
        t = pc()
        with pool.connection() as conn:
            record(pc() - t)
            conn.execute(SELECT).fetchone()

    try:
        yield one
    finally:
        pool.close()


@contextmanager
def psycopg_pool(env: Env, record: Record, connects: ThreadConnects) -> Iterator[SyncOne]:
    from psycopg_pool import ConnectionPool

    pool: Any = ConnectionPool(
        env.dsn,
        min_size=0,
        max_size=POOL_MAX,
        connection_class=_slow_psycopg_class(connects),
        kwargs={"application_name": env.app},
        open=True,
    )

    def one() -> None:
        t = pc()
        with pool.connection() as conn:
            record(pc() - t)
            conn.execute(SELECT).fetchone()

    try:
        yield one
    finally:
        pool.close()


def _slow_redis_class(connects: ThreadConnects) -> Any:
    import redis

    class SlowConnection(redis.Connection):
        def connect(self) -> None:
            if getattr(self, "_sock", None) is not None:
                return
            parent = super().connect
            connects.slowly(parent)

    return SlowConnection


def redis_blocking(which: str) -> ThreadStormBuild:
    @contextmanager
    def build(env: Env, record: Record, connects: ThreadConnects) -> Iterator[SyncOne]:
        import redis

        blocking: Any = redis.BlockingConnectionPool
        if which == "poolkit":
            from poolkit.backends import redis as pk

            blocking = pk.BlockingConnectionPool
        pool: Any = blocking.from_url(
            env.redis_url,
            max_connections=POOL_MAX,
            client_name=env.app,
            connection_class=_slow_redis_class(connects),
        )
        time_checkouts(pool, record)
        client = redis.Redis(connection_pool=pool)
        key = f"{env.app}:storm"

        def one() -> None:
            client.get(key)

        try:
            yield one
        finally:
            client.close()
            pool.close()

    return build


def storm_run(build: ThreadStormBuild) -> Callable[[Env], Figures]:
    def measure(env: Env) -> Figures:
        waits: list[float] = []
        connects = ThreadConnects(env.sizes.w7_connect)
        count = env.sizes.w7_threads
        with build(env, waits.append, connects) as one:
            gc.collect()
            start = threading.Barrier(count + 1)
            errors: list[BaseException] = []

            def run() -> None:
                start.wait()
                try:
                    one()
                except BaseException as exc:  # (reported after the join)
                    errors.append(exc)

            threads = [threading.Thread(target=run, daemon=True) for _ in range(count)]
            for thread in threads:
                thread.start()
            start.wait()
            t0 = pc()
            for thread in threads:
                thread.join()
            elapsed = pc() - t0
            if errors:
                raise errors[0]
        return storm_figures(waits, elapsed, connects.most, connects.made)

    return measure


def _c(name: str, role: Any, build: ThreadStormBuild, needs: tuple[str, ...]) -> Contender:
    return Contender(name, role, AS_SHIPPED, storm_run(build), needs)


def w7_threads_pg(threads: int) -> Workload:
    pg = ("psycopg", "psycopg_pool")
    return storm_workload(
        "W7-threads-pg",
        f"{threads:,} threads",
        "PostgreSQL (threads)",
        "psycopg_pool.ConnectionPool",
        "pg",
        "Each thread: one `SELECT 1`. poolkit's builder makes one connection before it "
        "returns (a wrong DSN fails there): that one is made before the storm, not counted.",
        (
            _c("poolkit.backends.psycopg.create_pool", "poolkit", poolkit_psycopg, pg),
            _c("psycopg_pool.ConnectionPool", "peer", psycopg_pool, pg),
        ),
    )


def w7_threads_redis(threads: int) -> Workload:
    rd = ("redis",)
    return storm_workload(
        "W7-threads-redis",
        f"{threads:,} threads",
        "Redis (threads)",
        "redis.BlockingConnectionPool",
        "redis",
        "Each thread: one `GET` through one shared `redis.Redis`.",
        (
            _c("poolkit.backends.redis.BlockingConnectionPool", "poolkit",
               redis_blocking("poolkit"), rd),
            _c("redis.BlockingConnectionPool", "peer", redis_blocking("redis-py"), rd),
        ),
    )  # fmt: skip
