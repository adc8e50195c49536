"""poolkit.mongodb's connections and AsyncMongoPool against the simulated load balancer
(poolkit_sim_mongo): the handshake, per-service clearing, pinning, the timeout message.

Emulated: what spec-tests/load-balancers/ expect of the pool and the connection (cursors.json,
transactions.json, event-monitoring.json, sdam-error-handling.json, wait-queue-timeouts.json,
lb-connection-establishment.json), run against the simulator instead of a real deployment."""

from __future__ import annotations

import asyncio

import pytest

import poolkit
from lb_helpers import Recorder, filled, lb_pool, run, spread
from poolkit import events as ev
from poolkit.mongodb import (
    AsyncMongoPool,
    HandshakeError,
    LoadBalancedTimeoutError,
    LoadBalancerUnsupportedError,
    MongoConnection,
    NetworkError,
    OperationFailure,
    connect,
)
from poolkit.mongodb.monitoring import CommandStartedEvent
from poolkit_sim_mongo import SimMongoServer, SimMongoSettings


def test_the_handshake_gives_each_connection_its_service() -> None:
    async def main() -> None:
        async with SimMongoServer(SimMongoSettings(services=3)) as server:
            pool = await lb_pool(server)
            services = await spread(AsyncMongoPool(pool), 3)
            assert set(services) == set(server.service_ids)  # one connection per service
            async with pool.connection() as conn:
                assert conn.hello["msg"] == "isdbgrid" and conn.max_wire_version >= 13
                assert (await conn.command("admin", {"ping": 1}))["ok"] == 1
            await pool.close()

    run(main)


def test_a_server_not_behind_a_load_balancer_fails_the_handshake() -> None:
    async def main() -> None:
        async with SimMongoServer(SimMongoSettings(services=1, load_balanced=False)) as server:
            pool = await lb_pool(server)
            with pytest.raises(LoadBalancerUnsupportedError) as caught:
                await pool.checkout(5)
            assert str(caught.value) == (
                "Driver attempted to initialize in load balancing mode, but the server does "
                "not support this mode."
            )
            assert pool.stats().total == 0
            await pool.close()

    run(main)


def test_an_error_during_the_handshake_is_labelled_and_clears_nothing() -> None:
    async def main() -> None:
        recorder = Recorder()
        async with SimMongoServer(SimMongoSettings(services=2)) as server:
            server.slow_hello(2.0, times=1)
            pool = await lb_pool(server, recorder, timeout=0.2)
            with pytest.raises(HandshakeError) as caught:
                await pool.checkout(5)
            assert caught.value.has_error_label("SystemOverloadedError")
            assert caught.value.has_error_label("RetryableError") and caught.value.timeout
            assert recorder.of(ev.PoolClearedEvent) == []
            assert pool.generation == 0 and pool.state is poolkit.PoolState.READY
            async with pool.connection() as conn:  # (the next one is made)
                await conn.command("admin", {"ping": 1})
            await pool.close()

    run(main)


def test_a_state_change_error_clears_only_its_service() -> None:
    """ShutdownInProgress on one service's connection, while a checkout waits: that service
    alone is cleared (its connection closes when given back), the pool is not paused, the
    waiting checkout is not failed, and the other service's connection stays."""

    async def main() -> None:
        recorder = Recorder()
        async with SimMongoServer(SimMongoSettings(services=2)) as server:
            pool = await lb_pool(server, recorder, max_size=2)
            mongo = AsyncMongoPool(pool)
            kept, failing = await pool.checkout(), await pool.checkout()
            failing_service = failing.connection.service_id
            assert kept.connection.service_id != failing_service
            failing.release()
            server.fail_command("ping", error_code=91, delay=0.1)  # ShutdownInProgress
            command = asyncio.create_task(mongo.command("admin", {"ping": 1}))
            await asyncio.sleep(0.02)  # (the command has the failing service's connection)
            waiter = asyncio.create_task(pool.checkout(10))
            await asyncio.sleep(0.02)
            assert pool.stats().waiting == 1
            with pytest.raises(OperationFailure) as caught:
                await command
            assert caught.value.code == 91
            (cleared,) = recorder.of(ev.PoolClearedEvent)
            assert cleared.service_id == failing_service
            assert pool.state is poolkit.PoolState.READY  # not paused
            served = await waiter  # not failed: served by a new connection
            assert [e.reason for e in recorder.of(ev.ConnectionClosedEvent)] == ["stale"]
            served.release()
            kept.release()
            assert pool.stats().available == 2  # the other service's connection stayed
            await pool.close()

    run(main)


