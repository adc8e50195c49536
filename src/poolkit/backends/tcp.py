"""Raw TCP, optionally TLS: connect functions and hooks for a protocol of your own.

No extra to install (the standard library only). For :class:`poolkit.Pool` a connection is a
connected blocking ``socket.socket`` (an ``ssl.SSLSocket`` with TLS), closed with ``close()``;
for :class:`poolkit.AsyncPool` on asyncio a :class:`StreamConnection`: asyncio's ``reader`` and
``writer``, closed with ``aclose()``; for :class:`poolkit.AsyncPool` under trio (or anyio's trio
backend; ``poolkit[trio]``) a :class:`TrioStreamConnection`: trio's ``stream`` (a
``trio.SocketStream``, or a ``trio.SSLStream`` over one), closed with ``aclose()``, made by
:func:`trio_connect` / :func:`create_trio_pool` with :func:`trio_hooks`. The asyncio functions
called under trio say so at the call.

* TLS: ``tls=True`` verifies the server against the system's CAs and its name
  (``ssl.create_default_context()``); pass an ``ssl.SSLContext`` to trust other CAs or present a
  client certificate. ``server_hostname`` is the name checked (default: ``host``).
* ``connect_timeout`` bounds the TCP connect and the TLS handshake together.
* Arguments are checked at the call, each error naming it and the call: ``host`` a non-empty str,
  ``port`` an int from 1 to 65535, ``connect_timeout`` and ``timeout`` seconds >= 0 or ``None``,
  no keyword :func:`open_socket` (:func:`open_stream` for asyncio) does not take.
* ``keepalive`` sets ``SO_KEEPALIVE`` (the kernel probes idle connections: a dead peer shows as an
  error instead of a hang); ``nodelay`` sets ``TCP_NODELAY`` (small requests go out at once).

Rules of this module
--------------------
* The hooks know nothing of the protocol spoken: ``check`` only finds a connection the peer
  closed (or one with bytes nobody asked for); ``is_broken`` judges by the error and the socket.
* ``check`` reads nothing on a healthy connection (a peek for plain TCP; for TLS a non-blocking
  read that only TLS records, such as session tickets, can satisfy).
"""

from __future__ import annotations

import asyncio
import inspect
import os
import socket
import ssl
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any, cast, final

from .. import ConnectContext
from ..asyncio import AsyncPool
from ..driver import (
    PoolStarter,
    async_start,
    check_port,
    check_seconds,
    check_socket,
    require_asyncio,
    start,
    with_default_hooks,
)
from ..events import Listener
from ..options import Hooks, PoolOptions
from ..threaded import Pool

if TYPE_CHECKING:
    import trio

__all__ = [
    "StreamConnection",
    "TrioStreamConnection",
    "async_check",
    "async_connect",
    "async_hooks",
    "check",
    "connect",
    "create_async_pool",
    "create_pool",
    "create_trio_pool",
    "hooks",
    "is_broken",
    "open_socket",
    "open_stream",
    "open_trio_stream",
    "trio_check",
    "trio_connect",
    "trio_hooks",
]

#: errors after which a connection is gone or mid-message (``ssl.SSLError`` is an ``OSError``)
BROKEN_ERRORS: tuple[type[BaseException], ...] = (OSError, EOFError, asyncio.IncompleteReadError)


def _context(tls: bool | ssl.SSLContext) -> ssl.SSLContext | None:
    if isinstance(tls, ssl.SSLContext):
        return tls
    if tls is True:
        return ssl.create_default_context()
    if tls is False:
        return None
    raise TypeError(f"tls must be a bool or an ssl.SSLContext, got {type(tls).__name__}")


