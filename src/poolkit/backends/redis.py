"""Redis with redis-py: connect functions, hooks and ready pools (threads and asyncio), and the
drop-ins ``ConnectionPool`` / ``BlockingConnectionPool`` (``AsyncConnectionPool`` /
``AsyncBlockingConnectionPool``) for ``redis.Redis(connection_pool=...)``.

``pip install 'poolkit[redis]'``. Two ways to use it:

* ``pool = create_pool(url)`` (``await create_async_pool(url)``): a poolkit pool whose
  connections are redis-py clients, each leased whole: ``with pool.connection() as r:
  r.set("k", "v")``. Right for anything that needs one session: ``WATCH``/``MULTI``, blocking
  commands (``BLPOP``), pub/sub, ``SELECT``; what a lease did to the session does not reach the
  next caller (the lease contract below).
* ``redis.Redis(connection_pool=BlockingConnectionPool.from_url(url))``: one client shared by
  every thread (task), each command taking a connection for its own length, as with redis-py's
  pool of the same name but served in arrival order; ``ConnectionPool`` raises at once when
  exhausted, as redis-py's does (see ``_redis_dropin``).

What the pool holds
-------------------
A ``redis.Redis`` (``redis.asyncio.Redis``) client bound to one dedicated connection, not a bare
``redis.connection.Connection``. A lease is a session: the caller gets redis-py's whole command
API, and its commands, pipelines and pub/sub all go over that one socket, so ``WATCH`` and
``MULTI`` hold and nothing else runs on it meanwhile. A bare ``Connection`` would leave callers to
``send_command``/``read_response`` and parse replies themselves; the drop-in pool below is the
place where poolkit holds bare connections (redis-py's clients ask their pool for those).

The caller is handed not the pooled client but its lease's copy (the ``lend`` hook,
:func:`lend`; see ``_redis_lend``), a client of the same class that refuses use once the lease is
given back: a reference kept after the block, and every pipeline, pub/sub or ``Monitor`` made
from it, raises :class:`ClientReleasedError` (a ``redis.ConnectionError``), as asyncpg's pool's
connections raise ``InterfaceError``, instead of running commands in the next owner's session.
The hooks get the pooled client itself.

The lease contract
------------------
A caller always gets a client on the pool's db, outside ``MULTI``, with nothing watched or
subscribed, its configured name and protocol, authenticated, and every reply read; a clean
connection costs no command for it. The ``reset`` hook (:func:`reset`, :func:`async_reset`)
keeps it at check-in, knowing without a round trip what the last caller did: the client's
connection notes every command sent and reply read (``_redis_session``). It

* sends nothing when the session is clean (plain commands, pipelines, a finished ``MULTI``/
  ``EXEC``, ``WATCH`` ended by ``EXEC``, ``DISCARD`` or ``UNWATCH``), nor when redis-py closed
  the connection (``PubSub.close()``; the next command reconnects with redis-py's handshake);
* sends ``RESET`` (Redis 6.2 or later) and redis-py's handshake again (``AUTH``/``HELLO``,
  ``CLIENT SETNAME``, ``SELECT``) when a command changed the session (``SELECT``, ``CLIENT
  SETNAME``, ``CLIENT TRACKING``, ``AUTH``, ``HELLO``, ``READONLY``, ``RESET``...) or left a
  ``MULTI`` or a ``WATCH`` open;
* raises :class:`SessionDiscarded`, and the pool closes the connection, when replies are out of
  step (a reply left unread, ``SUBSCRIBE`` and its kin, ``MONITOR``, ``CLIENT REPLY``,
  ``QUIT``), after ``CLIENT NO-EVICT`` or ``CLIENT NO-TOUCH`` (``RESET`` turns them off only
  from Redis 7.2: closing is right on every server, see ``_redis_session``), when something kept
  from the lease still holds the connection (a PubSub not closed, a pipeline left ``WATCH``ing,
  a ``Monitor``), or when ``RESET`` fails (a server before 6.2). A connection so discarded never
  reconnects: the PubSub or pipeline kept gets a ``redis.ConnectionError``.

The client's connection is made (and named with ``CLIENT SETNAME``) inside the connect
function, so that connect errors, timeouts and retries are the pool's, and redis-py retries no
command unless you pass ``retry=``. So a connection the server dropped shows as what it is:
``check`` (a ``PING``) finds it before hand-out and the pool replaces it, or the caller sees one
``redis.ConnectionError`` and ``is_broken`` has the client discarded. A connection that redis-py
itself closed (``PubSub.close()`` does; so does a failed command whose error the caller caught)
is reconnected at the client's next command, as redis-py's own pools do.

``create_pool`` / ``create_async_pool`` make one connection before they return, so a server
that cannot be reached or refuses the credentials fails there, as the PostgreSQL builders do.
Given no ``options``, they use :data:`DEFAULT_OPTIONS`: redis-py's ``BlockingConnectionPool``'s
defaults (50 connections, 20 s wait), the redis-py pool that waits as a poolkit pool does.

Rules of this module
--------------------
* Nothing here decides anything about pooling: these are the functions the pool calls.
* The caller never holds the pooled client, only its lease's copy (``_redis_lend``).
* The hooks read the connection's state and send ``PING`` (``check``) or ``RESET`` and the
  handshake (``reset``, only on a session that changed); they never reconnect.
* A client's pool (``_Dedicated``) holds its one connection; only a command reconnects it.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from typing import Any

from ._extras import require

require("redis", "redis", "redis")  # no redis-py: an ImportError naming poolkit[redis]

import redis  # noqa: E402
import redis.asyncio  # noqa: E402
import redis.asyncio.connection  # noqa: E402
import redis.connection  # noqa: E402

from .. import ConnectContext  # noqa: E402
from ..asyncio import AsyncPool  # noqa: E402
from ..driver import (  # noqa: E402
    PoolStarter,
    async_start,
    require_asyncio,
    start,
    with_default_hooks,
)
from ..events import Listener  # noqa: E402
from ..options import Hooks, KeepAlive, PoolOptions  # noqa: E402
from ..threaded import Pool  # noqa: E402
from ._redis_dropin import checked_kwargs  # noqa: E402
from ._redis_dropin_async import BlockingConnectionPool as AsyncBlockingConnectionPool  # noqa: E402
from ._redis_dropin_async import ConnectionPool as AsyncConnectionPool  # noqa: E402
from ._redis_dropin_async import connected  # noqa: E402
from ._redis_dropin_sync import BlockingConnectionPool, ConnectionPool  # noqa: E402
from ._redis_lend import ClientReleasedError, async_lend, lend  # noqa: E402
from ._redis_session import Verdict, session_of, tracked, tracked_async  # noqa: E402

__all__ = [
    "DEFAULT_OPTIONS",
    "AsyncBlockingConnectionPool",
    "AsyncConnectionPool",
    "BlockingConnectionPool",
    "ClientReleasedError",
    "ConnectionPool",
    "SessionDiscarded",
    "async_connect",
    "async_hooks",
    "async_keep_alive",
    "async_lend",
    "async_ping",
    "async_reset",
    "connect",
    "connection_kwargs",
    "create_async_pool",
    "create_pool",
    "hooks",
    "is_broken",
    "keep_alive",
    "lend",
    "ping",
    "reset",
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
#: the options :func:`create_pool` and :func:`create_async_pool` use when given none: redis-py's
#: ``BlockingConnectionPool``'s defaults (``max_connections=50``, ``timeout=20`` seconds), the
#: redis-py pool that waits for a connection as a poolkit pool does. Build your own from it to
#: keep them: ``dataclasses.replace(DEFAULT_OPTIONS, min_size=2)``.
DEFAULT_OPTIONS = PoolOptions(max_size=50, wait_queue_timeout=20.0)


class SessionDiscarded(Exception):
    """Why :func:`reset` closed a leased client's connection instead of passing it on (the
    ``error`` of the pool's ``ConnectionResetFailedEvent``): its session cannot be put back."""


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
        kwargs["connection_class"] = tracked(kwargs.get("connection_class", redis.Connection))
        super().__init__(max_connections=1, **kwargs)
        connection: Any = self.make_connection()
        connection.connect()
        self.connection = connection
        self._available_connections.append(connection)

    def held(self) -> bool:
        """Whether the connection is out (to a command, a pipeline, a PubSub, a Monitor)."""
        with self._lock:
            return not self._available_connections

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

    def __init__(self, **kwargs: Any) -> None:
        connection_class = kwargs.get("connection_class", redis.asyncio.Connection)
        kwargs["connection_class"] = tracked_async(connection_class)
        super().__init__(**kwargs)

    async def open(self) -> None:
        connection = await connected(self.make_connection)
        self.connection = connection
        self._available_connections.append(connection)

    def held(self) -> bool:
        """Whether the connection is out (to a command, a pipeline, a PubSub, a Monitor)."""
        return not self._available_connections

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
    (:func:`connection_kwargs`; ``port`` and the socket timeouts checked here, not at each
    connect)."""
    return _connect("redis.connect", url, kwargs)


def _connect(
    call: str, url: str | None, kwargs: dict[str, Any]
) -> Callable[[ConnectContext], redis.Redis]:
    options = checked_kwargs(call, connection_kwargs(url, **kwargs))

    def connect_redis(ctx: ConnectContext) -> redis.Redis:
        return redis.Redis.from_pool(_Dedicated(**options))

    return connect_redis


def async_connect(
    url: str | None = None, **kwargs: Any
) -> Callable[[ConnectContext], Awaitable[redis.asyncio.Redis]]:
    """A connect function for :class:`poolkit.AsyncPool`: ``redis.asyncio.Redis`` clients, each
    on one dedicated connection, connected and named."""
    return _async_connect("redis.async_connect", url, kwargs)


def _async_connect(
    call: str, url: str | None, kwargs: dict[str, Any]
) -> Callable[[ConnectContext], Awaitable[redis.asyncio.Redis]]:
    options = checked_kwargs(call, _async_kwargs(url, kwargs))

    async def connect_redis(ctx: ConnectContext) -> redis.asyncio.Redis:
        require_asyncio(call, "redis.asyncio")
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
    client's connection is no longer connected. A :class:`ClientReleasedError` (a client kept
    from an earlier lease, used in this block) says nothing about this block's connection."""
    if isinstance(error, BROKEN_ERRORS) and not isinstance(error, ClientReleasedError):
        return True
    connection = getattr(client.connection_pool, "connection", None)
    return connection is not None and not connection.is_connected


