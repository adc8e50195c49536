"""A small HTTP/2 server (h2c, prior knowledge) on the h2 library, for what hypercorn will not do on
demand: change its stream limit mid-run, say GOAWAY, die with streams in flight or mid-response,
go silent. It answers ``/echo/...`` with its path at once, resets ``/reset``'s stream, refuses
``/refuse-once``'s the first time (``REFUSED_STREAM``), holds ``/hold`` until ``release()``, and
dies after the headers and part of ``/partial``'s body; it records the streams the client reset.
Only as much server as tests/backends/test_http2*.py need."""

from __future__ import annotations

import asyncio
from typing import Any

import h2.config
import h2.connection
import h2.events
import h2.settings
import hyperframe.frame


class _Peer:
    def __init__(self, server: H2Server, writer: asyncio.StreamWriter) -> None:
        self.server = server
        self.writer = writer
        self.h2 = h2.connection.H2Connection(
            h2.config.H2Configuration(client_side=False, header_encoding=None)
        )
        self.held: list[int] = []
        self.goaway_sent = False
        self.frozen = False  #: reads what comes and answers nothing (a frozen process)

    def flush(self) -> None:
        data = self.h2.data_to_send()
        if data and not self.writer.is_closing():
            self.writer.write(data)

    def answer(self, stream_id: int, body: bytes) -> None:
        if self.writer.is_closing():
            return
        try:
            self.h2.send_headers(stream_id, [(b":status", b"200")])
            self.h2.send_data(stream_id, body, end_stream=True)
        except Exception:  # (the client reset it meanwhile)
            return
        self.flush()


class H2Server:
    def __init__(self, *, streams: int = 100) -> None:
        self.streams = streams
        self.peers: list[_Peer] = []
        self.resets: list[tuple[int, int]] = []  #: (stream id, error code) the client reset
        self.requests = 0
        self.refused = 0  #: streams refused (``/refuse-once``)
        self.open = 0  #: connections open now (the server side's view)
        self._closed = asyncio.Condition()
        self._released = asyncio.Event()
        self._server: asyncio.Server | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def __aenter__(self) -> H2Server:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for peer in self.peers:
            peer.writer.close()
        await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = _Peer(self, writer)
        self.peers.append(peer)
        self.open += 1
        peer.h2.local_settings = h2.settings.Settings(
            client=False,
            initial_values={h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: self.streams},
        )
        peer.h2.initiate_connection()
        peer.flush()
        try:
            while data := await reader.read(65536):
                if peer.frozen:
                    continue
                for event in peer.h2.receive_data(data):
                    self._on(peer, event)
                peer.flush()
        except (ConnectionError, OSError):
            pass
        finally:
            writer.close()
            async with self._closed:
                self.open -= 1
                self._closed.notify_all()

    async def all_closed(self) -> None:
        """Until every connection made to the server is closed."""
        async with self._closed:
            await self._closed.wait_for(lambda: self.open == 0)

    def _on(self, peer: _Peer, event: Any) -> None:
        if isinstance(event, h2.events.RequestReceived):
            self.requests += 1
            path = dict(event.headers)[b":path"]
            if path == b"/reset":  # (this stream only: an INTERNAL_ERROR)
                peer.h2.reset_stream(event.stream_id, error_code=2)
            elif path == b"/refuse-once" and not self.refused:
                self.refused += 1
                peer.h2.reset_stream(event.stream_id, error_code=7)  # (REFUSED_STREAM)
            elif path == b"/partial":  # (the headers and part of the body, then the server dies)
                peer.h2.send_headers(event.stream_id, [(b":status", b"200")])
                peer.h2.send_data(event.stream_id, b"part of it")
                peer.flush()
                self.kill(peer)
            elif path == b"/hold" and not self._released.is_set():
                peer.held.append(event.stream_id)
                asyncio.get_running_loop().create_task(self._hold(peer, event.stream_id))
            else:
                peer.answer(event.stream_id, path)
        elif isinstance(event, h2.events.StreamReset):
            self.resets.append((event.stream_id, int(event.error_code)))
        elif isinstance(event, h2.events.DataReceived):
            peer.h2.acknowledge_received_data(event.flow_controlled_length, event.stream_id)

    async def _hold(self, peer: _Peer, stream_id: int) -> None:
        await self._released.wait()
        peer.answer(stream_id, b"held")

    def held(self) -> int:
        return sum(len(peer.held) for peer in self.peers)

    def release(self) -> None:
        self._released.set()

    def set_max_streams(self, streams: int) -> None:
        """A new SETTINGS_MAX_CONCURRENT_STREAMS, on every connection."""
        self.streams = streams
        for peer in self.peers:
            peer.h2.update_settings({h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: streams})
            peer.flush()

    def goaway(self, peer: _Peer, last_stream_id: int | None = None) -> None:
        """GOAWAY on ``peer``: the streams up to ``last_stream_id`` (default: the highest seen)
        are still answered."""
        if last_stream_id is None:
            last_stream_id = peer.h2.highest_inbound_stream_id
        # (written by hand: h2's close_connection() would close the server's side at once, and
        # a graceful GOAWAY goes on answering the streams below its last stream id)
        frame = hyperframe.frame.GoAwayFrame(0, last_stream_id=last_stream_id, error_code=0)
        peer.flush()
        peer.writer.write(frame.serialize())
        peer.goaway_sent = True

    def freeze(self) -> None:
        """The connections open now go silent, their sockets open: what comes is read and
        nothing answered (a frozen process, a flow a NAT dropped). New ones are served."""
        for peer in self.peers:
            peer.frozen = True

    def drop(self, peer: _Peer) -> None:
        """The connection is closed (a FIN), with no GOAWAY: a restart, a load balancer's idle
        timeout."""
        peer.writer.close()

    def kill(self, peer: _Peer) -> None:
        """The connection dies (no GOAWAY, streams in flight)."""
        transport: Any = peer.writer.transport
        transport.abort()
