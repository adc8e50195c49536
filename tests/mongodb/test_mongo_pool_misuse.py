"""AsyncMongoPool used wrongly or unluckily, as a new user found it (the cases of an audit):
cursors whose first command fails, bad arguments, explicit sessions outside a transaction,
transaction calls their state forbids, a cursor outliving its transaction, the labels of a
network error in a transaction. After each, nothing is left checked out."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

import poolkit
from lb_helpers import Recorder, filled, lb_pool, run
from poolkit import events as ev
from poolkit import mongodb
from poolkit.mongodb import (
    AsyncMongoPool,
    InvalidOperationError,
    NetworkError,
    OperationFailure,
)
from poolkit.mongodb.monitoring import CommandStartedEvent
from poolkit_sim_mongo import SimMongoServer, SimMongoSettings


async def _entered(manager: Any) -> None:
    async with manager:
        pass


def nothing_out(mongo: AsyncMongoPool) -> bool:
    return mongo.in_use() == {"cursor": 0, "transaction": 0, "other": 0} and (
        mongo.pool.stats().in_use == 0
    )


@pytest.mark.parametrize(
    "opener",
    [
        lambda m: m.find("test", "items", {"$foo": 1}, batch_size=3),  # BadValue
        lambda m: m.aggregate("test", "items", [{"$bogus": 1}], batch_size=3),
        lambda m: m.list_indexes("test", "missing"),  # NamespaceNotFound
        lambda m: m.cursor("test", {"ping": 1}),  # (a reply without a cursor)
    ],
    ids=["find", "aggregate", "listIndexes", "not-a-cursor"],
)
def test_a_cursor_whose_first_command_fails_gives_its_connection_back(opener: Any) -> None:
    async def main() -> None:
        async with SimMongoServer(SimMongoSettings(services=2)) as server:
            mongo = AsyncMongoPool(await lb_pool(server, max_size=2, wait_queue_timeout=1.0))
            await filled(server, mongo)
            for _ in range(3):  # (more than the pool holds: none may stay out)
                with pytest.raises((OperationFailure, TypeError)):
                    await opener(mongo)
                assert nothing_out(mongo)
            assert len(mongo.sessions.drain()) == 1  # (its implicit session came back)
            assert mongo.pool.stats().total >= 1  # (a healthy connection was kept, not closed)
            await mongo.pool.close()

    run(main)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda m: m.find("test", "items", batch_size=-1), r"find\(batch_size=...\)"),
        (lambda m: m.find("test", "items", batch_size="3"), r"find\(batch_size=...\)"),
        (lambda m: m.aggregate("test", "items", [], batch_size=-2), r"aggregate\(batch_size"),
        (lambda m: m.find(None, "items"), r"find\(db=...\)"),
        (lambda m: m.find("", "items"), r"find\(db=...\)"),
        (lambda m: m.find("a.b", "items"), r"find\(db=...\)"),
        (lambda m: m.find("test", ""), r"find\(collection=...\)"),
        (lambda m: m.find("test", "items", [1, 2]), r"find\(filter=...\)"),
        (lambda m: m.command(123, {"ping": 1}), r"command\(db=...\)"),
        (lambda m: m.command("test", {}), r"command\(command=...\)"),
        (lambda m: m.insert("test", "items", {"_id": 9}), r"insert\(documents=...\)"),
        (lambda m: m.insert("test", "items", [{"_id": 9}, 3]), r"documents\[1\]"),
        (lambda m: m.aggregate("test", "items", [1]), r"aggregate\(pipeline=...\)"),
        (lambda m: m.cursor("test", {"find": "items"}, -5), r"cursor\(batch_size"),
        (lambda m: m.insert("", "items", [{}]), r"insert\(db=...\)"),
        (lambda m: m.command("test", {"insert": "t"}, sequences="x"), r"sequences=...\)"),
        (lambda m: m.command("test", {"ping": 1, "a": object()}), r"command\('ping'\): cannot"),
        (lambda m: m.insert("test", "t", [{1: 2}]), r"command\('insert'\): cannot be encoded"),
        (lambda m: _entered(m.connection("other", -1)), r"connection\(timeout=...\)"),
        (lambda m: _entered(m.transaction(None)), r"transaction\(db=...\)"),
    ],
)
def test_bad_arguments_name_the_call_and_change_nothing(call: Any, message: str) -> None:
    async def main() -> None:
        commands = Recorder()
        async with SimMongoServer(SimMongoSettings(services=1)) as server:
            mongo = AsyncMongoPool(await lb_pool(server, commands=commands))
            with pytest.raises((TypeError, ValueError), match=message):
                await call(mongo)
            assert nothing_out(mongo) and commands.events == []  # (nothing sent)
            async with mongo.session() as session:  # (the session's calls check the same)
                await session.start_transaction()
                with pytest.raises((TypeError, ValueError), match=r"find\("):
                    await session.find("test", "items", batch_size=-1)
                with pytest.raises((TypeError, ValueError), match=r"command\("):
                    await session.command("test", [("insert", "t")])  # type: ignore[arg-type]
                assert not session.pinned and session.in_transaction
            assert nothing_out(mongo)
            await mongo.pool.close()

    run(main)


def test_an_explicit_session_runs_its_find_outside_a_transaction_in_it() -> None:
    async def main() -> None:
        commands = Recorder()
        async with SimMongoServer(SimMongoSettings(services=2)) as server:
            mongo = AsyncMongoPool(await lb_pool(server, commands=commands))
            await filled(server, mongo, 10)
            commands.events.clear()
            async with mongo.session() as session:
                await session.command("admin", {"ping": 1})
                cursor = await session.find("test", "items", batch_size=3)
                assert len(await cursor.to_list()) == 10
                lsids = {str(e.command["lsid"]) for e in commands.of(CommandStartedEvent)}
                assert lsids == {str(session.lsid)}  # ping, find and its getMores
            assert nothing_out(mongo)
            await mongo.pool.close()

    run(main)


def test_transaction_calls_their_state_forbids_are_refused_before_anything_is_sent() -> None:
    async def main() -> None:
        commands = Recorder()
        async with SimMongoServer(SimMongoSettings(services=2)) as server:
            mongo = AsyncMongoPool(await lb_pool(server, commands=commands))
            async with mongo.session() as session:
                for call in (session.commit_transaction, session.abort_transaction):
                    with pytest.raises(InvalidOperationError, match="no transaction started"):
                        await call()
                await session.start_transaction()
                with pytest.raises(InvalidOperationError, match="already in progress"):
                    await session.start_transaction()
                await session.command("test", {"insert": "t", "documents": [{"_id": 1}]})
                await session.abort_transaction()
                with pytest.raises(InvalidOperationError, match="after calling abort"):
                    await session.commit_transaction()
                with pytest.raises(InvalidOperationError, match="twice"):
                    await session.abort_transaction()
                await session.start_transaction()
                await session.command("test", {"insert": "t", "documents": [{"_id": 2}]})
                await session.commit_transaction()
                with pytest.raises(InvalidOperationError, match="after calling commit"):
                    await session.abort_transaction()
                await session.commit_transaction()  # (again: allowed)
                await session.start_transaction()
                await session.commit_transaction()  # (nothing sent: nothing to commit)
                await session.commit_transaction()
                assert not session.in_transaction
            with pytest.raises(InvalidOperationError, match="ended"):
                await session.start_transaction()
            names = [e.command_name for e in commands.of(CommandStartedEvent)]
            assert names == [
                "insert",
                "abortTransaction",
                "insert",
                "commitTransaction",
                "commitTransaction",
            ]
            assert [d["_id"] for d in server.store.documents("test.t")] == [2]
            assert nothing_out(mongo)
            await mongo.pool.close()

    run(main)


def test_an_abort_that_fails_is_not_raised_and_gives_the_pin_back() -> None:
    """spec-tests/load-balancers/transactions.json's abort error cases expect no error."""

    async def main() -> None:
        async with SimMongoServer(SimMongoSettings(services=2)) as server:
            mongo = AsyncMongoPool(await lb_pool(server))
            for fault in ({"error_code": 8}, {"close_connection": True}):
                async with mongo.session() as session:
                    await session.start_transaction()
                    await session.command("test", {"insert": "t", "documents": [{"x": 1}]})
                    server.fail_command("abortTransaction", **fault)
                    await session.abort_transaction()
                    assert not session.pinned
                assert nothing_out(mongo)
            await mongo.pool.close()

    run(main)


