"""The expectations of spec-tests/load-balancers/ that concern the pool and the connection,
emulated: each test below names the spec file and case it follows, and runs it against the
simulated load balancer (poolkit_sim_mongo) through poolkit.mongodb.AsyncMongoPool, checking
the same connection counts and CMAP events the spec's runner checks. (The spec files drive a
full driver's CRUD API through the unified test runner; AsyncMongoPool has the pool's part.)"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, TypeVar

import pytest

import poolkit
from lb_helpers import Recorder, filled, lb_pool, run, spread
from poolkit import events as ev
from poolkit.mongodb import (
    AsyncMongoPool,
    LoadBalancedTimeoutError,
    NetworkError,
    OperationFailure,
    async_connect,
)
from poolkit.mongodb.monitoring import (
    CommandFailedEvent,
    CommandStartedEvent,
    CommandSucceededEvent,
)
from poolkit_sim_mongo import SimMongoServer, SimMongoSettings

CMAP = (
    ev.ConnectionCheckedOutEvent,
    ev.ConnectionCheckedInEvent,
    ev.ConnectionClosedEvent,
)


def cmap(recorder: Recorder) -> list[str]:
    """The checked-out, checked-in and closed events, as the spec files write them."""
    names = []
    for event in recorder.events:
        if isinstance(event, ev.ConnectionClosedEvent):
            names.append(f"closed:{event.reason}")
        elif isinstance(event, ev.ConnectionCheckedOutEvent):
            names.append("out")
        elif isinstance(event, ev.ConnectionCheckedInEvent):
            names.append("in")
    return names


async def prepared(server: SimMongoServer, recorder: Recorder) -> AsyncMongoPool:
    pool = await lb_pool(server, recorder)
    mongo = AsyncMongoPool(pool)
    await spread(mongo, 1)
    await filled(server, mongo, 3)
    recorder.events.clear()
    return mongo


def checked_out(mongo: AsyncMongoPool) -> int:
    return mongo.pool.stats().in_use


F = TypeVar("F", bound=Callable[..., None])


def emulated(case: str) -> Callable[[F], F]:
    """Labels a test as the emulation of ``case`` (spec file: description): its id names it."""

    def label(test: F) -> F:
        marked: F = pytest.mark.parametrize("spec_case", [case])(test)
        return marked

    return label


@emulated(
    "cursors.json: no connection is pinned if all documents are returned in the initial batch"
)
def test_no_pin_when_the_first_batch_has_everything(spec_case: str) -> None:
    async def main() -> None:
        recorder = Recorder()
        async with SimMongoServer(SimMongoSettings(services=2)) as server:
            mongo = await prepared(server, recorder)
            cursor = await mongo.find("test", "items")
            assert cursor.id == 0 and checked_out(mongo) == 0
            assert cmap(recorder) == ["out", "in"]
            await mongo.pool.close()

    run(main)


@emulated("cursors.json: pinned connections are not returned after an network error during getMore")
def test_network_error_during_get_more(spec_case: str) -> None:
    async def main() -> None:
        recorder = Recorder()
        async with SimMongoServer(SimMongoSettings(services=2)) as server:
            mongo = await prepared(server, recorder)
            server.fail_command("getMore", close_connection=True)
            cursor = await mongo.find("test", "items", batch_size=2)
            assert checked_out(mongo) == 1
            assert [(await cursor.__anext__())["_id"] for _ in range(2)] == [0, 1]
            with pytest.raises(NetworkError):
                await cursor.__anext__()
            assert checked_out(mongo) == 1
            await cursor.close()
            assert checked_out(mongo) == 0
            assert cmap(recorder) == ["out", "in", "closed:error"]
            assert server.stats().commands.get("killCursors", 0) == 0
            await mongo.pool.close()

    run(main)


@emulated(
    "cursors.json: pinned connections are returned after a network error during a "
    "killCursors request"
)
def test_network_error_during_kill_cursors(spec_case: str) -> None:
    async def main() -> None:
        recorder = Recorder()
        async with SimMongoServer(SimMongoSettings(services=2)) as server:
            mongo = await prepared(server, recorder)
            server.fail_command("killCursors", close_connection=True)
            cursor = await mongo.find("test", "items", batch_size=2)
            assert checked_out(mongo) == 1
            await cursor.close()
            assert checked_out(mongo) == 0
            assert cmap(recorder) == ["out", "in", "closed:error"]
            await mongo.pool.close()

    run(main)


@emulated(
    "cursors.json: pinned connections are not returned to the pool after a non-network "
    "error on getMore"
)
def test_non_network_error_on_get_more(spec_case: str) -> None:
    async def main() -> None:
        recorder = Recorder()
        async with SimMongoServer(SimMongoSettings(services=2)) as server:
            mongo = await prepared(server, recorder)
            server.fail_command("getMore", error_code=7)
            cursor = await mongo.find("test", "items", batch_size=2)
            assert [(await cursor.__anext__())["_id"] for _ in range(2)] == [0, 1]
            with pytest.raises(OperationFailure) as caught:
                await cursor.__anext__()
            assert caught.value.code == 7
            assert checked_out(mongo) == 1  # still pinned
            await cursor.close()
            assert checked_out(mongo) == 0
            assert cmap(recorder) == ["out", "in"]
            await mongo.pool.close()

    run(main)


@emulated("cursors.json: pinned connections are returned when the cursor is drained")
def test_returned_when_drained(spec_case: str) -> None:
    async def main() -> None:
        recorder = Recorder()
        async with SimMongoServer(SimMongoSettings(services=2)) as server:
            mongo = await prepared(server, recorder)
            cursor = await mongo.find("test", "items", batch_size=2)
            assert checked_out(mongo) == 1
            assert len(await cursor.to_list()) == 3
            assert checked_out(mongo) == 0 and cmap(recorder) == ["out", "in"]
            await mongo.pool.close()

    run(main)


@emulated("sdam-error-handling.json: stale errors are ignored")
def test_stale_errors_are_ignored(spec_case: str) -> None:
    """Two operations fail on connections of the same service; the first clears it; the
    second, from a connection of the generation it cleared, clears nothing more."""

    async def main() -> None:
        recorder = Recorder()
        async with SimMongoServer(SimMongoSettings(services=1)) as server:
            pool = await lb_pool(server, recorder)
            mongo = AsyncMongoPool(pool)
            server.fail_command("ping", error_code=91, delay=0.1, times=2)  # ShutdownInProgress
            first = asyncio.create_task(mongo.command("admin", {"ping": 1}))
            second = asyncio.create_task(mongo.command("admin", {"ping": 1}))
            for task in (first, second):
                with pytest.raises(OperationFailure):
                    await task
            assert len(recorder.of(ev.PoolClearedEvent)) == 1
            await pool.close()

    run(main)


@emulated("sdam-error-handling.json: errors during the initial connection hello are ignored")
def test_hello_errors_are_ignored(spec_case: str) -> None:
    async def main() -> None:
        recorder = Recorder()
        async with SimMongoServer(SimMongoSettings(services=1)) as server:
            pool = await lb_pool(server, recorder)
            server.fail_command("hello", close_connection=True)
            with pytest.raises(NetworkError):
                await AsyncMongoPool(pool).command("admin", {"ping": 1})
            assert recorder.of(ev.PoolClearedEvent) == []
            assert (await AsyncMongoPool(pool).command("admin", {"ping": 1}))["ok"] == 1
            await pool.close()

    run(main)


@emulated("event-monitoring.json: command started and succeeded events include serviceId")
def test_command_events_include_the_service(spec_case: str) -> None:
    async def main() -> None:
        commands = Recorder()
        async with SimMongoServer(SimMongoSettings(services=2)) as server:
            pool = await lb_pool(server, commands=commands)
            mongo = AsyncMongoPool(pool)
            await mongo.insert("test", "items", [{"_id": 1}])
            (started,) = commands.of(CommandStartedEvent)
            (succeeded,) = commands.of(CommandSucceededEvent)
            assert started.command_name == "insert" and started.command["insert"] == "items"
            assert started.service_id in server.service_ids
            assert succeeded.service_id == started.service_id
            assert succeeded.request_id == started.request_id and succeeded.duration >= 0
            assert succeeded.reply["n"] == 1
            await pool.close()

    run(main)


@emulated("event-monitoring.json: command failed events include serviceId")
def test_command_failed_events_include_the_service(spec_case: str) -> None:
    async def main() -> None:
        commands = Recorder()
        async with SimMongoServer(SimMongoSettings(services=2)) as server:
            pool = await lb_pool(server, commands=commands)
            server.fail_command("insert", error_code=11600)
            with pytest.raises(OperationFailure):
                await AsyncMongoPool(pool).insert("test", "items", [{"_id": 1}])
            (failed,) = commands.of(CommandFailedEvent)
            assert failed.command_name == "insert" and failed.service_id in server.service_ids
            assert isinstance(failed.failure, OperationFailure)
            await pool.close()

    run(main)


@emulated("event-monitoring.json: poolClearedEvent events include serviceId")
def test_pool_cleared_events_include_the_service(spec_case: str) -> None:
    async def main() -> None:
        recorder = Recorder()
        async with SimMongoServer(SimMongoSettings(services=2)) as server:
            pool = await lb_pool(server, recorder)
            server.fail_command("insert", close_connection=True)
            with pytest.raises(NetworkError) as caught:
                await AsyncMongoPool(pool).insert("test", "items", [{"_id": 1}])
            (cleared,) = recorder.of(ev.PoolClearedEvent)
            assert cleared.service_id == caught.value.service_id
            assert cleared.service_id in server.service_ids
            await pool.close()

    run(main)


def test_the_handshake_is_not_monitored_and_secrets_are_not_published() -> None:
    async def main() -> None:
        commands = Recorder()
        async with SimMongoServer(SimMongoSettings(services=1)) as server:
            pool = await lb_pool(server, commands=commands)
            async with pool.connection() as conn:
                assert commands.events == []  # (hello was the handshake's)
                with pytest.raises(OperationFailure):  # (the simulator knows no saslStart)
                    await conn.command("admin", {"saslStart": 1, "payload": b"secret"})
            (started,) = commands.of(CommandStartedEvent)
            assert started.command == {}
            await pool.close()

    run(main)


@emulated(
    "transactions.json: pinned connection is released after a transient non-network CRUD error"
)
def test_a_transient_error_releases_the_pin(spec_case: str) -> None:
    async def main() -> None:
        recorder = Recorder()
        async with SimMongoServer(SimMongoSettings(services=2)) as server:
            pool = await lb_pool(server, recorder)
            mongo = AsyncMongoPool(pool)
            await spread(mongo, 1)
            recorder.events.clear()
            server.fail_command("insert", error_code=24, error_labels=["TransientTransactionError"])
            txn = mongo.transaction("test")
            await txn.__aenter__()  # (nothing pinned yet: the first command pins)
            assert mongo.in_use()["transaction"] == 0
            with pytest.raises(OperationFailure) as caught:
                await txn.command({"insert": "orders", "documents": [{"_id": 1}]})
            assert caught.value.has_error_label("TransientTransactionError")
            assert mongo.in_use()["transaction"] == 0 and checked_out(mongo) == 0  # at once
            assert cmap(recorder) == ["out", "in"]
            await txn.__aexit__(type(caught.value), caught.value, None)  # (aborts: unpinned)
            await pool.close()

    run(main)


@emulated("transactions.json: pinned connection is not released after a non-transient CRUD error")
def test_a_non_transient_error_keeps_the_pin(spec_case: str) -> None:
    async def main() -> None:
        async with SimMongoServer(SimMongoSettings(services=2)) as server:
            pool = await lb_pool(server)
            mongo = AsyncMongoPool(pool)
            async with mongo.transaction("test") as txn:
                await txn.command({"insert": "orders", "documents": [{"_id": 1}]})
                server.fail_command("insert", error_code=51)  # (no label: not transient)
                with pytest.raises(OperationFailure):
                    await txn.command({"insert": "orders", "documents": [{"_id": 2}]})
                assert mongo.in_use()["transaction"] == 1 and checked_out(mongo) == 1
                stats = mongo.stats()
                assert (stats.transactions, stats.cursors, stats.other) == (1, 0, 0)
                assert stats.pool.in_use == 1
                await txn.command({"insert": "orders", "documents": [{"_id": 3}]})
            assert checked_out(mongo) == 0
            assert [d["_id"] for d in await (await mongo.find("test", "orders")).to_list()] == [
                1,
                3,
            ]
            await pool.close()

    run(main)


@emulated("sdam-error-handling.json: errors during authentication are processed")
def test_errors_during_authentication_are_processed(spec_case: str) -> None:
    """A network error on saslContinue (after the hello: the service is known) clears that
    service's connections only. The spec lists poolCleared before connectionClosed; a pool's
    owner that judges the checkout's error clears after the pool closed the connection, so the
    events are compared as the spec's kinds, in any order."""

    import poolkit

    recorder = Recorder()

    async def main() -> None:
        from poolkit.mongodb import async_connect

        app = "lbSDAMErrorTestClient"
        settings = SimMongoSettings(services=2, users={"app": "secret"})
        async with SimMongoServer(settings) as server:
            pool = poolkit.AsyncPool(
                async_connect(server.host, server.port, load_balanced=True, app_name=app,
                        username="app", password="secret", connect_timeout=5.0),
                address=server.address,
                options=poolkit.PoolOptions(load_balanced=True),
                listeners=[recorder],
            )  # fmt: skip
            pool.ready()
            held = [await pool.checkout() for _ in range(2)]  # (one a service, kept out)
            try:
                await check(server, pool, held, app)
            finally:  # (a failing assertion leaves nothing open)
                for lease in held:
                    if lease.active:
                        lease.release()
                await pool.close()

    async def check(
        server: SimMongoServer, pool: poolkit.AsyncPool[Any], held: list[Any], app: str
    ) -> None:
        mongo = AsyncMongoPool(pool)
        first, second = (lease.service_id for lease in held)
        recorder.events.clear()
        server.fail_command("saslContinue", close_connection=True, app_name=app)
        with pytest.raises(NetworkError) as caught:  # (the next connection: first's)
            await mongo.insert("test", "items", [{"x": 1}])
        for lease in held[1:]:
            lease.release()
        assert caught.value.after_hello and caught.value.service_id == first
        spec_kinds = (
            ev.ConnectionCreatedEvent,
            ev.PoolClearedEvent,
            ev.ConnectionClosedEvent,
            ev.ConnectionCheckOutFailedEvent,
        )
        seen = [type(e) for e in recorder.events if isinstance(e, spec_kinds)]
        assert sorted(k.__name__ for k in seen) == sorted(k.__name__ for k in spec_kinds)
        (cleared,) = recorder.of(ev.PoolClearedEvent)
        assert cleared.service_id == first
        (closed,) = recorder.of(ev.ConnectionClosedEvent)
        (failed,) = recorder.of(ev.ConnectionCheckOutFailedEvent)
        assert closed.reason == "error" and failed.reason == "connectionError"
        assert pool.service_generation(first) == 1 and pool.service_generation(second) == 0
        held[0].release()
        assert pool.stats().total == 1  # (first's connection, stale, closed at check-in)

    run(main)


