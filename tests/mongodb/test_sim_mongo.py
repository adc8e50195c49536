"""The simulated MongoDB load balancer (``poolkit_sim_mongo``), driven command by command
(:class:`WireClient`) and by pymongo, a real driver, in load-balanced mode.

What a real load balancer does and the simulator must too: each TCP connection goes to one
service for its life; a cursor lives in the service that opened it, so a ``getMore`` on a
connection of another service is CursorNotFound. pymongo pins a cursor (and a transaction) to
its connection in load-balanced mode, so its multi-batch finds complete all the same.
"""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import pymongo
import pytest
from bson.objectid import ObjectId
from pymongo import monitoring
from pymongo.errors import (
    AutoReconnect,
    ConfigurationError,
    ConnectionFailure,
    DuplicateKeyError,
    NetworkTimeout,
    NotPrimaryError,
    ServerSelectionTimeoutError,
)

from mongo_services import SELECTION_MS, Sim, sim_mongo, start_sim, wait_until
from poolkit.mongodb.wire import Message, MessageReader, encode_msg, encode_query
from poolkit_sim_mongo import (
    STATE_CHANGE_CODES,
    SimMongoServer,
    SimMongoSettings,
    WireClient,
    WireCommandError,
)
from poolkit_sim_mongo.store import QueryError, matches, project, sort_documents

__all__ = ["sim_mongo"]  # (the fixture: imported for pytest)

Client = pymongo.MongoClient[dict[str, Any]]


def client(uri: str, **options: Any) -> Client:
    return pymongo.MongoClient(uri, **{"serverSelectionTimeoutMS": SELECTION_MS, **options})


def error_code(error: NotPrimaryError) -> Any:
    """The ``code`` of the server's reply that raised ``error``."""
    assert isinstance(error.details, dict)
    return error.details.get("code")


def service_of(sim: Sim, command: str) -> list[int]:
    """The indexes of the services that received ``command``."""
    return [s.index for s in sim.server.stats().services if s.commands.get(command)]


# ---------------------------------------------------------------------- the protocol, raw


def test_hello_answers_as_a_mongos_behind_a_load_balancer(sim_mongo: Sim) -> None:
    with WireClient(sim_mongo.server.port) as conn:
        hello = conn.hello_reply
    assert hello["ok"] == 1
    assert hello["isWritablePrimary"] is True
    assert hello["msg"] == "isdbgrid"
    assert hello["maxWireVersion"] >= 13  # (5.0: the first with load balancer support)
    assert isinstance(hello["serviceId"], ObjectId)
    assert hello["serviceId"] in sim_mongo.server.service_ids
    for field in (
        "maxBsonObjectSize",
        "maxMessageSizeBytes",
        "maxWriteBatchSize",
        "localTime",
        "logicalSessionTimeoutMinutes",
        "connectionId",
        "minWireVersion",
    ):
        assert field in hello


def test_connections_are_assigned_round_robin_to_distinct_services(sim_mongo: Sim) -> None:
    ids = sim_mongo.server.service_ids
    assert len(set(ids)) == 3
    clients = [WireClient(sim_mongo.server.port) for _ in range(6)]
    try:
        assert [c.service_id for c in clients] == [*ids, *ids]
        # connectionId counts per service (each service is its own mongos)
        assert [c.hello_reply["connectionId"] for c in clients] == [1, 1, 1, 2, 2, 2]
        # a second hello on a connection carries no serviceId (as mongos's)
        assert "serviceId" not in clients[0].command("admin", {"hello": 1})
    finally:
        for c in clients:
            c.close()
    stats = sim_mongo.server.stats()
    assert [s.connections_accepted for s in stats.services] == [2, 2, 2]


def test_legacy_op_query_hello_is_answered_with_op_reply(sim_mongo: Sim) -> None:
    with WireClient(sim_mongo.server.port, handshake=False) as conn:
        reply = conn.legacy_hello("isMaster")
        assert reply["ismaster"] is True
        assert reply["helloOk"] is True
        assert reply["serviceId"] in sim_mongo.server.service_ids
    # any other command in OP_QUERY is refused, as a 6.0+ server does
    with socket.create_connection(("127.0.0.1", sim_mongo.server.port), 5) as sock:
        sock.sendall(encode_query("admin.$cmd", {"ping": 1}, 7))
        data = sock.recv(65536)
    assert b"Unsupported OP_QUERY command" in data