def test_a_network_error_in_a_transaction_is_labelled() -> None:
    """The labels say what to retry: the transaction after a TransientTransactionError, the
    commit after an UnknownTransactionCommitResult. (Behind a load balancer the mongos aborts
    a transaction whose connection closed, so here the retried commit says to retry it all.)"""

    async def main() -> None:
        async with SimMongoServer(SimMongoSettings(services=1)) as server:
            mongo = AsyncMongoPool(await lb_pool(server))
            async with mongo.session() as session:
                await session.start_transaction()
                server.fail_command("insert", close_connection=True)
                with pytest.raises(NetworkError) as caught:
                    await session.command("test", {"insert": "t", "documents": [{"x": 1}]})
                assert caught.value.has_error_label("TransientTransactionError")
                await session.abort_transaction()
                await session.start_transaction()
                await session.command("test", {"insert": "t", "documents": [{"x": 2}]})
                server.fail_command("commitTransaction", close_connection=True)
                with pytest.raises(NetworkError) as committing:
                    await session.commit_transaction()
                assert committing.value.has_error_label("UnknownTransactionCommitResult")
                assert not committing.value.has_error_label("TransientTransactionError")
                with pytest.raises(OperationFailure) as retried:
                    await session.commit_transaction()  # (on a connection of its own)
                assert retried.value.code == 251  # NoSuchTransaction
                assert retried.value.has_error_label("TransientTransactionError")
            assert server.store.documents("test.t") == []
            assert nothing_out(mongo)
            await mongo.pool.close()

    run(main)


