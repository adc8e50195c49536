"""An httpx transport on poolkit pools of HTTP/2 connections, one pool per origin: httpx's
timeouts bound the wait for a stream and for the server, a request the server did not process is
sent again on another connection, and every error is the one httpx's own pool raises in that case
(poolkit's its ``__cause__``).

On asyncio and under trio alike (httpx runs on both): under trio each origin's pool runs in a
task of a nursery the transport opens when its client's ``async with`` block begins
(``async with httpx.AsyncClient(transport=...)``) and that ends with the block, every pool
closed: no task of the transport's outlives it."""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterable, AsyncIterator, Iterable
from typing import Any

import httpx

from ...asyncio import AsyncPool
from ...driver import trio_running
from ...errors import (
    ConnectTimeoutError,
    PoolClosedError,
    PoolError,
    TooManyWaitersError,
    WaitQueueTimeoutError,
)
from ...events import Listener
from ...options import PoolOptions
from ._connection import H2Connection, Response
from ._errors import (
    ConnectionLostError,
    HTTP2Error,
    InvalidRequestError,
    RequestNotSentError,
    StreamRefusedError,
    StreamResetError,
)
from ._pool import new_pool, options_for, origin_of, ready_pool


class _Body(httpx.AsyncByteStream):
    """A response body for httpx, read within its lease: the lease goes back when the body is
    read to the end or closed (an unread rest resets the stream)."""

    def __init__(
        self, response: Response, lease: Any, conn: H2Connection, read_timeout: float | None
    ) -> None:
        self._response = response
        self._lease = lease
        self._conn = conn
        self._read_timeout = read_timeout

    async def __aiter__(self) -> AsyncIterator[bytes]:
        chunks = self._response.aiter_bytes()
        try:
            while True:
                try:
                    async with self._conn.answer_within(self._read_timeout):
                        chunk = await anext(chunks)
                except StopAsyncIteration:
                    break
                except TimeoutError as exc:
                    raise httpx.ReadTimeout(f"no data for {self._read_timeout} s") from exc
                except ConnectionLostError as exc:
                    raise httpx.ReadError(str(exc)) from exc
                except HTTP2Error as exc:  # (the stream reset by the server)
                    raise httpx.RemoteProtocolError(str(exc)) from exc
                yield chunk
        finally:
            await self.aclose()

    async def aclose(self) -> None:
        lease, self._lease = self._lease, None
        if lease is None:
            return
        try:
            await self._response.aclose()
        finally:
            _give_back(lease)


