"""The asyncio client of the simulated server: :class:`SimConnection` (multiplexed), the connect
function :func:`sim_async_connect` for :class:`poolkit.AsyncPool`, the clients' errors and the
``is_broken`` hook :func:`sim_is_broken` (the blocking client is in :mod:`.blocking`).

The connect functions tell the pool what the server says: ``GOAWAY`` becomes
``pool.connection_will_close(id)`` and ``SETTINGS`` becomes ``pool.set_max_streams(id, n)``.

Rules of this module
--------------------
* A connection that saw ``GOAWAY`` sends no new request (:class:`SimGoingAwayError`).
* When the connection breaks, every request waiting on it fails with a ``ConnectionError``.
* :class:`SimConnection` keeps to the stream limit itself: a request over it waits for a slot;
  a request given up on keeps its stream until the server answers it.
* What ``on_goaway`` / ``on_settings`` raise goes to the loop's exception handler.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
from collections.abc import Awaitable, Callable
from typing import Any

from ... import ConnectContext, Established
from .protocol import HEADER, FrameType, ProtocolError, encode, parse_header, parse_u32

__all__ = [
    "SimConnection",
    "SimGoingAwayError",
    "SimRefusedError",
    "SimStreamRefusedError",
    "sim_async_connect",
    "sim_is_broken",
]


class SimRefusedError(ConnectionRefusedError):
    """The server refused the connection (``REFUSED``); the message says why."""


class SimStreamRefusedError(ConnectionError):
    """The server did not serve one request (``STREAM_REFUSED``); the connection lives on."""


class SimGoingAwayError(ConnectionError):
    """The connection announced ``GOAWAY``: it takes no new request."""


OnGoaway = Callable[[Any, str], object]
OnSettings = Callable[[Any, int], object]


def greeting_limit(kind: FrameType, payload: bytes) -> int:
    if kind is FrameType.REFUSED:
        raise SimRefusedError(f"the server refused the connection: {payload.decode()}")
    if kind is not FrameType.HELLO:
        raise ProtocolError(f"expected HELLO, got {kind.name}")
    return parse_u32(payload)


class SimConnection:
    """An asyncio connection to a :class:`~.server.SimServer`; make one with :meth:`connect`.

    ``max_streams``: requests it may have in flight (the server's latest word). ``going_away``:
    the server sent ``GOAWAY`` (``goaway_reason`` says why). ``on_goaway(conn, reason)`` and
    ``on_settings(conn, max_streams)`` are called when those frames arrive."""

    def __init__(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, max_streams: int
    ) -> None:
        self._reader = reader
        self._writer = writer
        self.max_streams = max_streams
        self.going_away = False
        self.goaway_reason: str | None = None
        self.on_goaway: OnGoaway | None = None
        self.on_settings: OnSettings | None = None
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[bytes]] = {}
        #: requests given up on (timeout, cancel): their streams stay taken until answered
        self._abandoned: set[int] = set()
        self._slots: collections.deque[asyncio.Future[None]] = collections.deque()
        self._error: BaseException | None = None
        self._task = asyncio.get_running_loop().create_task(self._read_loop())

    @classmethod
    async def connect(cls, host: str, port: int, timeout: float | None = None) -> SimConnection:
        """Connect and read the server's greeting; :class:`SimRefusedError` if refused,
        ``TimeoutError`` after ``timeout`` seconds."""
        async with asyncio.timeout(timeout):
            reader, writer = await asyncio.open_connection(host, port)
            try:
                kind, _, length = parse_header(await reader.readexactly(HEADER.size))
                max_streams = greeting_limit(kind, await reader.readexactly(length))
            except BaseException:
                writer.close()
                raise
        return cls(reader, writer, max_streams)

    @property
    def in_flight(self) -> int:
        """Streams taken: requests waiting for an answer, also those given up on."""
        return len(self._pending) + len(self._abandoned)

    @property
    def closed(self) -> bool:
        return self._error is not None

    async def request(self, payload: bytes, timeout: float | None = None) -> bytes:
        """Send ``payload``, return the response (the server echoes it)."""
        async with asyncio.timeout(timeout):
            while self.in_flight >= self.max_streams and self._error is None:
                self._check_open()
                slot = asyncio.get_running_loop().create_future()
                self._slots.append(slot)
                try:
                    await slot
                finally:
                    if slot in self._slots:
                        self._slots.remove(slot)
            self._check_open()
            stream_id = next(self._ids)
            future: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
            self._pending[stream_id] = future
            try:
                self._writer.write(encode(FrameType.REQUEST, stream_id, payload))
                return await future
            finally:
                del self._pending[stream_id]
                if (future.cancelled() or not future.done()) and self._error is None:
                    self._abandoned.add(stream_id)
                self._wake()

    def _check_open(self) -> None:
        if self.going_away:
            raise SimGoingAwayError(f"the server sent GOAWAY: {self.goaway_reason}")
        if self._error is not None:
            raise ConnectionError(f"the connection is closed: {self._error}")

    def _wake(self) -> None:
        free = self.max_streams - self.in_flight
        for slot in list(self._slots):
            if free <= 0 and self._error is None:
                return
            if not slot.done():
                slot.set_result(None)
                free -= 1

    async def _read_loop(self) -> None:
        try:
            while True:
                kind, stream_id, length = parse_header(await self._reader.readexactly(HEADER.size))
                payload = await self._reader.readexactly(length)
                self._frame(kind, stream_id, payload)
        except asyncio.IncompleteReadError:
            self._fail(ConnectionError("the server closed the connection"))
        except (OSError, ProtocolError) as exc:
            self._fail(exc)

    def _frame(self, kind: FrameType, stream_id: int, payload: bytes) -> None:
        if kind is FrameType.RESPONSE or kind is FrameType.STREAM_REFUSED:
            future = self._pending.get(stream_id)
            if future is None or future.done():
                self._abandoned.discard(stream_id)  # (a request given up on)
                self._wake()
                return
            if kind is FrameType.RESPONSE:
                future.set_result(payload)
            else:
                future.set_exception(SimStreamRefusedError(payload.decode()))
        elif kind is FrameType.SETTINGS:
            self.max_streams = parse_u32(payload)
            self._wake()
            self._notify(self.on_settings, self.max_streams)
        elif kind is FrameType.GOAWAY:
            self.going_away = True
            self.goaway_reason = payload.decode()
            self._wake()
            self._notify(self.on_goaway, self.goaway_reason)
        else:
            raise ProtocolError(f"unexpected {kind.name} frame")

    def _notify(self, callback: Callable[[Any, Any], object] | None, value: object) -> None:
        """Call ``callback(self, value)``; what it raises goes to the loop's exception handler
        (it is not the connection's error)."""
        if callback is None:
            return
        try:
            callback(self, value)
        except Exception as exc:
            asyncio.get_running_loop().call_exception_handler(
                {"message": f"{callback!r} of {self!r} raised", "exception": exc}
            )

    def _fail(self, error: BaseException) -> None:
        self._error = error
        for future in self._pending.values():
            if not future.done():
                future.set_exception(
                    error if isinstance(error, ConnectionError) else ConnectionError(str(error))
                )
        self._wake()
        self._writer.close()

    async def aclose(self) -> None:
        """Close the connection (requests in flight fail)."""
        self._task.cancel()
        if self._error is None:
            self._fail(ConnectionError("the connection was closed"))
        try:
            await self._task
        except asyncio.CancelledError:
            pass
        try:
            await self._writer.wait_closed()
        except OSError:
            pass


def _wire(conn: SimConnection, ctx: ConnectContext) -> None:
    pool, cid = ctx.pool, ctx.connection_id
    conn.on_goaway = lambda _conn, _reason: pool.connection_will_close(cid)
    conn.on_settings = lambda _conn, n: pool.set_max_streams(cid, n)


def sim_async_connect(
    host: str, port: int, *, timeout: float | None = 5.0
) -> Callable[[ConnectContext], Awaitable[Established[SimConnection]]]:
    """A connect function for :class:`poolkit.AsyncPool`: a :class:`SimConnection` with the
    server's stream limit, and ``GOAWAY``/``SETTINGS`` passed on to the pool."""

    async def connect_sim(ctx: ConnectContext) -> Established[SimConnection]:
        conn = await SimConnection.connect(host, port, timeout)
        _wire(conn, ctx)
        return Established(conn, max_streams=conn.max_streams)

    return connect_sim


def sim_is_broken(conn: object, error: BaseException) -> bool:
    """The pools' ``Hooks(is_broken=...)`` for sim connections: an error of the connection
    (reset, closed, timeout mid-request) breaks it; a refused stream does not, nor a request not
    sent after ``GOAWAY`` (the connection drains: the pool, told by the connect function, closes
    it at its last check-in, while the other leases' requests finish)."""
    if isinstance(error, SimStreamRefusedError | SimGoingAwayError):
        return False
    return isinstance(error, OSError | EOFError | ProtocolError)