@emulated(
    "lb-connection-establishment.json: operations against load balancers fail if URI contains "
    "loadBalanced=false"
)
def test_a_load_balancer_refuses_a_client_not_in_load_balanced_mode(spec_case: str) -> None:
    async def main() -> None:
        async with SimMongoServer(SimMongoSettings(services=1)) as server:
            pool = poolkit.AsyncPool(
                async_connect(server.host, server.port, load_balanced=False, connect_timeout=5.0),
                address=server.address,
            )
            pool.ready()
            with pytest.raises(OperationFailure) as caught:  # (the service's hello refusal)
                await AsyncMongoPool(pool).command("admin", {"ping": 1})
            assert caught.value.code == 354  # LoadBalancerSupportMismatch
            await pool.close()

    run(main)


@emulated(
    "non-lb-connection-establishment.json: operations against non-load balanced clusters "
    "succeed if URI contains loadBalanced=false"
)
def test_a_plain_cluster_serves_a_client_not_in_load_balanced_mode(spec_case: str) -> None:
    async def main() -> None:
        settings = SimMongoSettings(services=1, load_balanced=False)
        async with SimMongoServer(settings) as server:
            pool = poolkit.AsyncPool(
                async_connect(server.host, server.port, load_balanced=False, connect_timeout=5.0),
                address=server.address,
            )
            pool.ready()
            async with pool.connection() as conn:
                assert conn.service_id is None  # (not in load-balanced mode: no service)
                assert (await conn.command("admin", {"ping": 1}))["ok"] == 1
            await pool.close()

    run(main)


