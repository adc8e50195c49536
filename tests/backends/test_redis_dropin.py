"""The drop-in pools: redis-py's own clients run their commands, pipelines and pub/sub through
``poolkit.backends.redis.ConnectionPool`` / ``AsyncConnectionPool`` against a real Redis."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest
import redis
import redis.asyncio

import poolkit
from conftest import RedisServer
from poolkit.backends.redis import AsyncConnectionPool, ConnectionPool


def test_client_commands_pipeline_and_pubsub(redis_server: RedisServer) -> None:
    pool = ConnectionPool.from_url(
        redis_server.url, max_connections=4, client_name=redis_server.name
    )
    assert isinstance(pool, redis.ConnectionPool)
    client = redis.Redis(connection_pool=pool)
    key = f"{redis_server.name}:k"
    assert client.set(key, "v") is True
    assert client.get(key) == b"v"
    with client.pipeline() as pipe:  # MULTI/EXEC on one connection from the pool
        pipe.incr(f"{key}:n")
        pipe.incr(f"{key}:n")
        pipe.get(key)
        assert pipe.execute() == [1, 2, b"v"]
    with client.pipeline() as pipe:  # WATCH holds its connection until the transaction ends
        pipe.watch(f"{key}:n")  # type: ignore[no-untyped-call]
        value = int(pipe.get(f"{key}:n") or 0)
        pipe.multi()
        pipe.set(f"{key}:n", value * 10)
        assert pipe.execute() == [True]
    assert client.get(f"{key}:n") == b"20"
    pubsub = client.pubsub()  # type: ignore[no-untyped-call]
    pubsub.subscribe(f"{key}:ch")
    assert pubsub.get_message(timeout=5)["type"] == "subscribe"
    assert client.publish(f"{key}:ch", "hello") == 1
    message = pubsub.get_message(timeout=5)
    assert message is not None and message["data"] == b"hello"
    pubsub.close()  # its connection, disconnected by pub/sub's reset, is discarded
    stats = pool.poolkit_pool.stats()
    assert stats.in_use == 0 and stats.connections_closed == {"error": 1}
    assert client.get(key) == b"v"
    assert all(c["name"] == redis_server.name for c in redis_server.clients())
    pool.close()
    assert redis_server.wait_clients(0) == []


def test_32_threads_share_one_client(redis_server: RedisServer) -> None:
    pool = ConnectionPool.from_url(
        redis_server.url, max_connections=10, client_name=redis_server.name
    )
    client = redis.Redis(connection_pool=pool)
    errors: list[BaseException] = []

    def work(n: int) -> None:
        try:
            for i in range(100):
                key = f"{redis_server.name}:{n}"
                client.set(key, i)
                assert client.get(key) == str(i).encode()
                client.incr(f"{redis_server.name}:total")
        except BaseException as exc:  # (reported in the test's thread)
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(32)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert client.get(f"{redis_server.name}:total") == b"3200"
    assert pool.poolkit_pool.stats().connections_created <= 10
    with pool:  # redis-py's pools close on leaving `with`
        pass
    assert redis_server.wait_clients(0) == []


def test_timeout_raises_redis_connection_error(redis_server: RedisServer) -> None:
    pool = ConnectionPool.from_url(
        redis_server.url, max_connections=1, timeout=0.05, client_name=redis_server.name
    )
    try:
        pool.poolkit_pool.checkout(timeout=10).release()  # (connected within the timeout)
        held = pool.get_connection()
        with pytest.raises(redis.ConnectionError, match="No connection available") as caught:
            redis.Redis(connection_pool=pool).ping()
        assert isinstance(caught.value.__cause__, poolkit.WaitQueueTimeoutError)
        pool.release(held)
        pool.release(held)  # released twice, or not ours: nothing happens (as in redis-py)
        assert redis.Redis(connection_pool=pool).ping() is True
    finally:
        pool.close()


def test_server_killed_connections(redis_server: RedisServer) -> None:
    """Idle connections the server killed are reconnected at hand-out (redis-py's check for
    unread data); one killed while out fails its command and is discarded when given back."""
    pool = ConnectionPool.from_url(
        redis_server.url, max_connections=2, client_name=redis_server.name
    )
    client = redis.Redis(connection_pool=pool)
    try:
        assert client.ping() is True
        assert redis_server.kill_all() == 1
        assert client.ping() is True  # the idle connection was found dead and reconnected
        connection = pool.get_connection()
        redis_server.kill_all()
        connection.send_command("PING")
        with pytest.raises(redis.ConnectionError):
            connection.read_response()
        connection.disconnect()
        pool.release(connection)
        assert pool.poolkit_pool.stats().connections_closed == {"error": 1}
        assert client.ping() is True
    finally:
        pool.close()


def test_disconnect_keeps_the_pool_usable_and_close_reopens(redis_server: RedisServer) -> None:
    pool = ConnectionPool.from_url(
        redis_server.url, max_connections=3, client_name=redis_server.name
    )
    client = redis.Redis(connection_pool=pool)
    assert client.ping() is True
    pool.disconnect()
    assert redis_server.wait_clients(0) == []
    assert client.ping() is True  # reconnected at hand-out
    first = pool.poolkit_pool
    pool.close()
    assert first.state is poolkit.PoolState.CLOSED
    assert redis_server.wait_clients(0) == []
    assert client.ping() is True  # as redis-py's pools, usable after close(): a new poolkit pool
    assert pool.poolkit_pool is not first
    pool.close()
    assert redis_server.wait_clients(0) == []


def test_options_and_interface(redis_server: RedisServer) -> None:
    events: list[Any] = []
    pool = ConnectionPool(
        max_connections=5,
        timeout=None,
        options=poolkit.PoolOptions(max_size=99, min_size=2),
        listeners=[events.append],
        host="127.0.0.1",
        client_name=redis_server.name,
    )
    try:
        pk = pool.poolkit_pool
        assert (pk.options.max_size, pk.options.min_size, pk.options.wait_queue_timeout) == (
            5,
            2,
            None,
        )
        assert pk.address == "127.0.0.1:6379/0"
        assert len(redis_server.wait_clients(2)) == 2  # min_size filled in the background
        deadline = time.monotonic() + 5
        while pk.stats().available < 2 and time.monotonic() < deadline:
            time.sleep(0.01)  # (seen by the server a moment before the connect returns)
        encoder: Any = pool.get_encoder()
        assert encoder.encode("x") == b"x"
        assert pool.connection_kwargs["client_name"] == redis_server.name
        assert "client_name" in repr(pool)
        connection = pool.get_connection()
        assert len(pool._get_in_use_connections()) == 1
        assert len(pool._get_free_connections()) == 1
        assert [count for count, _ in pool.get_connection_count()] == [1, 1]
        retry = redis.retry.Retry(redis.backoff.NoBackoff(), 2)
        pool.set_retry(retry)
        assert connection.retry is retry
        pool.release(connection)
        assert any(isinstance(e, poolkit.events.ConnectionCheckedOutEvent) for e in events)
    finally:
        pool.close()


def test_async_client_commands_pipeline_pubsub_and_64_tasks(redis_server: RedisServer) -> None:
    async def main() -> None:
        pool = AsyncConnectionPool.from_url(
            redis_server.url, max_connections=10, client_name=redis_server.name
        )
        assert isinstance(pool, redis.asyncio.ConnectionPool)
        client = redis.asyncio.Redis(connection_pool=pool)
        key = f"{redis_server.name}:k"
        assert await client.set(key, "v") is True
        assert await client.get(key) == b"v"
        async with client.pipeline() as pipe:
            pipe.incr(f"{key}:n")
            pipe.get(key)
            assert await pipe.execute() == [1, b"v"]
        pubsub = client.pubsub()
        await pubsub.subscribe(f"{key}:ch")
        assert (await pubsub.get_message(timeout=5))["type"] == "subscribe"
        assert await client.publish(f"{key}:ch", "hello") == 1
        message = await pubsub.get_message(timeout=5)
        assert message is not None and message["data"] == b"hello"
        await pubsub.aclose()  # type: ignore[no-untyped-call]

        async def work(n: int) -> list[Any]:
            seen = []
            for i in range(20):
                await client.set(f"{key}:{n}", i)
                seen.append(await client.get(f"{key}:{n}"))
            return seen

        results = await asyncio.gather(*(work(n) for n in range(64)))
        assert results == [[str(i).encode() for i in range(20)]] * 64
        stats = pool.poolkit_pool.stats()
        assert stats.connections_created <= 11 and stats.in_use == 0  # (+1: pub/sub's, closed)
        assert len(redis_server.clients()) == stats.total
        await pool.aclose()
        assert await asyncio.to_thread(redis_server.wait_clients, 0) == []
        assert await client.ping() is True  # a new poolkit pool after aclose(), as redis-py
        await pool.disconnect()
        await pool.aclose()
        await client.aclose()

    asyncio.run(main())
    assert redis_server.wait_clients(0) == []


def test_async_timeout_and_killed_connection(redis_server: RedisServer) -> None:
    async def main() -> None:
        pool = AsyncConnectionPool.from_url(
            redis_server.url, max_connections=1, timeout=0.05, client_name=redis_server.name
        )
        client = redis.asyncio.Redis(connection_pool=pool)
        try:
            (await pool.poolkit_pool.checkout(timeout=10)).release()
            held = await pool.get_connection()
            with pytest.raises(redis.ConnectionError, match="No connection available"):
                await client.ping()
            await pool.release(held)
            assert await client.ping() is True
            assert await asyncio.to_thread(redis_server.kill_all) == 1
            # redis-py's asyncio check at hand-out may not see the close (it looks at what the
            # stream received, and not at all with RESP3's maintenance notifications on): then
            # the command fails once, and its connection is discarded when given back
            try:
                await client.ping()
            except redis.ConnectionError:
                assert pool.poolkit_pool.stats().connections_closed == {"error": 1}
            assert await client.ping() is True
        finally:
            await pool.aclose()

    asyncio.run(main())
    assert redis_server.wait_clients(0) == []
