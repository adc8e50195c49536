"""poolkit.backends.http2 under trio (issue 41, point 4), against hypercorn serving an ASGI app on
trio in the same run (h2c with prior knowledge, and TLS with ALPN ``h2``): many tasks
multiplexed over few connections, the server's stream limit, GOAWAY and the pool recovering, a
request cancelled mid-stream by a trio cancel scope, the httpx transport under ``trio.run``, and
the pool's ``async with`` block ending with every connection closed and no task of the pool's
left. Real sockets on trio's real clock, each run bounded (``fail_after``)."""

from __future__ import annotations

import socket
import ssl
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from certs import Cert, trusting

pytest.importorskip("h2", reason="poolkit[http2] is not installed")
pytest.importorskip("hypercorn", reason="the tests' HTTP/2 server is not installed")
httpx = pytest.importorskip("httpx", reason="poolkit[http2] is not installed")

from hypercorn.config import Config  # noqa: E402
from hypercorn.trio import serve  # noqa: E402

import poolkit  # noqa: E402
from poolkit.backends import http2  # noqa: E402

#: seconds a run may take (real time: real sockets)
BOUND = 10.0
Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


class App:
    """An ASGI app on trio: ``/echo/...`` answers its path; ``/hold`` answers once ``release``
    is set; ``/slow`` sends its headers and a first chunk, then the rest once ``release`` is
    set, noting whether the client went away (``disconnects``). It notes each request's client
    (one per TCP connection)."""

    def __init__(self) -> None:
        self.clients: set[tuple[str, int]] = set()
        self.release = trio.Event()
        self.holding = 0
        self.disconnects = 0
        self.requests = 0
        self._changed = trio.Event()

    def _note(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    async def until(self, condition: Callable[[], bool]) -> None:
        """Until ``condition()`` holds (asked at each change of the app's counts)."""
        while not condition():
            await self._changed.wait()

    async def holding_at_least(self, count: int) -> None:
        await self.until(lambda: self.holding >= count)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        self.requests += 1
        self.clients.add(tuple(scope["client"]))
        path: str = scope["path"]
        body = b""
        while True:  # (the request's body)
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        if path == "/slow":
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"first", "more_body": True})
            if (await receive())["type"] == "http.disconnect":  # (waits for the client)
                self.disconnects += 1
                self._note()
            return
        if path == "/hold":
            self.holding += 1
            self._note()
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


@asynccontextmanager
async def hypercorn(
    app: App,
    *,
    streams: int = 100,
    cert: Cert | None = None,
    max_requests: int | None = None,
    port: int = 0,
    stop: trio.Event | None = None,
) -> AsyncIterator[str]:
    """hypercorn serving ``app`` on trio, on a free port of 127.0.0.1 (its socket made first,
    handed over by fd; ``port``: that one again), until the block ends or ``stop`` is set (a
    graceful shutdown: GOAWAY once a connection is idle); its URL."""
    listener = socket.create_server(("127.0.0.1", port))
    port = listener.getsockname()[1]
    config = Config()
    config.bind = [f"fd://{listener.detach()}"]
    config.h2_max_concurrent_streams = streams
    config.accesslog = None
    config.errorlog = None
    if max_requests is not None:
        config.keep_alive_max_requests = max_requests
        config.keep_alive_timeout = 0.2  # (how soon it drops the request it left: 5 s else)
    if cert is not None:
        config.certfile = str(cert.cert)
        config.keyfile = str(cert.key)
        config.alpn_protocols = ["h2"]
    stop = trio.Event() if stop is None else stop
    async with trio.open_nursery() as nursery:
        # (hypercorn types its app as its own ASGI protocols, which App does not name)
        await nursery.start(partial(serve, app, config, shutdown_trigger=stop.wait))  # type: ignore[arg-type]
        yield f"{'https' if cert else 'http'}://{'localhost' if cert else '127.0.0.1'}:{port}"
        stop.set()


def run(main: Callable[[], Awaitable[None]]) -> None:
    async def bounded() -> None:
        with trio.fail_after(BOUND):
            await main()

    trio.run(bounded)


def tasks_of_poolkit() -> list[str]:
    """The names of the tasks of this run that are poolkit's (its pools' and connections')."""
    names: list[str] = []

    def walk(task: Any) -> None:
        for nursery in task.child_nurseries:
            for child in nursery.child_tasks:
                if "poolkit" in child.name:
                    names.append(child.name)
                walk(child)

    walk(trio.lowlevel.current_root_task())
    return names


