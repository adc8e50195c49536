"""poolkit.backends.tcp under trio (issue 41, point 4): trio's sockets and TLS, against a trio
echo server in the same run (plain, and TLS with the session's self-signed certificate); and the
asyncio functions, called under trio, saying so at the call. Real sockets on the real clock,
each run bounded (``fail_after``): no sleeps."""

from __future__ import annotations

import socket
import ssl
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

import pytest
import trio

import poolkit
from certs import Cert, server_context, trusting
from poolkit.backends import tcp

#: seconds a run may take (real time: real sockets)
BOUND = 20.0


async def echo(stream: trio.abc.Stream, streams: list[trio.abc.Stream]) -> None:
    streams.append(stream)
    try:
        while data := await stream.receive_some(65536):
            await stream.send_all(data)
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        pass


async def serve(
    nursery: trio.Nursery, context: ssl.SSLContext | None = None
) -> tuple[int, list[trio.abc.Stream]]:
    """An echo server on a free port of 127.0.0.1; its port and the streams it accepted."""
    streams: list[trio.abc.Stream] = []
    handler: Callable[[Any], Awaitable[None]] = partial(echo, streams=streams)
    if context is None:
        listeners = await nursery.start(partial(trio.serve_tcp, handler, 0, host="127.0.0.1"))
    else:
        listeners = await nursery.start(
            partial(trio.serve_ssl_over_tcp, handler, 0, context, host="127.0.0.1")
        )
    listener = getattr(listeners[0], "transport_listener", listeners[0])  # (TLS: the TCP one)
    return listener.socket.getsockname()[1], streams


async def roundtrip(connection: tcp.TrioStreamConnection, data: bytes) -> bytes:
    await connection.stream.send_all(data)
    got = b""
    while len(got) < len(data):
        got += await connection.stream.receive_some(len(data) - len(got))
    return got


def run(main: Callable[[], Awaitable[None]]) -> None:
    async def bounded() -> None:
        with trio.fail_after(BOUND):
            await main()

    trio.run(bounded)


def test_a_pool_of_trio_streams_64_tasks_over_10_connections() -> None:
    async def main() -> None:
        async with trio.open_nursery() as servers:
            port, _ = await serve(servers)
            options = poolkit.PoolOptions(max_size=10)
            async with tcp.create_trio_pool("127.0.0.1", port, options=options) as pool:
                assert pool.stats().total == 1  # the builder's first connection

                async def user(i: int) -> None:
                    for j in range(5):
                        async with pool.connection() as connection:
                            data = f"{i}-{j}".encode()
                            assert await roundtrip(connection, data) == data

                async with trio.open_nursery() as users:
                    for i in range(64):
                        users.start_soon(user, i)
                stats = pool.stats()
                assert stats.total <= 10 and stats.checkouts == 321 and stats.in_use == 0
                made = stats.connections_created
            assert pool.stats().total == 0 and made <= 10
            servers.cancel_scope.cancel()

    run(main)


def test_trio_streams_options_tls_and_hooks(cert: Cert) -> None:
    async def main() -> None:
        async with trio.open_nursery() as servers:
            port, _ = await serve(servers, server_context(cert))
            with pytest.raises(trio.BrokenResourceError):  # (the certificate: not trusted)
                await tcp.open_trio_stream("127.0.0.1", port, tls=True, server_hostname="localhost")
            connection = await tcp.open_trio_stream(
                "127.0.0.1", port, tls=trusting(cert), server_hostname="localhost"
            )
            sock = connection.socket_stream.socket
            assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) != 0
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
            assert "tls" in repr(connection)
            assert await roundtrip(connection, b"hi") == b"hi"
            await tcp.trio_check(connection)
            assert not tcp.is_broken(connection, ValueError())
            assert tcp.is_broken(connection, trio.BrokenResourceError())
            await connection.aclose()
            assert connection.closed
            assert tcp.is_broken(connection, ValueError())
            with pytest.raises(ConnectionError, match="closed"):
                await tcp.trio_check(connection)
            servers.cancel_scope.cancel()

    run(main)


async def failed_check(connection: tcp.TrioStreamConnection) -> str:
    """The error of the first ``trio_check`` that fails (within 5 s), as a string."""
    with trio.fail_after(5):
        while True:
            try:
                await tcp.trio_check(connection)
            except ConnectionError as exc:
                return str(exc)
            await trio.sleep(0.001)


def test_trio_check_on_plain_tcp_finds_a_closed_peer_and_bytes_out_of_step() -> None:
    async def main() -> None:
        async with trio.open_nursery() as servers:
            port, accepted = await serve(servers)
            connection = await tcp.open_trio_stream("127.0.0.1", port)
            assert repr(connection).startswith("<TrioStreamConnection peer=")
            await tcp.trio_check(connection)  # healthy: nothing read
            await connection.stream.send_all(b"x")  # an echo nobody reads: out of step
            assert "unexpected data" in await failed_check(connection)  # (once the echo is back)
            assert await connection.stream.receive_some(1) == b"x"  # (the peek read nothing)
            await tcp.trio_check(connection)
            await accepted[-1].aclose()  # the server drops the connection
            assert "peer closed" in await failed_check(connection)
            await connection.aclose()
            servers.cancel_scope.cancel()

    run(main)


def test_trio_connect_timeout_covers_the_tls_handshake() -> None:
    async def main() -> None:
        listener = socket.create_server(("127.0.0.1", 0))  # accepts, never speaks TLS
        with listener:
            port = listener.getsockname()[1]
            with pytest.raises(TimeoutError, match=r"not connected in 0\.2 s"):
                await tcp.open_trio_stream("127.0.0.1", port, tls=True, connect_timeout=0.2)

    run(main)


def test_the_asyncio_functions_under_trio_say_so_at_the_call() -> None:
    async def main() -> None:
        with pytest.raises(RuntimeError, match=r"tcp.open_stream: .* asyncio only.*trio"):
            await tcp.open_stream("127.0.0.1", 9)
        with pytest.raises(RuntimeError, match=r"tcp.create_async_pool: .*create_trio_pool"):
            async with tcp.create_async_pool("127.0.0.1", 9):
                pass
        connect = tcp.async_connect("127.0.0.1", 9)
        with pytest.raises(RuntimeError, match=r"tcp.async_connect: .*trio_connect"):
            await connect(poolkit.ConnectContext(1, "127.0.0.1:9", None, 0))

    run(main)


def test_a_trio_builder_awaited_without_async_with_is_told_how() -> None:
    async def main() -> None:
        async with trio.open_nursery() as servers:
            port, _ = await serve(servers)
            with pytest.raises(RuntimeError, match=r"async with builder\(\.\.\.\) as pool"):
                await tcp.create_trio_pool("127.0.0.1", port)
            servers.cancel_scope.cancel()

    run(main)
