"""Authentication in poolkit.mongodb's handshake (poolkit.mongodb.auth): the SCRAM client on
the RFCs' test vectors, SASLprep on RFC 4013's examples, the conversation against the
simulator's server side (poolkit_sim_mongo.scram) without I/O, then pools of
authenticated connections against the simulator, the errors' SDAM rules, and pymongo as the
client of the simulator's SCRAM (proof that it is MongoDB's)."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any

import pymongo
import pytest
from pymongo.errors import OperationFailure as PyMongoOperationFailure

import poolkit
from lb_helpers import Recorder, run
from poolkit import events as ev
from poolkit.mongodb import AsyncMongoPool, async_connect, connect, parse_uri
from poolkit.mongodb import auth as auth_module
from poolkit.mongodb.auth import (
    KEY_CACHE,
    Conversation,
    Credentials,
    KeyCache,
    ScramClient,
    ScramError,
    negotiate,
    sasl_supported_mechs,
    saslprep,
)
from poolkit.mongodb.connection import AsyncMongoConnection, MongoConnection
from poolkit.mongodb.connection_sync import authenticate
from poolkit.mongodb.errors import (
    AuthenticationError,
    HandshakeError,
    NetworkError,
    OperationFailure,
    clear_scope,
)
from poolkit.mongodb.monitoring import CommandEvent
from poolkit.mongodb.pools import async_connect_uri, connect_uri
from poolkit_sim_mongo import SimMongoServer, SimMongoSettings, WireClient, WireCommandError
from poolkit_sim_mongo.scram import SimUsers
from poolkit_sim_mongo.settings import ConnectionInfo

PASSWORD = "s3cret-Pencil-42"
USERS = {"app": PASSWORD}
BOTH = ("SCRAM-SHA-1", "SCRAM-SHA-256")


def settings(**changes: Any) -> SimMongoSettings:
    return SimMongoSettings(**{"services": 2, "users": USERS, **changes})


# ---------------------------------------------------------------------- the RFCs' test vectors


def test_scram_sha_256_on_rfc_7677s_test_vector() -> None:
    client = ScramClient(
        "SCRAM-SHA-256", "user", "pencil", nonce="rOprNGfwEbeRWgbNEkqO", cache=None
    )
    assert client.first() == b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
    server_first = (
        b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    )
    assert client.final(server_first) == (
        b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
        b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
    )
    client.verify(b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")
    with pytest.raises(ScramError, match="signature"):
        client.verify(b"v=" + base64.b64encode(b"\x00" * 32))
    with pytest.raises(ScramError, match="refused"):
        client.verify(b"e=invalid-proof")


def test_scram_sha_1_on_rfc_5802s_test_vector() -> None:
    client = ScramClient(
        "SCRAM-SHA-1", "user", "pencil", nonce="fyko+d2lbbFgONRv9qkxdawL", cache=None
    )
    assert client.first() == b"n,,n=user,r=fyko+d2lbbFgONRv9qkxdawL"
    server_first = b"r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,s=QSXCR+Q6sek8bf92,i=4096"
    assert client.final(server_first) == (
        b"c=biws,r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,p=v0X8v3Bz2T0CJGbJQyF0X+HI4Ts="
    )
    client.verify(b"v=rmF9pqV8S7suAoZWja4dJRkFsKQ=")


@pytest.mark.parametrize(
    ("server_first", "error"),
    [
        (b"r=someone-elses-nonce,s=QSXCR+Q6sek8bf92,i=4096", "nonce"),
        (b"r=abcdef,s=QSXCR+Q6sek8bf92,i=4096", "nonce"),  # (not longer than the client's)
        (b"r=abcdefXYZ,s=QSXCR+Q6sek8bf92,i=4095", "iteration count 4095"),
        (b"m=ext,r=abcdefXYZ,s=QSXCR+Q6sek8bf92,i=4096", "extension"),
        (b"r=abcdefXYZ,i=4096", "malformed"),
        (b"r=abcdefXYZ,s=QSXCR+Q6sek8bf92,i=many", "malformed"),
        (b"garbage", "malformed"),
    ],
)
def test_the_server_first_message_is_checked(server_first: bytes, error: str) -> None:
    client = ScramClient("SCRAM-SHA-256", "user", "pencil", nonce="abcdef", cache=None)
    with pytest.raises(ScramError, match=error):
        client.final(server_first)


def test_user_names_are_escaped_not_prepared() -> None:
    client = ScramClient("SCRAM-SHA-256", "a=b,c\u2168", "pw", nonce="n0nce")
    assert client.first() == "n,,n=a=3Db=2Cc\u2168,r=n0nce".encode()


def test_mongodbs_scram_sha_1_password_is_the_md5_digest() -> None:
    from pymongo.auth_shared import _password_digest  # (pymongo's own, as a cross-check)

    client = ScramClient.for_mongodb("SCRAM-SHA-1", "user", "pencil")
    expected = ScramClient("SCRAM-SHA-1", "user", _password_digest("user", "pencil"))
    assert client._password == expected._password
    assert client._password == hashlib.md5(b"user:mongo:pencil").hexdigest().encode()


# ---------------------------------------------------------------------- SASLprep (RFC 4013)


@pytest.mark.parametrize(
    ("text", "prepared"),
    [
        ("I\u00adX", "IX"),  # SOFT HYPHEN mapped to nothing
        ("user", "user"),
        ("USER", "USER"),  # case preserved
        ("\u00aa", "a"),  # NFKC
        ("\u2168", "IX"),  # NFKC: ROMAN NUMERAL NINE
        ("a\u00a0b\u2003c", "a b c"),  # non-ASCII spaces mapped to SPACE
        ("\u200bzero\u2060width", "zerowidth"),  # "commonly mapped to nothing"
        ("\u0627\u0628\u0627", "\u0627\u0628\u0627"),  # right-to-left, first and last RandALCat
        ("", ""),
    ],
)
def test_saslprep_rfc_4013_examples(text: str, prepared: str) -> None:
    assert saslprep(text) == prepared
    from pymongo.saslprep import saslprep as pymongos  # (a second implementation agrees)

    assert not text or pymongos(text) == prepared  # (pymongo's fails on "")


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("\u0007", "prohibited"),  # ASCII control
        ("pass\u0000word", "prohibited"),
        ("\ue000", "prohibited"),  # private use
        ("\ufffe", "prohibited"),  # non-character
        ("\u0627\u0031", "bidirectional"),  # RandALCat not last
        ("\u0627a\u0627", "bidirectional"),  # RandALCat with LCat
        ("\u0221", "unassigned"),  # unassigned in Unicode 3.2
    ],
)
def test_saslprep_refuses_and_does_not_quote(text: str, error: str) -> None:
    with pytest.raises(ScramError, match=error) as caught:
        saslprep(text)
    assert text not in str(caught.value)


def test_saslprep_allows_unassigned_code_points_in_queries() -> None:
    assert saslprep("\u0221", allow_unassigned=True) == "\u0221"


# ---------------------------------------------------------------------- credentials, negotiation


def test_credentials_mask_the_password_and_are_checked() -> None:
    credentials = Credentials("app", PASSWORD)
    assert PASSWORD not in repr(credentials) and "app" in repr(credentials)
    assert Credentials.of(None, None) is None
    with pytest.raises(ValueError, match="needs a user name"):
        Credentials.of(None, PASSWORD)
    with pytest.raises(ValueError, match="needs a password"):
        Credentials.of("app", None)
    with pytest.raises(ValueError, match="not supported"):
        Credentials.of("app", PASSWORD, "admin", "PLAIN")
    with pytest.raises(ValueError, match="not supported"):
        async_connect(
            "127.0.0.1", 1, username="app", password=PASSWORD, auth_mechanism="MONGODB-CR"
        )
    with pytest.raises(ValueError, match="needs a password"):
        connect("127.0.0.1", 1, username="app")


def test_negotiation_follows_the_auth_spec() -> None:
    negotiating = Credentials("app", PASSWORD, "shop")
    assert sasl_supported_mechs(negotiating) == "shop.app"
    assert sasl_supported_mechs(Credentials("app", PASSWORD, mechanism="SCRAM-SHA-1")) is None
    assert sasl_supported_mechs(None) is None
    assert negotiate(negotiating, {"saslSupportedMechs": list(BOTH)}) == "SCRAM-SHA-256"
    assert negotiate(negotiating, {"saslSupportedMechs": ["SCRAM-SHA-1"]}) == "SCRAM-SHA-1"
    assert negotiate(negotiating, {"saslSupportedMechs": ["PLAIN"]}) == "SCRAM-SHA-1"
    assert negotiate(negotiating, {}) == "SCRAM-SHA-1"  # (no such user, or an old server)
    given = Credentials("app", PASSWORD, mechanism="SCRAM-SHA-1")
    assert negotiate(given, {"saslSupportedMechs": list(BOTH)}) == "SCRAM-SHA-1"


# ---------------------------------------------------------------------- the conversation, no I/O


def sim_exchange(
    users: SimUsers, conn: ConnectionInfo, *, skip_empty_exchange: bool = True
) -> tuple[Callable[[str, Mapping[str, Any]], dict[str, Any]], list[str]]:
    """An exchange that hands each command to the simulator's server side; the names sent."""
    sent: list[str] = []

    def exchange(db: str, command: Mapping[str, Any]) -> dict[str, Any]:
        name = next(iter(command))
        sent.append(name)
        body = dict(command)
        if not skip_empty_exchange:
            body.pop("options", None)  # (as a server before 4.4 ignores it)
        if name == "saslStart":
            reply = users.sasl_start(conn, body, db)
        else:
            reply = users.sasl_continue(conn, body, db)
        if reply["ok"] != 1:
            raise OperationFailure(reply, address="sim:1")
        return reply

    return exchange, sent


