"""poolkit.backends.http2 against a real HTTP/2 server (hypercorn, serving an ASGI app on
127.0.0.1, h2c with prior knowledge and TLS with ALPN): many leases on one connection, the
server's stream limit obeyed, and what httpcore's pool gets wrong (its issues #80 and #248) done
right."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from certs import Cert, trusting

h2 = pytest.importorskip("h2", reason="poolkit[http2] is not installed")
hypercorn = pytest.importorskip("hypercorn", reason="the tests' HTTP/2 server is not installed")

import poolkit  # noqa: E402
from hypercorn.asyncio import serve  # noqa: E402
from hypercorn.config import Config  # noqa: E402
from poolkit.backends import http2  # noqa: E402

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


class App:
    """An ASGI app: ``/echo/...`` answers its path; ``/hold`` answers once ``release`` is set;
    ``/big?n=N`` answers N bytes. It notes each request's client (one per TCP connection)."""

    def __init__(self) -> None:
        self.clients: set[tuple[str, int]] = set()
        self.release = asyncio.Event()
        self.holding = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        self.clients.add(tuple(scope["client"]))
        path: str = scope["path"]
        body = b""
        while True:  # (the request's body)
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        if path == "/hold":
            self.holding += 1
            await self.release.wait()
            answer = b"held"
        elif path == "/big":
            answer = b"x" * int(scope["query_string"].decode().split("=")[1])
        elif path == "/upload":
            answer = str(len(body)).encode()
        else:
            answer = path.encode()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": answer})


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class Server:
    def __init__(self, app: App, *, streams: int = 100, cert: Cert | None = None) -> None:
        self.app = app
        self.port = _free_port()
        self.config = Config()
        self.config.bind = [f"127.0.0.1:{self.port}"]
        self.config.h2_max_concurrent_streams = streams
        self.config.accesslog = None
        self.config.errorlog = None
        if cert is not None:
            self.config.certfile = str(cert.cert)
            self.config.keyfile = str(cert.key)
            self.config.alpn_protocols = ["h2"]
        self.url = f"{'https' if cert else 'http'}://127.0.0.1:{self.port}"
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Server:
        self._task = asyncio.create_task(
            serve(self.app, self.config, shutdown_trigger=self._stop.wait)  # type: ignore[arg-type]
        )
        for _ in range(200):  # (up within a few ms; 2 s at most)
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", self.port)
            except OSError:
                await asyncio.sleep(0.01)
                continue
            writer.close()
            await writer.wait_closed()
            self.app.clients.clear()
            return self
        raise RuntimeError("hypercorn did not start")

    async def __aexit__(self, *exc: object) -> None:
        self._stop.set()
        assert self._task is not None
        await asyncio.wait_for(self._task, 10)


