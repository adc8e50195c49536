"""asyncpg's ``Pool``, served by a poolkit :class:`~poolkit.AsyncPool`: what
``poolkit.backends.asyncpg.create_pool`` returns.

Moving from asyncpg's pool is one line::

    pool = await asyncpg.create_pool(dsn, max_size=10)                        # before
    pool = await poolkit.backends.asyncpg.create_pool(dsn, max_size=10)       # after

Rules of this module
--------------------
* asyncpg's signature, defaults, methods, errors and texts (``asyncpg.InterfaceError``: "pool
  is closed", "... is not a member of this pool", "... released back to the pool"): a swap
  changes nothing the caller did not ask for, except what poolkit does better. Underneath, the
  poolkit pool does the waiting (one FIFO queue, each caller's deadline in it), the limits, the
  hand-off and the cancellation: a cancelled or timed-out ``acquire()`` leaves the queue without
  losing a connection.
* ``acquire()`` checks out a lease and keeps it (by its proxy's id) until ``release()``; the
  caller gets the lease's :class:`PooledConnection` (``_asyncpg_proxy``), an
  ``asyncpg.Connection`` for type checkers. ``release()`` does what asyncpg's does, in the caller:
  listeners warned of and resources invalidated (``Connection._on_release``), a connection past
  ``max_queries`` or of an expired generation closed, else reset (asyncpg's ``reset()``, or
  ``_reset()`` and your ``reset=``) within the timeout; a reset that fails terminates the
  connection and raises. Then the lease goes back clean: the poolkit pool starts no reset for it
  (its reset hook serves ``pool.connection()`` after an error and a plain ``checkout()``).
* ``max_queries`` and ``expire_connections()`` are also the ``check`` and ``reset`` hooks':
  a connection past either is closed when next met (a ``pool.connection()`` block's end, a
  check-in, a hand-out), never handed out.
* ``setup`` runs at each acquire on the proxy; if it fails the connection is closed and the
  error raised. ``init`` runs once after each connect, in the connect function (it fails the
  connect, and so the acquire that waited for it).
* ``close()`` waits until every acquired connection is released (as asyncpg's), then closes the
  poolkit pool; any error in it (a cancellation too) terminates the pool. ``terminate()`` aborts
  every connection at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import weakref
from collections.abc import Awaitable, Callable, Generator, Iterable
from types import TracebackType
from typing import Any, Final, Literal

import asyncpg  # (the asyncpg module imports this one once asyncpg is known to be there)
from asyncpg import Connection, Record

from .. import (
    AsyncPool,
    ConnectContext,
    Hooks,
    Lease,
    PoolClearedError,
    PoolClosedError,
    PoolOptions,
    PoolStats,
    WaitQueueTimeoutError,
)
from ..driver import _starting, check_seconds
from ..events import Listener
from ._asyncpg_args import dropin_sizes, refuse_elsewhere
from ._asyncpg_proxy import PooledConnection, invalidate_resources
from ._common import hold, shown_address, uri_params, with_hooks
from ._steps import at_least_once

__all__ = ["Pool", "PoolAcquireContext"]

logger = logging.getLogger("asyncpg.pool")

#: ``asyncpg.create_pool``'s ``max_queries`` default
MAX_QUERIES: Final = 50000


def _interface(message: str) -> asyncpg.InterfaceError:
    return asyncpg.InterfaceError(message)


class _Holder:
    """What ``Connection._proxy._holder`` is for asyncpg: it reads ``._pool`` (to drop the
    statement and type caches of every connection of the pool)."""

    __slots__ = ("__weakref__", "_pool")

    def __init__(self, pool: Pool) -> None:
        self._pool = pool


class Pool:
    """asyncpg's ``Pool`` (see the module's rules); poolkit's own way works too:
    ``pool.connection()``, ``pool.stats()``, ``pool.checkout()``, and ``pool.pool``, the poolkit
    :class:`~poolkit.AsyncPool` underneath."""

    #: asyncpg's test harness reads it after ``terminate()`` (poolkit's pool refills by itself)
    _maintenance_task: None = None

    def __init__(
        self,
        *connect_args: Any,
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
        record_class: type[Record] = Record,
        init_size: int | None = None,
        options: PoolOptions | None = None,
        listeners: Iterable[Listener] = (),
        check: Literal["closed", "ping"] | None = "closed",
        check_after: float = 0.0,
        configure: Callable[[Connection], Awaitable[Any]] | None = None,
        hooks_timeout: float | None = 30.0,
        application_name: str | None = None,
        close_timeout: float | None = 10.0,
        address: str | None = None,
        **connect_kwargs: Any,
    ) -> None:
        from . import asyncpg as backend  # (the hooks; that module imports this one)

        make: Callable[..., Any] = connect or asyncpg.connect
        refuse_elsewhere(
            "create_pool", connect_kwargs, make, "your connect" if connect else "asyncpg.connect"
        )
        close_timeout = backend._check_args("asyncpg.create_pool", close_timeout, connect_kwargs)
        opts, init_size = dropin_sizes(
            options,
            init_size,
            min_size,
            max_size,
            max_inactive_connection_lifetime,
            backend.async_check,
        )
        if not isinstance(max_queries, int) or max_queries <= 0:
            raise ValueError("max_queries is expected to be greater than zero")
        if not (isinstance(connection_class, type) and issubclass(connection_class, Connection)):
            raise TypeError(
                "connection_class is expected to be a subclass of "
                f"asyncpg.Connection, got {connection_class!r}"
            )
        if not (isinstance(record_class, type) and issubclass(record_class, Record)):
            raise TypeError(
                f"record_class is expected to be a subclass of asyncpg.Record, got {record_class!r}"
            )
        if init is not None and configure is not None:
            raise TypeError("create_pool(): init= is asyncpg's name for configure=: give one")
        checks = {"closed": None, "ping": backend.async_check_ping, None: None}
        if check not in checks:
            raise ValueError(f"check must be 'closed', 'ping' or None, got {check!r}")
        if reset is None:
            reset = True
        self._connect_args: tuple[Any, ...] = connect_args
        self._connect_kwargs = connect_kwargs
        self._driver_connect = connect
        self._connection_class = connection_class
        self._record_class = record_class
        self._wrapped_class = backend._connection_class(
            connection_class, reset if isinstance(reset, str) else None, close_timeout
        )
        self._close_timeout = close_timeout
        self._application_name = application_name
        self._init = init
        self._setup = setup
        self._reset = reset
        self._max_queries = max_queries
        self._check_probe = checks[check]
        self._check_closed = check is not None
        self._init_size = init_size
        self._min_size = opts.min_size
        self._max_size = opts.max_size
        self._loop = loop
        self._holder = _Holder(self)
        self._generation = 0
        #: each connection's generation (``expire_connections``)
        self._born: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()
        #: the leases out through ``acquire()``, by their proxy's id, with their timeout
        self._leases: dict[int, tuple[Lease[Connection], float | None]] = {}
        self._released: asyncio.Event | None = None
        self._initialized = False
        self._initializing = False
        self._closing = False
        self._closed = False
        hooks = Hooks(
            configure=configure,
            check=self._check_hook,
            check_after=check_after,
            reset=self._reset_hook,
            end=self._end_hook,
            is_broken=backend.is_broken,
            timeout=hooks_timeout,
            lend=self._lend,
        )
        given = {k: connect_kwargs[k] for k in ("host", "port", "database") if k in connect_kwargs}
        dsn = connect_args[0] if connect_args and isinstance(connect_args[0], str) else None
        shown = address or shown_address(uri_params(dsn) | given)
        self._pool: AsyncPool[Connection] = AsyncPool(
            self._connect_one,
            address=shown,
            options=with_hooks(opts, hooks, "create_pool"),
            listeners=listeners,
        )

    # ------------------------------------------------------------------ the poolkit pool's hooks

    async def _connect_one(self, ctx: ConnectContext) -> Connection:
        from . import asyncpg as backend

        kwargs = dict(self._connect_kwargs)
        settings = dict(kwargs.pop("server_settings", None) or {})
        if self._application_name is not None:
            settings.setdefault("application_name", self._application_name)
        if settings:
            kwargs["server_settings"] = settings
        make = self._driver_connect or asyncpg.connect
        generation = self._generation
        attempt = asyncio.ensure_future(
            make(
                *self._connect_args,
                loop=asyncio.get_running_loop(),
                connection_class=self._wrapped_class,
                record_class=self._record_class,
                **kwargs,
            )
        )
        try:
            con = await asyncio.shield(attempt)
        except asyncio.CancelledError:  # the pool gave up on it (close, connect_timeout)
            await backend._let_go(attempt, self._close_timeout)
            raise
        if not isinstance(con, self._connection_class):
            good = self._connection_class
            bad = type(con)
            bad_n = (
                bad.__name__ if bad.__module__ == "builtins" else f"{bad.__module__}.{bad.__name__}"
            )
            con.terminate() if isinstance(con, Connection) else None
            raise _interface(
                "expected pool connect callback to return an instance of "
                f"'{good.__module__}.{good.__name__}', got '{bad_n}'"
            )
        if self._init is not None:
            try:
                await self._init(con)
            except BaseException:
                await backend.async_close(con, self._close_timeout)
                raise
        self._born[con] = generation
        return con

    def _spent(self, con: Any) -> bool:
        """Past ``max_queries``, or of a generation ``expire_connections()`` ended."""
        protocol = con._protocol
        if protocol is not None and protocol.queries_count >= self._max_queries:
            return True
        return self._born.get(con, self._generation) != self._generation

    def _check_hook(self, con: Any) -> Awaitable[Any] | None:
        if self._check_closed and con.is_closed():
            raise asyncpg.ConnectionDoesNotExistError("connection is closed")
        if self._spent(con):
            raise _interface("connection expired (max_queries, or expire_connections())")
        return None if self._check_probe is None else self._check_probe(con)

    def _reset_hook(self, con: Any) -> Awaitable[Any] | None:
        con._proxy = None
        if self._spent(con):  # (a reset that fails: the pool closes the connection)
            raise _interface("connection expired (max_queries, or expire_connections())")
        return self._full_reset(con)

    async def _full_reset(self, con: Any, timeout: float | None = None) -> None:
        from . import asyncpg as backend

        invalidate_resources(con)
        reset = self._reset
        if reset is False:
            result = backend.async_rollback_only(con)
            if result is not None:
                await result
        elif callable(reset):
            async with asyncio.timeout(timeout):
                await con._reset()
                await reset(con)
        else:
            await con.reset(timeout=timeout)

    async def _end_hook(self, handed: Any, error: BaseException | None) -> bool | None:
        """``pool.connection()``'s end: the reset in the caller when the block succeeded."""
        if error is not None:
            return None
        con = handed._con if type(handed) is PooledConnection else handed
        con._proxy = None
        if self._spent(con):
            return None  # (the check closes it when next met)
        try:
            await self._full_reset(con)
        except Exception:
            return None  # (the pool's reset tries again, and closes the connection if it fails)
        return True

    def _lend(self, con: Any, lease: Lease[Any]) -> Connection:
        invalidate_resources(con)
        proxy: Any = PooledConnection(con, lease)
        proxy._holder = self._holder
        con._proxy = proxy  # (asyncpg's listeners then get the proxy, as with its pool)
        return proxy  # type: ignore[no-any-return]

    # ------------------------------------------------------------------ start, close

    def __await__(self) -> Generator[Any, None, Pool]:
        return self._async__init__().__await__()

    async def __aenter__(self) -> Pool:
        await self._async__init__()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def _async__init__(self) -> Pool:
        if self._initialized:
            return self
        if self._initializing:
            raise _interface("pool is being initialized in another task")
        if self._closed:
            raise _interface("pool is closed")
        if self._loop is not None and self._loop is not asyncio.get_running_loop():
            raise ValueError(
                "create_pool(loop=...): the pool runs on the event loop that awaits "
                "create_pool(), and this is another one (leave loop= out)"
            )
        self._initializing = True
        self._loop = asyncio.get_running_loop()  # (the poolkit pool's, which closes on it)
        pool = self._pool
        try:
            with _starting(pool):
                pool.ready()
                leases: list[Lease[Connection]] = []
                try:
                    if self._init_size:
                        leases.append(await pool.checkout())
                        if self._init_size > 1:
                            rest = [pool.checkout() for _ in range(self._init_size - 1)]
                            got = await asyncio.gather(*rest, return_exceptions=True)
                            errors = [g for g in got if isinstance(g, BaseException)]
                            leases += [g for g in got if not isinstance(g, BaseException)]
                            if errors:
                                raise errors[0]
                finally:
                    for lease in leases:
                        self._give_back_clean(lease)
            return self
        except BaseException:
            self._closed = True
            self._terminate_all()
            raise
        finally:
            self._initializing = False
            self._initialized = True

    def _check_init(self) -> None:
        if not self._initialized:
            if self._initializing:
                raise _interface(
                    "pool is being initialized, but not yet ready: likely there is a race "
                    "between creating a pool and using it"
                )
            raise _interface("pool is not initialized")
        if self._closed:
            raise _interface("pool is closed")

    def is_closing(self) -> bool:
        """``True`` if the pool is closing or closed."""
        return self._closed or self._closing

    async def close(self) -> None:
        """Wait until every acquired connection is released, then close them all and the pool.
        An error in it (a cancellation too) terminates the pool."""
        if self._closed:
            return
        self._check_init()
        self._closing = True
        loop = asyncio.get_running_loop()
        warning = loop.call_later(60, _warn_on_long_close)
        try:
            while self._leases:
                self._released = asyncio.Event()
                await self._released.wait()
            # (connects in flight end and are closed with the rest, as asyncpg's close waits
            # for its acquirers' connects; the pool tells nobody when a connect ends)
            while self._pool.stats().pending:  # noqa: ASYNC110
                await asyncio.sleep(0.005)
            await self._pool.close()
        except BaseException:
            self.terminate()
            raise
        finally:
            warning.cancel()
            self._closed = True
            self._closing = False

    def terminate(self) -> None:
        """Terminate all connections in the pool, now."""
        if self._closed:
            return
        self._check_init()
        self._closed = True
        self._terminate_all()

    def _terminate_all(self) -> None:
        for con in list(self._born):
            if not con.is_closed():
                con.terminate()
        self._leases.clear()
        self._note_released()  # (a close() waiting for them ends: nothing is out any more)
        # The poolkit pool closes on its loop, even one not running now (asyncpg's test harness
        # terminates between tests): the close's first step runs before any of the pool's
        # timers at the loop's next iteration, so nothing reconnects.
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        hold(loop.create_task(self._pool.close()))

    # ------------------------------------------------------------------ acquire, release

    def acquire(self, *, timeout: float | None = None) -> PoolAcquireContext:
        """A connection, within ``timeout`` seconds: ``async with pool.acquire() as con:``, or
        ``con = await pool.acquire()`` then ``await pool.release(con)``."""
        return PoolAcquireContext(self, timeout)

    async def _acquire(self, timeout: float | None) -> Connection:
        if self._closing:
            raise _interface("pool is closing")
        self._check_init()
        if timeout is not None:
            timeout = check_seconds(timeout, "Pool.acquire(timeout=...)")
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        pool = self._pool
        while True:
            try:
                lease = await pool.checkout(
                    None if deadline is None else max(0.0, deadline - loop.time())
                )
                break
            except WaitQueueTimeoutError:
                raise TimeoutError from None
            except PoolClearedError:
                continue
            except PoolClosedError:
                raise _interface("pool is closed") from None
        proxy: Any = lease.connection
        if self._setup is not None:
            try:
                async with asyncio.timeout_at(deadline):
                    await self._setup(proxy)
            except BaseException as exc:
                con = proxy._con
                con._proxy = None
                await _close_quietly(con, self._close_timeout)
                lease.discard(exc if isinstance(exc, Exception) else None)
                # (as asyncpg's: the proxy the setup got still reaches the connection, closed)
                proxy._lease = _UNBOUND
                raise
        self._leases[id(proxy)] = (lease, timeout)
        return proxy  # type: ignore[no-any-return]

    async def release(self, connection: Connection, *, timeout: float | None = None) -> None:
        """Give back a connection from :meth:`acquire` (``timeout``: for its reset; by default
        the acquire's)."""
        if (
            type(connection) is not PooledConnection
            or getattr(connection, "_holder", None) is not self._holder
        ):
            raise _interface(
                f"Pool.release() received invalid connection: {connection!r} is not a member "
                "of this pool"
            )
        entry = self._leases.pop(id(connection), None)
        if entry is None:
            return  # (released already)
        lease, acquired_timeout = entry
        if not lease.active:
            self._note_released()
            return
        if self._closed:
            lease.discard()
            self._note_released()
            return
        if timeout is None:
            timeout = acquired_timeout
        try:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                # a task being cancelled (an anyio scope cancels it again at each await): the
                # reset runs in a task of its own from the start, as asyncpg's every release
                await asyncio.shield(self._release(lease, connection, timeout, inline=False))
            else:
                await self._release(lease, connection, timeout, inline=True)
        finally:
            self._note_released()

    def _note_released(self) -> None:
        if not self._leases and self._released is not None:
            self._released.set()

    async def _release(
        self, lease: Lease[Connection], proxy: Any, timeout: float | None, *, inline: bool
    ) -> None:
        """``lease`` given back, reset first; ``proxy`` is what it lent (a PooledConnection).
        ``inline``: run in the caller's task, which a cancellation may reach in the reset (see
        ``_reset_and_give_back``)."""
        con: Any = proxy._con
        con._on_release()  # (asyncpg's: resources invalidated, listeners left warned of)
        if con.is_closed():  # (an aborted protocol: terminate() ends asyncpg's cleanup, its
            con._proxy = None  # termination listeners and statements, as asyncpg's release)
            con.terminate()
            lease.discard()
            return
        if self._spent(con):
            con._proxy = None
            lease.discard()  # (the pool closes it gracefully)
            return
        await self._reset_and_give_back(lease, con, timeout, inline=inline)

    async def _reset_and_give_back(
        self, lease: Lease[Connection], con: Any, timeout: float | None, *, inline: bool
    ) -> None:
        """Reset ``con`` and give ``lease`` back; should the reset fail, the connection is
        terminated and the lease discarded. Run ``inline`` (in the caller's task, no task made:
        asyncpg's pool shields every release in a task of its own), a cancellation of the caller
        in the reset does not cost the connection: the reset starts again in a task of its own
        (which first waits for the server to end the statement the cancellation cut short), and
        the caller gets its ``CancelledError`` at once, as from asyncpg's shield."""
        try:
            budget = timeout
            protocol = con._protocol
            if protocol is not None and protocol._is_cancelling():
                budget = await protocol._wait_for_cancellation(budget)
            if con.is_closed():
                con._proxy = None
                lease.discard()
                return
            con._proxy = None
            if callable(self._reset) or self._reset is False:
                reset = self._full_reset(con, budget)
            else:
                reset = con.reset(timeout=budget)
            if inline:  # (the caller yields to the loop before the connection is back, as from
                await at_least_once(reset)  # asyncpg's release, even with nothing to send)
            else:
                await reset
        except BaseException as exc:
            if inline and isinstance(exc, asyncio.CancelledError):
                again = self._reset_and_give_back(lease, con, timeout, inline=False)
                hold(asyncio.ensure_future(again))
                raise
            con._proxy = None
            con.terminate()
            lease.discard(exc if isinstance(exc, Exception) else None)
            raise
        self._give_back_clean(lease)

    @staticmethod
    def _give_back_clean(lease: Lease[Connection]) -> None:
        """Give ``lease`` back with its connection reset already (by ``release()``, or new):
        the poolkit pool's check-in without its reset hook (``lease.release(reset=False)``)."""
        lease.release(reset=False)

    async def expire_connections(self) -> None:
        """Replace every open connection at its next acquire (those in use when released)."""
        self._generation += 1

    def set_connect_args(self, dsn: str | None = None, **connect_kwargs: Any) -> None:
        """The arguments of every connect from now on (the open connections stay until they
        expire: :meth:`expire_connections`)."""
        self._connect_args = (dsn,)
        self._connect_kwargs = connect_kwargs

    # ------------------------------------------------------------------ sizes

    def get_size(self) -> int:
        """The connections open now (idle and in use)."""
        stats = self._pool.stats()
        return stats.available + stats.in_use + stats.checking + stats.resetting

    def get_idle_size(self) -> int:
        """The connections open and idle now."""
        return self._pool.stats().available

    def get_min_size(self) -> int:
        return self._min_size

    def get_max_size(self) -> int:
        return self._max_size

    def get_init_size(self) -> int:
        return self._init_size

    # ------------------------------------------------------------------ asyncpg's caches

    def _drop_statement_cache(self) -> None:
        for con in list(self._born):
            if not con.is_closed():
                con._drop_local_statement_cache()

    def _drop_type_cache(self) -> None:
        for con in list(self._born):
            if not con.is_closed():
                con._drop_local_type_cache()

    # ------------------------------------------------------------------ poolkit's way

    @property
    def pool(self) -> AsyncPool[Connection]:
        """The poolkit :class:`~poolkit.AsyncPool` underneath."""
        return self._pool

    @property
    def options(self) -> PoolOptions:
        return self._pool.options

    @property
    def address(self) -> str:
        return self._pool.address

    def connection(
        self, timeout: float | None = None
    ) -> contextlib.AbstractAsyncContextManager[Connection]:
        """poolkit's ``async with pool.connection() as conn:`` (see :class:`~poolkit.AsyncPool`)."""
        return self._pool.connection(timeout)

    async def checkout(self, timeout: float | None = None) -> Lease[Connection]:
        """poolkit's checkout: a :class:`~poolkit.Lease` to give back with ``lease.release()``."""
        return await self._pool.checkout(timeout)

    def stats(self) -> PoolStats:
        return self._pool.stats()

    def __repr__(self) -> str:
        return f"<{type(self).__module__}.Pool {self._pool!r}>"

    # ------------------------------------------------------------------ queries on the pool

    async def execute(self, query: str, *args: Any, timeout: float | None = None) -> str:
        async with self.acquire() as con:
            return await con.execute(query, *args, timeout=timeout)

    async def executemany(self, command: str, args: Any, *, timeout: float | None = None) -> Any:
        async with self.acquire() as con:
            return await con.executemany(command, args, timeout=timeout)

    async def fetch(
        self, query: str, *args: Any, timeout: float | None = None, record_class: Any = None
    ) -> list[Any]:
        async with self.acquire() as con:
            rows: list[Any] = await con.fetch(
                query, *args, timeout=timeout, record_class=record_class
            )
            return rows

    async def fetchval(
        self, query: str, *args: Any, column: int = 0, timeout: float | None = None
    ) -> Any:
        async with self.acquire() as con:
            return await con.fetchval(query, *args, column=column, timeout=timeout)

    async def fetchrow(
        self, query: str, *args: Any, timeout: float | None = None, record_class: Any = None
    ) -> Any:
        async with self.acquire() as con:
            return await con.fetchrow(query, *args, timeout=timeout, record_class=record_class)

    async def fetchmany(
        self, query: str, args: Any, *, timeout: float | None = None, record_class: Any = None
    ) -> list[Any]:
        async with self.acquire() as con:
            rows: list[Any] = await con.fetchmany(
                query, args, timeout=timeout, record_class=record_class
            )
            return rows

    async def copy_from_table(self, table_name: str, **kwargs: Any) -> str:
        async with self.acquire() as con:
            return await con.copy_from_table(table_name, **kwargs)

    async def copy_from_query(self, query: str, *args: Any, **kwargs: Any) -> str:
        async with self.acquire() as con:
            return await con.copy_from_query(query, *args, **kwargs)

    async def copy_to_table(self, table_name: str, **kwargs: Any) -> str:
        async with self.acquire() as con:
            return await con.copy_to_table(table_name, **kwargs)

    async def copy_records_to_table(self, table_name: str, **kwargs: Any) -> str:
        async with self.acquire() as con:
            return await con.copy_records_to_table(table_name, **kwargs)


