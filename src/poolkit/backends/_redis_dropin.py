"""The drop-in pools for redis-py's own clients: ``redis.Redis(connection_pool=ConnectionPool())``
and ``redis.asyncio.Redis(connection_pool=AsyncConnectionPool())``, served by a poolkit pool.

A redis-py client takes a connection from its pool for each command (pipeline, pub/sub) and gives
it back after. These classes are redis-py's ``ConnectionPool`` (subclassed: ``from_url``,
``connection_kwargs``, ``get_encoder``, the retry and re-auth plumbing are redis-py's own) with
``BlockingConnectionPool``'s arguments (``max_connections=50``, ``timeout=20``) and its
behaviour, except that waiting callers are served strictly in arrival order: redis-py's
blocking pool lets a thread that just gave a connection back take it again ahead of threads that
have waited for seconds; here a connection given back goes to the oldest waiter.
``AsyncConnectionPool`` is in ``_redis_dropin_async``, on what this module's pool shares.

Rules of this module
--------------------
* The poolkit pool holds each redis-py connection in a :class:`_Slot`, whose ``close()`` is the
  connection's ``disconnect()`` (poolkit closes what it holds with ``close()``/``aclose()``).
* ``get_connection`` waits at most ``timeout`` seconds, then raises redis-py's
  ``ConnectionError("No connection available.")`` (the poolkit error as its cause); it hands out a
  connection connected, with nothing left unread (else reconnected), as redis-py does.
* ``release`` of a connection that is disconnected (a command failed; pub/sub's reset) or marked
  for reconnect discards it: the poolkit pool closes it and connects anew when needed. Releasing
  a connection that is not out from this pool does nothing, as in redis-py.
* ``disconnect()`` is redis-py's: it drops the sockets, the connections stay and reconnect at
  their next hand-out. ``close()`` / ``aclose()`` closes the poolkit pool (connections in use
  close when given back); the next ``get_connection`` opens a new one, since redis-py's pools stay
  usable after ``close()``.
"""

from __future__ import annotations

import dataclasses
import os
import threading
from collections.abc import Iterable
from typing import Any

from ._extras import require

require("redis", "redis", "redis")  # no redis-py: an ImportError naming poolkit[redis]

import redis  # noqa: E402
import redis.connection  # noqa: E402
import redis.event  # noqa: E402

from .._frontend import ConnectContext, Lease  # noqa: E402
from ..errors import PoolClosedError, WaitQueueTimeoutError  # noqa: E402
from ..events import Listener  # noqa: E402
from ..options import PoolOptions  # noqa: E402
from ..threaded import Pool  # noqa: E402

__all__ = ["ConnectionPool"]

#: redis-py's untyped parts, called through ``Any`` (mypy --strict refuses untyped calls)
_events: Any = redis.event
_CacheProxyConnection: Any = getattr(redis.connection, "CacheProxyConnection", None)

#: redis-py's BlockingConnectionPool's message when no connection came in time
NO_CONNECTION = "No connection available."


class _Slot:
    """What the poolkit pool holds: one redis-py connection, with the ``close()`` poolkit calls
    (an awaitable one for the asyncio connection)."""

    __slots__ = ("_open", "connection")

    def __init__(self, connection: Any, open_connections: set[Any]) -> None:
        self.connection = connection
        self._open = open_connections
        open_connections.add(connection)

    def close(self) -> Any:
        self._open.discard(self.connection)
        return self.connection.disconnect()


def _address(kwargs: dict[str, Any]) -> str:
    if "path" in kwargs:
        return f"unix:{kwargs['path']}"
    return f"{kwargs.get('host', 'localhost')}:{kwargs.get('port', 6379)}/{kwargs.get('db', 0)}"


def _healthy(connection: Any) -> bool:
    """A connection given back that may serve again: connected, not marked for reconnect."""
    should_reconnect = getattr(connection, "should_reconnect", None)
    return bool(connection.is_connected) and not (should_reconnect and should_reconnect())


class _Served:
    """What both drop-in pools keep beside redis-py's pool: the poolkit pool's options, the
    leases out (by connection) and the open connections."""

    def _init_served(
        self,
        options: PoolOptions | None,
        max_connections: int,
        timeout: float | None,
        listeners: Iterable[Listener],
    ) -> None:
        self.timeout = timeout
        self._pool_options = dataclasses.replace(
            PoolOptions() if options is None else options,
            max_size=max_connections,
            wait_queue_timeout=timeout,
        )
        self._listeners = tuple(listeners)
        self._leases: dict[Any, Lease[_Slot]] = {}
        self._open_connections: set[Any] = set()

    def _connections(self, *, free: bool, in_use: bool) -> set[Any]:
        every = set(self._open_connections)
        leased = set(self._leases)
        return (every - leased if free else set()) | (every & leased if in_use else set())

    def _get_free_connections(self) -> set[Any]:
        return self._connections(free=True, in_use=False)

    def _get_in_use_connections(self) -> set[Any]:
        return self._connections(free=False, in_use=True)


