"""The rules both MongoDB pools follow (:class:`~.pool_async.AsyncMongoPool` over an
:class:`~poolkit.AsyncPool`, :class:`~.pool_sync.MongoPool` over a :class:`~poolkit.Pool`),
without I/O: checkout purposes and their counts, the judgement of errors, the load-balanced
timeout error, server sessions, and the state of a cursor and of a session.

Rules of this module
--------------------
* A checkout has a purpose: ``"cursor"``, ``"transaction"`` or ``"other"``. In load-balanced
  mode a cursor keeps its connection from ``find`` until its id is 0 or it is closed, and a
  transaction from its first command to its commit or abort: one checkout (one
  checkout-started, one checked-out, one checked-in event) for the whole pinned life.
* Errors are judged once, by :func:`~.errors.clear_scope`: after the handshake a network error,
  or a state change error that requires it, clears the pool (load-balanced: the connection's
  service only, without pausing it or failing its waiters); a broken connection is discarded;
  an error on a connection older than the last clear (of its service) is stale and clears
  nothing.
* A wait-queue timeout in load-balanced mode says how the pool's connections are used (the
  spec's message), from the counts kept here per purpose.
* Nothing here does I/O or waits: the front ends run the commands these objects build, and
  feed the replies back. Counts and server sessions change under a lock (threads share a
  ``MongoPool``); nothing is called while it is held.
"""

from __future__ import annotations

import collections
import dataclasses
import threading
import time
import uuid
from collections.abc import Mapping
from typing import Any, Generic, Literal, TypeVar

import bson  # (pymongo's: the extra; .wire names it when missing)

from .._base import PoolBase
from .._frontend import Lease
from ..errors import WaitQueueTimeoutError
from ..stats import PoolStats
from .connection import AsyncMongoConnection, MongoConnection
from .errors import MongoError, NetworkError, clear_scope

__all__ = ["LoadBalancedTimeoutError", "MongoPoolStats", "Purpose"]

Purpose = Literal["cursor", "transaction", "other"]
PURPOSES: tuple[Purpose, ...] = ("cursor", "transaction", "other")

C = TypeVar("C", AsyncMongoConnection, MongoConnection)


@dataclasses.dataclass(frozen=True, slots=True)
class MongoPoolStats:
    """``stats()`` of a MongoDB pool: the pool's own (``pool``), and its connections out now
    by purpose: ``cursors`` and ``transactions`` (pinned in load-balanced mode), ``other``."""

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


class ServerSessions:
    """Server sessions (``lsid``s) for reuse, as the Driver Sessions spec has it: the most
    recently used first; one idle for longer than the server's session timeout less a minute
    is dropped (the server may have forgotten it)."""

    def __init__(self, timeout_minutes: float = 30.0) -> None:
        self.timeout_minutes = timeout_minutes
        self._idle: list[tuple[dict[str, Any], float]] = []
        self._lock = threading.Lock()

    def take(self) -> dict[str, Any]:
        now = time.monotonic()
        with self._lock:
            while self._idle:
                lsid, used = self._idle.pop()
                if now - used < (self.timeout_minutes - 1) * 60:
                    return lsid
        return {"id": bson.Binary(uuid.uuid4().bytes, 4)}

    def give_back(self, lsid: dict[str, Any]) -> None:
        with self._lock:
            self._idle.append((lsid, time.monotonic()))

    def drain(self) -> list[dict[str, Any]]:
        with self._lock:
            idle, self._idle = self._idle, []
        return [lsid for lsid, _ in idle]


def check_purpose(purpose: object) -> None:
    if purpose not in PURPOSES:
        raise ValueError(f"purpose must be one of {PURPOSES}, not {purpose!r}")


def check_batch_size(batch_size: object) -> None:
    if type(batch_size) is not int or batch_size < 0:
        raise ValueError(f"batch_size must be an int >= 0, not {batch_size!r}")


