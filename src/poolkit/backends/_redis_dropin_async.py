"""The drop-in pools for ``redis.asyncio.Redis(connection_pool=...)``: ``ConnectionPool`` and
``BlockingConnectionPool`` (exported as ``AsyncConnectionPool`` / ``AsyncBlockingConnectionPool``),
each redis-py's ``redis.asyncio`` class of that name served by a poolkit
:class:`~poolkit.AsyncPool`. Their rules are ``_redis_dropin``'s; here besides:

* The poolkit pool is opened on the event loop of the first ``get_connection`` (one pool per
  event loop, as every poolkit ``AsyncPool``). A drop-in pool garbage-collected unclosed has its
  poolkit pool closed in a task on that loop, if it still runs.
* A new connection is made with ``make_connection()`` and connected with ``ensure_connection()``
  (redis-py's own steps, so that a subclass's are used), once; at a later hand-out,
  ``ensure_connection()`` checks it again, as redis-py's pools do.
"""

from __future__ import annotations

import asyncio
import time
import weakref
from collections.abc import Callable, Coroutine, Iterable
from typing import Any

from ._extras import require

require("redis", "redis", "redis")  # no redis-py: an ImportError naming poolkit[redis]

import redis  # noqa: E402
import redis.asyncio  # noqa: E402
import redis.asyncio.connection  # noqa: E402

from ..asyncio import AsyncPool  # noqa: E402
from ..driver import ConnectContext, Lease  # noqa: E402
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
    healthy,
    metrics_name,
    record,
    record_moved,
    redis_events,
    refuse_timeout,
)

__all__ = ["BlockingConnectionPool", "ConnectionPool"]

#: redis-py's asyncio recorders, looked up on its module at each call (as its pools' calls are)
_aio: Any = redis.asyncio.connection
#: close tasks of pools collected unclosed (kept referenced until done)
_closing_collected: set[asyncio.Task[None]] = set()


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


def _connector(pool: ConnectionPool) -> Callable[[ConnectContext], Coroutine[Any, Any, Slot]]:
    """The poolkit pool's connect function, holding ``pool`` weakly (``_redis_dropin``)."""
    owner = weakref.ref(pool)

    async def connect(ctx: ConnectContext) -> Slot:
        pool = owner()
        if pool is None:
            # (collected: its finalizer is closing this poolkit pool)
            raise PoolClosedError(address=ctx.address, operation="make a connection for")
        return await pool._new_slot()

    return connect


def _close_soon(loop: asyncio.AbstractEventLoop, pool: AsyncPool[Any]) -> None:
    """Close ``pool``, whose drop-in pool was collected, in a task on ``loop`` (if it runs)."""

    def start() -> None:
        task = loop.create_task(pool.close())
        _closing_collected.add(task)
        task.add_done_callback(_closing_collected.discard)

    if not loop.is_closed():
        try:
            loop.call_soon_threadsafe(start)
        except RuntimeError:  # (closed meanwhile)
            pass