def test_a_cursor_in_a_transaction_ends_with_it() -> None:
    """The server kills a transaction's cursors when it ends; the session's cursor no longer
    has the connection it shared: asking it for more is refused, and closing it sends
    nothing."""

    async def main() -> None:
        commands = Recorder()
        async with SimMongoServer(SimMongoSettings(services=2)) as server:
            mongo = AsyncMongoPool(await lb_pool(server, commands=commands))
            await filled(server, mongo, 10)
            session = mongo.session()
            await session.start_transaction()
            cursor = await session.find("test", "items", batch_size=2)
            await cursor.__anext__()
            await session.end()
            assert nothing_out(mongo)
            assert sum(s.cursors_open for s in server.stats().services) == 0
            assert (await cursor.__anext__())["_id"] == 1  # (the batch it holds)
            with pytest.raises(InvalidOperationError, match="transaction that has ended"):
                await cursor.__anext__()
            commands.events.clear()
            await cursor.close()
            assert commands.events == []  # (no killCursors: the server killed it)
            assert nothing_out(mongo)
            await mongo.pool.close()

    run(main)


def test_a_delete_in_a_transaction_waits_for_its_commit() -> None:
    """The simulator keeps a transaction's deletes aside as it does its inserts: seen inside,
    applied at commit, dropped by an abort; a drop is refused in a transaction."""

    async def main() -> None:
        async with SimMongoServer(SimMongoSettings(services=1)) as server:
            mongo = AsyncMongoPool(await lb_pool(server))
            await mongo.insert("test", "t", [{"_id": 1}, {"_id": 2}])
            delete = {"delete": "t", "deletes": [{"q": {"_id": 1}, "limit": 1}]}
            for outcome in ("abort", "commit"):
                async with mongo.session() as session:
                    await session.start_transaction()
                    assert (await session.command("test", delete))["n"] == 1
                    inside = await (await session.find("test", "t")).to_list()
                    assert [d["_id"] for d in inside] == [2]
                    assert len(server.store.documents("test.t")) == 2  # (not yet)
                    with pytest.raises(OperationFailure) as refused:
                        await session.command("test", {"drop": "t"})
                    assert refused.value.code == 263
                    if outcome == "abort":
                        await session.abort_transaction()
                    else:
                        await session.commit_transaction()
                kept = [d["_id"] for d in server.store.documents("test.t")]
                assert kept == ([1, 2] if outcome == "abort" else [2])
            await mongo.pool.close()

    run(main)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"host": ""}, r"connect\(host=...\)"),
        ({"port": "27017"}, r"connect\(port=...\): an int from 1 to 65535"),
        ({"port": 70000}, r"connect\(port=...\)"),
        ({"port": True}, r"connect\(port=...\)"),
        ({"connect_timeout": -1}, r"connect\(connect_timeout=...\)"),
        ({"tls": True}, r"connect\(tls=...\): an ssl.SSLContext or None"),
    ],
)
def test_connect_checks_its_arguments(kwargs: dict[str, Any], message: str) -> None:
    arguments = {"host": "127.0.0.1", "port": 27017, **kwargs}
    both = ((mongodb.async_connect, "async_connect"), (mongodb.connect, "connect"))
    for connect, name in both:
        pattern = message.replace("connect\\(", f"{name}\\(")
        with pytest.raises((TypeError, ValueError), match=pattern):
            connect(**arguments)


