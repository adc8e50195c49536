"""Measure how far mongomock agrees with MongoDB on the update cases the simulator is tested on:
``pip install mongomock``, then ``python sim-mongo/tools/compare_mongomock.py``.

The cases are those of ``tests/mongodb/test_update_engine.py``: each operator's result as
MongoDB gives it (value, field order and BSON types), and the errors with MongoDB's codes. The
simulator's update engine passes all of them; this runs each through a mongomock collection and
counts the ones it gets right. It is why the simulator keeps its own engine instead of building
on mongomock (see docs/mongodb.md).
"""

from __future__ import annotations

import copy
import sys
import warnings
from pathlib import Path
from typing import Any

import bson
import pymongo.errors

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "tests" / "mongodb"), str(ROOT / "tests" / "support")]

import mongomock  # noqa: E402
import test_update_engine as cases  # noqa: E402


def _parameters(test: Any) -> list[Any]:
    marks = [m for m in getattr(test, "pytestmark", []) if m.name == "parametrize"]
    return list(marks[0].args[1]) if marks else []


def _run(collection: Any, document: dict[str, Any], update: dict[str, Any]) -> None:
    collection.delete_many({})
    collection.insert_one(copy.deepcopy(document))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if any(key.startswith("$") for key in update):
            collection.update_one({"_id": document.get("_id", 1)}, update)
        else:
            collection.replace_one({"_id": document.get("_id", 1)}, update)


def main() -> int:
    collection = mongomock.MongoClient().db.c
    right, wrong = 0, []
    for document, update, expected in _parameters(cases.test_operators_as_mongodb_applies_them):
        try:
            _run(collection, document, update)
            after = collection.find_one({"_id": document["_id"]})
        except Exception as exc:  # (mongomock raises where MongoDB updates)
            wrong.append(f"{update}: raises {exc!r:.70}")
            continue
        if after == expected and bson.encode(after) == bson.encode(expected):
            right += 1
        else:
            wrong.append(f"{update}: {after} where MongoDB gives {expected}")
    total = right + len(wrong)
    print(f"results: {right} of {total} as MongoDB gives them (value, field order, BSON types)")
    codes, missed = 0, []
    for document, update, code, message, _ in _parameters(
        cases.test_errors_carry_mongodbs_codes_and_messages
    ):
        try:
            _run(collection, document, update)
        except pymongo.errors.PyMongoError as exc:
            if getattr(exc, "code", None) == code:
                codes += 1
                continue
            missed.append(f"{update}: {exc!r:.60} where MongoDB says {code} {message!r:.40}")
        except Exception as exc:
            missed.append(f"{update}: {exc!r:.60} where MongoDB says {code}")
        else:
            missed.append(f"{update}: no error where MongoDB says {code} {message!r:.40}")
    print(f"errors: {codes} of {codes + len(missed)} with MongoDB's code")
    for line in wrong + missed:
        print("  ", line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
