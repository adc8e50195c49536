# Generated from src/poolkit/backends/_redis_dropin_async.py by tools/async_to_sync.py: do not edit.
"""The drop-in pools for redis-py's blocking clients: ``ConnectionPool`` and
``BlockingConnectionPool``, each redis-py's class of that name served by a poolkit
:class:`~poolkit.Pool` (``poolkit.backends.redis`` exports them).

Generated from ``_redis_dropin_async`` by tools/async_to_sync.py: edit that one, then run the
tool. Its rules are ``_redis_dropin``'s; here besides, for threads: ``_state_lock`` guards the
poolkit pool's opening and closing, ``_book_lock`` the books; a drop-in pool garbage-collected
unclosed has its poolkit pool closed on a thread of its own.
"""

from __future__ import annotations

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

from .. import ConnectContext  # noqa: E402
from ..driver import check_seconds  # noqa: E402
from ..errors import PoolClosedError, WaitQueueTimeoutError  # noqa: E402
from ..events import Listener  # noqa: E402
from ..options import PoolOptions  # noqa: E402
from ..threaded import Pool  # noqa: E402
from ._redis_dropin import (  # noqa: E402
    IDLE,
    NO_CONNECTION,
    TOO_MANY,
    USED,
    MaxConnectionsError,
    Served,
    Slot,
    address_of,
    checked_kwargs,
    healthy,
    metrics_name,
    record,
    record_moved,
    redis_events,
    refuse_timeout,
)

__all__ = ["BlockingConnectionPool", "ConnectionPool"]

_PREFIX = ""
_recorders = redis.connection
#: redis-py's client-side cache connection (redis-py 6 and later), if this redis-py has it
_CacheProxyConnection: Any = getattr(redis.connection, "CacheProxyConnection", None)


def _done(recorded: Any) -> None:
    """What a recorder returned: redis-py's blocking recorders have run."""


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
    """Close ``pool``, whose drop-in pool was collected, on a thread of its own (a
    collection may happen anywhere, even where a pool's lock is held)."""
    threading.Thread(target=pool.close, name="poolkit-redis-close", daemon=True).start()