class PoolAcquireContext:
    """What :meth:`Pool.acquire` returns: an async context manager, or an awaitable."""

    __slots__ = ("connection", "done", "pool", "timeout")

    def __init__(self, pool: Pool, timeout: float | None) -> None:
        self.pool = pool
        self.timeout = timeout
        self.connection: Connection | None = None
        self.done = False

    async def __aenter__(self) -> Connection:
        if self.connection is not None or self.done:
            raise _interface("a connection is already acquired")
        self.connection = await self.pool._acquire(self.timeout)
        return self.connection

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.done = True
        con = self.connection
        self.connection = None
        assert con is not None
        await self.pool.release(con)

    def __await__(self) -> Generator[Any, None, Connection]:
        self.done = True
        return self.pool._acquire(self.timeout).__await__()


class _Unbound:
    """A lease that never ends: a proxy pointed at it reaches its connection (``_UNBOUND``)."""

    active = True


_UNBOUND_LEASE = _Unbound()
_UNBOUND: Any = weakref.ref(_UNBOUND_LEASE)

def _warn_on_long_close() -> None:
    logger.warning(
        "Pool.close() is taking over 60 seconds to complete. Check if you have any unreleased "
        "connections left. Use asyncio.wait_for() to set a timeout for Pool.close()."
    )


async def _close_quietly(con: Any, timeout: float | None) -> None:
    from . import asyncpg as backend

    try:
        await backend.async_close(con, timeout)
    except Exception:
        con.terminate()
