"""poolkit.mongodb.pools: pools made from a URI, and the hooks that keep a connection the
server closed while idle from being handed out (the audit's case: the first command after
the server closed its connections failed with a NetworkError)."""

from __future__ import annotations

import asyncio
import inspect
import socket
import time

import pytest

import poolkit
from lb_helpers import run
from poolkit import mongodb
from poolkit.mongodb.pools import async_check
from poolkit_sim_mongo import SimMongoServer, SimMongoSettings


def test_an_async_pool_from_a_uri_replaces_connections_the_server_closed() -> None:
    async def main() -> None:
        async with SimMongoServer(SimMongoSettings(services=2)) as server:
            hooks = mongodb.async_hooks(check_after=0)  # (checked before every hand-out)
            options = poolkit.PoolOptions(load_balanced=True, max_size=2, hooks=hooks)
            async with await mongodb.create_async_pool(server.uri, options=options) as pool:
                db = mongodb.AsyncMongoPool(pool)
                assert (await db.command("admin", {"ping": 1}))["ok"] == 1
                assert server.close_connections() == 1
                await asyncio.sleep(0.05)  # (the close reaches the client's transport)
                assert (await db.command("admin", {"ping": 1}))["ok"] == 1  # (a new one)
                stats = pool.stats()
                assert (stats.total, stats.connections_created) == (1, 2)
                assert stats.connections_closed.get("error", 0) == 1

    run(main)


def test_a_blocking_pool_from_a_uri_replaces_connections_the_server_closed() -> None:
    server = SimMongoServer(SimMongoSettings(services=2))
    with server.start_in_thread() as handle:
        uri = mongodb.parse_uri(f"mongodb://127.0.0.1:{handle.port}/?loadBalanced=true")
        options = poolkit.PoolOptions(load_balanced=True, hooks=mongodb.hooks(check_after=0))
        with mongodb.create_pool(uri, options=options) as pool:
            db = mongodb.MongoPool(pool)
            assert db.command("admin", {"ping": 1})["ok"] == 1
            assert handle.call(server.close_connections) == 1
            deadline = time.monotonic() + 5
            while handle.call(server.stats).connections_open and time.monotonic() < deadline:
                time.sleep(0.01)  # (the close is done on the server's thread)
            assert db.command("admin", {"ping": 1})["ok"] == 1  # (a new one)
            stats = pool.stats()
            assert (stats.connections_created, stats.connections_closed.get("error", 0)) == (2, 1)


def test_the_uris_pool_options_and_hooks_by_default() -> None:
    async def main() -> None:
        async with SimMongoServer(SimMongoSettings(services=1)) as server:
            uri = f"{server.uri}&maxPoolSize=3&minPoolSize=1"
            async with await mongodb.create_async_pool(uri) as pool:
                assert (pool.options.max_size, pool.options.min_size) == (3, 1)
                assert pool.options.load_balanced
                hooks = pool.options.hooks
                assert hooks is not None and hooks.check_after == 0.0
                assert hooks.check is async_check
        with pytest.raises(TypeError, match="uri: a connection string or a MongoURI"):
            await mongodb.create_async_pool(42)  # type: ignore[arg-type]

    run(main)


def test_a_network_error_in_the_block_discards_the_connection() -> None:
    async def main() -> None:
        async with (
            SimMongoServer(SimMongoSettings(services=1)) as server,
            await mongodb.create_async_pool(server.uri) as pool,
        ):
            server.fail_command("ping", close_connection=True)
            with pytest.raises(mongodb.NetworkError):
                async with pool.connection() as conn:
                    await conn.command("admin", {"ping": 1})
            stats = pool.stats()
            assert (stats.total, stats.in_use) == (0, 0)

    run(main)


def test_by_default_a_connection_the_server_closed_is_never_handed_out() -> None:
    """The audit's case, with the default hooks: the server closes every connection; each
    next command succeeds, on a new connection, and no service is cleared."""

    async def main() -> None:
        recorder: list[object] = []
        async with (
            SimMongoServer(SimMongoSettings(services=3)) as server,
            await mongodb.create_async_pool(server.uri, listeners=[recorder.append]) as pool,
        ):
            db = mongodb.AsyncMongoPool(pool)
            leases = [await pool.checkout() for _ in range(3)]  # (one per service)
            for lease in leases:
                lease.release()
            assert server.close_connections() == 3
            await asyncio.sleep(0.05)  # (the closes reach the client's transports)
            for _ in range(3):
                assert (await db.command("admin", {"ping": 1}))["ok"] == 1
            assert not [e for e in recorder if type(e).__name__ == "PoolClearedEvent"]

    run(main)


def test_create_async_pool_is_a_starter_like_every_async_builder() -> None:
    """``async with mongodb.create_async_pool(uri) as pool:`` (no ``await``) gives the ready
    pool and closes it at the end of the block; a bad URI fails at the call."""

    async def main() -> None:
        async with SimMongoServer() as server:
            async with mongodb.create_async_pool(server.uri) as pool:
                db = mongodb.AsyncMongoPool(pool)
                assert (await db.command("admin", {"ping": 1}))["ok"] == 1
            assert pool.stats().state is poolkit.PoolState.CLOSED

    run(main)
    with pytest.raises(TypeError, match="uri: a connection string or a MongoURI"):
        mongodb.create_async_pool(42)  # type: ignore[arg-type]


def test_connect_is_for_threads_and_async_connect_for_asyncio() -> None:
    """The backends' rule: ``connect``/``connect_uri`` give a blocking connect function (for
    :class:`poolkit.Pool`), ``async_connect``/``async_connect_uri`` an async one."""
    uri = mongodb.parse_uri("mongodb://127.0.0.1/?loadBalanced=true")
    for blocking in (mongodb.connect("127.0.0.1", 27017), mongodb.connect_uri(uri)):
        assert not inspect.iscoroutinefunction(blocking)
    for awaited in (mongodb.async_connect("127.0.0.1", 27017), mongodb.async_connect_uri(uri)):
        assert inspect.iscoroutinefunction(awaited)
    with pytest.raises(ValueError, match=r"async_connect\(port=\.\.\.\)"):
        mongodb.async_connect("127.0.0.1", 70000)
    with pytest.raises(ValueError, match=r"\bconnect\(port=\.\.\.\)"):
        mongodb.connect("127.0.0.1", 70000)


def test_the_builders_make_a_first_connection_and_fail_fast() -> None:
    """As every backend's builders: one connection (connect, hello) made before the pool is
    returned, so that a server nobody runs fails the call (the pool closed)."""
    with socket.socket() as sock:  # (a port nobody listens on)
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    uri = f"mongodb://127.0.0.1:{port}/?loadBalanced=true&connectTimeoutMS=2000"
    events: list[poolkit.events.PoolEvent] = []
    with pytest.raises(mongodb.HandshakeError):
        mongodb.create_pool(uri, listeners=[events.append])
    assert isinstance(events[-1], poolkit.events.PoolClosedEvent)

    async def main() -> None:
        async_events: list[poolkit.events.PoolEvent] = []
        with pytest.raises(mongodb.HandshakeError):
            await mongodb.create_async_pool(uri, listeners=[async_events.append])
        assert isinstance(async_events[-1], poolkit.events.PoolClosedEvent)
        async with (
            SimMongoServer(SimMongoSettings(services=1)) as server,
            mongodb.create_async_pool(server.uri) as pool,
        ):
            assert pool.stats().total == 1  # (the first connection, made and parked)

    run(main)
