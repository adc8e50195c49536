"""The blocking client of the simulated server: :class:`SimSocketConnection` (one request at a
time), the connect function :func:`sim_connect` for :class:`poolkit.Pool` and the ``check``
hook :func:`sim_check`.

Rules of this module
--------------------
* Frames are read into a buffer: control frames (``GOAWAY``, ``SETTINGS``) that arrive while the
  connection is idle are read by the next :meth:`SimSocketConnection.poll` (``request`` and
  :func:`sim_check` poll first), never lost.
* A connection that saw ``GOAWAY`` sends no new request (:class:`~.client.SimGoingAwayError`).
"""

from __future__ import annotations

import itertools
import socket
import threading
from collections.abc import Callable

from ... import ConnectContext
from .client import OnGoaway, OnSettings, SimGoingAwayError, SimStreamRefusedError, greeting_limit
from .protocol import HEADER, FrameType, encode, parse_header, parse_u32

__all__ = ["SimSocketConnection", "sim_check", "sim_connect"]


class SimSocketConnection:
    """A blocking connection to a :class:`~.server.SimServer`, one request at a time (a lock
    keeps threads in turn); make one with :meth:`connect`. ``on_goaway(conn, reason)`` and
    ``on_settings(conn, max_streams)`` are called when those frames are read."""

    def __init__(self, sock: socket.socket, max_streams: int, buffer: bytes = b"") -> None:
        self.sock = sock
        self.max_streams = max_streams
        self.going_away = False
        self.goaway_reason: str | None = None
        self.closed = False
        self.on_goaway: OnGoaway | None = None
        self.on_settings: OnSettings | None = None
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._buffer = bytearray(buffer)
        self._error: OSError | None = None

    @classmethod
    def connect(cls, host: str, port: int, timeout: float | None = None) -> SimSocketConnection:
        """Connect and read the greeting; ``SimRefusedError`` if refused."""
        sock = socket.create_connection((host, port), timeout=timeout)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn = cls(sock, 1)
            kind, _, payload = conn._read_frame()
            conn.max_streams = greeting_limit(kind, payload)
            sock.settimeout(None)
        except BaseException:
            sock.close()
            raise
        return conn

    def _frame_in_buffer(self) -> tuple[FrameType, int, bytes] | None:
        if len(self._buffer) < HEADER.size:
            return None
        kind, stream_id, length = parse_header(bytes(self._buffer[: HEADER.size]))
        end = HEADER.size + length
        if len(self._buffer) < end:
            return None
        payload = bytes(self._buffer[HEADER.size : end])
        del self._buffer[:end]
        return kind, stream_id, payload

    def _read_frame(self) -> tuple[FrameType, int, bytes]:
        while (frame := self._frame_in_buffer()) is None:
            chunk = self.sock.recv(65536)
            if not chunk:
                self.closed = True
                raise ConnectionError("the server closed the connection")
            self._buffer += chunk
        return frame

    def poll(self) -> None:
        """Read what has arrived without waiting: control frames take effect, and ``closed``
        turns true if the server closed or reset the connection (the next ``request`` raises
        the error found, e.g. ``ConnectionResetError``). Raises nothing itself."""
        if self.closed:
            return
        timeout = self.sock.gettimeout()
        self.sock.settimeout(0.0)
        try:
            while chunk := self.sock.recv(65536):
                self._buffer += chunk
            self.closed = True  # (the end of the stream)
        except BlockingIOError:
            pass
        except OSError as exc:
            self.closed = True
            self._error = exc
        finally:
            self.sock.settimeout(timeout)
        while (frame := self._frame_in_buffer()) is not None:
            self._control(frame[0], frame[2])

    def _check_open(self) -> None:
        if self.going_away:
            raise SimGoingAwayError(f"the server sent GOAWAY: {self.goaway_reason}")
        if self._error is not None:
            raise self._error  # (e.g. the ConnectionResetError a poll found)
        if self.closed:
            raise ConnectionError("the connection is closed")

    def request(self, payload: bytes, timeout: float | None = None) -> bytes:
        """Send ``payload``, return the response; ``TimeoutError`` after ``timeout`` seconds."""
        with self._lock:
            self.poll()
            self._check_open()
            stream_id = next(self._ids)
            self.sock.settimeout(timeout)
            self.sock.sendall(encode(FrameType.REQUEST, stream_id, payload))
            while True:
                kind, got, body = self._read_frame()
                if kind is FrameType.RESPONSE and got == stream_id:
                    return body
                if kind is FrameType.STREAM_REFUSED and got == stream_id:
                    raise SimStreamRefusedError(body.decode())
                self._control(kind, body)

    def _control(self, kind: FrameType, body: bytes) -> None:
        if kind is FrameType.SETTINGS:
            self.max_streams = parse_u32(body)
            if self.on_settings is not None:
                self.on_settings(self, self.max_streams)
        elif kind is FrameType.GOAWAY:
            self.going_away = True
            self.goaway_reason = body.decode()
            if self.on_goaway is not None:
                self.on_goaway(self, self.goaway_reason)

    def close(self) -> None:
        self.closed = True
        self.sock.close()


def sim_check(conn: SimSocketConnection) -> None:
    """The ``check`` hook for :class:`poolkit.Pool`: polls, and raises ``ConnectionError`` if
    the connection is closed or going away (so the pool closes it instead of handing it out)."""
    with conn._lock:
        conn.poll()
        conn._check_open()


def sim_connect(
    host: str, port: int, *, timeout: float | None = 5.0
) -> Callable[[ConnectContext], SimSocketConnection]:
    """A connect function for :class:`poolkit.Pool`: a :class:`SimSocketConnection` (one lease
    at a time), ``GOAWAY`` passed on to the pool (``connection_will_close``) when it is read."""

    def connect_sim(ctx: ConnectContext) -> SimSocketConnection:
        conn = SimSocketConnection.connect(host, port, timeout)
        conn.on_goaway = lambda _conn, _reason: ctx.pool.connection_will_close(ctx.connection_id)
        return conn

    return connect_sim
