"""The commands of the simulated cluster that change documents by an update: ``update`` (behind
``update_one``, ``update_many``, ``replace_one`` and bulk writes) and ``findAndModify``
(``find_one_and_update``/``_replace``/``_delete``), on the store or in a transaction.

``update``: its ``updates`` (a document sequence or an array), each ``{q, u, multi, upsert,
sort}``, run in order (``ordered``: stop at the first error); the reply's ``n`` (matched, and
upserted), ``nModified`` (changed: an update that changes nothing is no modification),
``upserted`` (``[{index, _id}]``) and ``writeErrors`` (``[{index, code, errmsg}]``, and a
duplicate key's ``keyPattern`` and ``keyValue``). A statement that fails counts for nothing, and
changes nothing if its update fails on a document (MongoDB's multi update stops at the failing
document, the earlier ones changed); one that would duplicate a unique index's key stops there,
as MongoDB's, the earlier documents changed. ``findAndModify``: ``query``, ``sort``, ``update``
or ``remove``, ``new``, ``fields``, ``upsert``; the reply's ``value`` and ``lastErrorObject``
(``n``, ``updatedExisting``, ``upserted``); its errors fail the command (a duplicate key's with
its ``keyPattern`` and ``keyValue``).

Rules of this module
--------------------
* A command runs under the store's lock, its statements one after another (the cluster is
  shared by services on several threads); in a transaction its changes go to the transaction's
  writes (:mod:`.transactions`) and any failure aborts the transaction, as MongoDB's does.
* The update itself (operators, replacements, upserts, events' descriptions) is
  :mod:`.updates`'; here are the commands' fields, replies and errors. An aggregation pipeline
  as the update is refused, error 2 BadValue (not simulated); ``arrayFilters`` and a
  non-simple ``collation`` too.
* An error found applying an update to a document carries, as MongoDB's, "Plan executor error
  during findAndModify :: caused by ::", and for ``update`` so from MongoDB 8 (``version``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from .catalog import namespace_of
from .faults import CommandError
from .settings import SimMongoSettings
from .store import QueryError, SimMongoStore, WriteError, encoded, project, sort_documents
from .transactions import Transaction
from .updates import Update, UpdateError, apply, describe, parse, upsert_document

__all__ = ["COMMANDS", "find_and_modify", "update"]

Document = dict[str, Any]
Sequences = Mapping[str, list[Document]]


@dataclasses.dataclass
class _Target:
    """Where a command reads and writes: the store, or a transaction's view of it."""

    store: SimMongoStore
    namespace: str
    txn: Transaction | None

    def find(self, filter: Mapping[str, Any], sort: Any) -> list[Document]:
        try:
            if self.txn is None:
                found = self.store.find(self.namespace, filter)
            else:
                found = self.txn.find(self.store, self.namespace, dict(filter))
            return sort_documents(found, sort) if sort else found
        except QueryError as exc:
            raise UpdateError(2, str(exc)) from None

    def insert(self, document: Document) -> None:
        if self.txn is None:
            errors = self.store.insert(self.namespace, [document])[1]
        else:
            errors = self.txn.insert(self.store, self.namespace, [document], True)[1]
        if errors:
            raise _failed(errors[0])

    def replace(self, before: Document, after: Document, update: Update) -> None:
        description = None if update.replacement is not None else describe(update, before, after)
        try:
            if self.txn is None:
                self.store.replace(self.namespace, after, description)
            else:
                self.txn.replace(self.store, self.namespace, before, after, description)
        except WriteError as exc:
            raise _failed(exc) from None

    def remove(self, document: Document) -> None:
        if self.txn is None:
            self.store.remove(self.namespace, document["_id"])
        else:
            self.txn.delete(self.store, self.namespace, {"_id": document["_id"]}, 1)


def _failed(error: WriteError) -> UpdateError:
    """The write error of a document written (a duplicate key) as an update's."""
    return UpdateError(error.code, error.errmsg, execution=True, details=error.details)


def _parse_checks(update: Any, field: str) -> None:
    if update is None:
        return
    if isinstance(update, list):
        raise CommandError(2, "an aggregation pipeline as the update is not simulated")
    if not isinstance(update, Mapping):
        raise CommandError(
            14,
            f"BSON field '{field}' is the wrong type '{type(update).__name__}', expected type "
            "'object' or 'array'",
        )


def _unsimulated(statement: Any, command: str) -> None:
    """Refuse, failing the command, what the simulator does not do (a pipeline as the update,
    ``arrayFilters``, a collation) and an update that is no document."""
    if not isinstance(statement, Mapping):
        raise CommandError(14, "BSON field 'update.updates' is the wrong type: expected 'object'")
    if command == "update":
        if "u" not in statement:
            raise CommandError(
                40414, "BSON field 'update.updates.u' is missing but a required field"
            )
        _parse_checks(statement["u"], "update.updates.u")
    else:
        _parse_checks(statement.get("update"), "findAndModify.update")
    if statement.get("arrayFilters"):
        raise CommandError(2, "arrayFilters (and the positional $[<id>]) are not simulated")
    collation = statement.get("collation")
    if collation and collation.get("locale") != "simple":
        raise CommandError(2, "a collation other than the simple one is not simulated")


