"""The update engine of the simulated cluster: an update document (an ``update`` statement's
``u``, a ``findAndModify``'s ``update``) parsed, applied to a document, the document an upsert
inserts, and the ``updateDescription`` of a change (its event, :mod:`.changes`).

A document whose first field is not an operator is a replacement (the ``_id`` kept); else each
field is an operator of :mod:`.operators`. Not simulated (error 2 BadValue, saying so): the
positional ``$``, ``$[]`` and ``$[<id>]`` (and so ``arrayFilters``) and ``$bit``; an
aggregation pipeline is refused by the commands (:mod:`.writes`).

Rules of this module
--------------------
* Pure: no store, no I/O, no clock but ``now`` (``$currentDate``); a document given is never
  mutated (:func:`apply` works on a deep copy).
* Every failure is an :class:`UpdateError` with MongoDB's code and message. ``execution``
  tells the errors that depend on a document (MongoDB 8 prefixes those of ``update`` with
  "Plan executor error during update :: caused by ::", ``findAndModify`` always did) from those
  of parsing, found even when nothing matches: an unknown operator, a bad argument, a conflict.
* Operators apply in MongoDB 5.0's order, whatever the operator: by path, field names
  lexicographically (numeric names numerically), so that fields are created in that order.
* Two operators on one path, or on a path and its prefix, are error 40
  ConflictingUpdateOperators, as the server parses them.
* An upsert's document starts from the query's equalities, as MongoDB's does: ``a: v``,
  ``a: {$eq: v}``, within ``$and`` or a one-clause ``$or``; a replacement takes only ``_id``.
"""

from __future__ import annotations

import copy
import dataclasses
import datetime
from collections.abc import Mapping
from typing import Any

import bson
from bson.objectid import ObjectId

from .operators import (
    ARRAY_OPERATORS,
    OPERATORS,
    Context,
    Modifier,
    UpdateError,
    bson_repr,
    get_path,
    numeric,
    same,
    type_name,
)
from .store import MISSING

__all__ = ["Update", "UpdateError", "apply", "describe", "parse", "upsert_document"]

Document = dict[str, Any]
Path = tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class Update:
    """A parsed update: a ``replacement`` document, or ``modifiers`` in the order they apply."""

    replacement: Document | None
    modifiers: tuple[Modifier, ...] = ()


# ---------------------------------------------------------------------- parsing


def _path(field: str) -> Path:
    parts = tuple(str(field).split("."))
    if "" in parts:
        raise UpdateError(
            56, f"The update path '{field}' contains an empty field name, which is not allowed."
        )
    if any(p.startswith("$") for p in parts):
        raise UpdateError(
            2, f"the positional operators ($, $[], $[<id>]) in '{field}' are not simulated"
        )
    return parts


def _order_key(path: Path) -> tuple[tuple[int, int, str], ...]:
    return tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in path)


def _check_argument(operator: str, field: str, arg: Any) -> None:
    """The checks MongoDB makes of an operator's argument when parsing."""
    if operator in ("$inc", "$mul") and not numeric(arg):
        verb = "increment" if operator == "$inc" else "multiply"
        raise UpdateError(
            14, f"Cannot {verb} with non-numeric argument: {{{field}: {bson_repr(arg)}}}"
        )
    if operator == "$pop":
        if not numeric(arg):
            raise UpdateError(9, f"Expected a number in: {field}: {bson_repr(arg)}")
        if arg not in (1, -1):
            raise UpdateError(9, f"$pop expects 1 or -1, found: {bson_repr(arg)}")
    if operator == "$currentDate" and not isinstance(arg, bool):
        if not isinstance(arg, Mapping) or set(arg) != {"$type"}:
            raise UpdateError(
                2,
                f"{bson_repr(arg)} is not valid type for $currentDate. Please use a boolean "
                "('true') or a $type expression ({$type: 'timestamp/date'}).",
            )
        if arg["$type"] not in ("date", "timestamp"):
            raise UpdateError(
                2,
                "The '$type' string field is required to be 'date' or 'timestamp': "
                "{$currentDate: {field : {$type: 'date'}}}",
            )
    if operator == "$pullAll" and not isinstance(arg, list):
        raise UpdateError(
            2, f"$pullAll requires an array argument but was given a {type_name(arg)}"
        )
    if operator in ("$push", "$addToSet") and isinstance(arg, Mapping) and "$each" in arg:
        _check_each(operator, arg)


