"""One simulated service (a mongos behind the load balancer): its ``serviceId``, its cursors
and transactions, and the commands it answers.

Commands: ``hello``/``isMaster``, ``ping``, ``buildInfo``, ``insert``, ``find``, ``aggregate``
(simple stages; a change stream, :mod:`.changes`), ``getMore``, ``killCursors``, ``count``,
``distinct``, ``delete``, ``update`` and ``findAndModify`` (:mod:`.writes`), ``drop``,
``dropDatabase``, ``create``, ``createIndexes``, ``dropIndexes``, ``listCollections``,
``listIndexes``, ``listDatabases`` (:mod:`.catalog`), ``commitTransaction``,
``abortTransaction``, ``endSessions``, ``saslStart``, ``saslContinue``; anything else is error
59 CommandNotFound.
With users (:class:`~.scram.SimUsers`), a connection not authenticated runs only the
handshake's commands (else error 13 Unauthorized).

Rules of this module
--------------------
* The data is the cluster's (:class:`~.store.SimMongoStore`, shared by every service); the
  cursors and transactions are the service's own: a ``getMore`` of another service's cursor
  is error 43 CursorNotFound, a transaction's command on another service error 251
  NoSuchTransaction, as behind a real load balancer.
* A transaction's writes are kept aside and applied at ``commitTransaction`` (a key it wrote
  taken, or a document it updated changed, meanwhile is error 112 WriteConflict); a read in it
  sees them, nothing else does. The catalog's commands are refused in one (error 263).
* A session's transactions are numbered upward, as a mongos's transaction router numbers
  them: a ``txnNumber`` below the session's last is error 225 TransactionTooOld (whatever the
  command), a ``startTransaction`` at the last one's number (in progress, committed or
  aborted) error 117 ConflictingOperationInProgress. The session's numbers are the service's
  own, as its transactions are.
* :meth:`SimService.execute` never raises for a bad command: it answers with an error document.
  No I/O, no awaiting: the server frames, delays and sends.
"""

from __future__ import annotations

import collections
import dataclasses
import datetime
import functools
import itertools
import random
import uuid
from collections.abc import Callable, Mapping
from typing import Any

import bson
from bson.int64 import Int64
from bson.objectid import ObjectId

from . import catalog, writes
from .catalog import namespace_of
from .changes import ChangeStreamCursor, token_position
from .faults import CommandError, error_document
from .scram import SimUsers
from .settings import ConnectionInfo, SimMongoSettings
from .store import QueryError, SimMongoStore, matches, project, sort_documents
from .transactions import Transaction, no_such_transaction

__all__ = ["CommandError", "SimService"]  # (CommandError: .faults')

Document = dict[str, Any]
Sequences = Mapping[str, list[Document]]


def _speculation(hello: str, request: Any) -> Mapping[str, Any]:
    """A ``hello``'s ``speculativeAuthenticate``, checked as MongoDB checks it (its failures
    fail the ``hello``; those of the authentication it starts do not, see
    :meth:`~.scram.SimUsers.speculative`)."""
    field = f"{hello}.speculativeAuthenticate"
    if not isinstance(request, Mapping) or not request:
        raise CommandError(2, f"{field} must be a non-empty Object")
    command = next(iter(request))
    if command not in ("saslStart", "authenticate"):
        raise CommandError(51769, f"{field} unknown command: {command}")
    return request


@dataclasses.dataclass(eq=False)
class _Cursor:
    namespace: str
    documents: list[Document]
    connection_id: int
    position: int = 0


