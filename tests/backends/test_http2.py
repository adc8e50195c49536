"""poolkit.backends.http2 against a real HTTP/2 server (hypercorn, serving an ASGI app on
127.0.0.1, h2c with prior knowledge and TLS with ALPN): many leases on one connection, the
server's stream limit obeyed, and what httpcore's pool gets wrong (its issues #80 and #248) done
right."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from certs import Cert, trusting

h2_errors = pytest.importorskip("h2.errors", reason="poolkit[http2] is not installed")
hypercorn = pytest.importorskip("hypercorn", reason="the tests' HTTP/2 server is not installed")
httpx = pytest.importorskip("httpx", reason="poolkit[http2] is not installed")

from hypercorn.asyncio import serve  # noqa: E402
from hypercorn.config import Config  # noqa: E402

import poolkit  # noqa: E402
from h2_server import H2Server  # noqa: E402
from poolkit import events as ev  # noqa: E402
from poolkit.backends import http2  # noqa: E402
from poolkit.driver import PoolStarter  # noqa: E402

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
        self._held = asyncio.Condition()

    async def holding_at_least(self, count: int) -> None:
        """Until ``count`` requests are held at ``/hold``."""
        async with self._held:
            await self._held.wait_for(lambda: self.holding >= count)

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
            async with self._held:
                self.holding += 1
                self._held.notify_all()
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
        # (hypercorn types its app as its own ASGI protocols, which App does not name)
        served = serve(self.app, self.config, shutdown_trigger=self._stop.wait)  # type: ignore[arg-type]
        self._task = asyncio.create_task(served)
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
    asyncio.run(asyncio.wait_for(main(), 60))


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
        async with (
            Server(app) as server,
            http2.create_async_pool(server.url, max_size=2, keep_alive=None) as pool,
        ):
            bodies = await asyncio.gather(*(_get(pool, f"/echo/{i}") for i in range(500)))
            assert bodies == [f"/echo/{i}".encode() for i in range(500)]
            assert len(app.clients) <= 2
            assert pool.stats().connections_created <= 2

    run(main)


def test_100_concurrent_first_requests_open_one_connection(app: App) -> None:
    """httpcore's issue #80: concurrent first requests open a connection each. Here the pool's
    first connect covers them all: the server allows 100 streams on it."""

    async def main() -> None:
        async with (
            Server(app) as server,
            http2.create_async_pool(server.url, max_size=10, keep_alive=None) as pool,
        ):
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
        async with (
            Server(app, streams=2) as server,
            http2.create_async_pool(server.url, max_size=2, keep_alive=None) as pool,
        ):
            held = [asyncio.create_task(_get(pool, "/hold")) for _ in range(2)]
            await app.holding_at_least(2)
            assert pool.stats().connections_created == 1
            assert await asyncio.wait_for(_get(pool, "/echo/third"), 5) == b"/echo/third"
            assert pool.stats().connections_created == 2
            assert len(app.clients) == 2
            app.release.set()
            assert await asyncio.gather(*held) == [b"held", b"held"]

    run(main)


def test_at_max_size_the_request_waits_for_a_stream(app: App) -> None:
    async def main() -> None:
        async with (
            Server(app, streams=2) as server,
            http2.create_async_pool(server.url, max_size=1, keep_alive=None) as pool,
        ):
            held = [asyncio.create_task(_get(pool, "/hold")) for _ in range(2)]
            await app.holding_at_least(2)
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
        async with (
            Server(app) as server,
            http2.create_async_pool(server.url, max_size=1, keep_alive=None) as pool,
        ):
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


async def _body_arrived(response: http2.Response) -> None:
    """Until the whole body of ``response`` came (unread: queued on its stream), 5 s at most."""
    async with asyncio.timeout(5):
        while not response._stream.ended:  # noqa: ASYNC110 (the reader's mark, no event)
            await asyncio.sleep(0.001)


@pytest.mark.parametrize("reader", [False, True], ids=["unread", "reader-cancelled"])
def test_bodies_closed_unread_give_the_connection_its_window_back(app: App, reader: bool) -> None:
    """A response closed before its body is read (a caller done with the headers, or a task
    reading it cancelled between two chunks, then the response closed, as ``async with`` does):
    the chunks taken were given back as they were taken, and the ones that came and were never
    read owe the connection's flow-control window (16 MiB) their length. Not given back, 17
    bodies of 1 MiB closed unread stall every later stream on the connection (the server may
    send no more DATA); given back, the 25th body comes."""

    async def read(response: http2.Response, took: asyncio.Event) -> None:
        async for _chunk in response.aiter_bytes():
            took.set()
            await asyncio.sleep(10)  # (a slow consumer: cancelled here)

    async def main() -> None:
        async with (
            Server(app) as server,
            http2.create_async_pool(server.url, max_size=1, keep_alive=None) as pool,
            pool.connection() as conn,
        ):
            for _ in range(24):
                response = await conn.request("GET", "/big?n=1000000")
                await _body_arrived(response)
                if reader:
                    took = asyncio.Event()
                    task = asyncio.create_task(read(response, took))
                    await took.wait()
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await task
                await response.aclose()
            response = await conn.request("GET", "/big?n=1000000")
            async with asyncio.timeout(5):
                assert len(await response.aread()) == 1_000_000

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


# ---------------------------------------------------------------------------------------------
# what hypercorn does not do on demand: a small h2 server (tests/support/h2_server.py)


class Recorder:
    """The pool's events, and a wait for one of a kind."""

    def __init__(self) -> None:
        self.events: list[Any] = []
        self._seen = asyncio.Condition()

    def __call__(self, event: Any) -> None:
        self.events.append(event)
        asyncio.get_running_loop().create_task(self._tell())

    async def _tell(self) -> None:
        async with self._seen:
            self._seen.notify_all()

    async def seen(self, kind: type[Any]) -> Any:
        async with self._seen:
            await self._seen.wait_for(lambda: any(isinstance(e, kind) for e in self.events))
        return next(e for e in self.events if isinstance(e, kind))


