"""The HTTP/2 transport's failure modes, each run the same way through httpx's own HTTP/2 pool and
through poolkit's transport against the small h2 server (tests/support/h2_server.py): what
poolkit's does is asserted, what httpx's own does is recorded beside it (``record_property``
``httpx_own`` / ``poolkit``, printed; with ``POOLKIT_HTTP2_TABLE=FILE`` each test adds its row of
docs/http2.md's table to FILE)."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

pytest.importorskip("h2", reason="poolkit[http2] is not installed")
httpx = pytest.importorskip("httpx", reason="poolkit[http2] is not installed")

import poolkit  # noqa: E402
from h2_server import H2Server  # noqa: E402
from poolkit.backends import http2  # noqa: E402

Scenario = Callable[[Any, H2Server, str], Awaitable[str]]  # (client, server, "httpx" | "poolkit")


def run(main: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(asyncio.wait_for(main(), 60))


def _transport(**options: Any) -> http2.AsyncTransport:
    pool_options = poolkit.PoolOptions(
        max_size=options.pop("max_size", 2), expected_streams=http2.EXPECTED_STREAMS, **options
    )
    return http2.AsyncTransport(options=pool_options)


def _client(kind: str, url: str, *, max_size: int = 2, **options: Any) -> Any:
    """An httpx.AsyncClient on httpx's own HTTP/2 pool or on poolkit's transport, alike: HTTP/2
    with prior knowledge on ``url``, at most ``max_size`` connections."""
    if kind == "httpx":
        limits = httpx.Limits(max_connections=max_size)
        return httpx.AsyncClient(http1=False, http2=True, limits=limits, base_url=url)
    return httpx.AsyncClient(transport=_transport(max_size=max_size, **options), base_url=url)


def _name(exc: BaseException) -> str:
    module = type(exc).__module__.split(".")[0]
    return type(exc).__name__ if module == "httpx" else f"{module}.{type(exc).__name__}"


async def _outcome(request: Awaitable[Any]) -> str:
    """What became of a request: its status, or the exception's class (httpx's by its name)."""
    try:
        response = await request
    except Exception as exc:
        return _name(exc)
    return str(response.status_code)


async def _until(condition: Callable[[], bool], within: float = 5.0) -> None:
    async with asyncio.timeout(within):
        while not condition():  # noqa: ASYNC110  # (a state of another task's socket)
            await asyncio.sleep(0.005)


def _pool(client: Any, server: H2Server) -> poolkit.AsyncPool[http2.H2Connection]:
    transport: http2.AsyncTransport = client._transport
    return transport.pool(server.url)


def _measure(
    mode: str, scenario: Scenario, record_property: Callable[[str, object], None], **options: Any
) -> dict[str, str]:
    """``scenario`` through each client, each against a server of its own."""
    outcomes: dict[str, str] = {}

    async def main() -> None:
        for kind in ("httpx", "poolkit"):
            streams = options.get("streams", 100)
            async with H2Server(streams=streams) as server:
                client = _client(kind, server.url, **options.get(kind, {}))
                async with client:
                    outcomes[kind] = await scenario(client, server, kind)
                server.release()

    run(main)
    for kind, outcome in outcomes.items():
        record_property(kind if kind == "poolkit" else "httpx_own", outcome)
        print(f"{mode}: {kind}: {outcome}")
    table = os.environ.get("POOLKIT_HTTP2_TABLE")
    if table:
        with open(table, "a", encoding="utf-8") as file:
            file.write(f"| {mode} | {outcomes['httpx']} | {outcomes['poolkit']} |\n")
    return outcomes


# ---------------------------------------------------------------------------------------------


async def _bad_request(client: Any, server: H2Server, kind: str) -> str:
    held = [asyncio.create_task(client.get("/hold")) for _ in range(3)]
    await _until(lambda: server.held() == 3)
    requests = server.requests
    started = time.perf_counter()
    bad = await _outcome(client.get("/echo/bad", headers={"TE": "gzip"}))
    took = time.perf_counter() - started
    sent = server.requests - requests
    server.release()
    others = [await _outcome(task) for task in held]
    after = await _outcome(client.get("/echo/after"))
    if kind == "poolkit":
        pool = _pool(client, server)
        assert bad == "LocalProtocolError" and sent == 0
        assert others == ["200"] * 3 and after == "200"
        stats = pool.stats()
        assert stats.connections_created == 1 and stats.connections_closed == {}
        assert stats.in_use == 0
    return (
        f"{bad} in {took:.2f} s; the 3 in flight on its connection: {', '.join(others)}; "
        f"the next request: {after}"
    )


def test_a_request_http2_forbids_fails_alone_at_once(
    record_property: Callable[[str, object], None],
) -> None:
    """``TE: gzip``: refused before a byte of it is sent, as ``LocalProtocolError``; the three
    requests in flight on the same connection are answered, the connection serves on (and its
    HPACK state is intact: the request after it is decoded right)."""
    _measure("bad request (`TE: gzip`), 3 others in flight", _bad_request, record_property)


async def _silent(client: Any, server: H2Server, kind: str) -> str:
    first = await _outcome(client.get("/echo/first"))
    server.freeze()
    timeout = httpx.Timeout(5, read=0.4)
    timed_out = await _outcome(client.get("/echo/silent", timeout=timeout))
    started = time.perf_counter()
    then = await _outcome(client.get("/echo/then", timeout=timeout))
    took = time.perf_counter() - started
    if kind == "poolkit":
        assert (first, timed_out, then) == ("200", "ReadTimeout", "200")
        assert len(server.peers) == 2  # (the next request went to a new connection)
        stats = _pool(client, server).stats()
        assert stats.total == 1 and stats.connections_created == 2
    made = len(server.peers)
    return f"{timed_out}, then the next request: {then} in {took:.2f} s ({made} connections made)"


def test_a_silent_server_is_left_after_one_timeout(
    record_property: Callable[[str, object], None],
) -> None:
    """The server stops answering, its socket open: the request times out (a PING sent half-way
    is unanswered too), the connection is taken for dead, and the next request goes to a new
    connection."""
    _measure(
        "silent server (socket open, nothing answered), read timeout 0.4 s",
        _silent,
        record_property,
    )


async def _dropped_idle(client: Any, server: H2Server, kind: str) -> str:
    first = await _outcome(client.get("/echo/first"))
    (peer,) = server.peers
    server.drop(peer)
    await _until(lambda: server.open == 0)
    if kind == "poolkit":  # (its reader read the end of the stream, the pool closed it)
        await _until(lambda: _pool(client, server).stats().total == 0)
    else:
        await asyncio.sleep(0.1)  # (the client has read the end of the stream)
    then = await _outcome(client.get("/echo/then"))
    if kind == "poolkit":
        assert (first, then) == ("200", "200")
        stats = _pool(client, server).stats()
        assert stats.connections_created == 2 and stats.total == 1
    return f"the next request: {then}"


def test_a_connection_dropped_while_idle_is_never_handed_out(
    record_property: Callable[[str, object], None],
) -> None:
    """The server closes an idle connection without GOAWAY: the pool hears it from the
    connection's reader and closes it; the next request is served on a new one."""
    _measure("idle connection dropped (no GOAWAY)", _dropped_idle, record_property)


