"""The simulator's framing (``poolkit_sim_mongo.framing``) and the driver's
(``poolkit.mongodb.wire``) are two implementations of MongoDB's wire protocol that share no code
(the ``mongo-oracle`` contract): each reads what the other writes, for any command, document
sequences and flags (Hypothesis), and the simulator refuses what is not a message of the
protocol with a ``FrameError`` instead of reading part of it."""

from __future__ import annotations

import asyncio
import socket
import struct
from typing import Any

import bson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from poolkit.mongodb import wire
from poolkit_sim_mongo import framing

_keys = st.text(st.characters(blacklist_characters="\x00", codec="utf-8"), min_size=1, max_size=8)
_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.text(max_size=20),
    st.binary(max_size=20),
)
_values = st.recursive(
    _scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(_keys, inner, max_size=4)
    ),
    max_leaves=12,
)
_documents = st.dictionaries(_keys, _values, max_size=6)
_commands = st.builds(lambda name, rest: {name: 1, **rest}, _keys, _documents)
_sequences = st.dictionaries(_keys, st.lists(_documents, max_size=4), max_size=3)
_ids = st.integers(min_value=0, max_value=2**31 - 1)


def _roundtrip(doc: dict[str, Any]) -> dict[str, Any]:
    """``doc`` as BSON reads it back (bytes come back as bytes, ints as ints)."""
    decoded: dict[str, Any] = bson.decode(bson.encode(doc))
    return decoded


def _sim_parse(data: bytes) -> framing.Frame:
    return framing.parse_frame(data[:16], data[16:])


@given(_commands, _sequences, _ids, _ids, st.booleans())
def test_the_simulator_reads_what_the_driver_writes(
    body: dict[str, Any],
    sequences: dict[str, list[dict[str, Any]]],
    request_id: int,
    response_to: int,
    more: bool,
) -> None:
    data = wire.encode_msg(body, request_id, response_to, sequences=sequences, more_to_come=more)
    frame = _sim_parse(data)
    assert (frame.op_code, frame.request_id, frame.response_to) == (
        framing.OP_MSG,
        request_id,
        response_to,
    )
    assert frame.body == _roundtrip(body)
    assert frame.sequences == {k: [_roundtrip(d) for d in v] for k, v in sequences.items()}
    assert frame.more_to_come is more


@given(_commands, _sequences, _ids, _ids, st.booleans())
def test_the_driver_reads_what_the_simulator_writes(
    body: dict[str, Any],
    sequences: dict[str, list[dict[str, Any]]],
    request_id: int,
    response_to: int,
    more: bool,
) -> None:
    data = framing.command_frame(
        body, request_id, response_to, sequences=sequences, more_to_come=more
    )
    (message,) = wire.MessageReader().feed(data)
    assert (message.op_code, message.request_id, message.response_to) == (
        wire.OP_MSG,
        request_id,
        response_to,
    )
    assert message.body == _roundtrip(body)
    assert dict(message.sequences) == {
        k: [_roundtrip(d) for d in v] for k, v in sequences.items()
    }
    assert message.more_to_come is more


@given(_commands, _ids, _ids)
def test_the_legacy_handshake_frames_agree(body: dict[str, Any], first: int, second: int) -> None:
    query = _sim_parse(wire.encode_query("admin.$cmd", body, first))
    assert (query.op_code, query.request_id, query.body) == (framing.OP_QUERY, first, body)
    (message,) = wire.MessageReader().feed(framing.query_frame("admin.$cmd", body, first))
    assert (message.op_code, message.body, message.collection) == (
        wire.OP_QUERY,
        _roundtrip(body),
        "admin.$cmd",
    )
    (reply,) = wire.MessageReader().feed(framing.reply_frame(body, second, first))
    assert (reply.op_code, reply.response_to, reply.body) == (wire.OP_REPLY, first, body)
    back = _sim_parse(wire.encode_reply(body, second, first))
    assert (back.op_code, back.response_to, back.body) == (framing.OP_REPLY, first, body)


def _msg(payload: bytes, length: int | None = None) -> bytes:
    size = 16 + len(payload) if length is None else length
    return struct.pack("<iiii", size, 1, 0, framing.OP_MSG) + payload


_DOC = bson.encode({"ping": 1})


@pytest.mark.parametrize(
    ("data", "says"),
    [
        (_msg(b"\x00\x00"), "without flags"),
        (_msg(struct.pack("<I", 1 << 4) + b"\x00" + _DOC), "required bits"),
        (_msg(struct.pack("<I", 0)), "without flags or sections"),
        (_msg(struct.pack("<I", 0) + b"\x01" + struct.pack("<i", 6) + b"d\x00"), "without its"),
        (_msg(struct.pack("<I", 0) + b"\x00" + _DOC + b"\x00" + _DOC), "two body sections"),
        (_msg(struct.pack("<I", 0) + b"\x07" + _DOC), "kind 7"),
        (_msg(struct.pack("<I", 0) + b"\x00" + _DOC[:-3]), "cut short|where"),
        (_msg(struct.pack("<I", 0) + b"\x00" + _DOC + b"\x01" + struct.pack("<i", 90)), "where"),
        (_msg(struct.pack("<I", 0) + b"\x00" + _DOC + b"\x01" + struct.pack("<i", 6) + b"ab"),
         "terminating zero"),
        (_msg(struct.pack("<I", 0) + b"\x00" + b"\x05\x00\x00\x00\x07"), "not a BSON"),
    ],
)  # fmt: skip
def test_what_is_not_a_message_is_refused(data: bytes, says: str) -> None:
    with pytest.raises(framing.FrameError, match=says):
        _sim_parse(data)


@pytest.mark.parametrize("length", [15, 0, -1, 1025])
def test_a_length_out_of_bounds_is_refused_before_reading_it(length: int) -> None:
    async def main() -> None:
        reader = asyncio.StreamReader()
        reader.feed_data(_msg(b"", length))
        with pytest.raises(framing.FrameError, match="at most 1024"):
            await framing.read_frame(reader, 1024)

    asyncio.run(main())


def test_frames_are_read_whole_across_reads_and_back_to_back() -> None:
    """A stream cut anywhere gives the same messages; its end mid-message is an EOF."""
    first = framing.command_frame({"ping": 1}, 1)
    second = framing.command_frame({"hello": 1}, 2, sequences={"documents": [{"a": 1}]})

    async def main() -> None:
        reader = asyncio.StreamReader()
        data = first + second + first[:10]
        for i in range(0, len(data), 7):
            reader.feed_data(data[i : i + 7])
        reader.feed_eof()
        one = await framing.read_frame(reader, 1 << 20)
        two = await framing.read_frame(reader, 1 << 20)
        assert (one.body, two.body, two.sequences) == (
            {"ping": 1},
            {"hello": 1},
            {"documents": [{"a": 1}]},
        )
        with pytest.raises(asyncio.IncompleteReadError):
            await framing.read_frame(reader, 1 << 20)

    asyncio.run(main())
    left, right = socket.socketpair()
    with left, right:
        right.sendall(second)
        assert framing.recv_frame(left).request_id == 2
        right.close()
        with pytest.raises(ConnectionError, match="closed"):
            framing.recv_frame(left)