@pytest.mark.parametrize("mechanism", BOTH)
@pytest.mark.parametrize("skip_empty_exchange", [True, False])
def test_the_conversation_against_the_simulators_server(
    mechanism: str, skip_empty_exchange: bool
) -> None:
    users = SimUsers({"app": PASSWORD, "shop.clerk": "p\u00aass"}, BOTH, 4096)
    for credentials, namespace in (
        (Credentials("app", PASSWORD, mechanism=mechanism), "admin.app"),
        (Credentials("clerk", "pass" if mechanism == "SCRAM-SHA-256" else "p\u00aass", "shop",
                     mechanism), "shop.clerk"),
    ):  # fmt: skip
        conn = ConnectionInfo(0, 1, "peer")
        exchange, sent = sim_exchange(users, conn, skip_empty_exchange=skip_empty_exchange)
        used = authenticate(exchange, credentials, {}, address="sim:1")
        assert used == mechanism and conn.user == namespace
        continues = 1 if skip_empty_exchange else 2
        assert sent == ["saslStart"] + ["saslContinue"] * continues


def test_a_wrong_password_or_user_is_an_authentication_error() -> None:
    users = SimUsers(USERS, BOTH, 4096)
    for credentials in (
        Credentials("app", "wrong"),
        Credentials("nobody", PASSWORD),
        Credentials("app", PASSWORD, "shop"),  # (the user is admin's)
    ):
        conn = ConnectionInfo(0, 1, "peer")
        with pytest.raises(AuthenticationError) as caught:
            authenticate(sim_exchange(users, conn)[0], credentials, {}, address="sim:1")
        assert caught.value.code == 18 and caught.value.code_name == "AuthenticationFailed"
        assert conn.user is None and conn.sasl is None


