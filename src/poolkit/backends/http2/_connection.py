"""One HTTP/2 connection of a client, shared by the leases of a poolkit pool: each request a
stream (the ``h2`` library, over asyncio streams, or trio's: ``_trio``).

Rules of this module
--------------------
* One task reads each connection (its reader) and feeds ``h2``; what the server says is handed to
  the stream it is about, or to the pool: a new ``SETTINGS_MAX_CONCURRENT_STREAMS`` is the pool's
  ``set_max_streams``; a GOAWAY is ``connection_will_close`` (the streams the server will still
  answer, up to its last stream id, finish; the others fail with :class:`StreamRefusedError`, a
  request the server never processed, which may be sent again on another connection).
* Writes go through one lock: frames of two streams never interleave mid-write. A request body
  waits for flow-control window, stream's and connection's, and is sent in frames the server
  takes; received data is acknowledged as the caller reads it (the server sends no faster than
  the caller reads).
* An error of the connection (the socket, a protocol error, the end of the stream, silence
  through a whole timeout with a PING unanswered) fails every stream in flight with
  :class:`ConnectionLostError`, closes the connection and tells the pool
  (``connection_will_close``: closed now if idle, never handed out again); ``is_broken`` then
  tells it to discard the leases. An error of one stream (``RST_STREAM``) fails that request
  only (:class:`StreamResetError`).
* Nothing is sent before it is known to be sendable: a request's headers are checked against
  HTTP/2's rules before h2 sees them (:class:`InvalidRequestError`: h2 checks them as its HPACK
  encoder takes them, and one refused there corrupts the connection's header table); a request
  on a connection already closed, past a GOAWAY or beyond the server's stream limit is refused
  with nothing written (:class:`RequestNotSentError`, :class:`StreamRefusedError`), to be sent
  on another connection.
* A response is read within its lease: the stream stays leased until its body is read to the
  end or the response closed (an unread response is reset, ``CANCEL``). A request cancelled
  mid-way resets its stream too.
* ``ping`` (PING and its acknowledgement) is the keep-alive probe.
* The async library is chosen once, at :meth:`H2Connection.open`: asyncio's streams, futures,
  queues, locks and loop, or under trio their stand-ins from ``_trio`` (trio's streams, with a
  writer task that buffers as asyncio's transport does, so that the reader's acknowledgements
  never wait on a write), which this module uses through the same names (``write``/``drain``,
  ``done``/``set_result``, ``put_nowait``/``get``, ``loop.time``/``loop.call_later``). Under
  trio the connection's tasks (reader, writer, timer) run in one task started by ``spawn``
  (the pool's ``ConnectContext.start_soon``, or a nursery's ``start_soon``): never a hidden
  one. Nothing of trio is imported on asyncio.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import urllib.parse
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Iterable
from typing import Any, Final

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.exceptions
import h2.settings
import h2.utilities

from ...driver import trio_running
from ._errors import (
    ConnectionLostError,
    HTTP2Error,
    InvalidRequestError,
    RequestNotSentError,
    StreamRefusedError,
    StreamResetError,
)

#: the most leases a connection is given when the server sets no limit (or a huge one)
MAX_STREAMS_CAP: Final = 1000
#: what the client asks of the server: a window large enough for bodies to stream at speed
_LOCAL_WINDOW: Final = 1 << 24
_READ_SIZE: Final = 1 << 16


class _Stream:
    """One request's stream: what the reader hands it, and the waits of its caller."""

    __slots__ = ("chunks", "ended", "error", "headers", "id", "replied", "trailers")

    def __init__(self, stream_id: int) -> None:
        self.id = stream_id
        self.replied: asyncio.Future[list[tuple[bytes, bytes]]] = (
            asyncio.get_running_loop().create_future()
        )
        #: the body's chunks as they come (with their flow-controlled length), then ``None``
        self.chunks: asyncio.Queue[tuple[bytes, int] | None] = asyncio.Queue()
        self.ended = False
        self.error: BaseException | None = None
        self.headers: list[tuple[bytes, bytes]] = []
        self.trailers: list[tuple[bytes, bytes]] = []

    def drop_unread(self) -> int:
        """The body's chunks that came and were not read, dropped: their flow-controlled
        length, which the connection's window is owed."""
        owed = 0
        chunks = self.chunks
        while not chunks.empty():
            item = chunks.get_nowait()
            if item is not None:
                owed += item[1]
        return owed

    def fail(self, error: BaseException) -> None:
        if self.error is None and not self.ended:
            self.error = error
            if not self.replied.done():
                self.replied.set_exception(error)
                self.replied.exception()  # (retrieved: the caller may be gone)
            self.chunks.put_nowait(None)


