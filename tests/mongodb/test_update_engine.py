"""The simulator's update engine (``poolkit_sim_mongo.updates``, ``.operators``) on its own:
each operator's result as MongoDB gives it, the errors with MongoDB's codes and messages, the
document an upsert inserts, the ``updateDescription`` of a change; and properties over random
documents and updates (hypothesis): an update never mutates its input, keeps ``_id``, and its
description replayed as ``$set``/``$unset`` gives the same document.
"""

from __future__ import annotations

import copy
import datetime
from typing import Any

import bson
import pytest
from bson.int64 import Int64
from bson.objectid import ObjectId
from hypothesis import given, settings
from hypothesis import strategies as st

from poolkit_sim_mongo.operators import bson_repr, get_path, type_name
from poolkit_sim_mongo.store import MISSING
from poolkit_sim_mongo.updates import (
    UpdateError,
    apply,
    describe,
    parse,
    upsert_document,
)

Document = dict[str, Any]
NOW = datetime.datetime(2024, 5, 17, 12, 30, 45, 123456, tzinfo=datetime.UTC)


def updated(document: Document, update: Document, **options: Any) -> Document:
    return apply(parse(update), document, now=NOW, **options)


def failure(document: Document, update: Document) -> UpdateError:
    with pytest.raises(UpdateError) as caught:
        updated(document, update)
    return caught.value


