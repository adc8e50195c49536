"""The psycopg backend's hook functions, plain (for ``Pool``) and async (for ``AsyncPool``).

Rules of this module
--------------------
* A hook that finds the connection unusable raises (the pool then closes it); it never closes
  the connection itself.
* What a connection's transaction status can tell without a round trip is read locally
  (``conn.info.transaction_status``): a clean connection costs its reset no I/O unless a reset
  query is asked for.
* The reset gives back what a caller can change without a query (``row_factory``, the cursor
  factories, prepared-statement settings, notice and notify handlers, ``autocommit`` and the
  transaction characteristics) as they were once the connection was configured
  (``_psycopg_settings``), before it sends its query.
* The end of ``pool.connection()``'s block sends its COMMIT (or ROLLBACK) and the reset query
  in one message (:func:`make_end`): one round trip where a commit and a reset took two, as many
  as psycopg_pool's commit alone. The reset at check-in then sends no query for that connection
  (``_RESET_SENT``), unless something ran on it since.
* The object a lease was handed (``_psycopg_lend``) is released by ``end``, once it has ended
  the block's transaction through it (a block's I/O, its end included, goes through the one
  object the caller holds), and by the reset before it sends anything. The books
  (``_RESET_SENT``, the remembered settings) are the pooled connection's.
* The plain and async versions say the same thing in the same order; only the awaits differ.
"""

from __future__ import annotations

import logging
import select
import weakref
from collections.abc import Awaitable, Callable
from typing import Any, Final

import psycopg
from psycopg.pq import ConnStatus, TransactionStatus

from ._psycopg_lend import given_back, pooled, release_lent
from ._psycopg_settings import Settings, remember, remembered, restore_plain_attributes

#: what :func:`make_reset` sends by default after the rollback: the statements asyncpg's pool
#: resets a session with (``DISCARD ALL`` would also drop psycopg's prepared statements)
DEFAULT_RESET_QUERY = "SELECT pg_advisory_unlock_all(); CLOSE ALL; UNLISTEN *; RESET ALL"

# the transaction statuses as the plain integers ``conn.pgconn.transaction_status`` gives (what
# ``conn.info.transaction_status`` wraps in a new enum member each time, at ten times the cost:
# the hooks read it on every check-out and check-in)
_IDLE = int(TransactionStatus.IDLE)
_ACTIVE = int(TransactionStatus.ACTIVE)
_INTRANS = int(TransactionStatus.INTRANS)
_INERROR = int(TransactionStatus.INERROR)
_UNKNOWN = int(TransactionStatus.UNKNOWN)
#: connections whose reset query went out with the COMMIT or ROLLBACK that ended the block
#: (``make_end``): the reset at check-in sends none for them
_RESET_SENT: weakref.WeakSet[Any] = weakref.WeakSet()

logger = logging.getLogger("poolkit.backends.psycopg")

Conn = psycopg.Connection[Any]
AsyncConn = psycopg.AsyncConnection[Any]


def _usable(conn: Conn | AsyncConn) -> int:
    """The connection's transaction status (``_IDLE``, ``_INTRANS`` or ``_INERROR``); raises if
    it is closed, broken or mid-query."""
    if conn.closed or conn.broken:
        raise psycopg.OperationalError("the connection is closed")
    status: int = conn.pgconn.transaction_status
    if status == _ACTIVE:
        raise psycopg.ProgrammingError("the connection was given back in the middle of a query")
    if status == _UNKNOWN:
        raise psycopg.OperationalError("the connection is in an unknown state")
    return status


def _left_open(conn: Conn | AsyncConn, status: int) -> None:
    logger.warning(
        "rolling back a transaction left %s on a connection given back to the pool (to commit "
        "on success, use poolkit.backends.psycopg.connection(pool)): %s",
        "failed" if status == _INERROR else "open",
        conn,
    )


def _readable(fd: int) -> bool:
    """Whether the server sent something to an idle connection (its goodbye, a notification)."""
    if hasattr(select, "poll"):
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        return bool(poller.poll(0))
    return bool(select.select([fd], [], [], 0)[0])  # pragma: no cover - no poll(): Windows


def _transaction_settings(
    conn: Conn | AsyncConn, autocommit: bool
) -> tuple[bool, psycopg.IsolationLevel | None, bool | None, bool | None]:
    """What ``autocommit``, ``isolation_level``, ``read_only`` and ``deferrable`` go back to: as
    the connection was configured, or (not remembered) ``autocommit`` and the defaults; the other
    remembered settings are given back on the way."""
    wanted: Settings | None = remembered(conn)
    if wanted is None:
        return autocommit, None, None, None
    restore_plain_attributes(conn, wanted)
    return wanted.autocommit, wanted.isolation_level, wanted.read_only, wanted.deferrable


