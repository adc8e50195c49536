"""A builder's inputs, against the real PostgreSQL and Redis: a builder whose first connect fails
(a wrong role, database or port) raises with no warning before it that the pool goes on
trying; a port or a timeout that would fail later (or connect elsewhere) is refused at the call,
naming the argument and the call; the redis drop-in's ``timeout`` likewise."""

from __future__ import annotations

import asyncio
import logging
import math
import socket
from collections.abc import Callable
from datetime import timedelta
from functools import partial
from typing import Any
from urllib.parse import urlsplit

import pytest

import poolkit
from pg_service import PgServer, need, pg
from poolkit.backends import tcp
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
            pool.pool.clear(interrupt_in_use=True)  # (its connection closed; min_size refilled)
            pool.pool.ready()
            await asyncio.wait_for(told.wait(), 10)

    asyncio.run(main())
    warned = pool_warnings()
    assert len(warned) == 1 and "the pool goes on trying" in warned[0], warned


# ------------------------------------------------------------------ 7: ports and timeouts

BAD_PORTS = [70000, 65536, -1, 0, True, 5432.0, "http", None]
BAD_SECONDS = [-1, -0.5, math.nan, math.inf, "5", True, [1]]
TCP_CALLS = ("create_pool", "create_async_pool", "connect", "async_connect", "open_socket")


def _refused(call: Callable[[], Any], *names: str) -> str:
    with pytest.raises((ValueError, TypeError)) as info:
        call()
    message = str(info.value)
    for name in names:
        assert name in message, message
    return message


@pytest.mark.parametrize("port", BAD_PORTS)
def test_tcp_refuses_a_port_at_the_call(port: Any) -> None:
    for name in TCP_CALLS:
        message = _refused(partial(getattr(tcp, name), "127.0.0.1", port), f"tcp.{name}(port=...)")
        assert repr(port) in message


def test_tcp_70000_is_refused_not_4464() -> None:
    message = _refused(lambda: tcp.create_pool("127.0.0.1", 70000), "tcp.create_pool(port=...)")
    assert message == "tcp.create_pool(port=...): an int from 1 to 65535, not 70000"


@pytest.mark.parametrize("seconds", BAD_SECONDS)
def test_tcp_refuses_a_timeout_at_the_call(seconds: Any) -> None:
    for name in TCP_CALLS:
        _refused(
            partial(getattr(tcp, name), "127.0.0.1", 80, connect_timeout=seconds),
            f"tcp.{name}(connect_timeout=...)",
        )
    _refused(lambda: tcp.create_pool("127.0.0.1", 80, timeout=seconds), "create_pool(timeout=")


def test_tcp_refuses_a_host_or_a_keyword_it_does_not_take() -> None:
    _refused(lambda: tcp.create_pool("", 80), "tcp.create_pool(host=...)")
    _refused(partial(tcp.create_pool, b"h", 80), "tcp.create_pool(host=...)")  # type: ignore[arg-type]
    _refused(lambda: tcp.connect("h", 80, conect_timeout=1), "tcp.connect()", "conect_timeout")
    _refused(lambda: tcp.async_connect("h", 80, timeout=1), "open_stream()", "timeout")


def test_tcp_good_arguments_still_connect() -> None:
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]
        with (
            tcp.create_pool(
                "127.0.0.1", port, connect_timeout=timedelta(seconds=5), timeout=None
            ) as pool,
            pool.connection() as sock,
        ):
            assert sock.getpeername()[1] == port
            assert sock.gettimeout() is None

        async def main() -> None:
            starter = tcp.create_async_pool("127.0.0.1", port, connect_timeout=0.5)
            async with starter as apool, apool.connection() as conn:
                assert conn.writer.get_extra_info("peername")[1] == port

        asyncio.run(main())


@pytest.mark.parametrize("port", [70000, -1, True, "x"])
def test_redis_refuses_a_port_at_the_call(port: Any) -> None:
    pk = _module("poolkit.backends.redis")
    for name in ("create_pool", "create_async_pool", "connect", "async_connect"):
        message = _refused(
            partial(getattr(pk, name), host="127.0.0.1", port=port), f"redis.{name}(port=...)"
        )
        assert repr(port) in message
    for cls in ("ConnectionPool", "BlockingConnectionPool", "AsyncConnectionPool"):
        _refused(partial(getattr(pk, cls), host="127.0.0.1", port=port), f"{cls}(port=...)")


@pytest.mark.parametrize("seconds", BAD_SECONDS)
@pytest.mark.parametrize("name", ["socket_timeout", "socket_connect_timeout"])
def test_redis_refuses_a_socket_timeout_at_the_call(name: str, seconds: Any) -> None:
    pk = _module("poolkit.backends.redis")
    kwargs = {"host": "127.0.0.1", name: seconds}
    for call in ("create_pool", "create_async_pool", "connect", "async_connect"):
        _refused(partial(getattr(pk, call), **kwargs), f"redis.{call}({name}=...)")
    for cls in ("ConnectionPool", "AsyncBlockingConnectionPool"):
        _refused(partial(getattr(pk, cls), **kwargs), f"{cls}({name}=...)")


