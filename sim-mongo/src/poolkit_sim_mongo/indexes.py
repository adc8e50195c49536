"""Unique indexes of the simulated cluster (beyond ``_id_``, which the store keys documents by):
the keys a document gives an index, and which keys the documents of a collection hold.

A key is a document's values at the index's fields, in the index's order, as MongoDB makes it:

* a missing field is null: two documents both missing it collide;
* an array is multikey: each element is a key (an empty array is ``undefined``); a path
  through an array of documents reaches into each (``a.b`` over ``a: [{b: 1}, {b: 2}]``: 1
  and 2; an element that is no document: null); a numeric part indexes the array;
* values compare as BSON's: numbers by value (1, 1.0 and ``Int64(1)`` are one key), a
  boolean is no number, documents field by field in order;
* a compound index's keys are every combination of its fields' keys.

A ``sparse`` index skips the documents missing all its fields; one with a
``partialFilterExpression`` holds only the documents matching it.

Rules of this module
--------------------
* Pure: specs and documents in, keys and :class:`Duplicate` out; no store, no lock (callers
  hold the store's). It imports nothing of the package: the query matcher a partial index
  needs is given (the store's :func:`~.store.matches`), and the store words the messages.
* A document never collides with itself: its keys are counted once, however many times its
  arrays hold a value.
* Not simulated: collations (a unique index with one is refused by ``createIndexes``), the
  "cannot index parallel arrays" error (two arrays in one compound key: every combination is
  a key here), the hashed, text and geo kinds (refused unique).
"""

from __future__ import annotations

import collections
import dataclasses
import decimal
import itertools
from collections.abc import Callable, Hashable, Iterable, Mapping
from typing import Any

import bson
from bson.decimal128 import Decimal128

__all__ = ["UNDEFINED", "Duplicate", "UniqueIndex", "UniqueKeys", "index_keys"]

Document = dict[str, Any]
Matcher = Callable[[Mapping[str, Any], Mapping[str, Any]], bool]


class _Undefined:
    """The key of an empty array (BSON's ``undefined``)."""

    def __repr__(self) -> str:
        return "undefined"


UNDEFINED: Any = _Undefined()
_ABSENT: Any = object()  # (a missing field: null in a key)


def _canonical(value: Any) -> Hashable:
    """``value`` as a key compares (hashable; equal as BSON's comparison has them equal)."""
    if value is None or value is _ABSENT:
        return ("null",)
    if value is UNDEFINED:
        return ("undefined",)
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, Decimal128):
        value = value.to_decimal()
    if isinstance(value, (int, float, decimal.Decimal)):
        # (int, float and Decimal that are equal hash alike; NaN is one key)
        return ("number", "NaN") if value != value else ("number", value)
    if isinstance(value, str):
        return ("string", value)
    if isinstance(value, Mapping):
        return ("object", tuple((str(k), _canonical(v)) for k, v in value.items()))
    if isinstance(value, list):
        return ("array", tuple(_canonical(v) for v in value))
    return ("bson", bytes(bson.encode({"v": value})))


def _reach(value: Any, parts: list[str]) -> list[Any]:
    """The values at path ``parts`` below ``value``, through arrays of documents (``_ABSENT``
    where there is none)."""
    if not parts:
        return [value]
    head, rest = parts[0], parts[1:]
    if isinstance(value, Mapping):
        return _reach(value[head], rest) if head in value else [_ABSENT]
    if isinstance(value, list):
        if head.isdigit() and int(head) < len(value):
            return _reach(value[int(head)], rest)
        found: list[Any] = []
        for element in value:
            found += _reach(element, parts) if isinstance(element, Mapping) else [_ABSENT]
        return found or [_ABSENT]
    return [_ABSENT]


def _field_keys(document: Mapping[str, Any], path: str) -> list[Any]:
    """One field's keys in ``document`` (arrays spread; an empty one is ``undefined``)."""
    keys: list[Any] = []
    for value in _reach(document, path.split(".")):
        if isinstance(value, list):
            keys += value if value else [UNDEFINED]
        else:
            keys.append(value)
    return keys


