"""The psycopg_pool drop-ins for asyncio: ``AsyncConnectionPool`` and
``AsyncNullConnectionPool``, psycopg_pool's classes of those names served by a poolkit
:class:`~poolkit.AsyncPool` (``poolkit.backends.psycopg`` exports them).

This is the source of ``_psycopg_dropin_sync`` (``ConnectionPool``, ``NullConnectionPool``),
which tools/async_to_sync.py writes from it: what differs for threads is in ``if True:  # ASYNC``
blocks, whose ``else`` is the blocking code.

Rules of this module
--------------------
* ``_psycopg_dropin``'s. Here besides:
* The poolkit pool is made at ``open()`` (for asyncio: bound to the running loop there; opening
  without a running loop raises ``RuntimeError``, as psycopg_pool).
* The drop-in keeps, for each connection out, its lease (by the connection's id): ``putconn``
  gives back that lease, released (the poolkit pool then runs the reset, if any, and hands the
  connection to the first caller waiting) or discarded (a connection closed or broken).
* The poolkit pool's connect function holds the drop-in pool weakly: a drop-in pool nobody
  references can be collected (closing its poolkit pool).
"""

from __future__ import annotations

import warnings
import weakref
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from time import monotonic
from types import TracebackType
from typing import Any, Generic, NoReturn

from psycopg import AsyncConnection
from psycopg import errors as e
from psycopg.pq import TransactionStatus
from psycopg_pool.abc import (
    ACT,
    AsyncConnectionCB,
    AsyncConninfoParam,
    AsyncKwargsParam,
)

from .. import (
    CircuitOpenError,
    ConnectContext,
    Hooks,
    Lease,
    PoolClearedError,
    PoolClosedError,
    PoolStats,
    TooManyWaitersError,
    WaitQueueTimeoutError,
)
from ..asyncio import AsyncPool
from ._psycopg_dropin import (
    CONNECTIONS_ERRORS,
    CONNECTIONS_LOST,
    CONNECTIONS_MS,
    CONNECTIONS_NUM,
    REQUESTS_ERRORS,
    REQUESTS_NUM,
    REQUESTS_QUEUED,
    REQUESTS_WAIT_MS,
    RETURNS_BAD,
    USAGE_MS,
    CheckRetry,
    ConnectsAhead,
    PoolClosed,
    PoolTimeout,
    Tally,
    TooManyRequests,
    check_size,
    expiry,
    logger,
    measures,
    null_max_connecting,
    open_warning,
    pool_name,
    pool_options,
    putconn_refusal,
)
from ._psycopg_hooks import DEFAULT_RESET_QUERY
from ._psycopg_settings import remember

if True:  # ASYNC
    import asyncio
    import inspect

    from ._psycopg_dropin import async_open_warning
    from ._psycopg_hooks import async_check as _probe
    from ._psycopg_hooks import make_async_reset_soon as _make_reset

    _sleep = asyncio.sleep

    async def _maybe_await(result: Any) -> Any:
        """The result of a callback psycopg_pool takes plain or async (``conninfo``,
        ``kwargs``, ``reconnect_failed``)."""
        if inspect.isawaitable(result):
            return await result
        return result
else:
    import threading
    import time

    from ._psycopg_hooks import check as _probe
    from ._psycopg_hooks import make_reset as _make_reset

    _sleep = time.sleep

    def _maybe_await(result: Any) -> Any:
        return result


__all__ = ["AsyncConnectionPool", "AsyncNullConnectionPool"]

#: psycopg_pool's default ``connection_class``
_CONNECTION_CLASS: Any = AsyncConnection
_IDLE = TransactionStatus.IDLE
_ACTIVE = TransactionStatus.ACTIVE
_UNKNOWN = TransactionStatus.UNKNOWN
_INF = float("inf")
#: seconds between two looks, at ``close``, at the resets still running
RESET_POLL = 0.005