def test_a_server_that_does_not_know_the_password_is_caught() -> None:
    users = SimUsers(USERS, BOTH, 4096)
    conn = ConnectionInfo(0, 1, "peer")
    exchange, _ = sim_exchange(users, conn)

    def forged(db: str, command: Mapping[str, Any]) -> dict[str, Any]:
        reply = exchange(db, command)
        if "saslContinue" in command:
            reply["payload"] = b"v=" + base64.b64encode(b"\x01" * 32)
        return reply

    with pytest.raises(AuthenticationError, match="signature") as caught:
        authenticate(forged, Credentials("app", PASSWORD), {"saslSupportedMechs": list(BOTH)},
                     address="sim:1")  # fmt: skip
    assert caught.value.code is None and caught.value.mechanism == "SCRAM-SHA-256"


def test_a_password_saslprep_refuses_fails_without_showing_it() -> None:
    password = "bell\u0007" + PASSWORD
    credentials = Credentials("app", password, mechanism="SCRAM-SHA-256")
    with pytest.raises(AuthenticationError, match="SASLprep") as caught:
        Conversation(credentials, {}, address="sim:1", service_id=None)
    assert password not in str(caught.value) and PASSWORD not in repr(caught.value)
    sha1 = Credentials("app", password, mechanism="SCRAM-SHA-1")  # (MongoDB's SHA-1: no prep)
    assert Conversation(sha1, {}, address="sim:1", service_id=None).mechanism == "SCRAM-SHA-1"


