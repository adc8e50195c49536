"""The MongoDB wire protocol, sans I/O: OP_MSG (and, for a server answering an old client's
first ``hello``, OP_QUERY and OP_REPLY), framed and parsed from bytes.

BSON is pymongo's ``bson`` package (the ``poolkit[mongodb]`` extra).

Rules of this module
--------------------
* No sockets, no event loop: bytes in, :class:`Message` out (:class:`MessageReader`), and
  documents in, bytes out (:func:`encode_msg`, :func:`encode_reply`). The connection (driver
  side) and the simulated load balancer (server side) both frame through here.
* A malformed or oversized message raises :class:`ProtocolError`; the reader is then unusable
  (the connection must close: there is no resynchronising a byte stream).
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from ._bson import bson

__all__ = [
    "MAX_MESSAGE_SIZE",
    "OP_MSG",
    "OP_QUERY",
    "OP_REPLY",
    "Message",
    "MessageReader",
    "ProtocolError",
    "encode_msg",
    "encode_query",
    "encode_reply",
]

OP_REPLY = 1
OP_QUERY = 2004
OP_MSG = 2013

HEADER = struct.Struct("<iiii")  # messageLength, requestID, responseTo, opCode
MAX_MESSAGE_SIZE = 48_000_000  # the server's default maxMessageSizeBytes

CHECKSUM_PRESENT = 1 << 0
MORE_TO_COME = 1 << 1
EXHAUST_ALLOWED = 1 << 16
_KNOWN_FLAGS = CHECKSUM_PRESENT | MORE_TO_COME | EXHAUST_ALLOWED


class ProtocolError(ConnectionError):
    """The peer sent bytes that are not a MongoDB message (or one too large)."""


@dataclasses.dataclass(frozen=True, slots=True)
class Message:
    """One message. ``body``: the command or reply document (OP_MSG section 0, OP_QUERY's
    query, OP_REPLY's first document); ``sequences``: OP_MSG's document sequences (section 1)
    by identifier; ``collection``: OP_QUERY's full collection name."""

    request_id: int
    response_to: int
    op_code: int
    body: dict[str, Any]
    flags: int = 0
    sequences: Mapping[str, list[dict[str, Any]]] = dataclasses.field(default_factory=dict)
    collection: str = ""

    @property
    def more_to_come(self) -> bool:
        return bool(self.flags & MORE_TO_COME)

    @property
    def command_name(self) -> str:
        return next(iter(self.body), "")


def encode_msg(
    document: Mapping[str, Any],
    request_id: int,
    response_to: int = 0,
    *,
    sequences: Mapping[str, Sequence[Mapping[str, Any]]] | None = None,
    more_to_come: bool = False,
) -> bytes:
    """An OP_MSG: ``document`` as section 0, each of ``sequences`` as a section 1."""
    parts: list[bytes] = [b"\x00", bson.encode(document)]
    for identifier, documents in (sequences or {}).items():
        payload = identifier.encode() + b"\x00" + b"".join(bson.encode(d) for d in documents)
        parts += [b"\x01", struct.pack("<i", len(payload) + 4), payload]
    flags = struct.pack("<I", MORE_TO_COME if more_to_come else 0)
    body = flags + b"".join(parts)
    return HEADER.pack(HEADER.size + len(body), request_id, response_to, OP_MSG) + body


def encode_reply(document: Mapping[str, Any], request_id: int, response_to: int) -> bytes:
    """An OP_REPLY with one document (a server's answer to an OP_QUERY ``hello``)."""
    doc: bytes = bson.encode(document)
    body = struct.pack("<iqii", 0, 0, 0, 1) + doc  # flags, cursorID, startingFrom, numberReturned
    return HEADER.pack(HEADER.size + len(body), request_id, response_to, OP_REPLY) + body


def encode_query(
    collection: str, document: Mapping[str, Any], request_id: int, number_to_return: int = -1
) -> bytes:
    """An OP_QUERY (what old clients send as their first ``hello``/``isMaster``)."""
    doc: bytes = bson.encode(document)
    body = (
        struct.pack("<i", 0)
        + collection.encode()
        + b"\x00"
        + struct.pack("<ii", 0, number_to_return)
        + doc
    )
    return HEADER.pack(HEADER.size + len(body), request_id, 0, OP_QUERY) + body


def _decode_doc(data: bytes | memoryview, at: int, end: int) -> tuple[dict[str, Any], int]:
    """The BSON document at ``at``, which must end by ``end``; and where it ends."""
    if at + 4 > end:
        raise ProtocolError("truncated BSON document")
    (size,) = struct.unpack_from("<i", data, at)
    if size < 5 or at + size > end:
        raise ProtocolError(f"BSON document of {size} bytes overruns its section")
    try:
        doc: dict[str, Any] = bson.decode(bytes(data[at : at + size]))
    except Exception as exc:  # bson.errors.InvalidBSON and friends
        raise ProtocolError(f"invalid BSON: {exc}") from None
    return doc, at + size


def _cstring(data: bytes | memoryview, at: int, end: int) -> tuple[str, int]:
    stop = bytes(data[at:end]).find(b"\x00")
    if stop < 0:
        raise ProtocolError("unterminated string")
    try:
        return bytes(data[at : at + stop]).decode(), at + stop + 1
    except UnicodeDecodeError:
        raise ProtocolError("a string that is not UTF-8") from None


def _decode_msg(request_id: int, response_to: int, data: memoryview) -> Message:
    if len(data) < 5:
        raise ProtocolError("OP_MSG too short")
    (flags,) = struct.unpack_from("<I", data, 0)
    if flags & ~_KNOWN_FLAGS & 0xFFFF:
        raise ProtocolError(f"OP_MSG with unknown required flag bits {flags:#x}")
    end = len(data) - (4 if flags & CHECKSUM_PRESENT else 0)
    at = 4
    body: dict[str, Any] | None = None
    sequences: dict[str, list[dict[str, Any]]] = {}
    if end < 4:
        raise ProtocolError("OP_MSG too short for its checksum")
    while at < end:
        kind = data[at]
        at += 1
        if kind == 0:
            if body is not None:
                raise ProtocolError("OP_MSG with two body sections")
            body, at = _decode_doc(data, at, end)
        elif kind == 1:
            if at + 4 > end:
                raise ProtocolError("truncated OP_MSG document sequence")
            (size,) = struct.unpack_from("<i", data, at)
            stop = at + size
            if size < 5 or stop > end:
                raise ProtocolError("OP_MSG document sequence overruns its message")
            identifier, at = _cstring(data, at + 4, stop)
            docs = sequences.setdefault(identifier, [])
            while at < stop:
                doc, at = _decode_doc(data, at, stop)
                docs.append(doc)
        else:
            raise ProtocolError(f"OP_MSG section of unknown kind {kind}")
    if body is None:
        raise ProtocolError("OP_MSG without a body section")
    return Message(request_id, response_to, OP_MSG, body, flags, sequences)


def _decode_query(request_id: int, response_to: int, data: memoryview) -> Message:
    if len(data) < 4:
        raise ProtocolError("OP_QUERY too short")
    collection, at = _cstring(data, 4, len(data))
    doc, _ = _decode_doc(data, at + 8, len(data))
    return Message(request_id, response_to, OP_QUERY, doc, collection=collection)


def _decode_reply(request_id: int, response_to: int, data: memoryview) -> Message:
    if len(data) < 20:
        raise ProtocolError("OP_REPLY too short")
    (returned,) = struct.unpack_from("<i", data, 16)
    doc, _ = _decode_doc(data, 20, len(data)) if returned else ({}, 20)
    return Message(request_id, response_to, OP_REPLY, doc)


_DECODERS = {OP_MSG: _decode_msg, OP_QUERY: _decode_query, OP_REPLY: _decode_reply}


class MessageReader:
    """Frames messages out of a byte stream: ``feed(data)`` returns the messages completed."""

    def __init__(self, max_size: int = MAX_MESSAGE_SIZE) -> None:
        self._buffer = bytearray()
        self._max_size = max_size

    def feed(self, data: bytes) -> list[Message]:
        self._buffer += data
        return list(self._messages())

    def needed(self) -> int:
        """Bytes still missing for the next message (at least its header)."""
        if len(self._buffer) < HEADER.size:
            return HEADER.size - len(self._buffer)
        length: int = struct.unpack_from("<i", self._buffer, 0)[0]
        return max(1, length - len(self._buffer))

    def _messages(self) -> Iterator[Message]:
        buffer = self._buffer
        while len(buffer) >= HEADER.size:
            length, request_id, response_to, op_code = HEADER.unpack_from(buffer, 0)
            if length < HEADER.size or length > self._max_size:
                raise ProtocolError(f"message length {length} out of bounds")
            if len(buffer) < length:
                return
            decoder = _DECODERS.get(op_code)
            if decoder is None:
                raise ProtocolError(f"unsupported opCode {op_code}")
            payload = memoryview(bytes(buffer[HEADER.size : length]))
            del buffer[:length]
            yield decoder(request_id, response_to, payload)
