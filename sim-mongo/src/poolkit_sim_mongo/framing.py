"""The simulator's own framing of MongoDB's wire protocol: OP_MSG, and the legacy OP_QUERY and
OP_REPLY that old drivers' handshakes use.

Rules of this module
--------------------
* Written from the wire protocol's specification ("MongoDB Wire Protocol", the OP_MSG
  specification), sharing no code with ``poolkit.mongodb.wire``, the driver's framing: the
  simulator is the oracle of the driver's tests, so a framing bug in one shows as a failure
  against the other instead of cancelling out. BSON documents go through pymongo's ``bson``.
* A frame is read whole before it is parsed: the 16-byte header, then exactly the length it
  gives (:func:`read_frame` on an asyncio stream, :func:`recv_frame` on a blocking socket).
  Anything that does not parse is a :class:`FrameError` (a ``ConnectionError``: the
  connection is dropped), never a partial message.
"""

from __future__ import annotations

import asyncio
import dataclasses
import socket
import struct
from collections.abc import Mapping, Sequence
from typing import Any

import bson

__all__ = [
    "OP_MSG",
    "OP_QUERY",
    "OP_REPLY",
    "Frame",
    "FrameError",
    "command_frame",
    "parse_frame",
    "query_frame",
    "read_frame",
    "recv_frame",
    "reply_frame",
]

OP_REPLY = 1
OP_QUERY = 2004
OP_MSG = 2013

#: messageLength, requestID, responseTo, opCode (little-endian int32 each)
_HEADER = struct.Struct("<iiii")
_INT32 = struct.Struct("<i")
_UINT32 = struct.Struct("<I")
#: OP_MSG flag bits: a CRC-32C checksum ends the message; the sender expects no reply
_CHECKSUM_PRESENT = 1 << 0
_MORE_TO_COME = 1 << 1
#: the flag bits a receiver must understand (the low 16); the others it may ignore
_REQUIRED_BITS = 0xFFFF
_KNOWN_BITS = _CHECKSUM_PRESENT | _MORE_TO_COME
#: OP_MSG section kinds
_BODY = 0
_DOCUMENT_SEQUENCE = 1


class FrameError(ConnectionError):
    """Bytes that are not a MongoDB message this simulator takes (or one too large)."""


@dataclasses.dataclass(frozen=True, slots=True)
class Frame:
    """One message: its header's ids and op code, its command document (``body``: OP_MSG's
    body section, OP_QUERY's query, OP_REPLY's first document), OP_MSG's document sequences by
    identifier, and whether the sender expects no reply (``moreToCome``)."""

    op_code: int
    request_id: int
    response_to: int
    body: dict[str, Any]
    sequences: dict[str, list[dict[str, Any]]] = dataclasses.field(default_factory=dict)
    more_to_come: bool = False


# ---------------------------------------------------------------------- writing


def _framed(op_code: int, request_id: int, response_to: int, payload: bytes) -> bytes:
    return _HEADER.pack(_HEADER.size + len(payload), request_id, response_to, op_code) + payload


def command_frame(
    body: Mapping[str, Any],
    request_id: int,
    response_to: int = 0,
    *,
    sequences: Mapping[str, Sequence[Mapping[str, Any]]] | None = None,
    more_to_come: bool = False,
) -> bytes:
    """An OP_MSG: its flags, its body section, then one kind-1 section per sequence."""
    flags = _MORE_TO_COME if more_to_come else 0
    payload = bytearray(_UINT32.pack(flags))
    payload += bytes([_BODY]) + bson.encode(body)
    for identifier, documents in (sequences or {}).items():
        section = identifier.encode("utf-8") + b"\x00"
        section += b"".join(bson.encode(document) for document in documents)
        payload += bytes([_DOCUMENT_SEQUENCE]) + _INT32.pack(_INT32.size + len(section)) + section
    return _framed(OP_MSG, request_id, response_to, bytes(payload))


def query_frame(collection: str, query: Mapping[str, Any], request_id: int) -> bytes:
    """A legacy OP_QUERY of one document on ``collection`` (``admin.$cmd`` for a command)."""
    payload = _INT32.pack(0) + collection.encode("utf-8") + b"\x00"
    payload += _INT32.pack(0) + _INT32.pack(-1) + bson.encode(query)  # skip 0, return 1
    return _framed(OP_QUERY, request_id, 0, payload)


def reply_frame(document: Mapping[str, Any], request_id: int, response_to: int) -> bytes:
    """A legacy OP_REPLY of one document (the answer to an OP_QUERY)."""
    payload = _INT32.pack(0) + struct.pack("<q", 0) + _INT32.pack(0) + _INT32.pack(1)
    return _framed(OP_REPLY, request_id, response_to, payload + bson.encode(document))


# ---------------------------------------------------------------------- reading


