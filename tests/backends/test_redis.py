"""poolkit.backends.redis against a real Redis server: connect functions, hooks, ready pools.

Tests that need the pools to run ``Hooks`` are in ``test_redis_hooks.py``, the lease contract
(the ``reset`` hook) and the builders' defaults in ``test_redis_session.py``; the drop-in
``ConnectionPool`` is in ``test_redis_dropin.py``. Every test names its connections uniquely
(``redis_server.name``) and finds them on the server with ``CLIENT LIST``.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import time
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest
import redis
import redis.asyncio

import poolkit
from poolkit.backends import redis as pk_redis
from poolkit.backends._extras import require
from poolkit.driver import with_default_hooks
from services import RedisServer


def test_missing_driver_names_the_extra() -> None:
    code = "import sys; sys.modules['redis'] = None; import poolkit.backends.redis"
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert run.returncode == 1
    assert "ImportError: poolkit.backends.redis needs redis: pip install 'poolkit[redis]'" in (
        run.stderr
    )
    with pytest.raises(ImportError, match=r"pip install 'poolkit\[redis\]'"):
        require("poolkit_no_such_driver", "redis", "redis")


def test_connection_kwargs_from_url_and_keywords() -> None:
    kwargs = pk_redis.connection_kwargs("redis://:pw@db.example:6380/2?client_name=x", db=5)
    assert kwargs == {"host": "db.example", "port": 6380, "db": 2, "password": "pw",
                      "client_name": "x"}  # fmt: skip
    assert pk_redis.connection_kwargs(host="h")["client_name"] == pk_redis.CLIENT_NAME
    assert pk_redis.connection_kwargs("rediss://h")["connection_class"] is redis.SSLConnection


def test_connect_makes_a_named_connected_client(redis_server: RedisServer) -> None:
    connect = pk_redis.connect(redis_server.url, client_name=redis_server.name)
    client = connect(poolkit.ConnectContext(1, redis_server.url, None, 0))
    try:
        # connected inside connect (before any command), named for CLIENT LIST
        assert len(redis_server.clients()) == 1
        assert client.client_getname() == redis_server.name
        pipe = client.pipeline()  # a pipeline goes over the same, one connection
        pipe.set(f"{redis_server.name}:k", "v")
        pipe.get(f"{redis_server.name}:k")
        assert pipe.execute() == [True, b"v"]
        assert len(redis_server.clients()) == 1
    finally:
        client.close()
    assert redis_server.wait_clients(0) == []


def test_connect_failure_raises_from_the_connect_function() -> None:
    connect = pk_redis.connect("redis://127.0.0.1:1/0")
    with pytest.raises(redis.ConnectionError):
        connect(poolkit.ConnectContext(1, "127.0.0.1:1", None, 0))


def test_hooks_on_a_killed_connection(redis_server: RedisServer) -> None:
    """ping succeeds on a live client; after CLIENT KILL it raises redis.ConnectionError (no
    retry), and is_broken says so whatever the error; the next command reconnects."""
    client = pk_redis.connect(redis_server.url, client_name=redis_server.name)(
        poolkit.ConnectContext(1, redis_server.url, None, 0)
    )
    try:
        pk_redis.ping(client)
        assert not pk_redis.is_broken(client, ValueError("not about the connection"))
        assert redis_server.kill_all() == 1
        with pytest.raises(redis.ConnectionError) as caught:
            pk_redis.ping(client)
        assert pk_redis.is_broken(client, caught.value)
        assert pk_redis.is_broken(client, ValueError("any error: the connection is gone"))
        assert redis_server.clients() == []
        assert client.ping() is True  # (as redis-py's pools: a command reconnects)
        assert len(redis_server.clients()) == 1
        assert not pk_redis.is_broken(client, ValueError())
    finally:
        client.close()


def test_pubsub_in_a_lease(redis_server: RedisServer) -> None:
    """Pub/sub on a leased client takes its one connection; PubSub.close() disconnects it
    (redis-py's doing) and the client's next command reconnects it."""
    options = poolkit.PoolOptions(max_size=1)
    with pk_redis.create_pool(
        redis_server.url, options=options, client_name=redis_server.name
    ) as pool:
        channel = f"{redis_server.name}:ch"
        with pool.connection() as r:
            pubsub = r.pubsub()  # type: ignore[no-untyped-call]
            pubsub.subscribe(channel)
            assert pubsub.get_message(timeout=5)["type"] == "subscribe"
            with pytest.raises(redis.ConnectionError, match="in use"):
                r.ping()  # (the subscription holds the connection)
            with redis_server.admin() as admin:
                assert admin.publish(channel, "hi") == 1
            message = pubsub.get_message(timeout=5)
            assert message is not None and message["data"] == b"hi"
            pubsub.close()
            assert r.ping() is True
        with pool.connection() as r:
            assert r.ping() is True
        assert len(redis_server.clients()) == 1


def test_is_broken_by_error_kind(redis_server: RedisServer) -> None:
    client = pk_redis.connect(redis_server.url, client_name=redis_server.name)(
        poolkit.ConnectContext(1, redis_server.url, None, 0)
    )
    try:
        for error in (redis.ConnectionError(), redis.TimeoutError(), TimeoutError()):
            assert pk_redis.is_broken(client, error)
        assert not pk_redis.is_broken(client, redis.ResponseError("WRONGTYPE"))
    finally:
        client.close()


def test_hooks_builders() -> None:
    hooks = pk_redis.hooks(check_after=0)
    assert (hooks.check, hooks.reset, hooks.is_broken, hooks.check_after) == (
        pk_redis.ping,
        pk_redis.reset,
        pk_redis.is_broken,
        0.0,
    )
    assert pk_redis.hooks(reset=False).reset is None
    assert (hooks.lend, pk_redis.async_hooks().lend) == (pk_redis.lend, pk_redis.async_lend)
    assert pk_redis.async_hooks(reset=False).reset is None
    assert pk_redis.async_hooks().reset is pk_redis.async_reset
    assert pk_redis.async_hooks().check is pk_redis.async_ping
    assert pk_redis.async_hooks().check_after == pk_redis.CHECK_AFTER
    assert pk_redis.keep_alive(30).probe is pk_redis.ping
    assert pk_redis.async_keep_alive(30).probe is pk_redis.async_ping
    own = poolkit.Hooks(is_broken=pk_redis.is_broken)
    assert with_default_hooks(poolkit.PoolOptions(hooks=own), hooks, "create_pool").hooks is own


def test_async_hooks_on_a_killed_connection(redis_server: RedisServer) -> None:
    async def main() -> None:
        connect = pk_redis.async_connect(redis_server.url, client_name=redis_server.name)
        client = await connect(poolkit.ConnectContext(1, redis_server.url, None, 0))
        try:
            assert len(redis_server.clients()) == 1
            await pk_redis.async_ping(client)
            assert not pk_redis.is_broken(client, ValueError())
            assert redis_server.kill_all() == 1
            with pytest.raises(redis.ConnectionError) as caught:
                await pk_redis.async_ping(client)
            assert pk_redis.is_broken(client, caught.value)
            assert pk_redis.is_broken(client, ValueError())
            assert await client.ping() is True
        finally:
            await client.aclose()

    asyncio.run(main())


def test_create_pool_32_threads_over_10_connections(redis_server: RedisServer) -> None:
    options = poolkit.PoolOptions(max_size=10, wait_queue_timeout=30)
    pool = pk_redis.create_pool(redis_server.url, options=options, client_name=redis_server.name)
    assert pool.state is poolkit.PoolState.READY
    assert pool.options.hooks is not None and pool.options.hooks.check is pk_redis.ping
    errors: list[BaseException] = []

    def work(n: int) -> None:
        key = f"{redis_server.name}:{n}"
        try:
            for i in range(50):
                with pool.connection() as r:
                    r.set(key, i)
                    assert r.get(key) == str(i).encode()
                    with r.pipeline() as pipe:  # MULTI/EXEC over the leased connection
                        pipe.incr(f"{key}:n")
                        pipe.get(key)
                        assert pipe.execute() == [i + 1, b"%d" % i]
        except BaseException as exc:  # (reported below, in the test's thread)
            errors.append(exc)

    with pool:
        threads = [threading.Thread(target=work, args=(n,)) for n in range(32)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert errors == []
        stats = pool.stats()
        assert stats.connections_created <= 10
        assert len(redis_server.clients()) == stats.total
    assert redis_server.wait_clients(0) == []  # close() left no connection on the server


def test_create_async_pool_64_tasks_over_10_connections(redis_server: RedisServer) -> None:
    options = poolkit.PoolOptions(max_size=10, wait_queue_timeout=30)

    async def main() -> None:
        async with await pk_redis.create_async_pool(
            redis_server.url, options=options, client_name=redis_server.name
        ) as pool:
            hooks = pool.options.hooks
            assert hooks is not None and hooks.check is pk_redis.async_ping

            async def work(n: int) -> list[Any]:
                key = f"{redis_server.name}:{n}"
                seen: list[Any] = []
                for i in range(20):
                    async with pool.connection() as r:
                        await r.set(key, i)
                        seen.append(await r.get(key))
                        async with r.pipeline() as pipe:
                            pipe.incr(f"{key}:n")
                            assert await pipe.execute() == [i + 1]
                return seen

            results = await asyncio.gather(*(work(n) for n in range(64)))
            assert results == [[str(i).encode() for i in range(20)]] * 64
            assert pool.stats().connections_created <= 10
            assert len(redis_server.clients()) == pool.stats().total

    asyncio.run(main())
    assert redis_server.wait_clients(0) == []  # close() left no connection on the server


def test_killed_connection_without_check_gives_one_clear_error(
    redis_server: RedisServer,
) -> None:
    """check off (no hooks): the caller sees one redis.ConnectionError; a lease discarded with it
    is replaced by a new connection for the next caller."""
    options = poolkit.PoolOptions(max_size=1, hooks=poolkit.Hooks())
    with pk_redis.create_pool(
        redis_server.url, options=options, client_name=redis_server.name
    ) as pool:
        with pool.connection() as r:
            r.ping()
        assert redis_server.kill_all() == 1
        lease = pool.checkout()
        with pytest.raises(redis.ConnectionError, match="Connection closed by server"):
            lease.connection.set("k", "v")
        lease.discard()
        with pool.connection() as r:
            assert r.ping() is True
        assert pool.stats().connections_closed == {"error": 1}


def test_keep_alive_probe_closes_a_killed_connection(redis_server: RedisServer) -> None:
    """KeepAlive(probe=ping): a connection the server killed fails its probe and is closed (the
    pools run keep-alive probes already)."""
    closed = threading.Event()

    def listen(event: object) -> None:
        if isinstance(event, poolkit.events.ConnectionClosedEvent):
            closed.set()

    options = poolkit.PoolOptions(
        max_size=2, min_size=1, keep_alive=pk_redis.keep_alive(0.05), hooks=poolkit.Hooks()
    )
    with pk_redis.create_pool(
        redis_server.url, options=options, listeners=[listen], client_name=redis_server.name
    ) as pool:
        assert len(redis_server.wait_clients(1)) == 1
        redis_server.kill_all()
        assert closed.wait(5.0)
        assert pool.stats().connections_closed == {"error": 1}
        deadline = time.monotonic() + 5
        while pool.stats().available < 1 and time.monotonic() < deadline:
            time.sleep(0.01)  # min_size refilled with a new connection
        with pool.connection() as r:
            assert r.ping() is True


def test_async_keep_alive_probe_closes_a_killed_connection(redis_server: RedisServer) -> None:
    async def main() -> None:
        closed = asyncio.Event()

        def listen(event: object) -> None:
            if isinstance(event, poolkit.events.ConnectionClosedEvent):
                closed.set()

        options = poolkit.PoolOptions(
            max_size=2,
            min_size=1,
            keep_alive=pk_redis.async_keep_alive(0.05),
            hooks=poolkit.Hooks(),
        )
        async with await pk_redis.create_async_pool(
            redis_server.url, options=options, listeners=[listen], client_name=redis_server.name
        ) as pool:
            assert len(await asyncio.to_thread(redis_server.wait_clients, 1)) == 1
            await asyncio.to_thread(redis_server.kill_all)
            await asyncio.wait_for(closed.wait(), 5.0)
            assert pool.stats().connections_closed == {"error": 1}
            async with pool.connection() as r:
                assert await r.ping() is True

    asyncio.run(main())
    assert redis_server.wait_clients(0) == []


def test_create_pool_from_keywords(redis_server: RedisServer) -> None:
    with pk_redis.create_pool(host="127.0.0.1", port=6379, client_name=redis_server.name) as pool:
        assert pool.address == "127.0.0.1:6379/0"
        with pool.connection() as r:
            assert r.client_getname() == redis_server.name


def test_pool_address_masks_a_url_password(redis_server: RedisServer) -> None:
    """(A server without a password takes any password for its ``default`` user.)"""
    parts = urlsplit(redis_server.url)
    if parts.password is None:
        netloc = f"default:s3cretPW@{parts.hostname}:{parts.port or 6379}"
        parts = parts._replace(netloc=netloc)
    password = parts.password
    assert password is not None
    with pk_redis.create_pool(urlunsplit(parts), client_name=redis_server.name) as pool:
        assert password not in repr(pool) and password not in pool.address
        assert pool.address.startswith("redis://default:***@")


def test_async_client_is_closed_with_aclose(redis_server: RedisServer) -> None:
    """The AsyncPool closes its clients with aclose(): no ResourceWarning (warnings are errors)
    and nothing left on the server."""

    async def main() -> None:
        pool = await pk_redis.create_async_pool(
            redis_server.url,
            options=poolkit.PoolOptions(min_size=3),
            client_name=redis_server.name,
        )
        async with pool:
            assert len(await asyncio.to_thread(redis_server.wait_clients, 3)) == 3
            async with pool.connection() as r:
                assert await r.ping() is True

    asyncio.run(main())
    assert redis_server.wait_clients(0) == []


def test_create_async_pool_is_a_starter_like_every_async_builder(
    redis_server: RedisServer,
) -> None:
    """``async with pk_redis.create_async_pool(...) as pool:`` (no ``await``) gives the ready
    pool and closes it, and its connections, at the end of the block; bad options fail at the
    call."""

    async def main() -> None:
        starter = pk_redis.create_async_pool(redis_server.url, client_name=redis_server.name)
        async with starter as pool:
            async with pool.connection() as r:
                assert await r.ping() is True
            assert len(redis_server.clients()) == 1
        assert pool.stats().state is poolkit.PoolState.CLOSED

    asyncio.run(main())
    assert redis_server.wait_clients(0) == []
    with pytest.raises(TypeError, match=r"create_async_pool\(options=\.\.\.\)"):
        pk_redis.create_async_pool(redis_server.url, options=3)  # type: ignore[arg-type]