_HELD = (
    "the client's connection is still held by a PubSub, a pipeline left WATCHing or a Monitor "
    "that was not closed (or by a command still running in another thread)"
)


def _to_reset(connection: Any, held: bool) -> Any | None:
    """``connection`` if its session needs ``RESET``; ``None`` if nothing needs doing (a clean
    session, or no session: disconnected, the next command reconnects). Raises
    :class:`SessionDiscarded` if it cannot be passed on (``held``: something still has it)."""
    if held:
        raise SessionDiscarded(_HELD)
    inner = getattr(connection, "_conn", connection)  # (redis-py's client-side cache wraps it)
    session = session_of(inner)
    if session is None:
        raise SessionDiscarded(f"{type(inner).__name__} is not a connection poolkit tracks")
    if not connection.is_connected:
        session.clear()
        return None
    verdict, why = session.verdict()
    if verdict is Verdict.CLEAN:
        return None
    if verdict is Verdict.DISCARD:
        raise SessionDiscarded(why)
    if inner is not connection:
        raise SessionDiscarded(f"{why}; a client-side cached connection is not reset in place")
    return connection


def _retire(connection: Any, error: BaseException) -> None:
    """The pool closes ``connection`` after ``error`` in its reset: no object kept from the
    lease may reconnect it (a stale PubSub or pipeline would open a socket nobody closes)."""
    inner = getattr(connection, "_conn", connection)
    if session_of(inner) is not None:
        inner.poolkit_retired = f"discarded at check-in: {error}"