def _pool(url: str, recorder: Recorder, max_size: int) -> PoolStarter[http2.H2Connection]:
    options = poolkit.PoolOptions(max_size=max_size, expected_streams=http2.EXPECTED_STREAMS)
    return http2.create_async_pool(url, options=options, listeners=[recorder])


async def _until(condition: Callable[[], bool]) -> None:
    async with asyncio.timeout(5):
        while not condition():  # noqa: ASYNC110  # (a state of another task's socket)
            await asyncio.sleep(0.005)


def test_the_server_lowering_its_stream_limit_is_obeyed() -> None:
    async def main() -> None:
        recorder = Recorder()
        async with H2Server(streams=10) as server, _pool(server.url, recorder, 2) as pool:
            held = [asyncio.create_task(_get(pool, "/hold")) for _ in range(3)]
            await _until(lambda: server.held() == 3)
            server.set_max_streams(2)
            changed = await recorder.seen(ev.MaxStreamsChangedEvent)
            assert (changed.previous, changed.max_streams) == (10, 2)
            # 3 streams in use on a connection that now allows 2: the next request goes elsewhere
            assert await _get(pool, "/echo/next") == b"/echo/next"
            assert pool.stats().connections_created == 2
            server.release()
            assert await asyncio.gather(*held) == [b"held"] * 3

    run(main)


def test_goaway_drains_the_connection_and_replaces_it_with_no_request_lost() -> None:
    async def main() -> None:
        recorder = Recorder()
        async with H2Server() as server, _pool(server.url, recorder, 2) as pool:
            held = [asyncio.create_task(_get(pool, "/hold")) for _ in range(2)]
            await _until(lambda: server.held() == 2)
            (first,) = server.peers
            server.goaway(first)  # both held streams are below its last stream id: they finish
            await recorder.seen(ev.ConnectionDrainingEvent)
            bodies = await asyncio.gather(*(_get(pool, f"/echo/{i}") for i in range(20)))
            assert len(bodies) == 20 and len(server.peers) == 2  # (a new connection serves)
            server.release()
            assert await asyncio.gather(*held) == [b"held", b"held"]
            closed = await recorder.seen(ev.ConnectionClosedEvent)
            assert closed.reason == ev.CLOSE_WILL_CLOSE
            assert pool.stats().total == 1

    run(main)


