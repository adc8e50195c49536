"""The tcp backend's hooks run by the pools, against real local echo servers: a connection the
server dropped is replaced by ``check`` before the caller sees it; without ``check``, the
caller's error has ``is_broken`` discard it."""

from __future__ import annotations

import asyncio
import select
import socket

import pytest

import poolkit
from echo_servers import echo_server, roundtrip, start_echo, stream_roundtrip
from poolkit.backends import tcp


def test_check_replaces_a_dropped_socket_unseen() -> None:
    with echo_server() as (port, accepted):
        options = poolkit.PoolOptions(max_size=1, hooks=tcp.hooks(check_after=0))
        with tcp.create_pool("127.0.0.1", port, options=options) as pool:
            with pool.connection() as sock:
                assert roundtrip(sock, b"a") == b"a"
                accepted[0].shutdown(socket.SHUT_RDWR)  # the server drops it
                assert select.select([sock], [], [], 5)[0]
            with pool.connection() as sock:  # checked: closed, a new one made
                assert roundtrip(sock, b"b") == b"b"
            assert pool.stats().connections_closed == {"error": 1}


def test_without_check_the_error_discards() -> None:
    with echo_server() as (port, accepted):
        options = poolkit.PoolOptions(max_size=1, hooks=poolkit.Hooks(is_broken=tcp.is_broken))
        with tcp.create_pool("127.0.0.1", port, options=options) as pool:
            with pool.connection() as sock:
                roundtrip(sock, b"a")
            accepted[0].shutdown(socket.SHUT_RDWR)
            with pytest.raises(ConnectionError), pool.connection() as sock:
                roundtrip(sock, b"b")
            assert pool.stats().connections_closed == {"error": 1}
            with pool.connection() as sock:
                assert roundtrip(sock, b"c") == b"c"


def test_async_check_replaces_a_dropped_stream_unseen() -> None:
    async def main() -> None:
        server, port, writers = await start_echo()
        try:
            options = poolkit.PoolOptions(max_size=1, hooks=tcp.async_hooks(check_after=0))
            async with await tcp.create_async_pool("127.0.0.1", port, options=options) as pool:
                async with pool.connection() as connection:
                    assert await stream_roundtrip(connection, b"a") == b"a"
                writers[0].close()
                for _ in range(500):  # (until the client's loop has read the close)
                    if connection.closed:
                        break
                    await asyncio.sleep(0.01)
                async with pool.connection() as connection:
                    assert await stream_roundtrip(connection, b"b") == b"b"
                assert pool.stats().connections_closed == {"error": 1}
        finally:
            server.close()
            await server.wait_closed()

    asyncio.run(main())