async def session_pool(server: SimMongoServer, recorder: Recorder) -> AsyncMongoPool:
    mongo = AsyncMongoPool(await lb_pool(server, recorder))
    await spread(mongo, 2)
    await filled(server, mongo, 3)
    recorder.events.clear()
    return mongo


def orders(i: int) -> dict[str, Any]:
    return {"insert": "orders", "documents": [{"_id": i}]}


async def committed(session: Any, mongo: AsyncMongoPool) -> None:
    """One transaction of one insert, committed: its connection stays pinned to the session."""
    await session.start_transaction()
    await session.command("test", orders(1))
    await session.commit_transaction()
    assert session.pinned and checked_out(mongo) == 1


@emulated("transactions.json: transaction can be committed multiple times")
def test_a_transaction_committed_twice_on_one_pin(spec_case: str) -> None:
    async def main() -> None:
        recorder = Recorder()
        async with SimMongoServer(SimMongoSettings(services=2)) as server:
            mongo = await session_pool(server, recorder)
            async with mongo.session() as session:
                await session.start_transaction()
                await session.command("test", orders(1))
                await session.commit_transaction()
                assert session.pinned and checked_out(mongo) == 1
                await session.commit_transaction()  # (again: the same connection)
                assert checked_out(mongo) == 1
            assert checked_out(mongo) == 0
            assert cmap(recorder) == ["out", "in"]  # one pin, given back at the session's end
            await mongo.pool.close()

    run(main)


