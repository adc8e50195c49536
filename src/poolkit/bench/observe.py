"""The server's side of a run: observers that count the connections the server sees.

Rules of this module
--------------------
* An observer counts the run's own connections (named ``RunConfig.app_name``), never the
  server's total: another application's, or another run's, are not the bench's.
* Behind PgBouncer (``--pgbouncer``) the server connections are PgBouncer's, shared and
  renamed by it: they are counted in its admin console (``SHOW SERVERS``), and what the run
  left open in ``SHOW CLIENTS``.
* It samples on a thread of its own; one that cannot count reports ``None``, never an error.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
import urllib.parse
from typing import Any

from .config import RunConfig
from .sim_process import SimProcess

__all__ = ["Observer", "observer_for"]


class Observer:
    """Samples the server's count of the run's connections every ``interval`` seconds, on a
    thread: ``latest``, :meth:`take_peak` (the highest since last asked) and :meth:`settled`
    (what is left once the pools are closed)."""

    def __init__(self, interval: float = 0.2) -> None:
        self.interval = interval
        self.latest: int | None = None
        self.latest_left: int | None = None
        self._peak: int | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._sampled = threading.Condition()
        self.sampled_at = 0.0  # when the sample in ``latest`` was started (time.monotonic)

    def sample(self) -> tuple[int | None, int | None]:
        """(the server's connections of the run now, those a closed run would have left)."""
        n = self.count()
        return n, n

    def count(self) -> int | None:
        raise NotImplementedError

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="bench-observer", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            at = time.monotonic()
            try:
                n, left = self.sample()
            except Exception:  # (the run goes on without it: see the module rules)
                n = left = None
            with self._sampled:
                self.latest, self.latest_left, self.sampled_at = n, left, at
                if n is not None:
                    self._peak = n if self._peak is None else max(self._peak, n)
                self._sampled.notify_all()
            self._stop.wait(self.interval)

    def settled(self, timeout: float = 3.0) -> int | None:
        """What the run left open, once it is 0 or after ``timeout`` seconds: from a sample
        started after this call (a pool's close is seen by the server a moment later)."""
        since = time.monotonic()
        deadline = since + timeout
        with self._sampled:
            while True:
                fresh = self.sampled_at > since
                if fresh and not self.latest_left:
                    return self.latest_left
                left = deadline - time.monotonic()
                if left <= 0 or self._thread is None or not self._thread.is_alive():
                    return self.latest_left if fresh else None
                self._sampled.wait(left)

    def take_peak(self) -> int | None:
        peak, self._peak = self._peak, self.latest
        return peak

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10.0)
        self.close()

    def close(self) -> None:
        pass


class SimObserver(Observer):
    def __init__(self, server: SimProcess) -> None:
        super().__init__()
        self.server = server

    def count(self) -> int | None:
        stats = self.server.stats()
        return None if stats is None else stats.connections_open


_PG_COUNT = (
    "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND pid <> pg_backend_pid()"
)


class PostgresObserver(Observer):
    """Counts the run's rows in ``pg_stat_activity`` (psycopg if installed, else asyncpg on a
    loop of this thread's own)."""

    def __init__(self, url: str, name: str) -> None:
        super().__init__(interval=0.5)
        self.url = url
        self.name = name
        self._conn: Any = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def count(self) -> int | None:
        try:
            import psycopg
        except ImportError:
            return self._count_asyncpg()
        if self._conn is None:
            self._conn = psycopg.connect(
                self.url,
                autocommit=True,
                application_name="poolkit-bench-observer",
                connect_timeout=5,
            )
        row = self._conn.execute(_PG_COUNT.replace("$1", "%s"), (self.name,)).fetchone()
        return int(row[0]) if row else None

    def _count_asyncpg(self) -> int | None:
        import asyncpg

        if self._loop is None:
            self._loop = asyncio.new_event_loop()
        if self._conn is None:
            self._conn = self._loop.run_until_complete(
                asyncpg.connect(
                    self.url,
                    timeout=5,
                    server_settings={"application_name": "poolkit-bench-observer"},
                )
            )
        return int(self._loop.run_until_complete(self._conn.fetchval(_PG_COUNT, self.name)))

    def close(self) -> None:
        with contextlib.suppress(Exception):
            if self._conn is not None:
                if self._loop is not None:
                    self._loop.run_until_complete(self._conn.close(timeout=5))
                else:
                    self._conn.close()
        if self._loop is not None:
            self._loop.close()


class PgBouncerObserver(Observer):
    """PgBouncer's admin console (the ``pgbouncer`` database of the same address; the user
    must be in its ``admin_users`` or ``stats_users``): the server connections it holds for the
    target's database and user (``SHOW SERVERS``), and its clients for them (``SHOW CLIENTS``:
    what a closed run left). Needs psycopg (the console speaks the simple query protocol)."""

    def __init__(self, url: str) -> None:
        super().__init__(interval=0.5)
        parts = urllib.parse.urlsplit(url)
        self.database = parts.path.lstrip("/") or (parts.username or "")
        self.user = urllib.parse.unquote(parts.username or "")
        self.admin_url = parts._replace(path="/pgbouncer", query="").geturl()
        self._conn: Any = None

    def _mine(self, command: str) -> int:
        rows = self._conn.execute(command).fetchall()
        return sum(
            1
            for row in rows
            if row["database"] == self.database and (not self.user or row["user"] == self.user)
        )

    def sample(self) -> tuple[int | None, int | None]:
        if self._conn is None:
            import psycopg
            from psycopg.rows import dict_row

            self._conn = psycopg.connect(
                self.admin_url,
                autocommit=True,
                prepare_threshold=None,
                connect_timeout=5,
                row_factory=dict_row,
            )
        return self._mine("SHOW SERVERS"), self._mine("SHOW CLIENTS")

    def close(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):
                self._conn.close()


class RedisObserver(Observer):
    """Counts the ``CLIENT LIST`` entries with the run's name."""

    def __init__(self, url: str, name: str) -> None:
        super().__init__()
        self.url = url
        self.name = name
        self._client: Any = None

    def count(self) -> int | None:
        if self._client is None:
            import redis

            self._client = redis.Redis.from_url(self.url, socket_timeout=5)
        return sum(1 for c in self._client.client_list() if c.get("name") == self.name)

    def close(self) -> None:
        if self._client is not None:
            with contextlib.suppress(Exception):
                self._client.close()


def observer_for(config: RunConfig, sim: SimProcess | None) -> Observer | None:
    kind = config.target.kind
    if sim is not None:
        return SimObserver(sim)
    if kind == "postgresql":
        if config.pgbouncer:
            return PgBouncerObserver(config.target.url)
        return PostgresObserver(config.target.url, config.app_name)
    if kind == "redis":
        return RedisObserver(config.target.url, config.app_name)
    return None  # a raw TCP server has no way to say