class ConnectionPool(_Served, redis.ConnectionPool):
    """redis-py's ``ConnectionPool`` (as ``BlockingConnectionPool``) served by a poolkit
    :class:`~poolkit.Pool`: ``redis.Redis(connection_pool=ConnectionPool(max_connections=10))``
    or ``ConnectionPool.from_url(url, max_connections=10)``.

    ``max_connections`` and ``timeout`` are the pool's ``max_size`` and ``wait_queue_timeout``
    (replacing those of ``options``, a :class:`~poolkit.PoolOptions` for the rest: ``min_size``,
    ``max_idle_time``, ``max_lifetime``...); ``listeners`` receive the pool's events; other
    keyword arguments are the connections' (``host``, ``port``, ``db``, ``client_name``...).
    """

    def __init__(
        self,
        max_connections: int = 50,
        timeout: float | None = 20,
        connection_class: type[Any] = redis.Connection,
        *,
        options: PoolOptions | None = None,
        listeners: Iterable[Listener] = (),
        **connection_kwargs: Any,
    ) -> None:
        self._init_served(options, max_connections, timeout, listeners)
        self._pool: Pool[_Slot] | None = None
        self._state_lock = threading.Lock()
        super().__init__(
            connection_class=connection_class,
            max_connections=max_connections,
            **connection_kwargs,
        )  # (which calls reset(): the poolkit pool is opened)

    @property
    def poolkit_pool(self) -> Pool[Any]:
        """The poolkit pool serving now (its ``stats()``, events...)."""
        return self._pool or self._open()

    def _open(self) -> Pool[_Slot]:
        with self._state_lock:
            pool = self._pool
            if pool is None:
                pool = Pool(
                    self._connect,
                    address=_address(self.connection_kwargs),
                    options=self._pool_options,
                    listeners=self._listeners,
                )
                pool.ready()
                self._pool = pool
            return pool

    def _connect(self, ctx: ConnectContext) -> _Slot:
        connection: Any = self.make_connection()
        connection.connect()
        return _Slot(connection, self._open_connections)

    def reset(self) -> None:
        """Close the poolkit pool (if any) and open a new one."""
        self.close()
        self._open()
        self.pid = os.getpid()

    def make_connection(self) -> Any:
        """A new, unconnected redis-py connection (the poolkit pool counts them, not this)."""
        connection = self.connection_class(**self.connection_kwargs)
        cache = getattr(self, "cache", None)
        if cache is not None:
            return _CacheProxyConnection(connection, cache, self._lock)
        return connection

    def get_connection(self, *args: Any, **kwargs: Any) -> Any:
        """A connection, waiting up to ``timeout`` seconds for one, in arrival order."""
        while True:
            pool = self._pool or self._open()
            try:
                lease = pool.checkout()
                break
            except WaitQueueTimeoutError as exc:
                raise redis.ConnectionError(NO_CONNECTION) from exc
            except PoolClosedError:
                if self._pool is pool:  # (closed from elsewhere: not by close())
                    raise
        connection = lease.connection.connection
        self._leases[connection] = lease
        try:
            self._ensure(connection)
        except BaseException:
            self.release(connection)
            raise
        return connection

    def _ensure(self, connection: Any) -> None:
        """redis-py's check at hand-out: connected, with nothing unread."""
        connection.connect()
        try:
            if connection.can_read() and self._checks_unread():
                raise redis.ConnectionError("Connection has data")
        except (redis.ConnectionError, redis.TimeoutError, OSError):
            connection.disconnect()
            connection.connect()
            if connection.can_read() and self._checks_unread():
                raise redis.ConnectionError("Connection not ready") from None

    def _checks_unread(self) -> bool:
        enabled = getattr(self, "maint_notifications_enabled", None)
        return getattr(self, "cache", None) is None and not (enabled and enabled())

    def release(self, connection: Any) -> None:
        """Give ``connection`` back: to the oldest waiter, or to be closed if it is broken."""
        lease = self._leases.pop(connection, None)
        if lease is None:
            return
        if not _healthy(connection):
            lease.discard()
            return
        dispatcher: Any = self._event_dispatcher
        try:  # (redis-py's re-authentication runs here, while the connection is still ours)
            dispatcher.dispatch(_events.AfterConnectionReleasedEvent(connection))
        except BaseException:
            lease.discard()
            raise
        lease.release()

    def disconnect(self, inuse_connections: bool = True) -> None:
        """Drop the sockets (of connections in use too, by default), as redis-py does."""
        for connection in self._connections(free=True, in_use=inuse_connections):
            connection.disconnect()

    def close(self) -> None:
        """Close the poolkit pool and every connection (those in use when given back)."""
        with self._state_lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.close()

    def set_retry(self, retry: Any) -> None:
        self.connection_kwargs.update({"retry": retry})
        for connection in self._connections(free=True, in_use=True):
            connection.retry = retry

    def re_auth_callback(self, token: Any) -> None:
        """Each connection re-authenticates with ``token`` when next given back."""
        for connection in self._connections(free=True, in_use=True):
            connection.set_re_auth_token(token)