def _reset_failed(error: redis.ResponseError) -> SessionDiscarded:
    return SessionDiscarded(f"RESET failed ({error}); Redis before 6.2 has no RESET")


def _check_reset_reply(reply: object) -> None:
    if reply not in (b"RESET", "RESET"):
        raise SessionDiscarded(f"RESET answered {reply!r}")


def reset(client: redis.Redis) -> None:
    """The ``reset`` hook for :class:`poolkit.Pool`: the lease contract (see the module's
    documentation). Sends nothing on a clean connection; ``RESET`` and redis-py's handshake again
    (``AUTH``/``HELLO``, ``CLIENT SETNAME``, ``SELECT``) on one whose session changed; raises
    :class:`SessionDiscarded`, and the pool closes the connection, where replies are out of step
    or the connection is still held."""
    pool: Any = client.connection_pool
    connection = pool.connection
    try:
        if _to_reset(connection, pool.held()) is None:
            return
        try:
            connection.send_command("RESET", check_health=False)
            _check_reset_reply(connection.read_response())
        except redis.ResponseError as exc:
            raise _reset_failed(exc) from exc
        if connection.redis_connect_func is None:
            connection.on_connect()
        else:
            connection.redis_connect_func(connection)
    except BaseException as exc:
        _retire(connection, exc)
        raise
    connection.poolkit_session.clear()


def async_reset(client: redis.asyncio.Redis) -> Coroutine[Any, Any, None] | None:
    """:func:`reset` for :class:`poolkit.AsyncPool`. A plain function: ``None`` on a clean
    connection, so the pool passes it on at once; the coroutine that resets it otherwise."""
    pool: Any = client.connection_pool
    connection = pool.connection
    try:
        to_reset = _to_reset(connection, pool.held())
    except BaseException as exc:
        _retire(connection, exc)
        raise
    return None if to_reset is None else _async_reset(connection)


