"""The simulated load balancer's ``update`` and ``findAndModify`` commands, driven by pymongo
(the real client is the proof of fidelity): ``update_one``/``update_many``/``replace_one`` with
each operator and upserts, ``bulk_write`` mixing kinds, ``find_one_and_update``/``_replace``/
``_delete``, their errors as pymongo raises them, updates in a transaction, and the change
stream events they make; and the raw commands (a document sequence or an array, the refusals).
"""

from __future__ import annotations

import re
from typing import Any

import pymongo
import pytest
from bson.int64 import Int64
from bson.objectid import ObjectId
from pymongo import DeleteOne, InsertOne, ReplaceOne, ReturnDocument, UpdateMany, UpdateOne
from pymongo.errors import BulkWriteError, DuplicateKeyError, OperationFailure, WriteError

from mongo_services import SELECTION_MS, Client, Collection, Sim, items, mongo, sim_mongo, start_sim
from poolkit_sim_mongo import SimMongoSettings, WireClient, WireCommandError

__all__ = ["items", "mongo", "sim_mongo"]  # (the fixtures: imported for pytest)


@pytest.mark.parametrize(
    ("seed", "update", "expected"),
    [
        ({"a": 1}, {"$set": {"a": 2, "b.c": 3}}, {"a": 2, "b": {"c": 3}}),
        ({"a": 1, "b": 2}, {"$unset": {"a": ""}}, {"b": 2}),
        ({"n": 1}, {"$inc": {"n": 41, "m": 1}}, {"n": 42, "m": 1}),
        ({"n": 2}, {"$mul": {"n": 2.5}}, {"n": 5.0}),
        ({"lo": 5, "hi": 5}, {"$min": {"lo": 1}, "$max": {"hi": 9}}, {"lo": 1, "hi": 9}),
        ({"old": 1}, {"$rename": {"old": "new"}}, {"new": 1}),
        ({"r": [1]}, {"$push": {"r": {"$each": [2, 3], "$slice": -2}}}, {"r": [2, 3]}),
        ({"r": [1]}, {"$addToSet": {"r": {"$each": [1, 2]}}}, {"r": [1, 2]}),
        ({"r": [1, 2, 3, 4]}, {"$pull": {"r": {"$gt": 2}}}, {"r": [1, 2]}),
        ({"r": [{"k": 1}, {"k": 2}]}, {"$pull": {"r": {"k": 2}}}, {"r": [{"k": 1}]}),
        ({"r": [1, 2, 3]}, {"$pop": {"r": -1}}, {"r": [2, 3]}),
        ({"a": 1}, {"$setOnInsert": {"b": 1}}, {"a": 1}),
    ],
)
def test_update_one_with_each_operator(
    items: Collection, seed: dict[str, Any], update: dict[str, Any], expected: dict[str, Any]
) -> None:
    items.insert_one({"_id": 1, **seed})
    result = items.update_one({"_id": 1}, update)
    assert result.matched_count == 1
    assert result.modified_count == int(expected != seed)
    assert result.upserted_id is None
    assert items.find_one({"_id": 1}) == {"_id": 1, **expected}


def test_current_date(items: Collection) -> None:
    items.insert_one({"_id": 1})
    items.update_one({"_id": 1}, {"$currentDate": {"at": True, "ts": {"$type": "timestamp"}}})
    found = items.find_one({"_id": 1})
    assert found is not None and found["at"].year >= 2024 and found["ts"].time > 0


def test_update_many_counts_matched_and_modified(items: Collection) -> None:
    items.insert_many([{"_id": i, "g": i % 2, "v": 0} for i in range(6)])
    items.update_one({"_id": 0}, {"$set": {"v": 1}})
    result = items.update_many({"g": 0}, {"$set": {"v": 1}})
    assert (result.matched_count, result.modified_count) == (3, 2)  # (_id 0: already so)
    assert sorted(d["_id"] for d in items.find({"v": 1})) == [0, 2, 4]
    assert items.update_many({"g": 9}, {"$set": {"v": 2}}).matched_count == 0


