"""A real load balancer in the path: HAProxy (Debian's package) in TCP mode on 127.0.0.1, in
front of three simulated mongos processes (``SimMongoServer`` s of one service each, over one
shared store), with the PROXY protocol v2 between them as mongos's ``loadBalancerPort`` wants.

pymongo, in load-balanced mode, connects to HAProxy and runs inserts, multi-batch finds and a
transaction to completion: the simulator speaks the protocol as MongoDB does, and HAProxy's
round robin spreads pymongo's connections over the services, which only pinning survives.
"""

from __future__ import annotations

import functools
from typing import Any

import pymongo
import pytest
from pymongo.errors import ConnectionFailure, NotPrimaryError

from mongo_services import SELECTION_MS, Cluster, haproxy_cluster, wait_until
from poolkit_sim_mongo import HAProxy, WireClient, WireCommandError

__all__ = ["haproxy_cluster"]  # (the fixture: imported for pytest)

Client = pymongo.MongoClient[dict[str, Any]]


def client(uri: str, **options: Any) -> Client:
    return pymongo.MongoClient(uri, **{"serverSelectionTimeoutMS": SELECTION_MS, **options})


def test_haproxy_configuration() -> None:
    lb = HAProxy(["127.0.0.1:1001", "127.0.0.1:1002"], program="haproxy", send_proxy=True)
    config = lb.config()
    assert "mode tcp" in config
    assert "balance roundrobin" in config
    assert "server service1 127.0.0.1:1002 send-proxy-v2" in config
    with pytest.raises(ValueError, match=r"127\.0\.0\.1"):
        HAProxy(["localhost:27017"])
    with pytest.raises(ValueError, match="at least one"):
        HAProxy([])


def test_each_backend_is_its_own_service(haproxy_cluster: Cluster) -> None:
    clients = [WireClient(haproxy_cluster.lb.port) for _ in range(3)]
    try:
        ids = [c.service_id for c in clients]
        assert len(set(ids)) == 3  # (round robin over three one-service servers)
        for conn in clients:
            sim = haproxy_cluster.service_of(conn.service_id)
            # the PROXY header told the server who the client is (not HAProxy's own port)
            peers = [c.peer for c in sim.server.connections(open_only=True)]
            assert f"127.0.0.1:{conn.local_port}" in peers
    finally:
        for conn in clients:
            conn.close()


def test_getmore_through_another_backend_is_cursor_not_found(haproxy_cluster: Cluster) -> None:
    port = haproxy_cluster.lb.port
    with WireClient(port) as first, WireClient(port) as second:
        assert first.service_id != second.service_id
        first.command("db", {"insert": "c", "documents": [{"i": i} for i in range(10)]})
        found = first.command("db", {"find": "c", "batchSize": 4})
        cursor_id = found["cursor"]["id"]
        with pytest.raises(WireCommandError) as caught:
            second.command("db", {"getMore": cursor_id, "collection": "c"})
        assert caught.value.code == 43  # CursorNotFound
        more = first.command("db", {"getMore": cursor_id, "collection": "c"})
        assert len(more["cursor"]["nextBatch"]) == 6 and more["cursor"]["id"] == 0
        # the data is the cluster's: the other service sees the inserts
        assert second.command("db", {"count": "c"})["n"] == 10


def test_pymongo_inserts_and_multi_batch_finds_through_haproxy(haproxy_cluster: Cluster) -> None:
    with client(haproxy_cluster.uri) as mongo:
        items = mongo.db.items
        assert len(items.insert_many([{"i": i} for i in range(600)]).inserted_ids) == 600
        assert items.count_documents({}) == 600
        # three cursors open at once: three connections, one per backend (round robin)
        cursors = [items.find({}, batch_size=size) for size in (11, 17, 29)]
        seen: list[list[int]] = [[next(c)["i"]] for c in cursors]
        for got, cursor in zip(seen, cursors, strict=True):
            got += [d["i"] for d in cursor]
        assert seen == [list(range(600))] * 3
    stats = [sim.server.stats() for sim in haproxy_cluster.sims]
    assert sum(1 for s in stats if s.connections_accepted) >= 2
    assert sum(s.commands.get("getMore", 0) for s in stats) >= 600 // 29 + 600 // 17
    assert all(s.services[0].cursors_open == 0 for s in stats)


def test_pymongo_transaction_through_haproxy(haproxy_cluster: Cluster) -> None:
    with client(haproxy_cluster.uri) as mongo:
        items = mongo.db.items
        with mongo.start_session() as session, session.start_transaction():
            items.insert_many([{"t": i} for i in range(5)], session=session)
            items.insert_one({"t": 5}, session=session)
        assert items.count_documents({}) == 6
    assert len(haproxy_cluster.store.documents("db.items")) == 6
    # the transaction's commands all went to one service, the commit with them
    (committer,) = [
        sim for sim in haproxy_cluster.sims if sim.server.stats().commands.get("commitTransaction")
    ]
    assert committer.server.stats().commands["insert"] >= 2


def test_state_change_error_through_haproxy(haproxy_cluster: Cluster) -> None:
    for sim in haproxy_cluster.sims:
        sim.call(functools.partial(sim.server.fail_command, "insert", error_code=189, times=2))
    with client(haproxy_cluster.uri, retryWrites=False) as mongo:
        with pytest.raises(NotPrimaryError):
            mongo.db.items.insert_one({"a": 1})
        with pytest.raises(NotPrimaryError):  # (whichever backend: each fails it)
            mongo.db.items.insert_one({"a": 1})


def test_a_backend_closing_its_connections_reaches_pymongo(haproxy_cluster: Cluster) -> None:
    with client(haproxy_cluster.uri) as mongo:
        items = mongo.db.items
        items.insert_many([{"i": i} for i in range(40)])
        cursor = items.find({}, batch_size=4)
        assert next(cursor)["i"] == 0
        for sim in haproxy_cluster.sims:
            sim.call(sim.server.close_connections)
        # HAProxy passes the backend's close on to the client side
        with pytest.raises(ConnectionFailure):
            list(cursor)
        assert items.count_documents({}) == 40
    assert wait_until(
        lambda: all(s.server.stats().connections_open == 0 for s in haproxy_cluster.sims)
    )