@pytest.mark.parametrize(
    ("document", "update", "expected"),
    [
        # $set: dotted paths create sub-documents; numeric parts index arrays, padded with null
        ({"_id": 1}, {"$set": {"a.b.c": 1}}, {"_id": 1, "a": {"b": {"c": 1}}}),
        ({"_id": 1, "a": {"x": 0}}, {"$set": {"a.y": 2}}, {"_id": 1, "a": {"x": 0, "y": 2}}),
        ({"_id": 1, "r": [1]}, {"$set": {"r.3": "x"}}, {"_id": 1, "r": [1, None, None, "x"]}),
        ({"_id": 1, "r": [{"a": 1}]}, {"$set": {"r.0.a": 2}}, {"_id": 1, "r": [{"a": 2}]}),
        ({"_id": 1, "a": 1}, {"$set": {"_id": 1, "a": 2}}, {"_id": 1, "a": 2}),  # (same _id)
        ({"_id": 1}, {"$set": {}}, {"_id": 1}),  # (an empty operand: no-op since 5.0)
        # new fields in lexicographic order, whatever the operators' order (MongoDB 5.0+)
        (
            {"_id": 1},
            {"$set": {"b": 1, "a": 1}, "$inc": {"aa": 1}},
            {"_id": 1, "a": 1, "aa": 1, "b": 1},
        ),
        ({"_id": 1, "z": 0}, {"$set": {"z": 1, "c": 1}}, {"_id": 1, "z": 1, "c": 1}),
        ({"_id": 1, "a": {}}, {"$set": {"a.10": 1, "a.9": 1}}, {"_id": 1, "a": {"9": 1, "10": 1}}),
        # $unset: absent paths are no-ops; an array's element becomes null
        (
            {"_id": 1, "a": 1, "b": {"c": 1}},
            {"$unset": {"a": "", "b.c": "", "x.y": ""}},
            {"_id": 1, "b": {}},
        ),
        ({"_id": 1, "r": [1, 2]}, {"$unset": {"r.0": 1}}, {"_id": 1, "r": [None, 2]}),
        # $inc / $mul: types as MongoDB's (int32 overflow promotes to long)
        ({"_id": 1, "n": 1}, {"$inc": {"n": 2, "m": -1}}, {"_id": 1, "n": 3, "m": -1}),
        ({"_id": 1, "n": 1}, {"$inc": {"n": 0.5}}, {"_id": 1, "n": 1.5}),
        ({"_id": 1, "n": 2**31 - 1}, {"$inc": {"n": 1}}, {"_id": 1, "n": Int64(2**31)}),
        ({"_id": 1, "n": Int64(5)}, {"$inc": {"n": 1}}, {"_id": 1, "n": Int64(6)}),
        ({"_id": 1, "n": 3}, {"$mul": {"n": 4, "m": 2.5}}, {"_id": 1, "n": 12, "m": 0.0}),
        # $min / $max: BSON order, absent fields set
        (
            {"_id": 1, "lo": 5, "hi": 5},
            {"$min": {"lo": 3, "x": 1}, "$max": {"hi": 3}},
            {"_id": 1, "lo": 3, "hi": 5, "x": 1},
        ),
        (
            {"_id": 1, "v": 5},
            {"$max": {"v": "text"}},
            {"_id": 1, "v": "text"},
        ),  # (strings > numbers)
        # $rename: moves the value (the target's place: created last in order)
        ({"_id": 1, "a": 1, "b": 2}, {"$rename": {"a": "c.d"}}, {"_id": 1, "b": 2, "c": {"d": 1}}),
        ({"_id": 1, "b": 2}, {"$rename": {"a": "c"}}, {"_id": 1, "b": 2}),  # (no source: no-op)
        # $push with $each / $position / $sort / $slice
        ({"_id": 1}, {"$push": {"r": 1}}, {"_id": 1, "r": [1]}),
        ({"_id": 1, "r": [1]}, {"$push": {"r": [2]}}, {"_id": 1, "r": [1, [2]]}),
        (
            {"_id": 1, "r": [1, 4]},
            {"$push": {"r": {"$each": [2, 3], "$position": 1}}},
            {"_id": 1, "r": [1, 2, 3, 4]},
        ),
        (
            {"_id": 1, "r": [1, 4]},
            {"$push": {"r": {"$each": [9], "$position": -1}}},
            {"_id": 1, "r": [1, 9, 4]},
        ),
        (
            {"_id": 1, "r": [3, 1]},
            {"$push": {"r": {"$each": [2], "$sort": -1, "$slice": 2}}},
            {"_id": 1, "r": [3, 2]},
        ),
        (
            {"_id": 1, "r": [1, 2]},
            {"$push": {"r": {"$each": [3], "$slice": -2}}},
            {"_id": 1, "r": [2, 3]},
        ),
        (
            {"_id": 1, "r": [{"s": 2}, {"s": 1}]},
            {"$push": {"r": {"$each": [{"s": 3}], "$sort": {"s": 1}}}},
            {"_id": 1, "r": [{"s": 1}, {"s": 2}, {"s": 3}]},
        ),
        # $addToSet: a value once (1 and 1.0 are one), $each
        (
            {"_id": 1, "r": [1, "a"]},
            {"$addToSet": {"r": {"$each": [1.0, "b", "b"]}}},
            {"_id": 1, "r": [1, "a", "b"]},
        ),
        ({"_id": 1, "r": [{"a": 1}]}, {"$addToSet": {"r": {"a": 1}}}, {"_id": 1, "r": [{"a": 1}]}),
        # $pull: a value, a condition on the element, a query on element documents
        ({"_id": 1, "r": [1, 2, 1, 3]}, {"$pull": {"r": 1}}, {"_id": 1, "r": [2, 3]}),
        ({"_id": 1, "r": [5, 6, 7, 8]}, {"$pull": {"r": {"$gte": 7}}}, {"_id": 1, "r": [5, 6]}),
        ({"_id": 1, "r": [5, 6, 7]}, {"$pull": {"r": {"$in": [5, 7]}}}, {"_id": 1, "r": [6]}),
        (
            {"_id": 1, "r": [{"s": 8, "i": "B", "x": 1}, {"s": 8, "i": "C"}, 8]},
            {"$pull": {"r": {"s": 8, "i": "B"}}},
            {"_id": 1, "r": [{"s": 8, "i": "C"}, 8]},
        ),
        ({"_id": 1, "r": [[1, 2], [2, 1]]}, {"$pull": {"r": [1, 2]}}, {"_id": 1, "r": [[2, 1]]}),
        ({"_id": 1, "r": [1, 2, 3, 1]}, {"$pullAll": {"r": [1, 3]}}, {"_id": 1, "r": [2]}),
        ({"_id": 1}, {"$pull": {"r": 1}}, {"_id": 1}),  # (absent: no-op, nothing created)
        # $pop
        ({"_id": 1, "r": [1, 2, 3]}, {"$pop": {"r": 1}}, {"_id": 1, "r": [1, 2]}),
        ({"_id": 1, "r": [1, 2, 3]}, {"$pop": {"r": -1}}, {"_id": 1, "r": [2, 3]}),
        ({"_id": 1, "r": []}, {"$pop": {"r": 1}}, {"_id": 1, "r": []}),
        # $setOnInsert: only in an upsert's insert
        ({"_id": 1, "a": 1}, {"$setOnInsert": {"b": 1}}, {"_id": 1, "a": 1}),
        # a replacement keeps _id (first), drops the other fields
        ({"_id": 1, "a": 1, "b": 2}, {"c": 3}, {"_id": 1, "c": 3}),
        ({"_id": 1, "a": 1}, {"c": 3, "_id": 1}, {"_id": 1, "c": 3}),
        ({"_id": 1, "a": 1}, {}, {"_id": 1}),
    ],
)
def test_operators_as_mongodb_applies_them(
    document: Document, update: Document, expected: Document
) -> None:
    before = copy.deepcopy(document)
    after = updated(document, update)
    assert after == expected
    assert list(after) == list(expected)  # (field order too)
    assert bson.encode(after) == bson.encode(expected)  # (and types: int, long, double)
    assert document == before  # (never mutated)