def test_a_not_primary_error_on_a_recent_server_clears_nothing() -> None:
    async def main() -> None:
        recorder = Recorder()
        async with SimMongoServer(SimMongoSettings(services=1)) as server:
            pool = await lb_pool(server, recorder)
            mongo = AsyncMongoPool(pool)
            server.fail_command("ping", error_code=10107)  # NotWritablePrimary, wire 21
            with pytest.raises(OperationFailure):
                await mongo.command("admin", {"ping": 1})
            assert recorder.of(ev.PoolClearedEvent) == []
            await pool.close()

    run(main)


def test_a_pinned_cursor_completes_with_one_checkout() -> None:
    async def main() -> None:
        recorder = Recorder()
        async with SimMongoServer(SimMongoSettings(services=3)) as server:
            pool = await lb_pool(server, recorder)
            mongo = AsyncMongoPool(pool)
            await spread(mongo, 3)
            await filled(server, mongo)
            recorder.events.clear()
            cursor = await mongo.find("test", "items", {"kind": "item"}, batch_size=5)
            assert mongo.in_use()["cursor"] == 1
            async with mongo.connection() as other:  # another task takes a connection
                await other.command("admin", {"ping": 1})
                docs = await cursor.to_list()
            assert [d["_id"] for d in docs] == list(range(25))
            assert mongo.in_use() == {"cursor": 0, "transaction": 0, "other": 0}
            # the cursor's whole life: one checkout started, one checked out, one checked in
            # (and the other operation's one each)
            assert len(recorder.of(ev.ConnectionCheckOutStartedEvent)) == 2
            assert len(recorder.of(ev.ConnectionCheckedOutEvent)) == 2
            assert len(recorder.of(ev.ConnectionCheckedInEvent)) == 2
            await pool.close()

    run(main)


def test_without_pinning_the_same_cursor_fails_on_another_service() -> None:
    async def main() -> None:
        async with SimMongoServer(SimMongoSettings(services=3)) as server:
            pool = await lb_pool(server)
            mongo = AsyncMongoPool(pool, pin=False)
            await spread(mongo, 3)
            await filled(server, mongo)
            cursor = await mongo.find("test", "items", batch_size=5)
            async with mongo.connection():  # the find's connection, taken (LIFO) by another
                with pytest.raises(OperationFailure) as caught:
                    await cursor.to_list()
            assert caught.value.code == 43  # CursorNotFound: the getMore went elsewhere
            await pool.close()

    run(main)


def test_closing_a_cursor_kills_it_on_its_own_connection() -> None:
    async def main() -> None:
        async with SimMongoServer(SimMongoSettings(services=3)) as server:
            pool = await lb_pool(server)
            mongo = AsyncMongoPool(pool)
            await spread(mongo, 3)
            await filled(server, mongo)
            async with await mongo.find("test", "items", batch_size=5) as cursor:
                assert (await cursor.__anext__())["_id"] == 0
            stats = server.stats()
            assert stats.commands["killCursors"] == 1
            assert sum(s.cursors_open for s in stats.services) == 0
            assert mongo.in_use()["cursor"] == 0 and pool.stats().in_use == 0
            await pool.close()

    run(main)


def test_after_a_network_error_a_cursor_stays_pinned_skips_kill_cursors_and_returns() -> None:
    async def main() -> None:
        async with SimMongoServer(SimMongoSettings(services=2)) as server:
            pool = await lb_pool(server)
            mongo = AsyncMongoPool(pool)
            await filled(server, mongo)
            cursor = await mongo.find("test", "items", batch_size=5)
            server.fail_command("getMore", close_connection=True)
            with pytest.raises(NetworkError):
                await cursor.to_list()
            assert mongo.in_use()["cursor"] == 1  # still pinned
            await cursor.close()
            assert server.stats().commands.get("killCursors", 0) == 0
            assert mongo.in_use()["cursor"] == 0 and pool.stats().in_use == 0
            assert pool.stats().total == 0  # the broken connection was not kept
            await pool.close()

    run(main)