def test_a_client_not_in_load_balanced_mode_is_refused(sim_mongo: Sim) -> None:
    with pytest.raises(WireCommandError) as caught:
        WireClient(sim_mongo.server.port, load_balanced=False)
    assert caught.value.code == 354  # LoadBalancerSupportMismatch
    # pymongo without loadBalanced=true: its monitor's handshake fails, the server stays Unknown
    uri = f"mongodb://{sim_mongo.server.address}/?directConnection=true"
    with (
        client(uri, serverSelectionTimeoutMS=300) as plain,
        pytest.raises(ServerSelectionTimeoutError, match="load balancer"),
    ):
        plain.admin.command("ping")


def test_pymongo_refuses_a_mongos_not_behind_a_load_balancer() -> None:
    sim = start_sim(SimMongoSettings(services=1, load_balanced=False))
    try:
        with client(sim.uri) as mongo, pytest.raises(ConfigurationError, match="load balancing"):
            mongo.admin.command("ping")
        # (while a client not in load-balanced mode sees a mongos, and works)
        with client(f"mongodb://{sim.server.address}/") as plain:
            plain.db.items.insert_one({"a": 1})
            assert plain.topology_description.topology_type_name == "Sharded"
    finally:
        sim.thread.stop()


def test_getmore_on_another_service_is_cursor_not_found(sim_mongo: Sim) -> None:
    port = sim_mongo.server.port
    with WireClient(port) as first, WireClient(port) as second:
        assert first.service_id is not None and first.service_id != second.service_id
        first.command("db", {"insert": "c"}, sequences={"documents": [{"i": i} for i in range(10)]})
        found = first.command("db", {"find": "c", "filter": {}, "batchSize": 3})
        cursor_id = found["cursor"]["id"]
        assert cursor_id != 0 and len(found["cursor"]["firstBatch"]) == 3

        # what a load balancer does to a driver that does not pin the cursor's connection
        with pytest.raises(WireCommandError) as caught:
            second.command("db", {"getMore": cursor_id, "collection": "c"})
        assert caught.value.code == 43  # CursorNotFound
        killed = second.command("db", {"killCursors": "c", "cursors": [cursor_id]})
        assert killed["cursorsNotFound"] == [cursor_id]

        more = first.command("db", {"getMore": cursor_id, "collection": "c", "batchSize": 4})
        assert len(more["cursor"]["nextBatch"]) == 4
        assert sim_mongo.server.stats().service(first.service_id).cursors_open == 1
        killed = first.command("db", {"killCursors": "c", "cursors": [cursor_id]})
        assert killed["cursorsKilled"] == [cursor_id]
        assert sim_mongo.server.stats().service(first.service_id).cursors_open == 0


def test_a_cursor_is_the_services_not_the_connections(sim_mongo: Sim) -> None:
    port = sim_mongo.server.port
    clients = [WireClient(port) for _ in range(4)]  # (the 1st and the 4th: service 0)
    try:
        first, fourth = clients[0], clients[3]
        assert first.service_id == fourth.service_id
        first.command("db", {"insert": "c", "documents": [{"i": i} for i in range(5)]})
        found = first.command("db", {"find": "c", "batchSize": 2})
        more = fourth.command("db", {"getMore": found["cursor"]["id"], "collection": "c"})
        assert [d["i"] for d in more["cursor"]["nextBatch"]] == [2, 3, 4]
        assert more["cursor"]["id"] == 0  # (drained: closed)
    finally:
        for c in clients:
            c.close()


def test_unknown_commands_are_command_not_found(sim_mongo: Sim) -> None:
    with WireClient(sim_mongo.server.port) as conn:
        reply = conn.command("admin", {"frobnicate": 1}, check=False)
    assert reply["ok"] == 0 and reply["code"] == 59 and reply["codeName"] == "CommandNotFound"


def test_proxy_protocol_v1_header_names_the_client() -> None:
    sim = start_sim(SimMongoSettings(services=1, proxy_protocol=True))
    try:
        with socket.create_connection(("127.0.0.1", sim.server.port), 5) as sock:
            sock.sendall(b"PROXY TCP4 127.0.0.2 127.0.0.1 5555 27017\r\n")
            assert wait_until(lambda: bool(sim.server.connections()))
        assert sim.server.connections()[0].peer == "127.0.0.2:5555"
    finally:
        sim.thread.stop()


