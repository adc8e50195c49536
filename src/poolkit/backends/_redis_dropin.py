"""The drop-in pools for redis-py's own clients, served by a poolkit pool:
``redis.Redis(connection_pool=ConnectionPool())`` and ``BlockingConnectionPool()``; the asyncio
twins are in ``_redis_dropin_async``, on what this module's pools share.

A redis-py client takes a connection from its pool for each command (pipeline, pub/sub) and gives
it back after. Each class here is the redis-py class of the same name (subclassed: ``from_url``,
``connection_kwargs``, ``get_encoder``, the retry, re-auth and maintenance plumbing are redis-py's
own) and behaves as it does, with poolkit's pool under it:

* ``ConnectionPool`` never waits for a connection to come back: with ``max_connections`` out it
  raises redis-py's ``MaxConnectionsError("Too many connections")`` at once, as redis-py's.
* ``BlockingConnectionPool`` waits up to ``timeout`` seconds (20 by default; ``None``: no limit)
  and then raises ``ConnectionError("No connection available.")``; waiting callers are served
  strictly in arrival order, where redis-py's lets a thread that just gave a connection back take
  it again ahead of threads that have waited for seconds.

Rules of this module
--------------------
* ``max_connections`` is redis-py's (``None`` or ``0``: 100; negative: ``ValueError``) and is the
  poolkit pool's ``max_size`` and ``max_connecting``: new connections are made all at once, as
  redis-py makes them, never more than the limit.
* The poolkit pool holds each redis-py connection in a :class:`Slot`, whose ``close()`` is the
  connection's ``disconnect()``. The connect function makes the connection with the pool's
  ``make_connection()`` and connects it (redis-py's one ``connect()``); a connection handed out
  for the first time is not connected again, only checked, as redis-py checks a new one.
* The poolkit pool refers to this pool only weakly (its connect function holds a weak
  reference): a pool nobody references is garbage-collected, and that closes the poolkit pool and
  its connections (on a thread of its own: a collection may happen anywhere, even where a pool's
  lock is held).
* ``get_connection`` hands out a connection connected, with nothing left unread (else
  reconnected), as redis-py does. ``release`` of a connection that is disconnected (a command
  failed; pub/sub's reset) or marked for reconnect discards it: the poolkit pool closes it and
  connects anew when needed. Releasing a connection that is not out from this pool does nothing.
* redis-py's observability is called where redis-py's pools call it: connection create time
  (when the connect function made one), wait time (``BlockingConnectionPool``), connection counts
  by state, and the ``AfterConnectionReleasedEvent`` (redis-py's re-authentication) on release.
* ``disconnect()`` is redis-py's: it drops the sockets (of connections in use too, by default);
  the connections stay and reconnect at their next use. ``close()`` disconnects every connection,
  in use or not, and closes the poolkit pool (one in use is closed when given back); the next
  ``get_connection`` opens a new one, since redis-py's pools stay usable after ``close()``.
"""

from __future__ import annotations

import dataclasses
import os
import threading
import time
import weakref
from collections.abc import Callable, Iterable
from typing import Any

from ._extras import require

require("redis", "redis", "redis")  # no redis-py: an ImportError naming poolkit[redis]

import redis  # noqa: E402
import redis.connection  # noqa: E402
import redis.event  # noqa: E402

from ..driver import ConnectContext, Lease  # noqa: E402
from ..errors import PoolClosedError, WaitQueueTimeoutError  # noqa: E402
from ..events import Listener  # noqa: E402
from ..options import PoolOptions  # noqa: E402
from ..threaded import Pool  # noqa: E402

__all__ = ["BlockingConnectionPool", "ConnectionPool"]

#: redis-py's untyped parts, called through ``Any`` (mypy --strict refuses untyped calls); its
#: recorders are looked up on its module at each call, as its own pools' calls are
redis_events: Any = redis.event
_connection_module: Any = redis.connection
_CacheProxyConnection: Any = getattr(redis.connection, "CacheProxyConnection", None)
try:  # (redis-py 7.1 and later record metrics)
    from redis.observability.attributes import ConnectionState