def index_keys(
    pattern: Mapping[str, Any], document: Mapping[str, Any], *, sparse: bool = False
) -> dict[Hashable, Document]:
    """The keys ``document`` gives an index on ``pattern``: each once, with the values it
    shows (``{field: value}``, null for a missing field); none for a ``sparse`` index when the
    document has none of the fields."""
    fields = [_field_keys(document, path) for path in pattern]
    if sparse and all(all(v is _ABSENT for v in values) for values in fields):
        return {}
    keys: dict[Hashable, Document] = {}
    for combination in itertools.product(*fields):
        key = tuple(_canonical(v) for v in combination)
        if key not in keys:
            shown = (None if v is _ABSENT else v for v in combination)
            keys[key] = dict(zip(pattern, shown, strict=True))
    return keys


@dataclasses.dataclass(frozen=True)
class Duplicate:
    """A key of unique index ``name`` (on ``pattern``) that another document holds: ``value``
    (``{field: value}``, as the new document gives it)."""

    name: str
    pattern: Document
    value: Document

    def details(self) -> Document:
        """The fields MongoDB adds to a duplicate key error (``undefined`` sent as null)."""
        value = {k: None if v is UNDEFINED else v for k, v in self.value.items()}
        return {"keyPattern": dict(self.pattern), "keyValue": value}


@dataclasses.dataclass(frozen=True)
class UniqueIndex:
    """A unique index: its ``name``, key ``pattern``, ``sparse``, ``partial`` filter."""

    name: str
    pattern: Document
    sparse: bool = False
    partial: Document | None = None

    @classmethod
    def of(cls, spec: Mapping[str, Any]) -> UniqueIndex | None:
        """The unique index of ``spec`` (as ``listIndexes`` lists it); None if not unique."""
        if not spec.get("unique"):
            return None
        partial = spec.get("partialFilterExpression")
        return cls(
            str(spec["name"]),
            dict(spec["key"]),
            bool(spec.get("sparse", False)),
            None if partial is None else dict(partial),
        )

    def keys(self, document: Mapping[str, Any], matches: Matcher) -> dict[Hashable, Document]:
        """The keys ``document`` gives this index (none if the index does not hold it)."""
        if self.partial is not None and not matches(document, self.partial):
            return {}
        return index_keys(self.pattern, document, sparse=self.sparse)


class UniqueKeys:
    """The keys that documents hold in a collection's unique indexes (``specs``: its indexes
    beyond ``_id_``, the others ignored), kept as documents come and go."""

    def __init__(
        self,
        specs: Iterable[Mapping[str, Any]],
        matches: Matcher,
        documents: Iterable[Mapping[str, Any]] = (),
    ) -> None:
        self.indexes = [i for i in map(UniqueIndex.of, specs) if i is not None]
        self._matches = matches
        self._held = [collections.Counter[Hashable]() for _ in self.indexes]
        for document in documents:
            self.add(document)

    def __bool__(self) -> bool:
        return bool(self.indexes)

    def conflict(self, document: Mapping[str, Any]) -> Duplicate | None:
        """The first key (by index, in creation order) ``document`` would give that another
        document holds; None if none."""
        for index, held in zip(self.indexes, self._held, strict=True):
            for key, value in index.keys(document, self._matches).items():
                if held[key] > 0:
                    return Duplicate(index.name, index.pattern, value)
        return None

    def add(self, document: Mapping[str, Any]) -> None:
        for index, held in zip(self.indexes, self._held, strict=True):
            held.update(iter(index.keys(document, self._matches)))

    def remove(self, document: Mapping[str, Any]) -> None:
        for index, held in zip(self.indexes, self._held, strict=True):
            held.subtract(iter(index.keys(document, self._matches)))

    def first_duplicate(self, documents: Iterable[Mapping[str, Any]]) -> Duplicate | None:
        """Add ``documents`` one after another: the first key one holds that an earlier (or one
        already here) does; None if none."""
        for document in documents:
            found = self.conflict(document)
            if found is not None:
                return found
            self.add(document)
        return None