def remembering(configure: Callable[[Conn], Any] | None) -> Callable[[Conn], None]:
    """The ``configure`` hook of :func:`hooks`: the user's ``configure`` (if any), then the
    connection's settings remembered for the reset to give back."""

    def configure_then_remember(conn: Conn) -> None:
        if configure is not None:
            configure(conn)
        remember(conn)

    return configure_then_remember


def async_remembering(
    configure: Callable[[AsyncConn], Awaitable[Any]] | None,
) -> Callable[[AsyncConn], Awaitable[None]]:
    """:func:`remembering` for ``psycopg.AsyncConnection``."""

    async def configure_then_remember(conn: AsyncConn) -> None:
        if configure is not None:
            await configure(conn)
        remember(conn)

    return configure_then_remember


def is_broken(conn: Conn | AsyncConn, error: BaseException) -> bool:
    """The ``is_broken`` hook (plain for both pools): the connection is closed or broken (an SQL
    error such as a division by zero leaves it usable: its transaction is rolled back). Besides
    psycopg's own flags, which a backend terminated mid-query does not always raise (psycopg may
    report "connection socket closed" with neither set): libpq's status gone bad, or an error of
    SQLSTATE class 08 (connection exception) or 57P01-57P03 (the server shutting down)."""
    if conn.closed or conn.broken or conn.pgconn.status == _BAD:
        return True
    state = getattr(error, "sqlstate", None)
    return isinstance(state, str) and (state.startswith("08") or state in _SHUTDOWN)


_BAD: Final = ConnStatus.BAD
_SHUTDOWN: Final = frozenset({"57P01", "57P02", "57P03"})


# ---------------------------------------------------------------------- plain (Pool)


def make_reset(
    query: str | None, *, autocommit: bool = False, then: Callable[[Conn], Any] | None = None
) -> Callable[[Conn], None]:
    """A ``reset`` hook: roll back what was left open or failed; give back the settings the
    connection had once configured (``row_factory``, ``cursor_factory``,
    ``server_cursor_factory``, ``prepare_threshold``, ``prepared_max``, notice and notify
    handlers, ``autocommit``, ``isolation_level``, ``read_only``, ``deferrable``: remembered by
    the ``configure`` hook of :func:`hooks`; a connection it did not see gets ``autocommit``
    back and the isolation level, read-only and deferrable attributes their defaults, None);
    then run ``query`` (if any) outside a transaction, then ``then(conn)`` (if any: a
    function of yours, as psycopg_pool's ``reset``), which must leave no transaction open."""

    def reset(conn: Conn) -> None:
        release_lent(conn)
        sent = _took_reset_sent(conn)
        status = _usable(conn)
        if status != _IDLE:
            _left_open(conn, status)
            conn.rollback()
        autocommit_, isolation_level, read_only, deferrable = _transaction_settings(
            conn, autocommit
        )
        if conn.autocommit != autocommit_:
            conn.autocommit = autocommit_
        if conn.isolation_level != isolation_level:
            conn.isolation_level = isolation_level
        if conn.read_only != read_only:
            conn.read_only = read_only
        if conn.deferrable != deferrable:
            conn.deferrable = deferrable
        if query and not (sent and status == _IDLE):
            _outside_a_transaction(conn, query)
        if then is not None:
            then(conn)
        if conn.pgconn.transaction_status != _IDLE:
            raise psycopg.ProgrammingError("the reset left the connection in a transaction")

    return reset


def _outside_a_transaction(conn: Conn, query: str) -> None:
    if conn.autocommit or conn.pgconn.transaction_status != _IDLE:
        conn.execute(query)  # (in a transaction: the final check of the reset refuses it)
        return
    conn.autocommit = True
    try:
        conn.execute(query)
    finally:
        conn.autocommit = False


def ping(conn: Conn) -> None:
    """A round trip: an empty query, outside a transaction (a keep-alive ``probe`` too)."""
    _usable(conn)
    _outside_a_transaction(conn, "")


def check(conn: Conn) -> None:
    """The ``check`` hook without a round trip, unless the server sent something meanwhile:
    raises if the connection is closed or broken, or if what the server sent was its goodbye
    (``pg_terminate_backend``, a shutdown)."""
    _usable(conn)
    if _readable(conn.fileno()):
        ping(conn)