def test_upserts(items: Collection) -> None:
    result = items.update_one(
        {"name": "x", "n": {"$gt": 1}},
        {"$inc": {"hits": 1}, "$setOnInsert": {"new": True}},
        upsert=True,
    )
    assert result.matched_count == 0 and result.modified_count == 0
    assert isinstance(result.upserted_id, ObjectId)
    assert items.find_one({"_id": result.upserted_id}) == {
        "_id": result.upserted_id,
        "name": "x",
        "hits": 1,
        "new": True,
    }
    again = items.update_one(
        {"name": "x"}, {"$inc": {"hits": 1}, "$setOnInsert": {"new": False}}, upsert=True
    )
    assert again.upserted_id is None and again.modified_count == 1
    assert items.find_one({"name": "x"}, {"_id": 0}) == {"name": "x", "hits": 2, "new": True}
    # a replacement upsert takes the query's _id, nothing else of it
    replaced = items.replace_one({"_id": 7, "k": 1}, {"v": 1}, upsert=True)
    assert replaced.upserted_id == 7
    assert items.find_one({"_id": 7}) == {"_id": 7, "v": 1}
    # update_many upserts one
    assert items.update_many({"z": 1}, {"$set": {"y": 1}}, upsert=True).upserted_id is not None


def test_replace_one(items: Collection) -> None:
    items.insert_one({"_id": 1, "a": 1, "b": 2})
    result = items.replace_one({"a": 1}, {"c": 3})
    assert (result.matched_count, result.modified_count) == (1, 1)
    assert items.find_one({"_id": 1}) == {"_id": 1, "c": 3}
    assert items.replace_one({"_id": 1}, {"c": 3}).modified_count == 0  # (the same)
    with pytest.raises(WriteError) as caught:
        items.replace_one({"_id": 1}, {"_id": 2, "c": 4})
    assert caught.value.code == 66
    assert "the (immutable) field '_id' was found to have been altered to _id: 2" in str(
        caught.value
    )


@pytest.mark.parametrize(
    ("update", "code", "message"),
    [
        ({"$foo": {"a": 1}}, 9, "Unknown modifier: $foo"),
        (
            {"$set": {"a": 1}, "$unset": {"a": 1}},
            40,
            "Updating the path 'a' would create a conflict at 'a'",
        ),
        ({"$inc": {"s": 1}}, 14, "Cannot apply $inc to a value of non-numeric type"),
        ({"$set": {"s.x": 1}}, 28, "Cannot create field 'x' in element {s: \"text\"}"),
        ({"$set": {"_id": 2}}, 66, "would modify the immutable field '_id'"),
        ({"$push": {"s": 1}}, 2, "The field 's' must be an array but is of type string"),
    ],
)
def test_update_errors_reach_pymongo_as_write_errors(
    items: Collection, update: dict[str, Any], code: int, message: str
) -> None:
    items.insert_one({"_id": 1, "s": "text"})
    with pytest.raises(WriteError) as caught:
        items.update_one({"_id": 1}, update)
    assert caught.value.code == code
    assert message in str(caught.value)
    assert not str(caught.value).startswith("Plan executor error")  # (MongoDB 7's)
    assert items.find_one({"_id": 1}) == {"_id": 1, "s": "text"}  # (unchanged)


def test_an_upsert_on_a_taken_id_is_a_duplicate_key(items: Collection) -> None:
    items.insert_one({"_id": 1, "a": 1})
    with pytest.raises(DuplicateKeyError):
        items.update_one({"_id": 1, "a": 2}, {"$set": {"b": 1}}, upsert=True)


def test_a_parse_error_fails_even_when_nothing_matches(items: Collection) -> None:
    with pytest.raises(WriteError) as caught:
        items.update_many({"nothing": 1}, {"$set": {"a": 1}, "$inc": {"a": 1}})
    assert caught.value.code == 40


def test_mongodb_8_prefixes_execution_errors() -> None:
    sim = start_sim(SimMongoSettings(services=1, version="8.0.0", max_wire_version=25))
    try:
        client: Client = pymongo.MongoClient(sim.uri, serverSelectionTimeoutMS=SELECTION_MS)
        with client:
            items = client.db.items
            items.insert_one({"_id": 1, "a": 5})
            with pytest.raises(WriteError) as caught:
                items.update_one({"_id": 1}, {"$set": {"a.b": 1}})
            assert str(caught.value).startswith(
                "Plan executor error during update :: caused by :: Cannot create field 'b' in "
                "element {a: 5}"
            )
            with pytest.raises(WriteError) as parse_error:
                items.update_one({"_id": 1}, {"$pop": {"a": 3}})
            assert str(parse_error.value).startswith("$pop expects 1 or -1, found: 3")
    finally:
        sim.thread.stop()


