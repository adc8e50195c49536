"""Speculative authentication (the MongoDB Handshake spec's, SCRAM-SHA-256 and SCRAM-SHA-1):
the ``hello`` carries ``saslStart``'s fields and ``db`` as ``speculativeAuthenticate``, a reply
answering it goes on with ``saslContinue`` (no ``saslStart``: one round trip fewer), one
without it falls back to the whole conversation. Without I/O against the simulator's server
side, then connections (asyncio and blocking) and pools against the simulator, its own side
of the exchange, and pymongo (which speculates too) as its client."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterator
from typing import Any

import pytest
from pymongo.errors import OperationFailure as PyMongoOperationFailure
from test_auth import BOTH, PASSWORD, USERS, auth_pool, pymongo_client, settings, sim_exchange

from lb_helpers import Recorder, run
from poolkit.mongodb.auth import Credentials, ScramClient, Speculation
from poolkit.mongodb.connection import AsyncMongoConnection, MongoConnection
from poolkit.mongodb.connection_sync import authenticate
from poolkit.mongodb.errors import AuthenticationError
from poolkit.mongodb.handshake import opening_hello
from poolkit.mongodb.monitoring import CommandEvent
from poolkit_sim_mongo import SimMongoServer, WireClient, WireCommandError
from poolkit_sim_mongo.scram import SimUsers
from poolkit_sim_mongo.settings import ConnectionInfo

# ---------------------------------------------------------------------- what the hello carries


def test_the_hello_carries_the_first_step_and_still_negotiates() -> None:
    negotiating = Credentials("app", PASSWORD, "shop")
    hello, speculation = opening_hello(negotiating, load_balanced=True)
    assert speculation is not None and speculation.mechanism == "SCRAM-SHA-256"  # (the spec's)
    assert hello["saslSupportedMechs"] == "shop.app"
    request = hello["speculativeAuthenticate"]
    assert next(iter(request)) == "saslStart"  # (the server reads the first key as the command)
    assert request["mechanism"] == "SCRAM-SHA-256" and request["db"] == "shop"
    assert request["options"] == {"skipEmptyExchange": True} and request["autoAuthorize"] == 1
    assert request["payload"] == speculation.scram.first()
    assert request["payload"].startswith(b"n,,n=app,r=")
    for text in (repr(hello), repr(speculation), repr(speculation.scram)):
        assert PASSWORD not in text

    given = Credentials("app", PASSWORD, mechanism="SCRAM-SHA-1")
    hello, speculation = opening_hello(given, load_balanced=False)
    assert speculation is not None and "saslSupportedMechs" not in hello
    assert hello["speculativeAuthenticate"]["mechanism"] == "SCRAM-SHA-1"
    assert hello["speculativeAuthenticate"]["db"] == "admin"

    hello, speculation = opening_hello(None, load_balanced=True)
    assert speculation is None
    assert "speculativeAuthenticate" not in hello and "saslSupportedMechs" not in hello


def test_a_password_saslprep_refuses_is_not_speculated() -> None:
    """No speculation: the conversation after the hello fails as it did without one."""
    refused = Credentials("app", "bell\u0007" + PASSWORD, mechanism="SCRAM-SHA-256")
    hello, speculation = opening_hello(refused, load_balanced=True)
    assert speculation is None and "speculativeAuthenticate" not in hello
    with pytest.raises(AuthenticationError, match="SASLprep"):
        authenticate(lambda db, command: {}, refused, {}, address="sim:1")


# ---------------------------------------------------------------------- the conversation, no I/O


@pytest.mark.parametrize("mechanism", [None, *BOTH])
def test_a_speculated_conversation_goes_on_with_sasl_continue(mechanism: str | None) -> None:
    users = SimUsers(USERS, BOTH, 4096)
    conn = ConnectionInfo(0, 1, "peer")
    credentials = Credentials("app", PASSWORD, mechanism=mechanism)
    speculation = Speculation(credentials)
    answer = users.speculative(conn, speculation.command())
    assert answer is not None and "ok" not in answer and answer["done"] is False
    hello = {"saslSupportedMechs": list(BOTH), "speculativeAuthenticate": answer}
    exchange, sent = sim_exchange(users, conn)
    used = authenticate(exchange, credentials, hello, address="sim:1", speculation=speculation)
    assert used == (mechanism or "SCRAM-SHA-256")
    assert sent == ["saslContinue"] and conn.user == "admin.app"


def test_no_answer_falls_back_to_the_whole_conversation() -> None:
    """The user has SCRAM-SHA-1 credentials only: the server fails the speculated SCRAM-SHA-256
    start and says nothing of it; negotiation picks SCRAM-SHA-1, which starts with saslStart."""
    users = SimUsers(USERS, ("SCRAM-SHA-1",), 4096)
    conn = ConnectionInfo(0, 1, "peer")
    credentials = Credentials("app", PASSWORD)
    speculation = Speculation(credentials)
    assert users.speculative(conn, speculation.command()) is None
    exchange, sent = sim_exchange(users, conn)
    hello = {"saslSupportedMechs": users.supported_mechanisms("admin.app")}
    used = authenticate(exchange, credentials, hello, address="sim:1", speculation=speculation)
    assert used == "SCRAM-SHA-1" and sent == ["saslStart", "saslContinue"]
    assert conn.user == "admin.app"


def test_an_answer_for_another_mechanism_than_negotiated_is_not_taken() -> None:
    """Negotiation decides as it did: an answer to the speculated SCRAM-SHA-256 is left when
    saslSupportedMechs does not list it (SCRAM-SHA-1 then starts with saslStart)."""
    users = SimUsers(USERS, BOTH, 4096)
    conn = ConnectionInfo(0, 1, "peer")
    credentials = Credentials("app", PASSWORD)
    speculation = Speculation(credentials)
    answer = users.speculative(conn, speculation.command())
    hello = {"saslSupportedMechs": ["SCRAM-SHA-1"], "speculativeAuthenticate": answer}
    exchange, sent = sim_exchange(users, conn)
    used = authenticate(exchange, credentials, hello, address="sim:1", speculation=speculation)
    assert used == "SCRAM-SHA-1" and sent == ["saslStart", "saslContinue"]


def test_a_wrong_password_fails_after_a_speculated_start_as_after_sasl_start() -> None:
    users = SimUsers(USERS, BOTH, 4096)
    credentials = Credentials("app", "Wrong-" + PASSWORD)
    errors: list[AuthenticationError] = []
    for speculate in (True, False):
        conn = ConnectionInfo(0, 1, "peer")
        speculation = Speculation(credentials) if speculate else None
        hello: dict[str, Any] = {"saslSupportedMechs": list(BOTH)}
        if speculation is not None:
            hello["speculativeAuthenticate"] = users.speculative(conn, speculation.command())
        exchange, sent = sim_exchange(users, conn)
        with pytest.raises(AuthenticationError) as caught:
            authenticate(exchange, credentials, hello, address="sim:1", speculation=speculation)
        assert sent == ["saslContinue"] if speculate else ["saslStart", "saslContinue"]
        assert conn.user is None and conn.sasl is None
        errors.append(caught.value)
    speculated, started = errors
    assert str(speculated) == str(started) and speculated.code == started.code == 18
    assert speculated.mechanism == started.mechanism == "SCRAM-SHA-256"


# ---------------------------------------------------------------------- connections


async def open_async(server: SimMongoServer, **options: Any) -> AsyncMongoConnection:
    options = {"username": "app", "password": PASSWORD, "connect_timeout": 5.0, **options}
    return await AsyncMongoConnection.open(server.host, server.port, load_balanced=True, **options)


def open_blocking(port: int, **options: Any) -> MongoConnection:
    options = {"username": "app", "password": PASSWORD, "connect_timeout": 5.0, **options}
    return MongoConnection.open("127.0.0.1", port, load_balanced=True, **options)


def open_and_close(server: SimMongoServer, port: int, blocking: bool, **options: Any) -> None:
    """Open a connection (blocking, or on an event loop of its own) and close it."""
    if blocking:
        open_blocking(port, **options).close()
    else:

        async def open_() -> None:
            await (await open_async(server, **options)).aclose()

        asyncio.run(open_())


def handshake_commands(server: SimMongoServer) -> dict[str, int]:
    commands = server.stats().commands
    return {name: commands.get(name, 0) for name in ("hello", "saslStart", "saslContinue")}


@pytest.mark.parametrize("speculative", [True, False], ids=["answered", "ignored"])
@pytest.mark.parametrize("blocking", [False, True], ids=["asyncio", "blocking"])
def test_a_connection_authenticates_speculatively_or_falls_back(
    blocking: bool, speculative: bool
) -> None:
    """One round trip fewer when the server answers (hello, saslContinue); the whole
    conversation when it ignores the speculation, as a server before 4.4 does."""
    server = SimMongoServer(settings(speculative_auth=speculative))

    def check(conn: MongoConnection | AsyncMongoConnection) -> None:
        assert conn.auth_mechanism == "SCRAM-SHA-256"
        assert "speculativeAuthenticate" not in conn.hello  # (the conversation's, not kept)
        (info,) = server.connections()
        sent = info.hello or {}
        assert sent["speculativeAuthenticate"]["mechanism"] == "SCRAM-SHA-256"
        assert sent["saslSupportedMechs"] == "admin.app" and info.user == "admin.app"
        assert handshake_commands(server) == {
            "hello": 1,
            "saslStart": 0 if speculative else 1,
            "saslContinue": 1,
        }

    async def use_async() -> None:
        async with contextlib.aclosing(await open_async(server)) as conn:
            check(conn)
            assert (await conn.command("test", {"count": "items"}))["n"] == 0

    with server.start_in_thread() as handle:
        if blocking:
            with contextlib.closing(open_blocking(handle.port)) as conn:
                check(conn)
                assert conn.command("test", {"count": "items"})["n"] == 0
        else:
            asyncio.run(use_async())


@pytest.mark.parametrize(
    ("mechanisms", "given", "used", "sasl_starts"),
    [
        (("SCRAM-SHA-1",), None, "SCRAM-SHA-1", 1),  # (SHA-256 speculated, not the user's)
        (BOTH, "SCRAM-SHA-1", "SCRAM-SHA-1", 0),
        (BOTH, "SCRAM-SHA-256", "SCRAM-SHA-256", 0),
    ],
)
def test_the_speculated_mechanism(
    mechanisms: tuple[str, ...], given: str | None, used: str, sasl_starts: int
) -> None:
    async def main() -> None:
        async with SimMongoServer(settings(auth_mechanisms=mechanisms)) as server:
            async with contextlib.aclosing(await open_async(server, auth_mechanism=given)) as conn:
                assert conn.auth_mechanism == used
            assert handshake_commands(server)["saslStart"] == sasl_starts
            hello = server.connections()[0].hello or {}
            assert hello["speculativeAuthenticate"]["mechanism"] == (given or "SCRAM-SHA-256")

    run(main)


def test_a_user_of_another_database_is_speculated_there() -> None:
    async def main() -> None:
        async with SimMongoServer(settings(users={"shop.clerk": PASSWORD})) as server:
            await (await open_async(server, username="clerk", auth_source="shop")).aclose()
            assert handshake_commands(server)["saslStart"] == 0
            assert server.connections()[0].user == "shop.clerk"

    run(main)


@pytest.mark.parametrize("speculative", [True, False], ids=["answered", "ignored"])
@pytest.mark.parametrize("blocking", [False, True], ids=["asyncio", "blocking"])
def test_a_wrong_password_is_the_same_authentication_error(
    blocking: bool, speculative: bool, caplog: pytest.LogCaptureFixture
) -> None:
    wrong = "Wrong-" + PASSWORD
    server = SimMongoServer(settings(speculative_auth=speculative))
    with caplog.at_level(logging.DEBUG), server.start_in_thread() as handle:
        with pytest.raises(AuthenticationError) as caught:
            open_and_close(server, handle.port, blocking, password=wrong)
        assert handshake_commands(server)["saslStart"] == (0 if speculative else 1)
    error = caught.value
    assert error.code == 18 and error.code_name == "AuthenticationFailed"
    assert error.after_hello and error.service_id in server.service_ids
    assert error.mechanism == "SCRAM-SHA-256" and error.labels == frozenset()
    assert str(error) == (
        f"SCRAM-SHA-256 authentication of user 'app' on 'admin' at 127.0.0.1:{handle.port} "
        "failed: Authentication failed. (AuthenticationFailed 18)"
    )
    for text in (str(error), repr(error), repr(error.__cause__), caplog.text):
        assert wrong not in text and PASSWORD not in text
    assert all(c.user is None for c in server.connections())


def test_an_unknown_user_fails_after_the_fallback() -> None:
    """The speculated start of a user the server does not know fails in silence: the client
    then starts over with saslStart, which the server refuses (18, its one message)."""

    async def main() -> None:
        async with SimMongoServer(settings()) as server:
            with pytest.raises(AuthenticationError) as caught:
                await open_async(server, username="nobody")
            assert caught.value.code == 18
            assert handshake_commands(server) == {"hello": 1, "saslStart": 1, "saslContinue": 0}

    run(main)


def test_a_pool_authenticates_each_connection_speculatively_unseen() -> None:
    async def main() -> None:
        commands = Recorder()
        async with SimMongoServer(settings(services=3)) as server:
            pool = auth_pool(server, max_size=3, listeners=[commands])
            try:
                leases = [await pool.checkout() for _ in range(3)]
                for lease in leases:
                    lease.release()
                async with pool.connection() as conn:
                    await conn.command("admin", {"ping": 1})
            finally:
                await pool.close()
            assert handshake_commands(server) == {"hello": 3, "saslStart": 0, "saslContinue": 3}
            assert [e.command_name for e in commands.of(CommandEvent)] == ["ping", "ping"]

    run(main)


# ---------------------------------------------------------------------- the simulator's side


def speculative_hello(request: Any) -> dict[str, Any]:
    return {"hello": 1, "loadBalanced": True, "speculativeAuthenticate": request}


@contextlib.contextmanager
def wire_client(**changes: Any) -> Iterator[WireClient]:
    """A connection without a handshake to a simulator of ``settings(**changes)``."""
    server = SimMongoServer(settings(**changes))
    with server.start_in_thread() as handle, WireClient(handle.port, handshake=False) as wire:
        yield wire


def test_the_simulator_answers_a_speculated_start_and_goes_on() -> None:
    with wire_client() as wire:
        scram = ScramClient.for_mongodb("SCRAM-SHA-256", "app", PASSWORD)
        request = {"saslStart": 1, "mechanism": "SCRAM-SHA-256", "payload": scram.first(),
                   "options": {"skipEmptyExchange": True}, "db": "admin"}  # fmt: skip
        answer = wire.command("admin", speculative_hello(request))["speculativeAuthenticate"]
        assert set(answer) == {"conversationId", "done", "payload"} and not answer["done"]
        proof = scram.final(answer["payload"])
        reply = wire.command("admin", {"saslContinue": 1, "payload": proof,
                                       "conversationId": answer["conversationId"]})  # fmt: skip
        assert reply["done"] is True
        scram.verify(reply["payload"])
        assert wire.command("test", {"count": "items"})["n"] == 0  # (authenticated)


@pytest.mark.parametrize(
    ("request_", "code"),
    [
        ("saslStart", 2),  # (BadValue: not a document)
        ({}, 2),
        ({"authorize": 1, "db": "admin"}, 51769),  # (an unknown command)
    ],
)
def test_a_malformed_speculation_fails_the_hello(request_: Any, code: int) -> None:
    with wire_client() as wire:
        with pytest.raises(WireCommandError) as caught:
            wire.command("admin", speculative_hello(request_))
        assert caught.value.code == code
        assert "speculativeAuthenticate" in caught.value.reply["errmsg"]


@pytest.mark.parametrize(
    "request_",
    [
        {"saslStart": 1, "mechanism": "SCRAM-SHA-256", "payload": b"n,,n=app,r=abc"},  # (no db)
        {"saslStart": 1, "mechanism": "SCRAM-SHA-1", "payload": b"n,,n=nobody,r=a", "db": "admin"},
        {"saslStart": 1, "mechanism": "PLAIN", "payload": b"\0app\0pw", "db": "admin"},
        {"authenticate": 1, "mechanism": "MONGODB-X509", "db": "$external"},
    ],
    ids=["no-db", "unknown-user", "plain", "x509"],
)
def test_a_failed_speculation_is_answered_with_nothing(request_: dict[str, Any]) -> None:
    with wire_client() as wire:
        reply = wire.command("admin", speculative_hello(request_))
        assert reply["ok"] == 1 and "speculativeAuthenticate" not in reply


def test_a_server_without_speculative_authentication_ignores_it_entirely() -> None:
    with wire_client(speculative_auth=False) as wire:
        reply = wire.command("admin", speculative_hello("not even a document"))
        assert reply["ok"] == 1 and "speculativeAuthenticate" not in reply


# ---------------------------------------------------------------------- pymongo, a real client


@pytest.mark.parametrize(
    ("users", "mechanisms", "source", "speculated"),
    [
        (USERS, BOTH, "admin", True),
        ({"shop.clerk": PASSWORD}, BOTH, "shop", True),
        (USERS, ("SCRAM-SHA-1",), "admin", False),  # (pymongo speculates SHA-256, then falls back)
    ],
    ids=["admin", "other-db", "sha1-only"],
)
def test_pymongo_speculates_against_the_simulator(
    users: dict[str, str], mechanisms: tuple[str, ...], source: str, speculated: bool
) -> None:
    name = next(iter(users)).rpartition(".")[2]
    server = SimMongoServer(settings(users=users, auth_mechanisms=mechanisms))
    with server.start_in_thread() as handle:
        uri = (
            f"mongodb://{name}:{PASSWORD}@127.0.0.1:{handle.port}/"
            f"?loadBalanced=true&authSource={source}"
        )
        with pymongo_client(uri) as client:
            client.shop.items.insert_one({"_id": 1})
            assert client.shop.items.count_documents({}) == 1
        conns = server.connections()
        assert all((c.hello or {}).get("speculativeAuthenticate") for c in conns)
        assert {c.user for c in conns} == {f"{source}.{name}"}
        assert handshake_commands(server)["saslStart"] == (0 if speculated else len(conns))
        with pymongo_client(uri.replace(PASSWORD, "wrong")) as client:
            with pytest.raises(PyMongoOperationFailure) as caught:
                client.shop.items.insert_one({"_id": 2})
            assert caught.value.code == 18