def test_current_date_is_a_date_or_a_timestamp_of_now() -> None:
    after = updated(
        {"_id": 1},
        {"$currentDate": {"d": True, "t": {"$type": "timestamp"}, "e": {"$type": "date"}}},
    )
    assert after["d"] == after["e"] == NOW.replace(microsecond=123000)  # (milliseconds)
    assert after["t"] == bson.Timestamp(int(NOW.timestamp()), 1)


def test_set_on_insert_applies_when_inserting() -> None:
    assert updated({}, {"$setOnInsert": {"b": 1}, "$set": {"a": 1}}, inserting=True) == {
        "a": 1,
        "b": 1,
    }


@pytest.mark.parametrize(
    ("document", "update", "code", "message", "execution"),
    [
        # found parsing (even with no document matched)
        (
            {},
            {"$foo": {"a": 1}},
            9,
            "Unknown modifier: $foo. Expected a valid update modifier or pipeline-style update "
            "specified as an array",
            False,
        ),
        ({}, {"$set": {"a": 1}, "b": 2}, 9, "Unknown modifier: b.", False),
        ({}, {"$set": 1}, 9, "Modifiers operate on fields but we found type int instead.", False),
        (
            {},
            {"$set": {"a": 1}, "$inc": {"a": 1}},
            40,
            "Updating the path 'a' would create a conflict at 'a'",
            False,
        ),
        (
            {},
            {"$set": {"a.b": 1}, "$unset": {"a": 1}},
            40,
            "Updating the path 'a' would create a conflict at 'a'",
            False,
        ),
        (
            {},
            {"$set": {"a": 1, "a.b": 1}},
            40,
            "Updating the path 'a.b' would create a conflict at 'a'",
            False,
        ),
        (
            {},
            {"$rename": {"a": "b"}, "$set": {"b.c": 1}},
            40,
            "Updating the path 'b.c' would create a conflict at 'b'",
            False,
        ),
        ({}, {"$pop": {"a": 2}}, 9, "$pop expects 1 or -1, found: 2", False),
        (
            {},
            {"$rename": {"a": "a"}},
            2,
            'The source and target field for $rename must differ: a: "a"',
            False,
        ),
        (
            {},
            {"$rename": {"a": "a.b"}},
            2,
            "The source and target field for $rename must not be on the same path",
            False,
        ),
        ({}, {"$rename": {"a": 1}}, 2, "The 'to' field for $rename must be a string: a: 1", False),
        (
            {},
            {"$inc": {"a": "x"}},
            14,
            'Cannot increment with non-numeric argument: {a: "x"}',
            False,
        ),
        (
            {},
            {"$mul": {"a": True}},
            14,
            "Cannot multiply with non-numeric argument: {a: true}",
            False,
        ),
        (
            {},
            {"$set": {"a..b": 1}},
            56,
            "The update path 'a..b' contains an empty field name, which is not allowed.",
            False,
        ),
        ({}, {"$set": {"r.$": 1}}, 2, "not simulated", False),
        ({}, {"$set": {"r.$[]": 1}}, 2, "not simulated", False),
        ({}, {"$bit": {"a": {"and": 1}}}, 2, "not simulated", False),
        (
            {},
            {"a": 1, "$set": {"b": 1}},
            52,
            "The dollar ($) prefixed field '$set' in '$set' is not allowed in the context of an "
            "update's replacement document.",
            False,
        ),
        (
            {},
            {"$push": {"r": {"$each": 1}}},
            2,
            "The argument to $each in $push must be an array but it was of type: int",
            False,
        ),
        (
            {},
            {"$push": {"r": {"$each": [], "$foo": 1}}},
            2,
            "Unrecognized clause in $push: $foo",
            False,
        ),
        (
            {},
            {"$currentDate": {"d": {"$type": "x"}}},
            2,
            "The '$type' string field is required to be 'date' or 'timestamp'",
            False,
        ),
        # found applying it to a document
        (
            {"_id": 1, "a": "s"},
            {"$inc": {"a": 1}},
            14,
            "Cannot apply $inc to a value of non-numeric type. {_id: 1} has the field 'a' of "
            "non-numeric type string",
            True,
        ),
        (
            {"_id": 1, "a": 5},
            {"$set": {"a.b": 1}},
            28,
            "Cannot create field 'b' in element {a: 5}",
            True,
        ),
        (
            {"_id": 1, "a": [1, 2]},
            {"$set": {"a.b": 1}},
            28,
            "Cannot create field 'b' in element {a: [ 1, 2 ]}",
            True,
        ),
        (
            {"_id": 1, "a": 1},
            {"$push": {"a": 2}},
            2,
            "The field 'a' must be an array but is of type int in document {_id: 1}",
            True,
        ),
        (
            {"_id": 1, "a": 1},
            {"$addToSet": {"a": 2}},
            2,
            "Cannot apply $addToSet to non-array field. Field named 'a' has non-array type int",
            True,
        ),
        (
            {"_id": 1, "a": 1},
            {"$pull": {"a": 2}},
            2,
            "Cannot apply $pull to a non-array value",
            True,
        ),
        (
            {"_id": 1, "a": 1},
            {"$pop": {"a": 1}},
            14,
            "Path 'a' contains an element of non-array type 'int'",
            True,
        ),
        (
            {"_id": 1, "a": 1},
            {"$set": {"_id": 2}},
            66,
            "Performing an update on the path '_id' would modify the immutable field '_id'",
            True,
        ),
        (
            {"_id": 1, "a": 1},
            {"$unset": {"_id": 1}},
            66,
            "would modify the immutable field '_id'",
            True,
        ),
        (
            {"_id": 1},
            {"_id": 2, "a": 1},
            66,
            "After applying the update, the (immutable) field '_id' was found to have been "
            "altered to _id: 2",
            True,
        ),
        (
            {"_id": 1, "n": Int64(2**63 - 1)},
            {"$inc": {"n": 1}},
            2,
            "Failed to apply $inc operations to current value ((NumberLong)9223372036854775807) "
            "for document {_id: 1}",
            True,
        ),
        (
            {"_id": 1, "a": [{"b": 1}]},
            {"$rename": {"a.0.b": "c"}},
            2,
            "The source field cannot be an array element",
            True,
        ),
    ],
)
def test_errors_carry_mongodbs_codes_and_messages(
    document: Document, update: Document, code: int, message: str, execution: bool
) -> None:
    error = failure(document, update)
    assert error.code == code
    assert message in error.errmsg
    assert error.execution is execution