async def get(pool: poolkit.AsyncPool[http2.H2Connection], path: str) -> bytes:
    async with pool.connection() as conn:
        response = await conn.request("GET", path)
        assert response.status == 200
        return await response.aread()


def test_500_tasks_share_two_connections_and_the_block_ends_them_all() -> None:
    app = App()

    async def main() -> None:
        async with hypercorn(app) as url:
            made: list[http2.H2Connection] = []
            async with http2.create_async_pool(url, max_size=2, keep_alive=None) as pool:
                assert any(name.startswith("poolkit-conn-") for name in tasks_of_poolkit())
                bodies: dict[int, bytes] = {}

                async def one(i: int) -> None:
                    async with pool.connection() as conn:
                        if conn not in made:
                            made.append(conn)
                        response = await conn.request("GET", f"/echo/{i}")
                        bodies[i] = await response.aread()

                async with trio.open_nursery() as users:
                    for i in range(500):
                        users.start_soon(one, i)
                assert bodies == {i: f"/echo/{i}".encode() for i in range(500)}
                assert pool.stats().connections_created <= 2 and len(app.clients) <= 2
                assert pool.stats().in_use == 0
            # the block has ended: every connection closed, no task of the pool's left
            assert made and all(conn.closed for conn in made)
            assert pool.stats().total == 0
            assert tasks_of_poolkit() == []

    run(main)


def test_the_stream_limit_is_obeyed() -> None:
    """SETTINGS_MAX_CONCURRENT_STREAMS=2: at max_size=1 a third request waits for a stream; at
    max_size=2 it goes to a second connection."""
    app = App()

    async def main() -> None:
        async with hypercorn(app, streams=2) as url:
            async with (
                http2.create_async_pool(url, max_size=1, keep_alive=None) as one,
                http2.create_async_pool(url, max_size=2, keep_alive=None) as two,
                trio.open_nursery() as users,
            ):
                results: list[bytes] = []

                async def keep(pool: poolkit.AsyncPool[http2.H2Connection], path: str) -> None:
                    results.append(await get(pool, path))

                for _ in range(2):
                    users.start_soon(keep, one, "/hold")
                await app.holding_at_least(2)
                users.start_soon(keep, one, "/echo/third")
                await trio.testing.wait_all_tasks_blocked(0.05)
                assert results == [] and one.stats().waiting == 1
                assert one.stats().connections_created == 1
                for _ in range(2):
                    users.start_soon(keep, two, "/hold")
                await app.holding_at_least(4)
                assert await get(two, "/echo/beside") == b"/echo/beside"  # (not held up)
                assert two.stats().connections_created == 2
                app.release.set()
            assert sorted(results) == sorted([b"held"] * 4 + [b"/echo/third"])
            assert one.stats().connections_created == 1

    run(main)


def test_goaway_closes_the_connection_and_the_pool_goes_on() -> None:
    """hypercorn says GOAWAY at the request after ``keep_alive_max_requests`` on a connection,
    and drops that request with the connection (docs/http2.md: a stream below the GOAWAY's last
    id is lost with the connection, as the server left it): that request fails with
    ``ConnectionLostError``, and the next is served on a new connection, every time."""
    app = App()

    async def main() -> None:
        async with (
            hypercorn(app, max_requests=5) as url,
            http2.create_async_pool(url, max_size=2, keep_alive=None) as pool,
        ):
            outcomes: list[str] = []
            for i in range(23):
                try:
                    assert await get(pool, f"/echo/{i}") == f"/echo/{i}".encode()
                    outcomes.append("ok")
                except http2.ConnectionLostError:
                    outcomes.append("lost")
            assert outcomes == (["ok"] * 5 + ["lost"]) * 3 + ["ok"] * 5
            stats = pool.stats()
            assert stats.connections_created == 4 and len(app.clients) == 4, stats
            assert stats.total == 1 and stats.in_use == 0  # (the three the server left: closed)

    run(main)


