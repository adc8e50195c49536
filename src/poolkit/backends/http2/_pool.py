"""A :class:`poolkit.AsyncPool` of HTTP/2 connections: the connect function (each connection
serving the server's stream limit, telling the pool when it changes, says GOAWAY or dies), the
hooks (``is_broken``; a cancelled request resets its own stream: ``cancel_safe``), the keep-alive
PING, and the builder."""

from __future__ import annotations

import ssl
import urllib.parse
from collections.abc import Awaitable, Callable, Iterable
from typing import Final

from ... import ConnectContext, Established
from ...asyncio import AsyncPool
from ...driver import (
    PoolStarter,
    async_start,
    check_seconds,
    with_default_hooks,
)
from ...events import Listener
from ...options import Hooks, KeepAlive, PoolOptions
from ._connection import H2Connection
from ._errors import ConnectionLostError, StreamRefusedError, StreamResetError

#: the streams a connection being made is counted to serve (``PoolOptions.expected_streams``):
#: RFC 9113 asks servers to allow at least 100
EXPECTED_STREAMS: Final = 100


def origin_of(url: str) -> tuple[str, int, bool, str]:
    """``(host, port, tls, shown)`` of ``url`` (``https://`` or ``http://``)."""
    parts = urllib.parse.urlsplit(url) if isinstance(url, str) else None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"an http:// or https:// URL, not {url!r}")
    tls = parts.scheme == "https"
    try:
        port = parts.port
    except ValueError:  # (urllib: "Port out of range 0-65535", or not a number)
        port = 0
    if port == 0 or (port is None and parts.netloc.endswith(":")):
        raise ValueError(f"an http:// or https:// URL with a port from 1 to 65535, not {url!r}")
    port = port or (443 if tls else 80)
    return parts.hostname, port, tls, f"{parts.scheme}://{parts.hostname}:{port}"


def _tls_context(tls: bool | ssl.SSLContext) -> ssl.SSLContext:
    context = tls if isinstance(tls, ssl.SSLContext) else ssl.create_default_context()
    context.set_alpn_protocols(["h2"])
    return context


def async_connect(
    url: str, *, tls: bool | ssl.SSLContext = True, server_hostname: str | None = None
) -> Callable[[ConnectContext], Awaitable[Established[H2Connection]]]:
    """A connect function for :class:`poolkit.AsyncPool`: an :class:`H2Connection` to ``url``'s
    origin (``https://``: TLS with ALPN ``h2``, checked against ``tls``, an ``ssl.SSLContext``
    or the system's CAs; ``http://``: prior knowledge), serving the server's
    ``SETTINGS_MAX_CONCURRENT_STREAMS`` leases at once and telling the pool when that changes or
    the server says GOAWAY. On asyncio and under trio alike (the library running decides):
    under trio the connection's reader runs in the pool's nursery (``ctx.start_soon``)."""
    host, port, secure, _ = origin_of(url)
    context = _tls_context(tls) if secure else None

    async def connect_h2(ctx: ConnectContext) -> Established[H2Connection]:
        conn = await H2Connection.open(
            host,
            port,
            tls=context,
            server_hostname=server_hostname,
            pool=ctx.pool,
            connection_id=ctx.connection_id,
            spawn=ctx.start_soon,
        )
        return Established(conn, max_streams=conn.max_streams)

    return connect_h2


async def async_ping(conn: H2Connection) -> None:
    """The keep-alive probe: a PING answered."""
    await conn.ping()


def is_broken(conn: H2Connection, error: BaseException) -> bool:
    """The ``is_broken`` hook: the connection failed (a stream's reset or refusal does not
    break it)."""
    if isinstance(error, StreamResetError | StreamRefusedError):
        return conn.closed
    return conn.closed or isinstance(error, OSError | ConnectionLostError)


def async_hooks() -> Hooks:
    """``is_broken``, and ``cancel_safe``: a request cancelled resets its own stream, the
    connection serves on (its lease is released, not discarded). The keep-alive is a pool option
    (``create_async_pool``'s ``keep_alive``: :func:`async_ping`)."""
    return Hooks(is_broken=is_broken, cancel_safe=True)


def create_async_pool(
    url: str,
    *,
    max_size: int = 10,
    options: PoolOptions | None = None,
    listeners: Iterable[Listener] = (),
    tls: bool | ssl.SSLContext = True,
    keep_alive: float | None = 30.0,
) -> PoolStarter[H2Connection]:
    """A ready :class:`poolkit.AsyncPool` of HTTP/2 connections to ``url``'s origin: ``await``
    it, or ``async with create_async_pool(url) as pool:``. ``max_size`` connections at most
    (each serving the server's stream limit), a PING every ``keep_alive`` seconds on idle ones
    (None: none), each connect counted to serve :data:`EXPECTED_STREAMS` checkouts until it is
    made. A PING unanswered within ``keep_alive`` seconds closes its connection. ``options``, when
    given, replace all three (with :func:`async_hooks` unless they have hooks of their own).
    One connection is made first: a server that cannot be reached, or that does not speak
    HTTP/2, fails the ``await`` (the pool closed). :class:`AsyncTransport` stays lazy: it makes
    an origin's pool at its first request, without this first connection. Under trio:
    ``async with create_async_pool(url) as pool:`` (the pool's tasks run in the nursery its
    block opens)."""
    origin_of(url)  # (a bad URL fails here)
    chosen = options_for(max_size, options, keep_alive, "create_async_pool")

    async def start() -> AsyncPool[H2Connection]:
        pool = new_pool(url, chosen, listeners, tls)
        await async_start(pool)
        return pool

    return PoolStarter(start)


def options_for(
    max_size: int, options: PoolOptions | None, keep_alive: float | None, call: str
) -> PoolOptions:
    keep_alive = check_seconds(keep_alive, f"{call}(keep_alive=...)")
    if keep_alive == 0:
        raise ValueError(f"{call}(keep_alive=...) must be seconds > 0 (or None: no PING), got 0")
    if options is None:
        # (a PING unanswered for as long as the interval: the server or the path to it is gone)
        probe = (
            None if keep_alive is None else KeepAlive(keep_alive, async_ping, timeout=keep_alive)
        )
        options = PoolOptions(
            max_size=max_size, expected_streams=EXPECTED_STREAMS, keep_alive=probe
        )
    return with_default_hooks(options, async_hooks(), "create_async_pool")


def new_pool(
    url: str, options: PoolOptions, listeners: Iterable[Listener], tls: bool | ssl.SSLContext
) -> AsyncPool[H2Connection]:
    """A new pool of ``url``'s origin (paused: not yet ready)."""
    _, _, _, shown = origin_of(url)
    return AsyncPool(
        async_connect(url, tls=tls), address=shown, options=options, listeners=listeners
    )


def ready_pool(
    url: str, options: PoolOptions, listeners: Iterable[Listener], tls: bool | ssl.SSLContext
) -> AsyncPool[H2Connection]:
    """The transport's pool for ``url``'s origin: made ready, no connection made yet (the
    request that asked for it makes the first)."""
    pool = new_pool(url, options, listeners, tls)
    pool.ready()
    return pool