def _checked(
    call: str, opener: Callable[..., Any], host: Any, port: Any, kwargs: dict[str, Any]
) -> tuple[str, int, dict[str, Any]]:
    """``host``, ``port`` and ``opener``'s ``kwargs`` (:func:`open_socket`'s or
    :func:`open_stream`'s) checked for ``call`` (``"tcp.create_pool"``): what would fail only
    at a connect, or connect elsewhere (a port modulo 65536), fails now, naming the argument."""
    if not isinstance(host, str) or not host:
        raise ValueError(f"{call}(host=...): a host name or address, not {host!r}")
    port = check_port(port, f"{call}(port=...)")
    unknown = sorted(set(kwargs) - _KEYWORDS[opener.__name__])
    if unknown:
        raise TypeError(
            f"{call}() got keywords that {opener.__name__}() does not take: {', '.join(unknown)}"
        )
    out = dict(kwargs)
    for name in ("connect_timeout", "timeout"):
        if name in out:
            out[name] = check_seconds(out[name], f"{call}({name}=...)")
    _context(out.get("tls", False))  # (a wrong ``tls`` fails here, not at each connect)
    return host, port, out


def _tune(sock: Any, keepalive: bool, nodelay: bool) -> None:
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, int(keepalive))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, int(nodelay))


def open_socket(
    host: str,
    port: int,
    *,
    tls: bool | ssl.SSLContext = False,
    server_hostname: str | None = None,
    connect_timeout: float | None = 10.0,
    timeout: float | None = None,
    keepalive: bool = True,
    nodelay: bool = True,
) -> socket.socket:
    """A connected blocking socket (TLS: handshake done, certificate checked); ``timeout`` is the
    socket's own timeout for later reads and writes (``None``: blocking)."""
    given = {"connect_timeout": connect_timeout, "timeout": timeout}
    host, port, given = _checked("tcp.open_socket", open_socket, host, port, given)
    connect_timeout, timeout = given["connect_timeout"], given["timeout"]
    context = _context(tls)
    deadline = None if connect_timeout is None else time.monotonic() + connect_timeout
    sock = socket.create_connection((host, port), timeout=connect_timeout)
    try:
        _tune(sock, keepalive, nodelay)
        if context is not None:
            if deadline is not None:
                sock.settimeout(max(deadline - time.monotonic(), 1e-3))
            sock = context.wrap_socket(sock, server_hostname=server_hostname or host)
        sock.settimeout(timeout)
    except BaseException:
        sock.close()
        raise
    return sock


@final
class StreamConnection:
    """An asyncio TCP (or TLS) connection: ``reader`` and ``writer``, closed with
    :meth:`aclose`."""

    __slots__ = ("reader", "writer")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    @property
    def closed(self) -> bool:
        """The connection is closing, or the peer closed its side."""
        return self.writer.is_closing() or self.reader.at_eof()

    async def aclose(self) -> None:
        """Close the connection and wait until it is (a peer that already left is no error)."""
        self.writer.close()
        try:
            await self.writer.wait_closed()
        except OSError:  # (reset by the peer; a TLS close_notify the peer never answered)
            pass

    def __repr__(self) -> str:
        peer = self.writer.get_extra_info("peername")
        tls = " tls" if self.writer.get_extra_info("ssl_object") is not None else ""
        return f"<StreamConnection{tls} peer={peer!r}{' closed' if self.closed else ''}>"


async def open_stream(
    host: str,
    port: int,
    *,
    tls: bool | ssl.SSLContext = False,
    server_hostname: str | None = None,
    connect_timeout: float | None = 10.0,
    keepalive: bool = True,
    nodelay: bool = True,
    limit: int = 2**16,
) -> StreamConnection:
    """A connected :class:`StreamConnection` (TLS: handshake done, certificate checked);
    ``limit`` is the reader's buffer limit. asyncio only (under trio: :func:`open_trio_stream`)."""
    require_asyncio("tcp.open_stream", "an asyncio stream")
    given = {"connect_timeout": connect_timeout}
    host, port, given = _checked("tcp.open_stream", open_stream, host, port, given)
    connect_timeout = given["connect_timeout"]
    context = _context(tls)
    async with asyncio.timeout(connect_timeout):
        reader, writer = await asyncio.open_connection(
            host,
            port,
            ssl=context,
            server_hostname=(server_hostname or host) if context is not None else None,
            limit=limit,
        )
    try:
        _tune(writer.get_extra_info("socket"), keepalive, nodelay)
    except BaseException:
        writer.close()
        raise
    return StreamConnection(reader, writer)