async def serve_until(
    app: App, stop: trio.Event, port: int = 0, *, task_status: Any = trio.TASK_STATUS_IGNORED
) -> None:
    """hypercorn serving ``app`` until ``stop`` is set (then shut down gracefully); its URL
    given to ``nursery.start``."""
    async with hypercorn(app, port=port, stop=stop) as url:
        task_status.started(url)
        await stop.wait()


def test_a_server_that_shuts_down_and_the_pool_recovering() -> None:
    """hypercorn shut down (gracefully) closes the pool's idle connection: the pool is told by
    the connection's reader and closes it at once (never handed out again); once a server
    listens on the port again, the next request is served on a new connection."""
    app = App()

    async def main() -> None:
        async with trio.open_nursery() as servers:
            stop = trio.Event()
            url = await servers.start(serve_until, app, stop)
            async with http2.create_async_pool(url, max_size=1, keep_alive=None) as pool:
                assert await get(pool, "/echo/before") == b"/echo/before"
                stop.set()
                for _ in range(500):  # (the pool hears of it from the connection's reader)
                    if pool.stats().total == 0:
                        break
                    await trio.sleep(0.01)
                assert pool.stats().total == 0 and pool.stats().connections_created == 1
                again = trio.Event()
                port = int(url.rsplit(":", 1)[1])
                assert await servers.start(serve_until, App(), again, port) == url
                assert await get(pool, "/echo/back") == b"/echo/back"
                assert pool.stats().connections_created == 2
                again.set()

    run(main)


def test_large_bodies_respect_flow_control() -> None:
    """Bodies larger than the windows, both ways, and many at once (the writer task's buffer
    and ``drain``, the reader's acknowledgements as the caller reads)."""
    app = App()

    async def main() -> None:
        async with (
            hypercorn(app) as url,
            http2.create_async_pool(url, max_size=1, keep_alive=None) as pool,
        ):
            async with pool.connection() as conn:
                response = await conn.request("GET", "/big?n=3000000")
                assert len(await response.aread()) == 3_000_000

            async def chunks() -> AsyncIterator[bytes]:
                for _ in range(10):
                    yield b"z" * 100_000

            sizes: list[bytes] = []

            async def upload(body: bytes | None) -> None:
                async with pool.connection() as conn:
                    response = await conn.request("POST", "/upload", body=body or chunks())
                    sizes.append(await response.aread())

            async with trio.open_nursery() as users:
                for i in range(8):
                    users.start_soon(upload, b"y" * 1_000_000 if i % 2 else None)
            assert sizes == [b"1000000"] * 8
            assert pool.stats().connections_created == 1

    run(main)


def test_bodies_closed_unread_give_the_connection_its_window_back() -> None:
    """As on asyncio: the chunks of a body that came and were never read give the connection's
    flow-control window (16 MiB) their length back when the response is closed; else 17 bodies
    of 1 MiB closed unread would stall the connection and the 25th body would not come."""
    app = App()

    async def main() -> None:
        async with (
            hypercorn(app) as url,
            http2.create_async_pool(url, max_size=1, keep_alive=None) as pool,
            pool.connection() as conn,
        ):
            for _ in range(24):
                response = await conn.request("GET", "/big?n=1000000")
                with trio.fail_after(5):
                    while not response._stream.ended:  # noqa: ASYNC110 (no event)
                        await trio.sleep(0.001)
                await response.aclose()
            response = await conn.request("GET", "/big?n=1000000")
            with trio.fail_after(5):
                assert len(await response.aread()) == 1_000_000

    run(main)


def test_tls_with_alpn_h2(cert: Cert) -> None:
    app = App()

    async def main() -> None:
        async with hypercorn(app, cert=cert) as url:
            # the certificate: not trusted by the system's CAs (ssl's error, as on asyncio)
            with pytest.raises(ssl.SSLCertVerificationError, match="self-signed"):
                async with http2.create_async_pool(url, max_size=1, keep_alive=None):
                    pass
            starter = http2.create_async_pool(url, max_size=1, tls=trusting(cert), keep_alive=None)
            async with starter as pool, trio.open_nursery() as users:
                for i in range(50):
                    users.start_soon(get, pool, f"/echo/{i}")
            assert pool.stats().connections_created == 1 and len(app.clients) == 1
            assert app.requests == 50

    run(main)