class AsyncTransport(httpx.AsyncBaseTransport):
    """An httpx transport on poolkit pools of HTTP/2 connections:
    ``httpx.AsyncClient(transport=AsyncTransport(max_size=2))``. One pool per origin (scheme,
    host, port), made at its first request with ``max_size``, ``keep_alive`` and ``tls`` as
    :func:`create_async_pool` takes them (``options``: the pool's options, in their place) and
    ``listeners``; :meth:`pool` gives an origin's pool (``stats()``, ``clear()``...).

    Requests go out as HTTP/2 streams of the pool's connections (TLS with ALPN ``h2`` for
    ``https://``, prior knowledge for ``http://``). httpx's ``pool`` timeout bounds the wait for
    a stream, its ``read`` timeout each wait for the response and for each part of its body (a
    connection that sends nothing for a whole read timeout, not even the answer to a PING sent
    half-way, is dead: closed, the next request goes to another); the pool's ``connect_timeout``
    bounds a connect. A request the server did not process (a GOAWAY below its stream,
    ``REFUSED_STREAM``) is sent again on another connection, ``retries`` times at most, if its
    body can be sent again; one that found its connection closed before any byte of it was sent
    is sent again whatever its body.

    Every error reaches the caller as the httpx exception httpx's own pool raises in that case,
    poolkit's as its ``__cause__``: ``PoolTimeout`` (no stream within the ``pool`` timeout, or
    ``max_waiting`` requests already waiting), ``LocalProtocolError`` (a request HTTP/2
    forbids: it fails alone, the connection serves on), ``ConnectError`` / ``ConnectTimeout``,
    ``ReadError`` / ``ReadTimeout`` / ``RemoteProtocolError``, and ``TransportError`` for a
    request still waiting when the transport closes.

    Under trio it must be used inside its client's ``async with`` block (the nursery its pools
    run in); a request outside one raises ``RuntimeError`` saying so.
    """

    def __init__(
        self,
        *,
        max_size: int = 10,
        options: PoolOptions | None = None,
        listeners: Iterable[Listener] = (),
        tls: bool | ssl.SSLContext = True,
        keep_alive: float | None = 30.0,
        retries: int = 2,
    ) -> None:
        if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
            raise ValueError(f"AsyncTransport(retries=...): an int >= 0, not {retries!r}")
        self._options = options_for(max_size, options, keep_alive, "AsyncTransport")
        self._tls = tls
        self._listeners = tuple(listeners)
        self._retries = retries
        self._pools: dict[str, AsyncPool[H2Connection]] = {}
        self._closed = False
        #: under trio, the nursery its pools run in (``_trio.PoolRunner``), once entered
        self._runner: Any = None

    def pool(self, url: str) -> AsyncPool[H2Connection]:
        """The pool of ``url``'s origin (made if it has none yet)."""
        if self._closed:
            raise httpx.TransportError("the transport is closed")
        _, _, _, origin = origin_of(url)
        pool = self._pools.get(origin)
        if pool is None:
            if self._runner is None and not trio_running():
                pool = ready_pool(url, self._options, self._listeners, self._tls)
            else:  # (trio: it starts in a task of the transport's nursery)
                pool = new_pool(url, self._options, self._listeners, self._tls)
                self._trio_runner("AsyncTransport.pool()").run(pool)
            self._pools[origin] = pool
        return pool

    def _trio_runner(self, call: str) -> Any:
        if self._runner is None:
            raise RuntimeError(
                f"http2.{call} under trio: the transport's pools run in a nursery its client's "
                "`async with httpx.AsyncClient(transport=...)` block opens; use the client "
                "inside that block"
            )
        return self._runner

    async def __aenter__(self) -> AsyncTransport:
        if trio_running() and self._runner is None:
            from ._trio import PoolRunner  # (only under trio)

            self._runner = PoolRunner()
            await self._runner.open()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        runner = self._runner
        try:
            await self.aclose()
        finally:
            if runner is not None:
                await runner.exit()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        timeouts: dict[str, float | None] = request.extensions.get("timeout", {})
        pool = self.pool(str(request.url))
        if self._runner is not None:  # (trio: the pool's block entered, in its task)
            await self._runner.started(pool)
        target = request.url.raw_path.decode("ascii")
        headers = [(k, v) for k, v in request.headers.raw if k.lower() != b"host"]
        has_body = "content-length" in request.headers or "transfer-encoding" in request.headers
        body: AsyncIterable[bytes] | None = None
        if has_body:
            body = request.stream  # type: ignore[assignment]  # (an AsyncByteStream here)
        read_timeout = timeouts.get("read")
        for attempt in range(self._retries + 1):
            lease = await _checkout(pool, timeouts.get("pool"))
            conn: H2Connection = lease.connection
            try:
                async with conn.answer_within(read_timeout):
                    response = await conn.request(
                        request.method, target, headers=headers, body=body
                    )
            except InvalidRequestError as exc:
                lease.release()  # (nothing was sent: its stream was never used)
                raise httpx.LocalProtocolError(str(exc)) from exc
            except StreamRefusedError as exc:
                _give_back(lease)
                sendable = isinstance(exc, RequestNotSentError) or _replayable(request)
                if attempt < self._retries and (body is None or sendable):
                    continue
                if isinstance(exc, ConnectionLostError):
                    raise httpx.ReadError(str(exc)) from exc
                raise httpx.RemoteProtocolError(str(exc)) from exc
            except StreamResetError as exc:
                _give_back(lease)
                raise httpx.RemoteProtocolError(str(exc)) from exc
            except ConnectionLostError as exc:
                lease.discard(exc)
                raise httpx.ReadError(str(exc)) from exc
            except TimeoutError as exc:
                _give_back(lease)  # (the request reset its stream when its wait was cancelled)
                raise httpx.ReadTimeout("the response did not come in time") from exc
            except BaseException:
                _give_back(lease)
                raise
            return httpx.Response(
                status_code=response.status,
                headers=response.headers,
                stream=_Body(response, lease, conn, read_timeout),
                extensions={"http_version": b"HTTP/2", "stream_id": response.stream_id},
            )
        raise AssertionError("unreachable")  # pragma: no cover  # (the loop returns or raises)

    async def aclose(self) -> None:
        """Close every pool (their connections in use close as their responses end)."""
        self._closed = True
        pools, self._pools = list(self._pools.values()), {}
        for pool in pools:
            await pool.close()
        if self._runner is not None:  # (trio: their blocks end, and their tasks)
            self._runner.stop()


async def _checkout(pool: AsyncPool[H2Connection], timeout: float | None) -> Any:
    """A lease of ``pool``, its errors as httpx's own pool raises them (poolkit's the cause)."""
    try:
        return await pool.checkout(timeout=timeout)
    except (WaitQueueTimeoutError, TooManyWaitersError) as exc:
        raise httpx.PoolTimeout(str(exc)) from exc
    except ConnectTimeoutError as exc:
        raise httpx.ConnectTimeout(str(exc)) from exc
    except OSError as exc:
        raise httpx.ConnectError(str(exc)) from exc
    except PoolClosedError as exc:
        raise httpx.TransportError(f"the transport is closed: {exc}") from exc
    except PoolError as exc:  # (a pool cleared, a connect's circuit breaker open...)
        raise httpx.ConnectError(str(exc)) from exc


def _give_back(lease: Any) -> None:
    """A lease whose stream is done: released, or discarded if its connection failed."""
    connection: H2Connection = lease.connection
    if connection.closed:
        lease.discard()
    else:
        lease.release()


def _replayable(request: httpx.Request) -> bool:
    """Whether ``request``'s body can be sent again (read into memory, not a one-off stream)."""
    try:
        request.content  # noqa: B018  # (raises httpx.RequestNotRead for a stream not read)
    except httpx.RequestNotRead:
        return False
    return True
