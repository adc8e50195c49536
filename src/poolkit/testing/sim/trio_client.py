"""The trio client of the simulated server (``poolkit[trio]``): :class:`TrioSimConnection`, one
request at a time as the blocking client (:mod:`.blocking`), and the connect function
:func:`sim_trio_connect` for :class:`poolkit.AsyncPool` under trio, with its ``check`` hook
:func:`sim_trio_check` (``is_broken`` is :func:`.client.sim_is_broken`). Not imported by
``poolkit.testing.sim``: trio is imported only by whoever imports this module.

Rules of this module
--------------------
* One request at a time (a ``trio.Lock``): the connection reads its frames only inside a request
  (no task of its own: nothing runs outside a nursery), so it tells the pool a stream limit of 1.
* ``GOAWAY`` read becomes ``pool.connection_will_close(id)`` and :class:`SimGoingAwayError` for
  the next request; a request cut (timeout, cancellation) after it was sent leaves the
  connection out of step: it is closed, and the error says so.
* trio's stream errors become ``ConnectionError`` (the ``is_broken`` hook judges by those).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Awaitable, Callable
from typing import Any

import trio

from ... import ConnectContext
from .client import SimGoingAwayError, SimStreamRefusedError, greeting_limit
from .protocol import HEADER, FrameType, encode, parse_header, parse_u32

__all__ = ["TrioSimConnection", "sim_trio_check", "sim_trio_connect"]

_STREAM_ERRORS = (trio.BrokenResourceError, trio.ClosedResourceError)


class TrioSimConnection:
    """A trio connection to a :class:`~.server.SimServer`; make one with :meth:`connect`."""

    def __init__(self, stream: trio.SocketStream, max_streams: int) -> None:
        self.stream = stream
        self.max_streams = max_streams
        self.going_away = False
        self.goaway_reason: str | None = None
        self.closed = False
        self.on_goaway: Callable[[TrioSimConnection, str], object] | None = None
        self._ids = itertools.count(1)
        self._lock = trio.Lock()
        self._buffer = bytearray()

    @classmethod
    async def connect(
        cls, host: str, port: int, timeout: float | None = None
    ) -> TrioSimConnection:
        """Connect and read the greeting; ``SimRefusedError`` if refused, ``TimeoutError``
        after ``timeout`` seconds."""
        with trio.move_on_after(math.inf if timeout is None else timeout) as scope:
            stream = await trio.open_tcp_stream(host, port)
            try:
                stream.setsockopt(trio.socket.IPPROTO_TCP, trio.socket.TCP_NODELAY, 1)
                conn = cls(stream, 1)
                kind, _, payload = await conn._read_frame()
                conn.max_streams = greeting_limit(kind, payload)
            except BaseException:
                with trio.CancelScope(shield=True):
                    await stream.aclose()
                raise
            return conn
        assert scope.cancelled_caught
        raise TimeoutError(f"sim {host}:{port}: not connected in {timeout} s")

    async def _read_frame(self) -> tuple[FrameType, int, bytes]:
        buffer = self._buffer
        while True:
            if len(buffer) >= HEADER.size:
                kind, stream_id, length = parse_header(bytes(buffer[: HEADER.size]))
                end = HEADER.size + length
                if len(buffer) >= end:
                    payload = bytes(buffer[HEADER.size : end])
                    del buffer[:end]
                    return kind, stream_id, payload
            try:
                chunk = await self.stream.receive_some(65536)
            except _STREAM_ERRORS as exc:
                self.closed = True
                raise ConnectionError(f"the connection broke: {exc!r}") from exc
            if not chunk:
                self.closed = True
                raise ConnectionError("the server closed the connection")
            buffer += chunk

    def _check_open(self) -> None:
        if self.going_away:
            raise SimGoingAwayError(f"the server sent GOAWAY: {self.goaway_reason}")
        if self.closed:
            raise ConnectionError("the connection is closed")

    async def request(self, payload: bytes, timeout: float | None = None) -> bytes:
        """Send ``payload``, return the response; ``TimeoutError`` after ``timeout`` seconds."""
        async with self._lock:
            self._check_open()
            stream_id = next(self._ids)
            sent = False
            done = False
            try:
                with trio.move_on_after(math.inf if timeout is None else timeout):
                    try:
                        await self.stream.send_all(encode(FrameType.REQUEST, stream_id, payload))
                    except _STREAM_ERRORS as exc:
                        self.closed = True
                        raise ConnectionError(f"the connection broke: {exc!r}") from exc
                    sent = True
                    while True:
                        kind, got, body = await self._read_frame()
                        if kind is FrameType.RESPONSE and got == stream_id:
                            done = True
                            return body
                        if kind is FrameType.STREAM_REFUSED and got == stream_id:
                            done = True
                            raise SimStreamRefusedError(body.decode())
                        self._control(kind, body)
            finally:
                if sent and not done and not self.closed:  # cut mid-request: out of step
                    self.closed = True
                    with trio.CancelScope(shield=True):
                        await self.stream.aclose()
            raise TimeoutError(f"no response within {timeout} s (the connection is closed)")

    def _control(self, kind: FrameType, body: bytes) -> None:
        if kind is FrameType.SETTINGS:
            self.max_streams = parse_u32(body)  # (one request at a time whatever it says)
        elif kind is FrameType.GOAWAY:
            self.going_away = True
            self.goaway_reason = body.decode()
            if self.on_goaway is not None:
                self.on_goaway(self, self.goaway_reason)

    async def aclose(self) -> None:
        self.closed = True
        await self.stream.aclose()


def sim_trio_check(conn: TrioSimConnection) -> None:
    """The ``check`` hook: ``ConnectionError`` if the connection is closed or going away (a plain
    function: the pool runs it at once)."""
    conn._check_open()


def sim_trio_connect(
    host: str, port: int, *, timeout: float | None = 5.0
) -> Callable[[ConnectContext], Awaitable[Any]]:
    """A connect function for :class:`poolkit.AsyncPool` under trio: a
    :class:`TrioSimConnection`, ``GOAWAY`` passed on to the pool when it is read."""

    async def connect_sim(ctx: ConnectContext) -> TrioSimConnection:
        conn = await TrioSimConnection.connect(host, port, timeout)
        pool, cid = ctx.pool, ctx.connection_id
        conn.on_goaway = lambda _conn, _reason: pool.connection_will_close(cid)
        return conn

    return connect_sim