def test_bulk_write_mixing_kinds(items: Collection) -> None:
    result = items.bulk_write(
        [
            InsertOne({"_id": 1, "n": 0}),
            InsertOne({"_id": 2, "n": 0}),
            UpdateOne({"_id": 1}, {"$inc": {"n": 1}}),
            UpdateMany({}, {"$set": {"seen": True}}),
            ReplaceOne({"_id": 2}, {"replaced": True}),
            UpdateOne({"_id": 3}, {"$set": {"n": 3}}, upsert=True),
            DeleteOne({"_id": 2}),
        ]
    )
    assert (result.inserted_count, result.matched_count, result.modified_count) == (2, 4, 4)
    assert (result.upserted_count, result.deleted_count) == (1, 1)
    assert result.upserted_ids == {5: 3}
    assert list(items.find({}, sort=[("_id", 1)])) == [
        {"_id": 1, "n": 1, "seen": True},
        {"_id": 3, "n": 3},
    ]


@pytest.mark.parametrize("ordered", [True, False])
def test_bulk_write_errors_ordered_or_not(items: Collection, ordered: bool) -> None:
    items.insert_many([{"_id": 1, "s": "x"}, {"_id": 2, "n": 1}])
    with pytest.raises(BulkWriteError) as caught:
        items.bulk_write(
            [
                UpdateOne({"_id": 2}, {"$inc": {"n": 1}}),
                UpdateOne({"_id": 1}, {"$inc": {"s": 1}}),  # (a string: fails)
                UpdateOne({"_id": 2}, {"$inc": {"n": 1}}),
            ],
            ordered=ordered,
        )
    details = caught.value.details
    assert [(e["index"], e["code"]) for e in details["writeErrors"]] == [(1, 14)]
    assert details["nModified"] == (1 if ordered else 2)
    assert items.find_one({"_id": 2}) == {"_id": 2, "n": 2 if ordered else 3}


def test_find_one_and_update(items: Collection) -> None:
    items.insert_many([{"_id": i, "rank": i % 3, "n": 0} for i in range(5)])
    before = items.find_one_and_update({"rank": 1}, {"$inc": {"n": 1}}, sort=[("_id", -1)])
    assert before == {"_id": 4, "rank": 1, "n": 0}
    after = items.find_one_and_update(
        {"rank": 1},
        {"$inc": {"n": 1}},
        sort=[("_id", 1)],
        projection={"n": 1, "_id": 0},
        return_document=ReturnDocument.AFTER,
    )
    assert after == {"n": 1}
    assert items.find_one_and_update({"rank": 9}, {"$inc": {"n": 1}}) is None
    # upsert: nothing before, the new document after
    assert items.find_one_and_update({"_id": 10}, {"$set": {"n": 10}}, upsert=True) is None
    created = items.find_one_and_update(
        {"_id": 11}, {"$set": {"n": 11}}, upsert=True, return_document=ReturnDocument.AFTER
    )
    assert created == {"_id": 11, "n": 11}
    assert items.count_documents({}) == 7


def test_find_one_and_replace_and_delete(items: Collection) -> None:
    items.insert_many([{"_id": i, "v": i} for i in range(3)])
    old = items.find_one_and_replace({"v": {"$gte": 1}}, {"w": 1}, sort=[("v", -1)])
    assert old == {"_id": 2, "v": 2}
    new = items.find_one_and_replace({"_id": 1}, {"w": 2}, return_document=ReturnDocument.AFTER)
    assert new == {"_id": 1, "w": 2}
    gone = items.find_one_and_delete({}, sort=[("_id", -1)], projection={"_id": 1})
    assert gone == {"_id": 2}
    assert items.find_one_and_delete({"_id": 99}) is None
    assert [d["_id"] for d in items.find()] == [0, 1]


def test_find_and_modify_errors_fail_the_command(items: Collection) -> None:
    items.insert_one({"_id": 1, "a": "s"})
    with pytest.raises(OperationFailure) as caught:
        items.find_one_and_update({"_id": 1}, {"$inc": {"a": 1}})
    assert caught.value.code == 14
    assert str(caught.value).startswith(
        "Plan executor error during findAndModify :: caused by :: Cannot apply $inc"
    )
    with pytest.raises(OperationFailure) as parse_error:
        items.find_one_and_update({"_id": 1}, {"$set": {"a": 1}, "$inc": {"a": 1}})
    assert parse_error.value.code == 40 and str(parse_error.value).startswith("Updating the path")
    with pytest.raises(DuplicateKeyError):
        items.find_one_and_update({"_id": 1, "a": "t"}, {"$set": {"b": 1}}, upsert=True)
    with pytest.raises(OperationFailure) as immutable:
        items.find_one_and_replace({"_id": 1}, {"_id": 5})
    assert immutable.value.code == 66


