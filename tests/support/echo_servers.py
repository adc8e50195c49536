"""Echo servers on 127.0.0.1 for the tcp backend's tests: one on threads (blocking sockets), one
on asyncio, plain or TLS; and a round trip through each."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
import threading
from collections.abc import Iterator

from poolkit.backends import tcp


@contextlib.contextmanager
def echo_server(context: ssl.SSLContext | None = None) -> Iterator[tuple[int, list[socket.socket]]]:
    """A threaded echo server on 127.0.0.1: (port, the server's accepted sockets)."""
    listener = socket.create_server(("127.0.0.1", 0))
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def serve(conn: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := conn.recv(65536):
                conn.sendall(data)
        conn.close()

    def accept() -> None:
        listener.settimeout(0.05)  # (close() does not wake a blocked accept(): poll ``stop``)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            conn.settimeout(None)
            if context is not None:
                try:
                    conn = context.wrap_socket(conn, server_side=True)
                except (OSError, ssl.SSLError):
                    conn.close()
                    continue
            accepted.append(conn)
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1], accepted
    finally:
        stop.set()
        thread.join(5)
        listener.close()
        for conn in accepted:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
            conn.close()


def roundtrip(sock: socket.socket, message: bytes) -> bytes:
    sock.sendall(message)
    got = b""
    while len(got) < len(message):
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("closed")
        got += chunk
    return got


async def start_echo(
    context: ssl.SSLContext | None = None,
) -> tuple[asyncio.Server, int, list[asyncio.StreamWriter]]:
    writers: list[asyncio.StreamWriter] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writers.append(writer)
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except OSError:
            pass
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()

    server = await asyncio.start_server(serve, "127.0.0.1", 0, ssl=context)
    return server, server.sockets[0].getsockname()[1], writers


async def stream_roundtrip(connection: tcp.StreamConnection, message: bytes) -> bytes:
    connection.writer.write(message)
    await connection.writer.drain()
    return await connection.reader.readexactly(len(message))
