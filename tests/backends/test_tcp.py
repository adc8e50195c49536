"""poolkit.backends.tcp against real local servers: a threaded echo server (blocking sockets) and
an asyncio one (streams), plain and TLS with a self-signed certificate made here."""

from __future__ import annotations

import asyncio
import contextlib
import select
import socket
import ssl
import threading

import pytest

import poolkit
from certs import Cert, server_context, trusting
from echo_servers import echo_server, roundtrip, start_echo, stream_roundtrip
from poolkit.backends import tcp


def test_socket_options_and_echo() -> None:
    with echo_server() as (port, _):
        with contextlib.closing(tcp.open_socket("127.0.0.1", port)) as sock:
            assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) != 0
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
            assert sock.gettimeout() is None  # blocking once connected
            assert roundtrip(sock, b"hello") == b"hello"
        with contextlib.closing(
            tcp.open_socket("127.0.0.1", port, keepalive=False, nodelay=False, timeout=2.5)
        ) as sock:
            assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 0
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 0
            assert sock.gettimeout() == 2.5


def test_tls_verifies_by_default(cert: Cert) -> None:
    with echo_server(server_context(cert)) as (port, _):
        with pytest.raises(ssl.SSLCertVerificationError, match="self-signed"):
            tcp.open_socket("127.0.0.1", port, tls=True, server_hostname="localhost")
        with contextlib.closing(
            tcp.open_socket("127.0.0.1", port, tls=trusting(cert), server_hostname="localhost")
        ) as sock:
            assert isinstance(sock, ssl.SSLSocket) and sock.version() is not None
            assert roundtrip(sock, b"over tls") == b"over tls"
            tcp.check(sock)  # TLS 1.3 session tickets are not "unexpected data"
        with pytest.raises(ssl.SSLCertVerificationError, match="Hostname mismatch"):
            tcp.open_socket("127.0.0.1", port, tls=trusting(cert), server_hostname="other.test")


def test_connect_timeout_covers_the_tls_handshake() -> None:
    """A server that accepts but never answers the TLS handshake: the connect fails within
    connect_timeout."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    try:
        with pytest.raises(TimeoutError):
            tcp.open_socket("127.0.0.1", port, tls=True, connect_timeout=0.2)
    finally:
        listener.close()


def test_connect_timeout_covers_the_tcp_connect() -> None:
    """A server whose accept queue is full (listen(0), never accepting) drops further SYNs: the
    connect fails within connect_timeout."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    address = listener.getsockname()
    held: list[socket.socket] = []
    try:
        for _ in range(5):  # fill the queue: the first connect that times out shows it full
            filler = socket.socket()
            held.append(filler)
            filler.settimeout(0.2)
            try:
                filler.connect(address)
            except TimeoutError:
                break
        else:
            pytest.skip("this system's accept queue did not fill")
        with pytest.raises(TimeoutError):
            tcp.open_socket(*address, connect_timeout=0.2)
    finally:
        for filler in held:
            filler.close()
        listener.close()


def test_bad_tls_argument() -> None:
    with pytest.raises(TypeError, match=r"tls must be a bool or an ssl\.SSLContext"):
        tcp.connect("127.0.0.1", 1, tls="yes")


def test_check_and_is_broken_on_sockets() -> None:
    with echo_server() as (port, accepted):
        sock = tcp.open_socket("127.0.0.1", port, timeout=3.0)
        try:
            tcp.check(sock)
            assert sock.gettimeout() == 3.0  # restored
            assert not tcp.is_broken(sock, ValueError("not about the connection"))
            assert tcp.is_broken(sock, ConnectionResetError())
            assert tcp.is_broken(sock, TimeoutError())
            sock.sendall(b"x")  # an echo nobody reads: the protocol is out of step
            assert select.select([sock], [], [], 5)[0]  # (the echo has arrived)
            with pytest.raises(ConnectionError, match="unexpected data"):
                tcp.check(sock)
            assert sock.recv(1) == b"x"  # the check peeked, it did not read
            for conn in accepted:
                conn.shutdown(socket.SHUT_RDWR)
            assert select.select([sock], [], [], 5)[0]  # (the end of stream has arrived)
            with pytest.raises(ConnectionError, match="peer closed"):
                tcp.check(sock)
        finally:
            sock.close()
        assert tcp.is_broken(sock, ValueError())
        with pytest.raises(ConnectionError, match="socket is closed"):
            tcp.check(sock)


