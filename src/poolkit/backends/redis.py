"""Redis with redis-py: connect functions, hooks and ready pools (threads and asyncio), and the
drop-in ``ConnectionPool`` / ``AsyncConnectionPool`` for ``redis.Redis(connection_pool=...)``.

``pip install 'poolkit[redis]'``. Two ways to use it:

* ``pool = create_pool(url)`` (``await create_async_pool(url)``): a poolkit pool whose
  connections are redis-py clients, each leased whole: ``with pool.connection() as r:
  r.set("k", "v")``. Right for anything that needs one session: ``WATCH``/``MULTI``, blocking
  commands (``BLPOP``), pub/sub, ``SELECT``.
* ``redis.Redis(connection_pool=ConnectionPool.from_url(url))``: one client shared by every
  thread (task), each command taking a connection for its own length, as with redis-py's
  ``BlockingConnectionPool`` but served in arrival order (see ``_redis_dropin``).

What the pool holds
-------------------
A ``redis.Redis`` (``redis.asyncio.Redis``) client bound to one dedicated connection, not a bare
``redis.connection.Connection``. A lease is a session: the caller gets redis-py's whole command
API, and its commands, pipelines and pub/sub all go over that one socket, so ``WATCH`` and
``MULTI`` hold and nothing else runs on it meanwhile. A bare ``Connection`` would leave callers to
``send_command``/``read_response`` and parse replies themselves; the drop-in pool below is the
place where poolkit holds bare connections (redis-py's clients ask their pool for those).

The client's connection is made (and named with ``CLIENT SETNAME``) inside the connect
function, so that connect errors, timeouts and retries are the pool's, and redis-py retries no
command unless you pass ``retry=``. So a connection the server dropped shows as what it is:
``check`` (a ``PING``) finds it before hand-out and the pool replaces it, or the caller sees one
``redis.ConnectionError`` and ``is_broken`` has the client discarded. A connection that redis-py
itself closed (``PubSub.close()`` does; so does a failed command whose error the caller caught)
is reconnected at the client's next command, as redis-py's own pools do.

Rules of this module
--------------------
* Nothing here decides anything about pooling: these are the functions the pool calls.
* The hooks read the connection's state and send ``PING``; they never reconnect.
* A client's pool (``_Dedicated``) holds its one connection; only a command reconnects it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from ._extras import require

require("redis", "redis", "redis")  # no redis-py: an ImportError naming poolkit[redis]

import redis  # noqa: E402
import redis.asyncio  # noqa: E402
import redis.asyncio.connection  # noqa: E402
import redis.connection  # noqa: E402

from .._frontend import ConnectContext  # noqa: E402
from ..asyncio import AsyncPool  # noqa: E402
from ..events import Listener  # noqa: E402
from ..options import Hooks, KeepAlive, PoolOptions  # noqa: E402
from ..threaded import Pool  # noqa: E402
from ._common import default_hooks  # noqa: E402
from ._redis_dropin import BlockingConnectionPool, ConnectionPool  # noqa: E402
from ._redis_dropin_async import BlockingConnectionPool as AsyncBlockingConnectionPool  # noqa: E402
from ._redis_dropin_async import ConnectionPool as AsyncConnectionPool  # noqa: E402
from ._redis_dropin_async import connected  # noqa: E402

__all__ = [
    "AsyncBlockingConnectionPool",
    "AsyncConnectionPool",
    "BlockingConnectionPool",
    "ConnectionPool",
    "async_connect",
    "async_hooks",
    "async_keep_alive",
    "async_ping",
    "connect",
    "connection_kwargs",
    "create_async_pool",
    "create_pool",
    "hooks",
    "is_broken",
    "keep_alive",
    "ping",
]

#: redis-py's untyped URL parsers, called through ``Any`` (mypy --strict refuses untyped calls)
_parse_url: Any = redis.connection.parse_url
_parse_async_url: Any = redis.asyncio.connection.parse_url
#: the client name set on every connection unless ``client_name=`` says otherwise
CLIENT_NAME = "poolkit"
#: ``check`` runs on connections idle at least this long (seconds): a busy connection is alive
CHECK_AFTER = 1.0
#: errors after which a connection is mid-protocol or gone (builtin ``TimeoutError`` is
#: ``asyncio.timeout()``'s: a reply may be left unread)
BROKEN_ERRORS: tuple[type[BaseException], ...] = (
    redis.ConnectionError,
    redis.TimeoutError,
    TimeoutError,
)


def connection_kwargs(url: str | None = None, **kwargs: Any) -> dict[str, Any]:
    """redis-py's connection keyword arguments from ``url`` (``redis://``, ``rediss://``,
    ``unix://``) and ``kwargs``; as in redis-py's ``from_url``, the URL's query string wins.
    ``client_name`` defaults to :data:`CLIENT_NAME`."""
    out = dict(kwargs)
    if url is not None:
        out.update(_parse_url(url))
    out.setdefault("client_name", CLIENT_NAME)
    return out


def _async_kwargs(url: str | None, kwargs: dict[str, Any]) -> dict[str, Any]:
    out = connection_kwargs(None, **kwargs)
    if url is not None:  # (the asyncio connection classes for rediss:// and unix://)
        out.update(_parse_async_url(url))
    return out


def _address(url: str | None, kwargs: dict[str, Any]) -> str:
    """What the pool shows as its address (a password in a URL is masked by the pool)."""
    if url is not None:
        return url
    if "path" in kwargs:
        return f"unix:{kwargs['path']}"
    return f"{kwargs.get('host', 'localhost')}:{kwargs.get('port', 6379)}/{kwargs.get('db', 0)}"


class _Dedicated(redis.ConnectionPool):
    """The pool of one client held by poolkit: its one connection, made and connected at once,
    lent to the client's commands one at a time (and reconnected if redis-py closed it)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(max_connections=1, **kwargs)
        connection: Any = self.make_connection()
        connection.connect()
        self.connection = connection
        self._available_connections.append(connection)

    def get_connection(self, *args: Any, **kwargs: Any) -> Any:
        connection: Any = self.connection
        with self._lock:
            if not self._available_connections:
                raise redis.ConnectionError(_IN_USE)
            self._available_connections.pop()
            self._in_use_connections.add(connection)
        if not connection.is_connected:  # (closed by redis-py: PubSub.close(), a failed command)
            try:
                connection.connect()
            except BaseException:
                self.release(connection)
                raise
        return connection