def _document(data: bytes, at: int, end: int) -> tuple[dict[str, Any], int]:
    """The BSON document at ``data[at:]`` (within ``end``) and where the next thing starts."""
    if end - at < 5:
        raise FrameError("a BSON document cut short")
    (size,) = _INT32.unpack_from(data, at)
    if size < 5 or at + size > end:
        raise FrameError(f"a BSON document of {size} bytes where {end - at} remain")
    try:
        document: dict[str, Any] = bson.decode(data[at : at + size])
    except Exception as exc:  # (bson's InvalidBSON and the like)
        raise FrameError(f"not a BSON document: {exc}") from None
    return document, at + size


def _cstring(data: bytes, at: int, end: int) -> tuple[str, int]:
    stop = data.find(b"\x00", at, end)
    if stop < 0:
        raise FrameError("a string without its terminating zero")
    return data[at:stop].decode("utf-8", "replace"), stop + 1


def _op_msg(request_id: int, response_to: int, data: bytes) -> Frame:
    if len(data) < 5:
        raise FrameError("an OP_MSG without flags or sections")
    (flags,) = _UINT32.unpack_from(data, 0)
    unknown = flags & _REQUIRED_BITS & ~_KNOWN_BITS
    if unknown:
        raise FrameError(f"OP_MSG flags {flags:#x}: required bits not understood")
    end = len(data) - (4 if flags & _CHECKSUM_PRESENT else 0)
    body: dict[str, Any] | None = None
    sequences: dict[str, list[dict[str, Any]]] = {}
    at = 4
    while at < end:
        kind = data[at]
        at += 1
        if kind == _BODY:
            if body is not None:
                raise FrameError("an OP_MSG with two body sections")
            body, at = _document(data, at, end)
        elif kind == _DOCUMENT_SEQUENCE:
            if end - at < 4:
                raise FrameError("a document sequence cut short")
            (size,) = _INT32.unpack_from(data, at)
            stop = at + size
            if size < 5 or stop > end:
                raise FrameError(f"a document sequence of {size} bytes where {end - at} remain")
            identifier, at = _cstring(data, at + 4, stop)
            documents = sequences.setdefault(identifier, [])
            while at < stop:
                document, at = _document(data, at, stop)
                documents.append(document)
        else:
            raise FrameError(f"an OP_MSG section of kind {kind}")
    if body is None:
        raise FrameError("an OP_MSG without its body section")
    return Frame(OP_MSG, request_id, response_to, body, sequences, bool(flags & _MORE_TO_COME))


def _op_query(request_id: int, response_to: int, data: bytes) -> Frame:
    _, at = _cstring(data, 4, len(data))  # (after the flags: the collection's full name)
    query, _ = _document(data, at + 8, len(data))  # (after numberToSkip, numberToReturn)
    return Frame(OP_QUERY, request_id, response_to, query)


def _op_reply(request_id: int, response_to: int, data: bytes) -> Frame:
    # responseFlags (4), cursorID (8), startingFrom (4), numberReturned (4), then the documents
    (returned,) = _INT32.unpack_from(data, 16) if len(data) >= 20 else (0,)
    first: dict[str, Any] = {}
    if returned > 0:
        first, _ = _document(data, 20, len(data))
    return Frame(OP_REPLY, request_id, response_to, first)


def parse_frame(header: bytes, payload: bytes) -> Frame:
    """The message of ``header`` (16 bytes) and ``payload`` (the rest of its length)."""
    _, request_id, response_to, op_code = _HEADER.unpack(header)
    if op_code == OP_MSG:
        return _op_msg(request_id, response_to, payload)
    if op_code == OP_QUERY:
        return _op_query(request_id, response_to, payload)
    if op_code == OP_REPLY:
        return _op_reply(request_id, response_to, payload)
    return Frame(op_code, request_id, response_to, {})  # (the caller refuses it by op code)


def _length(header: bytes, max_size: int) -> int:
    length: int = _INT32.unpack_from(header, 0)[0]
    if length < _HEADER.size or length > max_size:
        raise FrameError(f"a message of {length} bytes (at most {max_size} taken)")
    return length - _HEADER.size


async def read_frame(reader: asyncio.StreamReader, max_size: int, header: bytes = b"") -> Frame:
    """The next message on ``reader`` (``header``: its first bytes, already read). Raises
    ``asyncio.IncompleteReadError`` (an ``EOFError``) when the stream ends, mid-message or
    not."""
    header += await reader.readexactly(_HEADER.size - len(header))
    payload = await reader.readexactly(_length(header, max_size))
    return parse_frame(header, payload)


def _recv_exactly(sock: socket.socket, count: int) -> bytes:
    chunks = bytearray()
    while len(chunks) < count:
        data = sock.recv(count - len(chunks))
        if not data:
            raise ConnectionError("the server closed the connection")
        chunks += data
    return bytes(chunks)


def recv_frame(sock: socket.socket, max_size: int = 48_000_000) -> Frame:
    """The next message on the blocking ``sock``."""
    header = _recv_exactly(sock, _HEADER.size)
    return parse_frame(header, _recv_exactly(sock, _length(header, max_size)))
