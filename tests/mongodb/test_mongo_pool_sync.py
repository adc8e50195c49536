"""MongoPool, the blocking twin of AsyncMongoPool, over a poolkit.Pool of blocking connections,
against the simulated load balancer on a thread of its own: pinning (cursors, transactions,
sessions), per-service clearing, the load-balanced timeout message, several threads sharing
one MongoPool. (That its source is still AsyncMongoPool's twin is checked in CI's lint step:
``python tools/async_to_sync.py --check``.)"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

import poolkit
from lb_helpers import Recorder
from poolkit import events as ev
from poolkit.mongodb import (
    AsyncMongoPool,
    InvalidOperationError,
    LoadBalancedTimeoutError,
    MongoConnection,
    MongoPool,
    NetworkError,
    OperationFailure,
    connect,
)
from poolkit.testing._thread import ServerThread
from poolkit_sim_mongo import SimMongoServer, SimMongoSettings


@pytest.fixture
def server() -> Iterator[ServerThread[SimMongoServer]]:
    with SimMongoServer(SimMongoSettings(services=3)).start_in_thread() as handle:
        yield handle


def lb_pool(
    handle: ServerThread[SimMongoServer], recorder: Recorder | None = None, **options: Any
) -> poolkit.Pool[MongoConnection]:
    pool = poolkit.Pool(
        connect("127.0.0.1", handle.port, load_balanced=True, connect_timeout=5.0),
        address=handle.address,
        options=poolkit.PoolOptions(load_balanced=True, **options),
        listeners=[recorder] if recorder is not None else [],
    )
    pool.ready()
    return pool


def spread(mongo: MongoPool, n: int) -> list[Any]:
    """Make ``n`` connections at once (round robin: one per service) and give them back."""
    leases = [mongo.pool.checkout() for _ in range(n)]
    services = [lease.connection.service_id for lease in leases]
    for lease in leases:
        lease.release()
    return services


def filled(mongo: MongoPool, n: int = 25) -> None:
    mongo.insert("test", "items", [{"_id": i, "kind": "item"} for i in range(n)])


def test_each_front_end_takes_its_own_pool(server: ServerThread[SimMongoServer]) -> None:
    with lb_pool(server) as pool:
        with pytest.raises(TypeError, match=r"AsyncMongoPool\(pool\): pool must be a poolkit"):
            AsyncMongoPool(pool)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match=r"MongoPool\(pin=...\)"):
            MongoPool(pool, pin="yes")  # type: ignore[arg-type]
        with (
            pytest.raises(ValueError, match=r"connection\(purpose=...\): one of"),
            MongoPool(pool).connection("cursors"),  # type: ignore[arg-type]
        ):
            pass
        assert pool.stats().in_use == 0


def test_a_multi_batch_cursor_is_pinned_for_its_life(server: ServerThread[SimMongoServer]) -> None:
    recorder = Recorder()
    with lb_pool(server, recorder) as pool:
        mongo = MongoPool(pool)
        spread(mongo, 3)
        filled(mongo)
        recorder.events.clear()
        with mongo.find("test", "items", batch_size=5) as cursor:
            assert mongo.in_use() == {"cursor": 1, "transaction": 0, "other": 0}
            assert [doc["_id"] for doc in cursor] == list(range(25))  # five getMores
        assert len(recorder.of(ev.ConnectionCheckedOutEvent)) == 1
        assert len(recorder.of(ev.ConnectionCheckedInEvent)) == 1
        assert mongo.stats().cursors == 0 and pool.stats().in_use == 0


def test_without_pinning_the_same_cursor_fails_on_another_service(
    server: ServerThread[SimMongoServer],
) -> None:
    with lb_pool(server) as pool:
        mongo = MongoPool(pool, pin=False)
        spread(mongo, 3)
        filled(mongo)
        cursor = mongo.find("test", "items", batch_size=5)
        # (the find's connection, taken (LIFO) by another)
        with mongo.connection(), pytest.raises(OperationFailure) as caught:
            cursor.to_list()
        assert caught.value.code == 43  # CursorNotFound: the getMore went elsewhere


def test_closing_a_cursor_kills_it_on_its_connection(server: ServerThread[SimMongoServer]) -> None:
    with lb_pool(server) as pool:
        mongo = MongoPool(pool)
        spread(mongo, 3)
        filled(mongo)
        with mongo.find("test", "items", batch_size=5) as cursor:
            assert next(cursor)["_id"] == 0
        stats = server.call(server.server.stats)
        assert stats.commands["killCursors"] == 1
        assert sum(s.cursors_open for s in stats.services) == 0
        assert list(cursor) == []  # (closed: nothing more)
        assert mongo.in_use()["cursor"] == 0 and pool.stats().in_use == 0


def test_after_a_network_error_a_cursor_stays_pinned_until_closed(
    server: ServerThread[SimMongoServer],
) -> None:
    with lb_pool(server) as pool:
        mongo = MongoPool(pool)
        filled(mongo)
        cursor = mongo.find("test", "items", batch_size=5)
        server.call(lambda: server.server.fail_command("getMore", close_connection=True))
        with pytest.raises(NetworkError):
            cursor.to_list()
        assert mongo.in_use()["cursor"] == 1
        cursor.close()
        assert server.call(server.server.stats).commands.get("killCursors", 0) == 0
        assert mongo.in_use()["cursor"] == 0 and pool.stats().in_use == 0
        assert pool.stats().total == 0  # the broken connection was not kept


def test_a_transaction_is_pinned_for_its_life_and_a_session_past_its_commit(
    server: ServerThread[SimMongoServer],
) -> None:
    recorder = Recorder()
    with lb_pool(server, recorder) as pool:
        mongo = MongoPool(pool)
        spread(mongo, 3)
        recorder.events.clear()
        with mongo.transaction("test") as txn:
            for i in range(3):
                txn.command({"insert": "orders", "documents": [{"_id": i}]})
            assert mongo.in_use()["transaction"] == 1
        assert len(recorder.of(ev.ConnectionCheckedOutEvent)) == 1
        assert len(recorder.of(ev.ConnectionCheckedInEvent)) == 1
        assert len(mongo.find("test", "orders").to_list()) == 3  # committed
        with mongo.session() as session:
            session.start_transaction()
            session.command("test", {"insert": "orders", "documents": [{"_id": 9}]})
            with session.find("test", "orders", batch_size=1) as cursor:  # shares the pin
                assert len(cursor.to_list()) == 4
            session.commit_transaction()
            session.commit_transaction()  # (again: the same transaction, same connection)
            assert session.pinned and mongo.in_use()["transaction"] == 1
        assert mongo.in_use()["transaction"] == 0 and pool.stats().in_use == 0


def test_a_state_change_error_clears_only_its_service(
    server: ServerThread[SimMongoServer],
) -> None:
    recorder = Recorder()
    with lb_pool(server, recorder) as pool:
        mongo = MongoPool(pool)
        services = spread(mongo, 3)
        lease = pool.checkout()  # (LIFO: the last service's connection)
        failing = lease.connection.service_id
        lease.release()
        server.call(lambda: server.server.fail_command("ping", error_code=91))
        with pytest.raises(OperationFailure):
            mongo.command("admin", {"ping": 1})
        cleared = recorder.of(ev.PoolClearedEvent)
        assert [event.service_id for event in cleared] == [failing]
        assert pool.service_generation(failing) is None  # its only connection closed
        assert all(pool.service_generation(s) == 0 for s in services if s != failing)
        assert pool.stats().state is poolkit.PoolState.READY  # not paused
        assert mongo.command("admin", {"ping": 1})["ok"] == 1


def test_the_load_balanced_wait_queue_timeout_says_how_connections_are_used(
    server: ServerThread[SimMongoServer],
) -> None:
    with lb_pool(server, max_size=3) as pool:
        mongo = MongoPool(pool)
        filled(mongo)
        cursor = mongo.find("test", "items", batch_size=2)
        with mongo.transaction("test") as txn:
            txn.command({"insert": "orders", "documents": [{"_id": 1}]})
            with (
                mongo.connection("other"),
                pytest.raises(LoadBalancedTimeoutError) as caught,
                mongo.connection(timeout=0.05),
            ):
                pass
        cursor.close()
        assert str(caught.value) == (
            "Timeout waiting for connection from the connection pool. maxPoolSize: 3, "
            "connections in use by cursors: 1, connections in use by transactions: 1, "
            "connections in use by other operations: 1"
        )
        assert mongo.in_use() == {"cursor": 0, "transaction": 0, "other": 0}


def test_threads_share_one_mongo_pool(server: ServerThread[SimMongoServer]) -> None:
    """Eight threads, each running cursors and transactions on one MongoPool of four
    connections: every cursor completes on its pinned connection, every transaction commits,
    and the counts by purpose come back to zero."""
    with lb_pool(server, max_size=4, wait_queue_timeout=30.0) as pool:
        mongo = MongoPool(pool)
        filled(mongo, 30)
        errors: list[BaseException] = []

        def work(worker: int) -> None:
            try:
                for round_ in range(10):
                    assert len(mongo.find("test", "items", batch_size=7).to_list()) == 30
                    with mongo.transaction("test") as txn:
                        txn.command({"insert": "log", "documents": [{"w": worker, "r": round_}]})
            except BaseException as exc:  # (reported by the main thread)
                errors.append(exc)

        threads = [threading.Thread(target=work, args=(w,)) for w in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert not errors, errors
        assert len(mongo.find("test", "log").to_list()) == 80
        assert mongo.in_use() == {"cursor": 0, "transaction": 0, "other": 0}
        assert pool.stats().in_use == 0


def test_misuse_is_refused_and_leaves_nothing_out(server: ServerThread[SimMongoServer]) -> None:
    """A few of test_mongo_pool_misuse.py's cases, through the blocking twin."""
    with lb_pool(server, max_size=1, wait_queue_timeout=1.0) as pool:
        mongo = MongoPool(pool)
        filled(mongo)
        for _ in range(2):  # (a failed first command gives its connection back)
            with pytest.raises(OperationFailure):
                mongo.find("test", "items", {"$foo": 1})
        with pytest.raises(ValueError, match=r"find\(batch_size=...\)"):
            mongo.find("test", "items", batch_size=-1)
        with mongo.session() as session:
            with pytest.raises(InvalidOperationError, match="no transaction started"):
                session.commit_transaction()
            session.start_transaction()
            session.command("test", {"insert": "t", "documents": [{"_id": 1}]})
            cursor = session.find("test", "t", batch_size=0)
        with pytest.raises(InvalidOperationError, match="transaction that has ended"):
            cursor.to_list()
        cursor.close()
        assert mongo.in_use() == {"cursor": 0, "transaction": 0, "other": 0}
        assert pool.stats().in_use == 0