def test_a_low_iteration_count_is_refused() -> None:
    users = SimUsers(USERS, BOTH, 1000)
    exchange, sent = sim_exchange(users, ConnectionInfo(0, 1, "peer"))
    with pytest.raises(AuthenticationError, match="iteration count 1000"):
        authenticate(exchange, Credentials("app", PASSWORD), {}, address="sim:1")
    assert sent == ["saslStart"]  # (no proof sent)


def test_salted_passwords_are_cached(monkeypatch: pytest.MonkeyPatch) -> None:
    derived: list[int] = []
    real = auth_module.salted_keys

    def counting(mechanism: str, password: bytes, salt: bytes, iterations: int) -> Any:
        derived.append(iterations)
        return real(mechanism, password, salt, iterations)

    monkeypatch.setattr(auth_module, "salted_keys", counting)
    users = SimUsers(USERS, BOTH, 4096)
    credentials = Credentials("app", PASSWORD, mechanism="SCRAM-SHA-256")
    for _ in range(3):
        conn = ConnectionInfo(0, 1, "peer")
        conversation = Conversation(credentials, {}, address="sim:1", service_id=None)
        reply = users.sasl_start(conn, conversation.start(), "admin")
        needs_work = conversation.challenge(reply)
        assert needs_work == (not derived)  # (the first runs PBKDF2; the others find it)
        assert conversation.finish(users.sasl_continue(conn, conversation.proof(), "admin")) is None
    assert derived == [4096]
    assert PASSWORD not in repr(KEY_CACHE) and "KeyCache" in repr(KEY_CACHE)


def test_the_key_cache_is_bounded() -> None:
    cache = KeyCache(maxsize=2)
    for n in range(3):
        cache.put(("SCRAM-SHA-256", b"pw", bytes([n]), 4096), (b"c", b"s"))
    assert len(cache) == 2
    assert cache.get(("SCRAM-SHA-256", b"pw", b"\x00", 4096)) is None
    assert cache.get(("SCRAM-SHA-256", b"pw", b"\x02", 4096)) == (b"c", b"s")


# ---------------------------------------------------------------------- the simulator


def test_the_simulator_requires_authentication() -> None:
    with SimMongoServer(settings()).start_in_thread() as handle, WireClient(handle.port) as wire:
        assert wire.command("admin", {"ping": 1})["ok"] == 1  # (allowed before authenticating)
        with pytest.raises(WireCommandError) as caught:
            wire.command("test", {"find": "items"})
        assert caught.value.code == 13 and caught.value.reply["codeName"] == "Unauthorized"
        with pytest.raises(WireCommandError) as caught:
            wire.command("admin", {"saslContinue": 1, "conversationId": 1, "payload": b""})
        assert caught.value.code == 17  # (no conversation)
        with pytest.raises(WireCommandError) as caught:
            wire.command("admin", {"saslStart": 1, "mechanism": "PLAIN", "payload": b"\0a\0b"})
        assert caught.value.code == 334
        mechs = wire.command("admin", {"hello": 1, "saslSupportedMechs": "admin.app"})
        assert mechs["saslSupportedMechs"] == list(BOTH)
        unknown = wire.command("admin", {"hello": 1, "saslSupportedMechs": "admin.nobody"})
        assert "saslSupportedMechs" not in unknown