def test_pool_of_sockets_32_threads(cert: Cert) -> None:
    with echo_server(server_context(cert)) as (port, accepted):
        options = poolkit.PoolOptions(max_size=10, wait_queue_timeout=30)
        pool = tcp.create_pool(
            "127.0.0.1", port, options=options, tls=trusting(cert), server_hostname="localhost"
        )
        assert pool.options.hooks is not None and pool.options.hooks.check is tcp.check
        errors: list[BaseException] = []

        def work(n: int) -> None:
            try:
                for i in range(50):
                    with pool.connection() as sock:
                        message = f"{n}:{i};".encode()
                        assert roundtrip(sock, message) == message
            except BaseException as exc:  # (reported in the test's thread)
                errors.append(exc)

        with pool:
            threads = [threading.Thread(target=work, args=(n,)) for n in range(32)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            assert errors == []
            assert len(accepted) == pool.stats().connections_created <= 10
        assert pool.stats().total == 0


# ---------------------------------------------------------------------- asyncio streams


async def failed_check(connection: tcp.StreamConnection) -> ConnectionError:
    """The error of ``async_check`` once it fails (the loop reads a close a moment later)."""
    for _ in range(500):
        try:
            await tcp.async_check(connection)
        except ConnectionError as exc:
            return exc
        await asyncio.sleep(0.01)
    raise AssertionError(f"async_check never failed on {connection!r}")


def test_streams_options_tls_and_hooks(cert: Cert) -> None:
    async def main() -> None:
        server, port, writers = await start_echo(server_context(cert))
        try:
            with pytest.raises(ssl.SSLCertVerificationError):
                await tcp.open_stream("127.0.0.1", port, tls=True, server_hostname="localhost")
            connection = await tcp.open_stream(
                "127.0.0.1", port, tls=trusting(cert), server_hostname="localhost"
            )
            try:
                sock = connection.writer.get_extra_info("socket")
                assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) != 0
                assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
                assert "tls" in repr(connection)
                assert await stream_roundtrip(connection, b"hi") == b"hi"
                await tcp.async_check(connection)
                connection.writer.write(b"x")  # an echo nobody reads: out of step
                assert "unexpected data" in str(await failed_check(connection))
                assert await connection.reader.readexactly(1) == b"x"
                await tcp.async_check(connection)
                assert not tcp.is_broken(connection, ValueError())
                assert tcp.is_broken(connection, asyncio.IncompleteReadError(b"", 1))
                writers[-1].close()  # the server drops the connection
                assert "peer closed" in str(await failed_check(connection))
                assert tcp.is_broken(connection, ValueError())
            finally:
                await connection.aclose()
            assert connection.closed
        finally:
            server.close()
            await server.wait_closed()

    asyncio.run(main())


def test_stream_connect_timeout() -> None:
    async def main() -> None:
        listener = socket.create_server(("127.0.0.1", 0))  # accepts, never speaks TLS
        try:
            with pytest.raises(TimeoutError):
                await tcp.open_stream(
                    "127.0.0.1", listener.getsockname()[1], tls=True, connect_timeout=0.2
                )
        finally:
            listener.close()

    asyncio.run(main())


def test_async_pool_64_tasks_over_10_connections() -> None:
    async def main() -> None:
        server, port, writers = await start_echo()
        try:
            options = poolkit.PoolOptions(max_size=10, wait_queue_timeout=30)
            async with await tcp.create_async_pool("127.0.0.1", port, options=options) as pool:
                assert pool.options.hooks is not None
                assert pool.options.hooks.check is tcp.async_check

                async def work(n: int) -> list[bytes]:
                    out = []
                    for i in range(20):
                        async with pool.connection() as connection:
                            message = f"{n}:{i};".encode()
                            out.append(await stream_roundtrip(connection, message))
                    return out

                results = await asyncio.gather(*(work(n) for n in range(64)))
                assert results == [[f"{n}:{i};".encode() for i in range(20)] for n in range(64)]
                assert len(writers) == pool.stats().connections_created <= 10
            assert pool.stats().total == 0  # closed with aclose(): the server saw each leave
            for _ in range(100):
                if all(w.is_closing() for w in writers):
                    break
                await asyncio.sleep(0.01)
            assert all(w.is_closing() for w in writers)
        finally:
            server.close()
            await server.wait_closed()

    asyncio.run(main())


def test_create_async_pool_is_a_starter_like_every_async_builder() -> None:
    """``async with tcp.create_async_pool(...) as pool:`` (no ``await``) gives the ready pool
    and closes it at the end of the block, as every async builder's starter does; bad options
    fail at the call, before anything starts."""

    async def main() -> None:
        server, port, _ = await start_echo()
        try:
            async with tcp.create_async_pool("127.0.0.1", port) as pool:
                assert isinstance(pool, poolkit.AsyncPool)
                async with pool.connection() as connection:
                    assert await stream_roundtrip(connection, b"x;") == b"x;"
            assert pool.stats().state is poolkit.PoolState.CLOSED
        finally:
            server.close()
            await server.wait_closed()

    asyncio.run(main())
    with pytest.raises(TypeError, match=r"create_async_pool\(options=\.\.\.\)"):
        tcp.create_async_pool("127.0.0.1", 1, options={"max_size": 1})  # type: ignore[arg-type]


def _closed_port() -> int:
    """A port nobody listens on (bound, then let go: a connect to it is refused)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def test_the_builders_make_a_first_connection_and_fail_fast() -> None:
    """As every backend's builders: one connection made before the pool is returned, so that a
    peer nobody listens on fails the call (the pool closed), not the first checkout."""
    port = _closed_port()
    events: list[poolkit.events.PoolEvent] = []
    with pytest.raises(ConnectionRefusedError):
        tcp.create_pool("127.0.0.1", port, listeners=[events.append])
    assert isinstance(events[-1], poolkit.events.PoolClosedEvent)

    async def main() -> None:
        async_events: list[poolkit.events.PoolEvent] = []
        with pytest.raises(ConnectionRefusedError):
            await tcp.create_async_pool("127.0.0.1", port, listeners=[async_events.append])
        assert isinstance(async_events[-1], poolkit.events.PoolClosedEvent)
        server, live, _ = await start_echo()
        try:
            pool = await tcp.create_async_pool("127.0.0.1", live)
            assert pool.stats().total == 1  # (the first connection, made and parked)
            await pool.close()
        finally:
            server.close()
            await server.wait_closed()

    asyncio.run(main())
    with echo_server() as (live, _), tcp.create_pool("127.0.0.1", live) as pool:
        assert pool.stats().total == 1
