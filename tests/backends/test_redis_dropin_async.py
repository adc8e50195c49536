"""The drop-in pools for asyncio: ``AsyncConnectionPool`` / ``AsyncBlockingConnectionPool`` under
``redis.asyncio.Redis`` against a real Redis, each behaving as the redis-py class it replaces
(``redis.asyncio.ConnectionPool`` / ``BlockingConnectionPool``)."""

from __future__ import annotations

import asyncio
import gc
import weakref
from typing import Any

import pytest
import redis
import redis.asyncio

import poolkit
from poolkit.backends.redis import AsyncBlockingConnectionPool, AsyncConnectionPool
from services import RedisServer


def test_commands_pipeline_pubsub_and_64_tasks(redis_server: RedisServer) -> None:
    async def main() -> None:
        pool = AsyncBlockingConnectionPool.from_url(
            redis_server.url, max_connections=10, client_name=redis_server.name
        )
        assert isinstance(pool, redis.asyncio.BlockingConnectionPool)
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


def test_connection_pool_raises_at_once_blocking_pool_waits(redis_server: RedisServer) -> None:
    async def main() -> None:
        pool = AsyncConnectionPool.from_url(
            redis_server.url, max_connections=2, client_name=redis_server.name
        )
        blocking = AsyncBlockingConnectionPool.from_url(
            redis_server.url, max_connections=1, timeout=0.05, client_name=redis_server.name
        )
        assert repr(pool).startswith("<poolkit.backends._redis_dropin_async.ConnectionPool(")
        try:
            held = [await pool.get_connection(), await pool.get_connection()]
            with pytest.raises(redis.MaxConnectionsError, match="Too many connections"):
                await pool.get_connection()
            assert not pool.can_get_connection()
            await pool.release(held.pop())
            assert await redis.asyncio.Redis(connection_pool=pool).ping() is True

            taken = await blocking.get_connection()
            with pytest.raises(redis.ConnectionError, match="No connection available") as caught:
                await blocking.get_connection()
            assert not isinstance(caught.value, redis.MaxConnectionsError)
            assert isinstance(caught.value.__cause__, poolkit.WaitQueueTimeoutError)
            waiter = asyncio.create_task(asyncio.wait_for(blocking.get_connection(), 5))
            await asyncio.sleep(0.01)
            await blocking.release(taken)
            assert await waiter is taken
            await blocking.release(taken)
        finally:
            for connection in held:
                await pool.release(connection)
            await pool.aclose()
            await blocking.aclose()
        with pytest.raises(TypeError, match=r"use AsyncBlockingConnectionPool\(timeout=...\)"):
            AsyncConnectionPool(max_connections=2, timeout=5)
        for cls in (AsyncConnectionPool, AsyncBlockingConnectionPool):
            for given in (None, 0):
                unlimited = cls(max_connections=given)
                assert unlimited.max_connections == 100
                options = unlimited.poolkit_pool.options
                assert (options.max_size, options.max_connecting) == (100, 100)
                await unlimited.aclose()
            with pytest.raises(ValueError, match="max_connections"):
                cls(max_connections=-1)
        assert AsyncBlockingConnectionPool().timeout == 20

    asyncio.run(main())
    assert redis_server.wait_clients(0) == []


def test_aclose_disconnects_pubsub_and_connections_in_use(redis_server: RedisServer) -> None:
    """``client.aclose(close_connection_pool=True)`` leaves nothing connected, a pub/sub's
    connection included (it stayed connected until given back)."""

    async def main() -> None:
        pool = AsyncConnectionPool.from_url(redis_server.url, client_name=redis_server.name)
        client = redis.asyncio.Redis(connection_pool=pool)
        pubsub = client.pubsub()
        await pubsub.subscribe(f"{redis_server.name}:ch")
        assert (await pubsub.get_message(timeout=5))["type"] == "subscribe"
        held = await pool.get_connection()
        assert await client.ping() is True
        assert len(await asyncio.to_thread(redis_server.clients)) == 3
        await client.aclose(close_connection_pool=True)
        assert await asyncio.to_thread(redis_server.wait_clients, 0) == []
        assert not held.is_connected
        await pool.release(held)  # (given back after the close: closed)
        await pubsub.aclose()  # type: ignore[no-untyped-call]
        assert pool._pool is None
        assert await asyncio.to_thread(redis_server.clients) == []

    asyncio.run(main())