async def _async_reset(connection: Any) -> None:
    try:
        try:
            await connection.send_command("RESET", check_health=False)
            _check_reset_reply(await connection.read_response())
        except redis.ResponseError as exc:
            raise _reset_failed(exc) from exc
        handshake = connection.redis_connect_func
        if handshake is None:
            await connection.on_connect()
        else:
            result = handshake(connection)
            if inspect.isawaitable(result):
                await result
    except BaseException as exc:
        _retire(connection, exc)
        raise
    connection.poolkit_session.clear()


def hooks(
    *, check_after: float = CHECK_AFTER, timeout: float | None = 5.0, reset: bool = True
) -> Hooks:
    """The hooks for :class:`poolkit.Pool`: ``check`` (a ``PING`` on connections idle at least
    ``check_after`` seconds), ``reset`` (:func:`reset`; ``reset=False`` for none),
    ``is_broken`` and ``lend`` (:func:`lend`: each lease's client refuses use once the lease is
    given back); ``timeout`` bounds a check or a reset."""
    return Hooks(
        check=ping,
        check_after=check_after,
        reset=_reset_sync if reset else None,
        is_broken=is_broken,
        timeout=timeout,
        lend=lend,
    )


def async_hooks(
    *, check_after: float = CHECK_AFTER, timeout: float | None = 5.0, reset: bool = True
) -> Hooks:
    """The hooks for :class:`poolkit.AsyncPool` (``check`` is :func:`async_ping`, ``reset``
    :func:`async_reset`, ``lend`` :func:`async_lend`)."""
    return Hooks(
        check=async_ping,
        check_after=check_after,
        reset=async_reset if reset else None,
        is_broken=is_broken,
        timeout=timeout,
        lend=async_lend,
    )


_reset_sync = reset  # (hooks() has an argument named reset)


def keep_alive(interval: float, timeout: float | None = 5.0) -> KeepAlive:
    """``PoolOptions(keep_alive=...)`` for :class:`poolkit.Pool`: ``PING`` connections idle for
    ``interval`` seconds (keeps them past a server's ``timeout`` and finds dead ones early)."""
    return KeepAlive(interval, ping, timeout)


def async_keep_alive(interval: float, timeout: float | None = 5.0) -> KeepAlive:
    """:func:`keep_alive` for :class:`poolkit.AsyncPool`."""
    return KeepAlive(interval, async_ping, timeout)


def _options(options: PoolOptions | None, default: Hooks, builder: str) -> PoolOptions:
    return with_default_hooks(DEFAULT_OPTIONS if options is None else options, default, builder)


def create_pool(
    url: str | None = None,
    *,
    options: PoolOptions | None = None,
    listeners: Iterable[Listener] = (),
    **kwargs: Any,
) -> Pool[redis.Redis]:
    """A ready :class:`poolkit.Pool` of ``redis.Redis`` clients for ``url`` (or redis-py's
    ``host=``, ``port=``... in ``kwargs``), with :func:`hooks` unless ``options`` has hooks.
    ``options=None``: :data:`DEFAULT_OPTIONS` (redis-py's ``BlockingConnectionPool``'s 50
    connections and 20 s wait); ``options`` given are taken as they are.

    One connection is made before it returns, so that a server that cannot be reached or refuses
    the credentials fails here (the pool closed, the connect's error raised), as the PostgreSQL
    builders do. Use it with ``with``; ``close()`` closes every connection."""
    pool = Pool(
        _connect("redis.create_pool", url, kwargs),
        address=_address(url, kwargs),
        options=_options(options, hooks(), "create_pool"),
        listeners=listeners,
    )
    start(pool)
    return pool


def create_async_pool(
    url: str | None = None,
    *,
    options: PoolOptions | None = None,
    listeners: Iterable[Listener] = (),
    **kwargs: Any,
) -> PoolStarter[redis.asyncio.Redis]:
    """A ready :class:`poolkit.AsyncPool` of ``redis.asyncio.Redis`` clients, on the running
    event loop, with :func:`async_hooks` unless ``options`` has hooks; options and the first
    connection as :func:`create_pool`. ``await`` it, or ``async with create_async_pool(...) as
    pool:`` for a pool closed at the end of the block; ``await pool.close()`` closes every
    connection (with ``aclose()``)."""
    chosen = _options(options, async_hooks(), "create_async_pool")
    connect = _async_connect("redis.create_async_pool", url, kwargs)
    address = _address(url, kwargs)

    async def start() -> AsyncPool[redis.asyncio.Redis]:
        require_asyncio("redis.create_async_pool", "redis.asyncio")
        pool = AsyncPool(connect, address=address, options=chosen, listeners=listeners)
        await async_start(pool)
        return pool

    return PoolStarter(start)