def check_ping(conn: Conn) -> None:
    """The ``check`` hook with a round trip (a firewall that drops idle connections silently is
    only found that way)."""
    ping(conn)


# ---------------------------------------------------------------------- async (AsyncPool)


def make_async_reset(
    query: str | None,
    *,
    autocommit: bool = False,
    then: Callable[[AsyncConn], Awaitable[Any]] | None = None,
) -> Callable[[AsyncConn], Awaitable[None]]:
    """:func:`make_reset` for ``psycopg.AsyncConnection``."""
    soon = make_async_reset_soon(query, autocommit=autocommit, then=then)

    async def reset(conn: AsyncConn) -> None:
        rest = soon(conn)
        if rest is not None:
            await rest

    return reset


def make_async_reset_soon(
    query: str | None,
    *,
    autocommit: bool = False,
    then: Callable[[AsyncConn], Awaitable[Any]] | None = None,
) -> Callable[[AsyncConn], Awaitable[None] | None]:
    """:func:`make_async_reset` as the hook ``async_hooks`` gives an ``AsyncPool``: what needs
    no I/O is done at once, and only a reset that needs a round trip (a transaction left open, a
    transaction setting changed, a query not sent with the block's COMMIT, ``then``) returns the
    awaitable that does the rest. A plain result ends the pool's reset at once: no task is
    spawned for a clean connection (as :func:`make_async_end` sends the query with the
    COMMIT, that is every check-in of ``pool.connection()``'s block)."""

    def reset(conn: AsyncConn) -> Awaitable[None] | None:
        release_lent(conn)
        sent = _took_reset_sent(conn)
        status = _usable(conn)
        settings = _transaction_settings(conn, autocommit)
        if (
            status == _IDLE
            and then is None
            and (not query or sent)
            and conn.autocommit == settings[0]
            and conn.isolation_level == settings[1]
            and conn.read_only == settings[2]
            and conn.deferrable == settings[3]
        ):
            return None  # clean: nothing to send
        return _async_reset_rest(conn, status, sent, settings, query, then)

    return reset


async def _async_reset_rest(
    conn: AsyncConn,
    status: int,
    sent: bool,
    settings: tuple[bool, psycopg.IsolationLevel | None, bool | None, bool | None],
    query: str | None,
    then: Callable[[AsyncConn], Awaitable[Any]] | None,
) -> None:
    """The part of an async reset that awaits (see :func:`make_async_reset_soon`)."""
    if status != _IDLE:
        _left_open(conn, status)
        await conn.rollback()
    autocommit_, isolation_level, read_only, deferrable = settings
    if conn.autocommit != autocommit_:
        await conn.set_autocommit(autocommit_)
    if conn.isolation_level != isolation_level:
        await conn.set_isolation_level(isolation_level)
    if conn.read_only != read_only:
        await conn.set_read_only(read_only)
    if conn.deferrable != deferrable:
        await conn.set_deferrable(deferrable)
    if query and not (sent and status == _IDLE):
        await _async_outside_a_transaction(conn, query)
    if then is not None:
        await then(conn)
    if conn.pgconn.transaction_status != _IDLE:
        raise psycopg.ProgrammingError("the reset left the connection in a transaction")


async def _async_outside_a_transaction(conn: AsyncConn, query: str) -> None:
    if conn.autocommit or conn.pgconn.transaction_status != _IDLE:
        await conn.execute(query)
        return
    await conn.set_autocommit(True)
    try:
        await conn.execute(query)
    finally:
        await conn.set_autocommit(False)


async def async_ping(conn: AsyncConn) -> None:
    """:func:`ping` for ``psycopg.AsyncConnection``."""
    _usable(conn)
    await _async_outside_a_transaction(conn, "")


async def async_check(conn: AsyncConn) -> None:
    """:func:`check` for ``psycopg.AsyncConnection``."""
    ping = async_check_closed_soon(conn)
    if ping is not None:
        await ping


def async_check_closed_soon(conn: AsyncConn) -> Awaitable[None] | None:
    """:func:`async_check` as the hook ``async_hooks`` gives an ``AsyncPool``: ``None``
    (passed at once, no task spawned) unless the server sent something, then the ping to
    await."""
    _usable(conn)
    if _readable(conn.fileno()):
        return async_ping(conn)
    return None


async def async_check_ping(conn: AsyncConn) -> None:
    """:func:`check_ping` for ``psycopg.AsyncConnection``."""
    await async_ping(conn)


