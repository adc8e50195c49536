"""poolkit.mongodb's decisions without I/O: the handshake's command and its checks, the SDAM
rules for which errors clear a pool, the errors' labels, and the load-balanced timeout message."""

from __future__ import annotations

import struct
from collections.abc import Callable

import bson
import pytest

from poolkit.mongodb._protocol import Protocol as _Protocol
from poolkit.mongodb.errors import (
    LOAD_BALANCER_UNSUPPORTED,
    HandshakeError,
    LoadBalancerUnsupportedError,
    NetworkError,
    OperationFailure,
    clear_scope,
    is_state_change,
)
from poolkit.mongodb.handshake import hello_command
from poolkit.mongodb.pinning import LoadBalancedTimeoutError
from poolkit.mongodb.wire import MessageReader, ProtocolError, encode_msg


def test_the_hello_says_load_balanced_only_in_that_mode() -> None:
    lb = hello_command(load_balanced=True, app_name="shop")
    assert lb["hello"] == 1 and lb["loadBalanced"] is True
    assert lb["client"]["driver"]["name"] == "poolkit"
    assert lb["client"]["application"] == {"name": "shop"}
    assert {"type", "name", "architecture", "version"} <= set(lb["client"]["os"])
    plain = hello_command(load_balanced=False)
    assert "loadBalanced" not in plain and "application" not in plain["client"]


def test_a_hello_reply_without_service_id_fails_with_the_specs_message() -> None:
    protocol = _Protocol("lb:27017", load_balanced=True)
    with pytest.raises(LoadBalancerUnsupportedError) as caught:
        protocol.handshake_done({"ok": 1, "isWritablePrimary": True, "maxWireVersion": 21})
    assert str(caught.value) == (
        "Driver attempted to initialize in load balancing mode, but the server does not "
        "support this mode."
    )
    assert str(caught.value) == LOAD_BALANCER_UNSUPPORTED
    service = bson.ObjectId()
    protocol.handshake_done({"ok": 1, "serviceId": service, "maxWireVersion": 21})
    assert protocol.service_id == service and protocol.max_wire_version == 21
    plain = _Protocol("db:27017", load_balanced=False)
    plain.handshake_done({"ok": 1, "serviceId": service})
    assert plain.service_id is None  # (not in load-balanced mode: no service)


def test_requests_carry_db_and_replies_are_matched() -> None:
    protocol = _Protocol("db:27017", load_balanced=False)
    request_id, data = protocol.request("test", {"ping": 1}, None)
    (sent,) = MessageReader().feed(data)
    assert sent.body == {"ping": 1, "$db": "test"} and sent.request_id == request_id
    (ok,) = MessageReader().feed(encode_msg({"ok": 1.0}, 99, request_id))
    assert protocol.reply(request_id, ok) == {"ok": 1.0}
    (failed,) = MessageReader().feed(
        encode_msg(
            {
                "ok": 0,
                "code": 11600,
                "codeName": "InterruptedAtShutdown",
                "errmsg": "shutting down",
                "errorLabels": ["RetryableWriteError"],
            },
            100,
            request_id,
        )
    )
    with pytest.raises(OperationFailure) as caught:
        protocol.reply(request_id, failed)
    assert caught.value.code == 11600 and caught.value.has_error_label("RetryableWriteError")
    assert "shutting down" in str(caught.value)


def failure(code: int) -> OperationFailure:
    return OperationFailure({"ok": 0, "code": code, "errmsg": "x"}, address="a:1")


def test_which_errors_clear_a_pool() -> None:
    network = NetworkError("reset", address="a:1")
    timeout = NetworkError("timed out", address="a:1", timeout=True)
    handshake = HandshakeError("reset during hello", address="a:1")
    # before the handshake completes: nothing clears
    for error in (network, failure(11600), handshake):
        assert not clear_scope(error, handshake_done=False, max_wire_version=21)
    assert not clear_scope(handshake, handshake_done=True, max_wire_version=21)
    # after: a network error, not a timeout
    assert clear_scope(network, handshake_done=True, max_wire_version=21)
    assert not clear_scope(timeout, handshake_done=True, max_wire_version=21)
    # state changes: shutting down always; not-primary only before 4.2 (wire version 8)
    assert clear_scope(failure(91), handshake_done=True, max_wire_version=21)
    assert not clear_scope(failure(10107), handshake_done=True, max_wire_version=21)
    assert clear_scope(failure(10107), handshake_done=True, max_wire_version=7)
    assert not clear_scope(failure(2), handshake_done=True, max_wire_version=7)
    assert is_state_change(failure(189)) and not is_state_change(failure(11000))


def test_establishment_errors_are_labelled_retryable_and_overloaded() -> None:
    error = HandshakeError(
        "establishing a connection to a:1 timed out", address="a:1", timeout=True
    )
    assert error.has_error_label("SystemOverloadedError")
    assert error.has_error_label("RetryableError") and error.retryable
    assert not NetworkError("x", address="a:1").retryable


def test_the_load_balanced_timeout_message() -> None:
    error = LoadBalancedTimeoutError(
        address="lb:27017",
        waited=1.5,
        stats=None,
        max_size=3,
        in_use={"cursor": 1, "transaction": 1, "other": 1},
    )
    assert str(error) == (
        "Timeout waiting for connection from the connection pool. maxPoolSize: 3, "
        "connections in use by cursors: 1, connections in use by transactions: 1, "
        "connections in use by other operations: 1"
    )


@pytest.mark.parametrize(
    "mangle",
    [
        lambda b: b[:-3],  # a document cut short (the header says more is coming: nothing yet)
        lambda b: b[:16] + b"\x00\x00\x00\x00" + b"\x01\x05\x00",  # a truncated sequence
        lambda b: b[:16] + b"\x00\x00\x00\x00" + b"\x02",  # an unknown section kind
        lambda b: b[:16] + b"\x00\x00\x00\x00" + b"\x00" + b"\x30\x00\x00\x00" + b"\x00" * 4,
    ],
    ids=["short", "truncated-sequence", "unknown-kind", "overrunning-document"],
)
def test_malformed_messages_are_protocol_errors(mangle: Callable[[bytes], bytes]) -> None:
    good = encode_msg({"ping": 1}, 1, sequences={"documents": [{"a": 1}]})
    data = mangle(good)
    length = len(data)
    framed = struct.pack("<i", length) + data[4:]  # (the header's length made to agree)
    reader = MessageReader()
    if mangle(good) == good[:-3]:
        assert reader.feed(data) == []  # incomplete: waits for the rest
        return
    with pytest.raises(ProtocolError):
        reader.feed(framed)


def test_a_checksum_is_not_read_as_a_document() -> None:
    good = encode_msg({"ping": 1}, 1)
    flags = struct.pack("<I", 1)  # checksumPresent, and the body runs into its 4 bytes
    data = good[:16] + flags + good[20:]
    with pytest.raises(ProtocolError):
        MessageReader().feed(data)