async def _goaway(client: Any, server: H2Server, kind: str) -> str:
    held = [asyncio.create_task(client.get("/hold")) for _ in range(2)]
    await _until(lambda: server.held() == 2)
    (first,) = server.peers
    server.goaway(first, last_stream_id=1)  # (stream 3: not processed, it says)
    await _until(lambda: server.held() == 3 or any(task.done() for task in held))
    server.release()
    outcomes = [await _outcome(task) for task in held]
    if kind == "poolkit":
        assert outcomes == ["200", "200"] and server.requests == 3
    return f"below its last stream id: {outcomes[0]}; above it: {outcomes[1]}"


def test_goaway_refuses_a_stream_that_is_sent_again(
    record_property: Callable[[str, object], None],
) -> None:
    _measure("GOAWAY below a request in flight", _goaway, record_property)


async def _reset(client: Any, server: H2Server, kind: str) -> str:
    held = asyncio.create_task(client.get("/hold"))
    await _until(lambda: server.held() == 1)
    reset = await _outcome(client.get("/reset"))
    server.release()
    other = await _outcome(held)
    after = await _outcome(client.get("/echo/after"))
    if kind == "poolkit":
        assert (reset, other, after) == ("RemoteProtocolError", "200", "200")
        assert _pool(client, server).stats().connections_created == 1
    return (
        f"{reset}; the other in flight: {other}; the next: {after} ({len(server.peers)} connection)"
    )