@emulated("transactions.json: pinned connection is returned when a new transaction is started")
def test_a_new_transaction_returns_the_pin(spec_case: str) -> None:
    async def main() -> None:
        recorder = Recorder()
        async with SimMongoServer(SimMongoSettings(services=2)) as server:
            mongo = await session_pool(server, recorder)
            session = mongo.session()
            await committed(session, mongo)
            await session.start_transaction()
            assert checked_out(mongo) == 0  # given back when the next one starts
            await session.command("test", orders(2))
            await session.commit_transaction()
            assert cmap(recorder) == ["out", "in", "out"]
            await session.end()
            await mongo.pool.close()

    run(main)


@emulated(
    "transactions.json: pinned connection is returned when a non-transaction operation uses "
    "the session"
)
def test_an_operation_outside_returns_the_pin(spec_case: str) -> None:
    async def main() -> None:
        recorder = Recorder()
        async with SimMongoServer(SimMongoSettings(services=2)) as server:
            mongo = await session_pool(server, recorder)
            session = mongo.session()
            await committed(session, mongo)
            await session.command("test", orders(2))  # (not in a transaction)
            assert checked_out(mongo) == 0
            assert cmap(recorder) == ["out", "in", "out", "in"]
            await session.end()
            await mongo.pool.close()

    run(main)