@final
class TrioStreamConnection:
    """A trio TCP (or TLS) connection: ``stream`` (``trio.SocketStream``, or ``trio.SSLStream``
    over one), closed with :meth:`aclose`."""

    __slots__ = ("_closed", "stream")

    def __init__(self, stream: trio.SocketStream | trio.SSLStream[trio.SocketStream]) -> None:
        self.stream = stream
        self._closed = False

    @property
    def socket_stream(self) -> trio.SocketStream:
        """The TCP stream (under TLS, the one the ``SSLStream`` runs over)."""
        stream = self.stream
        return cast("trio.SocketStream", getattr(stream, "transport_stream", stream))

    @property
    def closed(self) -> bool:
        """The connection was closed (here, or its socket)."""
        return self._closed or self.socket_stream.socket.fileno() == -1

    async def aclose(self) -> None:
        """Close the connection (under TLS, without waiting for the peer's goodbye)."""
        self._closed = True
        import trio

        with trio.CancelScope(shield=True):  # (a close that finishes: the pool's rule)
            with trio.move_on_after(1.0) as goodbye:  # (a TLS close_notify the peer ignores)
                await self.stream.aclose()
            if goodbye.cancelled_caught:
                await self.socket_stream.aclose()

    def __repr__(self) -> str:
        try:
            peer = self.socket_stream.socket.getpeername()
        except OSError:
            peer = None
        tls = " tls" if self.stream is not self.socket_stream else ""
        return f"<TrioStreamConnection{tls} peer={peer!r}{' closed' if self.closed else ''}>"


def _trio() -> Any:
    """trio, or the error naming the extra that brings it."""
    try:
        import trio
    except ImportError:  # pragma: no cover - the dev extra installs it
        raise ImportError(
            "poolkit.backends.tcp's trio functions need trio: pip install 'poolkit[trio]'"
        ) from None
    return trio


async def open_trio_stream(
    host: str,
    port: int,
    *,
    tls: bool | ssl.SSLContext = False,
    server_hostname: str | None = None,
    connect_timeout: float | None = 10.0,
    keepalive: bool = True,
    nodelay: bool = True,
) -> TrioStreamConnection:
    """:func:`open_stream` under trio: a connected :class:`TrioStreamConnection` (TLS:
    handshake done, certificate checked), ``connect_timeout`` bounding both as a
    ``TimeoutError``."""
    trio = _trio()
    given = {"connect_timeout": connect_timeout}
    host, port, given = _checked("tcp.open_trio_stream", open_trio_stream, host, port, given)
    connect_timeout = given["connect_timeout"]
    context = _context(tls)
    deadline = trio.current_time() + connect_timeout if connect_timeout is not None else None
    with trio.move_on_at(deadline if deadline is not None else float("inf")) as scope:
        tcp = await trio.open_tcp_stream(host, port)
        try:
            _tune(tcp.socket, keepalive, nodelay)
            if context is None:
                return TrioStreamConnection(tcp)
            stream = trio.SSLStream(tcp, context, server_hostname=server_hostname or host)
            await stream.do_handshake()
        except BaseException:
            with trio.CancelScope(shield=True):
                await tcp.aclose()
            raise
        return TrioStreamConnection(stream)
    assert scope.cancelled_caught
    raise TimeoutError(f"tcp.open_trio_stream: {host}:{port} not connected in {connect_timeout} s")


#: the keywords (besides host and port) of :func:`open_socket` and :func:`open_stream`
_KEYWORDS: dict[str, frozenset[str]] = {
    opener.__name__: frozenset(inspect.signature(opener).parameters) - {"host", "port"}
    for opener in (open_socket, open_stream, open_trio_stream)
}


def connect(host: str, port: int, **kwargs: Any) -> Callable[[ConnectContext], socket.socket]:
    """A connect function for :class:`poolkit.Pool`: :func:`open_socket` with ``kwargs``."""
    return _connect("tcp.connect", host, port, kwargs)