def test_simulator_settings_check_users() -> None:
    with pytest.raises(ValueError, match="users"):
        SimMongoSettings(users={"": "pw"})
    with pytest.raises(ValueError, match="auth_mechanisms"):
        SimMongoSettings(auth_mechanisms=("PLAIN",))
    assert PASSWORD not in repr(settings())


# ---------------------------------------------------------------------- pools, authenticated


def auth_pool(
    server: SimMongoServer,
    recorder: Recorder | None = None,
    max_size: int = 4,
    **connect_options: Any,
) -> poolkit.AsyncPool[AsyncMongoConnection]:
    options = {"username": "app", "password": PASSWORD, "connect_timeout": 5.0, **connect_options}
    pool = poolkit.AsyncPool(
        async_connect(server.host, server.port, load_balanced=True, **options),
        address=server.address,
        options=poolkit.PoolOptions(load_balanced=True, max_size=max_size),
        listeners=[recorder] if recorder is not None else [],
    )
    pool.ready()
    return pool


def test_a_pool_of_authenticated_connections() -> None:
    async def main() -> None:
        commands = Recorder()
        async with SimMongoServer(settings(services=3)) as server:
            pool = auth_pool(server, max_size=3, listeners=[commands])
            mongo = AsyncMongoPool(pool)
            leases = [await pool.checkout() for _ in range(3)]  # (all made now: one a service)
            assert {lease.service_id for lease in leases} == set(server.service_ids)
            for lease in leases:
                lease.release()

            async def work(n: int) -> None:
                await mongo.insert("test", "items", [{"_id": n}])
                assert len(await (await mongo.find("test", "items", {"_id": n})).to_list()) == 1

            await asyncio.gather(*(work(n) for n in range(12)))
            conns = server.connections()
            assert len(conns) == pool.stats().total == 3
            assert all(c.user == "admin.app" for c in conns)
            assert all(c.hello and c.hello["saslSupportedMechs"] == "admin.app" for c in conns)
            async with pool.connection() as conn:
                assert conn.auth_mechanism == "SCRAM-SHA-256"  # (negotiated)
                assert PASSWORD not in repr(conn)
            names = {e.command_name for e in commands.of(CommandEvent)}
            assert names == {"insert", "find"}  # (the handshake, its authentication too: unseen)
            await pool.close()

    run(main)


@pytest.mark.parametrize(
    ("mechanisms", "given", "used"),
    [
        (("SCRAM-SHA-1",), None, "SCRAM-SHA-1"),  # (negotiated: the user has SHA-1 only)
        (BOTH, "SCRAM-SHA-1", "SCRAM-SHA-1"),
        (BOTH, "SCRAM-SHA-256", "SCRAM-SHA-256"),
    ],
)
def test_mechanisms_negotiated_or_given(
    mechanisms: tuple[str, ...], given: str | None, used: str
) -> None:
    async def main() -> None:
        async with SimMongoServer(settings(auth_mechanisms=mechanisms)) as server:
            conn = await AsyncMongoConnection.open(
                server.host, server.port, load_balanced=True, username="app",
                password=PASSWORD, auth_mechanism=given,
            )  # fmt: skip
            assert conn.auth_mechanism == used
            hello = server.connections()[0].hello or {}
            assert ("saslSupportedMechs" in hello) == (given is None)
            assert (await conn.command("test", {"count": "items"}))["n"] == 0
            await conn.aclose()

    run(main)


