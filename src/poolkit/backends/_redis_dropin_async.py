"""``AsyncConnectionPool``: the drop-in pool for ``redis.asyncio.Redis(connection_pool=...)``,
served by a poolkit :class:`~poolkit.AsyncPool`. Its rules are ``_redis_dropin``'s."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

from ._extras import require

require("redis", "redis", "redis")  # no redis-py: an ImportError naming poolkit[redis]

import redis  # noqa: E402
import redis.asyncio  # noqa: E402

from .._frontend import ConnectContext  # noqa: E402
from ..asyncio import AsyncPool  # noqa: E402
from ..errors import PoolClosedError, WaitQueueTimeoutError  # noqa: E402
from ..events import Listener  # noqa: E402
from ..options import PoolOptions  # noqa: E402
from ._redis_dropin import NO_CONNECTION, _address, _events, _healthy, _Served, _Slot  # noqa: E402

__all__ = ["AsyncConnectionPool"]


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


class AsyncConnectionPool(_Served, redis.asyncio.ConnectionPool):
    """:class:`ConnectionPool` for ``redis.asyncio.Redis``, served by a poolkit
    :class:`~poolkit.AsyncPool`, opened on the event loop of the first ``get_connection`` (one
    pool per event loop, as every poolkit ``AsyncPool``)."""

    def __init__(
        self,
        max_connections: int = 50,
        timeout: float | None = 20,
        connection_class: type[Any] = redis.asyncio.Connection,
        *,
        options: PoolOptions | None = None,
        listeners: Iterable[Listener] = (),
        **connection_kwargs: Any,
    ) -> None:
        self._init_served(options, max_connections, timeout, listeners)
        self._pool: AsyncPool[_Slot] | None = None
        self._closing: set[asyncio.Task[None]] = set()
        super().__init__(
            connection_class=connection_class,
            max_connections=max_connections,
            **connection_kwargs,
        )

    @property
    def poolkit_pool(self) -> AsyncPool[Any]:
        """The poolkit pool serving now (opened on the running loop if none is)."""
        return self._pool or self._open()

    def _open(self) -> AsyncPool[_Slot]:
        pool = self._pool
        if pool is None:
            pool = AsyncPool(
                self._connect,
                address=_address(self.connection_kwargs),
                options=self._pool_options,
                listeners=self._listeners,
            )
            pool.ready()
            self._pool = pool
        return pool

    async def _connect(self, ctx: ConnectContext) -> _Slot:
        return _Slot(await connected(self.make_connection), self._open_connections)

    def reset(self) -> None:
        """Forget the poolkit pool (closed in a task of the running loop, if one runs); the next
        ``get_connection`` opens a new one."""
        pool, self._pool = self._pool, None
        if pool is not None:
            task = asyncio.get_running_loop().create_task(pool.close())
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)

    def can_get_connection(self) -> bool:
        pool = self._pool
        if pool is None:
            return True
        stats = pool.stats()
        return stats.available > 0 or not self.max_connections or stats.total < self.max_connections

    async def get_connection(self, *args: Any, **kwargs: Any) -> Any:
        """A connection, waiting up to ``timeout`` seconds for one, in arrival order."""
        while True:
            pool = self._pool or self._open()
            try:
                lease = await pool.checkout()
                break
            except WaitQueueTimeoutError as exc:
                raise redis.ConnectionError(NO_CONNECTION) from exc
            except PoolClosedError:
                if self._pool is pool:
                    raise
        connection = lease.connection.connection
        self._leases[connection] = lease
        try:
            await self.ensure_connection(connection)
        except BaseException:
            await self.release(connection)
            raise
        return connection

    async def release(self, connection: Any) -> None:
        """Give ``connection`` back: to the oldest waiter, or to be closed if it is broken."""
        lease = self._leases.pop(connection, None)
        if lease is None:
            return
        if not _healthy(connection):
            lease.discard()
            return
        dispatcher: Any = self._event_dispatcher
        try:
            await dispatcher.dispatch_async(_events.AsyncAfterConnectionReleasedEvent(connection))
        except BaseException:
            lease.discard()
            raise
        lease.release()

    async def disconnect(self, inuse_connections: bool = True) -> None:
        """Drop the sockets (of connections in use too, by default), as redis-py does."""
        connections = self._connections(free=True, in_use=inuse_connections)
        results = await asyncio.gather(
            *(connection.disconnect() for connection in connections), return_exceptions=True
        )
        for result in results:
            if isinstance(result, BaseException):
                raise result

    async def aclose(self) -> None:
        """Close the poolkit pool and every connection (those in use when given back)."""
        on_close = getattr(self, "_on_close", None)
        if on_close is not None:
            await on_close()
        pool, self._pool = self._pool, None
        if pool is not None:
            await pool.close()
        if self._closing:
            await asyncio.gather(*self._closing)

    async def update_active_connections_for_reconnect(self) -> None:
        for connection in self._connections(free=False, in_use=True):
            connection.mark_for_reconnect()

    def get_connection_count(self) -> list[tuple[int, dict[Any, Any]]]:
        counts: list[tuple[int, dict[Any, Any]]] = super().get_connection_count()
        return [
            (len(self._get_free_connections()), counts[0][1]),
            (len(self._get_in_use_connections()), counts[1][1]),
        ]

    def set_retry(self, retry: Any) -> None:
        self.connection_kwargs.update({"retry": retry})
        for connection in self._connections(free=True, in_use=True):
            connection.retry = retry

    async def re_auth_callback(self, token: Any) -> None:
        """Each connection re-authenticates with ``token`` when next given back."""
        for connection in self._connections(free=True, in_use=True):
            connection.set_re_auth_token(token)
