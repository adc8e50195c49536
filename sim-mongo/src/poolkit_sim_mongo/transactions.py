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
* A write that would duplicate a key (an ``_id``, a unique index's) among the documents the
  transaction sees fails at once, write error 11000 as outside one, and aborts it.
* A commit applies them atomically under the store's lock, or not at all: it first replays
  them, in order, on the store's documents as they are then; an ``_id`` or a unique index's key
  another writer took meanwhile, or a document it updated that another writer changed or
  deleted since, is error 112 WriteConflict (``TransientTransactionError``).
* The cursors a transaction opened are killed when it commits or aborts, as MongoDB kills
  them: a ``getMore`` after is error 43 CursorNotFound.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Mapping
from typing import Any

from bson.objectid import ObjectId

from .faults import CommandError
from .store import (
    SimMongoStore,
    WriteError,
    duplicate_error,
    encoded,
    id_duplicate,
    id_key,
    matches,
)

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
        """The documents of ``namespace`` as this transaction sees them (``check``, at commit:
        WriteConflict if a write no longer applies, see the module's rules)."""
        documents = store.documents(namespace)
        held = _Held(store, namespace, documents) if check else None
        for kind, target, arg in self.writes:
            if target != namespace:
                continue
            if kind == "insert":
                if held is not None:
                    for document in arg:
                        self._take(held, document)
                documents.extend(arg)
            elif kind == "delete":
                documents, gone = _deleted(documents, *arg)
                if held is not None:
                    for document in gone:
                        held.release(document)
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
                    if held is not None:
                        held.release(documents[at])
                        self._take(held, after)
                    documents[at] = dict(after)
        return documents

    def _take(self, held: _Held, document: Document) -> None:
        taken = held.take(document)
        if taken is not None:
            raise self._conflict(f"{taken} was taken meanwhile")

    def find(self, store: SimMongoStore, namespace: str, filter: Document) -> list[Document]:
        return [dict(d) for d in self.view(store, namespace) if matches(d, filter)]

    def insert(
        self, store: SimMongoStore, namespace: str, documents: list[Document], ordered: bool
    ) -> tuple[int, list[WriteError]]:
        view = self.view(store, namespace)
        seen = {id_key(d["_id"]) for d in view}
        uniques = store.unique_keys(namespace, view)
        accepted: list[Document] = []
        errors: list[WriteError] = []
        for index, document in enumerate(documents):
            doc = document if "_id" in document else {"_id": ObjectId(), **document}
            key = id_key(doc["_id"])
            duplicate = id_duplicate(doc["_id"]) if key in seen else uniques.conflict(doc)
            if duplicate is not None:
                errors.append(duplicate_error(index, namespace, duplicate))
                self.state = "aborted"  # (a write error ends a transaction)
                if ordered:
                    break
                continue
            seen.add(key)
            uniques.add(doc)
            accepted.append(dict(doc))
        self.writes.append(("insert", namespace, accepted))
        return len(accepted), errors

    def replace(
        self,
        store: SimMongoStore,
        namespace: str,
        before: Document,
        after: Document,
        description: Mapping[str, Any] | None,
    ) -> None:
        """Keep aside ``before`` becoming ``after`` (same ``_id``), an update with ``description``
        (its ``updateDescription``) or, without, a replace. Raises :class:`WriteError` (and
        aborts) if ``after`` would duplicate a unique index's key among what it sees."""
        if store.unique_keys(namespace):  # (any unique index?)
            key = id_key(after["_id"])
            others = [d for d in self.view(store, namespace) if id_key(d["_id"]) != key]
            duplicate = store.unique_keys(namespace, others).conflict(after)
            if duplicate is not None:
                self.state = "aborted"
                raise duplicate_error(0, namespace, duplicate)
        self.writes.append(("update", namespace, (dict(before), dict(after), description)))

    def delete(self, store: SimMongoStore, namespace: str, filter: Document, limit: int) -> int:
        doomed = _deleted(self.view(store, namespace), filter, limit)[1]
        self.writes.append(("delete", namespace, (filter, limit)))
        return len(doomed)

    def commit(self, store: SimMongoStore) -> None:
        """Apply its writes to ``store``, all or none (module rules)."""
        with store.locked():
            for namespace in {target for _, target, _ in self.writes}:
                self.view(store, namespace, check=True)
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


class _Held:
    """The ``_id`` and unique keys that a collection's documents hold, as a commit replays a
    transaction's writes on them."""

    def __init__(self, store: SimMongoStore, namespace: str, documents: list[Document]) -> None:
        self.ids = collections.Counter(id_key(d["_id"]) for d in documents)
        self.uniques = store.unique_keys(namespace, documents)

    def take(self, document: Document) -> str | None:
        """Add ``document``; or what another holds already (and add nothing)."""
        key = id_key(document["_id"])
        if self.ids[key] > 0:
            return "an _id it wrote"
        duplicate = self.uniques.conflict(document)
        if duplicate is not None:
            return f"a key of unique index {duplicate.name} it wrote"
        self.ids[key] += 1
        self.uniques.add(document)
        return None

    def release(self, document: Document) -> None:
        self.ids[id_key(document["_id"])] -= 1
        self.uniques.remove(document)


def _deleted(
    documents: list[Document], filter: Document, limit: int
) -> tuple[list[Document], list[Document]]:
    """``documents`` less those matching ``filter`` (the first ``limit``; 0: all), and those."""
    kept: list[Document] = []
    gone: list[Document] = []
    for document in documents:
        if (not limit or len(gone) < limit) and matches(document, filter):
            gone.append(document)
        else:
            kept.append(document)
    return kept, gone