except ImportError:  # pragma: no cover - an older redis-py: nothing to record
    IDLE: Any = None
    USED: Any = None
else:
    IDLE = ConnectionState.IDLE
    USED = ConnectionState.USED
#: this redis-py keeps connection counts by state
COUNTS = hasattr(redis.connection, "record_connection_count")

#: redis-py's BlockingConnectionPool's message when no connection came in time
NO_CONNECTION = "No connection available."
#: redis-py's ConnectionPool's message when every connection is out
TOO_MANY = "Too many connections"
#: what redis-py's ConnectionPool raises then (a plain ConnectionError in older redis-py)
MaxConnectionsError: type[redis.ConnectionError] = getattr(
    redis, "MaxConnectionsError", redis.ConnectionError
)


def record(module: Any, name: str, **kwargs: Any) -> Any:
    """``module.name(**kwargs)``: one of redis-py's recorders, if this redis-py has it."""
    recorder = getattr(module, name, None)
    return None if recorder is None else recorder(**kwargs)


def record_count(pool_name: str, state: Any, counter: int) -> None:
    """redis-py's connection count by state (an up-down counter), as its pools keep it."""
    if COUNTS:
        _connection_module.record_connection_count(
            pool_name=pool_name, connection_state=state, counter=counter
        )


def record_moved(pool_name: str, left: Any, entered: Any) -> None:
    """One connection moved from state ``left`` to ``entered`` (two counts, as redis-py's pools
    record a check-out and a check-in), in one call on the path of every command."""
    if COUNTS:
        count = _connection_module.record_connection_count
        count(pool_name=pool_name, connection_state=left, counter=-1)
        count(pool_name=pool_name, connection_state=entered, counter=1)


def metrics_name(module: Any, pool: Any) -> str:
    """redis-py's name of ``pool`` in its metrics."""
    name = record(module, "get_pool_name", pool=pool)
    return "" if name is None else str(name)


class Slot:
    """What the poolkit pool holds: one redis-py connection, with the ``close()`` poolkit calls
    (an awaitable one for the asyncio connection). ``fresh``: never handed out yet; ``leased``:
    out now (for the counts recorded when it closes)."""

    __slots__ = ("_open", "connection", "fresh", "leased", "pool_name")

    def __init__(self, connection: Any, open_connections: set[Any], pool_name: str) -> None:
        self.connection = connection
        self.pool_name = pool_name
        self.fresh = True
        self.leased = False
        self._open = open_connections
        open_connections.add(connection)
        record_count(pool_name, IDLE, 1)

    def close(self) -> Any:
        self._open.discard(self.connection)
        record_count(self.pool_name, USED if self.leased else IDLE, -1)
        return self.connection.disconnect()


def address_of(kwargs: dict[str, Any]) -> str:
    if "path" in kwargs:
        return f"unix:{kwargs['path']}"
    return f"{kwargs.get('host', 'localhost')}:{kwargs.get('port', 6379)}/{kwargs.get('db', 0)}"


def healthy(connection: Any) -> bool:
    """A connection given back that may serve again: connected, not marked for reconnect."""
    should_reconnect = getattr(connection, "should_reconnect", None)
    if should_reconnect is not None and should_reconnect():
        return False
    return bool(getattr(connection, "is_connected", True))


def refuse_timeout(call: str, blocking: str, connection_class: Any, base: type[Any]) -> None:
    """``timeout=`` given to a pool that never waits: redis-py would pass it on to each connection
    (which takes no such argument); say where it belongs instead."""
    if isinstance(connection_class, type) and issubclass(connection_class, base):
        raise TypeError(
            f"{call}(timeout=...): this pool does not wait for a connection, as redis-py's "
            f"{call} does not (with max_connections out it raises MaxConnectionsError); use "
            f"{blocking}(timeout=...) to wait"
        )