def run(main: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(asyncio.wait_for(main(), 60))  # type: ignore[arg-type]


@pytest.fixture
def app() -> App:
    return App()


async def _get(pool: poolkit.AsyncPool[http2.H2Connection], path: str) -> bytes:
    async with pool.connection() as conn:
        response = await conn.request("GET", path)
        assert response.status == 200
        return await response.aread()


def test_500_concurrent_requests_share_two_connections(app: App) -> None:
    async def main() -> None:
        async with Server(app) as server:
            async with http2.create_async_pool(server.url, max_size=2, keep_alive=None) as pool:
                bodies = await asyncio.gather(*(_get(pool, f"/echo/{i}") for i in range(500)))
                assert bodies == [f"/echo/{i}".encode() for i in range(500)]
                assert len(app.clients) <= 2
                assert pool.stats().connections_created <= 2

    run(main)


def test_100_concurrent_first_requests_open_one_connection(app: App) -> None:
    """httpcore's issue #80: concurrent first requests open a connection each. Here the pool's
    first connect covers them all: the server allows 100 streams on it."""

    async def main() -> None:
        async with Server(app) as server:
            async with http2.create_async_pool(server.url, max_size=10, keep_alive=None) as pool:
                bodies = await asyncio.gather(*(_get(pool, f"/echo/{i}") for i in range(100)))
                assert len(bodies) == 100
                assert len(app.clients) == 1
                assert pool.stats().connections_created == 1

    run(main)


def test_a_stream_limit_of_two_opens_a_second_connection(app: App) -> None:
    """httpcore's issue #248: with SETTINGS_MAX_CONCURRENT_STREAMS=2 and two long responses held
    open, a third request goes to a second connection (the pool has room), not onto a
    connection with no free stream."""

    async def main() -> None:
        async with Server(app, streams=2) as server:
            async with http2.create_async_pool(server.url, max_size=2, keep_alive=None) as pool:
                held = [asyncio.create_task(_get(pool, "/hold")) for _ in range(2)]
                while app.holding < 2:
                    await asyncio.sleep(0.01)
                assert pool.stats().connections_created == 1
                assert await asyncio.wait_for(_get(pool, "/echo/third"), 5) == b"/echo/third"
                assert pool.stats().connections_created == 2
                assert len(app.clients) == 2
                app.release.set()
                assert await asyncio.gather(*held) == [b"held", b"held"]

    run(main)


def test_at_max_size_the_request_waits_for_a_stream(app: App) -> None:
    async def main() -> None:
        async with Server(app, streams=2) as server:
            async with http2.create_async_pool(server.url, max_size=1, keep_alive=None) as pool:
                held = [asyncio.create_task(_get(pool, "/hold")) for _ in range(2)]
                while app.holding < 2:
                    await asyncio.sleep(0.01)
                third = asyncio.create_task(_get(pool, "/echo/third"))
                await asyncio.sleep(0.1)
                assert not third.done() and pool.stats().waiting == 1
                app.release.set()
                assert await asyncio.wait_for(third, 5) == b"/echo/third"
                await asyncio.gather(*held)
                assert pool.stats().connections_created == 1

    run(main)


def test_tls_with_alpn_h2(app: App, cert: Cert) -> None:
    async def main() -> None:
        async with Server(app, cert=cert) as server:
            url = server.url.replace("127.0.0.1", "localhost")
            starter = http2.create_async_pool(url, max_size=1, tls=trusting(cert), keep_alive=None)
            async with starter as pool:
                bodies = await asyncio.gather(*(_get(pool, f"/echo/{i}") for i in range(50)))
                assert bodies[7] == b"/echo/7"
                assert len(app.clients) == 1

    run(main)


def test_large_bodies_respect_flow_control(app: App) -> None:
    async def main() -> None:
        async with Server(app) as server:
            async with http2.create_async_pool(server.url, max_size=1, keep_alive=None) as pool:
                async with pool.connection() as conn:
                    response = await conn.request("GET", "/big?n=3000000")
                    assert len(await response.aread()) == 3_000_000
                async with pool.connection() as conn:
                    response = await conn.request("POST", "/upload", body=b"y" * 1_000_000)
                    assert await response.aread() == b"1000000"

                async def chunks() -> AsyncIterator[bytes]:
                    for _ in range(10):
                        yield b"z" * 100_000

                async with pool.connection() as conn:
                    response = await conn.request("POST", "/upload", body=chunks())
                    assert await response.aread() == b"1000000"

    run(main)


def test_keep_alive_pings_and_close_leaves_no_socket(app: App) -> None:
    async def main() -> None:
        async with Server(app) as server:
            pool = await http2.create_async_pool(server.url, max_size=1, keep_alive=0.05)
            assert await _get(pool, "/echo/a") == b"/echo/a"
            async with pool.connection() as conn:
                await conn.ping(timeout=5)
                held = conn
            await asyncio.sleep(0.3)  # (a few probes)
            assert pool.stats().connections_created == 1 and not held.closed
            await pool.close()
            assert held.closed

    run(main)
