"""The drop-in pools for ``redis.asyncio.Redis(connection_pool=...)``: ``ConnectionPool`` and
``BlockingConnectionPool`` (exported as ``AsyncConnectionPool`` / ``AsyncBlockingConnectionPool``),
each redis-py's ``redis.asyncio`` class of that name served by a poolkit
:class:`~poolkit.AsyncPool`.

This is the source of ``_redis_dropin_sync`` (the drop-ins for redis-py's blocking clients),
which tools/async_to_sync.py writes from it: what differs for threads (redis-py's blocking pools
have steps and methods of their own) is in ``if True:  # ASYNC`` blocks, whose ``else`` is the
blocking code.

Rules of this module
--------------------
* ``_redis_dropin``'s. Here besides, for asyncio:
* The poolkit pool is opened on the event loop of the first ``get_connection`` (one pool per
  event loop, as every poolkit ``AsyncPool``). A drop-in pool garbage-collected unclosed has its
  poolkit pool closed in a task on that loop, if it still runs.
* A new connection is made with ``make_connection()`` and connected with ``ensure_connection()``
  (redis-py's own steps, so that a subclass's are used), once; at a later hand-out,
  ``ensure_connection()`` checks it again, as redis-py's pools do.
* The books (``_leases``, ``_in_flight``) change only on the event loop's thread: no lock.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
import weakref
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from ._extras import require

require("redis", "redis", "redis")  # no redis-py: an ImportError naming poolkit[redis]

import redis  # noqa: E402
import redis.connection  # noqa: E402

if True:  # ASYNC
    import redis.asyncio
    import redis.asyncio.connection

    from ._common import hold

from .. import ConnectContext  # noqa: E402
from ..asyncio import AsyncPool  # noqa: E402
from ..driver import check_seconds  # noqa: E402
from ..errors import PoolClosedError, WaitQueueTimeoutError  # noqa: E402
from ..events import Listener  # noqa: E402
from ..options import PoolOptions  # noqa: E402
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

if True:  # ASYNC
    #: what the pool classes are called in messages (as ``poolkit.backends.redis`` exports them)
    _PREFIX = "Async"
    #: redis-py's recorders, looked up on its module at each call (as its pools' calls are)
    _recorders: Any = redis.asyncio.connection

    async def _done(recorded: Any) -> None:
        """What a recorder returned: redis-py's asyncio recorders are coroutines, awaited."""
        if recorded is not None:
            await recorded

    async def connected(make_connection: Any) -> Any:
        """A new ``redis.asyncio`` connection from ``make_connection()``, connected; one whose
        connect fails is disconnected (nothing half open is left) and the error goes on."""
        connection: Any = make_connection()
        try:
            await connection.connect()
        except BaseException:
            await connection.disconnect()
            raise
        return connection
else:
    _PREFIX = ""
    _recorders = redis.connection
    #: redis-py's client-side cache connection (redis-py 6 and later), if this redis-py has it
    _CacheProxyConnection: Any = getattr(redis.connection, "CacheProxyConnection", None)

    def _done(recorded: Any) -> None:
        """What a recorder returned: redis-py's blocking recorders have run."""


def _connector(pool: ConnectionPool) -> Callable[[ConnectContext], Awaitable[Slot]]:
    """The poolkit pool's connect function: ``pool``'s new connection, through a weak reference
    (the poolkit pool must not keep ``pool`` alive)."""
    owner = weakref.ref(pool)

    async def connect(ctx: ConnectContext) -> Slot:
        pool = owner()
        if pool is None:
            # (collected: its finalizer is closing this poolkit pool)
            raise PoolClosedError(address=ctx.address, operation="make a connection for")
        return await pool._new_slot()

    return connect


if True:  # ASYNC

    def _close_soon(loop: asyncio.AbstractEventLoop, pool: AsyncPool[Any]) -> None:
        """Close ``pool``, whose drop-in pool was collected, in a task on ``loop`` (if it
        runs)."""

        def start() -> None:
            hold(loop.create_task(pool.close()))

        if not loop.is_closed():
            try:
                loop.call_soon_threadsafe(start)
            except RuntimeError:  # (closed meanwhile)
                pass
else:

    def _close_soon(pool: AsyncPool[Any]) -> None:
        """Close ``pool``, whose drop-in pool was collected, on a thread of its own (a
        collection may happen anywhere, even where a pool's lock is held)."""
        threading.Thread(target=pool.close, name="poolkit-redis-close", daemon=True).start()