def _connect(
    call: str, host: Any, port: Any, kwargs: dict[str, Any]
) -> Callable[[ConnectContext], socket.socket]:
    host, port, kwargs = _checked(call, open_socket, host, port, kwargs)

    def connect_tcp(ctx: ConnectContext) -> socket.socket:
        return open_socket(host, port, **kwargs)

    return connect_tcp


def async_connect(
    host: str, port: int, **kwargs: Any
) -> Callable[[ConnectContext], Awaitable[StreamConnection]]:
    """A connect function for :class:`poolkit.AsyncPool`: :func:`open_stream` with ``kwargs``."""
    return _async_connect("tcp.async_connect", host, port, kwargs)


def _async_connect(
    call: str, host: Any, port: Any, kwargs: dict[str, Any]
) -> Callable[[ConnectContext], Awaitable[StreamConnection]]:
    host, port, kwargs = _checked(call, open_stream, host, port, kwargs)

    async def connect_tcp(ctx: ConnectContext) -> StreamConnection:
        require_asyncio(call, "tcp's StreamConnection (an asyncio stream; trio: trio_connect)")
        return await open_stream(host, port, **kwargs)

    return connect_tcp


def trio_connect(
    host: str, port: int, **kwargs: Any
) -> Callable[[ConnectContext], Awaitable[TrioStreamConnection]]:
    """A connect function for :class:`poolkit.AsyncPool` under trio: :func:`open_trio_stream`
    with ``kwargs``."""
    return _trio_connect("tcp.trio_connect", host, port, kwargs)


def _trio_connect(
    call: str, host: Any, port: Any, kwargs: dict[str, Any]
) -> Callable[[ConnectContext], Awaitable[TrioStreamConnection]]:
    host, port, kwargs = _checked(call, open_trio_stream, host, port, kwargs)

    async def connect_tcp(ctx: ConnectContext) -> TrioStreamConnection:
        return await open_trio_stream(host, port, **kwargs)

    return connect_tcp


#: the ``check`` hook for sockets (:func:`poolkit.driver.check_socket`): raises
#: ``ConnectionError`` if the peer closed the connection or sent bytes nobody asked for; reads
#: nothing from a healthy connection
check = check_socket


async def async_check(connection: StreamConnection) -> None:
    """The ``check`` hook for :class:`StreamConnection`: raises ``ConnectionError`` if it is
    closing, the peer closed it, or bytes nobody asked for are waiting."""
    if connection.closed:
        raise ConnectionError("the peer closed the connection")
    for _ in range(2):  # (a turn of the loop runs its reads after this task: the second sees them)
        await asyncio.sleep(0)
    if connection.closed:
        raise ConnectionError("the peer closed the connection")
    if len(getattr(connection.reader, "_buffer", b"")):  # (StreamReader has no public peek)
        raise ConnectionError("unexpected data waiting on an idle connection")


async def trio_check(connection: TrioStreamConnection) -> None:
    """The ``check`` hook for :class:`TrioStreamConnection`: raises ``ConnectionError`` if it
    was closed; over plain TCP also if the peer closed it or bytes nobody asked for are waiting
    (a peek: nothing is read). Over TLS, bytes waiting may be TLS records (session tickets, the
    peer's goodbye): they are not judged."""
    trio = _trio()
    await trio.lowlevel.checkpoint()
    if connection.closed:
        raise ConnectionError("the connection is closed")
    if connection.stream is not connection.socket_stream:
        return
    with socket.socket(fileno=os.dup(connection.socket_stream.socket.fileno())) as peek:
        check_socket(peek)


def is_broken(
    connection: socket.socket | StreamConnection | TrioStreamConnection, error: BaseException
) -> bool:
    """The ``is_broken`` hook (every pool): an I/O error, a timeout, an end of stream, a broken
    or closed trio stream, or the connection closed."""
    if isinstance(error, BROKEN_ERRORS):
        return True
    if isinstance(connection, TrioStreamConnection):
        trio = _trio()
        return isinstance(error, trio.BrokenResourceError | trio.ClosedResourceError) or (
            connection.closed
        )
    if isinstance(connection, StreamConnection):
        return connection.closed
    return connection.fileno() == -1


