"""The redis backend's hooks run by the pools, against a real Redis: a connection the server
killed is replaced by ``check`` before the caller sees it, or (check off) costs the caller one
clear error and is discarded by ``is_broken``."""

from __future__ import annotations

import asyncio
import time

import pytest
import redis

import poolkit
from poolkit.backends import redis as pk_redis
from services import RedisServer

ONE = poolkit.PoolOptions(max_size=1)
CHECK_ALWAYS = poolkit.PoolOptions(max_size=1, hooks=pk_redis.hooks(check_after=0))
CHECK_OFF = poolkit.PoolOptions(max_size=1, hooks=poolkit.Hooks(is_broken=pk_redis.is_broken))


def test_check_replaces_a_killed_connection_unseen(redis_server: RedisServer) -> None:
    with pk_redis.create_pool(
        redis_server.url, options=CHECK_ALWAYS, client_name=redis_server.name
    ) as pool:
        with pool.connection() as r:
            assert r.set(f"{redis_server.name}:k", "v") is True
        (before,) = redis_server.clients()
        assert redis_server.kill_all() == 1
        with pool.connection() as r:  # the PING before hand-out fails: a new connection
            assert r.get(f"{redis_server.name}:k") == b"v"
        (after,) = redis_server.clients()
        assert after["id"] != before["id"]
        stats = pool.stats()
        assert stats.connections_closed == {"error": 1} and stats.checkout_failures == {}


def test_default_hooks_check_connections_idle_past_check_after(redis_server: RedisServer) -> None:
    options = poolkit.PoolOptions(max_size=1, hooks=pk_redis.hooks(check_after=0.1))
    with pk_redis.create_pool(redis_server.url, options=options, client_name=redis_server.name) as (
        pool
    ):
        with pool.connection() as r:
            r.ping()
        redis_server.kill_all()
        time.sleep(0.2)  # idle past check_after: checked before hand-out
        with pool.connection() as r:
            assert r.ping() is True
        assert pool.stats().connections_closed == {"error": 1}


def test_without_check_one_clear_error_then_a_new_connection(redis_server: RedisServer) -> None:
    with pk_redis.create_pool(
        redis_server.url, options=CHECK_OFF, client_name=redis_server.name
    ) as pool:
        with pool.connection() as r:
            r.ping()
        assert redis_server.kill_all() == 1
        with (
            pytest.raises(redis.ConnectionError, match="Connection closed by server"),
            pool.connection() as r,
        ):
            r.ping()
        assert pool.stats().connections_closed == {"error": 1}  # is_broken: discarded
        with pool.connection() as r:  # the next caller gets a new connection
            assert r.ping() is True
        assert len(redis_server.clients()) == 1


def test_an_ordinary_error_keeps_the_connection(redis_server: RedisServer) -> None:
    with pk_redis.create_pool(
        redis_server.url, options=CHECK_OFF, client_name=redis_server.name
    ) as pool:
        with pool.connection() as r:
            r.set(f"{redis_server.name}:s", "x")
        with pytest.raises(redis.ResponseError), pool.connection() as r:
            r.lpush(f"{redis_server.name}:s", "y")  # WRONGTYPE: the connection is fine
        with pool.connection() as r:
            assert r.ping() is True
        assert pool.stats().connections_closed == {}


def test_async_check_replaces_a_killed_connection_unseen(redis_server: RedisServer) -> None:
    async def main() -> None:
        options = poolkit.PoolOptions(max_size=1, hooks=pk_redis.async_hooks(check_after=0))
        async with await pk_redis.create_async_pool(
            redis_server.url, options=options, client_name=redis_server.name
        ) as pool:
            async with pool.connection() as r:
                await r.ping()
            assert await asyncio.to_thread(redis_server.kill_all) == 1
            async with pool.connection() as r:
                assert await r.ping() is True
            assert pool.stats().connections_closed == {"error": 1}

    asyncio.run(main())
    assert redis_server.wait_clients(0) == []


def test_async_without_check_one_clear_error(redis_server: RedisServer) -> None:
    async def main() -> None:
        options = poolkit.PoolOptions(max_size=1, hooks=poolkit.Hooks(is_broken=pk_redis.is_broken))
        async with await pk_redis.create_async_pool(
            redis_server.url, options=options, client_name=redis_server.name
        ) as pool:
            async with pool.connection() as r:
                await r.ping()
            assert await asyncio.to_thread(redis_server.kill_all) == 1
            with pytest.raises(redis.ConnectionError):
                async with pool.connection() as r:
                    await r.ping()
            async with pool.connection() as r:
                assert await r.ping() is True
            assert pool.stats().connections_closed == {"error": 1}

    asyncio.run(main())


def test_async_timeout_mid_command_discards(redis_server: RedisServer) -> None:
    """A command cut short by ``asyncio.timeout`` may leave its reply unread: is_broken has the
    connection discarded (builtin TimeoutError)."""

    async def main() -> None:
        options = poolkit.PoolOptions(max_size=1, hooks=poolkit.Hooks(is_broken=pk_redis.is_broken))
        async with await pk_redis.create_async_pool(
            redis_server.url, options=options, client_name=redis_server.name
        ) as pool:
            with pytest.raises(TimeoutError):
                async with pool.connection() as r, asyncio.timeout(0.05):
                    await r.blpop([f"{redis_server.name}:empty"], timeout=2)
            assert pool.stats().connections_closed == {"error": 1}
            async with pool.connection() as r:
                assert await r.ping() is True

    asyncio.run(main())
