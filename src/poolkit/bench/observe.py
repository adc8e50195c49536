"""The server's side of a run: the embedded server's process, and observers that count the
connections a real server sees.

Rules of this module
--------------------
* The embedded server runs in a process of its own (spawned), so that it never competes with
  the measured pool for the interpreter's lock: the figures are the pool's, not the server's.
* An observer counts connections named :data:`~.targets.APPLICATION_NAME` on the server (for
  PostgreSQL behind PgBouncer: the server connections PgBouncer holds for them). It samples from
  a thread of its own; one that cannot count reports ``None``, never an error.
"""

from __future__ import annotations

import asyncio
import contextlib
import selectors
import signal
import threading
import time
from multiprocessing.connection import Connection
from typing import Any

from ..testing.sim import SimServer, SimSettings, SimStats
from .config import RunConfig
from .targets import APPLICATION_NAME

__all__ = ["Observer", "SimProcess", "observer_for", "sim_main"]


def sim_main(settings: SimSettings, channel: Connection) -> None:
    """The embedded server's process: serves until ``"stop"`` (or the parent goes away)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    with asyncio.Runner(loop_factory=lambda: _precise_loop(settings)) as runner:
        runner.run(_serve(settings, channel))


def _precise_loop(settings: SimSettings) -> asyncio.AbstractEventLoop:
    """An event loop whose timers fire within tens of microseconds: ``select()`` takes its
    timeout in microseconds, where epoll rounds it up to whole milliseconds (a 1 ms service
    time would be served in up to 2). ``select()`` handles descriptors below 1024 only: with
    more connections allowed, the default loop."""
    limit = settings.max_connections
    if limit is not None and limit <= 900:
        return asyncio.SelectorEventLoop(selectors.SelectSelector())
    return asyncio.new_event_loop()


async def _serve(settings: SimSettings, channel: Connection) -> None:
    server = SimServer(settings)
    await server.start()
    done = asyncio.Event()
    loop = asyncio.get_running_loop()

    def on_message() -> None:
        try:
            message = channel.recv()
        except (EOFError, OSError):
            message = "stop"
        if message == "stats":
            channel.send(server.stats())
        else:
            loop.remove_reader(channel.fileno())
            done.set()

    loop.add_reader(channel.fileno(), on_message)
    channel.send(server.port)
    try:
        await done.wait()
    finally:
        await server.close()
        with contextlib.suppress(OSError):
            channel.send("stopped")


class SimProcess:
    """The parent's handle on the embedded server's process."""

    def __init__(self, settings: SimSettings, context: Any) -> None:
        self._channel, child = context.Pipe()
        self._process = context.Process(
            target=sim_main, args=(settings, child), name="poolkit-bench-sim", daemon=True
        )
        self._process.start()
        child.close()
        self._lock = threading.Lock()
        if not self._channel.poll(30.0):
            self.stop()
            raise RuntimeError("the embedded server did not start within 30 s")
        self.port: int = self._channel.recv()

    def stats(self) -> SimStats | None:
        with self._lock:
            try:
                self._channel.send("stats")
                if self._channel.poll(5.0):
                    stats: SimStats = self._channel.recv()
                    return stats
            except (EOFError, OSError):
                pass
        return None

    def stop(self) -> None:
        with self._lock, contextlib.suppress(OSError):
            self._channel.send("stop")
            if self._channel.poll(5.0):
                self._channel.recv()
        self._process.join(5.0)
        if self._process.is_alive():
            self._process.kill()
            self._process.join()
        self._channel.close()


class Observer:
    """Samples the server's count of the bench's connections every ``interval`` seconds, on a
    thread; :meth:`take_peak` returns the highest count since it was last called."""

    def __init__(self, interval: float = 0.2) -> None:
        self.interval = interval
        self.latest: int | None = None
        self._peak: int | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._sampled = threading.Condition()
        self.sampled_at = 0.0  # when the sample in ``latest`` was started (time.monotonic)
        self.failure: str | None = None

    def count(self) -> int | None:
        raise NotImplementedError

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="bench-observer", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            at = time.monotonic()
            try:
                n = self.count()
            except Exception as exc:  # (the run goes on without it: see the module rules)
                self.failure = f"{type(exc).__name__}: {exc}".splitlines()[0]
                n = None
            with self._sampled:
                self.latest, self.sampled_at = n, at
                if n is not None:
                    self._peak = n if self._peak is None else max(self._peak, n)
                self._sampled.notify_all()
            self._stop.wait(self.interval)

    def settled(self, timeout: float = 3.0) -> int | None:
        """The count once it is 0, or the last one after ``timeout`` seconds: each from a
        sample started after this call (a pool's close is seen by the server a moment later)."""
        since = time.monotonic()
        deadline = since + timeout
        with self._sampled:
            while True:
                fresh = self.sampled_at > since
                if fresh and not self.latest:
                    return self.latest
                left = deadline - time.monotonic()
                if left <= 0 or self._thread is None or not self._thread.is_alive():
                    return self.latest if fresh else None
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
        self.stats: SimStats | None = None

    def count(self) -> int | None:
        stats = self.server.stats()
        if stats is None:
            return None
        self.stats = stats
        return stats.connections_open


_PG_COUNT = (
    "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND pid <> pg_backend_pid()"
)


class PostgresObserver(Observer):
    """Counts ``pg_stat_activity`` rows named for the bench (psycopg if installed, else
    asyncpg on a loop of this thread's own)."""

    def __init__(self, url: str) -> None:
        super().__init__(interval=0.5)
        self.url = url
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
                prepare_threshold=None,
                connect_timeout=5,
            )
        row = self._conn.execute(_PG_COUNT.replace("$1", "%s"), (APPLICATION_NAME,)).fetchone()
        return int(row[0]) if row else None

    def _count_asyncpg(self) -> int | None:
        import asyncpg

        if self._loop is None:
            self._loop = asyncio.new_event_loop()
        if self._conn is None:
            self._conn = self._loop.run_until_complete(
                asyncpg.connect(
                    self.url,
                    statement_cache_size=0,
                    timeout=5,
                    server_settings={"application_name": "poolkit-bench-observer"},
                )
            )
        n = self._loop.run_until_complete(self._conn.fetchval(_PG_COUNT, APPLICATION_NAME))
        return int(n)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            if self._conn is not None:
                if self._loop is not None:
                    self._loop.run_until_complete(self._conn.close(timeout=5))
                else:
                    self._conn.close()
        if self._loop is not None:
            self._loop.close()


class RedisObserver(Observer):
    """Counts ``CLIENT LIST`` entries named for the bench."""

    def __init__(self, url: str) -> None:
        super().__init__()
        self.url = url
        self._client: Any = None

    def count(self) -> int | None:
        if self._client is None:
            import redis

            self._client = redis.Redis.from_url(self.url, socket_timeout=5)
        return sum(1 for c in self._client.client_list() if c.get("name") == APPLICATION_NAME)

    def close(self) -> None:
        if self._client is not None:
            with contextlib.suppress(Exception):
                self._client.close()


def observer_for(config: RunConfig, sim: SimProcess | None) -> Observer | None:
    kind = config.target.kind
    if sim is not None:
        return SimObserver(sim)
    if kind == "postgresql":
        return PostgresObserver(config.target.url)
    if kind == "redis":
        return RedisObserver(config.target.url)
    return None  # a raw TCP server has no way to say
