"""Operations over a pool of MongoDB connections, as a driver runs them: commands, cursors and
transactions, with the Load Balancer spec's pinning and error handling (:class:`MongoPool`).

Rules of this module
--------------------
* A checkout has a purpose: ``"cursor"``, ``"transaction"`` or ``"other"``. In load-balanced
  mode a cursor keeps its connection from ``find`` until its id is 0 or it is closed, and a
  transaction from its first command to its commit or abort: one checkout (one
  checkout-started, one checked-out, one checked-in event) for the whole pinned life.
* Errors are judged once, by :func:`~.errors.clear_scope`: after the handshake a network error,
  or a state change error that requires it, clears the pool (load-balanced: the connection's
  service only, without pausing it or failing its waiters); a broken connection is discarded.
* A wait-queue timeout in load-balanced mode says how the pool's connections are used (the
  spec's message), from the counts this module keeps per purpose.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import time
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

import bson  # (pymongo's: the extra; .wire names it when missing)

from ..asyncio import AsyncPool
from ..errors import WaitQueueTimeoutError
from ..stats import PoolStats
from .connection import AsyncMongoConnection
from .errors import MongoError, NetworkError, clear_scope

if TYPE_CHECKING:
    from .session import AsyncSession

__all__ = [
    "AsyncCursor",
    "AsyncTransaction",
    "LoadBalancedTimeoutError",
    "MongoPool",
    "MongoPoolStats",
    "Purpose",
]

Purpose = Literal["cursor", "transaction", "other"]
PURPOSES: tuple[Purpose, ...] = ("cursor", "transaction", "other")


@dataclasses.dataclass(frozen=True, slots=True)
class MongoPoolStats:
    """:meth:`MongoPool.stats`: the pool's own (``pool``), and its connections out now by
    purpose: ``cursors`` and ``transactions`` (pinned in load-balanced mode), ``other``."""

    pool: PoolStats
    cursors: int
    transactions: int
    other: int


class LoadBalancedTimeoutError(WaitQueueTimeoutError):
    """A wait-queue timeout in load-balanced mode, with the Load Balancer spec's message and
    ``in_use`` (connections out, by purpose)."""

    def __init__(
        self,
        *,
        address: str,
        waited: float,
        stats: PoolStats | None,
        max_size: int,
        in_use: Mapping[str, int],
    ) -> None:
        super().__init__(address=address, waited=waited, stats=stats)
        self.in_use = dict(in_use)
        self.max_size = max_size
        self.args = (
            "Timeout waiting for connection from the connection pool. "
            f"maxPoolSize: {max_size}, "
            f"connections in use by cursors: {in_use.get('cursor', 0)}, "
            f"connections in use by transactions: {in_use.get('transaction', 0)}, "
            f"connections in use by other operations: {in_use.get('other', 0)}",
        )


#: commands that never carry a session (the handshake's, authentication's, endSessions)
_SESSIONLESS = frozenset({"hello", "ismaster", "saslstart", "saslcontinue", "endsessions"})


class _ServerSessions:
    """Server sessions (``lsid``s) for reuse, as the Driver Sessions spec has it: the most
    recently used first; one idle for longer than the server's session timeout less a minute
    is dropped (the server may have forgotten it)."""

    def __init__(self, timeout_minutes: float = 30.0) -> None:
        self.timeout_minutes = timeout_minutes
        self._idle: list[tuple[dict[str, Any], float]] = []

    def take(self) -> dict[str, Any]:
        now = time.monotonic()
        while self._idle:
            lsid, used = self._idle.pop()
            if now - used < (self.timeout_minutes - 1) * 60:
                return lsid
        return {"id": bson.Binary(uuid.uuid4().bytes, 4)}

    def give_back(self, lsid: dict[str, Any]) -> None:
        self._idle.append((lsid, time.monotonic()))

    def drain(self) -> list[dict[str, Any]]:
        idle, self._idle = self._idle, []
        return [lsid for lsid, _ in idle]


class MongoPool:
    """Commands, cursors and transactions over an :class:`~poolkit.AsyncPool` of
    :class:`~.connection.AsyncMongoConnection` (made by :func:`~.connection.connect`).

    ``pin``: whether cursors and transactions keep their connection (default: the pool's
    ``load_balanced``; False only to show what pinning prevents)."""

    def __init__(self, pool: AsyncPool[AsyncMongoConnection], *, pin: bool | None = None) -> None:
        self.pool = pool
        self.load_balanced = pool.options.load_balanced
        self.pin = self.load_balanced if pin is None else pin
        self._in_use: collections.Counter[str] = collections.Counter()
        #: the generation of each connection out (by id), to tell a stale error
        self._generations: dict[int, int] = {}
        self.sessions = _ServerSessions()

    def in_use(self) -> dict[str, int]:
        """Connections checked out now, by purpose."""
        return {purpose: self._in_use[purpose] for purpose in PURPOSES}

    def stats(self) -> MongoPoolStats:
        """The pool's statistics, and its connections out by purpose."""
        in_use = self.in_use()
        return MongoPoolStats(
            pool=self.pool.stats(),
            cursors=in_use["cursor"],
            transactions=in_use["transaction"],
            other=in_use["other"],
        )

    @contextlib.asynccontextmanager
    async def connection(
        self, purpose: Purpose = "other", timeout: float | None = None
    ) -> AsyncIterator[AsyncMongoConnection]:
        """A connection for ``purpose``, given back (or discarded, if broken) at the end; an
        error in the block is judged by the SDAM rules (module rules)."""
        if purpose not in PURPOSES:
            raise ValueError(f"purpose must be one of {PURPOSES}, not {purpose!r}")
        try:
            lease = await (self.pool.checkout() if timeout is None else self.pool.checkout(timeout))
        except WaitQueueTimeoutError as exc:
            raise self._timeout(exc) from None
        except MongoError as exc:  # the connect of this checkout failed
            self._connect_failed(exc)
            raise
        self._in_use[purpose] += 1
        conn = lease.connection
        self._generations[id(conn)] = lease.generation
        try:
            yield conn
        except BaseException as exc:
            self._judge(conn, exc)
            if conn.closed or not isinstance(exc, Exception):
                lease.discard(exc)
            else:
                lease.release()
            raise
        else:
            if conn.closed:
                lease.discard()
            else:
                lease.release()
        finally:
            self._in_use[purpose] -= 1
            self._generations.pop(id(conn), None)

    def _timeout(self, exc: WaitQueueTimeoutError) -> WaitQueueTimeoutError:
        if not self.load_balanced:
            return exc
        return LoadBalancedTimeoutError(
            address=exc.address,
            waited=exc.waited,
            stats=exc.stats,
            max_size=self.pool.options.max_size,
            in_use=self.in_use(),
        )

    def _judge(self, conn: AsyncMongoConnection, error: BaseException) -> None:
        if getattr(error, "_poolkit_judged", False):
            return  # (a pinned cursor's error, judged where it happened, reaches here again)
        with contextlib.suppress(AttributeError):
            error._poolkit_judged = True  # type: ignore[attr-defined]
        if self._stale(conn):
            return  # (the pool was cleared since this connection was made: SDAM ignores it)
        if clear_scope(error, handshake_done=True, max_wire_version=conn.max_wire_version):
            if self.load_balanced:
                self.pool.clear(service_id=conn.service_id, cause=error)
            else:
                self.pool.clear(cause=error)

    def _connect_failed(self, error: MongoError) -> None:
        """A connect that failed after its ``hello`` (authentication) goes through the SDAM
        rules with the service the ``hello`` named; one before it clears nothing."""
        if error.after_hello and clear_scope(error, handshake_done=True):
            if self.load_balanced:
                self.pool.clear(service_id=error.service_id, cause=error)
            else:
                self.pool.clear(cause=error)

    def _stale(self, conn: AsyncMongoConnection) -> bool:
        generation = self._generations.get(id(conn))
        if generation is None:
            return False
        if self.load_balanced:
            current = self.pool.service_generation(conn.service_id)
            return current is not None and generation < current
        return generation < self.pool.generation

    async def command(
        self,
        db: str,
        command: Mapping[str, Any],
        *,
        sequences: Mapping[str, Sequence[Mapping[str, Any]]] | None = None,
        timeout: float | None = None,
    ) -> dict[str, Any]:
        """One command on a connection of its own (purpose ``"other"``), in an implicit
        session (a server session from the pool, given back after) unless it names one."""
        name = next(iter(command), "").lower()
        lsid = None
        if "lsid" not in command and name not in _SESSIONLESS:
            lsid = self.sessions.take()
            command = {**command, "lsid": lsid}
        try:
            async with self.connection("other", timeout) as conn:
                return await conn.command(db, command, sequences=sequences)
        finally:
            if lsid is not None:
                self.sessions.give_back(lsid)

    async def end_sessions(self) -> None:
        """Tell the server the idle server sessions are over (``endSessions``); before the
        pool is closed."""
        idle = self.sessions.drain()
        for start in range(0, len(idle), 10_000):
            with contextlib.suppress(MongoError):
                await self.command("admin", {"endSessions": idle[start : start + 10_000]})

    async def insert(
        self, db: str, collection: str, documents: Sequence[Mapping[str, Any]]
    ) -> dict[str, Any]:
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
        return await self.cursor(
            db,
            {"find": collection, "filter": dict(filter or {}), "batchSize": batch_size},
            batch_size=batch_size,
        )

    async def cursor(
        self, db: str, command: Mapping[str, Any], *, batch_size: int = 101
    ) -> AsyncCursor:
        """A cursor from any command that opens one (``aggregate``, ``listCollections``,
        ``listIndexes``...), pinned as :meth:`find`'s."""
        name = next(iter(command), "")
        collection = command[name] if isinstance(command.get(name), str) else ""
        lsid = self.sessions.take()
        cursor = AsyncCursor(self, db, collection, batch_size, fields={"lsid": lsid}, lsid=lsid)
        if name != "find":
            command = {**command, "cursor": {"batchSize": batch_size}}
        await cursor._start({**command, "lsid": lsid})
        return cursor

    async def aggregate(
        self,
        db: str,
        collection: str,
        pipeline: Sequence[Mapping[str, Any]],
        *,
        batch_size: int = 101,
    ) -> AsyncCursor:
        return await self.cursor(
            db, {"aggregate": collection, "pipeline": list(pipeline)}, batch_size=batch_size
        )

    async def list_collections(self, db: str, *, batch_size: int = 101) -> AsyncCursor:
        return await self.cursor(db, {"listCollections": 1}, batch_size=batch_size)

    async def list_indexes(self, db: str, collection: str, *, batch_size: int = 101) -> AsyncCursor:
        return await self.cursor(db, {"listIndexes": collection}, batch_size=batch_size)

    def session(self) -> AsyncSession:
        """A session: transactions one after another, pinned as the Load Balancer spec says
        (:class:`~.session.AsyncSession`)."""
        from .session import AsyncSession

        return AsyncSession(self)

    def transaction(self, db: str) -> AsyncTransaction:
        """``async with pool.transaction(db) as txn:`` commands through ``txn.command(...)``,
        committed at the end (aborted if the block raises)."""
        return AsyncTransaction(self, db)