def _wrapped(exc: UpdateError, command: str, wrap: bool) -> str:
    if exc.execution and wrap:
        return f"Plan executor error during {command} :: caused by :: {exc.errmsg}"
    return exc.errmsg


@dataclasses.dataclass
class _Outcome:
    matched: int = 0
    modified: int = 0
    upserted: Any = None
    before: Document | None = None
    after: Document | None = None


def _update_one_statement(target: _Target, statement: Mapping[str, Any]) -> _Outcome:
    update = parse(statement["u"])
    multi = bool(statement.get("multi", False))
    if multi and update.replacement is not None:
        raise UpdateError(9, "multi update is not supported for replacement-style update")
    query = statement.get("q") or {}
    found = target.find(query, None if multi else statement.get("sort"))
    if not multi:
        found = found[:1]
    if not found:
        if not statement.get("upsert"):
            return _Outcome()
        document = upsert_document(query, update)
        target.insert(document)
        return _Outcome(upserted=document["_id"], after=document)
    changes = [(before, apply(update, before)) for before in found]  # (all or none)
    outcome = _Outcome(matched=len(found), before=changes[0][0], after=changes[0][1])
    for before, after in changes:
        if encoded(before) != encoded(after):
            target.replace(before, after, update)
            outcome.modified += 1
    return outcome


def update(
    store: SimMongoStore,
    settings: SimMongoSettings,
    body: Document,
    seqs: Sequences,
    txn: Transaction | None,
) -> Document:
    """The ``update`` command (module doc)."""
    target = _Target(store, namespace_of(body, "update"), txn)
    statements = seqs.get("updates", body.get("updates", []))
    ordered = bool(body.get("ordered", True))
    wrap = int(settings.version.split(".")[0]) >= 8
    reply: Document = {"n": 0, "nModified": 0}
    upserted: list[Document] = []
    errors: list[Document] = []
    for statement in statements:
        _unsimulated(statement, "update")
    with store.locked():
        for index, statement in enumerate(statements):
            try:
                outcome = _update_one_statement(target, statement)
            except UpdateError as exc:
                error = WriteError(index, exc.code, _wrapped(exc, "update", wrap), exc.details)
                errors.append(error.document())
                if txn is not None:
                    txn.state = "aborted"  # (a write error ends a transaction)
                if ordered:
                    break
                continue
            reply["n"] += outcome.matched
            reply["nModified"] += outcome.modified
            if outcome.upserted is not None:
                reply["n"] += 1
                upserted.append({"index": index, "_id": outcome.upserted})
    if upserted:
        reply["upserted"] = upserted
    if errors:
        reply["writeErrors"] = errors
    reply["ok"] = 1.0
    return reply


def _check_find_and_modify(body: Mapping[str, Any]) -> None:
    remove, has_update = bool(body.get("remove", False)), body.get("update") is not None
    problems = (
        (remove and has_update, "Cannot specify both an update and remove=true"),
        (not remove and not has_update, "Either an update or remove=true must be specified"),
        (
            remove and bool(body.get("new")),
            "Cannot specify both new=true and remove=true; 'remove' always returns the deleted "
            "document",
        ),
        (remove and bool(body.get("upsert")), "Cannot specify both upsert=true and remove=true"),
    )
    for failed, errmsg in problems:
        if failed:
            raise CommandError(9, errmsg)
    _unsimulated(body, "findAndModify")


def find_and_modify(
    store: SimMongoStore,
    settings: SimMongoSettings,
    body: Document,
    seqs: Sequences,
    txn: Transaction | None,
) -> Document:
    """The ``findAndModify`` command (module doc)."""
    _check_find_and_modify(body)
    target = _Target(store, namespace_of(body, "findAndModify"), txn)
    query = body.get("query") or {}
    try:
        with store.locked():
            if body.get("remove"):
                found = target.find(query, body.get("sort"))[:1]
                for document in found:
                    target.remove(document)
                value, last = (found[0] if found else None), {"n": len(found)}
            else:
                statement = {"q": query, "u": body["update"], "upsert": body.get("upsert")}
                outcome = _update_one_statement(target, {**statement, "sort": body.get("sort")})
                value = outcome.after if body.get("new") else outcome.before
                last = {"n": outcome.matched or int(outcome.upserted is not None)}
                last["updatedExisting"] = bool(outcome.matched)
                if outcome.upserted is not None:
                    last["upserted"] = outcome.upserted
    except (UpdateError, CommandError) as exc:
        if txn is not None:
            txn.state = "aborted"
        if isinstance(exc, CommandError):
            raise
        errmsg = _wrapped(exc, "findAndModify", True)
        raise CommandError(exc.code, errmsg, details=exc.details) from None
    fields = body.get("fields")
    return {
        "lastErrorObject": last,
        "value": None if value is None else project(value, fields),
        "ok": 1.0,
    }


COMMANDS = {"update": update, "findAndModify": find_and_modify}
