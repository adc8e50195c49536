"""What the drop-in pools for redis-py's own clients share, and their rules:
``redis.Redis(connection_pool=ConnectionPool())`` and ``BlockingConnectionPool()``
(``_redis_dropin_sync``), ``redis.asyncio.Redis(connection_pool=...)`` (``_redis_dropin_async``,
the source the blocking ones are generated from).

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
import threading
import weakref
from collections.abc import Iterable
from typing import Any

from ._extras import require

require("redis", "redis", "redis")  # no redis-py: an ImportError naming poolkit[redis]

import redis  # noqa: E402
import redis.connection  # noqa: E402
import redis.event  # noqa: E402

from .. import Lease  # noqa: E402
from ..driver import check_port, check_seconds  # noqa: E402
from ..events import Listener  # noqa: E402
from ..options import PoolOptions  # noqa: E402

#: redis-py's untyped parts, called through ``Any`` (mypy --strict refuses untyped calls); its
#: recorders are looked up on its module at each call, as its own pools' calls are
redis_events: Any = redis.event
_connection_module: Any = redis.connection
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


#: redis-py's connection arguments that are durations (seconds, ``None``: no limit)
_DURATIONS = ("socket_timeout", "socket_connect_timeout")


def checked_kwargs(call: str, kwargs: dict[str, Any]) -> dict[str, Any]:
    """redis-py's connection ``kwargs`` (a URL's parsed in) with ``port`` and the socket timeouts
    checked for ``call``, naming the argument: redis-py would take them and fail at each connect
    ("Timeout value out of range"), or connect to ``port`` modulo 65536."""
    out = dict(kwargs)
    if "port" in out:
        out["port"] = check_port(out["port"], f"{call}(port=...)", text=True)
    for name in _DURATIONS:
        if name in out:
            out[name] = check_seconds(out[name], f"{call}({name}=...)")
    return out


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
        #: whether a release dispatches redis-py's ``AfterConnectionReleasedEvent``: when someone
        #: may hear it. A dispatcher given to the pool may carry listeners of the caller's; the
        #: pool's own default dispatcher carries redis-py's only, ``ReAuthConnectionListener``,
        #: whose ``re_auth()`` does something only once ``re_auth_callback`` set a token (then
        #: this turns true for good). Otherwise each release would build and dispatch an event
        #: that nothing acts on (about 55 bytecodes of the ~2,300 of a ``GET``).
        self._releases_heard = self.connection_kwargs.get("event_dispatcher") is not None  # type: ignore[attr-defined]  # (redis-py is untyped)

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
