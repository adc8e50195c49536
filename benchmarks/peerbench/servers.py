"""The servers the workloads run against: whether they answer, their versions, and the count of
a pool's connections they see, at its peak (:class:`ServerCount`).

PostgreSQL is ``POOLKIT_TEST_PG_DSN`` (default ``postgresql://postgres@127.0.0.1:5432/test``),
Redis ``POOLKIT_REDIS_URL`` (default ``redis://127.0.0.1:6379/0``), as for the test-suite; or
``--dsn`` / ``--redis-url``. A pool's connections are found by the name they carry: PostgreSQL's
``application_name`` in ``pg_stat_activity``, Redis' client name in ``CLIENT LIST``.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterator
from typing import Any, Literal

DSN = os.environ.get("POOLKIT_TEST_PG_DSN", "postgresql://postgres@127.0.0.1:5432/test")
REDIS_URL = os.environ.get("POOLKIT_REDIS_URL", "redis://127.0.0.1:6379/0")
#: seconds between two counts of a pool's connections on the server
SAMPLE_EVERY = 0.1
Server = Literal["pg", "redis"]


def pg_missing(dsn: str) -> str | None:
    """Why PostgreSQL at ``dsn`` cannot be used (psycopg, which counts its sessions, missing;
    not reachable), or ``None``."""
    try:
        import psycopg
    except ImportError:
        return "psycopg is not installed: pip install 'poolkit[peers]'"
    try:
        with psycopg.connect(dsn, connect_timeout=3) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        return f"PostgreSQL at {dsn} is not reachable: {exc}".strip()
    return None


def redis_missing(url: str) -> str | None:
    """Why Redis at ``url`` cannot be used, or ``None``."""
    try:
        import redis
    except ImportError:
        return "redis-py is not installed: pip install 'poolkit[peers]'"
    client = redis.Redis.from_url(url, socket_connect_timeout=3, socket_timeout=3)
    try:
        client.ping()
    except (redis.RedisError, OSError) as exc:
        return f"Redis at {url} is not reachable: {exc}"
    finally:
        client.close()
    return None


def pg_version(dsn: str) -> str:
    import psycopg

    with psycopg.connect(dsn, connect_timeout=3) as conn:
        row = conn.execute("SHOW server_version").fetchone()
    return str(row[0]) if row else "?"


def redis_version(url: str) -> str:
    import redis

    client = redis.Redis.from_url(url, socket_connect_timeout=3, socket_timeout=3)
    try:
        info: Any = client.info("server")
        return str(info.get("redis_version", "?"))
    finally:
        client.close()


class ServerCount:
    """The most connections named ``app`` the server showed while the block ran, counted every
    ``every`` seconds (:data:`SAMPLE_EVERY`) on a thread of its own (one session of its own on the
    server, not counted) and once more at the end of the block.

        with ServerCount("pg", dsn, app) as count:
            ...
        count.peak
    """

    def __init__(
        self, server: Server | None, target: str, app: str, every: float = SAMPLE_EVERY
    ) -> None:
        self.server = server
        self.every = every
        self.target = target
        self.app = app
        self.peak = -1  # (-1: not counted)
        self.error = ""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> ServerCount:
        if self.server is not None:
            self.peak = 0
            sampler = _pg_sampler if self.server == "pg" else _redis_sampler
            count = sampler(self.target, self.app)
            ready = threading.Event()
            self._thread = threading.Thread(
                target=self._run, args=(count, ready), name="peers-server-count", daemon=True
            )
            self._thread.start()
            ready.wait(10)
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)

    def _run(self, count: Any, ready: threading.Event) -> None:
        try:
            with count as sample:
                ready.set()
                while True:
                    self.peak = max(self.peak, sample())
                    if self._stop.wait(self.every):
                        self.peak = max(self.peak, sample())
                        return
        except Exception as exc:  # (a count that failed: the report shows it, the run goes on)
            self.error = f"{type(exc).__name__}: {exc}"
        finally:
            ready.set()


@contextlib.contextmanager
def _pg_sampler(dsn: str, app: str) -> Iterator[Callable[[], int]]:
    import psycopg

    with psycopg.connect(dsn, autocommit=True, application_name="peers-server-count") as conn:
        query = "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s"

        def sample() -> int:
            row = conn.execute(query, [app]).fetchone()
            return int(row[0]) if row else 0

        yield sample


@contextlib.contextmanager
def _redis_sampler(url: str, app: str) -> Iterator[Callable[[], int]]:
    import redis

    client = redis.Redis.from_url(url, client_name="peers-server-count")
    try:

        def sample() -> int:
            return sum(1 for c in client.client_list() if c.get("name") == app)

        yield sample
    finally:
        client.close()
