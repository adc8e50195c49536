"""The HTTP/2 backend's errors: a request's failure says whether the server may have processed
it (:class:`ConnectionLostError`: unknown) or not (:class:`StreamRefusedError` and its kinds: it
may be sent again on another connection), or that it was never fit to send
(:class:`InvalidRequestError`)."""

from __future__ import annotations


class HTTP2Error(Exception):
    """An HTTP/2 request failed; ``stream_id`` is its stream (0: the connection's error)."""

    def __init__(self, message: str, *, stream_id: int = 0) -> None:
        super().__init__(message)
        self.stream_id = stream_id


class StreamResetError(HTTP2Error):
    """The server reset the request's stream (``RST_STREAM``, ``error_code``): that request
    only failed, the connection serves on."""

    def __init__(self, message: str, *, stream_id: int, error_code: int) -> None:
        super().__init__(message, stream_id=stream_id)
        self.error_code = error_code


class StreamRefusedError(HTTP2Error):
    """The server did not process the request (a GOAWAY below its stream id, or
    ``REFUSED_STREAM``): it may be sent again, on another connection."""


class ConnectionLostError(HTTP2Error, ConnectionError):
    """The connection failed (the socket, a protocol error, the server gone, or silence: nothing
    heard for a whole timeout, a PING unanswered) with the request in flight. Whether the server
    processed it is unknown."""


class RequestNotSentError(StreamRefusedError, ConnectionLostError):
    """The connection was closed (the server gone, its end of the stream read) before any byte of
    the request was written: the server cannot have processed it, and it may be sent again on
    another connection (the transport does)."""


class InvalidRequestError(HTTP2Error, ValueError):
    """HTTP/2 forbids the request as given (``te`` other than ``trailers``, a pseudo-header of its
    own, a ``host`` that is not the authority, an empty header name...), found before anything of
    it was sent: the request fails alone and the connection serves on."""