def test_goaway_below_a_stream_refuses_it_to_be_sent_again() -> None:
    async def main() -> None:
        recorder = Recorder()
        async with H2Server() as server, _pool(server.url, recorder, 2) as pool:
            held = [asyncio.create_task(_get(pool, "/hold")) for _ in range(2)]
            await _until(lambda: server.held() == 2)
            (first,) = server.peers
            server.goaway(first, last_stream_id=1)  # stream 3 was not processed, it says
            (done,), (answered,) = await asyncio.wait(held, return_when=asyncio.FIRST_COMPLETED)
            refused = done.exception()
            assert isinstance(refused, http2.StreamRefusedError) and refused.stream_id == 3
            assert await _get(pool, "/echo/again") == b"/echo/again"  # on a new connection
            assert len(server.peers) == 2
            server.release()
            assert await answered == b"held"  # stream 1, below the last id: answered

    run(main)


def test_a_killed_connection_fails_only_its_streams_in_flight() -> None:
    async def main() -> None:
        recorder = Recorder()
        async with H2Server(streams=2) as server, _pool(server.url, recorder, 2) as pool:
            on_first = [asyncio.create_task(_get(pool, "/hold")) for _ in range(2)]
            await _until(lambda: server.held() == 2)
            on_second = asyncio.create_task(_get(pool, "/hold"))
            await _until(lambda: server.held() == 3)
            first, _ = server.peers
            server.kill(first)
            for task in on_first:
                with pytest.raises(http2.ConnectionLostError, match="closed the connection"):
                    await task
            assert not on_second.done()
            server.release()
            assert await on_second == b"held"
            assert await _get(pool, "/echo/after") == b"/echo/after"

    run(main)


def test_a_stream_reset_by_the_server_fails_that_request_only() -> None:
    async def main() -> None:
        recorder = Recorder()
        async with H2Server() as server, _pool(server.url, recorder, 2) as pool:
            held = asyncio.create_task(_get(pool, "/hold"))
            await _until(lambda: server.held() == 1)
            with pytest.raises(http2.StreamResetError, match="INTERNAL_ERROR") as caught:
                await _get(pool, "/reset")
            assert caught.value.error_code == 2
            assert await _get(pool, "/echo/next") == b"/echo/next"
            server.release()
            assert await held == b"held"
            stats = pool.stats()
            assert stats.connections_created == 1 and stats.connections_closed == {}

    run(main)


def test_a_cancelled_request_resets_its_stream_and_frees_it() -> None:
    async def main() -> None:
        recorder = Recorder()
        async with H2Server(streams=1) as server, _pool(server.url, recorder, 1) as pool:
            task = asyncio.create_task(_get(pool, "/hold"))
            await _until(lambda: server.held() == 1)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            await _until(lambda: bool(server.resets))
            assert server.resets == [(1, h2_errors.ErrorCodes.CANCEL)]
            assert pool.stats().in_use == 0
            # the one stream is free again on the same connection
            assert await _get(pool, "/echo/freed") == b"/echo/freed"
            assert pool.stats().connections_created == 1

    run(main)


def test_after_close_no_connection_is_left_open() -> None:
    async def main() -> None:
        recorder = Recorder()
        async with H2Server(streams=2) as server:
            pool = await _pool(server.url, recorder, 3)
            await asyncio.gather(*(_get(pool, f"/echo/{i}") for i in range(30)))
            assert server.open >= 1
            await pool.close()
            async with asyncio.timeout(5):
                await server.all_closed()

    run(main)


# ---------------------------------------------------------------------------------------------
# the httpx transport


def test_httpx_sends_500_concurrent_requests_over_two_connections(app: App) -> None:
    async def main() -> None:
        async with Server(app) as server:
            transport = http2.AsyncTransport(max_size=2, keep_alive=None)
            async with httpx.AsyncClient(transport=transport, base_url=server.url) as client:
                responses = await asyncio.gather(*(client.get(f"/echo/{i}") for i in range(500)))
                assert [r.content for r in responses] == [f"/echo/{i}".encode() for i in range(500)]
                assert {r.http_version for r in responses} == {"HTTP/2"}
                stats = transport.pool(server.url).stats()
                assert stats.connections_created <= 2 and stats.in_use == 0
                assert len(app.clients) <= 2

    run(main)