@emulated("transactions.json: a connection can be shared by a transaction and a cursor")
def test_a_transaction_and_its_cursor_share_the_pin(spec_case: str) -> None:
    async def main() -> None:
        recorder = Recorder()
        async with SimMongoServer(SimMongoSettings(services=2)) as server:
            mongo = await session_pool(server, recorder)
            session = mongo.session()
            await session.start_transaction()
            await session.command("test", orders(1))
            cursor = await session.find("test", "items", batch_size=2)
            assert checked_out(mongo) == 1  # one connection: the transaction's
            assert len(await cursor.to_list()) == 3
            await cursor.close()
            await session.commit_transaction()
            assert cmap(recorder) == ["out"]
            await session.end()
            assert checked_out(mongo) == 0
            await mongo.pool.close()

    run(main)


@emulated("transactions.json: pinned connection is released when session ended")
def test_ending_the_session_releases_the_pin(spec_case: str) -> None:
    async def main() -> None:
        recorder = Recorder()
        async with SimMongoServer(SimMongoSettings(services=2)) as server:
            mongo = await session_pool(server, recorder)
            session = mongo.session()
            await committed(session, mongo)
            await session.end()
            assert checked_out(mongo) == 0
            assert cmap(recorder)[:2] == ["out", "in"]
            await mongo.pool.close()

    run(main)


@emulated("transactions.json: pinned connection is released on successful abort")
def test_an_abort_releases_the_pin(spec_case: str) -> None:
    async def main() -> None:
        recorder = Recorder()
        async with SimMongoServer(SimMongoSettings(services=2)) as server:
            mongo = await session_pool(server, recorder)
            async with mongo.session() as session:
                await session.start_transaction()
                await session.command("test", orders(1))
                await session.abort_transaction()
                assert checked_out(mongo) == 0
            cursor = await mongo.find("test", "orders")
            assert await cursor.to_list() == []  # (aborted)
            await mongo.pool.close()

    run(main)