def test_upsert_document_starts_from_the_querys_equalities() -> None:
    query = {"a": 1, "b.c": 2, "x": {"$gt": 1}, "$and": [{"d": {"$eq": 3}}], "$or": [{"e": 4}]}
    doc = upsert_document(query, parse({"$set": {"f": 5}, "$setOnInsert": {"g": 6}}))
    assert isinstance(doc.pop("_id"), ObjectId)
    assert doc == {"a": 1, "b": {"c": 2}, "d": 3, "e": 4, "f": 5, "g": 6}
    # _id from the query, first; a replacement takes only it
    assert list(upsert_document({"k": 1, "_id": 7}, parse({"$set": {"v": 1}}))) == ["_id", "k", "v"]
    assert upsert_document({"k": 1, "_id": 7}, parse({"v": 1})) == {"_id": 7, "v": 1}
    assert upsert_document({"$or": [{"a": 1}, {"a": 2}]}, parse({"v": 1}))["v"] == 1
    # the query's _id is immutable
    with pytest.raises(UpdateError) as caught:
        upsert_document({"_id": 7}, parse({"$set": {"_id": 8}}))
    assert caught.value.code == 66
    with pytest.raises(UpdateError) as caught:
        upsert_document({"_id": 7}, parse({"_id": 8}))
    assert caught.value.code == 66
    with pytest.raises(UpdateError) as caught:
        upsert_document({"a": 1, "$and": [{"a": 2}]}, parse({"$set": {"v": 1}}))
    assert (caught.value.code, caught.value.errmsg) == (
        54,
        "cannot infer query fields to set, path 'a' is matched twice",
    )
    with pytest.raises(UpdateError) as caught:
        upsert_document({"a.b": 1, "a": {"$eq": 2}}, parse({"$set": {"v": 1}}))
    assert caught.value.code == 54