def test_a_request_cancelled_mid_stream_resets_its_stream_only() -> None:
    app = App()

    async def main() -> None:
        async with (
            hypercorn(app) as url,
            http2.create_async_pool(url, max_size=1, keep_alive=None) as pool,
        ):
            async with pool.connection() as conn:
                first = conn
            with trio.CancelScope() as scope:
                async with pool.connection() as conn:
                    response = await conn.request("GET", "/slow")
                    try:
                        chunks = response.aiter_bytes()
                        assert await anext(chunks) == b"first"
                        scope.cancel()  # (mid-body: the rest never comes)
                        await anext(chunks)
                    finally:
                        await response.aclose()  # (under the cancelled scope: the reset goes)
            assert scope.cancelled_caught
            await app.until(lambda: app.disconnects == 1)  # the server saw the stream reset
            stats = pool.stats()
            assert stats.in_use == 0 and stats.available == 1 and stats.total == 1
            assert "streams=0" in repr(first) and not first.closed  # nothing left of it
            assert await get(pool, "/echo/after") == b"/echo/after"  # the same connection
            async with trio.open_nursery() as waiting:  # cancelled waiting for the headers
                waiting.start_soon(get, pool, "/hold")
                await app.holding_at_least(1)
                waiting.cancel_scope.cancel()
            assert app.holding == 1
            assert "streams=0" in repr(first) and not first.closed
            assert pool.stats().in_use == 0
            assert await get(pool, "/echo/again") == b"/echo/again"
            assert pool.stats().connections_created == 1 and len(app.clients) == 1
            app.release.set()

    run(main)


def test_the_httpx_transport_under_trio() -> None:
    """``httpx.AsyncClient(transport=http2.AsyncTransport(...))`` under ``trio.run``: the origin's
    pool runs in the transport's nursery, which the client's block opens and ends."""
    app = App()

    async def main() -> None:
        async with hypercorn(app) as url:
            transport = http2.AsyncTransport(max_size=2, keep_alive=None)
            async with httpx.AsyncClient(transport=transport, base_url=url) as client:
                responses: dict[int, Any] = {}

                async def one(i: int) -> None:
                    responses[i] = await client.get(f"/echo/{i}")

                async with trio.open_nursery() as users:
                    for i in range(200):
                        users.start_soon(one, i)
                assert {i: r.text for i, r in responses.items()} == {
                    i: f"/echo/{i}" for i in range(200)
                }
                assert responses[7].http_version == "HTTP/2"
                pool = transport.pool(url)
                assert pool.stats().connections_created <= 2 and len(app.clients) <= 2

                # a response given up mid-body under a cancel scope: its stream reset, the
                # connection serves on
                with trio.CancelScope() as scope:
                    async with client.stream("GET", "/slow") as response:
                        async for chunk in response.aiter_bytes():
                            assert chunk == b"first"
                            scope.cancel()  # (mid-body: the rest never comes)
                assert scope.cancelled_caught
                await app.until(lambda: app.disconnects == 1)
                assert pool.stats().in_use == 0
                made = pool.stats().connections_created
                assert (await client.get("/echo/after")).text == "/echo/after"
                assert pool.stats().connections_created == made
            # the client's block has ended: the pool closed, no task of poolkit's left
            assert pool.stats().total == 0 and pool.stats().state is poolkit.PoolState.CLOSED
            assert tasks_of_poolkit() == []

    run(main)


def test_the_httpx_transport_under_trio_needs_its_clients_block() -> None:
    async def main() -> None:
        client = httpx.AsyncClient(transport=http2.AsyncTransport())
        with pytest.raises(RuntimeError, match=r"AsyncTransport.pool\(\) under trio: .*async with"):
            await client.get("http://127.0.0.1:9/")
        await client.aclose()

    run(main)