def test_garbage_closes_its_connection_only(sim_mongo: Sim) -> None:
    with socket.create_connection(("127.0.0.1", sim_mongo.server.port), 5) as sock:
        sock.sendall(b"\x20\x00\x00\x00" + b"\x00" * 8 + b"\x0f\x27\x00\x00" + b"x" * 16)
        assert sock.recv(100) == b""  # (an unknown opCode: closed, unanswered)
    with WireClient(sim_mongo.server.port) as conn:
        assert conn.command("admin", {"ping": 1})["ok"] == 1


def test_the_server_runs_on_the_callers_event_loop_too() -> None:
    async def main() -> dict[str, Any]:
        async with SimMongoServer(SimMongoSettings(services=2)) as server:
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            try:
                writer.write(encode_msg({"hello": 1, "loadBalanced": True, "$db": "admin"}, 1))
                parser = MessageReader()
                replies: list[Message] = []
                async with asyncio.timeout(5):
                    while not replies:
                        data = await reader.read(65536)
                        assert data, "the server closed the connection"
                        replies = parser.feed(data)
                assert replies[0].response_to == 1
                return replies[0].body
            finally:
                writer.close()
                await writer.wait_closed()

    hello = asyncio.run(main())
    assert hello["ok"] == 1 and isinstance(hello["serviceId"], ObjectId)


# ---------------------------------------------------------------------- pymongo, a real driver


def test_pymongo_inserts_and_a_multi_batch_find_complete(sim_mongo: Sim) -> None:
    with client(sim_mongo.uri) as mongo:
        items = mongo.db.items
        result = items.insert_many([{"i": i, "even": i % 2 == 0} for i in range(500)])
        assert len(result.inserted_ids) == 500
        assert sum(1 for _ in items.find({}, batch_size=23)) == 500
        assert [d["i"] for d in items.find({"even": True}, batch_size=10).limit(30)] == list(
            range(0, 60, 2)
        )
        assert items.count_documents({}) == 500  # (an aggregate: not simulated)
    stats = sim_mongo.server.stats()
    assert stats.commands["getMore"] >= 500 // 23
    assert sum(s.cursors_open for s in stats.services) == 0


def test_pymongo_pins_each_cursor_to_its_connection_across_services(sim_mongo: Sim) -> None:
    with client(sim_mongo.uri) as mongo:
        items = mongo.db.items
        items.insert_many([{"i": i} for i in range(100)])
        first = items.find({}, batch_size=7)
        assert next(first)["i"] == 0  # (open, pinned: its connection stays checked out)
        second = items.find({}, batch_size=9)  # (so this one needs a second connection)
        got_first, got_second = [0], []
        for a, b in zip(first, second, strict=False):
            got_first.append(a["i"])
            got_second.append(b["i"])
        got_first += [d["i"] for d in first]
        got_second += [d["i"] for d in second]
        assert got_first == list(range(100))
        assert got_second == list(range(100))
    stats = sim_mongo.server.stats()
    used = [s.index for s in stats.services if s.connections_accepted]
    assert len(used) >= 2  # (two connections, round robin: two services)
    # every getMore went to a service where its find ran (none was CursorNotFound)
    assert set(service_of(sim_mongo, "getMore")) <= set(service_of(sim_mongo, "find"))


def test_pymongo_transaction_commits_and_aborts(sim_mongo: Sim) -> None:
    with client(sim_mongo.uri) as mongo:
        items = mongo.db.items
        with mongo.start_session() as session:
            with session.start_transaction():
                items.insert_one({"t": "committed"}, session=session)
                items.insert_many([{"t": "committed"}, {"t": "committed"}], session=session)
                assert items.count_documents({"t": "committed"}, session=session) == 3
                assert sim_mongo.store_count("db.items") == 0  # (not before the commit)
            with session.start_transaction():
                items.insert_one({"t": "aborted"}, session=session)
                session.abort_transaction()
        assert items.count_documents({"t": "committed"}) == 3
        assert items.count_documents({"t": "aborted"}) == 0
    stats = sim_mongo.server.stats()
    assert stats.commands["commitTransaction"] == 1
    assert stats.commands["abortTransaction"] == 1
    assert sum(s.transactions_open for s in stats.services) == 0