class _AsyncDedicated(redis.asyncio.ConnectionPool):
    """``_Dedicated`` for ``redis.asyncio``: connected by :meth:`open`."""

    async def open(self) -> None:
        connection = await connected(self.make_connection)
        self.connection = connection
        self._available_connections.append(connection)

    async def get_connection(self, *args: Any, **kwargs: Any) -> Any:
        connection: Any = self.connection
        if not self._available_connections:
            raise redis.ConnectionError(_IN_USE)
        self._available_connections.pop()
        self._in_use_connections.add(connection)
        if not connection.is_connected:
            try:
                await connection.connect()
            except BaseException:
                await self.release(connection)
                raise
        return connection


_IN_USE = (
    "this client's one connection is in use (by a pipeline, pub/sub or another thread): a client "
    "leased from a poolkit pool serves one caller, one command at a time"
)


def connect(url: str | None = None, **kwargs: Any) -> Callable[[ConnectContext], redis.Redis]:
    """A connect function for :class:`poolkit.Pool`: each call returns a ``redis.Redis`` on one
    dedicated connection, already connected and named. ``url`` and ``kwargs`` as redis-py's
    (:func:`connection_kwargs`)."""
    options = connection_kwargs(url, **kwargs)

    def connect_redis(ctx: ConnectContext) -> redis.Redis:
        return redis.Redis.from_pool(_Dedicated(**options))

    return connect_redis