def test_keep_alive_pings_and_a_slow_answer_times_out_alone() -> None:
    """The keep-alive PING under trio, and httpx's read timeout: a server slow to answer (but
    alive: it answers the PING sent half-way) times that request out only; the connection
    serves on."""
    app = App()

    async def main() -> None:
        async with hypercorn(app) as url:
            # (a PING every 0.05 s on an idle connection, each given 5 s to be answered)
            probe = poolkit.KeepAlive(0.05, http2.async_ping, timeout=5)
            options = poolkit.PoolOptions(max_size=1, keep_alive=probe)
            seen: list[Any] = []
            starter = http2.create_async_pool(url, options=options, listeners=[seen.append])
            async with starter as pool:
                async with pool.connection() as conn:
                    await conn.ping(timeout=5)
                    held = conn
                await trio.sleep(0.3)  # (a few probes, each answered)
                stats = pool.stats()
                assert stats.connections_created == 1 and stats.total == 1 and not held.closed
                succeeded = [
                    e for e in seen if isinstance(e, poolkit.events.KeepAliveSucceededEvent)
                ]
                assert len(succeeded) >= 2  # (PINGs sent and answered under trio)
            assert held.closed

            transport = http2.AsyncTransport(max_size=1, keep_alive=None)
            async with httpx.AsyncClient(transport=transport, base_url=url) as client:
                with pytest.raises(httpx.ReadTimeout):
                    await client.get("/hold", timeout=httpx.Timeout(5, read=1.0))
                assert (await client.get("/echo/next")).text == "/echo/next"
                assert transport.pool(url).stats().connections_created == 1
                app.release.set()

    run(main)


def test_a_lease_still_out_when_the_block_ends(monkeypatch: pytest.MonkeyPatch) -> None:
    """The block's end waits for a connection still leased (its reader is a task of the pool's
    nursery) at most ``CLOSE_TIMEOUT``, then cancels its tasks; given back after the block, the
    connection is closed with its plain ``close()`` (no nursery left for ``aclose``)."""
    from poolkit import _trio as pool_trio

    monkeypatch.setattr(pool_trio, "CLOSE_TIMEOUT", 0.3)
    app = App()

    async def main() -> None:
        async with hypercorn(app) as url:
            async with http2.create_async_pool(url, max_size=1, keep_alive=None) as pool:
                lease = await pool.checkout()
                conn = lease.connection
                began = trio.current_time()
            assert trio.current_time() - began < 5  # (bounded by CLOSE_TIMEOUT, not hung)
            assert tasks_of_poolkit() == []
            lease.release()  # (no RuntimeError: H2Connection has a plain close too)
            assert conn.closed and pool.stats().total == 0
            with pytest.raises(http2.RequestNotSentError):
                await conn.request("GET", "/echo/late")

    run(main)


def test_on_asyncio_the_backend_does_not_import_trio() -> None:
    support = str(Path(__file__).parent.parent / "support")
    code = textwrap.dedent(
        f"""
        import asyncio, sys
        sys.path.insert(0, {support!r})
        import httpx
        from h2_server import H2Server
        from poolkit.backends import http2

        async def main():
            async with H2Server() as server:
                async with http2.create_async_pool(server.url, max_size=1, keep_alive=None) as pool:
                    async with pool.connection() as conn:
                        response = await conn.request("GET", "/echo/x")
                        assert await response.aread() == b"/echo/x"
                transport = http2.AsyncTransport(max_size=1, keep_alive=None)
                async with httpx.AsyncClient(transport=transport) as client:
                    assert (await client.get(server.url + "/echo/y")).text == "/echo/y"

        asyncio.run(main())
        imported = [name for name in sys.modules if "trio" in name]
        assert not imported, imported
        """
    )
    done = subprocess.run(
        [sys.executable, "-W", "error", "-c", code], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr


def test_the_connections_timer_under_trio() -> None:
    """``_trio.Loop``, the connection's ``call_later`` under trio (its half-way PINGs): calls in
    order of their time, a cancelled one never made, and the cancelled ones dropped from its
    heap once they are half of it (one per read that was answered in time). On trio's
    MockClock: virtual time."""
    from frontends import run_trio
    from poolkit.backends.http2 import _trio as h2_trio

    async def main() -> None:
        loop = h2_trio.Loop()
        made: list[tuple[str, float]] = []

        def note(what: str) -> None:
            made.append((what, loop.time()))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(loop.run)
            start = loop.time()
            loop.call_later(2, note, "b")
            loop.call_later(1, note, "a")
            loop.call_later(1.5, note, "never").cancel()
            for _ in range(100):  # (reads answered in time: their PINGs cancelled)
                loop.call_later(60, note, "never").cancel()
            loop.call_later(3, note, "c")
            assert len(loop._due) < 10  # the cancelled ones dropped
            await trio.sleep(5)
            nursery.cancel_scope.cancel()
        assert [(what, when - start) for what, when in made] == [("a", 1), ("b", 2), ("c", 3)]

    run_trio(main)
