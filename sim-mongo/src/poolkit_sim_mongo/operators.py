"""The update operators of the simulated cluster (:mod:`.updates` parses an update document
and applies it with them): what each does to a document, on dotted paths, in MongoDB's result
types and with its error codes and messages.

``$set $setOnInsert $currentDate $unset $inc $mul $min $max $rename``; on arrays ``$push``
(``$each $position $slice $sort``), ``$addToSet`` (``$each``), ``$pull`` (a value, a condition
on the element, or a query on element documents), ``$pullAll``, ``$pop``. A path's missing
parts are created as sub-documents by the operators that set (not by ``$unset``, ``$pull``,
``$pop``, a ``$rename``'s source); a numeric part indexes an array (padded with nulls).

Rules of this module
--------------------
* Each operator works in place on the document it is given, which :func:`.updates.apply` has
  copied; values taken from the update are copied in.
* Every failure is an :class:`UpdateError`: ``execution`` tells those that depend on the
  document (all here but the argument checks of :mod:`.updates`).
"""

from __future__ import annotations

import copy
import dataclasses
import datetime
import decimal
import functools
from collections.abc import Callable, Mapping
from typing import Any

import bson
from bson.decimal128 import Decimal128
from bson.int64 import Int64
from bson.objectid import ObjectId

from .store import MISSING, bson_repr, compare_values, matches

__all__ = [
    "ARRAY_OPERATORS",
    "OPERATORS",
    "Context",
    "Modifier",
    "UpdateError",
    "bson_repr",
    "get_path",
    "numeric",
    "same",
    "type_name",
]

Document = dict[str, Any]
Path = tuple[str, ...]
_INT32 = range(-(2**31), 2**31)
_INT64 = range(-(2**63), 2**63)
ARRAY_OPERATORS = frozenset({"$push", "$addToSet", "$pull", "$pullAll", "$pop"})
_CREATING = frozenset(
    {"$set", "$setOnInsert", "$inc", "$mul", "$min", "$max", "$currentDate", "$push", "$addToSet"}
)