def test_httpx_streams_a_response_within_its_lease(app: App) -> None:
    async def main() -> None:
        async with Server(app) as server:
            transport = http2.AsyncTransport(max_size=1, keep_alive=None)
            pool = transport.pool(server.url)
            async with httpx.AsyncClient(transport=transport, base_url=server.url) as client:
                async with client.stream("GET", "/big?n=2000000") as response:
                    assert pool.stats().in_use == 1  # (the body is being read: leased)
                    size = 0
                    async for chunk in response.aiter_bytes():
                        size += len(chunk)
                assert size == 2_000_000 and pool.stats().in_use == 0
                async with client.stream("GET", "/big?n=2000000") as response:
                    pass  # closed unread: its stream reset, its lease back
                assert pool.stats().in_use == 0
                posted = await client.post("/upload", content=b"u" * 300_000)
                assert posted.text == "300000"

    run(main)


def test_httpx_timeouts_and_cancellation_give_the_stream_back(app: App) -> None:
    async def main() -> None:
        async with Server(app, streams=1) as server:
            transport = http2.AsyncTransport(max_size=1, keep_alive=None)
            pool = transport.pool(server.url)
            async with httpx.AsyncClient(transport=transport, base_url=server.url) as client:
                with pytest.raises(httpx.ReadTimeout):
                    await client.get("/hold", timeout=httpx.Timeout(5, read=0.2))
                assert pool.stats().in_use == 0
                task = asyncio.create_task(client.get("/hold"))
                await app.holding_at_least(2)
                task.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await task
                assert pool.stats().in_use == 0
                # the connection's one stream serves on (no new connection was needed)
                assert (await client.get("/echo/after")).content == b"/echo/after"
                assert pool.stats().connections_created == 1
                held = asyncio.create_task(client.get("/hold"))
                await app.holding_at_least(3)
                with pytest.raises(httpx.PoolTimeout):
                    await client.get("/echo/x", timeout=httpx.Timeout(5, pool=0.1))
                app.release.set()
                assert (await held).content == b"held"

    run(main)


async def _third_request(client: Any, app: App) -> str:  # (an httpx.AsyncClient)
    """Two responses held on a server that allows 2 streams per connection, then a third
    request: what becomes of it (within 3 s)."""
    held = [asyncio.create_task(client.get("/hold")) for _ in range(2)]
    await app.holding_at_least(2)
    try:
        third = await asyncio.wait_for(client.get("/echo/third"), 3)
        outcome = f"served ({third.content.decode()})"
    except TimeoutError:
        outcome = "stalled (no answer in 3 s)"
    except Exception as exc:  # (what httpx's own pool may raise)
        outcome = f"failed: {type(exc).__name__}: {exc}"
    app.release.set()
    await asyncio.gather(*held, return_exceptions=True)
    return outcome


def test_httpcore_248_a_third_request_beyond_the_stream_limit(
    app: App, record_property: Callable[[str, object], None]
) -> None:
    """httpcore's issue #248: SETTINGS_MAX_CONCURRENT_STREAMS=2, two responses held open, a third
    request. Through poolkit's transport it is served on a second connection; what httpx's own
    pool does in the same case is recorded (``httpx_own``), not asserted."""

    async def main() -> None:
        async with Server(app, streams=2) as server:
            transport = http2.AsyncTransport(max_size=2, keep_alive=None)
            async with httpx.AsyncClient(transport=transport, base_url=server.url) as client:
                ours = await _third_request(client, app)
                assert transport.pool(server.url).stats().connections_created == 2
            assert ours == "served (/echo/third)"
        app.release.clear()
        app.holding = 0
        async with Server(app, streams=2) as server:
            limits = httpx.Limits(max_connections=2)
            # (http1=False: HTTP/2 with prior knowledge on http://, as poolkit's transport)
            own_client = httpx.AsyncClient(
                http1=False, http2=True, limits=limits, base_url=server.url
            )
            async with own_client as client:
                own = await _third_request(client, app)
            record_property("httpx_own", own)
            print(f"httpx's own pool: {own}")

    run(main)


