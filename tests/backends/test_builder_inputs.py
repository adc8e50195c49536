"""A builder's inputs, against the real PostgreSQL and Redis: a builder whose first connect fails
(a wrong role, database or port) raises with no warning before it that the pool goes on
trying."""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import pytest

import poolkit
from pg_service import PgServer, need, pg
from services import RedisServer

__all__ = ["pg"]


def _module(name: str) -> Any:
    """``name`` imported (a driver missing: the test skips, or fails under
    POOLKIT_REQUIRE_SERVICES=1)."""
    return need(name)


# ------------------------------------------------------------------ 6: a builder failing up front

NO_ROLE = "poolkit_no_such_role"
NO_DB = "poolkit_no_such_database"


@pytest.fixture
def pool_warnings(caplog: pytest.LogCaptureFixture) -> Callable[[], list[str]]:
    """The warnings logged on ``poolkit.pool`` (where "... the pool goes on trying" goes)."""
    caplog.set_level(logging.INFO, logger="poolkit.pool")

    def warned() -> list[str]:
        return [
            r.getMessage()
            for r in caplog.records
            if r.name == "poolkit.pool" and r.levelno >= logging.WARNING
        ]

    return warned


@pytest.fixture
def closed_port() -> int:
    """A local port nothing listens on (connects to it are refused)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _pg_params(pg: PgServer) -> dict[str, Any]:
    parts = urlsplit(pg.dsn)
    return {"host": parts.hostname, "port": parts.port or 5432, "user": parts.username}


@pytest.mark.parametrize(
    ("wrong", "says"),
    [({"user": NO_ROLE}, NO_ROLE), ({"dbname": NO_DB}, NO_DB), ({"port": "closed"}, "refused")],
)
def test_psycopg_builders_failing_up_front_say_nothing_else(
    pg: PgServer,
    pool_warnings: Callable[[], list[str]],
    closed_port: int,
    wrong: dict[str, Any],
    says: str,
) -> None:
    psycopg = _module("psycopg")
    pk = _module("poolkit.backends.psycopg")
    kwargs = {**_pg_params(pg), "dbname": "test", **wrong}
    if kwargs["port"] == "closed":
        kwargs["port"] = closed_port
    # (min_size=4, psycopg_pool's: connects run at once besides the builder's checkout)
    with pytest.raises(psycopg.OperationalError, match=says):
        pk.create_pool(application_name=pg.app, **kwargs)
    assert pool_warnings() == []

    async def main() -> None:
        with pytest.raises(psycopg.OperationalError, match=says):
            await pk.create_async_pool(application_name=pg.app, **kwargs)

    asyncio.run(main())
    assert pool_warnings() == []


@pytest.mark.parametrize(
    ("wrong", "says"),
    [({"user": NO_ROLE}, NO_ROLE), ({"database": NO_DB}, NO_DB), ({"port": "closed"}, None)],
)
def test_asyncpg_builder_failing_up_front_says_nothing_else(
    pg: PgServer,
    pool_warnings: Callable[[], list[str]],
    closed_port: int,
    wrong: dict[str, Any],
    says: str | None,
) -> None:
    pk = _module("poolkit.backends.asyncpg")
    kwargs = {**_pg_params(pg), "database": "test", **wrong}
    if kwargs["port"] == "closed":
        kwargs["port"] = closed_port

    async def main() -> None:
        # (min_size=10, asyncpg's: two connects at once besides the builder's checkout)
        with pytest.raises((OSError, _module("asyncpg").PostgresError), match=says):
            await pk.create_pool(application_name=pg.app, **kwargs)

    asyncio.run(main())
    assert pool_warnings() == []


def test_redis_builders_failing_up_front_say_nothing_else(
    redis_server: RedisServer, pool_warnings: Callable[[], list[str]], closed_port: int
) -> None:
    pk = _module("poolkit.backends.redis")
    redis_ = _module("redis")
    options = poolkit.PoolOptions(min_size=2, max_size=4)
    with pytest.raises(redis_.ConnectionError):
        pk.create_pool(host="127.0.0.1", port=closed_port, options=options)
    assert pool_warnings() == []
    port = urlsplit(redis_server.url).port or 6379
    with pytest.raises(redis_.ResponseError, match="DB index"):  # (a database it does not have)
        pk.create_pool(host="127.0.0.1", port=port, db=1_000_000, options=options)
    assert pool_warnings() == []

    async def main() -> None:
        with pytest.raises(redis_.ConnectionError):
            await pk.create_async_pool(host="127.0.0.1", port=closed_port, options=options)

    asyncio.run(main())
    assert pool_warnings() == []


class _Flaky:
    """asyncpg's ``connect``, failing while ``failing`` (the builder's ``connect=``)."""

    def __init__(self, failing: int) -> None:
        self.failing = failing  #: connects left to fail (-1: all of them)

    async def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.failing:
            self.failing -= 1
            raise ConnectionRefusedError("poolkit-test: the server is down")
        return await _module("asyncpg").connect(*args, **kwargs)


def test_a_failing_connect_the_builder_outlives_is_warned_once_it_returns(
    pg: PgServer, pool_warnings: Callable[[], list[str]]
) -> None:
    pk = _module("poolkit.backends.asyncpg")

    async def main() -> None:
        flaky = _Flaky(failing=1)  # the first of min_size's two connects fails, unseen
        async with pk.create_pool(
            pg.dsn, min_size=2, max_size=2, connect=flaky, application_name=pg.app
        ) as pool:
            assert pool.stats().connect_failures == 1

    asyncio.run(main())
    warned = pool_warnings()
    assert len(warned) == 1 and "the pool goes on trying" in warned[0], warned
    assert "the server is down" in warned[0]


def test_a_running_pool_that_loses_its_server_still_warns(
    pg: PgServer, pool_warnings: Callable[[], list[str]]
) -> None:
    pk = _module("poolkit.backends.asyncpg")

    async def main() -> None:
        flaky = _Flaky(failing=0)
        told = asyncio.Event()

        def listener(event: poolkit.events.PoolEvent) -> None:
            if isinstance(event, poolkit.events.ConnectFailingEvent):
                told.set()

        async with pk.create_pool(
            pg.dsn,
            min_size=1,
            max_size=2,
            connect=flaky,
            application_name=pg.app,
            listeners=[listener],
        ) as pool:
            assert pool_warnings() == []
            flaky.failing = -1  # the server is gone from here on
            pool.clear(interrupt_in_use=True)  # (its connection closed; min_size refilled)
            pool.ready()
            await asyncio.wait_for(told.wait(), 10)

    asyncio.run(main())
    warned = pool_warnings()
    assert len(warned) == 1 and "the pool goes on trying" in warned[0], warned