def end(conn: Conn, error: BaseException | None) -> None:
    """The ``end`` hook (psycopg_pool's contract): commit when ``pool.connection()``'s block
    succeeded, roll back when it raised (a connection closed or broken has nothing to roll back).
    A failing COMMIT reaches the caller. (``conn``: what the block got, which ends its
    transaction; the object a lease was handed is released once it has.)"""
    try:
        if error is None:
            conn.commit()
        elif not (conn.closed or conn.broken):
            conn.rollback()
    finally:
        given_back(conn)


async def async_end(conn: AsyncConn, error: BaseException | None) -> None:
    """:func:`end` for ``psycopg.AsyncConnection``."""
    try:
        if error is None:
            await conn.commit()
        elif not (conn.closed or conn.broken):
            await conn.rollback()
    finally:
        given_back(conn)


def _took_reset_sent(conn: Conn | AsyncConn) -> bool:
    """Whether the block's end sent the reset query already (and forget it: once)."""
    if conn in _RESET_SENT:
        _RESET_SENT.discard(conn)
        return True
    return False


def _ending(
    conn: Conn | AsyncConn, error: BaseException | None, commit: bytes, rollback: bytes
) -> bytes | None:
    """What to send at the end of the block in one message, or None (then: ``end``): ``commit``
    (COMMIT and the reset query) or, after an error, ``rollback``, when a transaction is open or
    failed, not in autocommit, and the connection usable."""
    if conn.closed or conn.broken or conn.autocommit:
        return None
    status = conn.pgconn.transaction_status
    if status == _INTRANS:
        return commit if error is None else rollback
    if status == _INERROR and error is not None:
        return rollback
    return None


def _messages(query: str) -> tuple[bytes, bytes]:
    """The two messages that end a block and reset the session at once: COMMIT or ROLLBACK, then
    ``query``."""
    return f"COMMIT; {query}".encode(), f"ROLLBACK; {query}".encode()


def make_end(
    query: str | None, reset: Callable[[Conn], Any] | None = None
) -> Callable[[Conn, BaseException | None], bool | None]:
    """The ``end`` hook of :func:`~poolkit.backends.psycopg.hooks`: :func:`end` (commit on
    success, roll back on error), with the reset ``query`` sent in the same message (simple query
    protocol: one round trip), so that the reset at check-in needs none. A failing COMMIT still
    reaches the caller (and the reset then runs its query as usual). ``reset`` (the pool's reset
    hook): after a block that succeeded it runs here too, in the caller, and the hook returns
    ``True``: the pool then runs no reset at this check-in (one turn of its lock, not three). A
    reset that fails here is left to the pool's, which closes the connection if it fails
    again."""
    if not query and reset is None:
        return end
    commit, rollback = _messages(query) if query else (b"", b"")

    def end_and_reset(handed: Conn, error: BaseException | None) -> bool | None:
        conn = pooled(handed)  # (the books are its; the I/O goes through what the block got)
        try:
            message = _ending(handed, error, commit, rollback) if query else None
            if message is None:
                end(handed, error)
            else:
                handed.execute(message, prepare=False)  # (several statements: never prepared)
        finally:
            given_back(handed)
        if message is not None:
            _RESET_SENT.add(conn)
        if error is not None or reset is None:
            return None
        try:
            reset(conn)
        except Exception:
            return None
        return True

    return end_and_reset


def make_async_end(
    query: str | None,
    reset: Callable[[AsyncConn], Awaitable[Any] | None] | None = None,
) -> Callable[[AsyncConn, BaseException | None], Awaitable[bool | None]]:
    """:func:`make_end` for ``psycopg.AsyncConnection`` (``reset``: a hook that may answer at
    once, as :func:`make_async_reset_soon`'s do, or return an awaitable)."""
    if not query and reset is None:
        return async_end
    commit, rollback = _messages(query) if query else (b"", b"")

    async def end_and_reset(handed: AsyncConn, error: BaseException | None) -> bool | None:
        conn = pooled(handed)  # (the books are its; the I/O goes through what the block got)
        try:
            message = _ending(handed, error, commit, rollback) if query else None
            if message is None:
                await async_end(handed, error)
            else:
                await handed.execute(message, prepare=False)
        finally:
            given_back(handed)
        if message is not None:
            _RESET_SENT.add(conn)
        if error is not None or reset is None:
            return None
        try:
            rest = reset(conn)
            if rest is not None:
                await rest
        except Exception:
            return None
        return True

    return end_and_reset
