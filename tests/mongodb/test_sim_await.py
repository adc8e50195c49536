"""Two ways the simulator answers as MongoDB does:

* its change streams wait: a ``getMore`` of a change stream's cursor (tailable, awaitData) that
  finds nothing answers when a change comes or after its ``maxTimeMS`` (the driver's
  ``maxAwaitTimeMS``; 1 s without), so a client iterating a stream does not spin. Timings are
  checked as generous bounds only: what is checked is that a wait happened (a change made later
  arrives in the reply) and how few ``getMore`` were needed;
* a session's transaction numbers only go up, as a mongos's router has them: a
  ``startTransaction`` at the number of the session's last transaction is
  ConflictingOperationInProgress (117), at a lower one TransactionTooOld (225).
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pymongo
import pytest
from bson.binary import Binary
from bson.int64 import Int64
from pymongo import monitoring

from mongo_services import SELECTION_MS, Sim, sim_mongo, start_sim
from poolkit_sim_mongo import SimMongoSettings, SimMongoStore, WireClient

__all__ = ["sim_mongo"]  # (the fixture: imported for pytest)

Client = pymongo.MongoClient[dict[str, Any]]
STREAM: list[dict[str, Any]] = [{"$changeStream": {}}]


def client(uri: str, **options: Any) -> Client:
    return pymongo.MongoClient(uri, **{"serverSelectionTimeoutMS": SELECTION_MS, **options})


class GetMores(monitoring.CommandListener):
    """The ``getMore`` commands a pymongo client sent."""

    def __init__(self) -> None:
        self.commands: list[dict[str, Any]] = []

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        if event.command_name == "getMore":
            self.commands.append(dict(event.command))

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


def later(delay: float, action: Any) -> threading.Timer:
    """Run ``action()`` on a thread of its own after ``delay`` seconds."""
    timer = threading.Timer(delay, action)
    timer.start()
    return timer


def insert(port: int, namespace: str, document: dict[str, Any]) -> None:
    """Insert ``document`` through a connection of its own (so, round robin, another service's
    maybe: the data, and the change log, are the cluster's)."""
    database, _, collection = namespace.partition(".")
    with WireClient(port) as conn:
        conn.command(database, {"insert": collection, "documents": [document]})


def open_stream(conn: WireClient, collection: str = "items") -> int:
    """A change stream on ``db.<collection>``, opened on ``conn``: its cursor id."""
    reply = conn.command("db", {"aggregate": collection, "pipeline": STREAM, "cursor": {}})
    assert reply["cursor"]["firstBatch"] == []
    cursor_id: int = reply["cursor"]["id"]
    assert cursor_id != 0
    return cursor_id


def get_more(conn: WireClient, cursor_id: int, **fields: Any) -> tuple[dict[str, Any], float]:
    """A ``getMore`` on ``conn``: its reply and how long it took (s)."""
    started = time.monotonic()
    reply = conn.command("db", {"getMore": cursor_id, "collection": "items", **fields})
    return reply, time.monotonic() - started


@pytest.fixture
def sim_one() -> Iterator[Sim]:
    """A simulator of one service (a raw cursor and its getMore meet on any connection)."""
    sim = start_sim(SimMongoSettings(services=1, seed=3))
    try:
        yield sim
    finally:
        sim.thread.stop()


# ---------------------------------------------------------------------- raw getMore


@pytest.mark.timing
def test_a_get_more_waits_for_a_change_then_answers_it(sim_mongo: Sim) -> None:
    port = sim_mongo.server.port
    with WireClient(port) as conn:
        cursor_id = open_stream(conn)
        timer = later(0.15, lambda: insert(port, "db.items", {"_id": 1}))
        try:
            reply, took = get_more(conn, cursor_id, maxTimeMS=5000)
        finally:
            timer.join()
    batch = reply["cursor"]["nextBatch"]
    assert [(c["operationType"], c["documentKey"]) for c in batch] == [("insert", {"_id": 1})]
    assert took < 3.0  # (answered at the change, not after its 5 s)
    assert sim_mongo.server.stats().commands["getMore"] == 1


def test_a_get_more_without_max_time_ms_waits_too(sim_mongo: Sim) -> None:
    """The default wait (1 s) is long enough for a change made 0.1 s later to be in the reply."""
    port = sim_mongo.server.port
    with WireClient(port) as conn:
        cursor_id = open_stream(conn)
        timer = later(0.1, lambda: insert(port, "db.items", {"_id": 1}))
        try:
            reply, _ = get_more(conn, cursor_id)
        finally:
            timer.join()
    assert [c["documentKey"] for c in reply["cursor"]["nextBatch"]] == [{"_id": 1}]


@pytest.mark.timing
def test_a_get_more_with_nothing_new_answers_an_empty_batch_after_max_time_ms(
    sim_mongo: Sim,
) -> None:
    with WireClient(sim_mongo.server.port) as conn:
        cursor_id = open_stream(conn)
        reply, took = get_more(conn, cursor_id, maxTimeMS=200)
    assert reply["ok"] == 1
    assert reply["cursor"]["nextBatch"] == []
    assert reply["cursor"]["id"] == cursor_id  # (still open)
    assert "postBatchResumeToken" in reply["cursor"]
    assert 0.1 <= took < 3.0


@pytest.mark.timing
def test_a_change_to_another_collection_does_not_end_the_wait(sim_mongo: Sim) -> None:
    port = sim_mongo.server.port
    with WireClient(port) as conn:
        cursor_id = open_stream(conn)
        timer = later(0.05, lambda: insert(port, "db.other", {"_id": 1}))
        try:
            reply, took = get_more(conn, cursor_id, maxTimeMS=400)
        finally:
            timer.join()
    assert reply["cursor"]["nextBatch"] == []
    assert took >= 0.2  # (woken by the other collection's change, it waited on)


@pytest.mark.timing
def test_a_change_from_another_server_on_the_same_store_ends_the_wait() -> None:
    """Servers on other threads' loops share the store (as behind HAProxy): a change recorded
    there is seen by the waiting getMore."""
    store = SimMongoStore()
    first = start_sim(SimMongoSettings(services=1), store)
    second = start_sim(SimMongoSettings(services=1), store)
    try:
        with WireClient(first.server.port) as conn:
            cursor_id = open_stream(conn)
            timer = later(0.1, lambda: insert(second.server.port, "db.items", {"_id": 7}))
            try:
                reply, took = get_more(conn, cursor_id, maxTimeMS=5000)
            finally:
                timer.join()
        assert [c["documentKey"] for c in reply["cursor"]["nextBatch"]] == [{"_id": 7}]
        assert took < 3.0
    finally:
        first.thread.stop()
        second.thread.stop()


@pytest.mark.timing
def test_other_cursors_get_more_does_not_wait(sim_one: Sim) -> None:
    with WireClient(sim_one.server.port) as conn:
        conn.command("db", {"insert": "items", "documents": [{"_id": i} for i in range(3)]})
        found = conn.command("db", {"find": "items", "batchSize": 1})
        cursor_id = found["cursor"]["id"]
        reply, took = get_more(conn, cursor_id, batchSize=1, maxTimeMS=5000)
        assert [d["_id"] for d in reply["cursor"]["nextBatch"]] == [1]
        last, took_last = get_more(conn, cursor_id, maxTimeMS=5000)
    assert [d["_id"] for d in last["cursor"]["nextBatch"]] == [2]
    assert last["cursor"]["id"] == 0
    assert took < 1.0 and took_last < 1.0  # (not the 5 s of maxTimeMS)


@pytest.mark.timing
def test_a_killed_or_unknown_cursor_does_not_wait(sim_one: Sim) -> None:
    with WireClient(sim_one.server.port) as conn:
        cursor_id = open_stream(conn)
        conn.command("db", {"killCursors": "items", "cursors": [cursor_id]})
        started = time.monotonic()
        reply = conn.command("db", {"getMore": cursor_id, "collection": "items"}, check=False)
        took = time.monotonic() - started
    assert reply["code"] == 43  # CursorNotFound
    assert took < 0.9  # (not the default 1 s wait)


# ---------------------------------------------------------------------- faults on a waiting getMore


def test_a_fault_on_get_more_still_closes_the_connection(sim_one: Sim) -> None:
    with WireClient(sim_one.server.port) as conn:
        cursor_id = open_stream(conn)
        sim_one.call(lambda: sim_one.server.fail_command("getMore", close_connection=True))
        with pytest.raises(ConnectionError):
            get_more(conn, cursor_id, maxTimeMS=5000)
    assert sim_one.server.stats().fault_hits == 1


@pytest.mark.timing
def test_a_fault_on_get_more_still_answers_its_error_at_once(sim_one: Sim) -> None:
    with WireClient(sim_one.server.port) as conn:
        cursor_id = open_stream(conn)
        sim_one.call(lambda: sim_one.server.fail_command("getMore", error_code=91))
        started = time.monotonic()
        body = {"getMore": cursor_id, "collection": "items", "maxTimeMS": 5000}
        reply = conn.command("db", body, check=False)
        took = time.monotonic() - started
    assert reply["code"] == 91
    assert took < 3.0


@pytest.mark.timing
def test_a_delayed_get_more_is_delayed_then_waits_for_its_change(sim_one: Sim) -> None:
    port = sim_one.server.port
    with WireClient(port) as conn:
        cursor_id = open_stream(conn)
        sim_one.call(lambda: sim_one.server.fail_command("getMore", delay=0.1))
        timer = later(0.3, lambda: insert(port, "db.items", {"_id": 1}))
        try:
            reply, took = get_more(conn, cursor_id, maxTimeMS=5000)
        finally:
            timer.join()
    assert [c["documentKey"] for c in reply["cursor"]["nextBatch"]] == [{"_id": 1}]
    assert took < 3.0


@pytest.mark.timing
def test_closing_the_connections_ends_a_waiting_get_more(sim_one: Sim) -> None:
    with WireClient(sim_one.server.port) as conn:
        cursor_id = open_stream(conn)
        timer = later(0.1, lambda: sim_one.call(sim_one.server.close_connections))
        try:
            started = time.monotonic()
            with pytest.raises(ConnectionError):
                get_more(conn, cursor_id, maxTimeMS=10_000)
            took = time.monotonic() - started
        finally:
            timer.join()
    assert took < 5.0  # (not its 10 s)


# ---------------------------------------------------------------------- pymongo


@pytest.mark.timing
def test_pymongo_next_blocks_until_a_change_from_another_thread(sim_mongo: Sim) -> None:
    listener = GetMores()
    with client(sim_mongo.uri, event_listeners=[listener]) as mongo:
        items = mongo.db.items
        with items.watch() as stream:
            timer = later(0.3, lambda: items.insert_one({"_id": 1}))
            try:
                started = time.monotonic()
                change = stream.next()
                took = time.monotonic() - started
            finally:
                timer.join()
    assert change["operationType"] == "insert" and change["documentKey"] == {"_id": 1}
    assert took < 3.0
    assert 1 <= len(listener.commands) <= 3  # (it waited: no spinning getMores)


def test_pymongo_try_next_returns_none_after_max_await_time_ms(sim_mongo: Sim) -> None:
    listener = GetMores()
    with (
        client(sim_mongo.uri, event_listeners=[listener]) as mongo,
        mongo.db.items.watch(max_await_time_ms=50) as stream,
    ):
        started = time.monotonic()
        results = []
        while time.monotonic() - started < 0.5:
            results.append(stream.try_next())
    assert results and all(r is None for r in results)
    assert all(c.get("maxTimeMS") == 50 for c in listener.commands)
    # each try_next is one getMore that waited about 50 ms: about 10 in 0.5 s (spinning,
    # there were thousands)
    assert 1 <= len(listener.commands) <= 20


# ---------------------------------------------------------------------- transaction numbers


def txn_insert(
    conn: WireClient, lsid: dict[str, Any], number: int, *, start: bool = False
) -> dict[str, Any]:
    """An insert in transaction ``number`` of session ``lsid`` (starting it if ``start``): the
    reply, errors included."""
    body: dict[str, Any] = {
        "insert": "items",
        "documents": [{"n": number}],
        "lsid": lsid,
        "txnNumber": Int64(number),
        "autocommit": False,
    }
    if start:
        body["startTransaction"] = True
    return conn.command("db", body, check=False)


def txn_end(conn: WireClient, command: str, lsid: dict[str, Any], number: int) -> dict[str, Any]:
    body = {command: 1, "lsid": lsid, "txnNumber": Int64(number), "autocommit": False}
    return conn.command("admin", body, check=False)


def new_lsid() -> dict[str, Any]:
    return {"id": Binary.from_uuid(uuid.uuid4())}


def assert_already_started(reply: dict[str, Any], number: int) -> None:
    assert reply["ok"] == 0
    assert reply["code"] == 117 and reply["codeName"] == "ConflictingOperationInProgress"
    assert f"txnNumber {number} " in reply["errmsg"] and "already started" in reply["errmsg"]
    assert "TransientTransactionError" not in reply.get("errorLabels", [])


def assert_too_old(reply: dict[str, Any], number: int, last: int) -> None:
    assert reply["ok"] == 0
    assert reply["code"] == 225 and reply["codeName"] == "TransactionTooOld"
    assert f"txnNumber {number} is less than last txnNumber {last}" in reply["errmsg"]


@pytest.mark.parametrize("end", ["commitTransaction", "abortTransaction"])
def test_a_transaction_number_cannot_start_again(sim_one: Sim, end: str) -> None:
    """After a transaction committed or aborted, ``startTransaction`` at its number is refused
    (ConflictingOperationInProgress), and at a lower one (TransactionTooOld); at a higher one
    it starts."""
    lsid = new_lsid()
    with WireClient(sim_one.server.port) as conn:
        assert txn_insert(conn, lsid, 3, start=True)["ok"] == 1
        assert txn_end(conn, end, lsid, 3)["ok"] == 1
        assert_already_started(txn_insert(conn, lsid, 3, start=True), 3)
        assert_too_old(txn_insert(conn, lsid, 2, start=True), 2, 3)
        assert_too_old(txn_insert(conn, lsid, 0, start=True), 0, 3)
        assert txn_insert(conn, lsid, 4, start=True)["ok"] == 1
        assert txn_end(conn, "commitTransaction", lsid, 4)["ok"] == 1
    expected = [3, 4] if end == "commitTransaction" else [4]
    assert sorted(d["n"] for d in sim_one.server.store.documents("db.items")) == expected


def test_starting_the_transaction_in_progress_again_is_refused_and_leaves_it(
    sim_one: Sim,
) -> None:
    lsid = new_lsid()
    with WireClient(sim_one.server.port) as conn:
        assert txn_insert(conn, lsid, 1, start=True)["ok"] == 1
        assert_already_started(txn_insert(conn, lsid, 1, start=True), 1)
        assert txn_insert(conn, lsid, 1)["ok"] == 1  # (it goes on)
        assert txn_end(conn, "commitTransaction", lsid, 1)["ok"] == 1
    assert [d["n"] for d in sim_one.server.store.documents("db.items")] == [1, 1]


def test_an_older_transaction_number_is_too_old_for_any_command(sim_one: Sim) -> None:
    lsid = new_lsid()
    with WireClient(sim_one.server.port) as conn:
        assert txn_insert(conn, lsid, 5, start=True)["ok"] == 1
        assert_too_old(txn_insert(conn, lsid, 4), 4, 5)
        assert_too_old(txn_end(conn, "commitTransaction", lsid, 4), 4, 5)
        assert_too_old(txn_end(conn, "abortTransaction", lsid, 4), 4, 5)
        assert txn_end(conn, "commitTransaction", lsid, 5)["ok"] == 1
        assert txn_end(conn, "commitTransaction", lsid, 5)["ok"] == 1  # (a commit's retry)
        # (a newer number never started: NoSuchTransaction, as before)
        assert txn_insert(conn, lsid, 6)["code"] == 251


def test_transaction_numbers_are_each_services_own(sim_mongo: Sim) -> None:
    """A session's numbers live where its transactions do, on one service: another service
    has seen none of them (behind a load balancer, a transaction stays on its service)."""
    lsid = new_lsid()
    port = sim_mongo.server.port
    with WireClient(port) as first, WireClient(port) as second:
        assert first.service_id != second.service_id  # (round robin)
        assert txn_insert(first, lsid, 2, start=True)["ok"] == 1
        assert txn_end(first, "commitTransaction", lsid, 2)["ok"] == 1
        assert txn_insert(second, lsid, 2, start=True)["ok"] == 1
        assert txn_end(second, "abortTransaction", lsid, 2)["ok"] == 1
        assert_already_started(txn_insert(first, lsid, 2, start=True), 2)


def test_pymongo_numbers_its_transactions_upward_and_a_replay_is_refused(sim_one: Sim) -> None:
    """pymongo's transactions on one session run at 1, 2, ...; a ``startTransaction`` replayed
    at the last one's number, on its session, is refused as MongoDB refuses it."""
    numbers: list[int] = []

    class Starts(GetMores):
        def started(self, event: monitoring.CommandStartedEvent) -> None:
            if event.command.get("startTransaction"):
                numbers.append(int(event.command["txnNumber"]))

    with client(sim_one.uri, event_listeners=[Starts()]) as mongo:
        items = mongo.db.items
        with mongo.start_session() as session:
            for n in range(3):
                with session.start_transaction():
                    items.insert_one({"n": n}, session=session)
            lsid = dict(session.session_id)
            with WireClient(sim_one.server.port) as conn:
                last, first = numbers[-1], numbers[0]
                assert_already_started(txn_insert(conn, lsid, last, start=True), last)
                assert_too_old(txn_insert(conn, lsid, first, start=True), first, last)
    assert numbers == [1, 2, 3]
    assert len(sim_one.server.store.documents("db.items")) == 3