class PinningRules(Generic[C]):
    """What both MongoDB pools share: the pool, whether to pin, the counts by purpose, the
    server sessions, and the judgement of errors (module rules)."""

    #: the pool's front end (:class:`~poolkit.AsyncPool` or :class:`~poolkit.Pool`)
    _front: type[PoolBase[Any]]

    def __init__(self, pool: PoolBase[C], *, pin: bool | None = None) -> None:
        if not isinstance(pool, self._front):
            raise TypeError(
                f"{type(self).__name__}(pool): pool must be a poolkit.{self._front.__name__}, "
                f"not {type(pool).__name__} (AsyncMongoPool goes with an AsyncPool, MongoPool "
                "with a Pool)"
            )
        if pin is not None and type(pin) is not bool:
            raise TypeError(f"{type(self).__name__}(pin=...): a bool or None, not {pin!r}")
        self.pool: PoolBase[C] = pool
        self.load_balanced = pool.options.load_balanced
        #: whether cursors and transactions keep their connection (default: the pool's
        #: ``load_balanced``; False only to show what pinning prevents)
        self.pin = self.load_balanced if pin is None else pin
        self.sessions = ServerSessions()
        self._in_use: collections.Counter[str] = collections.Counter()
        self._lock = threading.Lock()

    def in_use(self) -> dict[str, int]:
        """Connections checked out now, by purpose."""
        with self._lock:
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

    def _checked_out(self, purpose: Purpose) -> None:
        with self._lock:
            self._in_use[purpose] += 1

    def _give_back(self, purpose: Purpose, lease: Lease[C], error: BaseException | None) -> None:
        """The end of a checkout: ``error`` (raised while it was out) judged, the connection
        given back, or discarded if it is closed or the error was not an ``Exception``
        (a cancellation)."""
        try:
            conn = lease.connection
            if error is not None:
                self._judge(lease, error)
            if conn.closed or (error is not None and not isinstance(error, Exception)):
                lease.discard(error)
            else:
                lease.release()
        finally:
            with self._lock:
                self._in_use[purpose] -= 1

    def _judge(self, lease: Lease[C], error: BaseException) -> None:
        if getattr(error, "_poolkit_judged", False):
            return  # (a pinned cursor's error, judged where it happened, reaches here again)
        try:
            error._poolkit_judged = True  # type: ignore[attr-defined]
        except AttributeError:
            pass
        conn = lease.connection
        if self._stale(lease):
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

    def _stale(self, lease: Lease[C]) -> bool:
        if self.load_balanced:
            current = self.pool.service_generation(lease.service_id)
            return current is not None and lease.generation < current
        return lease.generation < self.pool.generation

    def _in_session(self, command: Mapping[str, Any]) -> tuple[Mapping[str, Any], Any]:
        """``command`` in an implicit session (a server session taken from the pool, to give
        back after) unless it names one or takes none; and that session (or None)."""
        name = next(iter(command), "").lower()
        if "lsid" in command or name in _SESSIONLESS:
            return command, None
        lsid = self.sessions.take()
        return {**command, "lsid": lsid}, lsid

    def _end_sessions_commands(self) -> list[dict[str, Any]]:
        idle = self.sessions.drain()
        return [
            {"endSessions": idle[start : start + 10_000]} for start in range(0, len(idle), 10_000)
        ]

    def _cursor(
        self, db: str, command: Mapping[str, Any], batch_size: int
    ) -> tuple[CursorState, dict[str, Any]]:
        """A cursor opened by ``command`` (``find``, ``aggregate``...) in an implicit session
        of its own, and the command to send."""
        check_batch_size(batch_size)
        name = next(iter(command), "")
        collection = command[name] if isinstance(command.get(name), str) else ""
        lsid = self.sessions.take()
        state = CursorState(db, collection, batch_size, fields={"lsid": lsid}, lsid=lsid)
        if name != "find":
            command = {**command, "cursor": {"batchSize": batch_size}}
        return state, {**command, "lsid": lsid}


def find_command(
    collection: str, filter: Mapping[str, Any] | None, batch_size: int
) -> dict[str, Any]:
    return {"find": collection, "filter": dict(filter or {}), "batchSize": batch_size}