class Served:
    """What every drop-in pool keeps beside redis-py's pool: the poolkit pool's options, the
    leases out (by connection) and the open connections."""

    max_connections: int

    def _init_books(self) -> None:
        """Before redis-py's ``__init__`` (which calls ``reset()``): the leases out, by
        connection, the open connections, and the checkouts under way (``_book_lock`` guards
        them, and is held for nothing else)."""
        self._book_lock = threading.Lock()
        self._leases: dict[Any, Lease[Slot]] = {}
        self._open_connections: set[Any] = set()
        self._in_flight = 0

    def _init_served(
        self, options: PoolOptions | None, listeners: Iterable[Listener], kind: str
    ) -> None:
        """After redis-py's ``__init__`` (which checked ``max_connections``)."""
        if options is not None and not isinstance(options, PoolOptions):
            raise TypeError(
                f"{kind}(options=...) must be a poolkit.PoolOptions, not {type(options).__name__}"
            )
        self._pool_options = dataclasses.replace(
            PoolOptions() if options is None else options,
            max_size=self.max_connections,
            max_connecting=self.max_connections,
            wait_queue_timeout=None,
        )
        self._listeners = tuple(listeners)

    def _weaken_handler(self) -> None:
        """redis-py's maintenance notifications handler (RESP3) refers to its pool, and each
        connection to a copy of it: made a weak proxy, so that the connections the poolkit pool
        holds do not keep this pool alive."""
        handler = getattr(self, "_maint_notifications_pool_handler", None)
        if handler is not None and not isinstance(handler.pool, weakref.ProxyType):
            handler.pool = weakref.proxy(self)

    def _connections_now(self, *, free: bool, in_use: bool) -> set[Any]:
        with self._book_lock:
            every = set(self._open_connections)
            leased = set(self._leases)
        return (every - leased if free else set()) | (every & leased if in_use else set())

    def _get_free_connections(self) -> set[Any]:
        return self._connections_now(free=True, in_use=False)

    def _get_in_use_connections(self) -> set[Any]:
        return self._connections_now(free=False, in_use=True)

    def set_retry(self, retry: Any) -> None:
        connection_kwargs: dict[str, Any] = self.connection_kwargs  # type: ignore[attr-defined]  # (redis-py is untyped)
        connection_kwargs.update({"retry": retry})
        for connection in self._connections_now(free=True, in_use=True):
            connection.retry = retry


def _connector(pool: ConnectionPool) -> Callable[[ConnectContext], Slot]:
    """The poolkit pool's connect function: ``pool``'s new connection, through a weak reference
    (the poolkit pool must not keep ``pool`` alive)."""
    owner = weakref.ref(pool)

    def connect(ctx: ConnectContext) -> Slot:
        pool = owner()
        if pool is None:
            # (collected: its finalizer is closing this poolkit pool)
            raise PoolClosedError(address=ctx.address, operation="make a connection for")
        return pool._new_slot()

    return connect


def _close_soon(pool: Pool[Any]) -> None:
    """Close ``pool``, whose drop-in pool was collected, on a thread of its own."""
    threading.Thread(target=pool.close, name="poolkit-redis-close", daemon=True).start()


