"""PostgreSQL with asyncpg: asyncpg's pool served by poolkit (:class:`Pool`, what
:func:`create_pool` returns), a connect function, and the hooks asyncpg's own pool runs.

    pool = await poolkit.backends.asyncpg.create_pool("postgresql://app@db/app", max_size=10)
    async with pool.acquire() as conn:           # conn: an asyncpg.Connection (a proxy)
        print(await conn.fetchval("SELECT 1"))
    await pool.close()

:func:`create_pool` is ``asyncpg.create_pool`` (its keywords, defaults, methods, errors: see
``_asyncpg_dropin``), so the switch is one line; ``pool.connection()`` (poolkit's way) works on
it too, and ``pool.pool`` is the poolkit :class:`~poolkit.AsyncPool` underneath. Each caller gets
a :class:`PooledConnection`, a proxy of the connection that refuses use once it is released, as
asyncpg's pool's (the ``lend`` hook).

For a poolkit pool of your own, build it from :func:`async_connect` and :func:`async_hooks`:
The hooks (:func:`async_hooks`), what asyncpg's ``Pool`` does with its connections, as poolkit
:class:`~poolkit.Hooks`:

* ``reset`` on check-in: asyncpg's ``Connection.reset()``, the same call asyncpg's pool makes: roll
  back an open transaction (asyncpg reports one its ``transaction()`` did not manage through the
  event loop's exception handler), drop the ``add_listener`` callbacks, then the connection's
  ``get_reset_query()``: ``pg_advisory_unlock_all()``, ``CLOSE ALL``, ``UNLISTEN *``,
  ``RESET ALL`` (as the server supports). Your own query replaces that one through
  ``get_reset_query`` (asyncpg's documented way: :func:`async_connect` subclasses the connection
  class);
  ``reset=False`` only rolls back a transaction left open (no round trip when none is, as
  asyncpg's ``is_in_transaction()`` tells: a caller never finds itself inside the last caller's
  transaction), for sessions known to be otherwise clean; an async function runs
  after the rollback in place of the query (``asyncpg.create_pool(reset=...)``). Prepared
  statements, temporary tables and the statement cache stay (``DISCARD ALL`` would break
  asyncpg's cache). At the end of a ``pool.connection()`` block that succeeded the reset runs in
  the caller as it leaves the block (:func:`async_end`), as asyncpg's pool runs it in
  ``release()``: no task of the pool's per check-in, and the connection is clean when it comes
  back (``end`` returns ``True``: the pool runs no reset for it).
* ``check`` before a hand-out: ``is_closed()``. It costs nothing and is enough on asyncio: the
  event loop reads an idle connection's socket, so a backend terminated by the server shows as
  closed once the loop has run. ``check="ping"`` also sends ``SELECT 1`` (a round trip: a firewall
  that drops idle connections silently is only found that way); ``check=None`` checks nothing.
* ``is_broken`` when the block of ``pool.connection()`` raised: the connection is closed, or the
  error is a connection-level one (class 08, the server shutting down, an I/O or protocol
  error). An SQL error such as a division by zero is not: the reset rolls its transaction back.
* :func:`async_ping` for ``PoolOptions(keep_alive=KeepAlive(interval, async_ping))``: ``SELECT 1``.
* closing: the pool calls ``conn.close()``, asyncpg's graceful close, which waits for the server
  to hang up; :func:`async_connect` bounds it by ``close_timeout`` (10 s) and then aborts the
  connection, so a server gone silent cannot hold ``pool.close()`` (:func:`async_close` does the
  same for any asyncpg connection).
* ``lend`` at a hand-out: the caller's :class:`PooledConnection` (see ``_asyncpg_proxy``); the
  other hooks and the close get the connection itself.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any, Literal

from .. import ConnectContext, Hooks, PoolOptions
from ..driver import check_seconds, require_asyncio
from ..events import Listener
from ._asyncpg_args import (
    MAX_INACTIVE_CONNECTION_LIFETIME,
    MAX_SIZE,
    MIN_SIZE,
    refuse_elsewhere,
)
from ._common import check_pg_args
from ._extras import require

if TYPE_CHECKING:
    import asyncpg
    from asyncpg import Connection
else:
    asyncpg = require("asyncpg", "asyncpg", "asyncpg")
    Connection = asyncpg.Connection

from ._asyncpg_dropin import MAX_QUERIES, Pool, PoolAcquireContext
from ._asyncpg_proxy import (  # (needs asyncpg)
    PooledConnection,
    connection_of,
    invalidate_resources,
    lend,
)

__all__ = [
    "MAX_INACTIVE_CONNECTION_LIFETIME",
    "MAX_QUERIES",
    "MAX_SIZE",
    "MIN_SIZE",
    "Pool",
    "PoolAcquireContext",
    "PooledConnection",
    "async_check",
    "async_check_ping",
    "async_close",
    "async_connect",
    "async_end",
    "async_hooks",
    "async_ping",
    "async_reset",
    "async_rollback_only",
    "create_pool",
    "is_broken",
    "lend",
]

#: errors after which a connection is not used again (an SQL error of the session is not one)
BROKEN_ERRORS: tuple[type[BaseException], ...] = (
    OSError,  # ConnectionError, ssl.SSLError (not TimeoutError: see is_broken)
    asyncpg.PostgresConnectionError,  # class 08
    asyncpg.AdminShutdownError,  # 57P01: pg_terminate_backend, a fast shutdown
    asyncpg.CrashShutdownError,
    asyncpg.CannotConnectNowError,
    asyncpg.InternalClientError,  # the protocol is out of step
)

Check = Literal["closed", "ping"] | None


def async_connect(
    dsn: str | None = None,
    *,
    application_name: str = "poolkit",
    reset_query: str | None = None,
    close_timeout: float | None = 10.0,
    driver_connect: Callable[..., Awaitable[Connection]] | None = None,
    **connect_kwargs: Any,
) -> Callable[[ConnectContext], Awaitable[Connection]]:
    """A connect function for :class:`~poolkit.AsyncPool`: ``asyncpg.connect(dsn,
    **connect_kwargs)`` with ``application_name`` set (in ``server_settings``; one given there
    wins), so the pool's sessions can be told apart in ``pg_stat_activity``. A keyword that
    ``asyncpg.connect`` does not take is refused here (``TypeError``), not at the first connect.

    ``driver_connect``: an async function called in place of ``asyncpg.connect``, as
    ``asyncpg.create_pool(connect=...)`` calls it: ``(dsn, loop=, connection_class=,
    record_class=, server_settings=, **connect_kwargs)``; it takes what it will.

    ``reset_query``: the query :func:`async_reset` sends after the rollback, in place of asyncpg's
    ``get_reset_query()`` (``""``: only roll back and drop listeners).
    ``close_timeout``: the pool closes a connection with ``conn.close()``, which says goodbye
    and waits for the server to hang up: a server that no longer answers would hold the pool's
    ``close()`` forever. After this many seconds the connection is aborted instead (see
    :func:`async_close`); ``None``: asyncpg's own ``close()``. A connect the pool gives up on (its
    ``close()``, a ``clear``, ``connect_timeout``) is not cancelled halfway either: it may end its
    handshake for as long, and what it made is closed (``None``: asyncpg's connect ``timeout``).

    Both work as asyncpg documents it, through the connection class (``connection_class``, a
    subclass of yours if you give one)."""
    if driver_connect is None:
        refuse_elsewhere("async_connect", connect_kwargs, asyncpg.connect, "asyncpg.connect")
    close_timeout = _check_args("asyncpg.async_connect", close_timeout, connect_kwargs)
    kwargs = dict(connect_kwargs)
    settings = {"application_name": application_name, **(kwargs.pop("server_settings", None) or {})}
    if reset_query is not None and not isinstance(reset_query, str):
        raise TypeError(f"reset_query must be a str or None, not {type(reset_query).__name__}")
    base = kwargs.get("connection_class", asyncpg.Connection)
    kwargs["connection_class"] = _connection_class(base, reset_query, close_timeout)
    if driver_connect is not None:  # (called as asyncpg's pool calls it)
        kwargs.setdefault("record_class", asyncpg.Record)
    make: Callable[..., Awaitable[Connection]] = driver_connect or asyncpg.connect

    async def connect_one(ctx: ConnectContext) -> Connection:
        require_asyncio("asyncpg.async_connect", "asyncpg")
        loop = {} if driver_connect is None else {"loop": asyncio.get_running_loop()}
        attempt = asyncio.ensure_future(make(dsn, server_settings=settings, **kwargs, **loop))
        try:
            return await asyncio.shield(attempt)
        except asyncio.CancelledError:  # the pool gave up on it (close, clear, connect_timeout)
            await _let_go(attempt, close_timeout)
            raise

    return connect_one


async def _let_go(attempt: asyncio.Future[Any], grace: float | None) -> None:
    """A connect the pool abandoned: let asyncpg end its handshake (``grace`` seconds at most;
    ``None``: its own ``timeout``) and close what it made, rather than cancel it halfway. Cancelled
    while its socket opens, asyncpg 0.32 leaves a future whose error nobody retrieves (asyncio
    then reports "Future exception was never retrieved ... unexpected connection_lost() call").
    The pool counts the connect against its limits until this returns (it is *abandoned*), and
    ``close()`` waits for it."""
    try:
        await asyncio.wait({attempt}, timeout=grace)
        if attempt.done() and not attempt.cancelled() and attempt.exception() is None:
            with contextlib.suppress(Exception):  # (nobody to tell: the pool gave it up)
                await async_close(attempt.result(), grace)
    finally:
        if not attempt.done():
            attempt.cancel()  # (the handshake outlived its grace, or this was cancelled again)
        attempt.add_done_callback(_discard)


def _discard(attempt: asyncio.Future[Any]) -> None:
    """The end of a connect nobody awaits: its error retrieved, its connection closed."""
    if attempt.cancelled() or attempt.exception() is not None:
        return
    conn = attempt.result()
    if not conn.is_closed():
        conn.terminate()


def _check_args(call: str, close_timeout: Any, kwargs: dict[str, Any]) -> float | None:
    """``close_timeout`` and asyncpg's connect keywords (``port``, ``timeout``,
    ``command_timeout``) checked for ``call``, naming the argument; returns ``close_timeout``
    in seconds. asyncpg would take them and fail at each connect."""
    check_pg_args(call, kwargs, ("timeout", "command_timeout"), text=False)
    if kwargs.get("command_timeout") == 0:  # (asyncpg: greater than 0, or None)
        raise ValueError(f"{call}(command_timeout=...) must be seconds > 0 or None, got 0")
    return check_seconds(close_timeout, f"{call}(close_timeout=...)")


def _connection_class(base: type[Any], query: str | None, close_timeout: float | None) -> Any:
    """``base`` with ``get_reset_query()`` answering ``query`` (asyncpg's documented override)
    and a ``close()`` bounded by ``close_timeout``; ``base`` itself if neither is asked for."""
    methods: dict[str, Any] = {}
    if query is not None:

        def get_reset_query(self: Any) -> str:
            return query

        methods["get_reset_query"] = get_reset_query
    if close_timeout is not None:

        async def close_bounded(self: Any, *, timeout: float | None = None) -> None:
            bound = close_timeout if timeout is None else timeout
            await async_close(self, bound, _close=base.close)

        methods["close"] = close_bounded
    if not methods:
        return base
    return type(f"Poolkit{base.__name__}", (base,), methods)


_connect = async_connect  # (create_pool's ``connect`` argument, asyncpg's, hides ``connect``)


async def async_close(
    conn: Connection, timeout: float | None = 10.0, *, _close: Callable[..., Any] | None = None
) -> None:
    """Close ``conn`` gracefully (asyncpg's ``close()``: goodbye, and wait for the server to
    hang up) for at most ``timeout`` seconds, then abort it: it is closed when this returns,
    without an error for a server that did not answer."""
    try:
        await (_close or type(conn).close)(conn, timeout=timeout)
    except (TimeoutError, OSError):
        pass  # asyncpg aborted the connection before raising


async def async_reset(conn: Connection) -> None:
    """The ``reset`` hook: ``conn.reset()`` (see the module's docstring); raises on a closed
    connection, so the pool discards it. First the prepared statements, cursors and transactions
    the lease made are invalidated, as asyncpg's pool does on release."""
    invalidate_resources(conn)
    await conn.reset()


async def async_end(handed: Connection, error: BaseException | None) -> bool | None:
    """The ``end`` hook: when ``pool.connection()``'s block succeeded, :func:`async_reset` runs
    in the caller as it leaves the block, as asyncpg's pool runs it in ``release()``, and the pool
    is told (``True``) that no reset is left to run: no task of the pool's per check-in. A reset
    that fails here is left to the pool's (which closes the connection if it fails again); after
    an error in the block the pool's reset does it all."""
    if error is not None:
        return None
    try:
        await async_reset(connection_of(handed))
    except Exception:
        return None
    return True


def async_check(conn: Connection) -> None:
    """The ``check`` hook without a round trip: raises if the connection is closed. A plain
    function: ``AsyncPool`` runs it at once, in the checkout's step, with no task."""
    if conn.is_closed():
        raise asyncpg.ConnectionDoesNotExistError("connection is closed")


async def async_check_ping(conn: Connection) -> None:
    """The ``check`` hook with a round trip: closed, or ``SELECT 1`` fails: raises."""
    async_check(conn)
    await conn.execute("SELECT 1")


async def async_ping(conn: Connection) -> None:
    """A keep-alive probe: ``SELECT 1``."""
    await conn.execute("SELECT 1")


def is_broken(conn: Connection, error: BaseException) -> bool:
    """The ``is_broken`` hook: whether ``conn`` must be discarded after ``error`` in its block."""
    if isinstance(error, TimeoutError):
        # (an OSError, from asyncio.timeout() around a query or command_timeout: asyncpg has
        # cancelled the query and the connection serves on once the reset rolled back)
        return bool(conn.is_closed())
    return bool(conn.is_closed()) or isinstance(error, BROKEN_ERRORS)


def async_hooks(
    *,
    reset: bool | Callable[[Connection], Awaitable[Any]] = True,
    check: Check = "closed",
    check_after: float = 0.0,
    configure: Callable[[Connection], Awaitable[Any]] | None = None,
    timeout: float | None = 30.0,
) -> Hooks:
    """The :class:`~poolkit.Hooks` for asyncpg connections: ``reset`` (False: none; an async
    function: run after :func:`async_reset`, as ``asyncpg.create_pool(reset=...)`` runs one: pair it
    with ``async_connect(reset_query="")`` to replace asyncpg's reset query), ``check``
    (``"closed"``, ``"ping"`` or ``None``) when idle ``check_after`` seconds, ``is_broken``, your
    own ``configure`` (run once after each connect), and :func:`lend` (``reset=False``:
    :func:`async_rollback_only`): each caller gets a
    :class:`PooledConnection` that refuses use once its lease is given back."""
    checks = {"closed": async_check, "ping": async_check_ping, None: None}
    if check not in checks:
        raise ValueError(f"check must be 'closed', 'ping' or None, got {check!r}")
    return Hooks(
        configure=configure,
        check=checks[check],
        check_after=check_after,
        reset=(
            _reset_with(reset) if callable(reset) else async_reset if reset else async_rollback_only
        ),
        end=async_end if reset is True else None,
        is_broken=is_broken,
        timeout=timeout,
        lend=lend,
    )


def async_rollback_only(conn: Connection) -> Awaitable[Any] | None:
    """The ``reset=False`` hook: roll back a transaction left open, nothing else. A plain
    function returning the rollback only when there is one to run: a clean connection costs no
    round trip and no task (asyncpg's ``is_in_transaction()`` reads the protocol's state)."""
    invalidate_resources(conn)
    if conn.is_in_transaction() or getattr(conn, "_top_xact", None) is not None:
        # (asyncpg's own reset forgets the Transaction object too, or the next caller's
        # transaction() would be a savepoint of it)
        conn._top_xact = None  # type: ignore[attr-defined]  # (asyncpg's private field)
        return conn.execute("ROLLBACK")
    return None


def _reset_with(then: Callable[[Connection], Awaitable[Any]]) -> Callable[[Connection], Any]:
    """The reset hook that runs :func:`async_reset`, then ``then`` (asyncpg's ``reset=``)."""

    async def reset_then(conn: Connection) -> None:
        await async_reset(conn)
        await then(conn)

    return reset_then


def create_pool(
    dsn: str | None = None,
    *,
    init_size: int | None = None,
    min_size: int | None = None,
    max_size: int | None = None,
    max_queries: int = MAX_QUERIES,
    max_inactive_connection_lifetime: float | None = None,
    connect: Callable[..., Awaitable[Connection]] | None = None,
    setup: Callable[[Connection], Awaitable[Any]] | None = None,
    init: Callable[[Connection], Awaitable[Any]] | None = None,
    reset: bool | str | Callable[[Connection], Awaitable[Any]] | None = None,
    loop: asyncio.AbstractEventLoop | None = None,
    connection_class: type[Connection] = Connection,
    record_class: type[asyncpg.Record] = asyncpg.Record,
    options: PoolOptions | None = None,
    listeners: Iterable[Listener] = (),
    check: Check = "closed",
    check_after: float = 0.0,
    configure: Callable[[Connection], Awaitable[Any]] | None = None,
    hooks_timeout: float | None = 30.0,
    application_name: str | None = None,
    close_timeout: float | None = 10.0,
    address: str | None = None,
    **connect_kwargs: Any,
) -> Pool:
    """asyncpg's ``create_pool``: a :class:`Pool` (asyncpg's ``Pool``, served by a poolkit
    :class:`~poolkit.AsyncPool`), to ``await`` or use as ``async with create_pool(...) as pool:``.

    asyncpg's keywords and defaults (``min_size=10``, ``max_size=10``, ``max_queries=50000``,
    ``max_inactive_connection_lifetime=300``, ``init_size=min_size``; ``min_size`` lower when
    ``max_size`` is below 10), with the meaning asyncpg gives them: ``await pool`` makes
    ``init_size`` connections (the first alone: a wrong DSN or password fails there), ``setup``
    runs at each acquire, ``init`` after each connect, ``reset`` at each release (``None``:
    asyncpg's ``Connection.reset()``).

    poolkit's keywords besides: ``options`` (a :class:`~poolkit.PoolOptions`, the pool's whole
    configuration: then ``min_size``, ``max_size`` and ``max_inactive_connection_lifetime`` are
    refused), ``listeners``, ``check`` (``"closed"``, ``"ping"`` or ``None``) and
    ``check_after``, ``configure`` (``init``'s other name, as a hook), ``hooks_timeout``,
    ``application_name`` (set in ``server_settings``; ``None``: asyncpg's, none),
    ``close_timeout`` (see :func:`async_connect`), ``address`` (shown in events); ``reset``
    also takes ``False`` (only roll back a transaction left open) or a string (your reset
    query). ``connect_kwargs`` go to ``asyncpg.connect`` (or to ``connect``): one it does not
    take is refused here."""
    return Pool(
        dsn,
        init_size=init_size,
        min_size=min_size,
        max_size=max_size,
        max_queries=max_queries,
        max_inactive_connection_lifetime=max_inactive_connection_lifetime,
        connect=connect,
        setup=setup,
        init=init,
        reset=reset,
        loop=loop,
        connection_class=connection_class,
        record_class=record_class,
        options=options,
        listeners=listeners,
        check=check,
        check_after=check_after,
        configure=configure,
        hooks_timeout=hooks_timeout,
        application_name=application_name,
        close_timeout=close_timeout,
        address=address,
        **connect_kwargs,
    )
