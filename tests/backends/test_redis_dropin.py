"""The drop-in pools for threads: redis-py's own clients run their commands, pipelines and pub/sub
through ``poolkit.backends.redis.ConnectionPool`` / ``BlockingConnectionPool`` against a real
Redis, and each behaves as the redis-py class it replaces (the asyncio twins are in
``test_redis_dropin_async.py``, redis-py's observability in ``test_redis_dropin_observability.py``).
"""

from __future__ import annotations

import gc
import threading
import weakref
from typing import Any

import pytest
import redis

import poolkit
from poolkit.backends.redis import BlockingConnectionPool, ConnectionPool
from services import RedisServer


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
    pool = BlockingConnectionPool.from_url(
        redis_server.url, max_connections=10, client_name=redis_server.name
    )
    assert isinstance(pool, redis.BlockingConnectionPool) and isinstance(pool, ConnectionPool)
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


def test_connection_pool_raises_at_once_when_every_connection_is_out(
    redis_server: RedisServer,
) -> None:
    """redis-py's ``ConnectionPool`` never waits: with ``max_connections`` out it raises
    ``MaxConnectionsError`` (the drop-in waited 20 s, as a ``BlockingConnectionPool``)."""
    pool = ConnectionPool.from_url(
        redis_server.url, max_connections=2, client_name=redis_server.name
    )
    try:
        held = [pool.get_connection(), pool.get_connection()]
        with pytest.raises(redis.MaxConnectionsError, match="Too many connections"):
            pool.get_connection()
        with pytest.raises(redis.MaxConnectionsError):
            redis.Redis(connection_pool=pool).ping()
        pool.release(held.pop())
        assert redis.Redis(connection_pool=pool).ping() is True  # (the one given back)
        assert pool.poolkit_pool.stats().connections_created == 2
        with pytest.raises(TypeError, match=r"use BlockingConnectionPool\(timeout=...\)"):
            ConnectionPool(max_connections=2, timeout=5)
    finally:
        pool.close()


def test_blocking_pool_waits_out_its_timeout(redis_server: RedisServer) -> None:
    pool = BlockingConnectionPool.from_url(
        redis_server.url, max_connections=1, timeout=0.05, client_name=redis_server.name
    )
    assert (pool.max_connections, pool.timeout) == (1, 0.05)
    assert BlockingConnectionPool().timeout == 20  # (redis-py's default)
    try:
        pool.poolkit_pool.checkout(timeout=10).release()  # (connected within the timeout)
        held = pool.get_connection()
        with pytest.raises(redis.ConnectionError, match="No connection available") as caught:
            redis.Redis(connection_pool=pool).ping()
        assert not isinstance(caught.value, redis.MaxConnectionsError)
        assert isinstance(caught.value.__cause__, poolkit.WaitQueueTimeoutError)
        pool.timeout = 0  # (redis-py: no wait for a connection to come back)
        with pytest.raises(redis.ConnectionError, match="No connection available"):
            pool.get_connection()
        pool.release(held)
        pool.release(held)  # released twice, or not ours: nothing happens (as in redis-py)
        assert redis.Redis(connection_pool=pool).ping() is True
    finally:
        pool.close()


@pytest.mark.parametrize("cls", [ConnectionPool, BlockingConnectionPool])
def test_max_connections_as_redis_py_reads_it(cls: type[ConnectionPool]) -> None:
    """``None`` and ``0`` are redis-py's default of 100 (the pool refused ``None``, and took
    ``0`` as no limit while reporting 100); a negative number is redis-py's ValueError."""
    for given in (None, 0):
        pool = cls(max_connections=given)
        try:
            assert pool.max_connections == 100
            options = pool.poolkit_pool.options
            assert (options.max_size, options.max_connecting) == (100, 100)
        finally:
            pool.close()
    with pytest.raises(ValueError, match="max_connections"):
        cls(max_connections=-1)


def test_default_limit_is_kept(redis_server: RedisServer) -> None:
    """``max_connections=0``: 100 connections out, and the 101st is refused, as redis-py's."""
    pool = ConnectionPool.from_url(
        redis_server.url, max_connections=0, client_name=redis_server.name
    )
    held: list[Any] = []
    try:
        for _ in range(100):
            held.append(pool.get_connection())
        with pytest.raises(redis.MaxConnectionsError):
            pool.get_connection()
        assert len(redis_server.clients()) == 100
        assert pool.poolkit_pool.stats().total == 100
    finally:
        pool.close()
    assert redis_server.wait_clients(0) == []


def test_close_disconnects_connections_in_use(redis_server: RedisServer) -> None:
    """``close()`` disconnects every connection, in use or not, as redis-py's: a pub/sub left
    subscribed does not keep its connection."""
    pool = ConnectionPool.from_url(
        redis_server.url, max_connections=4, client_name=redis_server.name
    )
    client = redis.Redis(connection_pool=pool)
    held = pool.get_connection()
    pubsub = client.pubsub()  # type: ignore[no-untyped-call]
    pubsub.subscribe(f"{redis_server.name}:ch")
    assert pubsub.get_message(timeout=5)["type"] == "subscribe"
    assert client.ping() is True
    assert len(redis_server.clients()) == 3
    pool.close()
    assert redis_server.wait_clients(0) == []
    assert not held.is_connected
    pool.release(held)  # given back after the close: closed by the closed poolkit pool
    pubsub.close()
    assert client.ping() is True  # a new poolkit pool, as redis-py's pools stay usable
    pool.close()
    assert redis_server.wait_clients(0) == []


