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
from typing import Any, Generic, TypeVar

from .. import Lease
from ..asyncio import AsyncPool
from ..driver import AnyPool, check_timeout
from ..errors import WaitQueueTimeoutError
from ..stats import PoolStats
from ..threaded import Pool
from ._bson import bson
from ._checks import (
    PURPOSES,
    Purpose,
    check_batch_size,
    check_command,
    check_db,
    check_read_preference,
)
from .connection import AsyncMongoConnection, MongoConnection
from .errors import MongoError, ServiceId, clear_scope
from .states import CursorState

__all__ = [
    "LoadBalancedTimeoutError",
    "MongoPoolStats",
    "PinningRules",
    "ServerSession",
    "ServerSessions",
]


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


@dataclasses.dataclass(eq=False, slots=True)
class ServerSession:
    """A server session: its ``lsid``, the last transaction number it used (a session that
    reuses it goes on from there: the server refuses a number it has seen), and when it was
    last used."""

    lsid: dict[str, Any]
    txn_number: int = 0
    last_used: float = 0.0


class ServerSessions:
    """Server sessions for reuse, as the Driver Sessions spec has it: the most recently used
    first; one idle for longer than the server's session timeout less a minute is dropped (the
    server may have forgotten it)."""

    def __init__(self, timeout_minutes: float = 30.0) -> None:
        self.timeout_minutes = timeout_minutes
        self._idle: list[ServerSession] = []
        self._lock = threading.Lock()

    def take(self) -> ServerSession:
        now = time.monotonic()
        with self._lock:
            while self._idle:
                session = self._idle.pop()
                if now - session.last_used < (self.timeout_minutes - 1) * 60:
                    return session
        return ServerSession({"id": bson.Binary(uuid.uuid4().bytes, 4)})

    def give_back(self, session: ServerSession) -> None:
        session.last_used = time.monotonic()
        with self._lock:
            self._idle.append(session)

    def drain(self) -> list[dict[str, Any]]:
        """The idle sessions' lsids, taken out (to end them)."""
        with self._lock:
            idle, self._idle = self._idle, []
        return [session.lsid for session in idle]


