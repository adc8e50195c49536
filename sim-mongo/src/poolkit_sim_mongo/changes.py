"""Change streams of the simulated cluster: the log of every change to the store (the oplog a
change stream reads) and the state of one change stream's cursor.

A change stream is an ``aggregate`` whose first stage is ``$changeStream`` (on one
collection): its cursor stays open (id never 0) and each ``getMore`` returns the changes since
the last, as change events (``_id``: a resume token; ``operationType`` ``insert``, ``update``,
``replace``, ``delete`` or ``drop``; ``ns``; ``documentKey``; ``fullDocument`` for inserts and
replaces; ``updateDescription`` for updates: ``updatedFields``, ``removedFields``,
``truncatedArrays``), after the pipeline's other stages (``$match``, ``$project``). With
``fullDocument: "updateLookup"`` an update event carries the document as it is when the event
is read (null if gone since); with ``"whenAvailable"``, null (no collection keeps post-images
here). Each reply carries ``postBatchResumeToken``;
``resumeAfter`` / ``startAfter`` start after a token. A ``getMore`` with no change waits for one
up to its ``maxTimeMS`` (a driver's ``maxAwaitTimeMS``; 1 s without), as a server's does: the
server's async layer waits (:mod:`.server`), watching :meth:`ChangeLog.position`. Unlike a
server's, a drop does not invalidate the stream.

Rules of this module
--------------------
* The log is the store's, shared as the store is (by servers on several threads): it has its
  own lock, and every event is recorded while the store's lock is held, so the log's order is
  the store's.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import bson

__all__ = ["ChangeLog", "ChangeStreamCursor", "resume_token"]

Document = dict[str, Any]


def resume_token(position: int) -> Document:
    """The resume token of the change at ``position`` (1-based; 0: before every change)."""
    return {"_data": f"{position:016X}"}


def token_position(token: Any) -> int:
    """The position a resume token names; ValueError if it is not one of this log's."""
    data = token.get("_data") if isinstance(token, Mapping) else None
    if not isinstance(data, str):
        raise ValueError(f"not a resume token: {token!r}")
    return int(data, 16)


class ChangeLog:
    """Every change to the store, in order; a position is the number of changes before it."""

    def __init__(self) -> None:
        self._events: list[Document] = []
        self._lock = threading.Lock()

    def record(
        self,
        operation: str,
        namespace: str,
        key: Any = None,
        document: Document | None = None,
        description: Mapping[str, Any] | None = None,
    ) -> None:
        database, _, collection = namespace.partition(".")
        with self._lock:
            position = len(self._events) + 1
            event: Document = {
                "_id": resume_token(position),
                "operationType": operation,
                "clusterTime": bson.Timestamp(int(time.time()), position % 2**32),
                "wallTime": bson.datetime_ms.DatetimeMS(int(time.time() * 1000)),
                "ns": {"db": database, "coll": collection},
            }
            if operation != "drop":
                event["documentKey"] = {"_id": key}
            if document is not None:
                event["fullDocument"] = dict(document)
            if description is not None:
                event["updateDescription"] = dict(description)
            self._events.append(event)

    def position(self) -> int:
        with self._lock:
            return len(self._events)

    def since(self, position: int) -> list[tuple[int, Document]]:
        """The changes after ``position``, each with its own position."""
        with self._lock:
            return list(enumerate(self._events[position:], start=position + 1))


@dataclasses.dataclass(eq=False)
class ChangeStreamCursor:
    """One change stream: its collection, the position it has read to, the pipeline's stages
    after ``$changeStream`` (``stage(events, name, arg)`` applies one), and its
    ``fullDocument`` option (``lookup(namespace, _id)``: a document as it is now)."""

    namespace: str
    connection_id: int
    position: int
    stages: list[tuple[str, Any]]
    full_document: str = "default"

    def batch(
        self,
        log: ChangeLog,
        size: int,
        stage: Callable[[list[Document], str, Any], list[Document]],
        lookup: Callable[[str, Any], Document | None] = lambda namespace, key: None,
    ) -> list[Document]:
        """Up to ``size`` changes (0: all) of its collection after its position, through its
        stages; its position moves past the changes read."""
        database, _, collection = self.namespace.partition(".")
        batch: list[Document] = []
        for position, event in log.since(self.position):
            if size and len(batch) >= size:
                break
            self.position = position
            if event["ns"] != {"db": database, "coll": collection}:
                continue
            if event["operationType"] == "update" and self.full_document != "default":
                found_now = None
                if self.full_document == "updateLookup":
                    found_now = lookup(self.namespace, event["documentKey"]["_id"])
                event = {**event, "fullDocument": found_now}
            found = [event]
            for name, arg in self.stages:
                found = stage(found, name, arg)
            batch.extend(found)
        return batch

    def reply(self, cursor_id: int, batch: list[Document], field: str) -> Document:
        return {
            "cursor": {
                field: batch,
                "id": bson.int64.Int64(cursor_id),
                "ns": self.namespace,
                "postBatchResumeToken": resume_token(self.position),
            },
            "ok": 1.0,
        }
