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
caller, and after an error the block's error is the one raised. :func:`connection` does the same
for a pool built without these hooks.

Everything else is made safe by the hooks, whatever way a connection comes back:

* ``reset`` on check-in rolls back a transaction left open or failed (with a warning on logger
  ``poolkit.backends.psycopg``, as psycopg_pool does: ``pool.connection()`` and ``checkout()``
  never commit), discards a connection given back mid-query, closed or broken, gives back
  what a caller can change on the connection object as it was once configured (``row_factory``,
  the cursor factories, ``prepare_threshold``, ``prepared_max``, notice and notify handlers,
  ``autocommit``, ``isolation_level``, ``read_only``, ``deferrable``), then (``reset=True``,
  the default) sends asyncpg's reset:
  ``pg_advisory_unlock_all()``, ``CLOSE ALL``, ``UNLISTEN *``, ``RESET ALL``, in one round trip
  outside a transaction. ``reset="..."``: your query instead; ``reset=False``: no query, only
  the rollback (psycopg_pool's behaviour), which costs no round trip on a clean connection.
  Settings sent at connect (``options="-c search_path=..."`` in the DSN) survive ``RESET ALL``.
* ``check`` before a hand-out (``check="closed"``): closed or broken raises; if the server sent
  anything to the idle connection (as it does when it terminates the backend) a round trip
  tells whether the connection still works. No I/O otherwise. ``check="ping"``: always a round
  trip (an empty query outside a transaction, as psycopg_pool's ``check_connection``).
* ``is_broken``: ``conn.closed or conn.broken``: an SQL error is not, a lost server is.
* :func:`ping` / :func:`async_ping` for ``KeepAlive(interval, probe)``.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from typing import TYPE_CHECKING, Any, Final, Literal, overload

from .. import AsyncPool, ConnectContext, Hooks, Pool, PoolOptions
from .._base import DEFAULT
from ._common import PoolStarter, ready_async, ready_sync, shown_address, with_hooks
from ._extras import require

if TYPE_CHECKING:
    import psycopg
    from psycopg.conninfo import conninfo_to_dict
else:
    psycopg = require("psycopg", "psycopg", "psycopg")
    conninfo_to_dict = psycopg.conninfo.conninfo_to_dict

# (after the driver: without it, the ImportError above is the one that names the extra)
from ._psycopg_hooks import (
    DEFAULT_RESET_QUERY,
    async_check_closed,
    async_check_ping,
    async_end,
    async_ping,
    async_remembering,
    check_closed,
    check_ping,
    end,
    is_broken,
    make_async_reset,
    make_reset,
    ping,
    remembering,
)

__all__ = [
    "DEFAULT_RESET_QUERY",
    "async_check_closed",
    "async_check_ping",
    "async_connect",
    "async_end",
    "async_hooks",
    "async_ping",
    "check_closed",
    "check_ping",
    "connect",
    "connection",
    "create_async_pool",
    "create_pool",
    "end",
    "hooks",
    "is_broken",
    "make_async_reset",
    "make_reset",
    "ping",
]

Conn = psycopg.Connection[Any]
AsyncConn = psycopg.AsyncConnection[Any]
Check = Literal["closed", "ping"] | None


def connect(
    dsn: str = "", *, autocommit: bool = False, application_name: str = "poolkit", **kwargs: Any
) -> Callable[[ConnectContext], Conn]:
    """A connect function for :class:`~poolkit.Pool`: ``psycopg.connect(dsn, **kwargs)`` with
    ``application_name`` set (so the pool's sessions can be found in ``pg_stat_activity``)."""

    def connect_one(ctx: ConnectContext) -> Conn:
        return psycopg.Connection.connect(
            dsn, autocommit=autocommit, application_name=application_name, **kwargs
        )

    return connect_one


def async_connect(
    dsn: str = "", *, autocommit: bool = False, application_name: str = "poolkit", **kwargs: Any
) -> Callable[[ConnectContext], Awaitable[AsyncConn]]:
    """:func:`connect` for :class:`~poolkit.AsyncPool`: ``psycopg.AsyncConnection.connect``."""

    async def connect_one(ctx: ConnectContext) -> AsyncConn:
        return await psycopg.AsyncConnection.connect(
            dsn, autocommit=autocommit, application_name=application_name, **kwargs
        )

    return connect_one


def _reset_query(reset: bool | str) -> str | None:
    if reset is True:
        return DEFAULT_RESET_QUERY
    if reset is False:
        return None
    if not isinstance(reset, str):
        raise TypeError(f"reset must be True, False or a query, not {type(reset).__name__}")
    return reset


#: what a ``Pool`` and an ``AsyncPool`` of psycopg connections run: (the "closed" check, the
#: "ping" check, the reset maker, the end hook, the configure wrapper)
_SYNC_KIT: Final = (check_closed, check_ping, make_reset, end, remembering)
_ASYNC_KIT: Final = (
    async_check_closed,
    async_check_ping,
    make_async_reset,
    async_end,
    async_remembering,
)


def _hooks(
    kit: tuple[Any, ...],
    reset: bool | str,
    check: Check,
    check_after: float,
    configure: Callable[[Any], Any] | None,
    autocommit: bool,
    timeout: float | None,
) -> Hooks:
    """The hooks of ``kit`` (``_SYNC_KIT`` or ``_ASYNC_KIT``) with these settings."""
    check_closed_, check_ping_, make_reset_, end_, remembering_ = kit
    checks = {"closed": check_closed_, "ping": check_ping_, None: None}
    if check not in checks:
        raise ValueError(f"check must be 'closed', 'ping' or None, got {check!r}")
    return Hooks(
        configure=remembering_(configure),
        check=checks[check],
        check_after=check_after,
        reset=make_reset_(_reset_query(reset), autocommit=autocommit),
        end=end_,
        is_broken=is_broken,
        timeout=timeout,
    )


def hooks(
    *,
    reset: bool | str = True,
    check: Check = "closed",
    check_after: float = 0.0,
    configure: Callable[[Conn], Any] | None = None,
    autocommit: bool = False,
    timeout: float | None = 30.0,
) -> Hooks:
    """The :class:`~poolkit.Hooks` for a :class:`~poolkit.Pool` of psycopg connections (see the
    module's docstring); ``configure``: yours, after which the connection's settings are
    remembered for the reset to give back; ``autocommit``: the value the connections are made
    with."""
    return _hooks(_SYNC_KIT, reset, check, check_after, configure, autocommit, timeout)


def async_hooks(
    *,
    reset: bool | str = True,
    check: Check = "closed",
    check_after: float = 0.0,
    configure: Callable[[AsyncConn], Awaitable[Any]] | None = None,
    autocommit: bool = False,
    timeout: float | None = 30.0,
) -> Hooks:
    """:func:`hooks` for an :class:`~poolkit.AsyncPool` of ``psycopg.AsyncConnection``."""
    return _hooks(_ASYNC_KIT, reset, check, check_after, configure, autocommit, timeout)


def create_pool(
    dsn: str = "",
    *,
    options: PoolOptions | None = None,
    reset: bool | str = True,
    check: Check = "closed",
    check_after: float = 0.0,
    configure: Callable[[Conn], Any] | None = None,
    hooks_timeout: float | None = 30.0,
    autocommit: bool = False,
    application_name: str = "poolkit",
    address: str | None = None,
    **connect_kwargs: Any,
) -> Pool[Conn]:
    """A ready :class:`~poolkit.Pool` of psycopg connections with the :func:`hooks` set.

    ``options``: the pool's :class:`~poolkit.PoolOptions`, ``hooks`` unset (the other arguments
    set it: see :func:`hooks`; ``hooks_timeout`` is ``Hooks.timeout``). ``connect_kwargs`` go to
    ``psycopg.connect`` (libpq's own ``options`` parameter goes in the DSN:
    ``...?options=-csearch_path%3Dapp``). One connection is made before the pool is returned, so
    a wrong DSN or password fails here (and the pool is closed)."""
    chosen = hooks(
        reset=reset,
        check=check,
        check_after=check_after,
        configure=configure,
        autocommit=autocommit,
        timeout=hooks_timeout,
    )
    pool = Pool(
        connect(dsn, autocommit=autocommit, application_name=application_name, **connect_kwargs),
        address=address or shown_address(conninfo_to_dict(dsn, **connect_kwargs)),
        options=with_hooks(options, chosen, "create_pool"),
    )
    ready_sync(pool)
    return pool


def create_async_pool(
    dsn: str = "",
    *,
    options: PoolOptions | None = None,
    reset: bool | str = True,
    check: Check = "closed",
    check_after: float = 0.0,
    configure: Callable[[AsyncConn], Awaitable[Any]] | None = None,
    hooks_timeout: float | None = 30.0,
    autocommit: bool = False,
    application_name: str = "poolkit",
    address: str | None = None,
    **connect_kwargs: Any,
) -> PoolStarter[AsyncConn]:
    """:func:`create_pool` for asyncio: ``await create_async_pool(dsn)`` is a ready
    :class:`~poolkit.AsyncPool` of ``psycopg.AsyncConnection`` (``async with`` it closes the pool
    at the end of the block)."""
    chosen = async_hooks(
        reset=reset,
        check=check,
        check_after=check_after,
        configure=configure,
        autocommit=autocommit,
        timeout=hooks_timeout,
    )
    options = with_hooks(options, chosen, "create_async_pool")
    connect_one = async_connect(
        dsn, autocommit=autocommit, application_name=application_name, **connect_kwargs
    )
    shown = address or shown_address(conninfo_to_dict(dsn, **connect_kwargs))

    async def start() -> AsyncPool[AsyncConn]:
        pool = AsyncPool(connect_one, address=shown, options=options)
        await ready_async(pool)
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
async def _async_transaction(pool: AsyncPool[AsyncConn], timeout: float | None) -> AsyncIterator[
    AsyncConn
]:
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
