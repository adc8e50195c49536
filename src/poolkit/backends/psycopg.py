"""PostgreSQL with psycopg 3: connect functions, hooks and one-call pools (``Pool`` and
``AsyncPool``), and psycopg_pool's commit-or-roll-back contract.

    from poolkit.backends import psycopg as pg

    pool = pg.create_pool("postgresql://app@db/app", options=poolkit.PoolOptions(max_size=10))
    with pool.connection() as conn:              # commits if the block succeeds,
        conn.execute("INSERT INTO t VALUES (1)")  # rolls back if it raises
    pool.close()

    apool = await pg.create_async_pool(dsn)     # or: async with pg.create_async_pool(dsn) as apool
    async with apool.connection() as conn:
        await conn.execute("INSERT INTO t VALUES (1)")

Commit or roll back: ``pool.connection()``
------------------------------------------
psycopg_pool's ``pool.connection()`` commits when its block succeeds and rolls back when it
raises; so does ``pool.connection()`` of the pools built here, through ``Hooks.end`` (:func:`end`,
:func:`async_end`), which the pool runs in the caller when the block ends, before the connection
goes back: a COMMIT that fails (a deferred constraint, a serialization failure) reaches the
caller, and after an error the block's error is the one raised. The COMMIT (or ROLLBACK) goes
out with the reset query in one message (:func:`make_end`): a block that ends costs one round
trip, as psycopg_pool's commit does, and the reset at check-in then sends nothing.
:func:`connection` does the same for a pool built without these hooks.

Everything else is made safe by the hooks, whatever way a connection comes back:

* ``reset`` on check-in rolls back a transaction left open or failed (with a warning on logger
  ``poolkit.backends.psycopg``, as psycopg_pool does: the reset never commits; only a
  ``connection()`` block's exit does, above), discards a connection given back mid-query,
  closed or broken, gives back what a caller can change on the connection object as it was
  once configured (``row_factory``, the cursor factories, ``prepare_threshold``,
  ``prepared_max``, notice and notify handlers, ``autocommit``, ``isolation_level``,
  ``read_only``, ``deferrable``), then (``reset=True``, the default) sends asyncpg's reset:
  ``pg_advisory_unlock_all()``, ``CLOSE ALL``, ``UNLISTEN *``, ``RESET ALL``, in one round trip
  outside a transaction. ``reset="..."``: your query instead; ``reset=False``: no query, only
  the rollback (psycopg_pool's behaviour), which costs no round trip on a clean connection.
  Settings sent at connect (``options="-c search_path=..."`` in the DSN) survive ``RESET ALL``.
* ``check`` before a hand-out (``check="closed"``): closed or broken raises; if the server sent
  anything to the idle connection (as it does when it terminates the backend) a round trip
  tells whether the connection still works. No I/O otherwise. ``check="ping"``: always a round
  trip (an empty query outside a transaction, as psycopg_pool's ``check_connection``).
* ``is_broken``: ``conn.closed or conn.broken``: an SQL error is not, a lost server is.
* ``lend`` (:func:`lend`): each lease hands out a connection object of its own, of a subclass of
  the connection's class sharing the pooled connection's state (no proxy: psycopg's own methods,
  at their own cost). Once the block is over (or the lease given back), that object, and every
  cursor, server-side cursor, transaction, pipeline or copy made from it, raises
  :class:`ConnectionReleasedError` (a ``psycopg.InterfaceError``: "the connection was released
  back to the pool") at its next use, before anything is sent: a reference kept past the block
  cannot run in the session of the connection's next owner, nor leave it a transaction to
  commit. (psycopg_pool lets it; asyncpg's pool refuses it, as here.)
* :func:`ping` / :func:`async_ping` for ``KeepAlive(interval, probe)``.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from typing import TYPE_CHECKING, Any, Final, Literal, TypeVar, overload

from .. import AsyncPool, ConnectContext, Hooks, Pool, PoolOptions
from ..driver import DEFAULT, PoolStarter, async_start, require_asyncio, start
from ..events import Listener
from ._common import check_pg_args, shown_address, with_hooks
from ._extras import require
from ._psycopg_pool_args import pool_options, refuse_elsewhere

if TYPE_CHECKING:
    import psycopg
    from psycopg.conninfo import conninfo_to_dict
else:
    psycopg = require("psycopg", "psycopg", "psycopg")
    conninfo_to_dict = psycopg.conninfo.conninfo_to_dict

# (after the driver: without it, the ImportError above is the one that names the extra)
# (psycopg_pool's classes, served by poolkit's pools: see _psycopg_dropin)
from ._psycopg_dropin import PoolClosed, PoolTimeout, TooManyRequests
from ._psycopg_dropin_async import AsyncConnectionPool, AsyncNullConnectionPool
from ._psycopg_dropin_sync import ConnectionPool, NullConnectionPool
from ._psycopg_hooks import (
    DEFAULT_RESET_QUERY,
    async_check,
    async_check_closed_soon,
    async_check_ping,
    async_end,
    async_ping,
    async_remembering,
    check,
    check_ping,
    end,
    is_broken,
    make_async_end,
    make_async_reset,
    make_async_reset_soon,
    make_end,
    make_reset,
    ping,
    remembering,
)
from ._psycopg_lend import ConnectionReleasedError, lend

__all__ = [
    "DEFAULT_RESET_QUERY",
    "AsyncConnectionPool",
    "AsyncNullConnectionPool",
    "ConnectionPool",
    "ConnectionReleasedError",
    "NullConnectionPool",
    "PoolClosed",
    "PoolTimeout",
    "TooManyRequests",
    "async_check",
    "async_check_ping",
    "async_connect",
    "async_end",
    "async_hooks",
    "async_ping",
    "check",
    "check_ping",
    "connect",
    "connection",
    "create_async_pool",
    "create_pool",
    "end",
    "hooks",
    "is_broken",
    "lend",
    "make_async_end",
    "make_end",
    "make_async_reset",
    "make_reset",
    "ping",
]

#: libpq's connection parameters that are durations (seconds), checked at the call
_DURATIONS: Final = ("connect_timeout",)

Conn = psycopg.Connection[Any]
AsyncConn = psycopg.AsyncConnection[Any]
Check = Literal["closed", "ping"] | None
_C = TypeVar("_C")


def connect(
    dsn: str = "",
    *,
    autocommit: bool = False,
    application_name: str = "poolkit",
    connection_class: type[Conn] | None = None,
    **kwargs: Any,
) -> Callable[[ConnectContext], Conn]:
    """A connect function for :class:`~poolkit.Pool`: ``psycopg.connect(dsn, **kwargs)`` with
    ``application_name`` set (so the pool's sessions can be found in ``pg_stat_activity``);
    ``connection_class``: a subclass of ``psycopg.Connection`` to connect with instead."""
    cls = _connection_class(connection_class, psycopg.Connection, "connect")
    check_pg_args("psycopg.connect", kwargs, _DURATIONS, text=True)

    def connect_one(ctx: ConnectContext) -> Conn:
        return cls.connect(dsn, autocommit=autocommit, application_name=application_name, **kwargs)

    return connect_one


def async_connect(
    dsn: str = "",
    *,
    autocommit: bool = False,
    application_name: str = "poolkit",
    connection_class: type[AsyncConn] | None = None,
    **kwargs: Any,
) -> Callable[[ConnectContext], Awaitable[AsyncConn]]:
    """:func:`connect` for :class:`~poolkit.AsyncPool`: ``psycopg.AsyncConnection.connect``."""
    cls = _connection_class(connection_class, psycopg.AsyncConnection, "async_connect")
    check_pg_args("psycopg.async_connect", kwargs, _DURATIONS, text=True)

    async def connect_one(ctx: ConnectContext) -> AsyncConn:
        require_asyncio("psycopg.async_connect", "psycopg's AsyncConnection")
        return await cls.connect(
            dsn, autocommit=autocommit, application_name=application_name, **kwargs
        )

    return connect_one


def _connection_class(given: type[_C] | None, base: type[_C], builder: str) -> type[_C]:
    if given is None:
        return base
    if not (isinstance(given, type) and issubclass(given, base)):
        raise TypeError(
            f"{builder}(connection_class=...) must be psycopg.{base.__name__} or a subclass, "
            f"got {given!r}"
        )
    return given


def _reset_query(reset: bool | str) -> str | None:
    if reset is True:
        return DEFAULT_RESET_QUERY
    if reset is False:
        return None
    if not isinstance(reset, str):
        raise TypeError(
            "reset must be True, False, a query or a function of the connection, not "
            f"{type(reset).__name__}"
        )
    return reset


#: what a ``Pool`` and an ``AsyncPool`` of psycopg connections run: (the "closed" check, the
#: "ping" check, the reset maker, the end hook maker, the configure wrapper)
_SYNC_KIT: Final = (check, check_ping, make_reset, make_end, remembering)
_ASYNC_KIT: Final = (
    async_check_closed_soon,  # (plain when no ping is needed: no task per checkout)
    async_check_ping,
    make_async_reset_soon,  # (plain when the connection is clean: no task per check-in)
    make_async_end,
    async_remembering,
)


def _hooks(
    kit: tuple[Any, ...],
    reset: bool | str | Callable[[Any], Any],
    check: Check | Callable[[Any], Any],
    check_after: float,
    configure: Callable[[Any], Any] | None,
    autocommit: bool,
    timeout: float | None,
) -> Hooks:
    """The hooks of ``kit`` (``_SYNC_KIT`` or ``_ASYNC_KIT``) with these settings."""
    check_closed_, check_ping_, make_reset_, make_end_, remembering_ = kit
    checks = {"closed": check_closed_, "ping": check_ping_, None: None}
    if callable(check):
        chosen_check = check
    elif isinstance(check, str | None) and check in checks:
        chosen_check = checks[check]
    else:
        raise ValueError(
            f"check must be 'closed', 'ping', None or a function of the connection, got {check!r}"
        )
    query = None if callable(reset) else _reset_query(reset)
    if callable(reset):  # psycopg_pool's reset callback: after the rollback, instead of a query
        chosen_reset = make_reset_(None, autocommit=autocommit, then=reset)
    else:
        chosen_reset = make_reset_(query, autocommit=autocommit)
    return Hooks(
        configure=remembering_(configure),
        check=chosen_check,
        check_after=check_after,
        reset=chosen_reset,
        # COMMIT and the reset query in one round trip; the rest of the reset in the caller
        end=make_end_(query, chosen_reset),
        is_broken=is_broken,
        timeout=timeout,
        lend=lend,  # (the same for both pools: each lease's own connection object)
    )


def hooks(
    *,
    reset: bool | str | Callable[[Conn], Any] = True,
    check: Check | Callable[[Conn], Any] = "closed",
    check_after: float = 0.0,
    configure: Callable[[Conn], Any] | None = None,
    autocommit: bool = False,
    timeout: float | None = 30.0,
) -> Hooks:
    """The :class:`~poolkit.Hooks` for a :class:`~poolkit.Pool` of psycopg connections (see the
    module's docstring). ``reset``: ``True`` (the default query), ``False`` (roll back only), a
    query, or a function of the connection run after the rollback (psycopg_pool's ``reset``);
    ``check``: ``"closed"``, ``"ping"``, ``None`` or a function of the connection that raises
    when it is unusable (psycopg_pool's ``check``, such as
    ``psycopg_pool.ConnectionPool.check_connection``); ``configure``: yours, after which the
    connection's settings are remembered for the reset to give back; ``autocommit``: the value
    the connections are made with."""
    return _hooks(_SYNC_KIT, reset, check, check_after, configure, autocommit, timeout)


def async_hooks(
    *,
    reset: bool | str | Callable[[AsyncConn], Awaitable[Any]] = True,
    check: Check | Callable[[AsyncConn], Awaitable[Any]] = "closed",
    check_after: float = 0.0,
    configure: Callable[[AsyncConn], Awaitable[Any]] | None = None,
    autocommit: bool = False,
    timeout: float | None = 30.0,
) -> Hooks:
    """:func:`hooks` for an :class:`~poolkit.AsyncPool` of ``psycopg.AsyncConnection``."""
    return _hooks(_ASYNC_KIT, reset, check, check_after, configure, autocommit, timeout)


def _connect_kwargs(
    builder: str,
    dsn: str,
    conninfo: str | None,
    kwargs: dict[str, Any] | None,
    more: dict[str, Any],
) -> tuple[str, dict[str, Any]]:
    """The DSN and ``psycopg.connect``'s keywords: ``connect_kwargs`` and psycopg_pool's
    ``kwargs=`` dict together (a name in both is refused), ``conninfo=`` as psycopg_pool's name
    of the DSN; psycopg_pool keywords that mean nothing here refused. (``autocommit`` and
    ``application_name`` in ``kwargs=`` are the builder's own arguments: it takes them out.)"""
    refuse_elsewhere(builder, more)
    if conninfo is not None:
        if dsn:
            raise TypeError(f"{builder}() got the DSN twice: as dsn and as conninfo=")
        dsn = conninfo
    if kwargs is None:
        return dsn, more
    if not isinstance(kwargs, dict):
        raise TypeError(f"{builder}(kwargs=...) must be a dict of connect keywords, got {kwargs!r}")
    refuse_elsewhere(builder, kwargs)
    twice = sorted(set(kwargs) & set(more))
    if twice:
        raise TypeError(f"{builder}() got {', '.join(twice)} both in kwargs= and as keywords")
    return dsn, {**kwargs, **more}


def create_pool(
    dsn: str = "",
    *,
    options: PoolOptions | None = None,
    listeners: Iterable[Listener] = (),
    reset: bool | str | Callable[[Conn], Any] = True,
    check: Check | Callable[[Conn], Any] = "closed",
    check_after: float = 0.0,
    configure: Callable[[Conn], Any] | None = None,
    hooks_timeout: float | None = 30.0,
    autocommit: bool = False,
    application_name: str = "poolkit",
    address: str | None = None,
    # psycopg_pool.ConnectionPool's own keywords (see _psycopg_pool_args)
    conninfo: str | None = None,
    kwargs: dict[str, Any] | None = None,
    connection_class: type[Conn] | None = None,
    min_size: int = DEFAULT,
    max_size: int | None = DEFAULT,
    timeout: float | None = DEFAULT,
    max_waiting: int = DEFAULT,
    max_lifetime: float | None = DEFAULT,
    max_idle: float | None = DEFAULT,
    num_workers: int = DEFAULT,
    open: bool | None = None,  # (psycopg_pool's name)
    **connect_kwargs: Any,
) -> Pool[Conn]:
    """A ready :class:`~poolkit.Pool` of psycopg connections with the :func:`hooks` set.

    It takes psycopg_pool's ``ConnectionPool`` arguments, so that ``ConnectionPool(conninfo,
    ...)`` -> ``create_pool(conninfo, ...)`` is the whole move, with psycopg_pool's defaults: a
    pool of ``min_size=4`` connections kept open, ``max_size`` None (= ``min_size``), ``timeout``
    30 s to wait for a connection (``PoolOptions.wait_queue_timeout``), ``max_waiting`` 0 (no
    limit), ``max_lifetime`` 3600 s, ``max_idle`` 600 s (``max_idle_time``, for connections above
    ``min_size``), ``num_workers`` 3 (``max_connecting``: connects at once); ``kwargs=``: more
    ``psycopg.connect`` keywords; ``connection_class``: a ``psycopg.Connection`` subclass;
    ``configure``, ``check`` and ``reset`` as functions of the connection (see :func:`hooks`);
    ``open=False``: the pool is returned paused with no connection made (``pool.ready()``, or
    ``with pool:``, opens it). ``name``, ``close_returns``, ``reconnect_timeout`` and
    ``reconnect_failed`` raise a ``TypeError`` saying what to use instead.

    ``options``: a :class:`~poolkit.PoolOptions` instead of those defaults (poolkit's own: see
    it), which the psycopg_pool keywords given override; its ``hooks`` unset (the other
    arguments set them: see :func:`hooks`; ``hooks_timeout`` is ``Hooks.timeout``).
    ``listeners``: the pool's event listeners. ``connect_kwargs`` go to ``psycopg.connect``
    (libpq's own ``options`` parameter goes in the DSN: ``...?options=-csearch_path%3Dapp``).
    One connection is made before the pool is returned, so a wrong DSN or password fails here
    (and the pool is closed)."""
    dsn, connect_kwargs = _connect_kwargs("create_pool", dsn, conninfo, kwargs, connect_kwargs)
    check_pg_args("psycopg.create_pool", connect_kwargs, _DURATIONS, text=True)
    autocommit = connect_kwargs.pop("autocommit", autocommit)
    application_name = connect_kwargs.pop("application_name", application_name)
    sizes = pool_options(
        "create_pool",
        options,
        {
            "min_size": min_size,
            "max_size": max_size,
            "timeout": timeout,
            "max_waiting": max_waiting,
            "max_lifetime": max_lifetime,
            "max_idle": max_idle,
            "num_workers": num_workers,
        },
    )
    chosen = hooks(
        reset=reset,
        check=check,
        check_after=check_after,
        configure=configure,
        autocommit=autocommit,
        timeout=hooks_timeout,
    )
    connect_one = connect(
        dsn,
        autocommit=autocommit,
        application_name=application_name,
        connection_class=connection_class,
        **connect_kwargs,
    )
    pool = Pool(
        connect_one,
        address=address or shown_address(conninfo_to_dict(dsn, **connect_kwargs)),
        options=with_hooks(sizes, chosen, "create_pool"),
        listeners=listeners,
    )
    if open is not False:
        start(pool)
    return pool


def create_async_pool(
    dsn: str = "",
    *,
    options: PoolOptions | None = None,
    listeners: Iterable[Listener] = (),
    reset: bool | str | Callable[[AsyncConn], Awaitable[Any]] = True,
    check: Check | Callable[[AsyncConn], Awaitable[Any]] = "closed",
    check_after: float = 0.0,
    configure: Callable[[AsyncConn], Awaitable[Any]] | None = None,
    hooks_timeout: float | None = 30.0,
    autocommit: bool = False,
    application_name: str = "poolkit",
    address: str | None = None,
    # psycopg_pool.AsyncConnectionPool's own keywords (see _psycopg_pool_args)
    conninfo: str | None = None,
    kwargs: dict[str, Any] | None = None,
    connection_class: type[AsyncConn] | None = None,
    min_size: int = DEFAULT,
    max_size: int | None = DEFAULT,
    timeout: float | None = DEFAULT,
    max_waiting: int = DEFAULT,
    max_lifetime: float | None = DEFAULT,
    max_idle: float | None = DEFAULT,
    num_workers: int = DEFAULT,
    open: bool | None = None,  # (psycopg_pool's name)
    **connect_kwargs: Any,
) -> PoolStarter[AsyncConn]:
    """:func:`create_pool` for asyncio, with psycopg_pool's ``AsyncConnectionPool`` arguments
    and defaults: ``await create_async_pool(dsn)`` is a ready :class:`~poolkit.AsyncPool` of
    ``psycopg.AsyncConnection`` (``async with`` it closes the pool at the end of the block;
    ``open=False``: paused, ``pool.ready()`` opens it)."""
    dsn, connect_kwargs = _connect_kwargs(
        "create_async_pool", dsn, conninfo, kwargs, connect_kwargs
    )
    check_pg_args("psycopg.create_async_pool", connect_kwargs, _DURATIONS, text=True)
    autocommit = connect_kwargs.pop("autocommit", autocommit)
    application_name = connect_kwargs.pop("application_name", application_name)
    sizes = pool_options(
        "create_async_pool",
        options,
        {
            "min_size": min_size,
            "max_size": max_size,
            "timeout": timeout,
            "max_waiting": max_waiting,
            "max_lifetime": max_lifetime,
            "max_idle": max_idle,
            "num_workers": num_workers,
        },
    )
    chosen = async_hooks(
        reset=reset,
        check=check,
        check_after=check_after,
        configure=configure,
        autocommit=autocommit,
        timeout=hooks_timeout,
    )
    pool_options_ = with_hooks(sizes, chosen, "create_async_pool")
    connect_one = async_connect(
        dsn,
        autocommit=autocommit,
        application_name=application_name,
        connection_class=connection_class,
        **connect_kwargs,
    )
    shown = address or shown_address(conninfo_to_dict(dsn, **connect_kwargs))
    listener_list = list(listeners)

    async def start() -> AsyncPool[AsyncConn]:
        require_asyncio("psycopg.create_async_pool", "psycopg's AsyncConnection")
        pool = AsyncPool(connect_one, address=shown, options=pool_options_, listeners=listener_list)
        if open is not False:
            await async_start(pool)
        return pool

    return PoolStarter(start)


# ---------------------------------------------------------------------- the contract


@overload
def connection(pool: Pool[Conn], timeout: float | None = ...) -> AbstractContextManager[Conn]: ...
@overload
def connection(
    pool: AsyncPool[AsyncConn], timeout: float | None = ...
) -> AbstractAsyncContextManager[AsyncConn]: ...
def connection(pool: Any, timeout: float | None = DEFAULT) -> Any:
    """psycopg_pool's ``connection()`` for a poolkit pool of psycopg connections: check out (at
    most ``timeout`` seconds; default: the pool's ``wait_queue_timeout``), commit when the block
    succeeds, roll back when it raises, give back. ``with`` for a ``Pool``, ``async with`` for an
    ``AsyncPool``."""
    hooks = getattr(getattr(pool, "options", None), "hooks", None)
    if hooks is not None and hooks.end is not None and isinstance(pool, AsyncPool | Pool):
        return pool.connection(timeout)  # (its end hook commits or rolls back)
    if isinstance(pool, AsyncPool):
        return _async_transaction(pool, timeout)
    if isinstance(pool, Pool):
        return _transaction(pool, timeout)
    raise TypeError(f"connection() takes a poolkit Pool or AsyncPool, got {pool!r}")


@contextlib.contextmanager
def _transaction(pool: Pool[Conn], timeout: float | None) -> Iterator[Conn]:
    with pool.connection(timeout) as conn:  # (gives back, and asks is_broken on an error)
        try:
            yield conn
        except Exception:
            _quiet_rollback(conn)
            raise
        conn.commit()


@contextlib.asynccontextmanager
async def _async_transaction(
    pool: AsyncPool[AsyncConn], timeout: float | None
) -> AsyncIterator[AsyncConn]:
    async with pool.connection(timeout) as conn:
        try:
            yield conn
        except Exception:
            if not (conn.closed or conn.broken):
                with contextlib.suppress(psycopg.Error):  # the block's error is the one to see
                    await conn.rollback()
            raise
        await conn.commit()


def _quiet_rollback(conn: Conn) -> None:
    if not (conn.closed or conn.broken):
        with contextlib.suppress(psycopg.Error):  # the block's error is the one to see
            conn.rollback()
