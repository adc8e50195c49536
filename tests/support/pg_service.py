"""The PostgreSQL server the backend tests run against, and a session to watch it with.

Tests take the ``pg`` fixture (import it: ``from pg_service import pg``), and ``table``, a table
of the test's own. The server is ``POOLKIT_TEST_PG_DSN`` (default
``postgresql://postgres@127.0.0.1:5432/test``); when it cannot be reached, or a driver is
missing, the tests skip saying why, and fail under ``POOLKIT_REQUIRE_SERVICES=1``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import importlib
import os
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest

from services import skip_or_fail

DSN = os.environ.get("POOLKIT_TEST_PG_DSN", "postgresql://postgres@127.0.0.1:5432/test")


def need(module: str) -> Any:
    """``module`` imported, or the test skipped (failed under POOLKIT_REQUIRE_SERVICES=1)."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        skip_or_fail(f"{module} is not installed ({exc}): pip install -e '.[test]'")
        raise AssertionError("not reached") from exc


@functools.cache
def _unreachable() -> str | None:
    """Why the server cannot be used, or ``None`` (asked once per run)."""
    try:
        import psycopg
    except ImportError:
        return "psycopg is not installed (it watches the server): pip install -e '.[test]'"
    try:
        with psycopg.connect(DSN, connect_timeout=5) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        return f"PostgreSQL at {DSN} is not reachable: {exc}".strip()
    return None


@dataclasses.dataclass
class PgServer:
    """The server, seen from an admin session of its own (autocommit)."""

    dsn: str
    admin: Any  # a psycopg.Connection
    #: an ``application_name`` of this test's own: its pool's sessions are those
    app: str

    def pids(self, app: str | None = None) -> list[int]:
        """The backends of ``app`` (this test's by default) connected now."""
        rows = self.admin.execute(
            "SELECT pid FROM pg_stat_activity WHERE application_name = %s ORDER BY pid",
            [app or self.app],
        ).fetchall()
        return [int(row[0]) for row in rows]

    def terminate(self, pid: int) -> None:
        """``pg_terminate_backend(pid)``, and wait (at most 5 s) until the backend is gone."""
        self.admin.execute("SELECT pg_terminate_backend(%s)", [pid])
        self.wait(lambda: pid not in self.pids(), "the terminated backend to go")

    def wait_sessions(self, count: int, app: str | None = None) -> None:
        """Wait (at most 5 s) until ``app`` has ``count`` sessions (the server ends a closed
        session's backend a moment after the client's goodbye)."""
        self.wait(lambda: len(self.pids(app)) == count, f"{count} sessions of {app or self.app}")

    @staticmethod
    def wait(condition: Callable[[], bool], what: str, timeout: float = 5.0) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            if time.monotonic() > deadline:
                raise AssertionError(f"waited {timeout} s for {what}")
            time.sleep(0.01)


async def wait_until(condition: Callable[[], bool], what: str, timeout: float = 5.0) -> None:
    """``PgServer.wait`` for a test on an event loop (the loop runs meanwhile)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {timeout} s for {what}")
        await asyncio.sleep(0.01)


@pytest.fixture
def pg() -> Iterator[PgServer]:
    """The PostgreSQL server, with an ``application_name`` for this test's sessions."""
    reason = _unreachable()
    if reason is not None:
        skip_or_fail(reason)
    import psycopg

    with psycopg.connect(DSN, autocommit=True, application_name="poolkit-tests-admin") as admin:
        server = PgServer(DSN, admin, f"poolkit-test-{uuid.uuid4().hex[:12]}")
        try:
            yield server
        finally:  # what a failed test left behind goes, so that it cannot disturb the next
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE application_name = %s",
                [server.app],
            )


class SilentProxy:
    """A real TCP relay to the server, on an event loop: ``freeze()`` makes every link open now
    go silent both ways without closing (a firewall that dropped it); links opened later work.

        async with SilentProxy(dsn) as proxy:
            conn = await asyncpg.connect(proxy.dsn)
    """

    def __init__(self, dsn: str) -> None:
        parts = urlsplit(dsn)
        self._parts = parts
        self._target = (parts.hostname or "127.0.0.1", parts.port or 5432)
        self._server: asyncio.Server | None = None
        self._frozen: list[asyncio.Event] = []
        self._writers: list[asyncio.StreamWriter] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self.dsn = ""

    async def __aenter__(self) -> SilentProxy:
        self._server = await asyncio.start_server(self._link, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        netloc = self._parts.netloc.rsplit("@", 1)[0] + f"@127.0.0.1:{port}"
        self.dsn = urlunsplit(self._parts._replace(netloc=netloc))
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        assert self._server is not None
        self._server.close()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for writer in self._writers:
            writer.close()

    def freeze(self) -> None:
        for frozen in self._frozen:
            frozen.set()

    async def _link(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(*self._target)
        frozen = asyncio.Event()
        self._frozen.append(frozen)
        self._writers += [writer, up_writer]
        for source, sink in ((reader, up_writer), (up_reader, writer)):
            task = asyncio.create_task(self._pipe(source, sink, frozen))
            self._tasks.add(task)

    @staticmethod
    async def _pipe(
        source: asyncio.StreamReader, sink: asyncio.StreamWriter, frozen: asyncio.Event
    ) -> None:
        while data := await source.read(65536):
            if not frozen.is_set():  # (frozen: dropped, and the link kept open)
                sink.write(data)
                await sink.drain()
        if not frozen.is_set():
            sink.close()


@pytest.fixture
def table(pg: PgServer) -> Iterator[str]:
    """A table of this test's own (committed data is seen from other sessions)."""
    name = pg.app.replace("-", "_")
    pg.admin.execute(f"CREATE TABLE {name} (x int)")
    yield name
    pg.admin.execute(f"DROP TABLE {name}")