def async_connect(
    url: str | None = None, **kwargs: Any
) -> Callable[[ConnectContext], Awaitable[redis.asyncio.Redis]]:
    """A connect function for :class:`poolkit.AsyncPool`: ``redis.asyncio.Redis`` clients, each
    on one dedicated connection, connected and named."""
    options = _async_kwargs(url, kwargs)

    async def connect_redis(ctx: ConnectContext) -> redis.asyncio.Redis:
        pool = _AsyncDedicated(**options)
        await pool.open()
        return redis.asyncio.Redis.from_pool(pool)

    return connect_redis


def ping(client: redis.Redis) -> None:
    """``PING``: the ``check`` hook and the keep-alive probe (:class:`poolkit.Pool`)."""
    client.ping()


async def async_ping(client: redis.asyncio.Redis) -> None:
    """``PING`` for :class:`poolkit.AsyncPool`."""
    await client.ping()


def is_broken(client: redis.Redis | redis.asyncio.Redis, error: BaseException) -> bool:
    """The ``is_broken`` hook (both pools): ``error`` is a connection error or a timeout, or the
    client's connection is no longer connected."""
    if isinstance(error, BROKEN_ERRORS):
        return True
    connection = getattr(client.connection_pool, "connection", None)
    return connection is not None and not connection.is_connected


def hooks(*, check_after: float = CHECK_AFTER, timeout: float | None = 5.0) -> Hooks:
    """The hooks for :class:`poolkit.Pool`: ``check`` (a ``PING`` on connections idle at least
    ``check_after`` seconds) and ``is_broken``; ``timeout`` bounds a check."""
    return Hooks(check=ping, check_after=check_after, is_broken=is_broken, timeout=timeout)


def async_hooks(*, check_after: float = CHECK_AFTER, timeout: float | None = 5.0) -> Hooks:
    """The hooks for :class:`poolkit.AsyncPool` (``check`` is :func:`async_ping`)."""
    return Hooks(check=async_ping, check_after=check_after, is_broken=is_broken, timeout=timeout)


def keep_alive(interval: float, timeout: float | None = 5.0) -> KeepAlive:
    """``PoolOptions(keep_alive=...)`` for :class:`poolkit.Pool`: ``PING`` connections idle for
    ``interval`` seconds (keeps them past a server's ``timeout`` and finds dead ones early)."""
    return KeepAlive(interval, ping, timeout)


def async_keep_alive(interval: float, timeout: float | None = 5.0) -> KeepAlive:
    """:func:`keep_alive` for :class:`poolkit.AsyncPool`."""
    return KeepAlive(interval, async_ping, timeout)



def create_pool(
    url: str | None = None,
    *,
    options: PoolOptions | None = None,
    listeners: Iterable[Listener] = (),
    **kwargs: Any,
) -> Pool[redis.Redis]:
    """A ready :class:`poolkit.Pool` of ``redis.Redis`` clients for ``url`` (or redis-py's
    ``host=``, ``port=``... in ``kwargs``), with :func:`hooks` unless ``options`` has hooks.
    Use it with ``with``; ``close()`` closes every connection."""
    pool = Pool(
        connect(url, **kwargs),
        address=_address(url, kwargs),
        options=default_hooks(options, hooks(), "create_pool"),
        listeners=listeners,
    )
    pool.ready()
    return pool


async def create_async_pool(
    url: str | None = None,
    *,
    options: PoolOptions | None = None,
    listeners: Iterable[Listener] = (),
    **kwargs: Any,
) -> AsyncPool[redis.asyncio.Redis]:
    """A ready :class:`poolkit.AsyncPool` of ``redis.asyncio.Redis`` clients, on the running
    event loop, with :func:`async_hooks` unless ``options`` has hooks. Use it with
    ``async with``; ``await pool.close()`` closes every connection (with ``aclose()``)."""
    pool = AsyncPool(
        async_connect(url, **kwargs),
        address=_address(url, kwargs),
        options=default_hooks(options, async_hooks(), "create_async_pool"),
        listeners=listeners,
    )
    pool.ready()
    return pool