@pytest.mark.parametrize(
    ("spec_case", "opener"),
    [
        (
            "cursors.json: aggregate pins the cursor to a connection",
            lambda mongo: mongo.aggregate("test", "items", [{"$match": {}}], batch_size=2),
        ),
        (
            "cursors.json: listCollections pins the cursor to a connection",
            lambda mongo: mongo.list_collections("test", batch_size=2),
        ),
        (
            "cursors.json: listIndexes pins the cursor to a connection",
            lambda mongo: mongo.list_indexes("test", "items", batch_size=0),
        ),
    ],
    ids=["aggregate", "listCollections", "listIndexes"],
)
def test_other_cursors_pin_too(spec_case: str, opener: Any) -> None:
    async def main() -> None:
        recorder = Recorder()
        async with SimMongoServer(SimMongoSettings(services=2)) as server:
            mongo = await prepared(server, recorder)
            for name in ("orders", "users"):  # (three collections, for listCollections)
                await mongo.insert("test", name, [{"_id": 1}])
            recorder.events.clear()
            cursor = await opener(mongo)
            assert checked_out(mongo) == 1 and mongo.in_use()["cursor"] == 1
            assert len(await cursor.to_list()) >= 1
            assert checked_out(mongo) == 0
            assert cmap(recorder) == ["out", "in"]
            await mongo.pool.close()

    run(main)


@emulated("cursors.json: change streams pin to a connection")
def test_change_streams_pin_too(spec_case: str) -> None:
    """A change stream (an aggregate whose first stage is $changeStream, the driver's
    building block: MongoPool.cursor) pins its connection while open; closing it sends
    killCursors on that connection, then gives it back: one check-out, one check-in. Its
    getMores there see the changes made meanwhile."""

    async def main() -> None:
        recorder, commands = Recorder(), Recorder()
        async with SimMongoServer(SimMongoSettings(services=2)) as server:
            mongo = AsyncMongoPool(await lb_pool(server, recorder, commands))
            await spread(mongo, 2)
            recorder.events.clear()
            stream = await mongo.cursor(
                "test", {"aggregate": "items", "pipeline": [{"$changeStream": {}}]}
            )
            assert checked_out(mongo) == 1 and mongo.in_use()["cursor"] == 1
            await mongo.insert("test", "items", [{"_id": 7}])  # (on another connection)
            change = await stream.__anext__()  # (a getMore on the pinned one)
            assert (change["operationType"], change["documentKey"]) == ("insert", {"_id": 7})
            await stream.close()
            assert checked_out(mongo) == 0
            started = [e for e in commands.of(CommandStartedEvent) if e.command_name != "insert"]
            assert [e.command_name for e in started] == ["aggregate", "getMore", "killCursors"]
            assert len({e.server_connection_id for e in started}) == 1
            assert cmap(recorder) == ["out", "out", "in", "in"]  # (the stream's, the insert's)
            assert sum(s.cursors_open for s in server.stats().services) == 0
            await mongo.pool.close()

    run(main)


@emulated("transactions.json: sessions are reused in LB mode")
def test_sessions_are_reused(spec_case: str) -> None:
    """Two operations one after the other run in the same server session (the last two
    commands' lsid are the same), as do a session, a cursor and a transaction after them."""

    async def main() -> None:
        commands = Recorder()
        async with SimMongoServer(SimMongoSettings(services=2)) as server:
            mongo = AsyncMongoPool(await lb_pool(server, commands=commands))
            await mongo.insert("test", "items", [{"x": 1}])
            await mongo.insert("test", "items", [{"x": 2}])
            first, second = (e.command["lsid"] for e in commands.of(CommandStartedEvent))
            assert first == second
            async with await mongo.find("test", "items", batch_size=1) as cursor:
                await cursor.__anext__()
            async with mongo.session() as session:
                assert session.lsid == first
            lsids = {str(e.command.get("lsid")) for e in commands.of(CommandStartedEvent)}
            assert lsids == {str(first)}  # (the find and its close's killCursors too)
            await mongo.end_sessions()
            (ended,) = [
                e for e in commands.of(CommandStartedEvent) if e.command_name == "endSessions"
            ]
            assert ended.command["endSessions"] == [first]
            await mongo.pool.close()

    run(main)


#: transactions.json's cases of an error on a transaction's command: (the case, the command the
#: fail point fails, its fault, whether the call raises, the connections checked out after)
PIN_RELEASE_CASES = [
    ("not released after a non-transient commit error", "commitTransaction", {"error_code": 51}, True, 1),  # noqa: E501
    ("released after a non-transient abort error", "abortTransaction", {"error_code": 51}, False, 0),  # noqa: E501
    ("released after a transient network CRUD error", "insert", {"close_connection": True}, True, 0),  # noqa: E501
    ("released after a transient non-network commit error", "commitTransaction", {"error_code": 24}, True, 0),  # noqa: E501
    ("released after a transient network commit error", "commitTransaction", {"close_connection": True}, True, 0),  # noqa: E501
    ("released after a transient non-network abort error", "abortTransaction", {"error_code": 24}, False, 0),  # noqa: E501
    ("released after a transient network abort error", "abortTransaction", {"close_connection": True}, False, 0),  # noqa: E501
]  # fmt: skip


