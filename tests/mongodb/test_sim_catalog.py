"""The simulated load balancer's catalog commands, driven by pymongo: ``create`` (pymongo's
``create_collection``), ``createIndexes``/``listIndexes``/``dropIndexes`` (``create_index``,
``list_indexes``, ``drop_index``), ``listCollections`` with a filter, ``listDatabases``
(``list_database_names``), and ``distinct``; their errors with MongoDB's codes, and their
refusal in a transaction.
"""

from __future__ import annotations

from typing import Any

import pytest
from pymongo.errors import CollectionInvalid, OperationFailure

from mongo_services import Client, mongo, sim_mongo

__all__ = ["mongo", "sim_mongo"]  # (the fixtures: imported for pytest)


def indexes(mongo: Client, collection: str) -> list[tuple[str, dict[str, Any]]]:
    return [(i["name"], dict(i["key"])) for i in mongo.db[collection].list_indexes()]


def test_create_index_list_indexes_drop_index(mongo: Client) -> None:
    items = mongo.db.items
    assert items.create_index("a") == "a_1"
    assert items.create_index([("b", -1), ("c", 1)], unique=True, name="bc") == "bc"
    assert indexes(mongo, "items") == [
        ("_id_", {"_id": 1}),
        ("a_1", {"a": 1}),
        ("bc", {"b": -1, "c": 1}),
    ]
    info = items.index_information()
    assert info["bc"]["unique"] is True and "unique" not in info["a_1"]
    assert items.create_index("a") == "a_1"  # (again: nothing to do)
    items.drop_index("a_1")
    assert indexes(mongo, "items") == [("_id_", {"_id": 1}), ("bc", {"b": -1, "c": 1})]
    dropped = mongo.db.command({"dropIndexes": "items", "index": {"b": -1, "c": 1}})  # (by key)
    assert dropped == {"nIndexesWas": 2, "ok": 1.0}
    assert indexes(mongo, "items") == [("_id_", {"_id": 1})]
    items.create_index("x")
    items.create_index("y")
    items.drop_indexes()  # ("*")
    assert indexes(mongo, "items") == [("_id_", {"_id": 1})]


def test_create_indexes_replies_as_mongod(mongo: Client) -> None:
    spec = {"key": {"a": 1}, "name": "a_1"}
    first = mongo.db.command({"createIndexes": "new", "indexes": [spec]})
    assert first == {
        "numIndexesBefore": 1,
        "numIndexesAfter": 2,
        "createdCollectionAutomatically": True,
        "ok": 1.0,
    }
    assert "new" in mongo.db.list_collection_names()  # (created, empty)
    again = mongo.db.command({"createIndexes": "new", "indexes": [spec]})
    assert again["note"] == "all indexes already exist"
    assert (again["numIndexesBefore"], again["numIndexesAfter"]) == (2, 2)
    assert again["createdCollectionAutomatically"] is False


@pytest.mark.parametrize(
    ("spec", "code", "message"),
    [
        (
            {"key": {"b": 1}, "name": "a_1"},
            86,
            "An existing index has the same name as the requested index.",
        ),
        ({"key": {"a": 1}, "name": "other"}, 85, "Index already exists with a different name: a_1"),
        (
            {"key": {"a": 1}, "name": "a_1", "unique": True},
            85,
            "An equivalent index already exists with the same name but different options.",
        ),
        ({"key": {"a": 1}}, 9, "The 'name' field is a required property of an index specification"),
        ({"name": "x"}, 9, "The 'key' field is a required property of an index specification"),
        ({"key": {"a": "nope"}, "name": "x"}, 67, "Unknown index plugin 'nope'"),
    ],
)
def test_create_indexes_conflicts(
    mongo: Client, spec: dict[str, Any], code: int, message: str
) -> None:
    mongo.db.items.create_index("a")
    with pytest.raises(OperationFailure) as caught:
        mongo.db.command({"createIndexes": "items", "indexes": [spec]})
    assert caught.value.code == code
    assert message in str(caught.value)


def test_drop_index_errors(mongo: Client) -> None:
    items = mongo.db.items
    with pytest.raises(OperationFailure) as missing_collection:
        mongo.db.command({"dropIndexes": "items", "index": "a_1"})
    assert missing_collection.value.code == 26
    items.drop_index("a_1")  # (pymongo takes NamespaceNotFound as done)
    items.insert_one({"a": 1})
    with pytest.raises(OperationFailure) as missing:
        items.drop_index("a_1")
    assert missing.value.details is not None
    assert (missing.value.code, missing.value.details["errmsg"]) == (
        27,
        "index not found with name [a_1]",
    )
    with pytest.raises(OperationFailure) as id_index:
        items.drop_index("_id_")
    assert id_index.value.code == 72
    with pytest.raises(OperationFailure) as not_there:
        mongo.db.command("listIndexes", "missing")  # (pymongo's list_indexes: an empty cursor)
    assert not_there.value.code == 26
    assert list(mongo.db.missing.list_indexes()) == []


def test_drop_takes_the_indexes_along(mongo: Client) -> None:
    mongo.db.items.create_index("a")
    mongo.db.items.drop()
    mongo.db.items.insert_one({})
    assert indexes(mongo, "items") == [("_id_", {"_id": 1})]


