"""The data of the simulated cluster: documents by ``database.collection``, shared by every
service in front of it (one cluster behind the load balancer), with the small query language
the simulator understands.

Queries: top-level and dotted fields, equality (a field holding an array also matches one of
its elements), ``$eq $ne $gt $gte $lt $lte $in $nin $exists``, and ``$and $or $nor``; sorts
on fields (BSON's order of types, roughly); projections that include or exclude top-level
fields. Anything else is a :class:`QueryError` (the server answers ``BadValue``).

Besides documents, the store keeps each collection's catalog entry: its options (``create``'s),
a UUID, and the indexes created on it beyond ``_id_`` (specs: nothing is indexed, but a
``unique`` index is enforced, its keys :mod:`.indexes`'). An insert creates the collection,
``drop`` removes it all.

Rules of this module
--------------------
* One :class:`SimMongoStore` may be shared by servers running on different threads (several
  standalone servers behind HAProxy): every public method takes the store's lock, and
  :meth:`SimMongoStore.locked` holds it across several calls (a commit's check-then-insert).
* Documents go in and come out as copies (shallow: the simulator never mutates one).
* A document is keyed by its ``_id`` (BSON-encoded): a second document with the same ``_id``,
  or one that would give a unique index a key another document holds, is a duplicate key error
  (11000, worded as MongoDB's, with its ``keyPattern`` and ``keyValue``): an insert reports it
  per document, never raises; a replace, of one document, raises it. Nothing is written then.
* Every change to documents is recorded in :attr:`SimMongoStore.changes` under the store's
  lock (an ``update`` event with its ``updateDescription``, a ``replace`` with its new document).
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import functools
import re
import threading
import uuid
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import bson
from bson.binary import Binary
from bson.objectid import ObjectId

from .changes import ChangeLog
from .indexes import Duplicate, UniqueKeys

__all__ = [
    "MISSING",
    "CollectionEntry",
    "QueryError",
    "SimMongoStore",
    "WriteError",
    "bson_repr",
    "compare_values",
    "duplicate_error",
    "duplicate_message",
    "id_duplicate",
    "matches",
    "project",
    "sort_documents",
]

MISSING: Any = object()


class QueryError(ValueError):
    """A filter, sort or projection the simulator does not understand."""


class WriteError(ValueError):
    """One document that could not be written (``code`` 11000: a duplicate key; ``details``:
    the fields MongoDB adds to the write error, a duplicate key's ``keyPattern`` and
    ``keyValue``)."""

    def __init__(
        self, index: int, code: int, errmsg: str, details: Mapping[str, Any] | None = None
    ) -> None:
        super().__init__(errmsg)
        self.index = index
        self.code = code
        self.errmsg = errmsg
        self.details = dict(details or {})

    def document(self) -> dict[str, Any]:
        return {"index": self.index, "code": self.code, "errmsg": self.errmsg, **self.details}


def duplicate_error(index: int, namespace: str, duplicate: Duplicate) -> WriteError:
    """Write error 11000 for ``duplicate``, as MongoDB words it ("E11000 duplicate key error
    collection: db.items index: x_1 dup key: { x: 1 }")."""
    return WriteError(index, 11000, duplicate_message(namespace, duplicate), duplicate.details())


def duplicate_message(namespace: str, duplicate: Duplicate) -> str:
    shown = ", ".join(f"{k}: {bson_repr(v)}" for k, v in duplicate.value.items())
    return (
        f"E11000 duplicate key error collection: {namespace} index: {duplicate.name} "
        f"dup key: {{ {shown} }}"
    )


def id_duplicate(value: Any) -> Duplicate:
    """The duplicate key of a second document with ``_id`` ``value``."""
    return Duplicate("_id_", {"_id": 1}, {"_id": value})


def encoded(document: Mapping[str, Any]) -> bytes:
    """``document`` as BSON: equal documents (same fields, order and types) encode alike."""
    return bytes(bson.encode(document))


def id_key(value: Any) -> bytes:
    """The key a document with ``_id`` ``value`` is stored under."""
    return encoded({"_id": value})


@dataclasses.dataclass
class CollectionEntry:
    """A collection's catalog entry: ``create``'s options, its UUID, and its indexes beyond
    ``_id_`` (each ``{v, key, name, ...options}``, in creation order)."""

    options: dict[str, Any] = dataclasses.field(default_factory=dict)
    uuid: Binary = dataclasses.field(default_factory=lambda: Binary.from_uuid(uuid.uuid4()))
    indexes: list[dict[str, Any]] = dataclasses.field(default_factory=list)


class SimMongoStore:
    """Collections by namespace (``"db.coll"``), each a list of documents in insertion order."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._collections: dict[str, dict[bytes, dict[str, Any]]] = {}
        self._catalog: dict[str, CollectionEntry] = {}
        #: every change, in order: what change streams read (:mod:`.changes`)
        self.changes = ChangeLog()

    def _collection(self, namespace: str) -> dict[bytes, dict[str, Any]]:
        """``namespace``'s documents, the collection created if need be (lock held)."""
        if namespace not in self._collections:
            self._collections[namespace] = {}
            self._catalog[namespace] = CollectionEntry()
        return self._collections[namespace]

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the store's lock across several calls."""
        with self._lock:
            yield

    def namespaces(self) -> list[str]:
        with self._lock:
            return sorted(self._collections)

    def documents(self, namespace: str) -> list[dict[str, Any]]:
        """Every document of ``namespace``, in insertion order."""
        with self._lock:
            return [dict(d) for d in self._collections.get(namespace, {}).values()]

    def insert(
        self, namespace: str, documents: Iterable[Mapping[str, Any]], *, ordered: bool = True
    ) -> tuple[int, list[WriteError]]:
        """Insert ``documents`` (each given an ObjectId ``_id`` if it has none): how many were
        inserted, and the errors (an ordered insert stops at its first)."""
        inserted = 0
        errors: list[WriteError] = []
        with self._lock:
            collection = self._collection(namespace)
            uniques = self.unique_keys(namespace, collection.values())
            for index, document in enumerate(documents):
                doc = dict(document)
                if "_id" not in doc:
                    doc = {"_id": bson.ObjectId(), **doc}
                key = id_key(doc["_id"])
                duplicate = id_duplicate(doc["_id"]) if key in collection else uniques.conflict(doc)
                if duplicate is not None:
                    errors.append(duplicate_error(index, namespace, duplicate))
                    if ordered:
                        break
                    continue
                collection[key] = doc
                uniques.add(doc)
                self.changes.record("insert", namespace, doc["_id"], doc)
                inserted += 1
        return inserted, errors

    def find(
        self,
        namespace: str,
        filter: Mapping[str, Any] | None = None,
    ) -> list[dict[str, Any]]:
        """The documents of ``namespace`` that match ``filter``. Raises :class:`QueryError`."""
        with self._lock:
            found = list(self._collections.get(namespace, {}).values())
        return [dict(d) for d in found if matches(d, filter or {})]

    def delete(self, namespace: str, filter: Mapping[str, Any], limit: int = 0) -> int:
        """Delete the documents matching ``filter`` (at most ``limit``; 0: all): how many."""
        with self._lock:
            collection = self._collections.get(namespace, {})
            doomed = [k for k, d in collection.items() if matches(d, filter)]
            if limit:
                doomed = doomed[:limit]
            for key in doomed:
                self.changes.record("delete", namespace, collection.pop(key)["_id"])
            return len(doomed)

    def get(self, namespace: str, key: Any) -> dict[str, Any] | None:
        """The document of ``namespace`` whose ``_id`` is ``key``, if any."""
        with self._lock:
            found = self._collections.get(namespace, {}).get(id_key(key))
            return None if found is None else dict(found)

    def replace(
        self,
        namespace: str,
        document: Mapping[str, Any],
        description: Mapping[str, Any] | None = None,
    ) -> bool:
        """Put ``document`` in place of the one with its ``_id`` (False if there is none),
        recorded as an ``update`` with ``description`` (its ``updateDescription``) or, without,
        as a ``replace``. Raises :class:`WriteError` (index 0) if it would duplicate a unique
        index's key."""
        with self._lock:
            collection = self._collections.get(namespace, {})
            key = id_key(document["_id"])
            if key not in collection:
                return False
            others = (d for k, d in collection.items() if k != key)
            duplicate = self.unique_keys(namespace, others).conflict(document)
            if duplicate is not None:
                raise duplicate_error(0, namespace, duplicate)
            collection[key] = dict(document)
            if description is None:
                self.changes.record("replace", namespace, document["_id"], dict(document))
            else:
                self.changes.record("update", namespace, document["_id"], None, description)
            return True

    def remove(self, namespace: str, key: Any) -> bool:
        """Delete the document whose ``_id`` is ``key``: whether there was one."""
        with self._lock:
            found = self._collections.get(namespace, {}).pop(id_key(key), None)
            if found is not None:
                self.changes.record("delete", namespace, key)
            return found is not None

    def unique_keys(
        self, namespace: str, documents: Iterable[Mapping[str, Any]] = ()
    ) -> UniqueKeys:
        """The keys ``documents`` hold in ``namespace``'s unique indexes (as its catalog has
        them now; none: empty and false)."""
        with self._lock:
            entry = self._catalog.get(namespace)
            specs = [] if entry is None else entry.indexes
            return UniqueKeys(specs, matches, documents if specs else ())

    def entry(self, namespace: str) -> CollectionEntry | None:
        """A copy of ``namespace``'s catalog entry (None: no such collection)."""
        with self._lock:
            entry = self._catalog.get(namespace)
            if entry is None:
                return None
            return CollectionEntry(dict(entry.options), entry.uuid, list(entry.indexes))

    def create(self, namespace: str, options: Mapping[str, Any]) -> bool:
        """Create collection ``namespace`` with ``options``: False if it exists already."""
        with self._lock:
            if namespace in self._collections:
                return False
            self._collection(namespace)
            self._catalog[namespace].options = dict(options)
            return True

    def set_indexes(self, namespace: str, indexes: Iterable[Mapping[str, Any]]) -> bool:
        """Set ``namespace``'s indexes beyond ``_id_`` (the collection created if need be):
        whether it was created."""
        with self._lock:
            created = namespace not in self._collections
            self._collection(namespace)
            self._catalog[namespace].indexes = [dict(i) for i in indexes]
            return created

    def drop(self, namespace: str) -> bool:
        with self._lock:
            self._catalog.pop(namespace, None)
            if self._collections.pop(namespace, None) is None:
                return False
            self.changes.record("drop", namespace)
            return True

    def drop_database(self, database: str) -> None:
        with self._lock:
            for namespace in [n for n in self._collections if n.split(".", 1)[0] == database]:
                self.drop(namespace)


def bson_repr(value: Any) -> str:
    """``value`` as MongoDB's messages show it (``{a: [ 1, "x" ]}``)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '"' + value.replace('"', '\\"') + '"'
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{k}: {bson_repr(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[ " + ", ".join(bson_repr(v) for v in value) + " ]" if value else "[]"
    if isinstance(value, ObjectId):
        return f"ObjectId('{value}')"
    if isinstance(value, Binary) and value.subtype == 4:
        return f'UUID("{value.as_uuid()}")'
    if isinstance(value, datetime.datetime):
        return f"new Date({int(value.timestamp() * 1000)})"
    return str(value)


# ---------------------------------------------------------------------- queries


def _lookup(document: Mapping[str, Any], path: str) -> Any:
    value: Any = document
    for part in path.split("."):
        if not isinstance(value, Mapping) or part not in value:
            return MISSING
        value = value[part]
    return value


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, bool) != isinstance(b, bool):
        return False  # (true is not 1 in MongoDB)
    try:
        return bool(a == b)
    except TypeError:
        return False


def _equal(value: Any, target: Any) -> bool:
    if value is MISSING:
        return target is None
    if _same(value, target):
        return True
    return isinstance(value, list) and any(_same(v, target) for v in value)


def _compare(value: Any, target: Any, test: str) -> bool:
    candidates = value if isinstance(value, list) else [value]
    for candidate in candidates:
        if candidate is MISSING or isinstance(candidate, bool) != isinstance(target, bool):
            continue
        try:
            if _COMPARISONS[test](candidate, target):
                return True
        except TypeError:  # (other types: MongoDB compares within a type only)
            continue
    return False


_COMPARISONS: dict[str, Any] = {
    "$gt": lambda a, b: a > b,
    "$gte": lambda a, b: a >= b,
    "$lt": lambda a, b: a < b,
    "$lte": lambda a, b: a <= b,
}


def _operator(value: Any, op: str, arg: Any) -> bool:
    if op == "$eq":
        return _equal(value, arg)
    if op == "$ne":
        return not _equal(value, arg)
    if op in _COMPARISONS:
        return _compare(value, arg, op)
    if op in ("$in", "$nin"):
        if not isinstance(arg, list):
            raise QueryError(f"{op} needs an array")
        found = any(_equal(value, a) for a in arg)
        return found if op == "$in" else not found
    if op == "$exists":
        return (value is not MISSING) == bool(arg)
    raise QueryError(f"unknown operator: {op}")


def matches(document: Mapping[str, Any], filter: Mapping[str, Any]) -> bool:
    """Whether ``document`` matches ``filter`` (see the module's doc). Raises QueryError."""
    for key, condition in filter.items():
        if key in ("$and", "$or", "$nor"):
            if not isinstance(condition, list) or not condition:
                raise QueryError(f"{key} must be a nonempty array")
            results = (matches(document, c) for c in condition)
            ok = all(results) if key == "$and" else any(results)
            if ok == (key == "$nor"):
                return False
        elif key.startswith("$"):
            raise QueryError(f"unknown top level operator: {key}")
        else:
            value = _lookup(document, key)
            if (
                isinstance(condition, Mapping)
                and condition
                and next(iter(condition)).startswith("$")
            ):
                if not all(_operator(value, op, arg) for op, arg in condition.items()):
                    return False
            elif not _equal(value, condition):
                return False
    return True


# BSON's comparison order of types (the common ones): MinKey, null, numbers, strings, objects,
# arrays, binary, ObjectId, booleans, dates, ... (anything else last)
def _rank(value: Any) -> int:
    if value is MISSING or value is None:
        return 1
    if isinstance(value, bool):
        return 8
    ranks: tuple[tuple[type | tuple[type, ...], int], ...] = (
        ((int, float), 2),
        (str, 3),
        (Mapping, 4),
        (list, 5),
        (bytes, 6),
        (bson.ObjectId, 7),
        (datetime.datetime, 9),
        (re.Pattern, 11),
    )
    for kind, rank in ranks:
        if isinstance(value, kind):
            return rank
    return 12


def compare_values(a: Any, b: Any) -> int:
    """-1, 0 or 1 as ``a`` sorts before, with or after ``b`` (BSON's order, roughly;
    :data:`MISSING` as null)."""
    ra, rb = _rank(a), _rank(b)
    if ra != rb:
        return -1 if ra < rb else 1
    if ra in (4, 5, 12):  # (objects, arrays: by their encoding, near enough for tests)
        a, b = id_key(a), id_key(b)
    elif ra == 1:
        return 0
    try:
        return -1 if a < b else (1 if a > b else 0)
    except TypeError:
        return 0


def sort_documents(
    documents: list[dict[str, Any]], sort: Mapping[str, Any]
) -> list[dict[str, Any]]:
    """``documents`` sorted by ``sort`` (``{field: 1 | -1, ...}``). Raises QueryError."""
    for direction in sort.values():
        if direction not in (1, -1):
            raise QueryError(f"bad sort direction {direction!r}: expected 1 or -1")

    def compare(x: dict[str, Any], y: dict[str, Any]) -> int:
        for field, direction in sort.items():
            order = compare_values(_lookup(x, field), _lookup(y, field))
            if order:
                return int(order * direction)
        return 0

    return sorted(documents, key=functools.cmp_to_key(compare))


def project(document: dict[str, Any], projection: Mapping[str, Any] | None) -> dict[str, Any]:
    """``document`` with the top-level fields ``projection`` includes (or excludes)."""
    if not projection:
        return document
    values = {k: bool(v) for k, v in projection.items() if k != "_id"}
    keep_id = bool(projection.get("_id", True))
    if len(set(values.values())) > 1:
        raise QueryError("a projection cannot both include and exclude fields")
    if not values:  # (``_id`` alone)
        return {k: v for k, v in document.items() if (k == "_id") == keep_id}
    if any(values.values()):  # (inclusion)
        return {k: v for k, v in document.items() if k in values or (k == "_id" and keep_id)}
    return {k: v for k, v in document.items() if k not in values and (k != "_id" or keep_id)}