@pytest.mark.parametrize(
    ("spec_case", "command", "fault", "raises", "out"),
    [(f"transactions.json: pinned connection is {c[0]}", *c[1:]) for c in PIN_RELEASE_CASES],
    ids=[c[0] for c in PIN_RELEASE_CASES],
)
def test_an_error_in_a_transaction_keeps_or_releases_the_pin(
    spec_case: str, command: str, fault: dict[str, Any], raises: bool, out: int
) -> None:
    """Start a transaction, insert, then the failing command (the insert itself, a commit or an
    abort): the pin is kept after a non-transient commit error and released after any other
    (an abort's error is not raised). A network error on the commit is labelled
    UnknownTransactionCommitResult: the spec's runner sees the driver retry it, a retryable
    write this package leaves to its caller."""

    async def main() -> None:
        async with SimMongoServer(SimMongoSettings(services=2)) as server:
            mongo = await prepared(server, Recorder())
            async with mongo.session() as session:
                await session.start_transaction()
                insert = {"insert": "items", "documents": [{"x": 1}]}
                if command != "insert":
                    await session.command("test", insert)
                    assert checked_out(mongo) == 1
                server.fail_command(command, **fault)
                call = {
                    "insert": lambda: session.command("test", insert),
                    "commitTransaction": session.commit_transaction,
                    "abortTransaction": session.abort_transaction,
                }[command]
                if raises:
                    with pytest.raises((OperationFailure, NetworkError)) as caught:
                        await call()
                    network = isinstance(caught.value, NetworkError)
                    if command == "commitTransaction" and network:
                        assert caught.value.has_error_label("UnknownTransactionCommitResult")
                    elif out == 0:
                        assert caught.value.has_error_label("TransientTransactionError")
                else:
                    await call()
                assert checked_out(mongo) == out
                assert mongo.in_use()["transaction"] == out
            assert checked_out(mongo) == 0
            await mongo.pool.close()

    run(main)


@emulated("transactions.json: all operations go to the same mongos")
def test_all_operations_of_a_transaction_go_to_the_same_service(spec_case: str) -> None:
    async def main() -> None:
        commands = Recorder()
        async with SimMongoServer(SimMongoSettings(services=3)) as server:
            mongo = AsyncMongoPool(await lb_pool(server, commands=commands))
            await spread(mongo, 3)
            commands.events.clear()
            async with mongo.transaction("test") as txn:
                for i in range(3):
                    await txn.command({"insert": "items", "documents": [{"_id": i}]})
                await txn.command({"find": "items", "filter": {}})
            started = commands.of(CommandStartedEvent)
            assert len(started) == 5  # three inserts, a find, the commit
            assert len({e.service_id for e in started}) == 1
            assert len({e.server_connection_id for e in started}) == 1
            await mongo.pool.close()

    run(main)


@emulated("cursors.json: pinned connections are returned to the pool when the cursor is closed")
def test_closing_a_cursor_returns_its_connection(spec_case: str) -> None:
    async def main() -> None:
        recorder, commands = Recorder(), Recorder()
        async with SimMongoServer(SimMongoSettings(services=2)) as server:
            mongo = AsyncMongoPool(await lb_pool(server, recorder, commands))
            await filled(server, mongo, 3)
            recorder.events.clear()
            commands.events.clear()
            cursor = await mongo.find("test", "items", batch_size=2)
            assert checked_out(mongo) == 1
            await cursor.close()
            assert checked_out(mongo) == 0
            names = [e.command_name for e in commands.of(CommandStartedEvent)]
            assert names == ["find", "killCursors"]
            assert cmap(recorder) == ["out", "in"]
            await mongo.pool.close()

    run(main)