class AsyncCursor:
    """A cursor: ``async for doc in cursor``. Pinned (see the module rules) until exhausted or
    :meth:`close`d (not at all if ``find`` returned everything). After an error it stays
    pinned until closed: :meth:`close` sends ``killCursors`` on its connection, unless that
    connection failed (a network error), then gives the connection back (a broken one is
    closed)."""

    def __init__(
        self,
        pool: MongoPool,
        db: str,
        collection: str,
        batch_size: int,
        *,
        shared: AsyncMongoConnection | None = None,
        fields: Mapping[str, Any] | None = None,
        lsid: dict[str, Any] | None = None,
    ) -> None:
        self._pool = pool
        self._db = db
        self._collection = collection
        self._batch_size = batch_size
        self.id = 0
        self._batch: collections.deque[dict[str, Any]] = collections.deque()
        self._pinned: contextlib.AbstractAsyncContextManager[AsyncMongoConnection] | None = None
        #: a connection the cursor shares (a session's, pinned by its transaction): it neither
        #: checks it out nor gives it back
        self._conn: AsyncMongoConnection | None = shared
        self._fields = dict(fields or {})  # (its session's lsid; a transaction's fields)
        self._lsid = lsid  # (an implicit session it owns: given back when it ends)
        self._failed: BaseException | None = None

    async def _start(self, command: dict[str, Any]) -> None:
        if self._pool.pin and self._conn is None:
            self._pinned = self._pool.connection("cursor")
            self._conn = await self._pinned.__aenter__()
        reply = await self._run(command)
        self._take(reply, "firstBatch")
        if self.id == 0:
            await self._unpin(None)  # (all in the first batch: nothing to pin for)

    async def _run(self, command: dict[str, Any]) -> dict[str, Any]:
        if self._conn is None:  # (not pinned: each command on a connection of its own)
            return await self._pool.command(self._db, command)
        try:
            return await self._conn.command(self._db, command)
        except MongoError as exc:
            self._pool._judge(self._conn, exc)
            if isinstance(exc, NetworkError):
                self._failed = exc  # (stays pinned until closed, and kills nothing)
            raise  # (any other error: still pinned until closed, which kills the cursor)

    def _take(self, reply: dict[str, Any], field: str) -> None:
        cursor = reply["cursor"]
        namespace = cursor.get("ns")
        if isinstance(namespace, str) and "." in namespace:  # (getMore names the collection:
            self._collection = namespace.partition(".")[2]  # listCollections' is $cmd....)
        self._batch.extend(cursor.get(field, ()))
        self.id = int(cursor.get("id", 0))

    async def _unpin(self, error: BaseException | None) -> None:
        lsid, self._lsid = self._lsid, None
        if lsid is not None and self.id == 0:
            self._pool.sessions.give_back(lsid)
        pinned, self._pinned, self._conn = self._pinned, None, None
        if pinned is not None:
            if error is None:
                await pinned.__aexit__(None, None, None)
            else:
                await pinned.__aexit__(type(error), error, error.__traceback__)

    def __aiter__(self) -> AsyncCursor:
        return self

    async def __anext__(self) -> dict[str, Any]:
        while not self._batch:
            if self.id == 0:
                await self._unpin(None)
                raise StopAsyncIteration
            if self._failed is not None:
                raise self._failed
            reply = await self._run(
                {
                    "getMore": bson.int64.Int64(self.id),
                    "collection": self._collection,
                    "batchSize": self._batch_size,
                    **self._fields,
                }
            )
            self._take(reply, "nextBatch")
        return self._batch.popleft()

    async def to_list(self) -> list[dict[str, Any]]:
        return [doc async for doc in self]

    async def close(self) -> None:
        """Kill the cursor on its own connection (unless it is exhausted or that connection
        failed), then give the connection back."""
        try:
            if self.id and self._failed is None and self._conn is not None:
                with contextlib.suppress(MongoError):
                    await self._conn.command(
                        self._db,
                        {
                            "killCursors": self._collection,
                            "cursors": [bson.int64.Int64(self.id)],
                            **self._fields,
                        },
                    )
            elif self.id and self._conn is None and not self._pool.pin:
                with contextlib.suppress(MongoError):
                    await self._pool.command(
                        self._db,
                        {"killCursors": self._collection, "cursors": [bson.int64.Int64(self.id)]},
                    )
        finally:
            self.id = 0
            self._batch.clear()
            await self._unpin(self._failed)

    async def __aenter__(self) -> AsyncCursor:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()


class AsyncTransaction:
    """One transaction in a session of its own (:class:`~.session.AsyncSession`): pinned
    (load-balanced mode) from its first command to its end, or to a transient error
    (``TransientTransactionError``, a network error), which releases the pin at once; committed
    when its block ends, aborted if it raises."""

    def __init__(self, pool: MongoPool, db: str) -> None:
        from .session import AsyncSession

        self._db = db
        self.session = AsyncSession(pool)

    async def __aenter__(self) -> AsyncTransaction:
        await self.session.start_transaction()
        return self

    async def command(
        self,
        command: Mapping[str, Any],
        *,
        sequences: Mapping[str, Sequence[Mapping[str, Any]]] | None = None,
    ) -> dict[str, Any]:
        return await self.session.command(self._db, command, sequences=sequences)

    async def __aexit__(self, kind: Any, error: BaseException | None, tb: Any) -> None:
        try:
            if error is None:
                await self.session.commit_transaction()
            else:
                with contextlib.suppress(MongoError):
                    await self.session.abort_transaction()
        finally:
            await self.session.end()