def test_dropped_pools_close_their_connections(redis_server: RedisServer) -> None:
    """Pools used and dropped without ``close()`` are collected and close their connections, as
    redis-py's (the poolkit pool's timer thread kept each alive, with its connections)."""
    pools = [
        ConnectionPool.from_url(redis_server.url, max_connections=2, client_name=redis_server.name)
        for _ in range(5)
    ]
    clients = [redis.Redis(connection_pool=pool) for pool in pools]
    assert all(client.ping() for client in clients)
    assert len(redis_server.clients()) == 5
    refs = [weakref.ref(pool) for pool in pools]
    del clients, pools
    gc.collect()
    assert all(ref() is None for ref in refs)
    assert redis_server.wait_clients(0) == []


def test_new_connections_are_made_at_once_and_connected_once(redis_server: RedisServer) -> None:
    """Six first ``get_connection()`` calls at once make six connections at once, as redis-py
    (the pool made two at a time), and each new connection's ``connect()`` runs once (it ran
    twice). The connects wait for each other at a barrier: two at a time never pass it."""
    gate = threading.Barrier(6, timeout=10)
    made: list[Any] = []

    class Gated(redis.Connection):
        connects = 0

        def connect(self) -> None:
            self.connects += 1
            if self.connects == 1:
                made.append(self)
                gate.wait()
            super().connect()  # type: ignore[no-untyped-call]

    pool = ConnectionPool.from_url(
        redis_server.url, connection_class=Gated, max_connections=10, client_name=redis_server.name
    )
    got: list[Any] = []
    errors: list[BaseException] = []

    def take() -> None:
        try:
            got.append(pool.get_connection())
        except BaseException as exc:  # (reported in the test's thread)
            errors.append(exc)

    threads = [threading.Thread(target=take) for _ in range(6)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert errors == []
        assert sorted(map(id, got)) == sorted(map(id, made))
        assert [c.connects for c in made] == [1] * 6
        for connection in got:
            pool.release(connection)
        assert [c.connects for c in made] == [1] * 6
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


def test_errors_at_connect_and_in_commands_leave_nothing_connected(
    redis_server: RedisServer,
) -> None:
    """A connect that fails (``SELECT`` of a db the server lacks) reaches the caller and leaves no
    connection; a pipeline whose connection broke under ``WATCH`` gives it back (reconnected by
    redis-py's ``UNWATCH``) (redis-py's own tests check these on its private lists)."""
    kwargs = redis.connection.parse_url(redis_server.url)  # type: ignore[no-untyped-call]
    bad = ConnectionPool(**{**kwargs, "db": 9999}, client_name=redis_server.name)
    try:
        with pytest.raises(redis.RedisError):
            redis.Redis(connection_pool=bad).ping()
        assert bad.poolkit_pool.stats().total == 0
        assert redis_server.wait_clients(0) == []
    finally:
        bad.close()
    pool = ConnectionPool.from_url(redis_server.url, client_name=redis_server.name)
    client = redis.Redis(connection_pool=pool)
    try:
        pipe = client.pipeline()
        pipe.watch(f"{redis_server.name}:k")  # type: ignore[no-untyped-call]
        assert redis_server.kill_all() == 1
        with pytest.raises(redis.WatchError, match="ConnectionError"):  # (redis-py's)
            pipe.get(f"{redis_server.name}:k")
        assert pipe.connection is None  # (given back by redis-py's pipeline)
        stats = pool.poolkit_pool.stats()
        assert (stats.in_use, stats.total) == (0, 1)
        assert len(redis_server.clients()) == 1
        assert client.ping() is True
    finally:
        pool.close()


def test_disconnect_keeps_the_pool_usable_and_close_reopens(redis_server: RedisServer) -> None:
    pool = ConnectionPool.from_url(
        redis_server.url, max_connections=3, client_name=redis_server.name
    )
    client = redis.Redis(connection_pool=pool)
    assert client.ping() is True
    held = pool.get_connection()
    pool.disconnect(inuse_connections=False)
    assert len(redis_server.wait_clients(1)) == 1 and held.is_connected  # only the idle one
    pool.disconnect()
    assert redis_server.wait_clients(0) == [] and not held.is_connected
    pool.release(held)
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
    pool = BlockingConnectionPool(
        max_connections=5,
        timeout=None,
        options=poolkit.PoolOptions(max_size=99, min_size=2, max_connecting=1),
        listeners=[events.append],
        host="127.0.0.1",
        client_name=redis_server.name,
    )
    try:
        pk = pool.poolkit_pool
        options = pk.options
        assert (options.max_size, options.max_connecting, options.min_size) == (5, 5, 2)
        assert options.wait_queue_timeout is None
        assert pk.address == "127.0.0.1:6379/0"
        assert len(redis_server.wait_clients(2)) == 2  # min_size filled in the background
        encoder: Any = pool.get_encoder()
        assert encoder.encode("x") == b"x"
        assert pool.connection_kwargs["client_name"] == redis_server.name
        assert "client_name" in repr(pool) and "BlockingConnectionPool" in repr(pool)
        connection = pool.get_connection()
        assert len(pool._get_in_use_connections()) == 1
        retry = redis.retry.Retry(redis.backoff.NoBackoff(), 2)
        pool.set_retry(retry)
        assert connection.retry is retry
        pool.release(connection)
        assert any(isinstance(e, poolkit.events.ConnectionCheckedOutEvent) for e in events)
    finally:
        pool.close()
    with pytest.raises(TypeError, match=r"options=...\) must be a poolkit.PoolOptions"):
        ConnectionPool(options={"max_size": 2})  # type: ignore[arg-type]