def test_find_and_modify_last_error_object(mongo: Client, items: Collection) -> None:
    items.insert_one({"_id": 1})

    def run(**fields: Any) -> Any:
        return mongo.db.command({"findAndModify": "items", **fields})

    assert run(query={"_id": 1}, update={"$set": {"a": 1}})["lastErrorObject"] == {
        "n": 1,
        "updatedExisting": True,
    }
    upserted = run(query={"_id": 2}, update={"$set": {"a": 1}}, upsert=True, new=True)
    assert upserted["lastErrorObject"] == {"n": 1, "updatedExisting": False, "upserted": 2}
    assert upserted["value"] == {"_id": 2, "a": 1}
    assert run(query={"_id": 3}, update={"$set": {"a": 1}})["lastErrorObject"] == {
        "n": 0,
        "updatedExisting": False,
    }
    removed = run(query={"_id": 2}, remove=True)
    assert removed["lastErrorObject"] == {"n": 1} and removed["value"] == {"_id": 2, "a": 1}
    refusals: list[tuple[dict[str, Any], str]] = [
        (
            {"remove": True, "update": {"$set": {"a": 1}}},
            "Cannot specify both an update and remove=true",
        ),
        ({}, "Either an update or remove=true must be specified"),
        ({"remove": True, "new": True}, "Cannot specify both new=true and remove=true"),
        ({"remove": True, "upsert": True}, "Cannot specify both upsert=true and remove=true"),
    ]
    for fields, message in refusals:
        with pytest.raises(OperationFailure, match=re.escape(message)) as caught:
            run(query={}, **fields)
        assert caught.value.code == 9


def test_updates_in_a_transaction(mongo: Client, items: Collection, sim_mongo: Sim) -> None:
    items.insert_many([{"_id": i, "n": 0} for i in range(3)])
    with mongo.start_session() as session:
        with session.start_transaction():
            items.update_one({"_id": 0}, {"$inc": {"n": 1}}, session=session)
            items.update_many({}, {"$inc": {"n": 10}}, session=session)
            items.replace_one({"_id": 2}, {"r": True}, session=session)
            items.update_one({"_id": 5}, {"$set": {"n": 5}}, upsert=True, session=session)
            found = items.find_one_and_update(
                {"_id": 1},
                {"$inc": {"n": 100}},
                session=session,
                return_document=ReturnDocument.AFTER,
            )
            assert found == {"_id": 1, "n": 110}  # (sees its own writes)
            inside = {d["_id"]: d for d in items.find({}, session=session)}
            assert inside == {
                0: {"_id": 0, "n": 11},
                1: {"_id": 1, "n": 110},
                2: {"_id": 2, "r": True},
                5: {"_id": 5, "n": 5},
            }
            # nothing outside until the commit
            assert [d["n"] for d in sim_mongo.server.store.documents("db.items")] == [0, 0, 0]
        assert {d["_id"]: d for d in items.find()} == inside
        with session.start_transaction():
            items.update_many({}, {"$set": {"aborted": True}}, session=session)
            items.find_one_and_delete({"_id": 0}, session=session)
            session.abort_transaction()
    assert items.count_documents({"aborted": True}) == 0
    assert items.count_documents({}) == 4


def test_a_transactions_update_conflicts_with_a_later_write(
    mongo: Client, items: Collection
) -> None:
    items.insert_one({"_id": 1, "n": 0})
    with mongo.start_session() as session:
        session.start_transaction()
        items.update_one({"_id": 1}, {"$inc": {"n": 1}}, session=session)
        items.update_one({"_id": 1}, {"$set": {"other": True}})  # (another writer, committed)
        with pytest.raises(OperationFailure) as caught:
            session.commit_transaction()
        assert caught.value.code == 112  # WriteConflict
        assert caught.value.has_error_label("TransientTransactionError")
    assert items.find_one({"_id": 1}) == {"_id": 1, "n": 0, "other": True}  # (none of it)