@emulated(
    "sdam-error-handling.json: only connections for a specific serviceId are closed when "
    "pools are cleared"
)
def test_a_clear_closes_only_its_services_connections(spec_case: str) -> None:
    """Two cursors pin two connections (two services); both closed; a shutdown error
    (11600) on an insert clears that service: its connection is closed (stale) when checked
    in, and the next insert runs on the other service's connection."""

    async def main() -> None:
        recorder = Recorder()
        kinds = {
            ev.ConnectionCreatedEvent: "created",
            ev.ConnectionReadyEvent: "ready",
            ev.ConnectionCheckedOutEvent: "out",
            ev.ConnectionCheckedInEvent: "in",
            ev.PoolClearedEvent: "cleared",
            ev.ConnectionClosedEvent: "closed",
        }
        async with SimMongoServer(SimMongoSettings(services=2)) as server:
            server.store.insert("test.items", [{"_id": i} for i in range(3)])
            mongo = AsyncMongoPool(await lb_pool(server, recorder))
            cursors = [await mongo.find("test", "items", batch_size=2) for _ in range(2)]
            for cursor in cursors:
                await cursor.close()
            server.fail_command("insert", error_code=11600)
            with pytest.raises(OperationFailure) as caught:
                await mongo.insert("test", "items", [{"x": 1}])
            assert caught.value.code == 11600
            await mongo.insert("test", "items", [{"x": 1}])
            names = []
            for event in recorder.events:
                name = kinds.get(type(event))
                if name == "closed":
                    name = f"closed:{event.reason}"  # type: ignore[attr-defined]
                if name is not None:
                    names.append(name)
            assert names == [
                *("created", "ready", "out", "created", "ready", "out", "in", "in"),
                *("out", "cleared", "in", "closed:stale", "out", "in"),
            ]
            await mongo.pool.close()

    run(main)


@pytest.mark.parametrize(
    ("spec_case", "holder", "counts"),
    [
        ("wait-queue-timeouts.json: wait queue timeout errors include cursor statistics",
         "cursor", "cursors: 1, connections in use by transactions: 0"),
        ("wait-queue-timeouts.json: wait queue timeout errors include transaction statistics",
         "transaction", "cursors: 0, connections in use by transactions: 1"),
    ],
    ids=["cursor", "transaction"],
)  # fmt: skip
def test_the_wait_queue_timeout_says_who_holds_the_connections(
    spec_case: str, holder: str, counts: str
) -> None:
    async def main() -> None:
        async with SimMongoServer(SimMongoSettings(services=2)) as server:
            server.store.insert("test.items", [{"_id": i} for i in range(3)])
            pool = await lb_pool(server, max_size=1, wait_queue_timeout=0.05)
            mongo = AsyncMongoPool(pool)
            session = mongo.session()
            if holder == "cursor":
                cursor = await mongo.find("test", "items", batch_size=2)
            else:
                await session.start_transaction()
                await session.command("test", {"insert": "items", "documents": [{"x": 1}]})
            with pytest.raises(LoadBalancedTimeoutError) as caught:
                await mongo.insert("test", "items", [{"x": 1}])
            assert (
                f"maxPoolSize: 1, connections in use by {counts}, connections in use by other "
                "operations: 0" in str(caught.value)
            )
            if holder == "cursor":
                await cursor.close()
            await session.end()
            await pool.close()

    run(main)


@emulated("server-selection.json: $readPreference is sent for load-balanced clusters")
def test_the_read_preference_is_sent(spec_case: str) -> None:
    """secondaryPreferred goes with the find as $readPreference (the mongos behind the load
    balancer selects); primary sends nothing; nor does a transaction's find, nor a pipeline
    that writes; a read preference that is not one is refused."""

    async def main() -> None:
        commands = Recorder()
        async with SimMongoServer(SimMongoSettings(services=2)) as server:
            pool = await lb_pool(server, commands=commands)
            preferred = AsyncMongoPool(pool, read_preference={"mode": "secondaryPreferred"})
            await (await preferred.find("test", "coll0", {})).to_list()
            writes = {"aggregate": "coll0", "pipeline": [{"$out": "other"}]}
            _, command = preferred._cursor("test", writes, 101, "aggregate")  # (not sent: the
            assert "$readPreference" not in command  # simulator has no $out)
            async with preferred.transaction("test") as txn:
                await txn.command({"insert": "coll0", "documents": [{"x": 1}]})
                await (await txn.session.find("test", "coll0")).to_list()
            primary = AsyncMongoPool(pool, read_preference={"mode": "primary"})
            await (await primary.find("test", "coll0")).to_list()
            sent = [
                (e.command_name, e.command.get("$readPreference"))
                for e in commands.of(CommandStartedEvent)
                if e.command_name == "find"
            ]
            preference = {"mode": "secondaryPreferred"}
            assert sent == [("find", preference), ("find", None), ("find", None)]
            for wrong in ({"mode": "any"}, "nearest", {"mode": "primary", "tags": [{}]}):
                with pytest.raises(ValueError, match=r"AsyncMongoPool\(read_preference=...\)"):
                    AsyncMongoPool(pool, read_preference=wrong)  # type: ignore[arg-type]
            await pool.close()

    run(main)