def test_rst_stream_fails_that_request_only(
    record_property: Callable[[str, object], None],
) -> None:
    _measure("RST_STREAM (INTERNAL_ERROR)", _reset, record_property)


async def _refused(client: Any, server: H2Server, kind: str) -> str:
    refused = await _outcome(client.get("/refuse-once"))
    if kind == "poolkit":
        assert refused == "200" and server.refused == 1
    return f"{refused} ({server.refused} refused, {server.requests} received)"


def test_a_refused_stream_is_sent_again(record_property: Callable[[str, object], None]) -> None:
    _measure("REFUSED_STREAM", _refused, record_property)


async def _killed(client: Any, server: H2Server, kind: str) -> str:
    held = asyncio.create_task(client.get("/hold"))
    await _until(lambda: server.held() == 1)
    partial = await _outcome(client.get("/partial"))
    other = await _outcome(held)
    after = await _outcome(client.get("/echo/after"))
    if kind == "poolkit":
        assert (partial, other, after) == ("ReadError", "ReadError", "200")
        assert _pool(client, server).stats().connections_created == 2
    return f"{partial}; the other in flight: {other}; the next: {after}"


def test_a_server_killed_mid_response(record_property: Callable[[str, object], None]) -> None:
    """The server dies after the headers and part of a body: that response and the other in
    flight fail as httpx's network errors, and the next request is served on a new connection."""
    _measure("server killed mid-response", _killed, record_property)


async def _closed_client(client: Any, server: H2Server, kind: str) -> str:
    held = asyncio.create_task(client.get("/hold"))
    await _until(lambda: server.held() == 1)
    queued = [asyncio.create_task(client.get(f"/echo/{i}")) for i in range(2)]
    await asyncio.sleep(0.05)  # (both waiting for the one stream)
    closing = asyncio.create_task(client.aclose())
    outcomes = [await _outcome(task) for task in queued]
    server.release()
    await closing
    held_outcome = await _outcome(held)
    if kind == "poolkit":
        assert outcomes == ["TransportError", "TransportError"]
        for task in queued:
            with pytest.raises(httpx.TransportError) as caught:
                task.result()
            assert isinstance(caught.value.__cause__, poolkit.PoolClosedError)
    return f"the 2 queued: {', '.join(outcomes)}; the one in flight: {held_outcome}"


def test_closing_the_client_fails_queued_requests_as_httpx_errors(
    record_property: Callable[[str, object], None],
) -> None:
    _measure(
        "client closed with requests queued (1 stream)",
        _closed_client,
        record_property,
        streams=1,
        httpx={"max_size": 1},
        poolkit={"max_size": 1},
    )


async def _full_queue(client: Any, server: H2Server, kind: str) -> str:
    held = asyncio.create_task(client.get("/hold"))
    await _until(lambda: server.held() == 1)
    timeout = httpx.Timeout(5, pool=0.3)
    waiting = asyncio.create_task(client.get("/echo/waiting", timeout=timeout))
    await asyncio.sleep(0.05)
    started = time.perf_counter()
    extra = await _outcome(client.get("/echo/extra", timeout=timeout))
    took = time.perf_counter() - started
    waited = await _outcome(waiting)
    server.release()
    await _outcome(held)
    if kind == "poolkit":
        assert (extra, waited) == ("PoolTimeout", "PoolTimeout")
    return f"the request beyond the queue: {extra} in {took:.2f} s; the one queued: {waited}"


def test_a_full_queue_is_a_pool_timeout(record_property: Callable[[str, object], None]) -> None:
    """One stream held, one request queued (``max_waiting=1`` for poolkit's), one more: httpx's
    ``PoolTimeout``, poolkit's ``TooManyWaitersError`` its cause."""
    _measure(
        "full queue (1 stream held, max_waiting=1), pool timeout 0.3 s",
        _full_queue,
        record_property,
        streams=1,
        httpx={"max_size": 1},
        poolkit={"max_size": 1, "max_waiting": 1},
    )