def test_a_threaded_pool_of_authenticated_connections() -> None:
    server = SimMongoServer(settings())
    with server.start_in_thread() as handle:
        pool = poolkit.Pool(
            connect("127.0.0.1", handle.port, load_balanced=True, username="app",
                         password=PASSWORD),
            address=server.address,
            options=poolkit.PoolOptions(load_balanced=True, max_size=3),
        )  # fmt: skip
        failures: list[BaseException] = []

        def work(n: int) -> None:
            try:
                with pool.connection() as conn:
                    assert isinstance(conn, MongoConnection) and conn.auth_mechanism
                    conn.command("test", {"insert": "items", "documents": [{"_id": n}]})
            except BaseException as exc:  # (reported below)
                failures.append(exc)

        with pool:
            leases = [pool.checkout() for _ in range(3)]  # (all made now: none made late)
            for lease in leases:
                lease.release()
            threads = [threading.Thread(target=work, args=(n,)) for n in range(9)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(10)
        assert failures == []
        assert len(server.store.documents("test.items")) == 9
        assert [c.user for c in server.connections()] == ["admin.app"] * 3


def test_a_wrong_password_fails_the_checkout_unlabelled_and_clears_its_service(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def main() -> None:
        recorder = Recorder()
        async with SimMongoServer(settings()) as server:
            pool = auth_pool(server, recorder, password="Wrong-" + PASSWORD)
            with pytest.raises(AuthenticationError) as caught:
                await AsyncMongoPool(pool).command("admin", {"ping": 1})
            error = caught.value
            assert error.code == 18 and error.after_hello
            assert error.service_id in server.service_ids
            assert not error.retryable and error.labels == frozenset()
            assert not isinstance(error, NetworkError | HandshakeError)
            # SDAM's flow for an authentication error (pymongo's too), narrowed by the Load
            # Balancer spec to the hello's service
            assert clear_scope(error, handshake_done=True, max_wire_version=21)
            (cleared,) = recorder.of(ev.PoolClearedEvent)
            assert cleared.service_id == error.service_id
            (closed,) = recorder.of(ev.ConnectionClosedEvent)
            assert closed.reason == "error" and closed.error is error
            for text in (str(error), repr(error), str(error.__cause__), repr(error.__cause__)):
                assert PASSWORD not in text
            await pool.close()

    with caplog.at_level(logging.DEBUG):
        run(main)
    assert PASSWORD not in caplog.text


def test_a_wrong_password_on_a_blocking_connection() -> None:
    with SimMongoServer(settings()).start_in_thread() as handle:
        with pytest.raises(AuthenticationError) as caught:
            MongoConnection.open(
                "127.0.0.1", handle.port, load_balanced=True, username="app", password="nope"
            )
        assert caught.value.code == 18 and caught.value.after_hello


@pytest.mark.parametrize("blocking", [False, True], ids=["asyncio", "blocking"])
def test_a_network_error_during_authentication_carries_the_service(blocking: bool) -> None:
    """Closed on saslContinue: after the hello, so not a HandshakeError (labelled, clearing
    nothing) but a network error of the hello's service, which requires that service cleared
    (Load Balancer spec: errors during authentication go through SDAM's error handling)."""
    server = SimMongoServer(settings())
    with server.start_in_thread() as handle:
        handle.call(lambda: server.fail_command("saslContinue", close_connection=True))
        options: dict[str, Any] = {"load_balanced": True, "username": "app", "password": PASSWORD}
        if blocking:
            with pytest.raises(NetworkError) as caught:
                MongoConnection.open("127.0.0.1", handle.port, **options)
        else:
            with pytest.raises(NetworkError) as caught:
                asyncio.run(AsyncMongoConnection.open("127.0.0.1", handle.port, **options))
        error = caught.value
        assert not isinstance(error, HandshakeError) and not error.timeout
        assert error.after_hello and error.service_id in server.service_ids
        assert "during authentication" in str(error) and error.labels == frozenset()
        assert clear_scope(error, handshake_done=False)  # (the error says it was after hello)


def test_a_timeout_during_authentication_requires_a_clear_too() -> None:
    async def main() -> None:
        async with SimMongoServer(settings()) as server:
            server.fail_command("saslContinue", delay=5.0)
            with pytest.raises(NetworkError) as caught:
                await AsyncMongoConnection.open(
                    server.host, server.port, load_balanced=True, username="app",
                    password=PASSWORD, connect_timeout=0.2,
                )  # fmt: skip
            error = caught.value
            assert error.timeout and error.after_hello and not isinstance(error, HandshakeError)
            # SDAM: a timeout while establishing (not after) marks the server unknown / clears
            assert clear_scope(error, handshake_done=True)

    run(main)


def test_a_network_error_before_the_hello_is_still_a_handshake_error() -> None:
    async def main() -> None:
        async with SimMongoServer(settings()) as server:
            server.fail_command("hello", close_connection=True)
            with pytest.raises(HandshakeError) as caught:
                await AsyncMongoConnection.open(
                    server.host, server.port, load_balanced=True, username="app",
                    password=PASSWORD,
                )  # fmt: skip
            assert not caught.value.after_hello and caught.value.service_id is None
            assert not clear_scope(caught.value, handshake_done=False)

    run(main)


def test_connect_functions_from_a_uri() -> None:
    async def main() -> None:
        async with SimMongoServer(settings()) as server:
            uri = parse_uri(
                f"mongodb://app:{PASSWORD}@{server.address}/shop?authSource=admin&loadBalanced=true&appName=shop"
            )
            pool = poolkit.AsyncPool(
                async_connect_uri(uri), address=server.address, options=uri.pool_options
            )
            pool.ready()
            async with pool.connection() as conn:
                assert conn.auth_mechanism == "SCRAM-SHA-256" and conn.service_id is not None
            assert server.connections()[0].app_name == "shop"
            assert server.connections()[0].user == "admin.app"
            await pool.close()

    run(main)
    with pytest.raises(ValueError, match="not supported"):
        connect_uri(parse_uri("mongodb://u@h/?authMechanism=MONGODB-X509"))
    with pytest.raises(ValueError, match="host and port"):
        async_connect_uri(parse_uri("mongodb://%2Ftmp%2Fmongodb-27017.sock"))


# ---------------------------------------------------------------------- pymongo, a real client


def pymongo_client(uri: str) -> pymongo.MongoClient[dict[str, Any]]:
    return pymongo.MongoClient(uri, serverSelectionTimeoutMS=5000)


@pytest.mark.parametrize("speculative", [True, False], ids=["speculative", "saslStart"])
@pytest.mark.parametrize("mechanism", [None, *BOTH])
def test_pymongo_authenticates_against_the_simulator(
    speculative: bool, mechanism: str | None
) -> None:
    """pymongo's SCRAM (with speculative authentication in its hello, and without) against
    the simulator's: it authenticates, inserts and finds, and a wrong password is refused."""
    server = SimMongoServer(settings(speculative_auth=speculative))
    with server.start_in_thread() as handle:
        query = f"&authMechanism={mechanism}" if mechanism else ""
        uri = f"mongodb://app:{PASSWORD}@127.0.0.1:{handle.port}/?loadBalanced=true{query}"
        with pymongo_client(uri) as client:
            client.shop.items.insert_many([{"_id": n} for n in range(5)])
            assert [d["_id"] for d in client.shop.items.find({}, batch_size=2)] == list(range(5))
        commands = server.stats().commands
        assert commands.get("saslStart", 0) == (0 if speculative else 1)
        assert commands["saslContinue"] >= 1
        assert {c.user for c in server.connections()} == {"admin.app"}
        wrong = uri.replace(PASSWORD, "wrong")
        with pymongo_client(wrong) as client:
            with pytest.raises(PyMongoOperationFailure) as caught:
                client.shop.items.insert_one({"_id": 99})
            assert caught.value.code == 18
