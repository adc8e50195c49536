"""Operations over an asyncio pool of MongoDB connections, as a driver runs them: commands,
cursors, sessions and transactions, with the Load Balancer spec's pinning and error handling
(:class:`AsyncMongoPool`). Its blocking twin, :mod:`.pool_sync`, is generated from this module
(tools/async_to_sync.py).

Rules of this module
--------------------
* What to send and what a reply or an error changes is decided by :mod:`.pinning` and
  :mod:`.states` (no I/O); this module sends it, and gives back what it took.
* Arguments are checked (:mod:`.checks`) before anything is checked out or sent.
* A checkout is given back exactly once, by ``_give_back`` (judging the error that ended it):
  on every path, a cancellation included.
* Only what both front ends can share goes here: ``async``/``await`` and the ``Async`` names
  are all the twin rewrites.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from types import TracebackType
from typing import Any

from .. import Lease
from ..asyncio import AsyncPool
from ..driver import check_timeout
from ..errors import WaitQueueTimeoutError
from ._checks import (
    Purpose,
    check_collection,
    check_command,
    check_cursor,
    check_db,
    check_documents,
    check_pipeline,
    check_purpose,
)
from .connection import AsyncMongoConnection
from .errors import MongoError
from .pinning import PinningRules
from .states import CursorState, SessionState, find_command, releases_pin

__all__ = ["AsyncCursor", "AsyncMongoPool", "AsyncSession", "AsyncTransaction"]

Sequences = Mapping[str, Sequence[Mapping[str, Any]]] | None


class AsyncMongoPool(PinningRules[AsyncMongoConnection]):
    """Commands, cursors and transactions over an :class:`~poolkit.AsyncPool` of
    :class:`~.connection.AsyncMongoConnection` (made by :func:`~.connection.async_connect`).

    ``pin``: whether cursors and transactions keep their connection (default: the pool's
    ``load_balanced``; False only to show what pinning prevents). ``read_preference``:
    ``{"mode": "secondaryPreferred", ...}``, sent as ``$readPreference`` with the cursors'
    commands outside transactions (default: primary, nothing sent)."""

    pool: AsyncPool[AsyncMongoConnection]
    _front = AsyncPool

    def __init__(
        self,
        pool: AsyncPool[AsyncMongoConnection],
        *,
        pin: bool | None = None,
        read_preference: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(pool, pin=pin, read_preference=read_preference)

    async def _checkout(
        self, purpose: Purpose, timeout: float | None = None
    ) -> Lease[AsyncMongoConnection]:
        check_purpose(purpose)
        if timeout is not None:
            timeout = check_timeout(timeout, "connection(timeout=...)")
        try:
            lease = await (self.pool.checkout() if timeout is None else self.pool.checkout(timeout))
        except WaitQueueTimeoutError as exc:
            raise self._timeout(exc) from None
        except MongoError as exc:  # the connect of this checkout failed
            self._connect_failed(exc)
            raise
        self._checked_out(purpose)
        return lease

    @contextlib.asynccontextmanager
    async def connection(
        self, purpose: Purpose = "other", timeout: float | None = None
    ) -> AsyncIterator[AsyncMongoConnection]:
        """A connection for ``purpose``, given back (or discarded, if broken) at the end; an
        error in the block is judged by the SDAM rules (:mod:`.pinning`)."""
        lease = await self._checkout(purpose, timeout)
        try:
            yield lease.connection
        except BaseException as exc:
            self._give_back(purpose, lease, exc)
            raise
        self._give_back(purpose, lease, None)

    async def command(
        self,
        db: str,
        command: Mapping[str, Any],
        *,
        sequences: Sequences = None,
        timeout: float | None = None,
    ) -> dict[str, Any]:
        """One command on a connection of its own (purpose ``"other"``), in an implicit
        session (a server session from the pool, given back after) unless it names one.
        ``timeout``: seconds for all of it, the wait for a connection and the round trip."""
        check_db(db, "command")
        check_command(command, "command")
        deadline = self._deadline(timeout, "command")
        command, implicit = self._in_session(command)
        try:
            async with self.connection("other", timeout) as conn:
                left = self._left(deadline)
                return await conn.command(db, command, sequences=sequences, timeout=left)
        finally:
            if implicit is not None:
                self.sessions.give_back(implicit)

    async def end_sessions(self) -> None:
        """Tell the server the idle server sessions are over (``endSessions``); before the
        pool is closed."""
        for command in self._end_sessions_commands():
            with contextlib.suppress(MongoError):
                await self.command("admin", command)

    async def insert(
        self, db: str, collection: str, documents: Sequence[Mapping[str, Any]]
    ) -> dict[str, Any]:
        check_db(db, "insert")
        check_collection(collection, "insert")
        check_documents(documents, "insert")
        return await self.command(
            db, {"insert": collection, "ordered": True}, sequences={"documents": documents}
        )

    async def find(
        self,
        db: str,
        collection: str,
        filter: Mapping[str, Any] | None = None,
        *,
        batch_size: int = 101,
    ) -> AsyncCursor:
        """A cursor over ``collection`` (``find``'s first batch fetched), in an implicit session
        it keeps until it is exhausted or closed."""
        check_cursor(db, collection, filter, batch_size, "find")
        return await self._open(
            db, find_command(collection, filter, batch_size), batch_size, "find"
        )

    async def cursor(
        self, db: str, command: Mapping[str, Any], batch_size: int = 101
    ) -> AsyncCursor:
        """A cursor from any command that opens one (``aggregate``, ``listCollections``,
        ``listIndexes``...), pinned as :meth:`find`'s."""
        return await self._open(db, command, batch_size, "cursor")

    async def _open(
        self, db: str, command: Mapping[str, Any], batch_size: int, call: str
    ) -> AsyncCursor:
        state, command = self._cursor(db, command, batch_size, call)
        cursor = AsyncCursor(self, state)
        await cursor._start(command)
        return cursor

    async def aggregate(
        self,
        db: str,
        collection: str,
        pipeline: Sequence[Mapping[str, Any]],
        *,
        batch_size: int = 101,
    ) -> AsyncCursor:
        check_collection(collection, "aggregate")
        check_pipeline(pipeline, "aggregate")
        command = {"aggregate": collection, "pipeline": list(pipeline)}
        return await self._open(db, command, batch_size, "aggregate")

    async def list_collections(self, db: str, *, batch_size: int = 101) -> AsyncCursor:
        return await self._open(db, {"listCollections": 1}, batch_size, "list_collections")

    async def list_indexes(self, db: str, collection: str, *, batch_size: int = 101) -> AsyncCursor:
        check_collection(collection, "list_indexes")
        return await self._open(db, {"listIndexes": collection}, batch_size, "list_indexes")

    def session(self) -> AsyncSession:
        """A session: transactions one after another, pinned as the Load Balancer spec says."""
        return AsyncSession(self)

    def transaction(self, db: str) -> AsyncTransaction:
        """``async with pool.transaction(db) as txn:`` commands through ``txn.command(...)``,
        committed at the end (aborted if the block raises)."""
        check_db(db, "transaction")
        return AsyncTransaction(self, db)


class AsyncCursor:
    """A cursor: ``async for doc in cursor``. Pinned (load-balanced mode) until exhausted or
    :meth:`close`d (not at all if its first command returned everything). After an error it
    stays pinned until closed: :meth:`close` sends ``killCursors`` on its connection, unless
    that connection failed (a network error), then gives the connection back (a broken one is
    closed). A cursor opened in a transaction shares its connection and ends with it: asking it
    for more raises :class:`~.errors.InvalidOperationError`."""

    def __init__(
        self,
        pool: AsyncMongoPool,
        state: CursorState,
        shared: Lease[AsyncMongoConnection] | None = None,
    ) -> None:
        self._pool = pool
        self._state = state
        #: the pinned connection: its own, or one it shares (a session's, pinned by its
        #: transaction), which it neither checks out nor gives back
        self._lease = shared
        self._own = False
        #: a transaction's cursor: its session's rules for its errors (labels, the pin)
        self._on_error: Callable[[MongoError, Mapping[str, Any]], None] | None = None

    @property
    def id(self) -> int:
        return self._state.id

    async def _start(self, command: dict[str, Any]) -> None:
        try:
            if self._pool.pin and self._lease is None:
                self._lease = await self._pool._checkout("cursor")
                self._own = True
            self._state.take(await self._run(command), "firstBatch")
        except BaseException as exc:  # (no cursor: its connection and session go back)
            self._state.kill_command()
            self._unpin(exc)
            raise
        if self._state.id == 0:
            self._unpin(None)  # (all in the first batch: nothing to pin for)

    async def _run(self, command: dict[str, Any]) -> dict[str, Any]:
        lease = self._lease
        try:
            if lease is None:  # (not pinned: each command on a connection of its own)
                return await self._pool.command(self._state.db, command)
            return await lease.connection.command(self._state.db, command)
        except MongoError as exc:
            if lease is not None:
                self._pool._judge(lease, exc)
                self._state.failed_with(exc)  # (still pinned until closed)
            if self._on_error is not None:
                self._on_error(exc, command)
            raise

    def __del__(self) -> None:
        # unclosed: the pool takes the connection back from its lease; the count goes too
        if getattr(self, "_own", False) and self._lease is not None:
            self._pool._lost.append("cursor")

    def _orphaned(self) -> None:
        """The transaction whose pinned connection it shared has ended."""
        self._state.orphaned(self._pool.pool.address)
        self._lease = None

    def _unpin(self, error: BaseException | None) -> None:
        implicit = self._state.session_done()
        if implicit is not None:
            self._pool.sessions.give_back(implicit)
        lease, self._lease = self._lease, None
        if lease is not None and self._own:
            self._own = False
            self._pool._give_back("cursor", lease, error)

    def __aiter__(self) -> AsyncCursor:
        return self

    async def __anext__(self) -> dict[str, Any]:
        state = self._state
        while not state.batch:
            command = state.next_command()
            if command is None:
                self._unpin(None)
                raise StopAsyncIteration
            state.take(await self._run(command), "nextBatch")
        return state.batch.popleft()

    async def to_list(self) -> list[dict[str, Any]]:
        return [doc async for doc in self]

    async def close(self) -> None:
        """Kill the cursor on its own connection (unless it is exhausted or that connection
        failed), then give the connection back."""
        try:
            command = self._state.kill_command()
            if command is not None:
                with contextlib.suppress(MongoError):  # (not judged: the cursor is over)
                    if self._lease is not None:
                        await self._lease.connection.command(self._state.db, command)
                    elif not self._pool.pin:
                        await self._pool.command(self._state.db, command)
        finally:
            self._unpin(self._state.failed)

    async def __aenter__(self) -> AsyncCursor:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()


class AsyncSession:
    """``session = pool.session()``; ``await session.start_transaction()``, commands through
    ``session.command(...)`` / ``session.find(...)``, ``await session.commit_transaction()`` (or
    ``abort_transaction()``), ..., ``await session.end()`` (or ``async with``).

    A transaction's first command pins a connection (load-balanced mode), and the session keeps
    it past the commit (a commit may be retried, on that connection) until its next transaction
    starts, an operation outside a transaction runs, the transaction is aborted, or the session
    ends. A transient error (``TransientTransactionError``, a network error) gives the pin back
    at once; any other keeps it. A cursor opened in a transaction shares the pinned connection.
    """

    def __init__(self, pool: AsyncMongoPool) -> None:
        self._pool = pool
        #: (a server session of the pool's, reused)
        self._state = SessionState(pool.sessions.take(), pool.pool.address)
        self._lease: Lease[AsyncMongoConnection] | None = None
        #: the cursors sharing the pinned connection: orphaned when it is given back
        self._cursors: weakref.WeakSet[AsyncCursor] = weakref.WeakSet()

    @property
    def lsid(self) -> dict[str, Any]:
        return self._state.lsid

    @property
    def txn_number(self) -> int:
        return self._state.txn_number

    @property
    def in_transaction(self) -> bool:
        return self._state.in_transaction

    @property
    def pinned(self) -> bool:
        return self._lease is not None

    def __del__(self) -> None:
        if getattr(self, "_lease", None) is not None:  # (as AsyncCursor's)
            self._pool._lost.append("transaction")

    def _end_cursors(self) -> None:
        """The transaction's cursors end with it (the server kills them)."""
        for cursor in list(self._cursors):
            cursor._orphaned()
        self._cursors.clear()

    def _unpin(self, error: BaseException | None = None) -> None:
        lease, self._lease = self._lease, None
        if lease is not None:
            self._end_cursors()
            self._pool._give_back("transaction", lease, error)

    async def _pin(self) -> None:
        if self._lease is None and self._pool.pin:
            self._lease = await self._pool._checkout("transaction")

    async def start_transaction(self) -> None:
        """A new transaction: a connection the last one left pinned is given back."""
        self._state.start_transaction()
        self._unpin()

    async def _run(
        self, db: str, command: Mapping[str, Any], sequences: Sequences = None
    ) -> dict[str, Any]:
        lease = self._lease
        try:
            if lease is None:
                reply = await self._pool.command(db, command, sequences=sequences)
            else:
                reply = await lease.connection.command(db, command, sequences=sequences)
        except MongoError as exc:
            if lease is not None:
                self._pool._judge(lease, exc)
            self._failed(exc, command)
            raise
        self._state.replied(command, reply)
        return reply

    def _failed(self, error: MongoError, command: Mapping[str, Any]) -> None:
        """An error of one of the session's commands (or of its transaction's cursors'),
        judged already: labelled, and a transient one gives the pin back at once."""
        self._state.label(error, command)
        if self._lease is not None and releases_pin(error):
            self._unpin(error)

    async def _enter(self) -> None:
        """Before an operation: pinned in a transaction; outside, any pin given back."""
        self._state.check_open()
        if self._state.in_transaction:
            await self._pin()
        else:
            self._unpin()

    async def command(
        self, db: str, command: Mapping[str, Any], *, sequences: Sequences = None
    ) -> dict[str, Any]:
        """``command`` in this session: in its transaction (pinned) if one is in progress;
        otherwise on a connection of its own."""
        check_db(db, "command")
        check_command(command, "command")
        await self._enter()
        return await self._run(db, {**command, **self._state.fields()}, sequences)

    async def find(
        self,
        db: str,
        collection: str,
        filter: Mapping[str, Any] | None = None,
        *,
        batch_size: int = 101,
    ) -> AsyncCursor:
        """A cursor in this session; in a transaction it shares the pinned connection (and
        ends with the transaction: see :class:`AsyncCursor`)."""
        check_cursor(db, collection, filter, batch_size, "find")
        await self._enter()
        command = find_command(collection, filter, batch_size)
        state, command = self._pool._cursor(db, command, batch_size, "find", self._state.fields())
        cursor = AsyncCursor(self._pool, state, shared=self._lease)
        if self._state.in_transaction:
            cursor._on_error = self._failed
            self._cursors.add(cursor)
        await cursor._start(command)
        return cursor

    async def commit_transaction(self) -> None:
        """Commit (again, after a commit: the same transaction, on the same connection). A
        transaction that sent nothing commits without a command."""
        command = self._state.commit()
        self._end_cursors()
        if command is not None:
            await self._run("admin", command)

    async def abort_transaction(self) -> None:
        """Abort. Its errors are not raised (the Transactions spec: the server aborts an
        abandoned transaction anyway), and the pin is given back whatever the outcome."""
        command = self._state.abort()
        self._end_cursors()
        try:
            if command is not None:
                with contextlib.suppress(MongoError):
                    await self._run("admin", command)
        finally:
            self._unpin()

    async def end(self) -> None:
        """End the session: abort a transaction in progress, give the pin back, and its
        server session back to the pool for reuse (:meth:`AsyncMongoPool.end_sessions` tells
        the server, before the pool closes)."""
        if self._state.ended:
            return
        try:
            if self._state.in_transaction:
                await self.abort_transaction()
            self._unpin()
        finally:
            self._state.ended = True
            self._pool.sessions.give_back(self._state.server_session)

    async def __aenter__(self) -> AsyncSession:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.end()


class AsyncTransaction:
    """One transaction in a session of its own: committed when its block ends, aborted if it
    raises (:meth:`AsyncMongoPool.transaction`)."""

    def __init__(self, pool: AsyncMongoPool, db: str) -> None:
        self._db = db
        self.session = AsyncSession(pool)

    async def __aenter__(self) -> AsyncTransaction:
        await self.session.start_transaction()
        return self

    async def command(
        self, command: Mapping[str, Any], *, sequences: Sequences = None
    ) -> dict[str, Any]:
        return await self.session.command(self._db, command, sequences=sequences)

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            if error is None:
                await self.session.commit_transaction()
            else:
                with contextlib.suppress(MongoError):
                    await self.session.abort_transaction()
        finally:
            await self.session.end()
