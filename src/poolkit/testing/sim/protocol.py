"""The simulated server's wire protocol: length-prefixed binary frames.

Every frame is a 9-byte header followed by ``length`` bytes of payload::

    +----------------+--------+--------------------+-----------------+
    | length: u32 BE | type:u8| stream id: u32 BE  | payload (length)|
    +----------------+--------+--------------------+-----------------+

Frame types (stream id 0 for the connection-level ones):

* ``HELLO`` (server -> client, first frame): payload ``u32 max_streams``, how many requests the
  client may have in flight on this connection. It is sent after the handshake latency.
* ``REFUSED`` (server -> client, instead of ``HELLO``): payload a UTF-8 reason; the server then
  closes (``max_connections`` reached, or a refuse window: as a database's "too many clients").
* ``REQUEST`` (client -> server): stream id chosen by the client (unique among its requests in
  flight), payload any bytes.
* ``RESPONSE`` (server -> client): the request's stream id; payload the request's payload (echo).
* ``STREAM_REFUSED`` (server -> client): the request's stream id, a UTF-8 reason; the request was
  not served (more in flight than the stream limit, or the connection is going away).
* ``GOAWAY`` (server -> client): a UTF-8 reason; the server takes no new request on this
  connection, answers those in flight, then closes it.
* ``SETTINGS`` (server -> client, at any time): payload ``u32 max_streams``, the new stream limit.

Rules of this module
--------------------
* Only bytes and ints here: no I/O, no clock. Both the server and the clients build and parse
  frames with these functions.
"""

from __future__ import annotations

import enum
import struct

__all__ = [
    "HEADER",
    "MAX_PAYLOAD",
    "FrameType",
    "ProtocolError",
    "encode",
    "parse_header",
    "u32",
    "parse_u32",
]

HEADER = struct.Struct("!IBI")
_U32 = struct.Struct("!I")
#: the largest payload either side accepts
MAX_PAYLOAD = 16 * 1024 * 1024


class FrameType(enum.IntEnum):
    HELLO = 1
    REFUSED = 2
    REQUEST = 3
    RESPONSE = 4
    STREAM_REFUSED = 5
    GOAWAY = 6
    SETTINGS = 7


class ProtocolError(ConnectionError):
    """The peer sent something the protocol does not allow."""


def encode(kind: FrameType, stream_id: int, payload: bytes = b"") -> bytes:
    """One frame as bytes."""
    if len(payload) > MAX_PAYLOAD:
        raise ValueError(f"payload of {len(payload)} bytes is over {MAX_PAYLOAD}")
    return HEADER.pack(len(payload), kind, stream_id) + payload


def parse_header(header: bytes) -> tuple[FrameType, int, int]:
    """(type, stream id, payload length) of a 9-byte header; ProtocolError if it is bad."""
    length, kind, stream_id = HEADER.unpack(header)
    if length > MAX_PAYLOAD:
        raise ProtocolError(f"frame of {length} bytes is over {MAX_PAYLOAD}")
    try:
        return FrameType(kind), stream_id, length
    except ValueError:
        raise ProtocolError(f"unknown frame type {kind}") from None


def u32(n: int) -> bytes:
    return _U32.pack(n)


def parse_u32(payload: bytes) -> int:
    if len(payload) != 4:
        raise ProtocolError(f"expected a 4-byte integer, got {len(payload)} bytes")
    return int(_U32.unpack(payload)[0])