def test_a_write_error_aborts_the_transaction(mongo: Client, items: Collection) -> None:
    items.insert_one({"_id": 1, "s": "x"})
    with mongo.start_session() as session:
        session.start_transaction()
        items.update_one({"_id": 1}, {"$set": {"t": 1}}, session=session)
        with pytest.raises(WriteError):
            items.update_one({"_id": 1}, {"$inc": {"s": 1}}, session=session)
        with pytest.raises(OperationFailure) as caught:
            session.commit_transaction()
        assert caught.value.code == 251  # NoSuchTransaction
    assert items.find_one({"_id": 1}) == {"_id": 1, "s": "x"}


def test_change_stream_sees_updates_and_replaces(items: Collection) -> None:
    items.insert_one({"_id": 1, "a": 1, "b": 2, "r": [1]})
    with items.watch(full_document="updateLookup", max_await_time_ms=50) as stream:
        items.update_one(
            {"_id": 1}, {"$set": {"a": 5, "c.d": 1}, "$unset": {"b": ""}, "$push": {"r": 2}}
        )
        items.update_one({"_id": 1}, {"$set": {"a": 5}})  # (no change: no event)
        items.replace_one({"_id": 1}, {"z": [1, 2]})
        items.update_one({"_id": 1}, {"$pop": {"z": 1}, "$set": {"y": 1}})
        events: list[dict[str, Any]] = []
        while (event := stream.try_next()) is not None:
            events.append(event)
    assert [e["operationType"] for e in events] == ["update", "replace", "update"]
    first = events[0]
    assert first["documentKey"] == {"_id": 1}
    assert first["updateDescription"] == {
        "updatedFields": {"a": 5, "c": {"d": 1}, "r.1": 2},
        "removedFields": ["b"],
        "truncatedArrays": [],
    }
    # updateLookup: the document as it is when the event is read (already replaced here)
    assert first["fullDocument"] == {"_id": 1, "z": [1], "y": 1}
    assert events[1]["fullDocument"] == {"_id": 1, "z": [1, 2]}
    assert events[2]["updateDescription"] == {
        "updatedFields": {"y": 1},
        "removedFields": [],
        "truncatedArrays": [{"field": "z", "newSize": 1}],
    }
    with items.watch(max_await_time_ms=50) as plain:  # (no fullDocument on updates by default)
        items.update_one({"_id": 1}, {"$set": {"y": 2}})
        event = plain.try_next()
        assert event is not None and "fullDocument" not in event


def test_raw_update_as_a_document_sequence_or_an_array(sim_mongo: Sim) -> None:
    with WireClient(sim_mongo.server.port) as conn:
        conn.command("db", {"insert": "c", "documents": [{"_id": 1}, {"_id": 2}]})
        statements = [
            {"q": {"_id": 1}, "u": {"$set": {"a": 1}}},
            {"q": {"_id": 9}, "u": {"a": 9}, "upsert": True},
            {"q": {}, "u": {"$set": {"b": 1}}, "multi": True},
        ]
        by_sequence = conn.command("db", {"update": "c"}, sequences={"updates": statements})
        assert by_sequence["n"] == 5 and by_sequence["nModified"] == 4
        assert by_sequence["upserted"] == [{"index": 1, "_id": 9}]
        by_array = conn.command("db", {"update": "c", "updates": statements[:1]})
        assert (by_array["n"], by_array["nModified"]) == (1, 0)
        unordered = conn.command(
            "db",
            {
                "update": "c",
                "ordered": False,
                "updates": [
                    {"q": {}, "u": {"x": 1}, "multi": True},
                    {"q": {"_id": 2}, "u": {"$set": {"c": Int64(1)}}},
                ],
            },
        )
        assert unordered["writeErrors"] == [
            {
                "index": 0,
                "code": 9,
                "errmsg": "multi update is not supported for replacement-style update",
            }
        ]
        assert unordered["nModified"] == 1
        for refused, code in [
            ({"q": {}, "u": [{"$set": {"a": 1}}]}, 2),  # (a pipeline: not simulated)
            ({"q": {}, "u": {"$set": {"a.$[x]": 1}}, "arrayFilters": [{"x": 1}]}, 2),
            ({"q": {}, "u": 1}, 14),
            ({"q": {}}, 40414),
        ]:
            with pytest.raises(WireCommandError) as caught:
                conn.command("db", {"update": "c", "updates": [refused]})
            assert caught.value.code == code
        assert conn.command("db", {"find": "c", "filter": {"_id": 2}})["cursor"]["firstBatch"] == [
            {"_id": 2, "b": 1, "c": 1}
        ]