class CursorState:
    """A cursor's state: its id, the documents fetched and not yet taken, the commands that go
    on with it (``getMore``, ``killCursors``) and what ends it."""

    def __init__(
        self,
        db: str,
        collection: str,
        batch_size: int,
        *,
        fields: Mapping[str, Any] | None = None,
        lsid: dict[str, Any] | None = None,
    ) -> None:
        self.db = db
        self.collection = collection
        self.batch_size = batch_size
        self.id = 0
        self.batch: collections.deque[dict[str, Any]] = collections.deque()
        self.fields = dict(fields or {})  # (its session's lsid; a transaction's fields)
        #: an implicit server session the cursor owns: given back when it ends
        self.lsid = lsid
        #: the network error that broke its pinned connection: it stays pinned until closed,
        #: and kills nothing
        self.failed: BaseException | None = None

    def take(self, reply: dict[str, Any], field: str) -> None:
        cursor = reply["cursor"]
        namespace = cursor.get("ns")
        if isinstance(namespace, str) and "." in namespace:  # (getMore names the collection:
            self.collection = namespace.partition(".")[2]  # listCollections' is $cmd....)
        self.batch.extend(cursor.get(field, ()))
        self.id = int(cursor.get("id", 0))

    def failed_with(self, error: BaseException) -> None:
        if isinstance(error, NetworkError):
            self.failed = error

    def next_command(self) -> dict[str, Any] | None:
        """What to send for more documents: ``getMore``, or None when the cursor is exhausted
        (or closed; the failure that broke it is raised instead)."""
        if self.id == 0:
            return None
        if self.failed is not None:
            raise self.failed
        return {
            "getMore": bson.int64.Int64(self.id),
            "collection": self.collection,
            "batchSize": self.batch_size,
            **self.fields,
        }

    def kill_command(self) -> dict[str, Any] | None:
        """On close: ``killCursors``, unless the cursor is exhausted or its connection failed;
        the cursor is done from here on."""
        cursor_id, self.id = self.id, 0
        self.batch.clear()
        if not cursor_id or self.failed is not None:
            return None
        return {
            "killCursors": self.collection,
            "cursors": [bson.int64.Int64(cursor_id)],
            **self.fields,
        }

    def session_done(self) -> dict[str, Any] | None:
        """The implicit server session to give back once the cursor is exhausted or closed
        (None: it has none, or gave it back)."""
        if self.id != 0:
            return None
        lsid, self.lsid = self.lsid, None
        return lsid


class SessionState:
    """A session's state: its server session, its transaction number and whether one is in
    progress (and has sent its first command), and the fields each command carries."""

    def __init__(self, lsid: dict[str, Any]) -> None:
        self.lsid = lsid
        self.txn_number = 0
        self.in_transaction = False
        self.started = False  # (the transaction's first command was sent)
        self.ended = False

    def check_open(self) -> None:
        if self.ended:
            raise RuntimeError("this session has ended")

    def start_transaction(self) -> None:
        self.check_open()
        if self.in_transaction:
            raise RuntimeError("a transaction is already in progress on this session")
        self.txn_number += 1
        self.in_transaction = True
        self.started = False

    def fields(self) -> dict[str, Any]:
        """The fields of the session's next command (``startTransaction`` on the first of a
        transaction)."""
        fields: dict[str, Any] = {"lsid": self.lsid}
        if self.in_transaction:
            fields["txnNumber"] = bson.int64.Int64(self.txn_number)
            fields["autocommit"] = False
            if not self.started:
                fields["startTransaction"] = True
                self.started = True
        return fields

    def end_command(self, name: str) -> dict[str, Any]:
        """``commitTransaction`` or ``abortTransaction`` of the transaction now."""
        return {
            name: 1,
            "lsid": self.lsid,
            "txnNumber": bson.int64.Int64(self.txn_number),
            "autocommit": False,
        }

    def commit(self) -> dict[str, Any] | None:
        """The commit to send (again, after a commit: the same transaction); None for a
        transaction that sent nothing."""
        self.check_open()
        self.in_transaction = False
        return self.end_command("commitTransaction") if self.started else None

    def abort(self) -> dict[str, Any] | None:
        self.check_open()
        started, self.started = self.started, False
        self.in_transaction = False
        return self.end_command("abortTransaction") if started else None


def releases_pin(error: MongoError) -> bool:
    """Whether an error in a pinned transaction gives the pin back at once: a transient one
    (``TransientTransactionError``, a network error)."""
    return isinstance(error, NetworkError) or error.has_error_label("TransientTransactionError")