class SimService:
    """One service: ``index`` (its place in the server) and ``service_id``."""

    def __init__(
        self,
        index: int,
        service_id: ObjectId,
        settings: SimMongoSettings,
        store: SimMongoStore,
        rng: random.Random,
        users: SimUsers | None = None,
    ) -> None:
        self.index = index
        self.users = users if users is not None else SimUsers({}, (), 1)
        self.service_id = service_id
        self.settings = settings
        self.store = store
        self._rng = rng
        self._process_id = ObjectId()
        self._connection_ids = itertools.count(1)
        self.cursors: dict[int, _Cursor | ChangeStreamCursor] = {}
        self.transactions: dict[bytes, Transaction] = {}
        self.connections_open = 0
        self.connections_accepted = 0
        self.commands = collections.Counter[str]()
        self._handlers: dict[str, Callable[..., Document]] = {
            "ping": self._ping,
            "buildInfo": self._build_info,
            "buildinfo": self._build_info,
            "insert": self._insert,
            "find": self._find,
            "aggregate": self._aggregate,
            "listCollections": self._list_collections,
            "listIndexes": self._list_indexes,
            "getMore": self._get_more,
            "killCursors": self._kill_cursors,
            "count": self._count,
            "delete": self._delete,
            "drop": self._drop,
            "dropDatabase": self._drop_database,
            "commitTransaction": self._commit,
            "abortTransaction": self._abort,
            "endSessions": self._end_sessions,
            "saslStart": self._sasl_start,
            "saslContinue": self._sasl_continue,
            "distinct": self._distinct,
        }
        for name, command in {**writes.COMMANDS, **catalog.COMMANDS}.items():
            self._handlers[name] = functools.partial(self._store_command, name, command)

    # ------------------------------------------------------------------ connections

    def connection_opened(self, peer: str) -> ConnectionInfo:
        self.connections_open += 1
        self.connections_accepted += 1
        return ConnectionInfo(self.index, next(self._connection_ids), peer)

    def connection_closed(self, conn: ConnectionInfo) -> None:
        """Abort the transactions ``conn`` was running; kill its cursors (if so set)."""
        if not conn.open:
            return
        conn.open = False
        self.connections_open -= 1
        if self.settings.reap_cursors_on_close:
            for cursor_id, cursor in list(self.cursors.items()):
                if cursor.connection_id == conn.connection_id:
                    del self.cursors[cursor_id]
        for txn in self.transactions.values():
            if txn.connection_id == conn.connection_id and txn.state == "in_progress":
                txn.state = "aborted"

    @property
    def transactions_open(self) -> int:
        # (list() first: stats() may run on another thread while this one adds)
        return sum(t.state == "in_progress" for t in list(self.transactions.values()))

    # ------------------------------------------------------------------ commands

    def execute(
        self, conn: ConnectionInfo, name: str, body: Document, sequences: Sequences
    ) -> Document:
        """The reply to command ``name`` (``body``: the command document; ``sequences``: its
        OP_MSG document sequences) received on ``conn``. (The server counts commands.)"""
        try:
            if name in ("hello", "isMaster", "ismaster"):
                return self._hello(conn, name, body)
            handler = self._handlers.get(name)
            if handler is None:
                raise CommandError(59, f"no such command: '{name}'")
            if not self.users.allows(conn, name):
                raise CommandError(13, f"Command {name} requires authentication")
            txn = None
            if body.get("autocommit") is False and name not in (
                "commitTransaction",
                "abortTransaction",
            ):
                txn = self._transaction(conn, body)
            reply = handler(conn, body, sequences, txn)
            if txn is not None:  # (as a mongos: where to recover the transaction from)
                reply["recoveryToken"] = {"recoveryShardId": "shard0"}
            return reply
        except CommandError as exc:
            return exc.document()
        except QueryError as exc:
            return error_document(2, str(exc))
        except (KeyError, TypeError, ValueError) as exc:
            return error_document(9, f"cannot parse {name!r}: {exc!r}")

    def _hello(self, conn: ConnectionInfo, name: str, body: Document) -> Document:
        settings = self.settings
        reply: Document = {"isWritablePrimary" if name == "hello" else "ismaster": True}
        if body.get("helloOk"):
            reply["helloOk"] = True
        reply.update(
            topologyVersion={"processId": self._process_id, "counter": Int64(0)},
            msg="isdbgrid",
            maxBsonObjectSize=settings.max_bson_object_size,
            maxMessageSizeBytes=settings.max_message_size_bytes,
            maxWriteBatchSize=settings.max_write_batch_size,
            localTime=datetime.datetime.now(datetime.UTC),
            logicalSessionTimeoutMinutes=settings.logical_session_timeout_minutes,
            connectionId=conn.connection_id,
            minWireVersion=settings.min_wire_version,
            maxWireVersion=settings.max_wire_version,
            readOnly=False,
        )
        if conn.hello is None:  # (the handshake)
            conn.hello = body
            if settings.load_balanced:
                if not body.get("loadBalanced"):
                    raise CommandError(
                        354,
                        "The server is being accessed through a load balancer, but this "
                        "driver does not have load balancing enabled",
                    )
                reply["serviceId"] = self.service_id
        mechanisms = self.users.supported_mechanisms(body.get("saslSupportedMechs"))
        if mechanisms is not None:
            reply["saslSupportedMechs"] = mechanisms
        if settings.speculative_auth and "speculativeAuthenticate" in body:
            request = _speculation(name, body["speculativeAuthenticate"])
            speculative = self.users.speculative(conn, request)
            if speculative is not None:
                reply["speculativeAuthenticate"] = speculative
        reply["ok"] = 1.0
        return reply

    def _sasl_start(self, conn: ConnectionInfo, body: Document, *_: Any) -> Document:
        return self.users.sasl_start(conn, body, str(body.get("$db", "admin")))

    def _sasl_continue(self, conn: ConnectionInfo, body: Document, *_: Any) -> Document:
        return self.users.sasl_continue(conn, body, str(body.get("$db", "admin")))

    def _store_command(
        self,
        name: str,
        command: Callable[..., Document],
        conn: ConnectionInfo,
        body: Document,
        seqs: Sequences,
        txn: Transaction | None,
    ) -> Document:
        """A command of :mod:`.writes` or :mod:`.catalog` (those refused in a transaction)."""
        if name in catalog.COMMANDS:
            _outside(txn, name)
        return command(self.store, self.settings, body, seqs, txn)

    def _ping(self, *_: Any) -> Document:
        return {"ok": 1.0}

    def _build_info(self, *_: Any) -> Document:
        version = self.settings.version
        numbers = [int(p) for p in version.split(".")[:3] if p.isdigit()]
        return {
            "version": version,
            "versionArray": [*numbers, *[0] * (4 - len(numbers))],
            "gitVersion": "poolkit-simulated",
            "maxBsonObjectSize": self.settings.max_bson_object_size,
            "ok": 1.0,
        }

    # ------------------------------------------------------------------ writes

    def _insert(
        self, conn: ConnectionInfo, body: Document, seqs: Sequences, txn: Transaction | None
    ) -> Document:
        namespace = namespace_of(body, "insert")
        documents = seqs.get("documents", body.get("documents", []))
        ordered = bool(body.get("ordered", True))
        if txn is None:
            n, errors = self.store.insert(namespace, documents, ordered=ordered)
        else:
            n, errors = txn.insert(self.store, namespace, documents, ordered)
        reply: Document = {"n": n}
        if errors:
            reply["writeErrors"] = [e.document() for e in errors]
        reply["ok"] = 1.0
        return reply

    def _delete(
        self, conn: ConnectionInfo, body: Document, seqs: Sequences, txn: Transaction | None
    ) -> Document:
        namespace = namespace_of(body, "delete")
        n = 0
        for spec in seqs.get("deletes", body.get("deletes", [])):
            q, limit = spec.get("q") or {}, int(spec.get("limit", 0))
            if txn is None:
                n += self.store.delete(namespace, q, limit)
            else:
                n += txn.delete(self.store, namespace, q, limit)
        return {"n": n, "ok": 1.0}

    def _drop(
        self, conn: ConnectionInfo, body: Document, seqs: Sequences, txn: Transaction | None
    ) -> Document:
        _outside(txn, "drop")
        self.store.drop(namespace_of(body, "drop"))
        return {"ok": 1.0}

    def _drop_database(
        self, conn: ConnectionInfo, body: Document, seqs: Sequences, txn: Transaction | None
    ) -> Document:
        _outside(txn, "dropDatabase")
        database = str(body.get("$db", "test"))
        self.store.drop_database(database)
        return {"dropped": database, "ok": 1.0}

    # ------------------------------------------------------------------ reads and cursors

    def _find(
        self, conn: ConnectionInfo, body: Document, seqs: Sequences, txn: Transaction | None
    ) -> Document:
        namespace = namespace_of(body, "find")
        found = self._visible(namespace, body.get("filter") or {}, txn)
        if body.get("sort"):
            found = sort_documents(found, body["sort"])
        found = found[int(body.get("skip", 0)) :]
        limit = int(body.get("limit", 0))
        single = bool(body.get("singleBatch", False)) or limit < 0
        if limit:
            found = found[: abs(limit)]
        found = [project(d, body.get("projection")) for d in found]
        size = self._batch_size(body)
        return self._open_cursor(conn, namespace, found, size, single, txn)

    def _aggregate(
        self, conn: ConnectionInfo, body: Document, seqs: Sequences, txn: Transaction | None
    ) -> Document:
        namespace = namespace_of(body, "aggregate")
        stages = [_stage_of(stage) for stage in body.get("pipeline", [])]
        size = self._batch_size(body.get("cursor") or {})
        if stages and stages[0][0] == "$changeStream":
            return self._watch(conn, namespace, stages, size)
        found = self._visible(namespace, {}, txn)
        for name, arg in stages:
            found = _stage(found, name, arg)
        return self._open_cursor(conn, namespace, found, size, False, txn)

    def _watch(
        self, conn: ConnectionInfo, namespace: str, stages: list[tuple[str, Any]], size: int
    ) -> Document:
        """A change stream on ``namespace``: from now, or after ``resumeAfter`` /
        ``startAfter``'s token."""
        options = stages[0][1] if isinstance(stages[0][1], Mapping) else {}
        token = options.get("resumeAfter", options.get("startAfter"))
        try:
            position = self.store.changes.position() if token is None else token_position(token)
        except ValueError as exc:
            raise CommandError(9, str(exc)) from None
        if any(name == "$changeStream" for name, _ in stages[1:]):
            raise CommandError(40602, "$changeStream is only valid as the first stage")
        full = str(options.get("fullDocument", "default"))
        if full not in ("default", "updateLookup", "whenAvailable"):
            raise CommandError(2, f"fullDocument {full!r} is not simulated (no post-images)")
        cursor = ChangeStreamCursor(namespace, conn.connection_id, position, stages[1:], full)
        cursor_id = self._new_cursor_id()
        self.cursors[cursor_id] = cursor
        batch = cursor.batch(self.store.changes, size, _stage, self.store.get)
        return cursor.reply(cursor_id, batch, "firstBatch")

    def _list_collections(
        self, conn: ConnectionInfo, body: Document, seqs: Sequences, txn: Transaction | None
    ) -> Document:
        found = catalog.list_collections(self.store, body)
        size = self._batch_size(body.get("cursor") or {})
        namespace = f"{body.get('$db', 'test')}.$cmd.listCollections"
        return self._open_cursor(conn, namespace, found, size, False)

    def _list_indexes(
        self, conn: ConnectionInfo, body: Document, seqs: Sequences, txn: Transaction | None
    ) -> Document:
        namespace = namespace_of(body, "listIndexes")
        found = catalog.list_indexes(self.store, namespace)
        size = self._batch_size(body.get("cursor") or {})
        return self._open_cursor(conn, namespace, found, size, False)

    def _visible(self, namespace: str, filter: Document, txn: Transaction | None) -> list[Document]:
        """The documents of ``namespace`` matching ``filter``, as ``txn`` (if any) sees them."""
        if txn is None:
            return self.store.find(namespace, filter)
        return txn.find(self.store, namespace, filter)

    def _batch_size(self, options: Mapping[str, Any]) -> int:
        size = int(options.get("batchSize", self.settings.default_batch_size))
        if size < 0:
            raise CommandError(
                51024, f"BSON field 'batchSize' value must be >= 0, actual value '{size}'"
            )
        return size

    def _open_cursor(
        self,
        conn: ConnectionInfo,
        namespace: str,
        found: list[Document],
        size: int,
        single: bool,
        txn: Transaction | None = None,
    ) -> Document:
        """A cursor on ``found``: the first batch (``size`` documents; 0: none) and the id (0 if
        that was all, or if ``single``); one opened in ``txn`` ends with it."""
        first = self._take(found, 0, size if size else -1)
        cursor_id = 0
        if len(first) < len(found) and not single:
            cursor_id = self._new_cursor_id()
            self.cursors[cursor_id] = _Cursor(namespace, found, conn.connection_id, len(first))
            if txn is not None:
                txn.cursors.add(cursor_id)
        return {"cursor": {"firstBatch": first, "id": Int64(cursor_id), "ns": namespace}, "ok": 1.0}

    def _get_more(
        self, conn: ConnectionInfo, body: Document, seqs: Sequences, txn: Transaction | None
    ) -> Document:
        cursor_id = int(body["getMore"])
        namespace = f"{body.get('$db', 'test')}.{body['collection']}"
        cursor = self.cursors.get(cursor_id)
        if cursor is None:
            raise CommandError(43, f"cursor id {cursor_id} not found")
        if cursor.namespace != namespace:
            raise CommandError(
                13,
                f"Requested getMore on namespace '{namespace}', but cursor belongs to a "
                f"different namespace {cursor.namespace}",
            )
        size = self._batch_size({"batchSize": body.get("batchSize") or 0})
        if isinstance(cursor, ChangeStreamCursor):  # (open until killed)
            batch = cursor.batch(self.store.changes, size, _stage, self.store.get)
            return cursor.reply(cursor_id, batch, "nextBatch")
        batch = self._take(cursor.documents, cursor.position, size)
        cursor.position += len(batch)
        if cursor.position >= len(cursor.documents):
            del self.cursors[cursor_id]
            cursor_id = 0
        return {"cursor": {"nextBatch": batch, "id": Int64(cursor_id), "ns": namespace}, "ok": 1.0}

    def awaits_data(self, body: Document) -> bool:
        """Whether ``body`` is a ``getMore`` of one of this service's tailable awaitData cursors
        (a change stream's): the server then waits for a change if it finds none."""
        try:
            cursor = self.cursors.get(int(body["getMore"]))
        except (KeyError, TypeError, ValueError, OverflowError):
            return False
        return isinstance(cursor, ChangeStreamCursor)

    def _kill_cursors(self, conn: ConnectionInfo, body: Document, *_: Any) -> Document:
        killed: list[Int64] = []
        not_found: list[Int64] = []
        for cursor_id in body.get("cursors", []):
            found = self.cursors.pop(int(cursor_id), None) is not None
            (killed if found else not_found).append(Int64(cursor_id))
        return {
            "cursorsKilled": killed,
            "cursorsNotFound": not_found,
            "cursorsAlive": [],
            "cursorsUnknown": [],
            "ok": 1.0,
        }

    def _count(
        self, conn: ConnectionInfo, body: Document, seqs: Sequences, txn: Transaction | None
    ) -> Document:
        namespace = namespace_of(body, "count")
        found = self._visible(namespace, body.get("query") or {}, txn)
        found = found[int(body.get("skip", 0)) :]
        limit = abs(int(body.get("limit", 0)))
        return {"n": min(len(found), limit) if limit else len(found), "ok": 1.0}

    def _distinct(
        self, conn: ConnectionInfo, body: Document, seqs: Sequences, txn: Transaction | None
    ) -> Document:
        key = body.get("key")
        if not isinstance(key, str) or not key:
            raise CommandError(14, "BSON field 'distinct.key' must be a non-empty string")
        found = self._visible(namespace_of(body, "distinct"), body.get("query") or {}, txn)
        return {"values": catalog.distinct_values(found, key), "ok": 1.0}

    def _take(self, documents: list[Document], start: int, count: int) -> list[Document]:
        """Up to ``count`` documents from ``start`` (``count`` 0: as many as fit; -1: none),
        within ``max_bson_object_size`` bytes in all (one at least)."""
        if count < 0:
            return []
        stop = len(documents) if count == 0 else min(len(documents), start + count)
        budget = self.settings.max_bson_object_size
        batch: list[Document] = []
        for doc in documents[start:stop]:
            budget -= len(bson.encode(doc))
            if batch and budget < 0:
                break
            batch.append(doc)
        return batch

    def _new_cursor_id(self) -> int:
        while True:
            cursor_id = self._rng.randrange(1, 2**63 - 1)
            if cursor_id not in self.cursors:
                return cursor_id

    # ------------------------------------------------------------------ sessions and transactions

    def _transaction(self, conn: ConnectionInfo, body: Document) -> Transaction:
        """The transaction that ``body`` (``autocommit: false``) runs in, started if so asked:
        at a number above the session's last, as a mongos's router starts one (module rules)."""
        key = _session_key(body)
        number = int(body["txnNumber"])
        current = self._latest(key, number, body)
        if body.get("startTransaction"):
            if current is not None and current.number == number:
                raise CommandError(
                    117,
                    f"txnNumber {number} txnRetryCounter 0 for session "
                    f"{_session_text(body['lsid'])} already started",
                )
            txn = Transaction(number, conn.connection_id)
            self.transactions[key] = txn
            return txn
        if current is None or current.number != number or current.state != "in_progress":
            raise no_such_transaction(number)
        current.connection_id = conn.connection_id
        return current

    def _latest(self, key: bytes, number: int, body: Document) -> Transaction | None:
        """The session's last transaction on this service; TransactionTooOld if ``number`` (a
        command's ``txnNumber``) is below its number."""
        current = self.transactions.get(key)
        if current is not None and number < current.number:
            raise CommandError(
                225,
                f"txnNumber {number} is less than last txnNumber {current.number} seen in "
                f"session {_session_text(body['lsid'])}",
            )
        return current

    def _commit(self, conn: ConnectionInfo, body: Document, *_: Any) -> Document:
        number = int(body["txnNumber"])
        txn = self._latest(_session_key(body), number, body)
        if txn is None or txn.number != number or txn.state == "aborted":
            raise no_such_transaction(number)
        if txn.state == "committed":
            return {"ok": 1.0}  # (a commit may be retried)
        self._end_cursors(txn)
        txn.commit(self.store)
        return {"ok": 1.0}

    def _abort(self, conn: ConnectionInfo, body: Document, *_: Any) -> Document:
        number = int(body["txnNumber"])
        txn = self._latest(_session_key(body), number, body)
        if txn is None or txn.number != number or txn.state == "aborted":
            raise no_such_transaction(number)
        if txn.state == "committed":
            raise CommandError(256, f"Transaction {number} has been committed.")
        self._end_cursors(txn)
        txn.state = "aborted"
        txn.writes.clear()
        return {"ok": 1.0}

    def _end_cursors(self, txn: Transaction) -> None:
        for cursor_id in txn.cursors:
            self.cursors.pop(cursor_id, None)
        txn.cursors.clear()

    def _end_sessions(self, conn: ConnectionInfo, body: Document, *_: Any) -> Document:
        for lsid in body.get("endSessions", []):
            self.transactions.pop(bytes(bson.encode(lsid)), None)
        return {"ok": 1.0}


