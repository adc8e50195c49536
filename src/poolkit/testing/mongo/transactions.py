"""Transactions of a simulated service: their writes kept aside, in order, and applied at
``commitTransaction``; what a command in one sees; the cursors it opened.

Rules of this module
--------------------
* A transaction's writes (inserts, deletes, and the documents updates and ``findAndModify``
  changed, each as it was and as it became) are its own until it commits: a read in it sees
  the store's documents with its writes applied in order, nothing else sees them. An abort
  drops them. ``drop``, ``dropDatabase``, ``create``, ``createIndexes``, ``dropIndexes`` and
  ``listDatabases`` are refused in a transaction (code 263; MongoDB 4.4+ would create a
  collection, or an index on a new one, in one).
* A commit applies them atomically under the store's lock, or not at all: an ``_id`` another
  writer took meanwhile, or a document it updated that another writer changed or deleted
  since, is error 112 WriteConflict (``TransientTransactionError``).
* The cursors a transaction opened are killed when it commits or aborts, as MongoDB kills
  them: a ``getMore`` after is error 43 CursorNotFound.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from bson.objectid import ObjectId

from .faults import CommandError
from .store import SimMongoStore, WriteError, encoded, id_key, matches

__all__ = ["Transaction", "no_such_transaction"]

Document = dict[str, Any]


def no_such_transaction(number: int) -> CommandError:
    return CommandError(
        251,
        f"Given transaction number {number} does not match any in-progress transactions",
        ("TransientTransactionError",),
    )


@dataclasses.dataclass(eq=False)
class Transaction:
    number: int
    connection_id: int
    state: str = "in_progress"  # then "committed" or "aborted"
    #: its writes, in order: ("insert", namespace, documents), ("delete", namespace, (filter,
    #: limit)) or ("update", namespace, (before, after, updateDescription or None: a replace))
    writes: list[tuple[str, str, Any]] = dataclasses.field(default_factory=list)
    #: the ids of the cursors it opened
    cursors: set[int] = dataclasses.field(default_factory=set)

    def view(self, store: SimMongoStore, namespace: str, *, check: bool = False) -> list[Document]:
        """The documents of ``namespace`` as this transaction sees them (``check``: WriteConflict
        if a document it updated is not, in the store, as it was when it did)."""
        documents = store.documents(namespace)
        for kind, target, arg in self.writes:
            if target != namespace:
                continue
            if kind == "insert":
                documents.extend(arg)
            elif kind == "delete":
                documents = _deleted(documents, *arg)[0]
            else:
                before, after, _ = arg
                at = next(
                    (
                        i
                        for i, d in enumerate(documents)
                        if id_key(d["_id"]) == id_key(after["_id"])
                    ),
                    None,
                )
                if check and (at is None or encoded(documents[at]) != encoded(before)):
                    raise self._conflict("a document it updated was changed meanwhile")
                if at is not None:
                    documents[at] = dict(after)
        return documents

    def find(self, store: SimMongoStore, namespace: str, filter: Document) -> list[Document]:
        return [dict(d) for d in self.view(store, namespace) if matches(d, filter)]

    def insert(
        self, store: SimMongoStore, namespace: str, documents: list[Document], ordered: bool
    ) -> tuple[int, list[WriteError]]:
        seen = {id_key(d["_id"]) for d in self.view(store, namespace)}
        accepted: list[Document] = []
        errors: list[WriteError] = []
        for index, document in enumerate(documents):
            doc = document if "_id" in document else {"_id": ObjectId(), **document}
            key = id_key(doc["_id"])
            if key in seen:
                errors.append(WriteError(index, 11000, f"E11000 duplicate key: {doc['_id']!r}"))
                self.state = "aborted"  # (a write error ends a transaction)
                if ordered:
                    break
                continue
            seen.add(key)
            accepted.append(dict(doc))
        self.writes.append(("insert", namespace, accepted))
        return len(accepted), errors

    def replace(
        self,
        namespace: str,
        before: Document,
        after: Document,
        description: Mapping[str, Any] | None,
    ) -> None:
        """Keep aside ``before`` becoming ``after`` (same ``_id``), an update with ``description``
        (its ``updateDescription``) or, without, a replace."""
        self.writes.append(("update", namespace, (dict(before), dict(after), description)))

    def delete(self, store: SimMongoStore, namespace: str, filter: Document, limit: int) -> int:
        doomed = _deleted(self.view(store, namespace), filter, limit)[1]
        self.writes.append(("delete", namespace, (filter, limit)))
        return doomed

    def commit(self, store: SimMongoStore) -> None:
        """Apply its writes to ``store``, all or none (module rules)."""
        with store.locked():
            for namespace in {target for _, target, _ in self.writes}:
                keys = [id_key(d["_id"]) for d in self.view(store, namespace, check=True)]
                if len(keys) != len(set(keys)):  # (another writer took an _id it inserted)
                    raise self._conflict("an _id was taken")
            for kind, namespace, arg in self.writes:
                if kind == "insert":
                    store.insert(namespace, arg)
                elif kind == "delete":
                    store.delete(namespace, *arg)
                else:
                    store.replace(namespace, arg[1], arg[2])
        self.state = "committed"
        self.writes.clear()

    def _conflict(self, why: str) -> CommandError:
        self.state = "aborted"
        return CommandError(112, f"WriteConflict: {why}", ("TransientTransactionError",))


def _deleted(documents: list[Document], filter: Document, limit: int) -> tuple[list[Document], int]:
    """``documents`` less those matching ``filter`` (the first ``limit``; 0: all), and how many
    went."""
    kept: list[Document] = []
    gone = 0
    for document in documents:
        if (not limit or gone < limit) and matches(document, filter):
            gone += 1
        else:
            kept.append(document)
    return kept, gone