class UpdateError(ValueError):
    """An update's failure: MongoDB's ``code`` and ``errmsg``; ``execution``: found applying it
    to a document (not parsing it); ``details``: fields the error carries besides (a duplicate
    key's ``keyPattern`` and ``keyValue``)."""

    def __init__(
        self,
        code: int,
        errmsg: str,
        *,
        execution: bool = False,
        details: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(errmsg)
        self.code = code
        self.errmsg = errmsg
        self.execution = execution
        self.details = dict(details or {})


@dataclasses.dataclass(frozen=True)
class Modifier:
    operator: str
    path: Path
    arg: Any
    target: Path = ()  # ($rename's)


# ---------------------------------------------------------------------- values


def type_name(value: Any) -> str:
    """MongoDB's name of ``value``'s BSON type."""
    if value is None or value is MISSING:
        return "null"
    names: tuple[tuple[type | tuple[type, ...], str], ...] = (
        (bool, "bool"),
        (Int64, "long"),
        (int, "int"),
        (float, "double"),
        (str, "string"),
        (Mapping, "object"),
        (list, "array"),
        (bytes, "binData"),
        (ObjectId, "objectId"),
        (datetime.datetime, "date"),
        (bson.Timestamp, "timestamp"),
        (Decimal128, "decimal"),
        (bson.Regex, "regex"),
    )
    for kind, name in names:
        if isinstance(value, kind):
            return "long" if name == "int" and value not in _INT32 else name
    return type(value).__name__


def numeric(value: Any) -> bool:
    return isinstance(value, (int, float, Decimal128)) and not isinstance(value, bool)


def same(a: Any, b: Any) -> bool:
    """BSON-identical (types and field order included)."""
    return bytes(bson.encode({"v": a})) == bytes(bson.encode({"v": b}))


def _arithmetic(operator: str, current: Any, arg: Any, document: Mapping[str, Any]) -> Any:
    """``current`` plus (``$inc``) or times (``$mul``) ``arg``, in MongoDB's result type."""
    if isinstance(current, Decimal128) or isinstance(arg, Decimal128):
        a, b = (
            v.to_decimal() if isinstance(v, Decimal128) else decimal.Decimal(v)
            for v in (current, arg)
        )
        return Decimal128(a + b if operator == "$inc" else a * b)
    if isinstance(current, float) or isinstance(arg, float):
        return float(current) + float(arg) if operator == "$inc" else float(current) * float(arg)
    result = current + arg if operator == "$inc" else current * arg
    if result not in _INT64:
        raise UpdateError(
            2,
            f"Failed to apply {operator} operations to current value "
            f"({'(NumberLong)' if isinstance(current, Int64) else '(NumberInt)'}{current}) for "
            f"document {{_id: {bson_repr(document.get('_id'))}}}",
            execution=True,
        )
    if isinstance(current, Int64) or isinstance(arg, Int64) or result not in _INT32:
        return Int64(result)
    return int(result)


# ---------------------------------------------------------------------- paths in a document


def _child(node: Any, part: str) -> Any:
    if isinstance(node, dict):
        return node.get(part, MISSING)
    if isinstance(node, list) and part.isdigit() and int(part) < len(node):
        return node[int(part)]
    return MISSING


def _put(node: Any, part: str, value: Any) -> None:
    if isinstance(node, dict):
        node[part] = value
        return
    index = int(part)
    node.extend([None] * (index + 1 - len(node)))
    node[index] = value


def get_path(document: Any, path: Path) -> Any:
    for part in path:
        document = _child(document, part)
    return document


def _not_viable(part: str, name: str, element: Any) -> UpdateError:
    return UpdateError(
        28,
        f"Cannot create field '{part}' in element {{{name}: {bson_repr(element)}}}",
        execution=True,
    )


def _parent(document: Document, path: Path, create: bool) -> Any:
    """The document or array holding ``path``'s last part (the missing ones created if
    ``create``), or None if there is none."""
    node: Any = document
    for depth, part in enumerate(path[:-1]):
        if isinstance(node, list) and not part.isdigit():
            if not create:
                return None
            raise _not_viable(part, path[depth - 1], node)
        child = _child(node, part)
        if child is MISSING and create:
            child = {}
            _put(node, part, child)
        if not isinstance(child, (dict, list)):
            if not create:
                return None
            raise _not_viable(path[depth + 1], part, child)
        node = child
    if isinstance(node, list) and not path[-1].isdigit():
        if not create:
            return None
        raise _not_viable(path[-1], path[-2], node)
    return node


# ---------------------------------------------------------------------- applying


@dataclasses.dataclass
class Context:
    original: Mapping[str, Any]
    now: datetime.datetime
    inserting: bool


def _set(doc: Document, m: Modifier, ctx: Context) -> None:
    if m.operator == "$setOnInsert" and not ctx.inserting:
        return
    value: Any = copy.deepcopy(m.arg)
    if m.operator == "$currentDate":
        moment = ctx.now.replace(microsecond=ctx.now.microsecond // 1000 * 1000)
        timestamp = isinstance(m.arg, Mapping) and m.arg["$type"] == "timestamp"
        value = bson.Timestamp(int(moment.timestamp()), 1) if timestamp else moment
    _put(_parent(doc, m.path, True), m.path[-1], value)


def _unset(doc: Document, m: Modifier, ctx: Context) -> None:
    parent = _parent(doc, m.path, False)
    if isinstance(parent, dict):
        parent.pop(m.path[-1], None)
    elif parent is not None and _child(parent, m.path[-1]) is not MISSING:
        parent[int(m.path[-1])] = None  # (an array's element: null, as MongoDB does)


def _arithmetic_operator(doc: Document, m: Modifier, ctx: Context) -> None:
    parent = _parent(doc, m.path, True)
    current = _child(parent, m.path[-1])
    if current is MISSING:
        value = m.arg if m.operator == "$inc" else _arithmetic("$mul", 0, m.arg, doc)
    elif not numeric(current):
        raise UpdateError(
            14,
            f"Cannot apply {m.operator} to a value of non-numeric type. "
            f"{{_id: {bson_repr(ctx.original.get('_id'))}}} has the field '{m.path[-1]}' of "
            f"non-numeric type {type_name(current)}",
            execution=True,
        )
    else:
        value = _arithmetic(m.operator, current, m.arg, ctx.original)
    _put(parent, m.path[-1], value)


def _min_max(doc: Document, m: Modifier, ctx: Context) -> None:
    parent = _parent(doc, m.path, True)
    current = _child(parent, m.path[-1])
    order = compare_values(m.arg, current) if current is not MISSING else 0
    if current is MISSING or order == (-1 if m.operator == "$min" else 1):
        _put(parent, m.path[-1], copy.deepcopy(m.arg))


def _rename(doc: Document, m: Modifier, ctx: Context) -> None:
    for path, role in ((m.path, "source"), (m.target, "destination")):
        for depth in range(1, len(path)):
            if isinstance(get_path(doc, path[:depth]), list):
                raise UpdateError(
                    2,
                    f"The {role} field cannot be an array element, '{'.'.join(path)}' in doc "
                    f"with _id: {bson_repr(doc.get('_id'))} has an array field called "
                    f"'{path[depth - 1]}'",
                    execution=True,
                )
    value = get_path(doc, m.path)
    if value is MISSING:
        return
    _unset(doc, m, ctx)
    _put(_parent(doc, m.target, True), m.target[-1], value)


def _array(doc: Document, m: Modifier, ctx: Context) -> list[Any] | None:
    """The array ``m`` works on (a new one if missing and ``m`` creates), or None: no-op."""
    parent = _parent(doc, m.path, m.operator in _CREATING)
    current = MISSING if parent is None else _child(parent, m.path[-1])
    if current is MISSING:
        if parent is None or m.operator not in _CREATING:
            return None
        current = []
        _put(parent, m.path[-1], current)
    if not isinstance(current, list):
        field, kind = m.path[-1], type_name(current)
        messages = {
            "$push": (
                2,
                f"The field '{field}' must be an array but is of type {kind} in document "
                f"{{_id: {bson_repr(ctx.original.get('_id'))}}}",
            ),
            "$addToSet": (
                2,
                f"Cannot apply $addToSet to non-array field. Field named '{field}' "
                f"has non-array type {kind}",
            ),
            "$pop": (
                14,
                f"Path '{'.'.join(m.path)}' contains an element of non-array type '{kind}'",
            ),
        }
        code, errmsg = messages.get(m.operator, (2, "Cannot apply $pull to a non-array value"))
        raise UpdateError(code, errmsg, execution=True)
    return current


def _push(doc: Document, m: Modifier, ctx: Context) -> None:
    array = _array(doc, m, ctx)
    assert array is not None
    spec: Mapping[str, Any] = (
        m.arg if isinstance(m.arg, Mapping) and "$each" in m.arg else {"$each": [m.arg]}
    )
    values = copy.deepcopy(spec["$each"])
    if m.operator == "$addToSet":
        for value in values:
            if not any(compare_values(value, e) == 0 for e in array):
                array.append(value)
        return
    position = int(spec.get("$position", len(array)))
    index = position if position >= 0 else max(len(array) + position, 0)
    array[index:index] = values
    if "$sort" in spec:
        array[:] = sorted(array, key=functools.cmp_to_key(_element_order(spec["$sort"])))
    if "$slice" in spec:
        size = int(spec["$slice"])
        array[:] = array[:size] if size >= 0 else array[max(len(array) + size, 0) :]


def _element_order(sort: Any) -> Callable[[Any, Any], int]:
    def compare(a: Any, b: Any) -> int:
        if not isinstance(sort, Mapping):
            return compare_values(a, b) * int(sort)
        for field, direction in sort.items():
            order = compare_values(
                *(
                    get_path(e, tuple(field.split("."))) if isinstance(e, dict) else MISSING
                    for e in (a, b)
                )
            )
            if order:
                return order * int(direction)
        return 0

    return compare


def _pull(doc: Document, m: Modifier, ctx: Context) -> None:
    array = _array(doc, m, ctx)
    if array is None:
        return
    if m.operator == "$pop":
        if array:
            array.pop(-1 if m.arg == 1 else 0)
        return
    if m.operator == "$pullAll":
        array[:] = [e for e in array if not any(compare_values(e, v) == 0 for v in m.arg)]
        return
    condition = m.arg
    if isinstance(condition, Mapping) and condition and next(iter(condition)).startswith("$"):
        doomed: Callable[[Any], bool] = lambda e: matches({"v": e}, {"v": condition})  # noqa: E731
    elif isinstance(condition, Mapping):
        doomed = lambda e: isinstance(e, dict) and matches(e, condition)  # noqa: E731
    else:
        doomed = lambda e: compare_values(e, condition) == 0  # noqa: E731
    array[:] = [e for e in array if not doomed(e)]


OPERATORS: dict[str, Callable[[Document, Modifier, Context], None]] = {
    "$set": _set,
    "$setOnInsert": _set,
    "$currentDate": _set,
    "$unset": _unset,
    "$inc": _arithmetic_operator,
    "$mul": _arithmetic_operator,
    "$min": _min_max,
    "$max": _min_max,
    "$rename": _rename,
    "$push": _push,
    "$addToSet": _push,
    "$pull": _pull,
    "$pullAll": _pull,
    "$pop": _pull,
}