class Response:
    """An HTTP/2 response: ``status``, ``headers`` (lower-case ``bytes`` pairs, the pseudo-headers
    left out), the body read with :meth:`aread` or :meth:`aiter_bytes`, ``trailers`` once read.
    Close it (:meth:`aclose`, or read it to the end) before its lease ends."""

    def __init__(
        self, connection: H2Connection, stream: _Stream, headers: list[tuple[bytes, bytes]]
    ) -> None:
        self._connection = connection
        self._stream = stream
        self.stream_id = stream.id
        self.status = 0
        self.headers: list[tuple[bytes, bytes]] = []
        for name, value in headers:
            if name == b":status":
                self.status = int(value)
            elif not name.startswith(b":"):
                self.headers.append((name, value))
        self.closed = False

    @property
    def trailers(self) -> list[tuple[bytes, bytes]]:
        return self._stream.trailers

    async def aiter_bytes(self) -> AsyncIterator[bytes]:
        """The body's chunks as the server sends them; the stream's flow-control window is given
        back as each is read."""
        stream = self._stream
        while not self.closed:
            item = await stream.chunks.get()
            if item is None:
                self.closed = True
                self._connection._forget(stream)
                if stream.error is not None:
                    raise stream.error
                return
            data, flow = item
            self._connection._acknowledge(stream.id, flow)
            yield data

    async def aread(self) -> bytes:
        """The whole body."""
        return b"".join([chunk async for chunk in self.aiter_bytes()])

    async def aclose(self) -> None:
        """Done with the response: a body not read to the end is abandoned (its stream reset with
        ``CANCEL``, the server stops sending it)."""
        if self.closed:
            return
        self.closed = True
        stream = self._stream
        try:
            if not stream.ended and stream.error is None:
                # (carried through the caller's cancellation: the server stops sending it)
                await self._connection._shielded(
                    self._connection._reset(stream, h2.errors.ErrorCodes.CANCEL)
                )
        finally:
            self._connection._forget(stream)

    def __repr__(self) -> str:
        return f"<Response [{self.status}] stream {self.stream_id}>"