def _stage_of(stage: Any) -> tuple[str, Any]:
    if not isinstance(stage, Mapping) or len(stage) != 1:
        raise CommandError(40323, "a pipeline stage must have exactly one field")
    ((name, arg),) = stage.items()
    return str(name), arg


def _stage(found: list[Document], name: str, arg: Any) -> list[Document]:
    """One aggregation stage: ``$match $sort $skip $limit $project $count``, and ``$group``
    counting (``{_id: <constant>, field: {$sum: <number>}, ...}``, as ``count_documents``)."""
    if name == "$match":
        return [d for d in found if matches(d, arg)]
    if name == "$sort":
        return sort_documents(found, arg)
    if name == "$skip":
        return found[int(arg) :]
    if name == "$limit":
        return found[: int(arg)]
    if name == "$project":
        return [project(d, arg) for d in found]
    if name == "$count":
        return [{str(arg): len(found)}] if found else []
    if name == "$group" and isinstance(arg, Mapping) and "_id" in arg:
        if isinstance(arg["_id"], str) and arg["_id"].startswith("$"):
            raise CommandError(40324, "$group by a field is not simulated")
        group: Document = {"_id": arg["_id"]}
        for field, spec in arg.items():
            if field == "_id":
                continue
            if not (isinstance(spec, Mapping) and set(spec) == {"$sum"}):
                raise CommandError(40324, f"$group accumulator {spec!r} is not simulated")
            group[field] = spec["$sum"] * len(found)
        return [group] if found else []
    raise CommandError(40324, f"Unrecognized pipeline stage name: {name!r}")


def _outside(txn: Transaction | None, command: str) -> None:
    if txn is not None:
        raise CommandError(263, f"Cannot run '{command}' in a multi-document transaction.")


def _session_text(lsid: Any) -> str:
    """A session id as a server's messages show it: ``{ id: UUID("...") }``."""
    session_id = lsid.get("id") if isinstance(lsid, Mapping) else None
    if isinstance(session_id, bson.Binary) and session_id.subtype == bson.binary.UUID_SUBTYPE:
        session_id = session_id.as_uuid()
    shown = f'UUID("{session_id}")' if isinstance(session_id, uuid.UUID) else repr(session_id)
    return f"{{ id: {shown} }}"


def _session_key(body: Document) -> bytes:
    lsid = body.get("lsid")
    if not isinstance(lsid, Mapping):
        raise CommandError(50768, "a transaction's commands need a session (lsid) and a txnNumber")
    return bytes(bson.encode(lsid))
