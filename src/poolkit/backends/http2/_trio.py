"""An HTTP/2 connection's I/O under trio: what ``_connection.H2Connection`` uses of asyncio (its
streams, futures, queues, events, lock, loop clock and timer, ``timeout``, ``shield``), as trio
stand-ins with the same names, chosen once at ``H2Connection.open`` and imported only then; and
``PoolRunner``, the nursery ``AsyncTransport``'s pools run in under trio.

Rules of this module
--------------------
* The connection's tasks (its reader, the writer, its one timer) run in one task, a nursery of
  the connection's own, started with the ``spawn`` it was given (the pool's
  ``ConnectContext.start_soon``: the pool's nursery), never a hidden one. The reader's end (the
  connection closed or lost) ends the writer, once it has sent what was written, and the timer.
* Writes never wait on the socket: ``write`` buffers (as asyncio's transport does) and the
  writer task sends; ``drain`` waits while more than ``HIGH_WATER`` bytes are buffered. So the
  reader's acknowledgements and PINGs, written without awaiting, never block reading, and two
  streams' frames never interleave (each ``write`` is whole frames, in order).
* A socket error is the writer's: it ends it, and ``drain`` raises ``ConnectionResetError`` (an
  ``OSError``, as asyncio's does); the reader sees the stream closed. trio's own errors stay
  here.
* Timeouts raise ``TimeoutError`` (as ``asyncio.timeout``); a cancellation is ``trio.Cancelled``.
  A frame that must go out through a caller's cancellation (a stream's reset) is written in a
  shielded scope bounded by ``GRACE``.
* The transport's pools each run inside their own ``async with pool:`` block, in a task of the
  transport's nursery (``PoolRunner``), which its client's ``async with`` opens and ends.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import math
import ssl
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Generator
from typing import Any, Final

import trio

from ._connection import _Stream

#: bytes buffered beyond which ``drain`` waits for the writer task
HIGH_WATER: Final = 1 << 16
#: seconds a graceful close (TLS close_notify) or a shielded write may take
GRACE: Final = 1.0


class Future:
    """A one-shot result (asyncio's ``Future``, as this package uses it)."""

    __slots__ = ("_done", "_error", "_event", "_result")

    def __init__(self) -> None:
        self._event = trio.Event()
        self._done = False
        self._result: Any = None
        self._error: BaseException | None = None

    def done(self) -> bool:
        return self._done

    def set_result(self, result: Any) -> None:
        self._result = result
        self._done = True
        self._event.set()

    def set_exception(self, error: BaseException) -> None:
        self._error = error
        self._done = True
        self._event.set()

    def exception(self) -> BaseException | None:
        return self._error

    def __await__(self) -> Generator[Any, None, Any]:
        if not self._done:
            yield from self._event.wait().__await__()
        if self._error is not None:
            raise self._error
        return self._result


class Queue:
    """A queue with one reader (a stream's body chunks)."""

    __slots__ = ("_items", "_ready")

    def __init__(self) -> None:
        self._items: deque[Any] = deque()
        self._ready = trio.Event()

    def put_nowait(self, item: Any) -> None:
        self._items.append(item)
        self._ready.set()

    async def get(self) -> Any:
        while not self._items:
            if self._ready.is_set():
                self._ready = trio.Event()
            await self._ready.wait()
        return self._items.popleft()

    def empty(self) -> bool:
        return not self._items

    def get_nowait(self) -> Any:
        return self._items.popleft()


class Event:
    """asyncio's ``Event`` (trio's cannot be cleared)."""

    __slots__ = ("_event",)

    def __init__(self) -> None:
        self._event = trio.Event()

    def set(self) -> None:
        self._event.set()

    def is_set(self) -> bool:
        return self._event.is_set()

    def clear(self) -> None:
        if self._event.is_set():
            self._event = trio.Event()

    async def wait(self) -> None:
        await self._event.wait()


class Stream(_Stream):
    """A request's stream, its waits trio's."""

    __slots__ = ()

    def __init__(self, stream_id: int) -> None:
        self.id = stream_id
        self.replied = Future()  # type: ignore[assignment]  # (asyncio's names, trio's waits)
        self.chunks = Queue()  # type: ignore[assignment]
        self.ended = False
        self.error = None
        self.headers = []
        self.trailers = []


class _Call:
    __slots__ = ("args", "cancelled", "function", "loop")

    def __init__(self, loop: Loop, function: Callable[..., object], args: tuple[Any, ...]) -> None:
        self.loop = loop
        self.function = function
        self.args = args
        self.cancelled = False

    def cancel(self) -> None:
        if not self.cancelled:
            self.cancelled = True
            self.loop._dead += 1


class Loop:
    """The two things the connection asks of asyncio's loop: ``time`` and ``call_later``,
    the calls made by a task of the connection's (``run``)."""

    def __init__(self) -> None:
        self._due: list[tuple[float, int, _Call]] = []
        self._count = itertools.count()
        self._scope: trio.CancelScope | None = None
        #: calls cancelled and still in ``_due`` (each read's PING, cancelled when it is
        #: answered in time): dropped once they are half of it
        self._dead = 0

    @staticmethod
    def time() -> float:
        return trio.current_time()

    def call_later(self, delay: float, function: Callable[..., object], *args: Any) -> _Call:
        due = self._due
        if self._dead > 32 and self._dead * 2 > len(due):
            due[:] = [entry for entry in due if not entry[2].cancelled]
            heapq.heapify(due)
            self._dead = 0
        call = _Call(self, function, args)
        when = trio.current_time() + delay
        heapq.heappush(due, (when, next(self._count), call))
        scope = self._scope
        if scope is not None and when < scope.deadline:
            scope.deadline = when
        return call

    async def run(self) -> None:
        due = self._due
        while True:
            with trio.CancelScope(deadline=due[0][0] if due else math.inf) as self._scope:
                await trio.sleep_forever()
            self._scope = None
            now = trio.current_time()
            while due and due[0][0] <= now:
                call = heapq.heappop(due)[2]
                if call.cancelled:
                    self._dead -= 1
                else:
                    call.function(*call.args)


class Reader:
    """asyncio's ``StreamReader.read``, from a trio stream."""

    def __init__(self, stream: trio.abc.Stream) -> None:
        self._stream = stream

    async def read(self, size: int) -> bytes:
        try:
            return bytes(await self._stream.receive_some(size))
        except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            raise ConnectionResetError(f"{type(exc).__name__}: {exc}") from exc


class Writer:
    """asyncio's ``StreamWriter`` as the connection uses it, on a trio stream: ``write``
    buffers, the writer task (``run``) sends (see the rules)."""

    def __init__(self, stream: trio.abc.Stream, tls: trio.SSLStream[Any] | None) -> None:
        self._stream = stream
        self._tls = tls
        self._buffer = bytearray()
        self._wake = trio.Event()  #: set when there is something to send, or to close
        self._sent = trio.Event()  #: set when the buffer was taken (``drain``'s wait)
        self._closing = False
        self._running = False
        self._error: BaseException | None = None
        self._done = trio.Event()
        #: the reader, stopped before a close (which must not race its read)
        self.reading: _Reading | None = None

    def get_extra_info(self, name: str) -> Any:
        return self._tls if name == "ssl_object" else None

    def write(self, data: bytes) -> None:
        if self._closing:
            return
        self._buffer += data
        self._wake.set()

    def is_closing(self) -> bool:
        return self._closing or self._error is not None

    def close(self) -> None:
        """Close once what was written is sent (a writer task never started: at once)."""
        self._closing = True
        self._wake.set()
        if not self._running and not self._done.is_set():  # (no task to close it: at once)
            _socket_of(self._stream).close()
            self._done.set()

    async def drain(self) -> None:
        while len(self._buffer) > HIGH_WATER and not self._done.is_set():
            if self._sent.is_set():
                self._sent = trio.Event()
            await self._sent.wait()
        if self._error is not None:
            raise ConnectionResetError(f"{type(self._error).__name__}: {self._error}")
        if self._done.is_set() and self._buffer:
            raise ConnectionResetError("the connection is closed")

    async def wait_closed(self) -> None:
        await self._done.wait()

    async def run(self) -> None:
        """The writer task: sends what is written; after ``close``, once all is sent, stops the
        reader and closes the stream. A socket error closes it at once (the reader then finds
        it closed, and the connection is lost)."""
        self._running = True
        stream = self._stream
        try:
            while True:
                if self._buffer:
                    data = bytes(self._buffer)
                    self._buffer.clear()
                    self._sent.set()
                    await stream.send_all(data)
                    continue
                if self._closing:
                    break
                if self._wake.is_set():
                    self._wake = trio.Event()
                await self._wake.wait()
            reading = self.reading
            if reading is not None:  # (closed by the connection: its loss already told)
                reading.cancel()
                with trio.move_on_after(GRACE):
                    await reading.ended.wait()
            with trio.move_on_after(GRACE):  # (a TLS close_notify the peer may not read)
                await stream.aclose()
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            self._error = exc
        finally:
            self._closing = True
            self._buffer.clear()
            await trio.aclose_forcefully(stream)
            self._done.set()
            self._sent.set()


class _Reading:
    """The reader, as the connection holds it (an asyncio task's ``cancel``, ``done``,
    awaited): cancelling it ends the reader, after which the writer sends what is left."""

    def __init__(self) -> None:
        self.scope = trio.CancelScope()
        self.ended = trio.Event()

    def cancel(self) -> None:
        self.scope.cancel()

    def done(self) -> bool:
        return self.ended.is_set()

    def __await__(self) -> Generator[Any, None, None]:
        yield from self.ended.wait().__await__()


class TrioIO:
    """One connection's trio parts (``H2Connection(io=...)``)."""

    Stream = Stream
    Future = Future
    Event = Event
    Lock = trio.Lock
    cancelled: tuple[type[BaseException], ...] = (trio.Cancelled,)

    def __init__(self, spawn: Callable[..., object]) -> None:
        self._spawn = spawn
        self.loop = Loop()
        self._writer: Writer | None = None

    async def connect(
        self, host: str, port: int, tls: ssl.SSLContext | None, server_hostname: str | None
    ) -> tuple[Reader, Writer]:
        """A trio TCP stream to ``host:port`` (TLS with ``tls``, its handshake done)."""
        stream: trio.abc.Stream = await trio.open_tcp_stream(host, port)
        secure: trio.SSLStream[Any] | None = None
        if tls is not None:
            secure = trio.SSLStream(stream, tls, server_hostname=server_hostname or host)
            try:
                await secure.do_handshake()
            except BaseException as exc:
                await trio.aclose_forcefully(stream)
                cause = exc.__cause__
                if isinstance(exc, trio.BrokenResourceError) and isinstance(cause, OSError):
                    raise cause from None  # (ssl's error, as asyncio raises it: an OSError)
                raise
            stream = secure
        self._writer = Writer(stream, secure)
        return Reader(stream), self._writer

    def start(self, read_loop: Callable[[], Awaitable[None]]) -> _Reading:
        """The connection's tasks, in one started with ``spawn``: the reader (``read_loop``),
        the writer and the timer; the reader's handle."""
        reading = _Reading()
        assert self._writer is not None
        self._writer.reading = reading
        self._spawn(self._life, read_loop, reading)
        return reading

    async def _life(self, read_loop: Callable[[], Awaitable[None]], reading: _Reading) -> None:
        writer = self._writer
        assert writer is not None
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(writer.run)
                nursery.start_soon(self.loop.run)
                try:
                    with reading.scope:
                        await read_loop()
                finally:
                    reading.ended.set()
                    writer.close()  # (what was written is sent first)
                await writer.wait_closed()
                nursery.cancel_scope.cancel()  # (the timer)
        finally:
            reading.ended.set()

    @staticmethod
    async def wait_done(reading: _Reading, timeout: float) -> None:
        with trio.move_on_after(timeout):
            await reading.ended.wait()

    @staticmethod
    async def shielded(step: Awaitable[None]) -> None:
        with trio.CancelScope(shield=True), trio.move_on_after(GRACE):
            await step

    @staticmethod
    @contextlib.asynccontextmanager
    async def timeout(seconds: float | None) -> AsyncIterator[None]:
        """``asyncio.timeout``: ``TimeoutError`` once ``seconds`` have passed (None: none)."""
        if seconds is None:
            yield
            return
        with trio.move_on_after(seconds) as scope:
            yield
        if scope.cancelled_caught:
            raise TimeoutError


def _socket_of(stream: Any) -> Any:
    """The trio socket under a stream (an SSLStream's transport's)."""
    return getattr(stream, "transport_stream", stream).socket


class PoolRunner:
    """``AsyncTransport``'s nursery under trio: each origin's pool runs in a task of it, inside
    its own ``async with pool:`` block (the nursery its connections' tasks run in), until the
    transport closes; the nursery is opened and ended by the transport's ``async with``."""

    def __init__(self) -> None:
        self._manager: Any = None
        self._nursery: trio.Nursery | None = None
        self._stop = trio.Event()
        self._started: dict[Any, trio.Event] = {}

    async def open(self) -> None:
        manager = trio.open_nursery()
        self._nursery = await manager.__aenter__()
        self._manager = manager

    def run(self, pool: Any) -> None:
        """``pool`` started in a task of the nursery (``started`` waits until it is ready)."""
        assert self._nursery is not None
        started = self._started[pool] = trio.Event()
        self._nursery.start_soon(self._run, pool, started, name=f"poolkit-transport {pool.address}")

    async def _run(self, pool: Any, started: trio.Event) -> None:
        try:
            async with pool:
                started.set()
                await self._stop.wait()
        finally:
            started.set()  # (a pool that could not start: its requests fail, not wait)

    async def started(self, pool: Any) -> None:
        started = self._started.get(pool)
        if started is not None and not started.is_set():
            await started.wait()

    def stop(self) -> None:
        """The pools' blocks end (each closes its pool, and waits for its tasks)."""
        self._stop.set()

    async def exit(self) -> None:
        """The nursery's end, once every pool's task has ended."""
        self._stop.set()
        manager, self._manager = self._manager, None
        if manager is not None:
            try:
                await manager.__aexit__(None, None, None)
            finally:
                self._nursery = None
