"""The catalog commands of the simulated cluster: collections (``create``, what
``listCollections`` lists), their indexes (``createIndexes``, ``dropIndexes``, what
``listIndexes`` lists), databases (``listDatabases``); and ``distinct``, a read of values.

* ``create``: a collection with its options, listed by ``listCollections`` even empty. As a
  mongos (and mongod from 7.0) does, creating one that exists with the same options succeeds;
  with other options it is error 48 NamespaceExists. Options are kept and listed, not enforced
  (no capped size, no validator); a view (``viewOn``) or a time series is not simulated.
* ``createIndexes``: the specs are recorded per collection (the collection created if need
  be), as mongod answers (``numIndexesBefore``/``After``, ``createdCollectionAutomatically``,
  ``note`` when all existed; a mongos would nest that under ``raw`` by shard). Nothing is
  indexed, but a ``unique`` index is enforced by the store (:mod:`.indexes`): building one on
  documents that already share a key fails, error 11000 DuplicateKey ("Index build failed:
  ..."), and no index of the command is created; ``dropIndexes`` lifts it. A name taken by
  another key is error 86 IndexKeySpecsConflict, a key indexed under another name error 85
  IndexOptionsConflict; ``sparse`` with ``partialFilterExpression`` error 67; a unique hashed
  index error 67, a unique text or geo index, or one with a collation, is not simulated (2).
* ``listDatabases``: as a mongos lists them: the databases holding collections, and ``admin``
  and ``config`` (the config servers'), each with ``sizeOnDisk`` (simulated: the documents'
  BSON size plus 4 KiB a collection and an index), ``empty`` (false), ``shards``;
  ``totalSize``, ``totalSizeMb``; ``nameOnly`` (names alone, no totals) and ``filter``; on
  ``admin`` only (else error 13).
* ``distinct``: the values at a dotted path of the matching documents, arrays flattened (one
  level), each once (1 and 1.0 are one), in BSON order, as mongod answers.

Rules of this module
--------------------
* Every change to the catalog goes through the store's methods (its lock); the checks before
  one are made under :meth:`~.store.SimMongoStore.locked`, so two services do not both create.
* The commands here but ``distinct`` are refused in a transaction (error 263, by the service).
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Mapping
from typing import Any

from bson.int64 import Int64

from .faults import CommandError
from .indexes import UniqueKeys
from .operators import bson_repr
from .settings import SimMongoSettings
from .store import (
    MISSING,
    CollectionEntry,
    QueryError,
    SimMongoStore,
    compare_values,
    duplicate_message,
    encoded,
    matches,
)
from .transactions import Transaction

__all__ = [
    "COMMANDS",
    "distinct_values",
    "list_collections",
    "list_indexes",
    "namespace_of",
]

Document = dict[str, Any]
Sequences = Mapping[str, list[Document]]

ID_INDEX: Document = {"v": 2, "key": {"_id": 1}, "name": "_id_"}
#: fields of a command that are not ``create``'s options
_GENERIC = frozenset(
    {"create", "writeConcern", "comment", "maxTimeMS", "lsid", "txnNumber", "autocommit"}
)
_UNSIMULATED_OPTIONS = ("viewOn", "pipeline", "timeseries", "encryptedFields", "clusteredIndex")
#: ``listDatabases``' databases of the config servers, and their simulated sizes
_CONFIG_DATABASES = {"admin": 40_960, "config": 110_592}
_SHARD = "shard0"
_KEY_STRINGS = frozenset({"text", "2d", "2dsphere", "hashed"})


def namespace_of(body: Mapping[str, Any], command: str) -> str:
    """``db.collection`` of ``command`` (its value: the collection's name)."""
    collection = body[command]
    if not isinstance(collection, str) or not collection:
        raise CommandError(73, f"{command}: invalid collection name {collection!r}")
    return f"{body.get('$db', 'test')}.{collection}"


# ---------------------------------------------------------------------- collections


def create(
    store: SimMongoStore,
    settings: SimMongoSettings,
    body: Document,
    seqs: Sequences,
    txn: Transaction | None,
) -> Document:
    namespace = namespace_of(body, "create")
    options = {k: v for k, v in body.items() if k not in _GENERIC and not k.startswith("$")}
    for name in _UNSIMULATED_OPTIONS:
        if name in options:
            raise CommandError(
                2, f"create with {name!r} (a view, a time series...) is not simulated"
            )
    if options.get("capped") and "size" not in options:
        raise CommandError(72, "the 'size' field is required when 'capped' is true")
    with store.locked():
        if store.create(namespace, options):
            return {"ok": 1.0}
        entry = store.entry(namespace)
        assert entry is not None
        if not _equivalent(entry.options, options):
            shown = _shown({"uuid": entry.uuid, **entry.options})
            raise CommandError(
                48, f"namespace {namespace} already exists, but with different options: {shown}"
            )
    return {"ok": 1.0}


def list_collections(store: SimMongoStore, body: Mapping[str, Any]) -> list[Document]:
    """What ``listCollections`` lists: the database's collections, by name, through its
    ``filter``, with names and types alone if ``nameOnly``."""
    database = str(body.get("$db", "test"))
    found: list[Document] = []
    for namespace in store.namespaces():
        db, _, name = namespace.partition(".")
        entry = store.entry(namespace)
        if db != database or entry is None:
            continue
        info: Document = {"name": name, "type": "collection"}
        if not body.get("nameOnly"):
            info["options"] = entry.options
            info["info"] = {"readOnly": False, "uuid": entry.uuid}
            info["idIndex"] = dict(ID_INDEX)
        if matches(info, body.get("filter") or {}):
            found.append(info)
    return found


# ---------------------------------------------------------------------- indexes


def list_indexes(store: SimMongoStore, namespace: str) -> list[Document]:
    """What ``listIndexes`` lists: ``_id_``, then the indexes created, in order."""
    entry = store.entry(namespace)
    if entry is None:
        raise CommandError(26, f"ns does not exist: {namespace}")
    return [dict(ID_INDEX), *entry.indexes]


def _spec(spec: Any) -> Document:
    if not isinstance(spec, Mapping):
        raise CommandError(14, "an index specification must be a document")
    key, name = spec.get("key"), spec.get("name")
    if not isinstance(key, Mapping) or not key:
        raise CommandError(
            9,
            f"Error in specification {_shown(spec)} :: caused by :: The 'key' field is a required "
            "property of an index specification",
        )
    if not isinstance(name, str) or not name:
        raise CommandError(
            9,
            f"Error in specification {_shown(spec)} :: caused by :: The 'name' field is a "
            "required property of an index specification",
        )
    for value in key.values():
        if isinstance(value, str) and value not in _KEY_STRINGS:
            raise CommandError(67, f"Unknown index plugin '{value}'")
        if isinstance(value, bool) or not isinstance(value, (int, float, str)) or value == 0:
            raise CommandError(
                67, f"Values in v:2 index key pattern cannot be of type {type(value).__name__}"
            )
    options = {k: v for k, v in spec.items() if k not in ("v", "key", "name", "background")}
    _check_options(key, options)
    return {"v": 2, "key": dict(key), "name": name, **options}


def _check_options(key: Mapping[str, Any], options: Mapping[str, Any]) -> None:
    """Refuse what MongoDB refuses of a unique, sparse or partial index, and what of one the
    simulator does not enforce (module doc)."""
    partial = options.get("partialFilterExpression")
    if partial is not None:
        if not isinstance(partial, Mapping):
            raise CommandError(14, "The field 'partialFilterExpression' must be an object")
        if options.get("sparse"):
            raise CommandError(67, "cannot mix 'partialFilterExpression' and 'sparse' options")
        try:
            matches({}, partial)
        except QueryError as exc:
            raise CommandError(2, f"partialFilterExpression: {exc}") from None
    if not options.get("unique"):
        return
    if "hashed" in key.values():
        raise CommandError(
            67, "Currently hashed indexes cannot guarantee uniqueness. Use a regular index."
        )
    if any(isinstance(v, str) for v in key.values()):
        raise CommandError(2, "a unique text or geo index is not simulated")
    collation = options.get("collation")
    if isinstance(collation, Mapping) and collation.get("locale", "simple") != "simple":
        raise CommandError(2, "a unique index with a collation is not simulated")


def _check_build(store: SimMongoStore, namespace: str, spec: Document) -> None:
    """Error 11000 if the documents of ``namespace`` share a key of ``spec``, if unique."""
    if not spec.get("unique"):
        return
    duplicate = UniqueKeys([spec], matches).first_duplicate(store.documents(namespace))
    entry = store.entry(namespace)
    if duplicate is None or entry is None:
        return
    raise CommandError(
        11000,
        f"Index build failed: {uuid.uuid4()}: Collection {namespace} ( {entry.uuid.as_uuid()} ) "
        f":: caused by :: {duplicate_message(namespace, duplicate)}",
        details=duplicate.details(),
    )


def _options(spec: Mapping[str, Any]) -> bytes:
    return encoded({k: spec[k] for k in sorted(spec) if k not in ("v", "name")})


def create_indexes(
    store: SimMongoStore,
    settings: SimMongoSettings,
    body: Document,
    seqs: Sequences,
    txn: Transaction | None,
) -> Document:
    namespace = namespace_of(body, "createIndexes")
    requested = body.get("indexes")
    if not isinstance(requested, list) or not requested:
        raise CommandError(2, "Must specify at least one index to create")
    specs = [_spec(spec) for spec in requested]
    with store.locked():
        entry = store.entry(namespace) or CollectionEntry()
        indexes = [dict(ID_INDEX), *entry.indexes]
        before = len(indexes)
        for spec in specs:
            same_name = next((i for i in indexes if i["name"] == spec["name"]), None)
            same_key = next((i for i in indexes if encoded(i["key"]) == encoded(spec["key"])), None)
            if same_name is not None and _options(same_name) == _options(spec):
                continue  # (exists)
            if same_name is not None:
                conflict = same_key is same_name
                raise CommandError(
                    85 if conflict else 86,
                    (
                        "An equivalent index already exists with the same name but different "
                        "options."
                        if conflict
                        else "An existing index has the same name as the requested index. When "
                        "index names are not specified, they are auto generated and can cause "
                        "conflicts. Please refer to our documentation."
                    )
                    + f" Requested index: {_shown(spec)}, existing index: {_shown(same_name)}",
                )
            if same_key is not None and _options(same_key) == _options(spec):
                raise CommandError(
                    85, f"Index already exists with a different name: {same_key['name']}"
                )
            if same_key is not None:
                raise CommandError(
                    85,
                    "An equivalent index already exists with a different name and options. "
                    f"Requested index: {_shown(spec)}, existing index: {_shown(same_key)}",
                )
            _check_build(store, namespace, spec)
            indexes.append(spec)
        created = False
        if len(indexes) > before or store.entry(namespace) is None:
            created = store.set_indexes(namespace, indexes[1:])
    reply: Document = {
        "numIndexesBefore": before,
        "numIndexesAfter": len(indexes),
        "createdCollectionAutomatically": created,
    }
    if len(indexes) == before:
        reply["note"] = "all indexes already exist"
    reply["ok"] = 1.0
    return reply


def drop_indexes(
    store: SimMongoStore,
    settings: SimMongoSettings,
    body: Document,
    seqs: Sequences,
    txn: Transaction | None,
) -> Document:
    namespace = namespace_of(body, "dropIndexes")
    which = body.get("index")
    if which is None:
        raise CommandError(40414, "BSON field 'dropIndexes.index' is missing but a required field")
    with store.locked():
        entry = store.entry(namespace)
        if entry is None:
            raise CommandError(26, f"ns not found {namespace}")
        was = len(entry.indexes) + 1
        if which == "*":
            store.set_indexes(namespace, [])
            return {"nIndexesWas": was, "msg": "non-_id indexes dropped for collection", "ok": 1.0}
        names = which if isinstance(which, list) else [which]
        kept = list(entry.indexes)
        for name in names:
            if name == "_id_" or (isinstance(name, Mapping) and dict(name) == {"_id": 1}):
                raise CommandError(72, "cannot drop _id index")
            if isinstance(name, Mapping):
                doomed = [i for i in kept if encoded(i["key"]) == encoded(dict(name))]
                missing = f"can't find index with key: {_shown(name)}"
            else:
                doomed = [i for i in kept if i["name"] == name]
                missing = f"index not found with name [{name}]"
            if not doomed:
                raise CommandError(27, missing)
            kept.remove(doomed[0])
        store.set_indexes(namespace, kept)
    return {"nIndexesWas": was, "ok": 1.0}


# ---------------------------------------------------------------------- databases, distinct


def list_databases(
    store: SimMongoStore,
    settings: SimMongoSettings,
    body: Document,
    seqs: Sequences,
    txn: Transaction | None,
) -> Document:
    if body.get("$db") != "admin":
        raise CommandError(13, "listDatabases may only be run against the admin database.")
    sizes = dict(_CONFIG_DATABASES)
    with store.locked():
        for namespace in store.namespaces():
            entry = store.entry(namespace)
            indexes = 1 + (len(entry.indexes) if entry is not None else 0)
            data = sum(len(encoded(d)) for d in store.documents(namespace))
            database = namespace.partition(".")[0]
            sizes[database] = sizes.get(database, 0) + data + 4096 * (1 + indexes)
    name_only = bool(body.get("nameOnly"))
    listed: list[Document] = []
    total = 0
    for name in sorted(sizes):
        info: Document = {"name": name}
        if not name_only:
            size = Int64(sizes[name])
            info.update(sizeOnDisk=size, empty=False, shards={_SHARD: size})
        if matches(info, body.get("filter") or {}):
            listed.append(info)
            total += sizes[name]
    reply: Document = {"databases": listed}
    if not name_only:
        reply.update(totalSize=Int64(total), totalSizeMb=Int64(total // (1024 * 1024)))
    reply["ok"] = 1.0
    return reply


def _values(value: Any, path: list[str]) -> list[Any]:
    if not path:
        return list(value) if isinstance(value, list) else [value]
    if isinstance(value, Mapping):
        return _values(value[path[0]], path[1:]) if path[0] in value else []
    if not isinstance(value, list):
        return []
    found: list[Any] = []
    if path[0].isdigit() and int(path[0]) < len(value):
        found += _values(value[int(path[0])], path[1:])
    for element in value:
        if isinstance(element, Mapping):
            found += _values(element, path)
    return found


def distinct_values(documents: list[Document], key: str) -> list[Any]:
    """The values at ``key`` (dotted) in ``documents``, arrays flattened one level, each once,
    in BSON order."""
    values: list[Any] = []
    for document in documents:
        for value in _values(document, key.split(".")):
            if value is not MISSING and not any(compare_values(value, v) == 0 for v in values):
                values.append(value)
    return sorted(values, key=functools.cmp_to_key(compare_values))


def _equivalent(a: Any, b: Any) -> bool:
    """The same options, as the server parses them (``size: 4096`` is ``size: 4096.0``)."""
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(_equivalent(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(map(_equivalent, a, b))
    return compare_values(a, b) == 0


def _shown(document: Mapping[str, Any]) -> str:
    return bson_repr(dict(document))


COMMANDS = {
    "create": create,
    "createIndexes": create_indexes,
    "dropIndexes": drop_indexes,
    "listDatabases": list_databases,
}