class ConnectionPool(Served, redis.asyncio.ConnectionPool):
    """redis-py's ``redis.asyncio.ConnectionPool`` served by a poolkit
    :class:`~poolkit.AsyncPool`: with ``max_connections`` out, ``get_connection`` raises
    ``MaxConnectionsError`` at once. Arguments as ``poolkit.backends.redis.ConnectionPool``'s."""

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
                "AsyncConnectionPool",
                "AsyncBlockingConnectionPool",
                connection_class,
                redis.asyncio.connection.AbstractConnection,
            )
        self._pool: AsyncPool[Slot] | None = None
        self._finalizer: weakref.finalize[Any, Any] | None = None
        self._closing: set[asyncio.Task[None]] = set()
        self._init_books()
        super().__init__(
            connection_class=connection_class,
            max_connections=max_connections,
            **connection_kwargs,
        )
        self._init_served(options, listeners, f"Async{type(self).__name__}")
        self._weaken_handler()

    async def update_maint_notifications_config(self, *args: Any, **kwargs: Any) -> None:
        await super().update_maint_notifications_config(*args, **kwargs)
        self._weaken_handler()

    @property
    def poolkit_pool(self) -> AsyncPool[Any]:
        """The poolkit pool serving now (opened on the running loop if none is)."""
        return self._pool or self._open()

    def _open(self) -> AsyncPool[Slot]:
        pool = self._pool
        if pool is None:
            pool = AsyncPool(
                _connector(self),
                address=address_of(self.connection_kwargs),
                options=self._pool_options,
                listeners=self._listeners,
            )
            pool.ready()
            self._pool = pool
            loop = asyncio.get_running_loop()
            self._finalizer = weakref.finalize(self, _close_soon, loop, pool)
            self._finalizer.atexit = False
        return pool

    def _forget(self) -> AsyncPool[Slot] | None:
        """The poolkit pool, no longer this pool's (its finalizer detached)."""
        pool, self._pool = self._pool, None
        finalizer, self._finalizer = self._finalizer, None
        if finalizer is not None:
            finalizer.detach()
        return pool

    async def _new_slot(self) -> Slot:
        """A new connection, connected (the connect function's work, in the pool's task)."""
        started = time.monotonic()
        make: Any = self.make_connection
        connection: Any = make()
        try:
            await self.ensure_connection(connection)
        except BaseException:
            await connection.disconnect()
            raise
        slot = Slot(connection, self._open_connections, self._pool_name())
        recorded = record(
            _aio,
            "record_connection_create_time",
            connection_pool=self,
            duration_seconds=time.monotonic() - started,
        )
        if recorded is not None:
            await recorded
        return slot

    def _pool_name(self) -> str:
        return metrics_name(_aio, self)

    def reset(self) -> None:
        """Forget the poolkit pool (closed in a task of the running loop); the next
        ``get_connection`` opens a new one."""
        pool = self._forget() if hasattr(self, "_pool") else None
        if pool is not None:
            task = asyncio.get_running_loop().create_task(pool.close())
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)

    def can_get_connection(self) -> bool:
        return len(self._leases) + self._in_flight < self.max_connections

    async def get_connection(self, *args: Any, **kwargs: Any) -> Any:
        """A connection: an available one, else a new one; ``MaxConnectionsError`` when
        ``max_connections`` are out."""
        started = time.monotonic()
        lease = await self._lease()
        slot = lease.connection
        connection = slot.connection
        record_moved(slot.pool_name, IDLE, USED)
        try:
            if slot.fresh and connection.is_connected:
                slot.fresh = False  # (connected by the connect function just now)
            else:
                slot.fresh = False
                await self.ensure_connection(connection)
            await self._waited(slot.pool_name, started)
        except BaseException:
            await self.release(connection)
            raise
        return connection

    async def _lease(self) -> Lease[Slot]:
        if not self.can_get_connection():
            raise MaxConnectionsError(TOO_MANY)
        self._in_flight += 1
        try:
            return await self._checkout(None)
        finally:
            self._in_flight -= 1

    async def _checkout(self, timeout: float | None) -> Lease[Slot]:
        while True:
            pool = self._pool or self._open()
            try:
                lease = await pool.checkout(timeout=timeout)
                break
            except WaitQueueTimeoutError as exc:
                raise redis.ConnectionError(NO_CONNECTION) from exc
            except PoolClosedError:
                if self._pool is pool:
                    raise
        slot = lease.connection
        slot.leased = True
        self._leases[slot.connection] = lease
        return lease

    async def _waited(self, pool_name: str, started: float) -> None:
        """Recorded after a hand-out (``BlockingConnectionPool``: the wait time)."""

    async def release(self, connection: Any) -> None:
        """Give ``connection`` back: to the oldest waiter, or to be closed if it is broken."""
        lease = self._leases.pop(connection, None)
        if lease is None:
            return
        if not healthy(connection):
            lease.discard()
            return
        dispatcher: Any = self._event_dispatcher
        try:  # (given back even if this task is cancelled while the listeners run)
            released = redis_events.AsyncAfterConnectionReleasedEvent(connection)
            await dispatcher.dispatch_async(released)
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
        results = await asyncio.gather(
            *(connection.disconnect() for connection in connections), return_exceptions=True
        )
        for result in results:
            if isinstance(result, BaseException):
                raise result

    async def aclose(self) -> None:
        """Disconnect every connection, in use or not, and close the poolkit pool (those in use
        are closed when given back), as redis-py's ``aclose()`` disconnects them all."""
        on_close = getattr(self, "_on_close", None)
        if on_close is not None:
            await on_close()
        pool = self._forget()
        if pool is not None:
            await pool.close()
        if self._closing:
            await asyncio.gather(*self._closing)
        await self._disconnect(self._connections_now(free=False, in_use=True))

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
        for connection in self._connections_now(free=True, in_use=True):
            connection.set_re_auth_token(token)


class BlockingConnectionPool(ConnectionPool, redis.asyncio.BlockingConnectionPool):
    """redis-py's ``redis.asyncio.BlockingConnectionPool`` served by a poolkit
    :class:`~poolkit.AsyncPool`: with ``max_connections`` (default 50) out, ``get_connection``
    waits up to ``timeout`` seconds (default 20; ``None``: no limit), waiters served in arrival
    order, then raises ``ConnectionError("No connection available.")``."""

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
        connection_kwargs.pop("queue_class", None)  # (redis-py's, deprecated: not used here)
        super().__init__(
            connection_class,
            max_connections,
            options=options,
            listeners=listeners,
            **connection_kwargs,
        )
        self.timeout = timeout

    async def _lease(self) -> Lease[Slot]:
        if self.timeout == 0:  # (no wait for a connection to come back)
            try:
                return await super()._lease()
            except MaxConnectionsError:
                raise redis.ConnectionError(NO_CONNECTION) from None
        return await self._checkout(self.timeout)

    def can_get_connection(self) -> bool:
        return len(self._leases) < self.max_connections

    async def _waited(self, pool_name: str, started: float) -> None:
        recorded = record(
            _aio,
            "record_connection_wait_time",
            pool_name=pool_name,
            duration_seconds=time.monotonic() - started,
        )
        if recorded is not None:
            await recorded