class ConnectionPool(Served, redis.ConnectionPool):
    """redis-py's ``redis.ConnectionPool`` served by a poolkit
    :class:`~poolkit.Pool`:
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
                f"{_PREFIX}ConnectionPool",
                f"{_PREFIX}BlockingConnectionPool",
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
            **checked_kwargs(f"{_PREFIX}{type(self).__name__}", connection_kwargs),
        )
        self._init_served(options, listeners, f"{_PREFIX}{type(self).__name__}")
        self._weaken_handler()

    def update_maint_notifications_config(self, *args: Any, **kwargs: Any) -> None:
        super().update_maint_notifications_config(*args, **kwargs)
        self._weaken_handler()

    @property
    def poolkit_pool(self) -> Pool[Any]:
        """The poolkit pool serving now (opened if none is: for asyncio, on the running loop)."""
        return self._pool or self._open()

    def _open(self) -> Pool[Slot]:
        with self._state_lock:
            pool = self._pool
            if pool is None:
                pool = self._new_pool()
                self._finalizer = weakref.finalize(self, _close_soon, pool)
                self._finalizer.atexit = False  # (at exit the process closes the sockets)
            return pool

    def _new_pool(self) -> Pool[Slot]:
        pool = Pool(
            _connector(self),
            address=address_of(self.connection_kwargs),
            options=self._pool_options,
            listeners=self._listeners,
        )
        pool.ready()
        self._pool = pool
        return pool

    def _forget(self) -> Pool[Slot] | None:
        """The poolkit pool, no longer this pool's (its finalizer detached)."""
        with self._state_lock:
            pool, self._pool = self._pool, None
            finalizer, self._finalizer = self._finalizer, None
        if finalizer is not None:
            finalizer.detach()
        return pool

    def _new_slot(self) -> Slot:
        """A new connection, connected (the connect function's work, in the pool's task or on
        its thread)."""
        started = time.monotonic()
        make: Any = self.make_connection
        connection: Any = make()
        try:
            connection.connect()
        except BaseException:
            connection.disconnect()
            raise
        slot = Slot(connection, self._open_connections, self._pool_name())
        _done(
            record(
                _recorders,
                "record_connection_create_time",
                connection_pool=self,
                duration_seconds=time.monotonic() - started,
            )
        )
        return slot

    def _pool_name(self) -> str:
        return metrics_name(_recorders, self)

    def reset(self) -> None:
        """Let the poolkit pool go, if any (asyncio: closed in a task of the running loop;
        threads: closed now); the next ``get_connection`` opens a new one."""
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

    def _ensure(self, slot: Slot) -> None:
        """redis-py's check at hand-out: connected (a new connection already is), with
        nothing unread (else reconnected)."""
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

    def get_connection(self, *args: Any, **kwargs: Any) -> Any:
        """A connection: an available one, else a new one; ``MaxConnectionsError`` when
        ``max_connections`` are out."""
        started = time.monotonic()
        slot = self._lease()
        connection = slot.connection
        record_moved(slot.pool_name, IDLE, USED)
        try:
            self._ensure(slot)
            self._waited(slot.pool_name, started)
        except BaseException:
            self.release(connection)
            raise
        return connection

    def _lease(self) -> Slot:
        """A lease from the poolkit pool, registered, and its slot (never waiting for a
        connection to come back: only for one being made)."""
        with self._book_lock:
            if len(self._leases) + self._in_flight >= self.max_connections:
                raise MaxConnectionsError(TOO_MANY)
            self._in_flight += 1
        try:
            return self._checkout(None)
        finally:
            with self._book_lock:
                self._in_flight -= 1

    def _checkout(self, timeout: float | None) -> Slot:
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
        return slot

    def _waited(self, pool_name: str, started: float) -> None:
        """Recorded after a hand-out (``BlockingConnectionPool``: the wait time)."""

    def release(self, connection: Any) -> None:
        """Give ``connection`` back: to the oldest waiter, or to be closed if it is broken."""
        with self._book_lock:
            lease = self._leases.pop(connection, None)
        if lease is None:
            return
        if not healthy(connection):
            lease.discard()
            return
        if self._releases_heard:
            dispatcher: Any = self._event_dispatcher
            try:  # (redis-py's re-authentication runs here, while the connection is still ours;
                # given back even if this task is cancelled while the listeners run)
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
        self._disconnect(self._connections_now(free=True, in_use=inuse_connections))

    @staticmethod
    def _disconnect(connections: Iterable[Any]) -> None:
        for connection in connections:
            connection.disconnect()

    def close(self) -> None:
        """Disconnect every connection, in use or not, and close the poolkit pool (those in use
        are closed when given back), as redis-py's ``close()`` disconnects them all."""
        pool = self._forget()
        if pool is not None:
            pool.close()
        self._disconnect(self._connections_now(free=False, in_use=True))

    def re_auth_callback(self, token: Any) -> None:
        """Each connection re-authenticates with ``token`` when next given back."""
        self._releases_heard = True
        for connection in self._connections_now(free=True, in_use=True):
            connection.set_re_auth_token(token)


class BlockingConnectionPool(ConnectionPool, redis.BlockingConnectionPool):
    """redis-py's ``redis.BlockingConnectionPool`` served by a poolkit
    :class:`~poolkit.Pool`: with ``max_connections`` (default 50) out, ``get_connection``
    waits up to ``timeout`` seconds (default 20; ``None``: no limit) for one, waiters served in
    arrival order, then raises ``ConnectionError("No connection available.")`` (the poolkit error
    as its cause).

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
        connection_kwargs.pop("queue_class", None)  # (redis-py's queue: not used here)
        # (a bad timeout fails here, not at each command as a checkout(timeout=...) it passes)
        checked = check_seconds(timeout, f"{_PREFIX}BlockingConnectionPool(timeout=...)")
        super().__init__(
            connection_class,
            max_connections,
            options=options,
            listeners=listeners,
            **connection_kwargs,
        )
        self.timeout = checked

    def _lease(self) -> Slot:
        if self.timeout == 0:  # (redis-py: no wait for a connection to come back)
            try:
                return super()._lease()
            except MaxConnectionsError:
                raise redis.ConnectionError(NO_CONNECTION) from None
        return self._checkout(self.timeout)

    def _waited(self, pool_name: str, started: float) -> None:
        _done(
            record(
                _recorders,
                "record_connection_wait_time",
                pool_name=pool_name,
                duration_seconds=time.monotonic() - started,
            )
        )