def test_httpx_sends_a_request_a_goaway_refused_again_on_another_connection() -> None:
    """A GOAWAY below a request's stream: the server never processed it, and the transport sends
    it again on a new connection; the request below the last stream id is answered where it
    was. No request is lost."""

    async def main() -> None:
        async with H2Server() as server:
            transport = http2.AsyncTransport(max_size=2, keep_alive=None)
            async with httpx.AsyncClient(transport=transport, base_url=server.url) as client:
                held = [asyncio.create_task(client.get("/hold")) for _ in range(2)]
                await _until(lambda: server.held() == 2)
                (first,) = server.peers
                server.goaway(first, last_stream_id=1)
                await _until(lambda: server.held() == 3)  # (stream 3's request, sent again)
                assert len(server.peers) == 2
                server.release()
                responses = await asyncio.gather(*held)
                assert [r.content for r in responses] == [b"held", b"held"]
                assert server.requests == 3

    run(main)


# ---------------------------------------------------------------------------------------------
# bad input and refusals


def test_bad_urls_and_arguments_are_refused_at_the_call() -> None:
    for url in ("ftp://example.org", "example.org", "https://"):
        with pytest.raises(ValueError, match="http:// or https:// URL"):
            http2.create_async_pool(url)
        with pytest.raises(ValueError, match="http:// or https:// URL"):
            http2.async_connect(url)
    with pytest.raises(ValueError, match=r"retries=\.\.\.\): an int >= 0"):
        http2.AsyncTransport(retries=-1)
    with pytest.raises(ValueError, match="http:// or https:// URL"):
        http2.AsyncTransport().pool("ftp://example.org")
    for url in ("http://h:70000", "http://h:0", "http://h:x", "http://h:", "https://h:-1"):
        with pytest.raises(ValueError, match="a port from 1 to 65535"):
            http2.create_async_pool(url)
    for keep_alive in (-1, 0, float("nan"), "5", True):
        with pytest.raises(ValueError, match=r"create_async_pool\(keep_alive=\.\.\.\)"):
            http2.create_async_pool("http://h", keep_alive=keep_alive)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match=r"AsyncTransport\(keep_alive=\.\.\.\)"):
            http2.AsyncTransport(keep_alive=keep_alive)  # type: ignore[arg-type]


def test_a_tls_server_that_does_not_choose_h2_is_refused(app: App, cert: Cert) -> None:
    async def main() -> None:
        server = Server(app, cert=cert)
        server.config.alpn_protocols = ["http/1.1"]
        async with server:
            url = server.url.replace("127.0.0.1", "localhost")
            events: list[ev.PoolEvent] = []
            # (the builder's first connection: refused at the builder's call, the pool closed)
            with pytest.raises(http2.ConnectionLostError, match="did not choose HTTP/2"):
                await http2.create_async_pool(
                    url, max_size=1, tls=trusting(cert), keep_alive=None, listeners=[events.append]
                )
            assert isinstance(events[-1], ev.PoolClosedEvent)
            closed = [e for e in events if isinstance(e, ev.ConnectionClosedEvent)]
            created = [e for e in events if isinstance(e, ev.ConnectionCreatedEvent)]
            assert len(closed) == len(created)  # (nothing half open kept)

    run(main)


def test_a_closed_transport_and_a_closed_connection_refuse_requests(app: App) -> None:
    async def main() -> None:
        async with Server(app) as server:
            transport = http2.AsyncTransport(max_size=1, keep_alive=None)
            client = httpx.AsyncClient(transport=transport, base_url=server.url)
            assert (await client.get("/echo/a")).content == b"/echo/a"
            await client.aclose()
            with pytest.raises(httpx.TransportError, match="closed"):
                transport.pool(server.url)
            conn = await http2.H2Connection.open("127.0.0.1", server.port)
            await conn.aclose()
            with pytest.raises(http2.ConnectionLostError, match="was closed"):
                await conn.request("GET", "/echo/b")

    run(main)