def hooks(*, check_after: float = 1.0, timeout: float | None = 5.0) -> Hooks:
    """:func:`check` (on connections idle at least ``check_after`` seconds) and
    :func:`is_broken`, for :class:`poolkit.Pool`."""
    return Hooks(check=check, check_after=check_after, is_broken=is_broken, timeout=timeout)


def async_hooks(*, check_after: float = 1.0, timeout: float | None = 5.0) -> Hooks:
    """:func:`async_check` and :func:`is_broken`, for :class:`poolkit.AsyncPool`."""
    return Hooks(check=async_check, check_after=check_after, is_broken=is_broken, timeout=timeout)


def trio_hooks(*, check_after: float = 1.0, timeout: float | None = 5.0) -> Hooks:
    """:func:`trio_check` and :func:`is_broken`, for :class:`poolkit.AsyncPool` under trio."""
    return Hooks(check=trio_check, check_after=check_after, is_broken=is_broken, timeout=timeout)


def create_pool(
    host: str,
    port: int,
    *,
    options: PoolOptions | None = None,
    listeners: Iterable[Listener] = (),
    **kwargs: Any,
) -> Pool[socket.socket]:
    """A ready :class:`poolkit.Pool` of sockets to ``host:port`` (``kwargs``: those of
    :func:`open_socket`), with :func:`hooks` unless ``options`` has hooks. One connection is
    made before it returns: a server that cannot be reached fails here (the pool closed)."""
    pool = Pool(
        _connect("tcp.create_pool", host, port, kwargs),
        address=f"{host}:{port}",
        options=with_default_hooks(options, hooks(), "create_pool"),
        listeners=listeners,
    )
    start(pool)
    return pool


def create_async_pool(
    host: str,
    port: int,
    *,
    options: PoolOptions | None = None,
    listeners: Iterable[Listener] = (),
    **kwargs: Any,
) -> PoolStarter[StreamConnection]:
    """A ready :class:`poolkit.AsyncPool` of :class:`StreamConnection` to ``host:port`` on the
    running loop, with :func:`async_hooks` unless ``options`` has hooks: ``await`` it, or
    ``async with create_async_pool(...) as pool:`` for a pool closed at the end of the block.
    One connection is made first, as :func:`create_pool` makes one."""
    chosen = with_default_hooks(options, async_hooks(), "create_async_pool")
    connect_tcp = _async_connect("tcp.create_async_pool", host, port, kwargs)

    async def start() -> AsyncPool[StreamConnection]:
        require_asyncio("tcp.create_async_pool", "an asyncio stream (trio: create_trio_pool)")
        pool = AsyncPool(
            connect_tcp,
            address=f"{host}:{port}",
            options=chosen,
            listeners=listeners,
        )
        await async_start(pool)
        return pool

    return PoolStarter(start)


def create_trio_pool(
    host: str,
    port: int,
    *,
    options: PoolOptions | None = None,
    listeners: Iterable[Listener] = (),
    **kwargs: Any,
) -> PoolStarter[TrioStreamConnection]:
    """:func:`create_async_pool` under trio: ``async with create_trio_pool(...) as pool:`` for
    a ready :class:`poolkit.AsyncPool` of :class:`TrioStreamConnection` (its tasks in the
    nursery the block opens), with :func:`trio_hooks` unless ``options`` has hooks. One
    connection is made first."""
    chosen = with_default_hooks(options, trio_hooks(), "create_trio_pool")
    connect_tcp = _trio_connect("tcp.create_trio_pool", host, port, kwargs)

    async def start() -> AsyncPool[TrioStreamConnection]:
        pool = AsyncPool(connect_tcp, address=f"{host}:{port}", options=chosen, listeners=listeners)
        await async_start(pool)
        return pool

    return PoolStarter(start)