class PinningRules(Generic[C]):
    """What both MongoDB pools share: the pool, whether to pin, the counts by purpose, the
    server sessions, and the judgement of errors (module rules)."""

    #: the pool's front end (:class:`~poolkit.AsyncPool` or :class:`~poolkit.Pool`)
    _front: type[AsyncPool[Any]] | type[Pool[Any]]

    def __init__(
        self,
        pool: AnyPool[C],
        *,
        pin: bool | None = None,
        read_preference: Mapping[str, Any] | None = None,
    ) -> None:
        if not isinstance(pool, self._front):
            raise TypeError(
                f"{type(self).__name__}(pool): pool must be a poolkit.{self._front.__name__}, "
                f"not {type(pool).__name__} (AsyncMongoPool goes with an AsyncPool, MongoPool "
                "with a Pool)"
            )
        if pin is not None and type(pin) is not bool:
            raise TypeError(f"{type(self).__name__}(pin=...): a bool or None, not {pin!r}")
        self.pool: AnyPool[C] = pool
        self.load_balanced = pool.options.load_balanced
        #: whether cursors and transactions keep their connection (default: the pool's
        #: ``load_balanced``; False only to show what pinning prevents)
        self.pin = self.load_balanced if pin is None else pin
        #: sent as ``$readPreference`` with the cursors' commands outside transactions
        #: (Server Selection: to a mongos or load balancer, every mode but primary)
        self.read_preference = check_read_preference(read_preference, type(self).__name__)
        self.sessions = ServerSessions()
        self._in_use: collections.Counter[str] = collections.Counter()
        self._lock = threading.Lock()
        #: the purposes of checkouts whose cursor or session was garbage-collected unclosed
        #: (the pool takes their connections back): appended from ``__del__``, lock-free
        self._lost: collections.deque[Purpose] = collections.deque()

    def in_use(self) -> dict[str, int]:
        """Connections checked out now, by purpose."""
        with self._lock:
            while self._lost:
                self._in_use[self._lost.popleft()] -= 1
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
            error._poolkit_judged = True  # type: ignore[attr-defined]  # (a mark on any exception)
        except AttributeError:
            pass
        conn = lease.connection
        if self._stale(lease):
            return  # (the pool was cleared since this connection was made: SDAM ignores it)
        if clear_scope(error, handshake_done=True, max_wire_version=conn.max_wire_version):
            self._clear(conn.service_id, error)

    def _connect_failed(self, error: MongoError) -> None:
        """A connect that failed after its ``hello`` (authentication) goes through the SDAM
        rules with the service the ``hello`` named; one before it clears nothing."""
        if error.after_hello and clear_scope(error, handshake_done=True):
            self._clear(error.service_id, error)

    def _clear(self, service_id: ServiceId, cause: BaseException) -> None:
        """Clear the pool: in load-balanced mode ``service_id``'s connections only."""
        if self.load_balanced:
            self.pool.clear(service_id=service_id, cause=cause)
        else:
            self.pool.clear(cause=cause)

    def _stale(self, lease: Lease[C]) -> bool:
        if self.load_balanced:
            current = self.pool.service_generation(lease.service_id)
            return current is not None and lease.generation < current
        return lease.generation < self.pool.generation

    @staticmethod
    def _deadline(timeout: float | None, call: str) -> float | None:
        if timeout is None:
            return None
        return time.monotonic() + check_timeout(timeout, f"{call}(timeout=...)")

    @staticmethod
    def _left(deadline: float | None) -> float | None:
        """The seconds left until ``deadline`` (None: no limit)."""
        return None if deadline is None else max(0.0, deadline - time.monotonic())

    def _in_session(
        self, command: Mapping[str, Any]
    ) -> tuple[Mapping[str, Any], ServerSession | None]:
        """``command`` in an implicit session (a server session taken from the pool, to give
        back after) unless it names one or takes none; and that session (or None)."""
        name = next(iter(command), "").lower()
        if "lsid" in command or name in _SESSIONLESS:
            return command, None
        session = self.sessions.take()
        return {**command, "lsid": session.lsid}, session

    def _end_sessions_commands(self) -> list[dict[str, Any]]:
        idle = self.sessions.drain()
        return [
            {"endSessions": idle[start : start + 10_000]} for start in range(0, len(idle), 10_000)
        ]

    def _cursor(
        self,
        db: str,
        command: Mapping[str, Any],
        batch_size: int,
        call: str,
        session: Mapping[str, Any] | None = None,
    ) -> tuple[CursorState, dict[str, Any]]:
        """A cursor opened by ``command`` (``find``, ``aggregate``...) and the command to send:
        in ``session`` (an explicit session's fields: ``lsid``, a transaction's), else in an
        implicit session of its own. ``call``: the method called (named by its errors)."""
        check_db(db, call)
        check_command(command, call)
        check_batch_size(batch_size, call)
        name = next(iter(command))
        collection = command[name] if isinstance(command.get(name), str) else ""
        implicit = None
        if session is None:
            implicit = self.sessions.take()
            session = {"lsid": implicit.lsid}
        fields = {k: v for k, v in session.items() if k != "startTransaction"}
        state = CursorState(db, collection, batch_size, fields=fields, session=implicit)
        if name != "find":
            command = {**command, "cursor": {"batchSize": batch_size}}
        if self.read_preference is not None and "txnNumber" not in session and _reads(command):
            command = {**command, "$readPreference": self.read_preference}
        return state, {**command, **session}


def _reads(command: Mapping[str, Any]) -> bool:
    """Whether a cursor's command only reads (an aggregate ending in ``$out`` or ``$merge``
    writes: it goes to the primary)."""
    pipeline = command.get("pipeline")
    if not isinstance(pipeline, list) or not pipeline:
        return True
    return not ({"$out", "$merge"} & set(pipeline[-1]))