@pytest.mark.parametrize(
    ("document", "update", "description"),
    [
        ({"_id": 1, "a": 1, "b": 2}, {"$set": {"a": 5}, "$unset": {"b": 1}}, ({"a": 5}, ["b"], [])),
        ({"_id": 1, "a": {"x": 1}}, {"$set": {"a.y": 2}}, ({"a.y": 2}, [], [])),
        (
            {"_id": 1},
            {"$set": {"a.b.c": 1}},
            ({"a": {"b": {"c": 1}}}, [], []),
        ),  # (created: at its top)
        ({"_id": 1, "a": 1}, {"$set": {"a": 1}}, ({}, [], [])),  # (unchanged)
        ({"_id": 1, "r": [1]}, {"$push": {"r": {"$each": [2, 3]}}}, ({"r.1": 2, "r.2": 3}, [], [])),
        ({"_id": 1, "r": [1, 2, 3]}, {"$pop": {"r": 1}}, ({}, [], [{"field": "r", "newSize": 2}])),
        ({"_id": 1, "r": [1, 2, 3]}, {"$pull": {"r": 1}}, ({"r": [2, 3]}, [], [])),
        ({"_id": 1, "a": 1}, {"$rename": {"a": "b"}}, ({"b": 1}, ["a"], [])),
        ({"_id": 1, "r": [1, 2]}, {"$set": {"r.1": 5}}, ({"r.1": 5}, [], [])),
    ],
)
def test_update_descriptions(
    document: Document, update: Document, description: tuple[Any, ...]
) -> None:
    parsed = parse(update)
    got = describe(parsed, document, apply(parsed, document))
    assert (got["updatedFields"], got["removedFields"], got["truncatedArrays"]) == description