class AsyncConnectionPool(Generic[ACT]):
    """psycopg_pool's ``AsyncConnectionPool``, served by a poolkit :class:`~poolkit.AsyncPool`:
    the same constructor, defaults, methods, statistics and exceptions (see
    ``poolkit.backends._psycopg_dropin``). ``reset_session``: poolkit's full reset on return
    (``True``: the settings given back and ``DEFAULT_RESET_QUERY`` sent; a string: that query),
    off by default as in psycopg_pool."""

    _null = False

    def __init__(
        self,
        conninfo: AsyncConninfoParam = "",
        *,
        connection_class: type[ACT] = _CONNECTION_CLASS,
        kwargs: AsyncKwargsParam | None = None,
        min_size: int = 4,
        max_size: int | None = None,
        open: bool | None = None,
        configure: AsyncConnectionCB[ACT] | None = None,
        check: AsyncConnectionCB[ACT] | None = None,
        reset: AsyncConnectionCB[ACT] | None = None,
        name: str | None = None,
        close_returns: bool = False,
        timeout: float = 30.0,
        max_waiting: int = 0,
        max_lifetime: float = 60 * 60.0,
        max_idle: float = 10 * 60.0,
        reconnect_timeout: float = 5 * 60.0,
        reconnect_failed: Callable[[Any], Any] | None = None,
        num_workers: int = 3,
        reset_session: bool | str = False,
    ) -> None:
        min_size, max_size = check_size(min_size, max_size, null=self._null)
        if num_workers < 1:
            raise ValueError("num_workers must be at least 1")
        if not isinstance(reset_session, bool | str):
            raise TypeError(f"reset_session must be a bool or a query, got {reset_session!r}")
        self.conninfo = conninfo
        self.kwargs = kwargs
        self.connection_class = connection_class
        self.name = pool_name(name)
        self.close_returns = close_returns
        self.timeout = timeout
        self.max_waiting = max_waiting
        self.max_lifetime = max_lifetime
        self.max_idle = max_idle
        self.reconnect_timeout = reconnect_timeout
        self.num_workers = num_workers
        self.reset_session = reset_session
        self._configure = configure
        self._check = check
        self._reset = reset
        self._reconnect_failed = reconnect_failed
        self._min_size = min_size
        self._max_size = max_size
        self._tally = Tally()
        #: a null pool's connects in flight, for its callers' ``requests_wait_ms``
        self._ahead = ConnectsAhead()
        self._leases: dict[int, Lease[ACT]] = {}
        #: held by a connect that grows the pool past ``min_size``: psycopg_pool grows it one
        #: connection at a time (``num_workers`` bounds the connects that fill ``min_size``)
        if True:  # ASYNC
            self._growing = asyncio.Lock()
            #: connects (and closes of what they made) that go on after the poolkit pool gave
            #: them up: ``close`` waits for them, as psycopg_pool's for its workers
            self._apart: set[asyncio.Task[Any]] = set()
        else:
            self._growing = threading.Lock()
        self._pool: AsyncPool[ACT] | None = None
        self._failing_since: float | None = None
        self._opened = False
        self._closed = True
        self._open_implicit = False
        if True:  # ASYNC
            if open:
                warnings.warn(async_open_warning(type(self).__name__), RuntimeWarning, 2)
        if open is None:
            open = self._open_implicit = True
        if open:
            self._open()

    def __repr__(self) -> str:
        cls = type(self)
        return f"<{cls.__module__}.{cls.__name__} {self.name!r} at 0x{id(self):x}>"

    @property
    def min_size(self) -> int:
        return self._min_size

    @property
    def max_size(self) -> int:
        return self._max_size

    @property
    def closed(self) -> bool:
        """``True`` if the pool is closed (or not open yet)."""
        return self._closed

    @property
    def poolkit_pool(self) -> AsyncPool[ACT] | None:
        """The poolkit pool serving now (``None`` before ``open()``)."""
        return self._pool

    # ------------------------------------------------------------------ the poolkit pool

    def _new_pool(self) -> AsyncPool[ACT]:
        options = pool_options(
            min_size=self._min_size,
            max_size=self._max_size,
            null=self._null,
            max_waiting=self.max_waiting,
            max_idle=self.max_idle,
            reconnect_timeout=self.reconnect_timeout,
            num_workers=self.num_workers,
            hooks=Hooks(reset=self._reset_hook(), timeout=None),
            probe=_probe,
            give_up_in=_give_up_in(self),
        )
        return AsyncPool(_connector(self), address=self.name, options=options)

    def _reset_hook(self) -> Any:
        """The reset at check-in (``putconn`` has rolled back what was left open): the
        caller's ``reset``, then the transaction status checked; with ``reset_session``,
        poolkit's full reset around it. ``None`` when there is nothing to do."""
        reset = self._reset
        then = None
        if reset is not None:

            async def then(conn: Any) -> None:
                try:
                    await reset(conn)
                    status = conn.pgconn.transaction_status
                    if status != _IDLE:
                        raise e.ProgrammingError(
                            f"connection left in status {TransactionStatus(status).name} by "
                            f"reset function {reset}: discarded"
                        )
                except Exception as ex:
                    logger.warning("error resetting connection: %s", ex)
                    raise

        if self.reset_session is False:
            return then
        query = DEFAULT_RESET_QUERY if self.reset_session is True else self.reset_session
        return _make_reset(query or None, then=then)

    async def _connect(self) -> ACT:
        """The poolkit pool's connect: a connect that grows the pool past ``min_size`` waits for
        the one before it (psycopg_pool grows one connection at a time). For asyncio the
        connection is made in a task apart (``_make``): if the poolkit pool gives the connect up
        (it closes, or is cleared), that task goes on and closes what it makes, so that nothing
        is left half made to the garbage collector; ``close`` waits for it."""
        pool = self._pool
        if not self._null and pool is not None and pool.stats().total > self._min_size:
            if True:  # ASYNC
                async with self._growing:
                    return await self._make_apart()
            else:
                with self._growing:
                    return self._make()
        if True:  # ASYNC
            return await self._make_apart()
        else:
            return self._make()

    if True:  # ASYNC

        async def _make_apart(self) -> ACT:
            task = asyncio.ensure_future(self._make())
            self._keep(task)
            try:
                return await asyncio.shield(task)
            except asyncio.CancelledError:
                task.add_done_callback(self._close_made)
                raise

        def _keep(self, task: asyncio.Task[Any]) -> None:
            self._apart.add(task)
            task.add_done_callback(self._apart.discard)

        def _close_made(self, task: asyncio.Task[ACT]) -> None:
            """A connect given up by the poolkit pool has ended: close what it made."""
            if task.cancelled() or task.exception() is not None:
                return
            self._keep(asyncio.ensure_future(task.result().close()))

    async def _make(self) -> ACT:
        """A new connection as psycopg_pool makes it: ``conninfo`` and ``kwargs`` resolved (a
        callable's result), ``connection_class.connect``, ``configure``, which must leave the
        connection idle; its expiry set (``max_lifetime``, checked when it is given back). A
        failure is counted, and one that lasted ``reconnect_timeout`` calls
        ``reconnect_failed``."""
        self._tally.counts[CONNECTIONS_NUM] += 1
        t0 = monotonic()
        try:
            conninfo = self.conninfo
            if callable(conninfo):
                conninfo = await _maybe_await(conninfo())
            kwargs = self.kwargs or {}
            if callable(kwargs):
                kwargs = await _maybe_await(kwargs())
            try:
                conn = await self.connection_class.connect(conninfo or "", **kwargs)
            except Exception:
                self._tally.counts[CONNECTIONS_ERRORS] += 1
                raise
            made = monotonic()
            self._tally.counts[CONNECTIONS_MS] += int(1000.0 * (made - t0))
            conn._pool = None  # (in the pool: psycopg's __del__ stays quiet)
            try:
                await self._configured(conn)
            except BaseException:
                await conn.close()
                raise
        except Exception as ex:
            logger.warning("error connecting in %r: %s", self.name, ex)
            await self._connect_failed()
            raise
        self._failing_since = None
        conn._created_at = made
        conn._expire_at = expiry(made, self.max_lifetime)
        return conn

    async def _configured(self, conn: ACT) -> None:
        """The caller's ``configure``, which must leave the connection idle."""
        if self._configure is not None:
            await self._configure(conn)
            status = conn.pgconn.transaction_status
            if status != _IDLE:
                raise e.ProgrammingError(
                    f"connection left in status {TransactionStatus(status).name} by "
                    f"configure function {self._configure}: discarded"
                )
        if self.reset_session is not False:
            remember(conn)  # (the settings the full reset gives back)

    async def _connect_failed(self) -> None:
        now = monotonic()
        if self._failing_since is None:
            self._failing_since = now
        elif now - self._failing_since >= self.reconnect_timeout:
            self._failing_since = None
            logger.warning(
                "reconnection attempt in pool %r failed after %s sec",
                self.name,
                self.reconnect_timeout,
            )
            await self.reconnect_failed()

    async def reconnect_failed(self) -> None:
        """Called when reconnecting failed for longer than ``reconnect_timeout``."""
        if self._reconnect_failed is not None:
            await _maybe_await(self._reconnect_failed(self))

    # ------------------------------------------------------------------ open and close

    def _check_open(self) -> None:
        if self._closed and self._opened:
            raise PoolClosed("pool has already been opened/closed and cannot be reused")

    def _check_open_getconn(self) -> None:
        if self._closed:
            if self._opened:
                raise PoolClosed(f"the pool {self.name!r} is already closed")
            raise PoolClosed(f"the pool {self.name!r} is not open yet")
        if self._open_implicit:
            self._open_implicit = False
            if True:  # ASYNC
                warnings.warn(async_open_warning(type(self).__name__), RuntimeWarning, 3)
            else:
                warnings.warn(open_warning(type(self).__name__), DeprecationWarning, 3)

    def _open(self) -> None:
        if not self._closed:
            return
        self._check_open()
        if True:  # ASYNC
            try:
                asyncio.get_running_loop()
            except RuntimeError:
                raise RuntimeError(f"{type(self).__name__} open with no running loop") from None
        pool = self._new_pool()
        pool.ready()
        self._pool = pool
        self._closed = False
        self._opened = True

    async def open(self, wait: bool = False, timeout: float = 30.0) -> None:
        """Open the pool: connections are made in the background (``wait``: wait for
        ``min_size`` of them, at most ``timeout`` seconds). Again on an open pool: nothing; on a
        closed one: ``PoolClosed``."""
        self._open()
        if wait:
            await self.wait(timeout=timeout)

    async def wait(self, timeout: float = 30.0) -> None:
        """Wait until ``min_size`` connections are ready; if they are not within ``timeout``
        seconds, close the pool and raise ``PoolTimeout``."""
        self._check_open_getconn()
        logger.info("waiting for pool %r initialization", self.name)
        deadline = monotonic() + timeout
        delay = 0.001
        while not self._full():
            left = deadline - monotonic()
            if left <= 0:
                await self.close()
                raise PoolTimeout(f"pool initialization incomplete after {timeout} sec")
            await _sleep(min(delay, left))
            delay = min(delay * 2, 0.02)
        logger.info("pool %r is ready to use", self.name)

    def _full(self) -> bool:
        pool = self._pool
        return pool is not None and pool.stats().available >= self._min_size

    async def close(self, timeout: float = 5.0) -> None:
        """Close the pool: waiting and later callers get ``PoolClosed``; the connections in the
        pool are closed, those out when they are given back."""
        if self._closed:
            return
        self._closed = True
        logger.debug("pool %r closed", self.name)
        pool = self._pool
        if pool is not None:
            await self._resets_ended(pool, timeout)
            await pool.close()
        if True:  # ASYNC
            if self._apart:  # (connects given up by the poolkit pool: they close what they make)
                await asyncio.wait(list(self._apart), timeout=timeout)

    async def _resets_ended(self, pool: Any, timeout: float) -> None:
        """Wait, ``timeout`` seconds at most, for the resets running on connections given back
        to end (``reset_session``'s statements, the caller's ``reset``), as psycopg_pool's
        ``putconn`` has ended its reset when it returns: the poolkit pool's close would cancel
        them mid-statement (psycopg then cancels the statement on the server, through a
        connection of its own, or warns "query cancellation interrupted")."""
        deadline = monotonic() + timeout
        while pool.stats().resetting and monotonic() < deadline:
            await _sleep(RESET_POLL)

    async def __aenter__(self) -> AsyncConnectionPool[ACT]:
        self._open_implicit = False
        await self.open()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc_val: BaseException | None,
        exc_tb: TracebackType | None,
    ) -> None:
        await self.close()

    # ------------------------------------------------------------------ check-out and check-in

    @asynccontextmanager
    async def connection(self, timeout: float | None = None) -> AsyncIterator[ACT]:
        """A connection for the block (at most ``timeout`` seconds to get one, default
        ``self.timeout``): committed if the block succeeds, rolled back if it raises (psycopg's
        own ``with conn``), then given back."""
        conn = await self.getconn(timeout=timeout)
        t0 = monotonic()
        try:
            async with conn:
                yield conn
        finally:  # (the use is timed up to the putconn, as psycopg_pool times it)
            self._tally.counts[USAGE_MS] += int(1000.0 * (monotonic() - t0))
            await self.putconn(conn)

    async def getconn(self, timeout: float | None = None) -> ACT:
        """A connection (waiting at most ``timeout`` seconds, default ``self.timeout``), to give
        back with :meth:`putconn`. With a ``check``, each connection is checked before it is
        handed out, as psycopg_pool does: one that fails goes back to the pool (closed if it is
        broken) and another is taken, the second at once, the next after psycopg_pool's retry
        delays, until the deadline."""
        if timeout is None:
            timeout = self.timeout
        start = monotonic()
        logger.info("connection requested from %r", self.name)
        counts = self._tally.counts
        counts[REQUESTS_NUM] += 1
        if self._closed or self._open_implicit:
            self._check_open_getconn()
        pool = self._pool
        if pool is not None and pool.available and not self._null:
            # the straight way: a connection idle (a glance, no turn of the pool's lock), so the
            # request is not counted as queued (as ``_checkout`` glances)
            try:
                lease = await pool.checkout(timeout)
            except PoolClearedError:  # drain(): wait on, the full way
                lease = await self._checkout(start, start + timeout, timeout)
            except BaseException as exc:
                self._raise_checkout_error(exc, timeout)
        else:
            lease = await self._checkout(start, start + timeout, timeout)
        conn = lease.connection
        if self._check is not None:
            conn, lease = await self._checked(conn, lease, start + timeout, timeout)
        self._leases[id(conn)] = lease
        conn._pool = self  # type: ignore[assignment]  # (psycopg's close() and with read it)
        logger.info("connection given by %r", self.name)
        return conn

    async def _checked(
        self, conn: ACT, lease: Lease[ACT], deadline: float, timeout: float
    ) -> tuple[ACT, Lease[ACT]]:
        """``conn`` (on ``lease``) checked, and while the check fails, given back and another
        taken (the second at once, the next after psycopg_pool's retry delays) until the
        deadline: the connection that passed, and its lease."""
        retry: CheckRetry | None = None
        while True:
            check = self._check
            if check is None:  # (taken away meanwhile)
                return conn, lease
            try:
                await check(conn)
            except Exception as ex:
                logger.info("connection failed check: %s", ex)
                await self._give_back(conn, lease, from_getconn=True)
            except BaseException:  # (cancelled: the connection goes back, no retry)
                await self._give_back(conn, lease, from_getconn=True)
                raise
            else:
                return conn, lease
            if retry is None:
                retry = CheckRetry(deadline)
            delay = retry.wait(monotonic())
            if delay is not None:
                await _sleep(delay)
            if delay is None or monotonic() >= deadline:
                raise PoolTimeout(f"couldn't get a connection after {timeout:.2f} sec")
            lease = await self._checkout(monotonic(), deadline, timeout)
            conn = lease.connection

    async def _checkout(self, start: float, deadline: float, timeout: float) -> Lease[ACT]:
        """A lease from the poolkit pool by ``deadline``, its errors as psycopg_pool's. A caller
        that finds no connection idle (a null pool's: ``max_size`` out) is counted as queued,
        and its wait timed from ``start``, as psycopg_pool counts them."""
        queued = False
        wait = None
        pool = self._pool
        if pool is not None:
            if self._null:
                queued = bool(self._max_size) and pool.stats().total >= self._max_size
                if queued:  # (counted from the end of the connects running: ConnectsAhead)
                    wait = self._ahead.queued()
            else:  # (a glance, no turn of the pool's lock: on the path of every getconn)
                queued = pool.available == 0
            if queued:
                self._tally.counts[REQUESTS_QUEUED] += 1
        try:
            while True:
                pool = self._pool
                assert pool is not None
                try:
                    return await pool.checkout(max(0.0, deadline - monotonic()))
                except PoolClearedError:  # drain(): go on waiting, in the new generation
                    continue
                except BaseException as exc:
                    self._raise_checkout_error(exc, timeout)
        finally:
            if wait is not None:
                self._tally.counts[REQUESTS_WAIT_MS] += self._ahead.waited_ms(wait)
            elif queued:
                self._tally.counts[REQUESTS_WAIT_MS] += int(1000.0 * (monotonic() - start))

    def _raise_checkout_error(self, exc: BaseException, timeout: float) -> NoReturn:
        """Raise for ``exc``, which a checkout of the poolkit pool raised (not a drain's
        ``PoolClearedError``): psycopg_pool's error for it, or ``exc`` itself (a cancellation,
        say); counted among the requests' errors."""
        self._tally.counts[REQUESTS_ERRORS] += 1
        if isinstance(exc, PoolClosedError):
            raise PoolClosed(f"the pool {self.name!r} is already closed") from None
        if isinstance(exc, WaitQueueTimeoutError | CircuitOpenError):
            raise PoolTimeout(f"couldn't get a connection after {timeout:.2f} sec") from None
        if isinstance(exc, TooManyWaitersError):
            raise TooManyRequests(
                f"the pool {self.name!r} has already {self.max_waiting} requests waiting"
            ) from None
        raise exc

    async def putconn(self, conn: ACT) -> None:
        """Give back a connection from :meth:`getconn`: rolled back if left in a transaction,
        closed if given back mid-query or past its ``max_lifetime``, then reset and handed to
        the next caller (or closed, the pool closed). A null pool closes it here unless a caller
        waits for it."""
        if getattr(conn, "_pool", None) is not self:
            raise putconn_refusal(self, conn)
        logger.info("returning connection to %r", self.name)
        lease = self._leases.pop(id(conn))
        if (
            conn.pgconn.transaction_status == _IDLE
            and not self._closed
            and not self._null
            and getattr(conn, "_expire_at", _INF) > monotonic()
        ):  # the usual case: _give_back's last step at once
            conn._pool = None
            lease.release()
            return
        await self._give_back(conn, lease, from_getconn=False)

    async def _give_back(self, conn: ACT, lease: Lease[ACT], *, from_getconn: bool) -> None:
        """``lease`` (on ``conn``) given back, by ``putconn`` or after a failed check in
        ``getconn`` (``from_getconn``), as psycopg_pool's ``_return_connection`` does."""
        conn._pool = None
        pool = self._pool
        if self._closed or (self._null and (pool is None or pool.stats().waiting == 0)):
            if conn.pgconn.transaction_status == _UNKNOWN and not self._closed:
                self._tally.counts[RETURNS_BAD] += 1
            await conn.close()
            lease.discard()
            return
        status = conn.pgconn.transaction_status
        if status == _ACTIVE:
            logger.warning("closing returned connection: %s", conn)
            await conn.close()
        elif status != _IDLE and status != _UNKNOWN:
            logger.warning("rolling back returned connection: %s", conn)
            try:
                await conn.rollback()
            except Exception as ex:
                logger.warning(
                    "rollback failed: %s: %s. Discarding connection %s",
                    ex.__class__.__name__,
                    ex,
                    conn,
                )
                await conn.close()
        if conn.pgconn.transaction_status == _UNKNOWN:
            if from_getconn:
                self._tally.counts[CONNECTIONS_LOST] += 1
                logger.info("not serving connection found broken")
            else:
                self._tally.counts[RETURNS_BAD] += 1
                logger.warning("discarding closed connection: %s", conn)
            lease.discard()
            return
        if getattr(conn, "_expire_at", _INF) <= monotonic():
            logger.info("discarding expired connection")
            await conn.close()
            lease.discard()
            return
        lease.release()

    # ------------------------------------------------------------------ maintenance

    async def resize(self, min_size: int, max_size: int | None = None) -> None:
        """Change the pool's sizes in place (the poolkit pool's ``resize``): the connections
        stay, the callers waiting are served in their order as the room grows (connects start
        to the new ``min_size``), the statistics go on; with smaller sizes the idle connections
        beyond ``max_size`` close now and those in use when they come back."""
        min_size, max_size = check_size(min_size, max_size, null=self._null)
        logger.info("resizing %r to min_size=%s max_size=%s", self.name, min_size, max_size)
        self._min_size = min_size  # (first: the connects it starts read them)
        self._max_size = max_size
        pool = self._pool
        if pool is not None and not self._closed:
            connecting = null_max_connecting(max_size) if self._null else None
            pool.resize(min_size, max_size, max_connecting=connecting)

    async def check(self) -> None:
        """Check the connections idle in the pool now (:meth:`check_connection`): those that
        fail, and those past their ``max_lifetime``, are closed (and replaced, up to
        ``min_size``)."""
        pool = self._pool
        if pool is None or self._closed:
            return
        leases: list[Lease[ACT]] = []
        for _ in range(pool.stats().available):
            try:
                leases.append(await pool.checkout(0))
            except WaitQueueTimeoutError:
                break
        for lease in leases:
            conn = lease.connection
            if getattr(conn, "_expire_at", _INF) <= monotonic():
                logger.info("discarding expired connection %s", conn)
                await conn.close()
                lease.discard()
                continue
            try:
                await self.check_connection(conn)
            except Exception:
                self._tally.counts[CONNECTIONS_LOST] += 1
                logger.warning("discarding broken connection: %s", conn)
                lease.discard()
            else:
                lease.release()

    @staticmethod
    async def check_connection(conn: ACT) -> None:
        """An empty query, outside a transaction: raises if the connection does not work (a
        ``check`` callback, as psycopg_pool's)."""
        if conn.autocommit:
            await conn.execute("")
            return
        if True:  # ASYNC
            await conn.set_autocommit(True)
            try:
                await conn.execute("")
            finally:
                try:
                    await conn.set_autocommit(False)
                except Exception:  # (the connection is closed: the error above is the one)
                    pass
        else:
            conn.autocommit = True
            try:
                conn.execute("")
            finally:
                try:
                    conn.autocommit = False
                except Exception:  # (the connection is closed: the error above is the one)
                    pass

    async def drain(self) -> None:
        """Replace every connection: those idle now are closed and new ones made, those in use
        are closed when given back."""
        pool = self._pool
        if pool is None or self._closed:
            return
        pool.clear()
        pool.ready()

    # ------------------------------------------------------------------ statistics

    def _stats_now(self) -> PoolStats | None:
        return None if self._pool is None else self._pool.stats()

    def get_stats(self) -> dict[str, int]:
        """psycopg_pool's statistics: counters since the last :meth:`pop_stats`, and measures."""
        stats = self._stats_now()
        return self._tally.read(stats, measures(self._min_size, self._max_size, stats, self._null))

    def pop_stats(self) -> dict[str, int]:
        """:meth:`get_stats`, and the counters set back to zero."""
        stats = self._stats_now()
        return self._tally.pop(stats, measures(self._min_size, self._max_size, stats, self._null))