# ---------------------------------------------------------------------------------------------
# failure modes (compared with httpx's own pool in test_http2_failures.py): the parts of them
# only poolkit's side has


def test_a_request_http2_forbids_takes_no_stream_and_sends_nothing() -> None:
    async def main() -> None:
        async with H2Server() as server:
            conn = await http2.H2Connection.open("127.0.0.1", server.port)
            try:
                for bad in ([("te", "gzip")], [(":custom", "x")], [("", "x")]):
                    with pytest.raises(http2.InvalidRequestError, match="HTTP/2 forbids"):
                        await conn.request("GET", "/echo/bad", headers=bad)
                # the connection serves on, its first stream still free and HPACK state intact
                response = await conn.request("GET", "/echo/ok", headers=[("x-a", "1")])
                assert (response.stream_id, await response.aread()) == (1, b"/echo/ok")
                response = await conn.request("GET", "/echo/ok2", headers=[("x-a", "1")])
                assert await response.aread() == b"/echo/ok2"
                assert server.requests == 2 and not conn.closed
            finally:
                await conn.aclose()

    run(main)


def test_a_slow_server_that_answers_pings_keeps_its_connection() -> None:
    """A response slower than the read timeout, from a server that is there (it answers the PING
    sent half-way): that request times out, the connection serves on."""

    async def main() -> None:
        async with H2Server() as server:
            transport = http2.AsyncTransport(max_size=2, keep_alive=None)
            async with httpx.AsyncClient(transport=transport, base_url=server.url) as client:
                with pytest.raises(httpx.ReadTimeout):
                    await client.get("/hold", timeout=httpx.Timeout(5, read=0.3))
                assert (await client.get("/echo/after")).content == b"/echo/after"
                stats = transport.pool(server.url).stats()
                assert stats.connections_created == 1 and stats.total == 1
                assert len(server.peers) == 1

    run(main)


def test_a_keep_alive_ping_unanswered_closes_the_connection() -> None:
    async def main() -> None:
        recorder = Recorder()
        async with H2Server() as server:
            starter = http2.create_async_pool(
                server.url, max_size=1, keep_alive=0.2, listeners=[recorder]
            )
            async with starter as pool:
                assert await _get(pool, "/echo/a") == b"/echo/a"
                server.freeze()
                async with asyncio.timeout(5):
                    closed = await recorder.seen(ev.ConnectionClosedEvent)
                assert closed.reason == ev.CLOSE_ERROR
                assert pool.stats().total == 0
                assert await _get(pool, "/echo/b") == b"/echo/b"  # (a new connection)
                assert len(server.peers) == 2

    run(main)


def test_a_request_on_a_connection_found_closed_is_sent_again_on_another() -> None:
    """The race the pool cannot see: a connection handed out before its reader read the end of
    the stream. Nothing of the request was sent, so it goes to another connection, whatever its
    body."""

    async def main() -> None:
        async with H2Server() as server:
            transport = http2.AsyncTransport(max_size=2, keep_alive=None)
            pool = transport.pool(server.url)
            async with httpx.AsyncClient(transport=transport, base_url=server.url) as client:
                assert (await client.get("/echo/a")).status_code == 200
                lease = await pool.checkout()
                conn: http2.H2Connection = lease.connection
                lease.release()
                conn._pool = None  # (the pool is not told: as if it handed it out first)
                (peer,) = server.peers
                server.drop(peer)
                await _until(lambda: conn.closed)
                with pytest.raises(http2.RequestNotSentError) as caught:
                    await conn.request("GET", "/echo/direct")
                assert isinstance(caught.value, http2.ConnectionLostError)

                async def body() -> AsyncIterator[bytes]:  # (a one-off stream: never resent)
                    yield b"u" * 10

                posted = await client.post("/upload", content=body())
                assert posted.content == b"/upload"
                assert len(server.peers) == 2
                assert pool.stats().connections_closed.get(ev.CLOSE_ERROR) == 1

    run(main)