def test_dropped_pools_close_their_connections(redis_server: RedisServer) -> None:
    """Pools used and dropped without ``aclose()`` are collected and their poolkit pools closed
    on the loop (the poolkit pool's timer kept each alive, with its connections)."""

    async def main() -> None:
        pools = [
            AsyncConnectionPool.from_url(redis_server.url, client_name=redis_server.name)
            for _ in range(5)
        ]
        clients = [redis.asyncio.Redis(connection_pool=pool) for pool in pools]
        assert [await client.ping() for client in clients] == [True] * 5
        assert len(await asyncio.to_thread(redis_server.clients)) == 5
        refs = [weakref.ref(pool) for pool in pools]
        del clients, pools
        gc.collect()
        assert all(ref() is None for ref in refs)
        for _ in range(100):  # (the close tasks run on this loop)
            await asyncio.sleep(0.01)
            if not await asyncio.to_thread(redis_server.clients):
                break
        assert await asyncio.to_thread(redis_server.clients) == []

    asyncio.run(main())


def test_new_connections_are_made_at_once_and_connected_once(redis_server: RedisServer) -> None:
    """Six first ``get_connection()`` calls at once make six connections at once (two at a time
    never pass the barrier in their connects), each connected once."""

    async def main() -> None:
        gate = asyncio.Barrier(6)
        made: list[Any] = []

        class Gated(redis.asyncio.Connection):
            connects = 0

            async def connect(self) -> None:
                self.connects += 1
                if self.connects == 1:
                    made.append(self)
                    async with asyncio.timeout(10):
                        await gate.wait()
                await super().connect()  # type: ignore[no-untyped-call]

        pool = AsyncConnectionPool.from_url(
            redis_server.url,
            connection_class=Gated,
            max_connections=10,
            client_name=redis_server.name,
        )
        try:
            got = await asyncio.gather(*(pool.get_connection() for _ in range(6)))
            assert sorted(map(id, got)) == sorted(map(id, made))
            assert [c.connects for c in made] == [1] * 6
            for connection in got:
                await pool.release(connection)
            again = await pool.get_connection()  # (checked again, as redis-py checks it)
            await pool.release(again)
            assert again in made and again.connects == 2
        finally:
            await pool.aclose()

    asyncio.run(main())


def test_cancelled_pipeline_reset_gives_its_connection_back(redis_server: RedisServer) -> None:
    """A pipeline's ``reset()`` cancelled while ``UNWATCH`` runs still gives its connection back
    (redis-py's own test reads its private lists)."""

    async def main() -> None:
        pool = AsyncBlockingConnectionPool.from_url(
            redis_server.url, max_connections=2, client_name=redis_server.name
        )
        client = redis.asyncio.Redis(connection_pool=pool)
        try:
            pipe = client.pipeline()
            await pipe.watch(f"{redis_server.name}:a")
            assert pool.poolkit_pool.stats().in_use == 1
            leased = pipe.connection
            assert leased is not None
            started = asyncio.Event()

            async def hang(*args: Any, **kwargs: Any) -> None:
                started.set()
                await asyncio.sleep(60)

            real_read = leased.read_response
            leased.read_response = hang  # type: ignore[method-assign]
            task = asyncio.ensure_future(pipe.reset())  # type: ignore[no-untyped-call]
            await started.wait()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            leased.read_response = real_read  # type: ignore[method-assign]
            assert pipe.connection is None
            assert pool.poolkit_pool.stats().in_use == 0
            assert await client.ping() is True
        finally:
            await pool.aclose()

    asyncio.run(main())