def test_a_commands_timeout_is_checked_alike_and_bounds_the_round_trip() -> None:
    """A negative timeout is the same ValueError on both connections (no command event
    started); MongoPool.command's timeout covers the round trip, not only the checkout."""

    async def main() -> None:
        commands = Recorder()
        async with SimMongoServer(SimMongoSettings(services=1)) as server:
            mongo = AsyncMongoPool(await lb_pool(server, commands=commands))
            async with mongo.connection() as conn:
                with pytest.raises(ValueError, match=r"command\(timeout=...\)"):
                    await conn.command("admin", {"ping": 1}, timeout=-1)
                assert not conn.closed
            with pytest.raises(ValueError, match=r"command\(timeout=...\)"):
                await mongo.command("admin", {"ping": 1}, timeout=float("nan"))
            assert commands.events == [] and nothing_out(mongo)
            server.fail_command("ping", delay=5.0)
            with pytest.raises(NetworkError) as caught:
                await mongo.command("admin", {"ping": 1}, timeout=0.2)
            assert caught.value.timeout and nothing_out(mongo)
            server.clear_faults()
            await mongo.pool.close()

    run(main)
    server = SimMongoServer(SimMongoSettings(services=1))
    with server.start_in_thread() as handle:
        connect = mongodb.connect("127.0.0.1", handle.port, load_balanced=True)
        options = poolkit.PoolOptions(load_balanced=True)
        with poolkit.Pool(connect, options=options) as pool, pool.connection() as conn:
            with pytest.raises(ValueError, match=r"command\(timeout=...\)"):
                conn.command("admin", {"ping": 1}, timeout=-1)
            assert not conn.closed


@pytest.mark.parametrize("command", ["find", "getMore", "insert"])
def test_a_cancelled_operation_gives_its_connection_back_closed(command: str) -> None:
    """Cancelled while waiting for its reply: the connection (whose reply would reach the next
    user) is closed, and nothing stays checked out, pinned or not."""

    async def main() -> None:
        async with SimMongoServer(SimMongoSettings(services=2)) as server:
            mongo = AsyncMongoPool(await lb_pool(server))
            await filled(server, mongo, 10)
            cursor = None
            if command == "getMore":
                cursor = await mongo.find("test", "items", batch_size=2)
            server.fail_command(command, delay=5.0)
            operations: dict[str, Callable[[], Coroutine[Any, Any, Any]]] = {
                "find": lambda: mongo.find("test", "items", batch_size=2),
                "getMore": lambda: cursor.to_list(),  # type: ignore[union-attr]
                "insert": lambda: mongo.insert("test", "items", [{"x": 1}]),
            }
            task = asyncio.create_task(operations[command]())
            for _ in range(100):
                await asyncio.sleep(0.005)
                if server.stats().commands.get(command, 0):
                    break
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            if cursor is not None:
                assert mongo.in_use()["cursor"] == 1  # (pinned until closed)
                await cursor.close()
            assert nothing_out(mongo)
            assert mongo.pool.stats().connections_closed.get("error", 0) == 1
            server.clear_faults()
            await mongo.pool.close()

    run(main)


def test_a_reused_server_session_goes_on_with_its_transaction_numbers() -> None:
    """The server refuses a transaction number it has seen on a session: a session that gets
    a server session back from the pool goes on from the last number it used."""

    async def main() -> None:
        commands = Recorder()
        async with SimMongoServer(SimMongoSettings(services=1)) as server:
            mongo = AsyncMongoPool(await lb_pool(server, commands=commands))
            async with mongo.session() as session:
                for _ in range(2):
                    await session.start_transaction()
                    await session.command("test", {"insert": "o", "documents": [{}]})
                    await session.commit_transaction()
                first = session.lsid
            async with mongo.transaction("test") as txn:  # (the same server session, reused)
                await txn.command({"insert": "o", "documents": [{}]})
                assert txn.session.lsid == first and txn.session.txn_number == 3
            numbers = [
                int(e.command["txnNumber"])
                for e in commands.of(CommandStartedEvent)
                if e.command_name == "insert"
            ]
            assert numbers == [1, 2, 3]
            assert len(server.store.documents("test.o")) == 3
            await mongo.pool.close()

    run(main)


