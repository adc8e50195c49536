# Generated from src/poolkit/mongodb/pool_async.py by tools/async_to_sync.py: do not edit.
"""Operations over a pool of blocking MongoDB connections, for threads: commands,
cursors, sessions and transactions, with the Load Balancer spec's pinning and error handling
(:class:`MongoPool`; thread-safe, as :class:`~poolkit.Pool`). The rules are :mod:`.pinning`'s;
this module runs their commands.

Generated from :mod:`.pool_async` by tools/async_to_sync.py: edit that one, then run the tool.
Its rules are that module's.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from types import TracebackType
from typing import Any

from .. import Lease
from ..driver import check_timeout
from ..errors import WaitQueueTimeoutError
from ..threaded import Pool
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
from .connection import MongoConnection
from .errors import MongoError
from .pinning import PinningRules
from .states import CursorState, SessionState, find_command, releases_pin

__all__ = ["Cursor", "MongoPool", "Session", "Transaction"]

Sequences = Mapping[str, Sequence[Mapping[str, Any]]] | None


class MongoPool(PinningRules[MongoConnection]):
    """Commands, cursors and transactions over an :class:`~poolkit.Pool` of
    :class:`~.connection.MongoConnection` (made by :func:`~.connection.connect`).

    ``pin``: whether cursors and transactions keep their connection (default: the pool's
    ``load_balanced``; False only to show what pinning prevents). ``read_preference``:
    ``{"mode": "secondaryPreferred", ...}``, sent as ``$readPreference`` with the cursors'
    commands outside transactions (default: primary, nothing sent)."""

    pool: Pool[MongoConnection]
    _front = Pool

    def __init__(
        self,
        pool: Pool[MongoConnection],
        *,
        pin: bool | None = None,
        read_preference: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(pool, pin=pin, read_preference=read_preference)

    def _checkout(self, purpose: Purpose, timeout: float | None = None) -> Lease[MongoConnection]:
        check_purpose(purpose)
        if timeout is not None:
            timeout = check_timeout(timeout, "connection(timeout=...)")
        try:
            lease = self.pool.checkout() if timeout is None else self.pool.checkout(timeout)
        except WaitQueueTimeoutError as exc:
            raise self._timeout(exc) from None
        except MongoError as exc:  # the connect of this checkout failed
            self._connect_failed(exc)
            raise
        self._checked_out(purpose)
        return lease

    @contextlib.contextmanager
    def connection(
        self, purpose: Purpose = "other", timeout: float | None = None
    ) -> Iterator[MongoConnection]:
        """A connection for ``purpose``, given back (or discarded, if broken) at the end; an
        error in the block is judged by the SDAM rules (:mod:`.pinning`)."""
        lease = self._checkout(purpose, timeout)
        try:
            yield lease.connection
        except BaseException as exc:
            self._give_back(purpose, lease, exc)
            raise
        self._give_back(purpose, lease, None)

    def command(
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
            with self.connection("other", timeout) as conn:
                left = self._left(deadline)
                return conn.command(db, command, sequences=sequences, timeout=left)
        finally:
            if implicit is not None:
                self.sessions.give_back(implicit)

    def end_sessions(self) -> None:
        """Tell the server the idle server sessions are over (``endSessions``); before the
        pool is closed."""
        for command in self._end_sessions_commands():
            with contextlib.suppress(MongoError):
                self.command("admin", command)

    def insert(
        self, db: str, collection: str, documents: Sequence[Mapping[str, Any]]
    ) -> dict[str, Any]:
        check_db(db, "insert")
        check_collection(collection, "insert")
        check_documents(documents, "insert")
        return self.command(
            db, {"insert": collection, "ordered": True}, sequences={"documents": documents}
        )

    def find(
        self,
        db: str,
        collection: str,
        filter: Mapping[str, Any] | None = None,
        *,
        batch_size: int = 101,
    ) -> Cursor:
        """A cursor over ``collection`` (``find``'s first batch fetched), in an implicit session
        it keeps until it is exhausted or closed."""
        check_cursor(db, collection, filter, batch_size, "find")
        return self._open(db, find_command(collection, filter, batch_size), batch_size, "find")

    def cursor(self, db: str, command: Mapping[str, Any], batch_size: int = 101) -> Cursor:
        """A cursor from any command that opens one (``aggregate``, ``listCollections``,
        ``listIndexes``...), pinned as :meth:`find`'s."""
        return self._open(db, command, batch_size, "cursor")

    def _open(self, db: str, command: Mapping[str, Any], batch_size: int, call: str) -> Cursor:
        state, command = self._cursor(db, command, batch_size, call)
        cursor = Cursor(self, state)
        cursor._start(command)
        return cursor

    def aggregate(
        self,
        db: str,
        collection: str,
        pipeline: Sequence[Mapping[str, Any]],
        *,
        batch_size: int = 101,
    ) -> Cursor:
        check_collection(collection, "aggregate")
        check_pipeline(pipeline, "aggregate")
        command = {"aggregate": collection, "pipeline": list(pipeline)}
        return self._open(db, command, batch_size, "aggregate")

    def list_collections(self, db: str, *, batch_size: int = 101) -> Cursor:
        return self._open(db, {"listCollections": 1}, batch_size, "list_collections")

    def list_indexes(self, db: str, collection: str, *, batch_size: int = 101) -> Cursor:
        check_collection(collection, "list_indexes")
        return self._open(db, {"listIndexes": collection}, batch_size, "list_indexes")

    def session(self) -> Session:
        """A session: transactions one after another, pinned as the Load Balancer spec says."""
        return Session(self)

    def transaction(self, db: str) -> Transaction:
        """``with pool.transaction(db) as txn:`` commands through ``txn.command(...)``,
        committed at the end (aborted if the block raises)."""
        check_db(db, "transaction")
        return Transaction(self, db)


class Cursor:
    """A cursor: ``for doc in cursor``. Pinned (load-balanced mode) until exhausted or
    :meth:`close`d (not at all if its first command returned everything). After an error it
    stays pinned until closed: :meth:`close` sends ``killCursors`` on its connection, unless
    that connection failed (a network error), then gives the connection back (a broken one is
    closed). A cursor opened in a transaction shares its connection and ends with it: asking it
    for more raises :class:`~.errors.InvalidOperationError`."""

    def __init__(
        self,
        pool: MongoPool,
        state: CursorState,
        shared: Lease[MongoConnection] | None = None,
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

    def _start(self, command: dict[str, Any]) -> None:
        try:
            if self._pool.pin and self._lease is None:
                self._lease = self._pool._checkout("cursor")
                self._own = True
            self._state.take(self._run(command), "firstBatch")
        except BaseException as exc:  # (no cursor: its connection and session go back)
            self._state.kill_command()
            self._unpin(exc)
            raise
        if self._state.id == 0:
            self._unpin(None)  # (all in the first batch: nothing to pin for)

    def _run(self, command: dict[str, Any]) -> dict[str, Any]:
        lease = self._lease
        try:
            if lease is None:  # (not pinned: each command on a connection of its own)
                return self._pool.command(self._state.db, command)
            return lease.connection.command(self._state.db, command)
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

    def __iter__(self) -> Cursor:
        return self

    def __next__(self) -> dict[str, Any]:
        state = self._state
        while not state.batch:
            command = state.next_command()
            if command is None:
                self._unpin(None)
                raise StopIteration
            state.take(self._run(command), "nextBatch")
        return state.batch.popleft()

    def to_list(self) -> list[dict[str, Any]]:
        return [doc for doc in self]

    def close(self) -> None:
        """Kill the cursor on its own connection (unless it is exhausted or that connection
        failed), then give the connection back."""
        try:
            command = self._state.kill_command()
            if command is not None:
                with contextlib.suppress(MongoError):  # (not judged: the cursor is over)
                    if self._lease is not None:
                        self._lease.connection.command(self._state.db, command)
                    elif not self._pool.pin:
                        self._pool.command(self._state.db, command)
        finally:
            self._unpin(self._state.failed)

    def __enter__(self) -> Cursor:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class Session:
    """``session = pool.session()``; ``session.start_transaction()``, commands through
    ``session.command(...)`` / ``session.find(...)``, ``session.commit_transaction()`` (or
    ``abort_transaction()``), ..., ``session.end()`` (or ``with``).

    A transaction's first command pins a connection (load-balanced mode), and the session keeps
    it past the commit (a commit may be retried, on that connection) until its next transaction
    starts, an operation outside a transaction runs, the transaction is aborted, or the session
    ends. A transient error (``TransientTransactionError``, a network error) gives the pin back
    at once; any other keeps it. A cursor opened in a transaction shares the pinned connection.
    """

    def __init__(self, pool: MongoPool) -> None:
        self._pool = pool
        #: (a server session of the pool's, reused)
        self._state = SessionState(pool.sessions.take(), pool.pool.address)
        self._lease: Lease[MongoConnection] | None = None
        #: the cursors sharing the pinned connection: orphaned when it is given back
        self._cursors: weakref.WeakSet[Cursor] = weakref.WeakSet()

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
        if getattr(self, "_lease", None) is not None:  # (as Cursor's)
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

    def _pin(self) -> None:
        if self._lease is None and self._pool.pin:
            self._lease = self._pool._checkout("transaction")

    def start_transaction(self) -> None:
        """A new transaction: a connection the last one left pinned is given back."""
        self._state.start_transaction()
        self._unpin()

    def _run(
        self, db: str, command: Mapping[str, Any], sequences: Sequences = None
    ) -> dict[str, Any]:
        lease = self._lease
        try:
            if lease is None:
                reply = self._pool.command(db, command, sequences=sequences)
            else:
                reply = lease.connection.command(db, command, sequences=sequences)
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

    def _enter(self) -> None:
        """Before an operation: pinned in a transaction; outside, any pin given back."""
        self._state.check_open()
        if self._state.in_transaction:
            self._pin()
        else:
            self._unpin()

    def command(
        self, db: str, command: Mapping[str, Any], *, sequences: Sequences = None
    ) -> dict[str, Any]:
        """``command`` in this session: in its transaction (pinned) if one is in progress;
        otherwise on a connection of its own."""
        check_db(db, "command")
        check_command(command, "command")
        self._enter()
        return self._run(db, {**command, **self._state.fields()}, sequences)

    def find(
        self,
        db: str,
        collection: str,
        filter: Mapping[str, Any] | None = None,
        *,
        batch_size: int = 101,
    ) -> Cursor:
        """A cursor in this session; in a transaction it shares the pinned connection (and
        ends with the transaction: see :class:`Cursor`)."""
        check_cursor(db, collection, filter, batch_size, "find")
        self._enter()
        command = find_command(collection, filter, batch_size)
        state, command = self._pool._cursor(db, command, batch_size, "find", self._state.fields())
        cursor = Cursor(self._pool, state, shared=self._lease)
        if self._state.in_transaction:
            cursor._on_error = self._failed
            self._cursors.add(cursor)
        cursor._start(command)
        return cursor

    def commit_transaction(self) -> None:
        """Commit (again, after a commit: the same transaction, on the same connection). A
        transaction that sent nothing commits without a command."""
        command = self._state.commit()
        self._end_cursors()
        if command is not None:
            self._run("admin", command)

    def abort_transaction(self) -> None:
        """Abort. Its errors are not raised (the Transactions spec: the server aborts an
        abandoned transaction anyway), and the pin is given back whatever the outcome."""
        command = self._state.abort()
        self._end_cursors()
        try:
            if command is not None:
                with contextlib.suppress(MongoError):
                    self._run("admin", command)
        finally:
            self._unpin()

    def end(self) -> None:
        """End the session: abort a transaction in progress, give the pin back, and its
        server session back to the pool for reuse (:meth:`MongoPool.end_sessions` tells
        the server, before the pool closes)."""
        if self._state.ended:
            return
        try:
            if self._state.in_transaction:
                self.abort_transaction()
            self._unpin()
        finally:
            self._state.ended = True
            self._pool.sessions.give_back(self._state.server_session)

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.end()


class Transaction:
    """One transaction in a session of its own: committed when its block ends, aborted if it
    raises (:meth:`MongoPool.transaction`)."""

    def __init__(self, pool: MongoPool, db: str) -> None:
        self._db = db
        self.session = Session(pool)

    def __enter__(self) -> Transaction:
        self.session.start_transaction()
        return self

    def command(self, command: Mapping[str, Any], *, sequences: Sequences = None) -> dict[str, Any]:
        return self.session.command(self._db, command, sequences=sequences)

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            if error is None:
                self.session.commit_transaction()
            else:
                with contextlib.suppress(MongoError):
                    self.session.abort_transaction()
        finally:
            self.session.end()