class AsyncNullConnectionPool(AsyncConnectionPool[ACT]):
    """psycopg_pool's ``AsyncNullConnectionPool``: no connection kept; each caller gets a new
    one (at most ``max_size`` at once, 0: no limit; callers beyond it wait in arrival order for
    one given back), closed when given back unless a caller waits for it."""

    _null = True

    def __init__(
        self,
        conninfo: AsyncConninfoParam = "",
        *,
        connection_class: type[ACT] = _CONNECTION_CLASS,
        kwargs: AsyncKwargsParam | None = None,
        min_size: int = 0,
        max_size: int | None = None,
        open: bool | None = None,
        configure: AsyncConnectionCB[ACT] | None = None,
        check: AsyncConnectionCB[ACT] | None = None,
        reset: AsyncConnectionCB[ACT] | None = None,
        name: str | None = None,
        close_returns: bool = False,
        timeout: float = 30.0,
        max_waiting: int = 0,
        max_lifetime: float = 60 * 60.0,
        max_idle: float = 10 * 60.0,
        reconnect_timeout: float = 5 * 60.0,
        reconnect_failed: Callable[[Any], Any] | None = None,
        num_workers: int = 3,
        reset_session: bool | str = False,
    ) -> None:
        super().__init__(
            conninfo,
            open=open,
            connection_class=connection_class,
            check=check,
            configure=configure,
            reset=reset,
            kwargs=kwargs,
            min_size=min_size,
            max_size=max_size,
            name=name,
            close_returns=False,  # (as psycopg_pool's: a null pool keeps nothing to return to)
            timeout=timeout,
            max_waiting=max_waiting,
            max_lifetime=max_lifetime,
            max_idle=max_idle,
            reconnect_timeout=reconnect_timeout,
            reconnect_failed=reconnect_failed,
            num_workers=num_workers,
            reset_session=reset_session,
        )

    async def wait(self, timeout: float = 30.0) -> None:
        """Make one connection, as a test that the database can be reached (it is not kept);
        if that takes more than ``timeout`` seconds, close the pool and raise ``PoolTimeout``."""
        self._check_open_getconn()
        pool = self._pool
        assert pool is not None
        logger.info("waiting for pool %r initialization", self.name)
        try:
            lease = await pool.checkout(timeout)
        except Exception:  # (the connect's error is logged: "error connecting in ...")
            await self.close()
            raise PoolTimeout(f"pool initialization incomplete after {timeout} sec") from None
        lease.release()
        logger.info("pool %r is ready to use", self.name)

    def _full(self) -> bool:
        return True

    async def check(self) -> None:
        """Nothing: a null pool keeps no connection."""


def _give_up_in(pool: AsyncConnectionPool[Any]) -> Callable[[], float | None]:
    """Seconds left until ``pool`` gives its run of failed connects up (``reconnect_timeout``
    after the first), ``None`` while connects succeed: the cut of the retry delays
    (``RetryBackoff``), through a weak reference."""
    owner = weakref.ref(pool)

    def left() -> float | None:
        pool = owner()
        if pool is None or pool._failing_since is None:
            return None
        return pool._failing_since + pool.reconnect_timeout - monotonic()

    return left


def _connector(pool: AsyncConnectionPool[Any]) -> Any:
    """The poolkit pool's connect function: ``pool``'s ``_connect``, through a weak reference."""
    owner = weakref.ref(pool)

    async def connect(ctx: ConnectContext) -> Any:
        pool = owner()
        if pool is None:
            raise PoolClosedError(address=ctx.address, operation="make a connection for")
        if not pool._null:
            return await pool._connect()
        pool._ahead.started(ctx.connection_id)
        try:
            return await pool._connect()
        finally:
            pool._ahead.ended(ctx.connection_id)

    return connect


for _cls in (AsyncConnectionPool, AsyncNullConnectionPool):
    _cls.__module__ = "poolkit.backends.psycopg"
del _cls
