"""From a URI to a pool: the connect functions of a parsed URI (:func:`async_connect_uri`,
:func:`connect_uri`), the hooks a pool of MongoDB connections runs (:func:`hooks`,
:func:`async_hooks`: a connection the server closed while it sat idle is not handed out), and
both together (:func:`create_pool`, :func:`create_async_pool`).
"""

from __future__ import annotations

import ssl
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from .. import ConnectContext, Established
from ..asyncio import AsyncPool
from ..driver import PoolStarter, async_start, require_asyncio, start, with_default_hooks
from ..events import Listener
from ..options import Hooks, PoolOptions
from ..threaded import Pool
from .connection import AsyncMongoConnection, MongoConnection, async_connect, connect
from .errors import NetworkError
from .monitoring import CommandListener
from .tls import tls_context
from .uri import MongoURI, parse_uri

__all__ = [
    "async_check",
    "async_connect_uri",
    "async_hooks",
    "check",
    "connect_uri",
    "create_async_pool",
    "create_pool",
    "hooks",
    "is_broken",
    "uri_connect_options",
]


def uri_connect_options(
    uri: MongoURI, tls: ssl.SSLContext | None = None
) -> tuple[str, int, dict[str, Any]]:
    """The host, port and :func:`connect` keywords of a parsed URI: its ``loadBalanced``,
    ``appName``, ``connectTimeoutMS``, credentials and TLS (``tls``, a context given: TLS
    whatever the URI says; else the context its ``tls*`` options make, if any:
    :func:`~.tls.tls_context`)."""
    host, port = uri.hosts[0] if uri.hosts else ("", None)  # (mongodb+srv://: seeded() first)
    if port is None:
        raise ValueError("connect_uri needs a host and port (not a socket; +srv: seeded() first)")
    return host, port, dict(
        load_balanced=uri.load_balanced, app_name=uri.app_name,
        tls=tls if tls is not None else tls_context(uri),
        connect_timeout=uri.connect_timeout, username=uri.username, password=uri.password,
        auth_source=uri.auth_source or "admin", auth_mechanism=uri.auth_mechanism,
    )  # fmt: skip


def async_connect_uri(
    uri: MongoURI, *, tls: ssl.SSLContext | None = None, listeners: Iterable[CommandListener] = ()
) -> Callable[[ConnectContext], Awaitable[Established[AsyncMongoConnection]]]:
    """:func:`~.connection.async_connect` to the first host of a parsed URI, with its
    ``loadBalanced``, ``appName``, ``connectTimeoutMS``, credentials and TLS
    (:func:`uri_connect_options`)."""
    host, port, options = uri_connect_options(uri, tls)
    return async_connect(host, port, listeners=listeners, **options)


def connect_uri(
    uri: MongoURI, *, tls: ssl.SSLContext | None = None, listeners: Iterable[CommandListener] = ()
) -> Callable[[ConnectContext], Established[MongoConnection]]:
    """:func:`async_connect_uri` for :class:`poolkit.Pool`."""
    host, port, options = uri_connect_options(uri, tls)
    return connect(host, port, listeners=listeners, **options)


def check(conn: MongoConnection) -> None:
    """The ``check`` hook of :class:`poolkit.Pool`: a connection the server closed, or one
    with bytes nobody asked for waiting, raises ``ConnectionError`` (and is not handed out)."""
    conn.check_idle()


async def async_check(conn: AsyncMongoConnection) -> None:
    """The ``check`` hook of :class:`poolkit.AsyncPool` (as :func:`check`): what the loop has
    read of the connection while it sat idle, without waiting."""
    conn.check_idle()


def is_broken(conn: AsyncMongoConnection | MongoConnection, error: BaseException) -> bool:
    """The ``is_broken`` hook (both pools): the connection closed, or a network error."""
    return conn.closed or isinstance(error, (NetworkError, OSError))


def hooks(*, check_after: float = 0.0, timeout: float | None = 5.0) -> Hooks:
    """:func:`check` before a connection is handed out (``check_after``: only those idle at
    least that many seconds; pymongo checks after 1 s), and :func:`is_broken`, for
    :class:`poolkit.Pool`. The check is a non-blocking peek: no round trip."""
    return Hooks(check=check, check_after=check_after, is_broken=is_broken, timeout=timeout)


def async_hooks(*, check_after: float = 0.0, timeout: float | None = 5.0) -> Hooks:
    """:func:`async_check` and :func:`is_broken`, for :class:`poolkit.AsyncPool`."""
    return Hooks(check=async_check, check_after=check_after, is_broken=is_broken, timeout=timeout)


def _parsed(uri: str | MongoURI) -> MongoURI:
    if isinstance(uri, MongoURI):
        return uri
    if isinstance(uri, str):
        return parse_uri(uri)
    raise TypeError(f"uri: a connection string or a MongoURI, not {type(uri).__name__}")


def _options(uri: MongoURI, options: PoolOptions | None, default: Hooks, call: str) -> PoolOptions:
    return with_default_hooks(uri.pool_options if options is None else options, default, call)


def create_pool(
    uri: str | MongoURI,
    *,
    options: PoolOptions | None = None,
    tls: ssl.SSLContext | None = None,
    listeners: Iterable[Listener] = (),
    command_listeners: Iterable[CommandListener] = (),
) -> Pool[MongoConnection]:
    """A ready :class:`poolkit.Pool` of blocking connections to ``uri``'s first host
    (:func:`connect_uri`), with the URI's pool options (or ``options``) and :func:`hooks`
    unless they have hooks. ``listeners``: the pool's events; ``command_listeners``: command
    monitoring. One connection (connect, ``hello``, authentication) is made before it returns:
    a server that cannot be reached or refuses the credentials fails here (the pool closed)."""
    parsed = _parsed(uri)
    pool = Pool(
        connect_uri(parsed, tls=tls, listeners=command_listeners),
        address=parsed.addresses[0],
        options=_options(parsed, options, hooks(), "create_pool"),
        listeners=listeners,
    )
    start(pool)
    return pool


def create_async_pool(
    uri: str | MongoURI,
    *,
    options: PoolOptions | None = None,
    tls: ssl.SSLContext | None = None,
    listeners: Iterable[Listener] = (),
    command_listeners: Iterable[CommandListener] = (),
) -> PoolStarter[AsyncMongoConnection]:
    """:func:`create_pool` for asyncio: a ready :class:`poolkit.AsyncPool` on the running loop
    (:func:`async_connect_uri`, :func:`async_hooks`). ``await`` it, or ``async with
    create_async_pool(...) as pool:`` for a pool closed at the end of the block. One connection
    is made first, as :func:`create_pool` makes one."""
    parsed = _parsed(uri)
    chosen = _options(parsed, options, async_hooks(), "create_async_pool")
    connect = async_connect_uri(parsed, tls=tls, listeners=command_listeners)

    async def start() -> AsyncPool[AsyncMongoConnection]:
        require_asyncio("mongodb.create_async_pool", "poolkit.mongodb's AsyncMongoConnection")
        pool = AsyncPool(connect, address=parsed.addresses[0], options=chosen, listeners=listeners)
        await async_start(pool)
        return pool

    return PoolStarter(start)