def test_values_in_messages_and_type_names() -> None:
    assert bson_repr({"a": [1, "x", None, True], "o": ObjectId("0" * 24)}) == (
        "{a: [ 1, \"x\", null, true ], o: ObjectId('000000000000000000000000')}"
    )
    samples: list[Any] = [1, 2**40, Int64(1), 1.5, "s", True, None, [], {}]
    assert [type_name(v) for v in samples] == [
        "int",
        "long",
        "long",
        "double",
        "string",
        "bool",
        "null",
        "array",
        "object",
    ]


# ---------------------------------------------------------------------- properties

names = st.sampled_from(["a", "b", "c", "0", "1"])
scalars = st.one_of(st.integers(-5, 5), st.text("xy", max_size=2), st.booleans(), st.none())
values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(names, inner, max_size=3)),
    max_leaves=6,
)
documents = st.dictionaries(names, values, max_size=4).map(lambda d: {"_id": 1, **d})
paths = st.lists(names, min_size=1, max_size=3).map(".".join)
updates = st.dictionaries(
    st.sampled_from(
        ["$set", "$unset", "$inc", "$push", "$addToSet", "$pull", "$pop", "$max", "$rename"]
    ),
    st.dictionaries(
        paths, st.one_of(st.integers(-3, 3), st.sampled_from([1, -1])), min_size=1, max_size=2
    ),
    min_size=1,
    max_size=3,
).map(lambda u: {op: ({k: "z." + k for k in f} if op == "$rename" else f) for op, f in u.items()})


def applied(document: Document, update: Document) -> Document | None:
    """The update applied, or None where MongoDB too refuses it."""
    try:
        return apply(parse(update), document)
    except UpdateError:
        return None


@settings(max_examples=300, deadline=None)
@given(documents, updates)
def test_an_update_never_mutates_its_input_and_keeps_id(
    document: Document, update: Document
) -> None:
    before = copy.deepcopy(document)
    after = applied(document, update)
    assert bson.encode(document) == bson.encode(before)
    if after is not None:
        assert next(iter(after)) == "_id" and after["_id"] == 1


@settings(max_examples=300, deadline=None)
@given(documents, updates)
def test_a_description_replayed_gives_the_same_document(
    document: Document, update: Document
) -> None:
    """What a change stream's consumer does with an update event: set ``updatedFields``, unset
    ``removedFields``, truncate ``truncatedArrays``; it must reach the document the server has."""
    after = applied(document, update)
    if after is None:
        return
    description = describe(parse(update), document, after)
    replay: Document = {}
    if description["updatedFields"]:
        replay["$set"] = description["updatedFields"]
    if description["removedFields"]:
        replay["$unset"] = dict.fromkeys(description["removedFields"], "")
    rebuilt = apply(parse(replay), document) if replay else copy.deepcopy(document)
    for truncated in description["truncatedArrays"]:
        array = get_path(rebuilt, tuple(truncated["field"].split(".")))
        del array[truncated["newSize"] :]
    assert bson.encode(rebuilt) == bson.encode(after)


@settings(max_examples=200, deadline=None)
@given(documents, paths, values)
def test_set_then_read_back(document: Document, path: str, value: Any) -> None:
    after = applied(document, {"$set": {path: value}})
    if after is not None:
        assert bson.encode({"v": get_path(after, tuple(path.split(".")))}) == bson.encode(
            {"v": value}
        )
    else:  # (refused only where a part of the path is no document or array, or _id changes)
        assert (
            path.split(".")[0] == "_id"
            or get_path(document, tuple(path.split(".")[:1])) is not MISSING
        )


@settings(max_examples=200, deadline=None)
@given(documents, paths, st.lists(st.integers(-3, 3), max_size=4))
def test_add_to_set_is_idempotent(document: Document, path: str, items: list[int]) -> None:
    update = {"$addToSet": {path: {"$each": items}}}
    once = applied(document, update)
    if once is not None:
        assert applied(once, update) == once