def test_pymongo_watches_a_collection_and_resumes_after_a_token(sim_mongo: Sim) -> None:
    """pymongo's change stream (an aggregate with ``$changeStream``, then getMores) sees the
    changes made after it opened, in order, through its ``$match``; and one opened with the
    resume token of the first change starts after it."""
    with client(sim_mongo.uri) as mongo:
        items = mongo.db.items
        items.insert_one({"_id": 0})  # (before the stream: not seen)
        match = [{"$match": {"operationType": {"$in": ["insert", "delete"]}}}]
        with items.watch(match, max_await_time_ms=50) as s:  # (a getMore waits that long)
            items.insert_many([{"_id": 1}, {"_id": 2}])
            mongo.db.other.insert_one({"_id": 3})  # (another collection: not seen)
            items.delete_one({"_id": 1})
            changes: list[dict[str, Any]] = []
            while (change := s.try_next()) is not None:  # (None: nothing within 50 ms)
                changes.append(change)
        assert [(c["operationType"], c["documentKey"]["_id"]) for c in changes] == [
            ("insert", 1),
            ("insert", 2),
            ("delete", 1),
        ]
        assert changes[0]["fullDocument"] == {"_id": 1}
        assert changes[0]["ns"] == {"db": "db", "coll": "items"}
        with items.watch(resume_after=changes[0]["_id"], max_await_time_ms=50) as resumed:
            after = resumed.try_next()
            assert after is not None and after["documentKey"] == {"_id": 2}
    assert sum(s.cursors_open for s in sim_mongo.server.stats().services) == 0  # (killed)


def test_pymongo_write_concern_zero_is_not_answered(sim_mongo: Sim) -> None:
    with client(sim_mongo.uri, w=0) as mongo:
        result = mongo.db.items.insert_one({"fire": "and forget"})  # (OP_MSG moreToCome)
        assert not result.acknowledged
        assert wait_until(lambda: sim_mongo.store_count("db.items") == 1)


def test_pymongo_duplicate_key(sim_mongo: Sim) -> None:
    with client(sim_mongo.uri) as mongo:
        mongo.db.items.insert_one({"_id": 1})
        with pytest.raises(DuplicateKeyError):
            mongo.db.items.insert_one({"_id": 1})


# ---------------------------------------------------------------------- faults, through pymongo


@pytest.mark.parametrize("code", [10107, 11600, 91, 189])
def test_state_change_error_reaches_pymongo(sim_mongo: Sim, code: int) -> None:
    assert code in STATE_CHANGE_CODES
    with client(sim_mongo.uri) as mongo:
        items = mongo.db.items
        # twice: the first answer and pymongo's one retry (the error is a retryable write's)
        point = sim_mongo.call(
            lambda: sim_mongo.server.fail_command("insert", error_code=code, times=2)
        )
        with pytest.raises(NotPrimaryError) as caught:
            items.insert_one({"a": 1})
        assert error_code(caught.value) == code
        assert caught.value.has_error_label("RetryableWriteError")
        assert point.hits == 2
        items.insert_one({"a": 2})  # (the fault is spent)
        assert [d["a"] for d in items.find()] == [2]


def test_a_state_change_error_once_is_retried_by_pymongo(sim_mongo: Sim) -> None:
    with client(sim_mongo.uri) as mongo:
        sim_mongo.call(lambda: sim_mongo.server.fail_command("insert", error_code=10107))
        mongo.db.items.insert_one({"a": 1})
        assert mongo.db.items.count_documents({}) == 1
    assert sim_mongo.server.stats().fault_hits == 1


class PoolClears(monitoring.ConnectionPoolListener):
    """Records pymongo's PoolClearedEvents (the other pool events are ignored)."""

    def __init__(self) -> None:
        self.cleared: list[monitoring.PoolClearedEvent] = []

    def pool_cleared(self, event: monitoring.PoolClearedEvent) -> None:
        self.cleared.append(event)

    def pool_created(self, event: monitoring.PoolCreatedEvent) -> None: ...
    def pool_ready(self, event: monitoring.PoolReadyEvent) -> None: ...
    def pool_closed(self, event: monitoring.PoolClosedEvent) -> None: ...
    def connection_created(self, event: monitoring.ConnectionCreatedEvent) -> None: ...
    def connection_ready(self, event: monitoring.ConnectionReadyEvent) -> None: ...
    def connection_closed(self, event: monitoring.ConnectionClosedEvent) -> None: ...
    def connection_check_out_started(
        self, event: monitoring.ConnectionCheckOutStartedEvent
    ) -> None: ...
    def connection_check_out_failed(
        self, event: monitoring.ConnectionCheckOutFailedEvent
    ) -> None: ...
    def connection_checked_out(self, event: monitoring.ConnectionCheckedOutEvent) -> None: ...
    def connection_checked_in(self, event: monitoring.ConnectionCheckedInEvent) -> None: ...


