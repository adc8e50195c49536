"""The simulated load balancer's unique indexes, driven by pymongo: ``create_index(unique=True)``
enforced on inserts (ordered and not), updates, replacements, upserts, ``find_one_and_update``
and bulk writes, with MongoDB's duplicate key errors (code 11000, its message, ``keyPattern``
and ``keyValue``); compound, sparse, partial and multikey indexes; an index build failing on
documents that already share a key; ``drop_index`` lifting the constraint; transactions
(failing at once, WriteConflict at commit). And the key extraction of
:mod:`poolkit_sim_mongo.indexes` itself, with hypothesis.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from bson.decimal128 import Decimal128
from bson.int64 import Int64
from bson.objectid import ObjectId
from hypothesis import given
from hypothesis import strategies as st
from pymongo import InsertOne, ReplaceOne, UpdateOne
from pymongo.errors import BulkWriteError, DuplicateKeyError, OperationFailure

from mongo_services import Client, Collection, items, mongo, sim_mongo
from poolkit_sim_mongo.indexes import UNDEFINED, Duplicate, UniqueKeys, index_keys
from poolkit_sim_mongo.store import SimMongoStore, matches

__all__ = ["items", "mongo", "sim_mongo"]  # (the fixtures: imported for pytest)


def dup_message(index: str, key: str) -> str:
    return f"E11000 duplicate key error collection: db.items index: {index} dup key: {{ {key} }}"


def assert_duplicate(
    error: DuplicateKeyError, index: str, key: str, pattern: dict[str, Any], value: dict[str, Any]
) -> None:
    """``error`` is MongoDB's duplicate key error on ``index`` (``key``: the message's key)."""
    assert error.code == 11000
    assert error.details is not None
    assert str(error.details["errmsg"]).endswith(dup_message(index, key))
    assert error.details["keyPattern"] == pattern
    assert error.details["keyValue"] == value


def values(items: Collection, field: str = "x") -> list[Any]:
    return sorted((d.get(field) for d in items.find()), key=repr)


# ---------------------------------------------------------------------- inserts


def test_a_unique_index_refuses_a_second_insert(items: Collection) -> None:
    assert items.create_index("x", unique=True) == "x_1"
    items.insert_one({"x": 1})
    with pytest.raises(DuplicateKeyError) as caught:
        items.insert_one({"x": 1})
    assert_duplicate(caught.value, "x_1", "x: 1", {"x": 1}, {"x": 1})
    assert caught.value.details is not None
    assert caught.value.details["errmsg"] == dup_message("x_1", "x: 1")  # (nothing before)
    with pytest.raises(DuplicateKeyError) as caught:
        items.insert_one({"x": 1.0})  # (numbers compare by value)
    assert_duplicate(caught.value, "x_1", "x: 1.0", {"x": 1}, {"x": 1.0})
    for other in (Int64(1), Decimal128("1")):
        with pytest.raises(DuplicateKeyError):
            items.insert_one({"x": other})
    items.insert_many([{"x": "1"}, {"x": True}, {"x": [1.5]}])  # (other types, other keys)
    with pytest.raises(DuplicateKeyError) as caught:
        items.insert_one({"x": "1"})
    assert_duplicate(caught.value, "x_1", 'x: "1"', {"x": 1}, {"x": "1"})
    assert items.count_documents({}) == 4


def test_the_id_index_speaks_as_mongodb(items: Collection) -> None:
    oid = ObjectId()
    items.insert_many([{"_id": 1}, {"_id": "a"}, {"_id": oid}])
    for value, shown in ((1, "1"), ("a", '"a"'), (oid, f"ObjectId('{oid}')")):
        with pytest.raises(DuplicateKeyError) as caught:
            items.insert_one({"_id": value})
        assert_duplicate(caught.value, "_id_", f"_id: {shown}", {"_id": 1}, {"_id": value})


def test_insert_many_ordered_stops_at_the_first_duplicate(items: Collection) -> None:
    items.create_index("x", unique=True)
    items.insert_one({"x": 0})
    with pytest.raises(BulkWriteError) as caught:
        items.insert_many([{"x": 1}, {"x": 0}, {"x": 2}])
    result = caught.value.details
    assert result["nInserted"] == 1
    [error] = result["writeErrors"]
    assert (error["index"], error["code"]) == (1, 11000)
    assert error["errmsg"] == dup_message("x_1", "x: 0")
    assert (error["keyPattern"], error["keyValue"]) == ({"x": 1}, {"x": 0})
    assert values(items) == [0, 1]


def test_insert_many_unordered_goes_on(items: Collection) -> None:
    items.create_index("x", unique=True)
    with pytest.raises(BulkWriteError) as caught:
        items.insert_many([{"x": 1}, {"x": 1}, {"x": 2}, {"x": 2}, {"x": 3}], ordered=False)
    result = caught.value.details
    assert result["nInserted"] == 3
    assert [(e["index"], e["keyValue"]) for e in result["writeErrors"]] == [
        (1, {"x": 1}),
        (3, {"x": 2}),
    ]
    assert values(items) == [1, 2, 3]


# ---------------------------------------------------------------------- updates


def test_updates_that_would_duplicate_a_key_fail(items: Collection) -> None:
    items.create_index("x", unique=True)
    items.insert_many([{"_id": 1, "x": 1}, {"_id": 2, "x": 2}])
    with pytest.raises(DuplicateKeyError) as caught:
        items.update_one({"_id": 2}, {"$set": {"x": 1}})
    assert_duplicate(caught.value, "x_1", "x: 1", {"x": 1}, {"x": 1})
    with pytest.raises(DuplicateKeyError):
        items.replace_one({"_id": 2}, {"x": 1, "r": True})
    with pytest.raises(DuplicateKeyError):
        items.update_one({"_id": 3}, {"$set": {"x": 2}}, upsert=True)
    with pytest.raises(DuplicateKeyError):
        items.replace_one({"_id": 3}, {"x": 1}, upsert=True)
    assert list(items.find({}, sort=[("_id", 1)])) == [{"_id": 1, "x": 1}, {"_id": 2, "x": 2}]
    # a document keeps its own key: no collision with itself
    assert items.update_one({"_id": 1}, {"$set": {"x": 1.0, "y": 1}}).modified_count == 1
    assert items.replace_one({"_id": 2}, {"x": 2, "r": True}).modified_count == 1
    assert items.update_one({"_id": 1}, {"$set": {"x": 5}}).modified_count == 1
    assert items.update_one({"_id": 2}, {"$set": {"x": 1}}).modified_count == 1  # (freed)


def test_update_many_stops_at_the_document_that_would_duplicate(items: Collection) -> None:
    items.create_index("x", unique=True)
    items.insert_many([{"_id": i, "x": i} for i in range(1, 4)])
    with pytest.raises(DuplicateKeyError) as caught:
        items.update_many({"x": {"$gte": 2}}, {"$set": {"x": 9}})
    assert caught.value.details is not None
    assert caught.value.details["keyValue"] == {"x": 9}
    # as MongoDB: the documents before the failing one are changed
    assert [d["x"] for d in items.find({}, sort=[("_id", 1)])] == [1, 9, 3]


def test_find_one_and_update_fails_the_command(items: Collection) -> None:
    items.create_index("x", unique=True)
    items.insert_many([{"_id": 1, "x": 1}, {"_id": 2, "x": 2}])
    with pytest.raises(DuplicateKeyError) as caught:
        items.find_one_and_update({"_id": 2}, {"$set": {"x": 1}})
    assert_duplicate(caught.value, "x_1", "x: 1", {"x": 1}, {"x": 1})
    assert caught.value.details is not None
    assert str(caught.value.details["errmsg"]).startswith(
        "Plan executor error during findAndModify :: caused by :: E11000"
    )
    with pytest.raises(DuplicateKeyError):
        items.find_one_and_replace({"_id": 2}, {"x": 1})
    with pytest.raises(DuplicateKeyError):
        items.find_one_and_update({"_id": 9}, {"$set": {"x": 2}}, upsert=True)
    assert values(items) == [1, 2]


def test_bulk_write_reports_each_duplicate(items: Collection) -> None:
    items.create_index("x", unique=True)
    items.insert_many([{"_id": 1, "x": 1}, {"_id": 2, "x": 2}])
    requests: list[Any] = [
        InsertOne({"_id": 3, "x": 1}),
        UpdateOne({"_id": 2}, {"$set": {"x": 1}}),
        ReplaceOne({"_id": 1}, {"x": 7}),
        UpdateOne({"_id": 4}, {"$set": {"x": 7}}, upsert=True),
        InsertOne({"_id": 5, "x": 5}),
    ]
    with pytest.raises(BulkWriteError) as caught:
        items.bulk_write(requests, ordered=False)
    result = caught.value.details
    assert [(e["index"], e["code"], e["keyValue"]) for e in result["writeErrors"]] == [
        (0, 11000, {"x": 1}),
        (1, 11000, {"x": 1}),
        (3, 11000, {"x": 7}),
    ]
    assert all(e["keyPattern"] == {"x": 1} for e in result["writeErrors"])
    assert (result["nInserted"], result["nModified"], result["nUpserted"]) == (1, 1, 0)
    assert values(items) == [2, 5, 7]


# ---------------------------------------------------------------------- kinds of unique index


def test_a_compound_unique_index(items: Collection) -> None:
    assert items.create_index([("a", 1), ("b", -1)], unique=True) == "a_1_b_-1"
    items.insert_many([{"a": 1, "b": 1}, {"a": 1, "b": 2}, {"a": 2, "b": 1}, {"a": 1}])
    with pytest.raises(DuplicateKeyError) as caught:
        items.insert_one({"b": 2, "a": 1})
    assert_duplicate(caught.value, "a_1_b_-1", "a: 1, b: 2", {"a": 1, "b": -1}, {"a": 1, "b": 2})
    with pytest.raises(DuplicateKeyError) as caught:
        items.insert_one({"a": 1, "b": None})  # (b missing indexes as null)
    assert_duplicate(
        caught.value, "a_1_b_-1", "a: 1, b: null", {"a": 1, "b": -1}, {"a": 1, "b": None}
    )


def test_missing_fields_collide_as_null(items: Collection) -> None:
    items.create_index("x", unique=True)
    items.insert_one({"y": 1})
    with pytest.raises(DuplicateKeyError) as caught:
        items.insert_one({"y": 2})
    assert_duplicate(caught.value, "x_1", "x: null", {"x": 1}, {"x": None})
    with pytest.raises(DuplicateKeyError):
        items.insert_one({"x": None})
    with pytest.raises(DuplicateKeyError):
        items.insert_one({})


def test_a_sparse_index_skips_documents_missing_all_its_fields(items: Collection) -> None:
    items.create_index("x", unique=True, sparse=True)
    items.insert_many([{"y": 1}, {"y": 2}, {"x": 1}, {"x": None}])
    with pytest.raises(DuplicateKeyError):
        items.insert_one({"x": None})  # (null is a value: indexed)
    with pytest.raises(DuplicateKeyError):
        items.insert_one({"x": 1})
    items.create_index([("a", 1), ("b", 1)], unique=True, sparse=True)
    items.insert_many([{"c": 1}, {"c": 2}, {"a": 1}])
    with pytest.raises(DuplicateKeyError) as caught:
        items.insert_one({"a": 1, "x": 5})  # (one field there: indexed, b null)
    assert caught.value.details is not None
    assert caught.value.details["keyValue"] == {"a": 1, "b": None}


def test_a_partial_index_holds_only_the_documents_matching_its_filter(items: Collection) -> None:
    items.create_index("x", unique=True, partialFilterExpression={"active": True})
    items.insert_many([{"x": 1, "active": False}, {"x": 1}, {"_id": "on", "x": 1, "active": True}])
    with pytest.raises(DuplicateKeyError) as caught:
        items.insert_one({"x": 1, "active": True})
    assert_duplicate(caught.value, "x_1", "x: 1", {"x": 1}, {"x": 1})
    with pytest.raises(DuplicateKeyError):  # (an update that brings it into the index)
        items.update_one({"active": False}, {"$set": {"active": True}})
    items.update_one({"_id": "on"}, {"$set": {"active": False}})  # (out of it)
    items.update_one({"x": 1, "active": {"$exists": False}}, {"$set": {"active": True}})
    assert items.count_documents({"active": True}) == 1


def test_arrays_are_multikey(items: Collection) -> None:
    items.create_index("tags", unique=True)
    items.insert_one({"tags": [1, 2, 2]})  # (its own duplicates do not collide)
    with pytest.raises(DuplicateKeyError) as caught:
        items.insert_one({"tags": [3, 2]})
    assert_duplicate(caught.value, "tags_1", "tags: 2", {"tags": 1}, {"tags": 2})
    with pytest.raises(DuplicateKeyError):
        items.insert_one({"tags": 1})
    items.insert_many([{"tags": [[1, 2]]}, {"tags": []}])  # (an array in an array: one key)
    with pytest.raises(DuplicateKeyError):
        items.insert_one({"tags": [[1, 2]]})
    with pytest.raises(DuplicateKeyError) as caught:
        items.insert_one({"tags": []})
    assert_duplicate(caught.value, "tags_1", "tags: undefined", {"tags": 1}, {"tags": None})
    items.update_one({"tags": 1}, {"$push": {"tags": 4}})  # (its own keys again: fine)
    with pytest.raises(DuplicateKeyError):
        items.insert_one({"tags": [5, 4]})


def test_a_path_through_an_array_of_documents(items: Collection) -> None:
    items.create_index("a.b", unique=True)
    items.insert_one({"a": [{"b": 1}, {"b": 2}]})
    with pytest.raises(DuplicateKeyError) as caught:
        items.insert_one({"a": {"b": 2}})
    assert_duplicate(caught.value, "a.b_1", "a.b: 2", {"a.b": 1}, {"a.b": 2})
    items.insert_one({"a": [{"c": 1}]})  # (no b in its element: null)
    with pytest.raises(DuplicateKeyError) as caught:
        items.insert_one({"a": 5})  # (no document to reach into: null too)
    assert_duplicate(caught.value, "a.b_1", "a.b: null", {"a.b": 1}, {"a.b": None})


# ---------------------------------------------------------------------- the catalog


def test_create_index_fails_on_documents_sharing_a_key(mongo: Client, items: Collection) -> None:
    items.insert_many([{"x": 1, "y": 1}, {"x": 2}, {"x": 1, "y": 2}, {"x": 3}])
    with pytest.raises(DuplicateKeyError) as caught:
        items.create_index("x", unique=True)
    error = caught.value
    assert error.details is not None
    errmsg = str(error.details["errmsg"])
    assert errmsg.startswith("Index build failed: ")
    assert ": Collection db.items ( " in errmsg
    assert errmsg.endswith(" ) :: caused by :: " + dup_message("x_1", "x: 1"))
    assert error.details["codeName"] == "DuplicateKey"
    assert (error.details["keyPattern"], error.details["keyValue"]) == ({"x": 1}, {"x": 1})
    with pytest.raises(DuplicateKeyError):  # (y: two documents miss it)
        items.create_index("y", unique=True)
    with pytest.raises(DuplicateKeyError):  # (one createIndexes: none of its indexes built)
        mongo.db.command(
            {
                "createIndexes": "items",
                "indexes": [
                    {"key": {"z": 1}, "name": "z_1"},
                    {"key": {"x": 1}, "name": "x_1", "unique": True},
                ],
            }
        )
    assert [i["name"] for i in items.list_indexes()] == ["_id_"]
    items.create_index("y", unique=True, sparse=True)  # (those missing y: not indexed)
    items.create_index("x", unique=True, partialFilterExpression={"y": {"$gt": 1}})
    with pytest.raises(DuplicateKeyError) as caught:
        items.insert_one({"x": 1, "y": 3})
    assert caught.value.details is not None
    assert caught.value.details["keyPattern"] == {"x": 1}


def test_drop_index_lifts_the_constraint(items: Collection) -> None:
    items.create_index("x", unique=True)
    items.insert_one({"x": 1})
    with pytest.raises(DuplicateKeyError):
        items.insert_one({"x": 1})
    items.drop_index("x_1")
    items.insert_one({"x": 1})
    assert items.count_documents({"x": 1}) == 2
    with pytest.raises(DuplicateKeyError):
        items.create_index("x", unique=True)
    items.create_index("x")  # (not unique: built, not enforced)
    items.insert_one({"x": 1})
    items.create_index("z", unique=True, sparse=True)
    with pytest.raises(BulkWriteError):
        items.insert_many([{"z": 1}, {"z": 1}])
    items.drop_indexes()
    items.insert_many([{"z": 1}, {"z": 1}])


@pytest.mark.parametrize(
    ("options", "code"),
    [
        ({"unique": True, "sparse": True, "partialFilterExpression": {"a": 1}}, 67),
        ({"partialFilterExpression": "a"}, 14),
        ({"partialFilterExpression": {"a": {"$where": 1}}}, 2),
        ({"unique": True, "collation": {"locale": "fr"}}, 2),
    ],
)
def test_index_options_refused(mongo: Client, options: dict[str, Any], code: int) -> None:
    with pytest.raises(OperationFailure) as caught:
        mongo.db.command(
            {"createIndexes": "items", "indexes": [{"key": {"a": 1}, "name": "a_1", **options}]}
        )
    assert caught.value.code == code


@pytest.mark.parametrize(("kind", "code"), [("hashed", 67), ("text", 2), ("2dsphere", 2)])
def test_unique_special_kinds_are_refused(items: Collection, kind: str, code: int) -> None:
    with pytest.raises(OperationFailure) as caught:
        items.create_index([("a", kind)], unique=True)
    assert caught.value.code == code


# ---------------------------------------------------------------------- transactions


def test_a_transactions_duplicate_fails_at_once(mongo: Client, items: Collection) -> None:
    items.create_index("x", unique=True)
    items.insert_one({"_id": 1, "x": 1})
    with mongo.start_session() as session:
        session.start_transaction()
        items.insert_one({"_id": 2, "x": 2}, session=session)
        with pytest.raises(DuplicateKeyError) as caught:
            items.insert_one({"x": 2}, session=session)  # (against its own write)
        assert_duplicate(caught.value, "x_1", "x: 2", {"x": 1}, {"x": 2})
        with pytest.raises(OperationFailure) as aborted:
            session.commit_transaction()
        assert aborted.value.code == 251  # NoSuchTransaction: the write error aborted it
    assert values(items) == [1]


@pytest.mark.parametrize("how", ["insert", "update", "replace", "upsert", "find_one_and_update"])
def test_each_write_in_a_transaction_checks_what_it_sees(
    mongo: Client, items: Collection, how: str
) -> None:
    items.create_index("x", unique=True)
    items.insert_many([{"_id": 1, "x": 1}, {"_id": 2, "x": 2}])
    with mongo.start_session() as session:
        session.start_transaction()
        items.delete_one({"_id": 1}, session=session)  # (x: 1 is free, for it)
        items.insert_one({"_id": 3, "x": 1}, session=session)
        writes: dict[str, Callable[[], object]] = {
            "insert": lambda: items.insert_one({"x": 2}, session=session),
            "update": lambda: items.update_one({"_id": 3}, {"$set": {"x": 2}}, session=session),
            "replace": lambda: items.replace_one({"_id": 3}, {"x": 2}, session=session),
            "upsert": lambda: items.update_one(
                {"_id": 9}, {"$set": {"x": 1}}, upsert=True, session=session
            ),
            "find_one_and_update": lambda: items.find_one_and_update(
                {"_id": 2}, {"$set": {"x": 1}}, session=session
            ),
        }
        with pytest.raises(DuplicateKeyError):
            writes[how]()
        with pytest.raises(OperationFailure):
            session.commit_transaction()
    assert values(items) == [1, 2]  # (none of it)


def test_a_transaction_sees_keys_it_freed(mongo: Client, items: Collection) -> None:
    items.create_index("x", unique=True)
    items.insert_many([{"_id": 1, "x": 1}, {"_id": 2, "x": 2}])
    with mongo.start_session() as session, session.start_transaction():
        items.update_one({"_id": 1}, {"$set": {"x": 10}}, session=session)
        items.update_one({"_id": 2}, {"$set": {"x": 1}}, session=session)
        items.insert_one({"_id": 3, "x": 2}, session=session)
    assert [d["x"] for d in items.find({}, sort=[("_id", 1)])] == [10, 1, 2]


def test_a_key_another_writer_took_is_a_write_conflict_at_commit(
    mongo: Client, items: Collection
) -> None:
    items.create_index("x", unique=True)
    items.insert_one({"_id": 1, "x": 1, "n": 0})
    with mongo.start_session() as session:
        session.start_transaction()
        items.update_one({"_id": 1}, {"$inc": {"n": 1}}, session=session)
        items.insert_one({"_id": 2, "x": 7}, session=session)
        items.insert_one({"_id": 3, "x": 7})  # (another writer: the transaction's is unseen)
        with pytest.raises(OperationFailure) as caught:
            session.commit_transaction()
        assert caught.value.code == 112  # WriteConflict
        assert caught.value.has_error_label("TransientTransactionError")
    assert list(items.find({}, sort=[("_id", 1)])) == [  # (all or none: none)
        {"_id": 1, "x": 1, "n": 0},
        {"_id": 3, "x": 7},
    ]


def test_a_key_it_wrote_then_changed_still_conflicts(mongo: Client, items: Collection) -> None:
    items.create_index("x", unique=True)
    with mongo.start_session() as session:
        session.start_transaction()
        items.insert_one({"_id": 1, "x": 7}, session=session)
        items.update_one({"_id": 1}, {"$set": {"x": 8}}, session=session)
        items.insert_one({"_id": 2, "x": 7})  # (another writer)
        with pytest.raises(OperationFailure) as caught:
            session.commit_transaction()
        assert caught.value.code == 112
    assert values(items) == [7]


def test_an_index_built_meanwhile_is_enforced_at_commit(mongo: Client, items: Collection) -> None:
    with mongo.start_session() as session:
        session.start_transaction()
        items.insert_many([{"x": 1}, {"x": 1}], session=session)
        items.create_index("x", unique=True)  # (the store has no document: built)
        with pytest.raises(OperationFailure) as caught:
            session.commit_transaction()
        assert caught.value.code == 112
    assert items.count_documents({}) == 0


def test_a_commit_that_keeps_keys_unique_applies_all(mongo: Client, items: Collection) -> None:
    items.create_index("x", unique=True)
    items.insert_one({"_id": 1, "x": 1})
    with mongo.start_session() as session:
        session.start_transaction()
        items.delete_one({"_id": 1}, session=session)
        items.insert_one({"_id": 2, "x": 1}, session=session)
        items.insert_one({"_id": 3, "x": 3})  # (another writer, another key)
        session.commit_transaction()
    assert values(items) == [1, 3]


# ---------------------------------------------------------------------- the keys themselves


def test_index_keys_examples() -> None:
    keys = index_keys({"a.b": 1, "c": 1}, {"a": [{"b": 1}, {"b": 2}, 5], "c": [3, 3]})
    assert sorted(map(repr, keys.values())) == sorted(
        map(repr, [{"a.b": 1, "c": 3}, {"a.b": 2, "c": 3}, {"a.b": None, "c": 3}])
    )
    assert list(index_keys({"a.1": 1}, {"a": [5, 6]}).values()) == [{"a.1": 6}]
    assert list(index_keys({"a": 1}, {"a": []}).values()) == [{"a": UNDEFINED}]
    assert list(index_keys({"a.b": 1}, {"a": []}).values()) == [{"a.b": None}]
    assert index_keys({"a": 1, "b": 1}, {"c": 1}, sparse=True) == {}
    assert len(index_keys({"a": 1, "b": 1}, {"b": None}, sparse=True)) == 1
    assert len(index_keys({"a": 1}, {"a": [{"x": 1}, {"x": 1.0}, {"x": Int64(1)}]})) == 1
    assert len(index_keys({"a": 1}, {"a": [{"x": 1, "y": 2}, {"y": 2, "x": 1}]})) == 2
    assert len(index_keys({"a": 1}, {"a": [1, True, "1", None, [1]]})) == 5


def test_unique_keys_add_and_remove() -> None:
    uniques = UniqueKeys([{"key": {"x": 1}, "name": "x_1", "unique": True}], matches)
    uniques.add({"x": [1, 2]})
    assert uniques.conflict({"x": 2}) == Duplicate("x_1", {"x": 1}, {"x": 2})
    uniques.remove({"x": [1, 2]})
    assert uniques.conflict({"x": 2}) is None
    assert not UniqueKeys([{"key": {"x": 1}, "name": "x_1"}], matches)  # (not unique: none)


def test_the_store_enforces_unique_indexes_without_a_client() -> None:
    store = SimMongoStore()
    store.set_indexes("db.t", [{"v": 2, "key": {"k": 1}, "name": "k_1", "unique": True}])
    inserted, errors = store.insert("db.t", [{"_id": 1, "k": 1}, {"_id": 2, "k": 1}, {"_id": 3}])
    assert inserted == 1
    assert [e.document()["keyValue"] for e in errors] == [{"k": 1}]
    assert store.insert("db.t", [{"_id": 3}, {"_id": 4}], ordered=False)[0] == 1  # (k: null)


NUMBERS = st.one_of(
    st.integers(-3, 3),
    st.integers(-3, 3).map(float),
    st.integers(-3, 3).map(Int64),
    st.integers(-3, 3).map(lambda n: Decimal128(str(n))),
)
VALUES = st.one_of(st.none(), st.booleans(), st.sampled_from(["a", "b"]), NUMBERS)
FIELD = st.one_of(VALUES, st.lists(VALUES, max_size=3))


def model_keys(document: dict[str, Any]) -> set[Any]:
    """The keys of ``{x: 1}`` as a plain model has them (numbers by value, types apart)."""
    if "x" not in document:
        return {("null",)}
    value = document["x"]
    elements = (value or [UNDEFINED]) if isinstance(value, list) else [value]
    keys: set[Any] = set()
    for element in elements:
        if element is None:
            keys.add(("null",))
        elif element is UNDEFINED:
            keys.add(("undefined",))
        elif isinstance(element, (bool, str)):
            keys.add((type(element).__name__, element))
        else:
            number = element.to_decimal() if isinstance(element, Decimal128) else element
            keys.add(("number", int(number)))
    return keys


@given(st.lists(st.dictionaries(st.just("x"), FIELD, max_size=1), max_size=6))
def test_unique_keys_agree_with_a_model(documents: list[dict[str, Any]]) -> None:
    spec = {"key": {"x": 1}, "name": "x_1", "unique": True}
    for document in documents:
        assert len(index_keys({"x": 1}, document)) == len(model_keys(document))
    held: set[Any] = set()
    shared: set[Any] = set()  # (the first document's keys that earlier ones hold)
    for document in documents:
        shared = model_keys(document) & held
        if shared:
            break
        held |= model_keys(document)
    found = UniqueKeys([spec], matches).first_duplicate(documents)
    assert (found is None) == (not shared)
    if found is not None:
        assert model_keys({"x": found.value["x"]}) <= shared


@given(st.lists(st.dictionaries(st.sampled_from(["a", "b"]), VALUES), max_size=5))
def test_compound_sparse_keys(documents: list[dict[str, Any]]) -> None:
    for document in documents:
        keys = index_keys({"a": 1, "b": 1}, document, sparse=True)
        assert len(keys) == (1 if document else 0)
        for value in keys.values():
            assert value == {"a": document.get("a"), "b": document.get("b")}
