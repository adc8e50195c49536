"""Sessions: a logical session (``lsid``) and its transactions, one after another, with the
Load Balancer spec's pinning (:class:`AsyncSession`, from :meth:`MongoPool.session`).

Rules of this module
--------------------
* A transaction's first command pins a connection (load-balanced mode), and the session keeps
  it past the commit (a commit may be retried, on that connection) until the session's next
  transaction starts, an operation outside a transaction runs, the transaction is aborted, or
  the session ends: then it is given back. One checkout, one check-in for the pinned span.
* A transient error (``TransientTransactionError``, a network error) gives the pin back at
  once; any other keeps it (spec-tests/load-balancers/transactions.json).
* A cursor opened in a transaction shares the pinned connection: no checkout of its own.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from typing import Any

import bson  # (pymongo's: the extra; .wire names it when missing)

from .connection import AsyncMongoConnection
from .errors import MongoError, NetworkError
from .pinning import AsyncCursor, MongoPool

__all__ = ["AsyncSession"]

Sequences = Mapping[str, Sequence[Mapping[str, Any]]] | None


class AsyncSession:
    """``session = pool.session()``; ``await session.start_transaction()``, commands through
    ``session.command(...)`` / ``session.find(...)``, ``await session.commit_transaction()`` (or
    ``abort_transaction()``), ..., ``await session.end()`` (or ``async with``)."""

    def __init__(self, pool: MongoPool) -> None:
        self._pool = pool
        self.lsid = pool.sessions.take()  # (a server session of the pool's, reused)
        self.txn_number = 0
        self.in_transaction = False
        self._started = False  # (the transaction's first command was sent)
        self._pinned: contextlib.AbstractAsyncContextManager[AsyncMongoConnection] | None = None
        self._conn: AsyncMongoConnection | None = None
        self._ended = False

    @property
    def pinned(self) -> bool:
        return self._conn is not None

    async def _unpin(self, error: BaseException | None = None) -> None:
        pinned, self._pinned, self._conn = self._pinned, None, None
        if pinned is not None:
            if error is None:
                await pinned.__aexit__(None, None, None)
            else:
                await pinned.__aexit__(type(error), error, error.__traceback__)

    async def _pin(self) -> None:
        if self._conn is None and self._pool.pin:
            self._pinned = self._pool.connection("transaction")
            self._conn = await self._pinned.__aenter__()

    def _check_open(self) -> None:
        if self._ended:
            raise RuntimeError("this session has ended")

    async def start_transaction(self) -> None:
        """A new transaction: a connection the last one left pinned is given back."""
        self._check_open()
        if self.in_transaction:
            raise RuntimeError("a transaction is already in progress on this session")
        await self._unpin()
        self.txn_number += 1
        self.in_transaction = True
        self._started = False

    def _fields(self) -> dict[str, Any]:
        fields: dict[str, Any] = {"lsid": self.lsid}
        if self.in_transaction:
            fields["txnNumber"] = bson.int64.Int64(self.txn_number)
            fields["autocommit"] = False
            if not self._started:
                fields["startTransaction"] = True
                self._started = True
        return fields

    async def _run(
        self, db: str, command: Mapping[str, Any], sequences: Sequences = None
    ) -> dict[str, Any]:
        if self._conn is None:
            return await self._pool.command(db, command, sequences=sequences)
        try:
            return await self._conn.command(db, command, sequences=sequences)
        except MongoError as exc:
            self._pool._judge(self._conn, exc)
            if isinstance(exc, NetworkError) or exc.has_error_label("TransientTransactionError"):
                await self._unpin(exc)
            raise

    async def command(
        self, db: str, command: Mapping[str, Any], *, sequences: Sequences = None
    ) -> dict[str, Any]:
        """``command`` in this session: in its transaction (pinned) if one is in progress;
        otherwise on a connection of its own (a pin the last transaction left is given back)."""
        self._check_open()
        if self.in_transaction:
            await self._pin()
        else:
            await self._unpin()
        return await self._run(db, {**command, **self._fields()}, sequences)

    async def find(
        self,
        db: str,
        collection: str,
        filter: Mapping[str, Any] | None = None,
        *,
        batch_size: int = 101,
    ) -> AsyncCursor:
        """A cursor in this session; in a transaction it shares the pinned connection."""
        self._check_open()
        if not self.in_transaction:
            await self._unpin()
            return await self._pool.find(db, collection, filter, batch_size=batch_size)
        await self._pin()
        fields = self._fields()
        cursor = AsyncCursor(
            self._pool,
            db,
            collection,
            batch_size,
            shared=self._conn,
            fields={k: v for k, v in fields.items() if k != "startTransaction"},
        )
        command = {"find": collection, "filter": dict(filter or {}), "batchSize": batch_size}
        await cursor._start({**command, **fields})
        return cursor

    async def _end_transaction(self, name: str) -> dict[str, Any]:
        fields = {
            "lsid": self.lsid,
            "txnNumber": bson.int64.Int64(self.txn_number),
            "autocommit": False,
        }
        return await self._run("admin", {name: 1, **fields})

    async def commit_transaction(self) -> None:
        """Commit (again, after a commit: the same transaction, on the same connection). A
        transaction that sent nothing commits without a command."""
        self._check_open()
        if not self._started:
            self.in_transaction = False
            return
        self.in_transaction = False
        await self._end_transaction("commitTransaction")

    async def abort_transaction(self) -> None:
        """Abort; the pin is given back whatever the outcome."""
        self._check_open()
        started, self._started = self._started, False
        self.in_transaction = False
        try:
            if started:
                await self._end_transaction("abortTransaction")
        finally:
            await self._unpin()

    async def end(self) -> None:
        """End the session: abort a transaction in progress, give the pin back, and its
        server session back to the pool for reuse (:meth:`MongoPool.end_sessions` tells the
        server, before the pool closes)."""
        if self._ended:
            return
        try:
            if self.in_transaction:
                with contextlib.suppress(MongoError):
                    await self.abort_transaction()
            await self._unpin()
        finally:
            self._ended = True
            self._pool.sessions.give_back(self.lsid)

    async def __aenter__(self) -> AsyncSession:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.end()