class ConnectionPool(Served, redis.asyncio.ConnectionPool):
    """redis-py's ``redis.asyncio.ConnectionPool`` served by a poolkit
    :class:`~poolkit.AsyncPool`:
    ``redis.asyncio.Redis(connection_pool=ConnectionPool(max_connections=10))`` or
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
        connection_class: type[Any] = redis.asyncio.Connection,
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
                redis.asyncio.connection.AbstractConnection,
            )
        self._pool: AsyncPool[Slot] | None = None
        self._finalizer: weakref.finalize[Any, Any] | None = None
        if True:  # ASYNC: close tasks of pools reset (kept referenced until done)
            self._closing: set[asyncio.Task[None]] = set()
        else:  # (guards ``_pool``: threads may open the pool at once)
            self._state_lock = threading.Lock()
        self._init_books()
        super().__init__(
            connection_class=connection_class,
            max_connections=max_connections,
            **checked_kwargs(f"{_PREFIX}{type(self).__name__}", connection_kwargs),
        )
        self._init_served(options, listeners, f"{_PREFIX}{type(self).__name__}")
        self._weaken_handler()

    async def update_maint_notifications_config(self, *args: Any, **kwargs: Any) -> None:
        await super().update_maint_notifications_config(*args, **kwargs)
        self._weaken_handler()

    @property
    def poolkit_pool(self) -> AsyncPool[Any]:
        """The poolkit pool serving now (opened if none is: for asyncio, on the running loop)."""
        return self._pool or self._open()

    def _open(self) -> AsyncPool[Slot]:
        if True:  # ASYNC
            pool = self._pool
            if pool is None:
                pool = self._new_pool()
                loop = asyncio.get_running_loop()
                self._finalizer = weakref.finalize(self, _close_soon, loop, pool)
                self._finalizer.atexit = False  # (at exit the process closes the sockets)
            return pool
        else:
            with self._state_lock:
                pool = self._pool
                if pool is None:
                    pool = self._new_pool()
                    self._finalizer = weakref.finalize(self, _close_soon, pool)
                    self._finalizer.atexit = False  # (at exit the process closes the sockets)
                return pool

    def _new_pool(self) -> AsyncPool[Slot]:
        pool = AsyncPool(
            _connector(self),
            address=address_of(self.connection_kwargs),
            options=self._pool_options,
            listeners=self._listeners,
        )
        pool.ready()
        self._pool = pool
        return pool

    def _forget(self) -> AsyncPool[Slot] | None:
        """The poolkit pool, no longer this pool's (its finalizer detached)."""
        if True:  # ASYNC
            pool, self._pool = self._pool, None
            finalizer, self._finalizer = self._finalizer, None
        else:
            with self._state_lock:
                pool, self._pool = self._pool, None
                finalizer, self._finalizer = self._finalizer, None
        if finalizer is not None:
            finalizer.detach()
        return pool

    async def _new_slot(self) -> Slot:
        """A new connection, connected (the connect function's work, in the pool's task or on
        its thread)."""
        started = time.monotonic()
        make: Any = self.make_connection
        connection: Any = make()
        try:
            if True:  # ASYNC
                await self.ensure_connection(connection)
            else:
                connection.connect()
        except BaseException:
            await connection.disconnect()
            raise
        slot = Slot(connection, self._open_connections, self._pool_name())
        await _done(
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
        if True:  # ASYNC
            pool = self._forget() if hasattr(self, "_pool") else None
            if pool is not None:
                task = asyncio.get_running_loop().create_task(pool.close())
                self._closing.add(task)
                task.add_done_callback(self._closing.discard)
        else:
            if getattr(self, "_pool", None) is not None:
                self.close()
            self.pid = os.getpid()

    if True:  # ASYNC

        def can_get_connection(self) -> bool:
            return len(self._leases) + self._in_flight < self.max_connections
    else:

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

    async def get_connection(self, *args: Any, **kwargs: Any) -> Any:
        """A connection: an available one, else a new one; ``MaxConnectionsError`` when
        ``max_connections`` are out."""
        started = time.monotonic()
        slot = await self._lease()
        connection = slot.connection
        record_moved(slot.pool_name, IDLE, USED)
        try:
            if True:  # ASYNC: redis-py's own step, a subclass's if it has one
                if slot.fresh and connection.is_connected:
                    slot.fresh = False  # (connected by the connect function just now)
                else:
                    slot.fresh = False
                    await self.ensure_connection(connection)
            else:
                self._ensure(slot)
            await self._waited(slot.pool_name, started)
        except BaseException:
            await self.release(connection)
            raise
        return connection

    async def _lease(self) -> Slot:
        """A lease from the poolkit pool, registered, and its slot (never waiting for a
        connection to come back: only for one being made)."""
        if True:  # ASYNC
            if not self.can_get_connection():
                raise MaxConnectionsError(TOO_MANY)
            self._in_flight += 1
        else:
            with self._book_lock:
                if len(self._leases) + self._in_flight >= self.max_connections:
                    raise MaxConnectionsError(TOO_MANY)
                self._in_flight += 1
        try:
            return await self._checkout(None)
        finally:
            if True:  # ASYNC
                self._in_flight -= 1
            else:
                with self._book_lock:
                    self._in_flight -= 1

    async def _checkout(self, timeout: float | None) -> Slot:
        while True:
            pool = self._pool or self._open()
            try:
                lease = await pool.checkout(timeout=timeout)
                break
            except WaitQueueTimeoutError as exc:
                raise redis.ConnectionError(NO_CONNECTION) from exc
            except PoolClosedError:
                if self._pool is pool:  # (closed from elsewhere: not by close())
                    raise
        slot = lease.connection
        slot.leased = True
        if True:  # ASYNC
            self._leases[slot.connection] = lease
        else:
            with self._book_lock:
                self._leases[slot.connection] = lease
        return slot

    async def _waited(self, pool_name: str, started: float) -> None:
        """Recorded after a hand-out (``BlockingConnectionPool``: the wait time)."""

    async def release(self, connection: Any) -> None:
        """Give ``connection`` back: to the oldest waiter, or to be closed if it is broken."""
        if True:  # ASYNC
            lease = self._leases.pop(connection, None)
        else:
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
                if True:  # ASYNC
                    released = redis_events.AsyncAfterConnectionReleasedEvent(connection)
                    await dispatcher.dispatch_async(released)
                else:
                    dispatcher.dispatch(redis_events.AfterConnectionReleasedEvent(connection))
            except BaseException:
                lease.discard()
                raise
        slot = lease.connection
        slot.leased = False
        record_moved(slot.pool_name, USED, IDLE)
        lease.release()

    async def disconnect(self, inuse_connections: bool = True) -> None:
        """Drop the sockets (of connections in use too, by default), as redis-py does."""
        await self._disconnect(self._connections_now(free=True, in_use=inuse_connections))

    @staticmethod
    async def _disconnect(connections: Iterable[Any]) -> None:
        if True:  # ASYNC
            results = await asyncio.gather(
                *(connection.disconnect() for connection in connections), return_exceptions=True
            )
            for result in results:
                if isinstance(result, BaseException):
                    raise result
        else:
            for connection in connections:
                connection.disconnect()

    async def aclose(self) -> None:
        """Disconnect every connection, in use or not, and close the poolkit pool (those in use
        are closed when given back), as redis-py's ``aclose()`` disconnects them all."""
        if True:  # ASYNC
            on_close = getattr(self, "_on_close", None)
            if on_close is not None:
                await on_close()
        pool = self._forget()
        if pool is not None:
            await pool.close()
        if True:  # ASYNC
            if self._closing:
                await asyncio.gather(*self._closing)
        await self._disconnect(self._connections_now(free=False, in_use=True))

    if True:  # ASYNC

        async def update_active_connections_for_reconnect(self) -> None:
            for connection in self._connections_now(free=False, in_use=True):
                connection.mark_for_reconnect()

        def get_connection_count(self) -> list[tuple[int, dict[Any, Any]]]:
            counts: list[tuple[int, dict[Any, Any]]] = super().get_connection_count()
            return [
                (len(self._get_free_connections()), counts[0][1]),
                (len(self._get_in_use_connections()), counts[1][1]),
            ]

    async def re_auth_callback(self, token: Any) -> None:
        """Each connection re-authenticates with ``token`` when next given back."""
        self._releases_heard = True
        for connection in self._connections_now(free=True, in_use=True):
            connection.set_re_auth_token(token)


class BlockingConnectionPool(ConnectionPool, redis.asyncio.BlockingConnectionPool):
    """redis-py's ``redis.asyncio.BlockingConnectionPool`` served by a poolkit
    :class:`~poolkit.AsyncPool`: with ``max_connections`` (default 50) out, ``get_connection``
    waits up to ``timeout`` seconds (default 20; ``None``: no limit) for one, waiters served in
    arrival order, then raises ``ConnectionError("No connection available.")`` (the poolkit error
    as its cause).

    The other arguments are :class:`ConnectionPool`'s.
    """

    def __init__(
        self,
        max_connections: int | None = 50,
        timeout: float | None = 20,
        connection_class: type[Any] = redis.asyncio.Connection,
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

    async def _lease(self) -> Slot:
        if self.timeout == 0:  # (redis-py: no wait for a connection to come back)
            try:
                return await super()._lease()
            except MaxConnectionsError:
                raise redis.ConnectionError(NO_CONNECTION) from None
        return await self._checkout(self.timeout)

    if True:  # ASYNC

        def can_get_connection(self) -> bool:
            return len(self._leases) < self.max_connections

    async def _waited(self, pool_name: str, started: float) -> None:
        await _done(
            record(
                _recorders,
                "record_connection_wait_time",
                pool_name=pool_name,
                duration_seconds=time.monotonic() - started,
            )
        )