class ConnectionPool(Served, redis.ConnectionPool):
    """redis-py's ``ConnectionPool`` served by a poolkit :class:`~poolkit.Pool`:
    ``redis.Redis(connection_pool=ConnectionPool(max_connections=10))`` or
    ``ConnectionPool.from_url(url, max_connections=10)``. With ``max_connections`` connections
    out, ``get_connection`` raises ``MaxConnectionsError`` at once, as redis-py's.

    ``max_connections`` (redis-py's: ``None`` or ``0`` for 100) is the poolkit pool's
    ``max_size`` and ``max_connecting`` (replacing those of ``options``, a
    :class:`~poolkit.PoolOptions` for the rest: ``min_size``, ``max_idle_time``,
    ``max_lifetime``...); ``listeners`` receive the pool's events; other keyword arguments are
    redis-py's (``host``, ``port``, ``db``, ``client_name``...).
    """

    def __init__(
        self,
        connection_class: type[Any] = redis.Connection,
        max_connections: int | None = None,
        *,
        options: PoolOptions | None = None,
        listeners: Iterable[Listener] = (),
        **connection_kwargs: Any,
    ) -> None:
        if "timeout" in connection_kwargs and not isinstance(self, BlockingConnectionPool):
            refuse_timeout(
                "ConnectionPool",
                "BlockingConnectionPool",
                connection_class,
                redis.connection.AbstractConnection,
            )
        self._pool: Pool[Slot] | None = None
        self._finalizer: weakref.finalize[Any, Any] | None = None
        self._state_lock = threading.Lock()
        self._init_books()
        super().__init__(
            connection_class=connection_class,
            max_connections=max_connections,
            **connection_kwargs,
        )
        self._init_served(options, listeners, type(self).__name__)
        self._weaken_handler()

    def update_maint_notifications_config(self, *args: Any, **kwargs: Any) -> None:
        super().update_maint_notifications_config(*args, **kwargs)
        self._weaken_handler()

    @property
    def poolkit_pool(self) -> Pool[Any]:
        """The poolkit pool serving now (opened if none is)."""
        return self._pool or self._open()

    def _open(self) -> Pool[Slot]:
        with self._state_lock:
            pool = self._pool
            if pool is None:
                pool = Pool(
                    _connector(self),
                    address=address_of(self.connection_kwargs),
                    options=self._pool_options,
                    listeners=self._listeners,
                )
                pool.ready()
                self._pool = pool
                self._finalizer = weakref.finalize(self, _close_soon, pool)
                self._finalizer.atexit = False  # (at exit the process closes the sockets)
            return pool

    def _new_slot(self) -> Slot:
        """A new connection, connected (the connect function's work, on the pool's thread)."""
        started = time.monotonic()
        connection: Any = self.make_connection()
        try:
            connection.connect()
        except BaseException:
            connection.disconnect()
            raise
        slot = Slot(connection, self._open_connections, self._pool_name())
        record(
            _connection_module,
            "record_connection_create_time",
            connection_pool=self,
            duration_seconds=time.monotonic() - started,
        )
        return slot

    def _pool_name(self) -> str:
        return metrics_name(_connection_module, self)

    def reset(self) -> None:
        """Close the poolkit pool, if any (the next ``get_connection`` opens a new one)."""
        if getattr(self, "_pool", None) is not None:
            self.close()
        self.pid = os.getpid()

    def make_connection(self) -> Any:
        """A new, unconnected redis-py connection (the poolkit pool counts them, not this)."""
        connection = self.connection_class(**self.connection_kwargs)
        cache = getattr(self, "cache", None)
        if cache is not None:
            return _CacheProxyConnection(connection, cache, self._lock)
        return connection

    def get_connection(self, *args: Any, **kwargs: Any) -> Any:
        """A connection: an available one, else a new one; ``MaxConnectionsError`` when
        ``max_connections`` are out."""
        started = time.monotonic()
        lease = self._lease()
        slot = lease.connection
        connection = slot.connection
        name = slot.pool_name
        record_moved(name, IDLE, USED)
        try:
            self._ensure(slot)
        except BaseException:
            self.release(connection)
            raise
        self._waited(name, started)
        return connection

    def _lease(self) -> Lease[Slot]:
        """A lease from the poolkit pool, registered (never waiting for a connection to come
        back: only for one being made)."""
        with self._book_lock:
            if len(self._leases) + self._in_flight >= self.max_connections:
                raise MaxConnectionsError(TOO_MANY)
            self._in_flight += 1
        try:
            return self._checkout(None)
        finally:
            with self._book_lock:
                self._in_flight -= 1

    def _checkout(self, timeout: float | None) -> Lease[Slot]:
        while True:
            pool = self._pool or self._open()
            try:
                lease = pool.checkout(timeout=timeout)
                break
            except WaitQueueTimeoutError as exc:
                raise redis.ConnectionError(NO_CONNECTION) from exc
            except PoolClosedError:
                if self._pool is pool:  # (closed from elsewhere: not by close())
                    raise
        slot = lease.connection
        slot.leased = True
        with self._book_lock:
            self._leases[slot.connection] = lease
        return lease

    def _waited(self, pool_name: str, started: float) -> None:
        """Recorded after a hand-out (``BlockingConnectionPool``: the wait time)."""

    def _ensure(self, slot: Slot) -> None:
        """redis-py's check at hand-out: connected (a new connection already is), with nothing
        unread."""
        connection = slot.connection
        if not slot.fresh:
            connection.connect()
        slot.fresh = False
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
        with self._book_lock:
            lease = self._leases.pop(connection, None)
        if lease is None:
            return
        if not healthy(connection):
            lease.discard()
            return
        dispatcher: Any = self._event_dispatcher
        try:  # (redis-py's re-authentication runs here, while the connection is still ours)
            dispatcher.dispatch(redis_events.AfterConnectionReleasedEvent(connection))
        except BaseException:
            lease.discard()
            raise
        slot = lease.connection
        slot.leased = False
        record_moved(slot.pool_name, USED, IDLE)
        lease.release()

    def disconnect(self, inuse_connections: bool = True) -> None:
        """Drop the sockets (of connections in use too, by default), as redis-py does."""
        for connection in self._connections_now(free=True, in_use=inuse_connections):
            connection.disconnect()

    def close(self) -> None:
        """Disconnect every connection, in use or not, and close the poolkit pool (those in use
        are closed when given back), as redis-py's ``close()`` disconnects them all."""
        with self._state_lock:
            pool, self._pool = self._pool, None
            finalizer, self._finalizer = self._finalizer, None
        if finalizer is not None:
            finalizer.detach()
        if pool is not None:
            pool.close()
        for connection in self._connections_now(free=False, in_use=True):
            connection.disconnect()

    def re_auth_callback(self, token: Any) -> None:
        """Each connection re-authenticates with ``token`` when next given back."""
        for connection in self._connections_now(free=True, in_use=True):
            connection.set_re_auth_token(token)