def test_a_shutdown_error_clears_the_pool_of_its_service_only(sim_mongo: Sim) -> None:
    listener = PoolClears()
    with client(sim_mongo.uri, retryWrites=False, event_listeners=[listener]) as mongo:
        sim_mongo.call(lambda: sim_mongo.server.fail_command("insert", error_code=11600))
        with pytest.raises(NotPrimaryError):
            mongo.db.items.insert_one({"a": 1})
    (service,) = [s for s in sim_mongo.server.stats().services if s.connections_accepted]
    assert [e.service_id for e in listener.cleared] == [service.service_id]


def test_close_before_the_reply_is_a_network_error(sim_mongo: Sim) -> None:
    with client(sim_mongo.uri) as mongo:
        mongo.db.items.insert_one({"a": 1})
        sim_mongo.call(
            lambda: sim_mongo.server.fail_command("find", close_connection=True, times=2)
        )
        with pytest.raises(AutoReconnect):  # (after pymongo's one retry of the read)
            mongo.db.items.find_one({})
        assert mongo.db.items.find_one({}) is not None
    assert sim_mongo.server.stats().connections_closed_by_fault == 2


def test_closing_the_connections_breaks_a_pinned_cursor(sim_mongo: Sim) -> None:
    with client(sim_mongo.uri) as mongo:
        items = mongo.db.items
        items.insert_many([{"i": i} for i in range(50)])
        cursor = items.find({}, batch_size=5)
        assert next(cursor)["i"] == 0
        assert sim_mongo.call(sim_mongo.server.close_connections) == 1
        with pytest.raises(ConnectionFailure):
            list(cursor)
        assert items.count_documents({}) == 50  # (a new connection)


def test_a_slow_hello_times_out_the_handshake(sim_mongo: Sim) -> None:
    sim_mongo.call(lambda: sim_mongo.server.slow_hello(5.0, app_name="slow"))
    # (pymongo 4.x: connectTimeoutMS bounds the TCP connect only; the handshake's hello runs
    # under socketTimeoutMS)
    with (
        client(sim_mongo.uri, appName="slow", connectTimeoutMS=200, socketTimeoutMS=200) as slow,
        pytest.raises(NetworkTimeout),
    ):
        slow.admin.command("ping")
    with client(sim_mongo.uri, appName="other", socketTimeoutMS=2000) as other:
        assert other.admin.command("ping")["ok"] == 1


def test_configure_fail_point_command(sim_mongo: Sim) -> None:
    with client(sim_mongo.uri) as mongo:
        mongo.admin.command(
            {
                "configureFailPoint": "failCommand",
                "mode": {"times": 1},
                "data": {"failCommands": ["ping"], "errorCode": 91},
            }
        )
        with pytest.raises(NotPrimaryError) as caught:
            mongo.admin.command("ping")
        assert error_code(caught.value) == 91
        mongo.admin.command("ping")
        mongo.admin.command(
            {
                "configureFailPoint": "failCommand",
                "mode": "alwaysOn",
                "data": {"failCommands": ["find"], "closeConnection": True},
            }
        )
        mongo.admin.command({"configureFailPoint": "failCommand", "mode": "off"})
        assert mongo.db.items.find_one() is None


# ---------------------------------------------------------------------- the query language


def test_queries_sorts_and_projections() -> None:
    doc = {"_id": 1, "a": 5, "b": {"c": "x"}, "tags": ["red", "blue"], "flag": True}
    assert matches(doc, {"a": 5, "b.c": "x", "tags": "red"})
    assert matches(doc, {"a": {"$gte": 5, "$lt": 6}, "missing": None})
    assert matches(doc, {"$or": [{"a": 1}, {"tags": {"$in": ["blue"]}}]})
    assert not matches(doc, {"flag": 1})  # (true is not 1)
    assert not matches(doc, {"a": {"$ne": 5}})
    assert matches(doc, {"missing": {"$exists": False}})
    with pytest.raises(QueryError):
        matches(doc, {"a": {"$where": "1"}})
    docs: list[dict[str, Any]] = [
        {"k": 2, "n": "b"},
        {"k": 1, "n": "a"},
        {"n": "none"},
        {"k": 2, "n": "a"},
    ]
    assert [d["n"] for d in sort_documents(docs, {"k": -1, "n": 1})] == ["a", "b", "a", "none"]
    assert project(doc, {"a": 1}) == {"_id": 1, "a": 5}
    assert project(doc, {"_id": 0, "tags": 0, "b": 0, "flag": 0}) == {"a": 5}