class H2Connection:
    """One HTTP/2 connection (a client's), shared by the leases of a poolkit pool: each
    :meth:`request` is one stream. Made by :func:`async_connect`'s connect function (or
    :meth:`open`)."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        authority: str,
        scheme: str,
        *,
        pool: Any = None,
        connection_id: int = 0,
        io: Any = None,
    ) -> None:
        self.authority = authority
        self.scheme = scheme
        self._reader = reader
        self._writer = writer
        self._pool = pool
        self._connection_id = connection_id
        # (a request's headers are normalized and checked before h2 sees them: _checked_headers)
        config = h2.config.H2Configuration(
            client_side=True,
            header_encoding=None,
            normalize_outbound_headers=False,
            validate_outbound_headers=False,
        )
        self._h2 = h2.connection.H2Connection(config=config)
        self._streams: dict[int, _Stream] = {}
        #: the async library's parts (see the rules): asyncio's, or ``io``'s (trio's)
        self._io = io
        if io is None:
            self._stream_class: Callable[[int], _Stream] = _Stream
            self._write_lock: Any = asyncio.Lock()
            self._window: Any = asyncio.Event()  #: set when the server opens flow-control window
            self._settings: Any = asyncio.Event()  #: set at the server's first SETTINGS
            self._loop: Any = asyncio.get_running_loop()
            self._timeout: Callable[[float | None], Any] = asyncio.timeout
            self._cancelled: tuple[type[BaseException], ...] = (asyncio.CancelledError,)
        else:
            self._stream_class = io.Stream
            self._write_lock = io.Lock()
            self._window = io.Event()
            self._settings = io.Event()
            self._loop = io.loop
            self._timeout = io.timeout
            self._cancelled = io.cancelled
        self._pings: dict[bytes, Any] = {}
        self._ping_count = 0
        self._error: BaseException | None = None
        self._closing = False  #: aclose() called: the pool closes it, nothing to tell it
        #: the last stream the server still answers after its GOAWAY (None: no GOAWAY)
        self.goaway_last_stream: int | None = None
        #: the reader: an asyncio task, or the trio I/O's handle (``cancel``, ``done``, awaited)
        self._reading: Any = None
        #: the loop's time when the server was last heard (any frame): a wait that hears nothing
        #: for its whole timeout, a PING sent half-way, finds the connection dead (answer_within)
        self.heard_at = self._loop.time()
        self._nudged_at = -1.0  #: when answer_within's last PING went out

    # ------------------------------------------------------------------ opening and closing

    @classmethod
    async def open(
        cls,
        host: str,
        port: int,
        *,
        tls: ssl.SSLContext | None = None,
        server_hostname: str | None = None,
        pool: Any = None,
        connection_id: int = 0,
        spawn: Callable[..., object] | None = None,
    ) -> H2Connection:
        """Connect (TLS with ALPN ``h2`` when ``tls`` is given, else prior knowledge), send the
        connection preface and wait for the server's SETTINGS.

        On asyncio the reader is a task of the running loop. Under trio (the async library
        running decides) the connection's tasks run in one started with ``spawn`` (required
        there): the pool's ``ConnectContext.start_soon``, or a nursery's ``start_soon``; they
        end when the connection closes."""
        io: Any = None
        if trio_running():
            from . import _trio  # (only under trio: asyncio never imports it)

            if spawn is None:
                raise RuntimeError(
                    "H2Connection.open() under trio: its reader runs in a task of yours, so "
                    "pass spawn= (a nursery's start_soon, or the connect's ctx.start_soon)"
                )
            io = _trio.TrioIO(spawn)
            reader, writer = await io.connect(host, port, tls, server_hostname)
        else:
            reader, writer = await asyncio.open_connection(
                host,
                port,
                ssl=tls,
                server_hostname=(server_hostname or host) if tls is not None else None,
            )
        try:
            if tls is not None:
                chosen = writer.get_extra_info("ssl_object").selected_alpn_protocol()
                if chosen != "h2":
                    raise ConnectionLostError(
                        f"{host}:{port} did not choose HTTP/2 in TLS (ALPN: {chosen!r})"
                    )
            scheme = "https" if tls is not None else "http"
            default = 443 if tls is not None else 80
            authority = host if port == default else f"{host}:{port}"
            conn = cls(
                reader, writer, authority, scheme, pool=pool, connection_id=connection_id, io=io
            )
            await conn._start()
        except BaseException:
            writer.close()
            raise
        return conn

    async def _start(self) -> None:
        h2c = self._h2
        h2c.local_settings = h2.settings.Settings(
            client=True,
            initial_values={
                h2.settings.SettingCodes.ENABLE_PUSH: 0,
                h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: _LOCAL_WINDOW,
            },
        )
        h2c.initiate_connection()
        h2c.increment_flow_control_window(_LOCAL_WINDOW - 65535)
        if self._io is not None:  # (trio: the connection's tasks, then the preface)
            self._reading = self._io.start(self._read_loop)
            await self._flush()
            await self._settings.wait()  # (set by the reader's end too: ``_lost``)
            if self._error is not None:
                raise self._error
            return
        await self._flush()
        self._reading = asyncio.get_running_loop().create_task(self._read_loop())
        settled = asyncio.ensure_future(self._settings.wait())
        await asyncio.wait([settled, self._reading], return_when=asyncio.FIRST_COMPLETED)
        if not settled.done():
            settled.cancel()
            raise self._error or ConnectionLostError("the server closed before its SETTINGS")

    @property
    def closed(self) -> bool:
        return self._error is not None or self._writer.is_closing()

    @property
    def max_streams(self) -> int:
        """The leases this connection serves at once: the server's limit, at most
        :data:`MAX_STREAMS_CAP`."""
        limit = self._h2.remote_settings.max_concurrent_streams
        return max(1, min(int(limit), MAX_STREAMS_CAP))

    def close(self) -> None:
        """:meth:`aclose` without waiting: the GOAWAY written (sent as the socket closes, if it
        still can be) and the socket closed; streams in flight fail. What a pool uses where it
        cannot await (under trio, a lease given back after the pool's block ended)."""
        self._closing = True
        if not self._writer.is_closing():
            with contextlib.suppress(Exception):
                self._h2.close_connection()
                self._writer.write(self._h2.data_to_send())
        self._lost(ConnectionLostError(f"the connection to {self.authority} was closed"))

    async def aclose(self) -> None:
        """Say goodbye (GOAWAY) and close the socket; streams in flight fail."""
        self._closing = True
        if not self._writer.is_closing():
            with contextlib.suppress(Exception):
                async with self._write_lock:
                    self._h2.close_connection()
                    self._writer.write(self._h2.data_to_send())
        self._lost(ConnectionLostError(f"the connection to {self.authority} was closed"))
        if self._reading is not None:
            self._reading.cancel()
            with contextlib.suppress(BaseException):
                await self._reading
        with contextlib.suppress(OSError):
            await self._writer.wait_closed()

    # ------------------------------------------------------------------ requests

    async def request(
        self,
        method: str,
        target: str,
        *,
        headers: Iterable[tuple[str | bytes, str | bytes]] = (),
        body: bytes | AsyncIterable[bytes] | None = None,
    ) -> Response:
        """Send a request on a new stream and wait for the response's headers. ``target``: the
        path (``/index.html?q=1``) or an absolute URL of this connection's origin. The response's
        body is then read from it, within the lease.

        Refused before anything is sent: a request HTTP/2 forbids (:class:`InvalidRequestError`;
        the connection serves on), and any on a connection already closed or out of streams
        (:class:`RequestNotSentError`, :class:`StreamRefusedError`: send it on another)."""
        if self.closed:
            raise self._not_sent()
        path = _path(target)
        sent = [
            (b":method", method.encode()),
            (b":scheme", self.scheme.encode()),
            (b":authority", self.authority.encode()),
            (b":path", path.encode()),
        ]
        for name, value in headers:
            name_b = (name.encode() if isinstance(name, str) else name).lower()
            if name_b == b"host":
                continue  # (:authority says it)
            sent.append((name_b, value.encode() if isinstance(value, str) else value))
        checked = _checked_headers(sent)
        stream: _Stream | None = None
        try:
            async with self._write_lock:
                stream_id = self._next_stream_id()
                stream = self._streams[stream_id] = self._stream_class(stream_id)
                self._h2.send_headers(stream_id, checked, end_stream=body is None)
                self._writer.write(self._h2.data_to_send())
                await self._writer.drain()
            if body is not None:
                await self._send_body(stream, body)
            headers_in = await stream.replied
        except BaseException as exc:
            if stream is not None:
                if not stream.ended and stream.error is None and not self.closed:
                    with contextlib.suppress(Exception):
                        await self._shielded(self._reset(stream, h2.errors.ErrorCodes.CANCEL))
                self._forget(stream)
            if isinstance(exc, OSError | h2.exceptions.ProtocolError) and not isinstance(
                exc, HTTP2Error
            ):
                error = ConnectionLostError(f"{self.authority}: {type(exc).__name__}: {exc}")
                reading = self._reading
                if reading is not None and not reading.done():
                    # (what the server sent before it went, a GOAWAY among it, is read first: it
                    # may say this stream was never processed)
                    if self._io is None:
                        await asyncio.wait({reading}, timeout=1.0)
                    else:
                        await self._io.wait_done(reading, 1.0)
                self._lost(error)
                refused = None if stream is None else self._refused(stream.id)
                raise (refused or error) from exc
            raise
        return Response(self, stream, headers_in)

    def _next_stream_id(self) -> int:
        """The id of the request's new stream, or the reason none can start here (nothing sent;
        under the write lock, after which the connection may have closed or said GOAWAY)."""
        if self.closed:
            raise self._not_sent()
        if self.goaway_last_stream is not None:
            raise StreamRefusedError(
                f"{self.authority} said GOAWAY: no new stream on this connection"
            )
        h2c = self._h2
        if h2c.open_outbound_streams >= h2c.remote_settings.max_concurrent_streams:
            # (the server lowered its limit; the pool hears of it with this SETTINGS, but this
            # lease was given before)
            raise StreamRefusedError(
                f"{self.authority} allows {h2c.remote_settings.max_concurrent_streams} streams at "
                "once: no new one now"
            )
        try:
            return h2c.get_next_available_stream_id()
        except h2.exceptions.NoAvailableStreamIDError as exc:
            self._tell_pool("connection_will_close")  # (no stream left: it drains and closes)
            raise StreamRefusedError(
                f"{self.authority}: no stream id left on this connection"
            ) from exc

    def _not_sent(self) -> RequestNotSentError:
        error = self._error
        reason = str(error) if error is not None else f"the connection to {self.authority} closed"
        not_sent = RequestNotSentError(f"{reason}: the request was not sent")
        not_sent.__cause__ = error
        return not_sent

    async def _send_body(self, stream: _Stream, body: bytes | AsyncIterable[bytes]) -> None:
        if isinstance(body, bytes | bytearray | memoryview):
            await self._send_data(stream, bytes(body))
        else:
            async for chunk in body:
                await self._send_data(stream, bytes(chunk))
        async with self._write_lock:
            self._check(stream)
            self._h2.end_stream(stream.id)
            self._writer.write(self._h2.data_to_send())
            await self._writer.drain()

    async def _send_data(self, stream: _Stream, data: bytes) -> None:
        """``data`` on ``stream``, in frames within the flow-control windows."""
        view = memoryview(data)
        while view:
            async with self._write_lock:
                self._check(stream)
                window = min(
                    self._h2.local_flow_control_window(stream.id),
                    self._h2.max_outbound_frame_size,
                )
                if window > 0:
                    part, view = view[:window], view[window:]
                    self._h2.send_data(stream.id, bytes(part))
                    self._writer.write(self._h2.data_to_send())
                    await self._writer.drain()
                    continue
                self._window.clear()
            await self._window.wait()  # (the reader sets it at a WINDOW_UPDATE, or an error)

    def _check(self, stream: _Stream) -> None:
        if stream.error is not None:
            raise stream.error
        if self._error is not None:
            raise ConnectionLostError(str(self._error)) from self._error

    def _acknowledge(self, stream_id: int, flow: int) -> None:
        """The caller took ``flow`` bytes of the stream (read them, or dropped them with it): the
        server may send as many more. At once, with no wait between the chunk taken and its
        window given back: a cancellation there would lose the connection's window for good
        (the stream's goes with the stream), and enough of them would stall every stream. The
        frame is written as the reader writes its own (a WINDOW_UPDATE: 13 bytes, no drain)."""
        if flow <= 0 or self.closed:
            return
        with contextlib.suppress(h2.exceptions.StreamClosedError, KeyError):
            self._h2.acknowledge_received_data(flow, stream_id)
        out = self._h2.data_to_send()
        if out:
            self._writer.write(out)

    async def _reset(self, stream: _Stream, code: int) -> None:
        await self._send_quietly(lambda: self._h2.reset_stream(stream.id, error_code=code))

    async def _send_quietly(self, step: Callable[[], object]) -> None:
        """``step`` (a frame about one stream) sent, unless the connection is gone: a stream
        ended meanwhile or a socket that fails is no error of the caller's (what failed the
        connection is the reader's to report)."""
        if self.closed:
            return
        async with self._write_lock:
            with contextlib.suppress(h2.exceptions.StreamClosedError, KeyError):
                step()
            data = self._h2.data_to_send()
            if data:
                self._writer.write(data)
                with contextlib.suppress(OSError):
                    await self._writer.drain()

    def _forget(self, stream: _Stream) -> None:
        """``stream`` is done with (read to its end, closed unread, or failed): the chunks of
        its body that came and were never read give their window back to the connection."""
        self._streams.pop(stream.id, None)
        self._acknowledge(stream.id, stream.drop_unread())

    async def _shielded(self, step: Awaitable[None]) -> None:
        """``step`` (a frame's write) carried through a cancellation of the caller: asyncio's
        ``shield``, or a shielded trio scope (bounded: a write never holds a cancelled caller
        more than a second)."""
        if self._io is None:
            await asyncio.shield(step)
        else:
            await self._io.shielded(step)

    def _new_future(self) -> Any:
        return asyncio.get_running_loop().create_future() if self._io is None else self._io.Future()

    async def ping(self, timeout: float | None = None) -> None:
        """PING the server and wait for its acknowledgement (the keep-alive probe)."""
        if self._error is not None:
            raise ConnectionLostError(str(self._error)) from self._error
        self._ping_count += 1
        opaque = self._ping_count.to_bytes(8, "big")
        answered = self._pings[opaque] = self._new_future()
        try:
            await self._flush(lambda: self._h2.ping(opaque))
            async with self._timeout(timeout):
                await answered
        finally:
            self._pings.pop(opaque, None)

    async def _flush(self, step: Any = None) -> None:
        async with self._write_lock:
            if step is not None:
                step()
            self._writer.write(self._h2.data_to_send())
            await self._writer.drain()

    # ------------------------------------------------------------------ the reader

    async def _read_loop(self) -> None:
        loop = self._loop
        try:
            while True:
                data = await self._reader.read(_READ_SIZE)
                if not data:
                    raise ConnectionLostError(f"{self.authority} closed the connection")
                self.heard_at = loop.time()
                events = self._h2.receive_data(data)
                for event in events:
                    self._on(event)
                out = self._h2.data_to_send()
                if out:
                    self._writer.write(out)  # (acks: written at once, in order; no drain here)
        except self._cancelled:
            raise
        except BaseException as exc:
            error = (
                exc
                if isinstance(exc, HTTP2Error)
                else ConnectionLostError(f"{self.authority}: {type(exc).__name__}: {exc}")
            )
            self._lost(error)

    def _on(self, event: h2.events.Event) -> None:
        """What the server said, handed to the stream it is about (or to the pool)."""
        match event:
            case h2.events.ResponseReceived():
                stream = self._streams.get(event.stream_id)
                if stream is not None and not stream.replied.done():
                    stream.replied.set_result(list(event.headers))
            case h2.events.DataReceived():
                stream = self._streams.get(event.stream_id)
                if stream is not None:
                    stream.chunks.put_nowait((event.data, event.flow_controlled_length))
                else:  # (a stream given up on: its window given back at once)
                    self._h2.acknowledge_received_data(
                        event.flow_controlled_length, event.stream_id
                    )
            case h2.events.TrailersReceived():
                stream = self._streams.get(event.stream_id)
                if stream is not None:
                    stream.trailers = list(event.headers)
            case h2.events.StreamEnded():
                stream = self._streams.get(event.stream_id)
                if stream is not None:
                    stream.ended = True
                    if not stream.replied.done():  # (ended without headers: a protocol error)
                        stream.replied.set_exception(
                            ConnectionLostError("a stream ended without a response")
                        )
                    stream.chunks.put_nowait(None)
            case h2.events.StreamReset():
                stream = self._streams.get(event.stream_id)
                if stream is not None:
                    stream.fail(self._reset_error(event.stream_id, int(event.error_code)))
                self._window.set()
            case h2.events.WindowUpdated():
                self._window.set()
            case h2.events.RemoteSettingsChanged():
                first = not self._settings.is_set()
                self._settings.set()
                changed = event.changed_settings
                if h2.settings.SettingCodes.INITIAL_WINDOW_SIZE in changed:
                    self._window.set()
                if not first and h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS in changed:
                    self._tell_pool("set_max_streams", self.max_streams)
            case h2.events.PingAckReceived():
                answered = self._pings.get(event.ping_data)
                if answered is not None and not answered.done():
                    answered.set_result(None)
            case h2.events.ConnectionTerminated():
                self._goaway(int(event.last_stream_id or 0), int(event.error_code or 0))

    def _reset_error(self, stream_id: int, code: int) -> HTTP2Error:
        """The error of a stream the server reset: refused (not processed) or reset."""
        if code == h2.errors.ErrorCodes.REFUSED_STREAM:
            return StreamRefusedError(
                f"{self.authority} refused stream {stream_id}", stream_id=stream_id
            )
        return StreamResetError(
            f"{self.authority} reset stream {stream_id} ({_code_name(code)})",
            stream_id=stream_id,
            error_code=code,
        )

    def _goaway(self, last_stream_id: int, code: int) -> None:
        """The server said GOAWAY: no new stream; the streams above ``last_stream_id`` were not
        processed (sent again elsewhere by who asks); those below finish. The pool drains the
        connection and closes it when its last lease comes back."""
        self.goaway_last_stream = last_stream_id
        if any(stream_id <= last_stream_id for stream_id in self._streams):
            # h2 closes its side at a GOAWAY and refuses the frames that follow; RFC 9113 (6.8)
            # has the streams up to the last id answered: h2's state machine is opened again for
            # them (no new stream starts here: ``goaway_last_stream`` is set)
            self._h2.state_machine.state = h2.connection.ConnectionState.CLIENT_OPEN
        for stream_id, stream in list(self._streams.items()):
            if stream_id > last_stream_id:
                stream.fail(
                    StreamRefusedError(
                        f"{self.authority} said GOAWAY before stream {stream_id} "
                        f"({_code_name(code)}): not processed",
                        stream_id=stream_id,
                    )
                )
        self._tell_pool("connection_will_close")

    def _refused(self, stream_id: int) -> StreamRefusedError | None:
        """The error of a stream above the last id of a GOAWAY the server sent, if it is one."""
        last = self.goaway_last_stream
        if last is None or stream_id <= last:
            return None
        return StreamRefusedError(
            f"{self.authority} said GOAWAY before stream {stream_id}: not processed",
            stream_id=stream_id,
        )

    def _tell_pool(self, what: str, *args: Any) -> None:
        pool = self._pool
        if pool is not None:
            getattr(pool, what)(self._connection_id, *args)

    def _lost(self, error: BaseException) -> None:
        """The connection failed: every stream fails (one above a GOAWAY's last stream id as
        refused: the server said it would not process it), the writer closes, and the pool is
        told (a connection known dead is never handed out again: closed now if idle)."""
        first = self._error is None
        if first:
            self._error = error
        for stream in list(self._streams.values()):
            stream.fail(self._refused(stream.id) or error)
        for answered in self._pings.values():
            if not answered.done():
                answered.set_exception(error)
                answered.exception()
        self._settings.set()
        self._window.set()
        self._writer.close()
        if first and not self._closing:
            self._tell_pool("connection_will_close")

    # ------------------------------------------------------------------ liveness

    @contextlib.asynccontextmanager
    async def answer_within(self, timeout: float | None) -> AsyncIterator[None]:
        """Wait for the server within ``timeout`` seconds (``TimeoutError`` after): a response's
        headers, a part of its body. Half-way through, a connection that has sent nothing since
        the wait began is sent a PING; if the whole timeout passes with nothing heard from the
        server, not even that PING's answer, the connection is dead (a frozen server, a flow
        dropped by a NAT or a firewall): it fails as :class:`ConnectionLostError`, its other
        streams with it, and the pool closes it. A server that is alive but slow to answer this
        request answers the PING: only this wait times out."""
        if timeout is None:
            yield
            return
        since = self._loop.time()
        nudge = self._loop.call_later(timeout / 2, self._nudge, since)
        try:
            async with self._timeout(timeout):
                yield
        except TimeoutError:
            if self.heard_at < since and not self.closed:
                self._lost(
                    ConnectionLostError(
                        f"{self.authority} sent nothing for {timeout:g} s, not even the answer "
                        "to a PING: the connection is taken for dead"
                    )
                )
            raise
        finally:
            nudge.cancel()

    def _nudge(self, since: float) -> None:
        """A PING, unless the server was heard since ``since`` (or was sent one since then): its
        answer is heard if the server is there."""
        if self.heard_at >= since or self._nudged_at >= since or self.closed:
            return
        self._nudged_at = self._loop.time()
        self._ping_count += 1
        # (written at once, as the reader writes its acknowledgements: frames are whole in h2's
        # output, and every writer under the lock writes what it made before it awaits)
        with contextlib.suppress(h2.exceptions.ProtocolError):
            self._h2.ping(self._ping_count.to_bytes(8, "big"))
        data = self._h2.data_to_send()
        if data:
            self._writer.write(data)

    def __repr__(self) -> str:
        state = " closed" if self.closed else ""
        shown = f"{self.scheme}://{self.authority}"
        return f"<H2Connection {shown} streams={len(self._streams)}{state}>"


_REQUEST_HEADERS: Final = h2.utilities.HeaderValidationFlags(
    is_client=True, is_trailer=False, is_response_header=False, is_push_promise=False
)


def _checked_headers(headers: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """A request's headers as h2 sends them (names lower-cased, HTTP/1.1's connection-specific
    ones left out, RFC 9113 8.2.2), checked against HTTP/2's rules before h2 sees them.

    (h2 checks them lazily, as its HPACK encoder takes them one by one: a header refused there
    leaves the encoder's table holding the ones before it, which the server never received, and
    every later request on the connection is decoded wrong. Checked here, a refused request
    changes nothing: no stream id taken, no byte sent.)"""
    try:
        return list(
            h2.utilities.validate_outbound_headers(
                h2.utilities.normalize_outbound_headers(headers, _REQUEST_HEADERS),
                _REQUEST_HEADERS,
            )
        )
    except (h2.exceptions.ProtocolError, ValueError, IndexError, TypeError) as exc:
        raise InvalidRequestError(f"HTTP/2 forbids this request: {exc}") from exc


def _code_name(code: int) -> str:
    try:
        return h2.errors.ErrorCodes(code).name
    except ValueError:
        return f"error code {code}"


def _path(target: str) -> str:
    if target.startswith("/"):
        return target
    parts = urllib.parse.urlsplit(target)
    path = parts.path or "/"
    return f"{path}?{parts.query}" if parts.query else path