def test_redis_good_arguments_still_connect(redis_server: RedisServer) -> None:
    pk = _module("poolkit.backends.redis")
    port = urlsplit(redis_server.url).port or 6379
    with (
        pk.create_pool(
            host="127.0.0.1", port=str(port), socket_timeout=timedelta(seconds=5)
        ) as pool,
        pool.connection() as client,
    ):
        assert client.ping()


@pytest.mark.parametrize(
    ("kwargs", "says"),
    [
        ({"port": 70000}, "(port=...): an int from 1 to 65535, not 70000"),
        ({"port": "5432,70000"}, "(port=...): an int from 1 to 65535, not '70000'"),
        ({"port": True}, "(port=...)"),
        ({"connect_timeout": -1}, "(connect_timeout=...) must be seconds >= 0"),
        ({"connect_timeout": "soon"}, "(connect_timeout=...)"),
        ({"connect_timeout": math.nan}, "(connect_timeout=...)"),
    ],
)
def test_psycopg_refuses_a_port_or_connect_timeout_at_the_call(
    kwargs: dict[str, Any], says: str
) -> None:
    pk = _module("poolkit.backends.psycopg")
    for name in ("create_pool", "create_async_pool", "connect", "async_connect"):
        _refused(partial(getattr(pk, name), "dbname=test", **kwargs), f"psycopg.{name}{says}")


def test_psycopg_ports_and_timeouts_libpq_takes_are_taken(pg: PgServer) -> None:
    pk = _module("poolkit.backends.psycopg")
    params = _pg_params(pg)
    ports = f"{params['port']},{params['port']}"
    with (
        pk.create_pool(
            pg.dsn,
            host=f"{params['host']},{params['host']}",
            port=ports,
            connect_timeout="5",
            min_size=1,
            application_name=pg.app,
        ) as pool,
        pool.connection() as conn,
    ):
        assert conn.execute("SELECT 1").fetchone() == (1,)


@pytest.mark.parametrize(
    ("kwargs", "says"),
    [
        ({"port": 70000}, "(port=...): an int from 1 to 65535, not 70000"),
        ({"port": [5432, 70000]}, "(port=...): an int from 1 to 65535, not 70000"),
        ({"timeout": -1}, "(timeout=...) must be seconds >= 0"),
        ({"timeout": "5"}, "(timeout=...)"),
        ({"command_timeout": -1}, "(command_timeout=...)"),
        ({"command_timeout": 0}, "(command_timeout=...) must be seconds > 0"),
        ({"close_timeout": math.nan}, "(close_timeout=...)"),
    ],
)
def test_asyncpg_refuses_a_port_or_timeout_at_the_call(kwargs: dict[str, Any], says: str) -> None:
    pk = _module("poolkit.backends.asyncpg")
    for name in ("create_pool", "async_connect"):
        _refused(
            partial(getattr(pk, name), "postgresql:///test", **kwargs), f"asyncpg.{name}{says}"
        )


def test_asyncpg_good_arguments_still_connect(pg: PgServer) -> None:
    pk = _module("poolkit.backends.asyncpg")

    async def main() -> None:
        async with (
            pk.create_pool(
                pg.dsn,
                min_size=1,
                timeout=30,
                command_timeout=5.5,
                close_timeout=timedelta(1),
                application_name=pg.app,
            ) as pool,
            pool.connection() as conn,
        ):
            assert await conn.fetchval("SELECT 1") == 1

    asyncio.run(main())


# ------------------------------------------------------------------ 8: the redis drop-in's timeout


@pytest.mark.parametrize("timeout", [-1, "5", math.nan, math.inf, True, timedelta(seconds=-1)])
def test_the_blocking_drop_ins_refuse_a_bad_timeout_at_construction(timeout: Any) -> None:
    pk = _module("poolkit.backends.redis")
    for cls in ("BlockingConnectionPool", "AsyncBlockingConnectionPool"):
        message = _refused(partial(getattr(pk, cls), timeout=timeout), f"{cls}(timeout=...)")
        assert "checkout" not in message


def test_the_blocking_drop_ins_take_a_good_timeout(redis_server: RedisServer) -> None:
    pk = _module("poolkit.backends.redis")
    redis_ = _module("redis")
    for timeout in (None, 0, 5, 2.5, timedelta(seconds=3)):
        pool = pk.BlockingConnectionPool.from_url(redis_server.url, timeout=timeout)
        client = redis_.Redis(connection_pool=pool)
        try:
            assert client.ping()
        finally:
            client.close()
            pool.close()

    async def main() -> None:
        for timeout in (None, 0, 5):
            pool = pk.AsyncBlockingConnectionPool.from_url(redis_server.url, timeout=timeout)
            client = _module("redis.asyncio").Redis(connection_pool=pool)
            try:
                assert await client.ping()
            finally:
                await client.aclose()
                await pool.aclose()

    asyncio.run(main())
