""":class:`FaultProxy`: a TCP proxy on 127.0.0.1 in front of any server, with faults switched at
run time: added latency per direction, blackhole, reset, close after N bytes, refuse.

    async with FaultProxy("127.0.0.1", 5432) as proxy:
        dsn = f"postgresql://...@127.0.0.1:{proxy.port}/db"
        proxy.latency_down = 0.05      # every byte from the server arrives 50 ms late
        proxy.reset_all()              # every open connection gets a TCP RST
        await proxy.set_refusing(True) # new connections: ECONNREFUSED

Faults:

* ``latency_up`` / ``latency_down``: seconds added to every chunk client -> server / server ->
  client (order kept; throughput unchanged).
* ``blackhole``: accepted and read, nothing forwarded (either way) while it is on: the peers
  see silence, as behind a dead route.
* ``close_after_bytes``: each connection is closed (FIN both ways) once this many bytes, both
  directions together, were forwarded; the chunk crossing the limit is cut at it.
* :meth:`FaultProxy.reset_all`: every open connection is reset (``SO_LINGER`` 0, then closed).
* :meth:`FaultProxy.set_refusing`: stop listening (connects fail with ``ConnectionRefusedError``)
  or listen again on the same port.

Rules of this module
--------------------
* Listen on 127.0.0.1 only (a ValueError otherwise); the target may be any host.
* Methods run on the proxy's event loop (from another thread: ``ServerThread.call``); fault
  attributes are plain values read at each chunk, so setting them from another thread is safe.
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

from ._serving import LoopbackServer, stop_accepting
from .sim.server import LOCALHOST, check_host, reset

__all__ = ["FaultProxy", "ProxyStats"]

_END = object()  # (queued after the last chunk of a direction: close the link)


@dataclasses.dataclass(frozen=True, slots=True)
class ProxyStats:
    """A snapshot of a proxy's counters (``FaultProxy.stats()``)."""

    connections_accepted: int
    connections_open: int
    connections_reset: int
    bytes_up: int
    bytes_down: int


class _Link:
    """One proxied connection: the client's streams and the target's."""

    def __init__(self, client: asyncio.StreamWriter, target: asyncio.StreamWriter) -> None:
        self.writers = (client, target)
        self.forwarded = 0
        self.closed = False

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            for writer in self.writers:
                writer.close()

    def reset(self) -> None:
        self.closed = True
        for writer in self.writers:
            reset(writer)


class FaultProxy(LoopbackServer):
    """A proxy to ``target_host:target_port``, listening on 127.0.0.1 (``port``: 0 picks one)."""

    def __init__(
        self, target_host: str, target_port: int, *, host: str = LOCALHOST, port: int = 0
    ) -> None:
        check_host(host, "FaultProxy")
        self.target = (target_host, target_port)
        self.host = host
        self._port = port
        self.latency_up = 0.0
        self.latency_down = 0.0
        self.blackhole = False
        self.close_after_bytes: int | None = None
        self._server: asyncio.Server | None = None
        self._links: set[_Link] = set()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._closing = False
        self._accepted = 0
        self._resets = 0
        self._bytes = [0, 0]  # up, down

    async def start(self) -> None:
        self._server = await self._listen(self._handle)

    async def close(self) -> None:
        """Stop listening and close every proxied connection."""
        self._closing = True
        await self._stop_listening()
        for link in list(self._links):
            link.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    # ------------------------------------------------------------------ faults

    def set_latency(self, up: float | None = None, down: float | None = None) -> None:
        """Seconds added client -> server (``up``) and server -> client (``down``)."""
        if up is not None:
            self.latency_up = up
        if down is not None:
            self.latency_down = down

    def reset_all(self) -> int:
        """Reset every open connection now (both sides see a TCP RST); how many there were."""
        links = list(self._links)
        for link in links:
            link.reset()
        self._links.clear()
        self._resets += len(links)
        return len(links)

    async def set_refusing(self, refusing: bool) -> None:
        """Stop listening (new connections are refused) or listen again on the same port."""
        if refusing:
            await self._stop_listening()
        elif self._server is None and not self._closing:
            self._server = await self._listen(self._handle)

    async def _stop_listening(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            await stop_accepting(server)
            await server.wait_closed()

    def stats(self) -> ProxyStats:
        return ProxyStats(
            connections_accepted=self._accepted,
            connections_open=len(self._links),
            connections_reset=self._resets,
            bytes_up=self._bytes[0],
            bytes_down=self._bytes[1],
        )

    # ------------------------------------------------------------------ forwarding

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            self._accepted += 1
            try:
                async with asyncio.timeout(10):
                    up_reader, up_writer = await asyncio.open_connection(*self.target)
            except (OSError, TimeoutError):
                reset(writer)
                return
            link = _Link(writer, up_writer)
            self._links.add(link)
            try:
                await asyncio.gather(
                    self._pump(link, reader, up_writer, 0),
                    self._pump(link, up_reader, writer, 1),
                )
            finally:
                self._links.discard(link)
                link.close()
        except asyncio.CancelledError:
            if not self._closing:
                raise
            # (close() cancelled it: end quietly, asyncio's stream callback logs a cancellation)
        finally:
            self._tasks.discard(task)

    async def _pump(
        self,
        link: _Link,
        source: asyncio.StreamReader,
        sink: asyncio.StreamWriter,
        direction: int,
    ) -> None:
        """Forward ``source`` to ``sink`` (direction 0: up, 1: down) until either side ends."""
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[float, object]] = asyncio.Queue()
        sender = loop.create_task(self._send(link, queue, sink, direction))
        try:
            while not link.closed:
                try:
                    data = await source.read(65536)
                except OSError:
                    data = b""
                if not data:
                    break
                if self.blackhole:
                    continue
                latency = self.latency_up if direction == 0 else self.latency_down
                limit = self.close_after_bytes
                if limit is not None:
                    data = data[: max(0, limit - link.forwarded)]
                link.forwarded += len(data)
                if data:
                    queue.put_nowait((loop.time() + latency, data))
                if limit is not None and link.forwarded >= limit:
                    break
            queue.put_nowait((0.0, _END))
            await sender
        finally:
            sender.cancel()
            await asyncio.gather(sender, return_exceptions=True)

    async def _send(
        self,
        link: _Link,
        queue: asyncio.Queue[tuple[float, object]],
        sink: asyncio.StreamWriter,
        direction: int,
    ) -> None:
        loop = asyncio.get_running_loop()
        while True:
            due, data = await queue.get()
            if data is _END:
                link.close()  # (the other direction's reader sees the end too)
                return
            assert isinstance(data, bytes)
            delay = due - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            if link.closed:
                return
            sink.write(data)
            self._bytes[direction] += len(data)
            try:
                await sink.drain()
            except OSError:
                link.close()
                return