def test_a_transaction_is_pinned_for_its_life() -> None:
    async def main() -> None:
        recorder = Recorder()
        async with SimMongoServer(SimMongoSettings(services=3)) as server:
            pool = await lb_pool(server, recorder)
            mongo = AsyncMongoPool(pool)
            await spread(mongo, 3)
            recorder.events.clear()
            async with mongo.transaction("test") as txn:
                for i in range(3):
                    await txn.command({"insert": "orders", "documents": [{"_id": i}]})
                assert mongo.in_use()["transaction"] == 1
            assert len(recorder.of(ev.ConnectionCheckedOutEvent)) == 1
            assert len(recorder.of(ev.ConnectionCheckedInEvent)) == 1
            cursor = await mongo.find("test", "orders")
            assert len(await cursor.to_list()) == 3  # committed
            await pool.close()

    run(main)


def test_the_load_balanced_wait_queue_timeout_says_how_connections_are_used() -> None:
    async def main() -> None:
        async with SimMongoServer(SimMongoSettings(services=3)) as server:
            pool = await lb_pool(server, max_size=3)
            mongo = AsyncMongoPool(pool)
            await filled(server, mongo)
            cursor = await mongo.find("test", "items", batch_size=2)
            async with mongo.transaction("test") as txn:
                await txn.command({"insert": "orders", "documents": [{"_id": 1}]})
                async with mongo.connection("other"):
                    with pytest.raises(LoadBalancedTimeoutError) as caught:
                        async with mongo.connection(timeout=0.05):
                            pass
            await cursor.close()
            assert str(caught.value) == (
                "Timeout waiting for connection from the connection pool. maxPoolSize: 3, "
                "connections in use by cursors: 1, connections in use by transactions: 1, "
                "connections in use by other operations: 1"
            )
            assert isinstance(caught.value, poolkit.WaitQueueTimeoutError)
            await pool.close()

    run(main)


def test_blocking_connections_in_a_threaded_pool() -> None:
    server = SimMongoServer(SimMongoSettings(services=2))
    with server.start_in_thread() as handle:
        pool = poolkit.Pool(
            connect("127.0.0.1", handle.port, load_balanced=True),
            address=server.address,
            options=poolkit.PoolOptions(load_balanced=True, max_size=2),
        )
        with pool:
            leases = [pool.checkout(), pool.checkout()]
            conns: list[MongoConnection] = [lease.connection for lease in leases]
            assert {c.service_id for c in conns} == set(server.service_ids)
            reply = conns[0].command("admin", {"ping": 1})
            assert reply["ok"] == 1
            for lease in leases:
                lease.release()


def test_a_services_entry_goes_when_its_last_connection_closes() -> None:
    """Per-service generation and connection count, through real handshakes: a service's entry
    exists while it has connections, survives a clear (a new generation), and is removed
    once its last connection closes (CMAP)."""

    async def main() -> None:
        async with SimMongoServer(SimMongoSettings(services=2)) as server:
            pool = await lb_pool(server, max_size=2, background_interval=0.02)
            first, second = await spread(AsyncMongoPool(pool), 2)
            assert pool.service_generation(first) == 0 == pool.service_generation(second)
            pool.clear(service_id=first)
            assert pool.service_generation(first) == 1  # (its connection, idle, is stale)
            for _ in range(100):  # the background closes the stale idle connection
                if pool.stats().total == 1:
                    break
                await asyncio.sleep(0.01)
            assert pool.service_generation(first) is None  # no connection left: no entry
            assert pool.service_generation(second) == 0
            await pool.close()

    run(main)


def test_a_transactions_commit_and_abort_carry_its_recovery_token() -> None:
    """Sharded Transactions (which the Load Balancer spec follows): the last recoveryToken a
    transaction's replies carried goes with its commitTransaction and abortTransaction; a new
    transaction starts without one."""

    async def main() -> None:
        commands = Recorder()
        async with SimMongoServer(SimMongoSettings(services=2)) as server:
            mongo = AsyncMongoPool(await lb_pool(server, commands=commands))
            async with mongo.session() as session:
                for end in ("commit", "abort"):
                    await session.start_transaction()
                    await session.command("test", {"insert": "t", "documents": [{"x": 1}]})
                    if end == "commit":
                        await session.commit_transaction()
                    else:
                        await session.abort_transaction()
                await session.start_transaction()
                await session.commit_transaction()  # (sent nothing: nothing to carry)
            ends = [
                e.command.get("recoveryToken")
                for e in commands.of(CommandStartedEvent)
                if e.command_name in ("commitTransaction", "abortTransaction")
            ]
            assert ends == [{"recoveryShardId": "shard0"}] * 2
            await mongo.pool.close()

    run(main)