def _check_each(operator: str, arg: Mapping[str, Any]) -> None:
    if not isinstance(arg["$each"], list):
        raise UpdateError(
            2,
            f"The argument to $each in {operator} must be an array but it was of type: "
            f"{type_name(arg['$each'])}",
        )
    if operator == "$addToSet":
        if len(arg) > 1:
            raise UpdateError(
                2, f"Found unexpected fields after $each in $addToSet: {bson_repr(arg)}"
            )
        return
    for clause, value in arg.items():
        integral = isinstance(value, (int, float)) and float(value).is_integer()
        if clause == "$slice" and (isinstance(value, bool) or not integral):
            raise UpdateError(
                2,
                "The value for $slice must be an integer value but was given type: "
                + type_name(value),
            )
        if clause == "$position" and not (isinstance(value, int) and not isinstance(value, bool)):
            raise UpdateError(
                2,
                "The value for $position must be an integer value, not of type: "
                + type_name(value),
            )
        if clause == "$sort" and not (
            value in (1, -1)
            or (isinstance(value, Mapping) and value and all(v in (1, -1) for v in value.values()))
        ):
            raise UpdateError(
                2,
                "The $sort is invalid: use 1/-1 to sort the whole element, or {field:1/-1} to sort "
                "embedded fields",
            )
        if clause not in ("$each", "$slice", "$position", "$sort"):
            raise UpdateError(2, f"Unrecognized clause in $push: {clause}")


def parse(update: Mapping[str, Any]) -> Update:
    """``update`` parsed: a replacement (no ``$`` first field) or operators. Raises
    :class:`UpdateError` (not ``execution``)."""
    if not update or not next(iter(update)).startswith("$"):
        for field in update:
            if field.startswith("$"):
                raise UpdateError(
                    52,
                    f"The dollar ($) prefixed field '{field}' in '{field}' is not allowed in the "
                    "context of an update's replacement document. Consider using an aggregation "
                    "pipeline with $replaceWith.",
                )
        return Update(replacement=dict(update))
    modifiers: list[Modifier] = []
    touched: list[Path] = []
    for operator, fields in update.items():
        if operator == "$bit":
            raise UpdateError(2, "$bit is not simulated")
        if operator not in OPERATORS:
            raise UpdateError(
                9,
                f"Unknown modifier: {operator}. Expected a valid update modifier or pipeline-style "
                "update specified as an array",
            )
        if not isinstance(fields, Mapping):
            raise UpdateError(
                9,
                f"Modifiers operate on fields but we found type {type_name(fields)} instead. For "
                f"example: {{$mod: {{<field>: ...}}}} not {{{operator}: {bson_repr(fields)}}}",
            )
        for field, arg in fields.items():
            path = _path(field)
            _check_argument(operator, field, arg)
            target: Path = ()
            if operator == "$rename":
                target = _rename_target(field, path, arg)
            for new in (path, target) if target else (path,):
                _check_conflicts(new, touched)
                touched.append(new)
            modifiers.append(Modifier(operator, path, arg, target))
    modifiers.sort(key=lambda m: _order_key(m.target or m.path))
    return Update(replacement=None, modifiers=tuple(modifiers))


def _rename_target(field: str, path: Path, arg: Any) -> Path:
    if not isinstance(arg, str):
        raise UpdateError(
            2, f"The 'to' field for $rename must be a string: {field}: {bson_repr(arg)}"
        )
    target = _path(arg)
    if target == path:
        raise UpdateError(
            2, f"The source and target field for $rename must differ: {field}: {bson_repr(arg)}"
        )
    if target[: len(path)] == path or path[: len(target)] == target:
        raise UpdateError(
            2,
            "The source and target field for $rename must not be on the same path: "
            f"{field}: {bson_repr(arg)}",
        )
    return target


def _check_conflicts(path: Path, touched: list[Path]) -> None:
    for other in touched:
        common = min(len(path), len(other))
        if path[:common] == other[:common]:
            raise UpdateError(
                40,
                f"Updating the path '{'.'.join(path)}' would create a conflict at "
                f"'{'.'.join(path[:common])}'",
            )


