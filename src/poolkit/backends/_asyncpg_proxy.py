"""What the asyncpg backend hands out: a proxy of the pooled connection for one lease, which
refuses use once that lease is given back, as asyncpg's own pool's proxy does.

Rules of this module
--------------------
* One proxy a lease (``lend``, the pool's ``Hooks.lend``), made the first time the lease's
  connection is read. It holds the connection and a weak reference to its lease (the lease holds
  the proxy: no cycle, nothing left for the garbage collector on the hand-out path).
* Every public method of ``asyncpg.Connection`` is a method of the proxy that asks whether its
  lease is still out and then calls the connection's own (its class's, so that a
  ``connection_class`` override runs): a method taken off the proxy in the block and called
  after it refuses too. Other attributes are looked up on the connection, after the same test.
* Once the lease is given back (or collected), everything raises asyncpg's ``InterfaceError``
  ("... connection has been released back to the pool"). Prepared statements, cursors and
  transactions made during a lease are asyncpg's own objects on the connection itself: they are
  invalidated as asyncpg's pool invalidates them (its release counter), at the next hand-out and
  at the reset (``reset`` in ``asyncpg``).
* The pool's hooks (check, reset, is_broken) and its close get the connection itself, never a
  proxy.
* For a type checker the proxy *is* an ``asyncpg.Connection`` (a subclass): what users of
  ``pool.connection()`` see stays ``Connection``. At run time ``isinstance(proxy, Connection)``
  holds too, as for asyncpg's proxy (asyncpg's ``_ConnectionProxy`` base).
"""

from __future__ import annotations

import functools
import inspect
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import asyncpg
import asyncpg.connection

from .. import Lease

__all__ = ["PooledConnection", "connection_of", "invalidate_resources", "lend"]

if TYPE_CHECKING:
    from asyncpg import Connection

    _Base = Connection
else:  # (the base that makes isinstance(proxy, asyncpg.Connection) true, as for asyncpg's proxy)
    _Base = getattr(asyncpg.connection, "_ConnectionProxy", object)


def _released(name: str) -> asyncpg.InterfaceError:
    """asyncpg's error (its pool's words) for a proxy whose lease was given back, or is gone."""
    return asyncpg.InterfaceError(
        f"cannot call Connection.{name}(): connection has been released back to the pool"
    )


class PooledConnection(_Base):  # type: ignore[misc,valid-type,unused-ignore]  # (no asyncpg-stubs)
    """An ``asyncpg.Connection`` for the length of one lease (see the module's rules)."""

    __slots__ = ("__weakref__", "_con", "_holder", "_lease")

    def __init__(self, connection: Any, lease: Lease[Any]) -> None:
        self._con = connection
        self._lease = weakref.ref(lease)

    def _live(self, name: str) -> Any:
        """The connection, if the lease is still out; else asyncpg's ``InterfaceError``."""
        lease = self._lease()
        if lease is None or not lease.active:
            raise _released(name)
        return self._con

    if not TYPE_CHECKING:  # (for mypy, attributes are Connection's: a typo stays an error)

        def __getattr__(self, name: str) -> Any:
            return getattr(self._live(name), name)

    def __repr__(self) -> str:
        lease = self._lease()
        if lease is None or not lease.active:
            return f"<{type(self).__name__} [released] {id(self):#x}>"
        return f"<{type(self).__name__} {self._con!r} {id(self):#x}>"


def _forward(name: str, method: Callable[..., Any]) -> Callable[..., Any]:
    """``PooledConnection.<name>``: the connection's own method, while the lease is out."""

    def forwarded(self: PooledConnection, *args: Any, **kwargs: Any) -> Any:
        lease = self._lease()
        if lease is None or not lease.active:
            raise _released(name)
        con = self._con
        return getattr(type(con), name)(con, *args, **kwargs)

    functools.update_wrapper(forwarded, method)
    mark = getattr(inspect, "markcoroutinefunction", None)  # (Python 3.12+)
    if mark is not None and inspect.iscoroutinefunction(method):
        mark(forwarded)
    return forwarded


def _forward_all() -> None:
    for name in dir(asyncpg.Connection):
        method = getattr(asyncpg.Connection, name)
        if not name.startswith("_") and inspect.isfunction(method):
            setattr(PooledConnection, name, _forward(name, method))


_forward_all()


def invalidate_resources(connection: Any) -> None:
    """Invalidate the prepared statements, cursors and transactions made on ``connection`` so
    far, as asyncpg's pool does on release (they then raise ``InterfaceError``: "... the
    underlying connection has been released back to the pool")."""
    if hasattr(connection, "_pool_release_ctr"):  # (asyncpg's counter of releases)
        connection._pool_release_ctr += 1


def connection_of(handed: Any) -> Any:
    """The pooled connection behind ``handed`` (a proxy, or the connection itself)."""
    return handed._con if type(handed) is PooledConnection else handed


def lend(connection: Any, lease: Lease[Any]) -> Connection:
    """``Hooks.lend``: the proxy for ``lease``; what earlier leases made on the connection is
    refused from now on."""
    invalidate_resources(connection)
    return PooledConnection(connection, lease)