class BlockingConnectionPool(ConnectionPool, redis.BlockingConnectionPool):
    """redis-py's ``BlockingConnectionPool`` served by a poolkit :class:`~poolkit.Pool`: with
    ``max_connections`` (default 50) out, ``get_connection`` waits up to ``timeout`` seconds
    (default 20; ``None``: no limit) for one, waiters served in arrival order, then raises
    ``ConnectionError("No connection available.")`` (the poolkit error as its cause).

    The other arguments are :class:`ConnectionPool`'s.
    """

    def __init__(
        self,
        max_connections: int | None = 50,
        timeout: float | None = 20,
        connection_class: type[Any] = redis.Connection,
        *,
        options: PoolOptions | None = None,
        listeners: Iterable[Listener] = (),
        **connection_kwargs: Any,
    ) -> None:
        connection_kwargs.pop("queue_class", None)  # (redis-py's LIFO queue: not used here)
        super().__init__(
            connection_class,
            max_connections,
            options=options,
            listeners=listeners,
            **connection_kwargs,
        )
        self.timeout = timeout

    def _lease(self) -> Lease[Slot]:
        if self.timeout == 0:  # (redis-py: no wait for a connection to come back)
            try:
                return super()._lease()
            except MaxConnectionsError:
                raise redis.ConnectionError(NO_CONNECTION) from None
        return self._checkout(self.timeout)

    def _waited(self, pool_name: str, started: float) -> None:
        record(
            _connection_module,
            "record_connection_wait_time",
            pool_name=pool_name,
            duration_seconds=time.monotonic() - started,
        )