def apply(
    update: Update,
    document: Mapping[str, Any],
    *,
    inserting: bool = False,
    now: datetime.datetime | None = None,
) -> Document:
    """``document`` updated (a new document; ``inserting``: an upsert's, which ``$setOnInsert``
    sets). Raises :class:`UpdateError`."""
    if update.replacement is not None:
        replacement = copy.deepcopy(update.replacement)
        if (
            "_id" in document
            and "_id" in replacement
            and not same(replacement["_id"], document["_id"])
        ):
            raise UpdateError(
                66,
                "After applying the update, the (immutable) field '_id' was found to have been "
                f"altered to _id: {bson_repr(replacement['_id'])}",
                execution=True,
            )
        replacement.pop("_id", None)
        return {"_id": document["_id"], **replacement} if "_id" in document else replacement
    doc = copy.deepcopy(dict(document))
    ctx = Context(document, now or datetime.datetime.now(datetime.UTC), inserting)
    for modifier in update.modifiers:
        OPERATORS[modifier.operator](doc, modifier, ctx)
    if "_id" in document and ("_id" not in doc or not same(doc["_id"], document["_id"])):
        raise UpdateError(
            66,
            "Performing an update on the path '_id' would modify the immutable field '_id'",
            execution=True,
        )
    return doc


# ---------------------------------------------------------------------- upserts and events


def _equalities(query: Mapping[str, Any], into: Document) -> None:
    """The fields of ``query``'s equalities (``a: v``, ``a: {$eq: v}``, in ``$and`` or a
    one-clause ``$or``) set in ``into``, as an upsert starts from them."""
    for key, condition in query.items():
        if key in ("$and", "$or") and isinstance(condition, list):
            if key == "$and" or len(condition) == 1:
                for clause in condition:
                    _equalities(clause, into)
            continue
        if key.startswith("$"):
            continue
        if isinstance(condition, Mapping) and condition and next(iter(condition)).startswith("$"):
            if "$eq" not in condition:
                continue
            condition = condition["$eq"]
        if isinstance(condition, bson.Regex) or hasattr(condition, "pattern"):
            continue
        path = _path(key)
        for known in _leaves(into):
            common = min(len(known), len(path))
            if known[:common] == path[:common]:
                raise UpdateError(
                    54,
                    f"cannot infer query fields to set, path '{key}' is matched twice"
                    if known == path
                    else f"cannot infer query fields to set, both paths '{key}' and "
                    f"'{'.'.join(known)}' are matched",
                )
        node = into
        for part in path[:-1]:
            node = node.setdefault(part, {})
        node[path[-1]] = copy.deepcopy(condition)


def _leaves(document: Mapping[str, Any], prefix: Path = ()) -> list[Path]:
    found: list[Path] = []
    for key, value in document.items():
        if isinstance(value, dict) and value and (*prefix, key) != ("_id",):
            found += _leaves(value, (*prefix, key))
        else:
            found.append((*prefix, key))
    return found


def upsert_document(
    query: Mapping[str, Any], update: Update, *, now: datetime.datetime | None = None
) -> Document:
    """The document an upsert of ``update`` inserts when ``query`` matches nothing: the query's
    equalities (only its ``_id`` for a replacement), updated, ``_id`` first (a new ObjectId if
    none). Raises :class:`UpdateError`."""
    base: Document = {}
    _equalities(query, base)
    if update.replacement is not None:
        base = {"_id": base["_id"]} if "_id" in base else {}
    document = apply(update, base, inserting=True, now=now)
    identity = document.pop("_id") if "_id" in document else ObjectId()
    return {"_id": identity, **document}


def describe(update: Update, before: Mapping[str, Any], after: Mapping[str, Any]) -> Document:
    """The ``updateDescription`` of ``before`` becoming ``after`` by ``update`` (operators):
    ``updatedFields`` (a created field at its top; values appended to an array at their
    indexes), ``removedFields``, ``truncatedArrays``."""
    updated: Document = {}
    removed: list[str] = []
    truncated: list[Document] = []
    for m in update.modifiers:
        for path in (m.path, m.target) if m.target else (m.path,):
            depth = next(
                (d for d in range(1, len(path) + 1) if get_path(before, path[:d]) is MISSING), 0
            )
            if depth:  # (created, or still missing)
                created = get_path(after, path[:depth])
                if created is not MISSING:
                    updated[".".join(path[:depth])] = created
                continue
            old, new, dotted = get_path(before, path), get_path(after, path), ".".join(path)
            if new is MISSING:
                removed.append(dotted)
            elif same(old, new):
                continue
            elif m.operator in ARRAY_OPERATORS and isinstance(old, list) and isinstance(new, list):
                if len(new) > len(old) and same(new[: len(old)], old):
                    updated.update({f"{dotted}.{i}": new[i] for i in range(len(old), len(new))})
                elif len(new) < len(old) and same(old[: len(new)], new):
                    truncated.append({"field": dotted, "newSize": len(new)})
                else:
                    updated[dotted] = new
            else:
                updated[dotted] = new
    return {"updatedFields": updated, "removedFields": removed, "truncatedArrays": truncated}
