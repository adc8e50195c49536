"""What the redis backend hands out: for each lease, a client that refuses use once the lease is
given back, as asyncpg's pool's proxy does, so that a reference kept after the block cannot run
commands in the session of the connection's next owner.

The pooled client (a ``redis.Redis`` or ``redis.asyncio.Redis`` on one dedicated connection) is
never handed out itself. ``lend`` (the pool's ``Hooks.lend``, called once per lease) gives the
caller a shallow copy of it whose ``connection_pool`` is a *gate*: the dedicated pool behind a
test of the lease. Every command, pipeline, transaction, pub/sub, ``Monitor`` and ``client()``
of redis-py takes its connection from the client's ``connection_pool`` when it runs, so

* the copy, and every ``Pipeline``/``PubSub``/``Monitor`` made from it (they keep the gate,
  not the client) and every ``Script``/``Lock`` (they keep the copy), raises
  :class:`ClientReleasedError` (a ``redis.ConnectionError``) at its first command once the lease
  is given back, before anything is sent;
* an object made in the block that still holds the connection when the lease ends (a PubSub
  not closed, a pipeline left ``WATCH``ing) has the connection discarded by the ``reset`` hook,
  as before, and gets redis-py's ``ConnectionError`` from the closed connection.

Nothing else in redis-py's client leads to the dedicated pool: the client keeps its pool only in
``connection_pool``; ``connection`` is ``None`` (the pooled clients are not
``single_connection_client``); the response callbacks and the event dispatcher hold no pool.
The copy's ``auto_close_connection_pool`` is false: closing it (``close()``, ``aclose()``,
``with r:``), or its garbage collection, leaves the connection to the pool; ``aclose(
close_connection_pool=True)`` during the lease disconnects it (the next command reconnects), as
on the pooled client, and does nothing after.

Rules of this module
--------------------
* A hand-out costs a copy of the client's ``__dict__`` and one small gate holding a weak
  reference to the lease (the lease holds the copy: no cycle); no I/O, no lock.
* Closing the copy never closes the pooled client: ``close``/``aclose`` set on the pooled
  client's instance (an instrumentation's wrapper) are not copied, and redis-py's ``close()``
  on a client without ``auto_close_connection_pool`` and ``connection`` does nothing.
* The gate refuses only taking a connection (and closing one after the lease): giving a
  connection back is never refused, and the rest (encoder, ``connection_kwargs``...) is read
  from the dedicated pool as it is.
* The pool's hooks (check, reset, is_broken) and its close get the pooled client, never a copy.
"""

from __future__ import annotations

import weakref
from typing import Any, TypeVar

from ._extras import require

require("redis", "redis", "redis")  # no redis-py: an ImportError naming poolkit[redis]

import redis  # noqa: E402
import redis.asyncio  # noqa: E402

from .. import Lease  # noqa: E402

__all__ = ["AsyncGate", "ClientReleasedError", "Gate", "async_lend", "lend"]

R = TypeVar("R", redis.Redis, redis.asyncio.Redis)


class ClientReleasedError(redis.ConnectionError):
    """A command (or pipeline, pub/sub...) of a client leased from a poolkit pool, run after its
    lease was given back: the connection may serve another caller now. ``address`` names the
    pool, ``connection_id`` the connection the lease had."""

    def __init__(self, address: str, connection_id: int) -> None:
        super().__init__(
            f"this redis client was leased from the poolkit pool for {address} (connection "
            f"{connection_id}) and has been released back to the pool: another caller may hold "
            "its connection now. Use a leased client only inside its block, or check out again"
        )
        self.address = address
        self.connection_id = connection_id


ClientReleasedError.__module__ = "poolkit.backends.redis"  # (its public name, in tracebacks)


class _GateBase:
    """What the two gates share: the dedicated pool, the lease (weakly), and how they refuse."""

    __slots__ = ("_address", "_connection_id", "_lease", "_pool")

    def __init__(self, pool: Any, lease: Lease[Any]) -> None:
        self._pool = pool
        self._lease = weakref.ref(lease)
        self._address: str = lease.address
        self._connection_id: int = lease.connection_id

    def _out(self) -> bool:
        """Whether the lease is still out (a lease collected is not)."""
        lease = self._lease()
        return lease is not None and lease.active

    def _refuse(self) -> ClientReleasedError:
        return ClientReleasedError(self._address, self._connection_id)

    def __getattr__(self, name: str) -> Any:  # (not the slots: no recursion while unset)
        return getattr(object.__getattribute__(self, "_pool"), name)

    def __repr__(self) -> str:
        state = "" if self._out() else " [released]"
        return f"<poolkit lease of {self._pool!r}{state}>"


class Gate(_GateBase):
    """A lease's view of its client's dedicated ``redis.ConnectionPool``."""

    __slots__ = ()

    def get_connection(self, *args: Any, **kwargs: Any) -> Any:
        if not self._out():
            raise self._refuse()
        return self._pool.get_connection(*args, **kwargs)

    def release(self, connection: Any) -> None:
        self._pool.release(connection)

    def disconnect(self, *args: Any, **kwargs: Any) -> None:
        if self._out():
            self._pool.disconnect(*args, **kwargs)

    def close(self) -> None:
        if self._out():
            self._pool.close()


class AsyncGate(_GateBase):
    """:class:`Gate` for a ``redis.asyncio.ConnectionPool``."""

    __slots__ = ()

    async def get_connection(self, *args: Any, **kwargs: Any) -> Any:
        if not self._out():
            raise self._refuse()
        return await self._pool.get_connection(*args, **kwargs)

    async def release(self, connection: Any) -> None:
        await self._pool.release(connection)

    async def disconnect(self, *args: Any, **kwargs: Any) -> None:
        if self._out():
            await self._pool.disconnect(*args, **kwargs)

    async def aclose(self) -> None:
        if self._out():
            await self._pool.aclose()


def _copy(client: R, gate: _GateBase) -> R:
    cls = type(client)
    lent = cls.__new__(cls)
    state = client.__dict__
    lent.__dict__.update(state)
    if "close" in state or "aclose" in state:  # (a wrapper set on the pooled client itself:
        lent.__dict__.pop("close", None)  # the copy's close, and its __del__, which calls
        lent.__dict__.pop("aclose", None)  # close(), must not reach the pooled client's)
    lent.connection_pool = gate  # type: ignore[assignment]  # (a gate stands for the pool)
    lent.auto_close_connection_pool = False
    return lent


def lend(client: redis.Redis, lease: Lease[Any]) -> redis.Redis:
    """``Hooks.lend`` for :class:`poolkit.Pool`: ``client`` for the length of ``lease``."""
    return _copy(client, Gate(client.connection_pool, lease))


def async_lend(client: redis.asyncio.Redis, lease: Lease[Any]) -> redis.asyncio.Redis:
    """``Hooks.lend`` for :class:`poolkit.AsyncPool`."""
    return _copy(client, AsyncGate(client.connection_pool, lease))