@pytest.mark.parametrize("holder", ["transaction", "cursor"])
def test_a_cancelled_pinned_operation_clears_nothing(holder: str) -> None:
    """Cancelled mid-command, the connection is closed by the client: the abort (or the
    cursor's close) that then finds it closed is not the server's network error, and clears
    no service (it did: one cancelled task cleared a service)."""

    async def main() -> None:
        recorder = Recorder()
        async with SimMongoServer(SimMongoSettings(services=2)) as server:
            mongo = AsyncMongoPool(await lb_pool(server, recorder))
            await filled(server, mongo, 10)
            if holder == "transaction":
                server.fail_command("insert", delay=5.0)
                with pytest.raises(TimeoutError):
                    async with asyncio.timeout(0.2), mongo.transaction("test") as txn:
                        await txn.command({"insert": "o", "documents": [{}]})
            else:
                cursor = await mongo.find("test", "items", batch_size=2)
                server.fail_command("getMore", delay=5.0)
                with pytest.raises(TimeoutError):
                    async with asyncio.timeout(0.2):
                        await cursor.to_list()
                await cursor.close()
            assert recorder.of(ev.PoolClearedEvent) == []
            assert nothing_out(mongo)
            server.clear_faults()
            await mongo.pool.close()

    run(main)


@pytest.mark.parametrize(
    "fault",
    [{"close_connection": True}, {"error_code": 251}],
    ids=["network", "transient"],
)
def test_a_transactions_find_follows_the_transactions_error_rules(fault: dict[str, Any]) -> None:
    """A find in a transaction that fails with a network error is labelled
    TransientTransactionError, and a transient error gives the pin back at once, as for the
    transaction's commands."""

    async def main() -> None:
        async with SimMongoServer(SimMongoSettings(services=2)) as server:
            mongo = AsyncMongoPool(await lb_pool(server))
            await filled(server, mongo, 5)
            async with mongo.session() as session:
                await session.start_transaction()
                await session.command("test", {"insert": "o", "documents": [{}]})
                server.fail_command("find", **fault)
                with pytest.raises((NetworkError, OperationFailure)) as caught:
                    await session.find("test", "items")
                assert caught.value.has_error_label("TransientTransactionError")
                assert not session.pinned and mongo.in_use()["transaction"] == 0
                await session.abort_transaction()
            assert nothing_out(mongo)
            await mongo.pool.close()

    run(main)


def test_a_transactions_cursor_ends_at_its_commit() -> None:
    async def main() -> None:
        commands = Recorder()
        async with SimMongoServer(SimMongoSettings(services=2)) as server:
            mongo = AsyncMongoPool(await lb_pool(server, commands=commands))
            await filled(server, mongo, 6)
            async with mongo.session() as session:
                await session.start_transaction()
                cursor = await session.find("test", "items", batch_size=2)
                await cursor.__anext__()
                await session.commit_transaction()
                commands.events.clear()
                assert (await cursor.__anext__())["_id"] == 1  # (the batch it holds)
                with pytest.raises(InvalidOperationError, match="transaction that has ended"):
                    await cursor.__anext__()
                await cursor.close()
                assert commands.events == []  # (no getMore, no killCursors)
            assert nothing_out(mongo)
            await mongo.pool.close()

    run(main)


def test_a_cursor_or_session_collected_unclosed_leaves_no_phantom_count() -> None:
    async def main() -> None:
        async with SimMongoServer(SimMongoSettings(services=2)) as server:
            mongo = AsyncMongoPool(await lb_pool(server))
            await filled(server, mongo, 6)
            cursor = await mongo.find("test", "items", batch_size=2)
            session = mongo.session()
            await session.start_transaction()
            await session.command("test", {"insert": "o", "documents": [{}]})
            assert mongo.in_use() == {"cursor": 1, "transaction": 1, "other": 0}
            del cursor, session
            gc.collect()
            assert mongo.in_use() == {"cursor": 0, "transaction": 0, "other": 0}
            for _ in range(100):  # (the pool takes the lost leases back at its next step)
                if mongo.pool.stats().in_use == 0:
                    break
                await asyncio.sleep(0.01)
            assert mongo.pool.stats().in_use == 0
            await mongo.pool.close()

    run(main)