def test_create_collection(mongo: Client) -> None:
    mongo.db.create_collection("empty")
    mongo.db.create_collection("capped", capped=True, size=4096)
    mongo.db.other.insert_one({})
    assert mongo.db.list_collection_names() == ["capped", "empty", "other"]
    listed = {c["name"]: c for c in mongo.db.list_collections()}
    assert listed["capped"]["options"] == {"capped": True, "size": 4096}
    assert listed["empty"]["options"] == {} and listed["empty"]["type"] == "collection"
    assert listed["empty"]["idIndex"] == {"v": 2, "key": {"_id": 1}, "name": "_id_"}
    assert mongo.db.empty.count_documents({}) == 0
    assert next(iter(mongo.db.empty.list_indexes()))["name"] == "_id_"
    # pymongo checks first (listCollections with a filter), and raises itself
    with pytest.raises(CollectionInvalid, match="collection empty already exists"):
        mongo.db.create_collection("empty")
    # the command itself: the same options are fine (as mongos, and mongod since 7.0), others not
    assert mongo.db.command({"create": "capped", "capped": True, "size": 4096})["ok"] == 1
    with pytest.raises(OperationFailure) as caught:
        mongo.db.create_collection("empty", check_exists=False, capped=True, size=1024)
    assert caught.value.code == 48
    assert "namespace db.empty already exists, but with different options: {uuid: " in str(
        caught.value
    )
    with pytest.raises(OperationFailure) as no_size:
        mongo.db.create_collection("nosize", capped=True)
    assert no_size.value.code == 72
    with pytest.raises(OperationFailure) as view:
        mongo.db.create_collection("view", viewOn="other", pipeline=[])
    assert view.value.code == 2 and "not simulated" in str(view.value)


def test_list_collections_filter_and_name_only(mongo: Client) -> None:
    for name in ("a", "b", "c"):
        mongo.db[name].insert_one({})
    assert mongo.db.list_collection_names(filter={"name": {"$in": ["a", "c", "z"]}}) == ["a", "c"]
    raw = mongo.db.command({"listCollections": 1, "nameOnly": True, "filter": {"name": "b"}})
    assert raw["cursor"]["firstBatch"] == [{"name": "b", "type": "collection"}]


def test_list_databases(mongo: Client) -> None:
    assert mongo.list_database_names() == ["admin", "config"]  # (a mongos's, from the start)
    mongo.db.items.insert_many([{"i": i} for i in range(10)])
    mongo.other.items.insert_one({})
    assert mongo.list_database_names() == ["admin", "config", "db", "other"]
    reply = mongo.admin.command("listDatabases")
    databases = {d["name"]: d for d in reply["databases"]}
    assert databases["db"]["sizeOnDisk"] > databases["other"]["sizeOnDisk"] > 0
    assert databases["db"]["empty"] is False
    assert databases["db"]["shards"] == {"shard0": databases["db"]["sizeOnDisk"]}
    assert reply["totalSize"] == sum(d["sizeOnDisk"] for d in reply["databases"])
    assert reply["totalSizeMb"] == reply["totalSize"] // 2**20
    names_only = mongo.admin.command({"listDatabases": 1, "nameOnly": True})
    assert names_only["databases"][0] == {"name": "admin"} and "totalSize" not in names_only
    filtered = mongo.admin.command({"listDatabases": 1, "filter": {"name": {"$in": ["other"]}}})
    assert [d["name"] for d in filtered["databases"]] == ["other"]
    with pytest.raises(OperationFailure) as not_admin:
        mongo.db.command("listDatabases")
    assert not_admin.value.code == 13
    mongo.drop_database("other")
    assert "other" not in mongo.list_database_names()


def test_distinct(mongo: Client) -> None:
    items = mongo.db.items
    items.insert_many(
        [
            {"k": 2, "tags": ["b", "a"], "sub": {"x": 1}, "g": 1},
            {"k": 1, "tags": ["a"], "sub": [{"x": 2}, {"x": 1.0}], "g": 1},
            {"k": 1.0, "tags": "c", "sub": {"x": None}, "g": 2},
            {"tags": [["n", "m"]], "g": 2},
        ]
    )
    assert items.distinct("k") == [1, 2]  # (1 and 1.0 are one; missing left out; in order)
    assert items.distinct("tags") == ["a", "b", "c", ["n", "m"]]  # (flattened one level)
    assert items.distinct("sub.x") == [None, 1, 2]  # (through arrays of documents)
    assert items.distinct("tags", {"g": 1}) == ["a", "b"]
    assert mongo.db.nothing.distinct("k") == []


def test_catalog_commands_are_refused_in_a_transaction(mongo: Client) -> None:
    mongo.db.items.insert_one({})
    with mongo.start_session() as session, session.start_transaction():
        assert mongo.db.items.distinct("_id", session=session)  # (distinct is allowed)
        for run in (
            lambda: mongo.db.create_collection("new", session=session),
            lambda: mongo.db.items.create_index("a", session=session),
            lambda: mongo.db.items.drop_index("a_1", session=session),
        ):
            with pytest.raises(OperationFailure) as caught:
                run()
            assert caught.value.code == 263  # OperationNotSupportedInTransaction
