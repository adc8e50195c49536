""":class:`SimServer`: a real TCP server on 127.0.0.1 that behaves like a database under load.

It speaks the protocol of :mod:`.protocol` (requests are echoed) with the behaviour set by
:class:`~.settings.SimSettings`: handshake latency, service times, ``max_connections``, a
server-wide concurrency limit (the "cores": what makes a pool size optimal), fault injection and
multiplexing. Faults can also be switched on at run time: :meth:`SimServer.stall`,
:meth:`SimServer.refuse_new`, :meth:`SimServer.goaway`, :meth:`SimServer.set_max_streams`.

Rules of this module
--------------------
* Bind 127.0.0.1 only: any other host is a ValueError.
* Every method runs on the server's event loop (from another thread: ``ServerThread.call``),
  except :meth:`SimServer.stats`, which only reads counters.
* The concurrency limit is FIFO across all connections: a request is served in arrival order.
* A dropped request or connection is reset (``SO_LINGER`` 0, then closed), never answered.
* ``GOAWAY`` drains: it goes out before the response that set it off (the client knows before
  it can reuse the connection), requests that arrive after it (sent before the client read it)
  are served, and the connection closes once it has had nothing in flight for
  :data:`GOAWAY_GRACE` seconds (or when the client closes it), so that no request in transit
  meets a closed socket.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import heapq
import random
import socket
import struct
from typing import Any

from .._serving import LoopbackServer, stop_accepting
from .protocol import HEADER, FrameType, ProtocolError, encode, parse_header, u32
from .settings import SimChange, SimSettings, SimStats, draw_service_time

__all__ = ["SimServer"]

LOCALHOST = "127.0.0.1"
#: seconds a connection that announced ``GOAWAY`` stays open with nothing in flight, for the
#: requests its client sent before reading the ``GOAWAY``
GOAWAY_GRACE = 0.05


def check_host(host: str, what: str) -> None:
    if host != LOCALHOST:
        raise ValueError(f"{what} binds {LOCALHOST} only, not {host!r}")


def reset(writer: asyncio.StreamWriter) -> None:
    """Close ``writer``'s connection with a reset (RST) instead of a FIN."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


class _Cores:
    """The server's "cores": a FIFO queue with ``limit`` servers (None: no limit), computed
    ahead. A request arriving at ``t`` starts when the earliest core is free (never before
    ``t``) and holds it for its service time, so the capacity is exactly ``limit`` requests per
    mean service time, however late the event loop's timers fire."""

    def __init__(self, limit: int | None) -> None:
        self.limit = limit
        self.free_at: list[float] = []  # a heap: when each busy core is next free
        self.outstanding = 0  # requests booked and not yet finished
        self.peak = 0

    def book(self, now: float, service: float) -> float:
        """Book a request arriving ``now``; returns when its service ends."""
        self.outstanding += 1
        self.peak = max(self.peak, self.in_service)
        if self.limit is None:
            return now + service
        if len(self.free_at) < self.limit:
            done = now + service
            heapq.heappush(self.free_at, done)
            return done
        start = max(now, self.free_at[0])
        heapq.heapreplace(self.free_at, start + service)
        return start + service

    def finish(self) -> None:
        self.outstanding -= 1

    def set_limit(self, limit: int | None) -> None:
        """``limit`` cores from now. Fewer: the requests booked keep their times, and the next
        one starts when no more than ``limit - 1`` of them are left in service (the heap keeps
        the ``limit`` latest ends). More: the next ones start at once while cores are free."""
        self.limit = limit
        if limit is not None:
            free_at = self.free_at
            while len(free_at) > limit:
                heapq.heappop(free_at)

    @property
    def in_service(self) -> int:
        n = self.outstanding
        return n if self.limit is None else min(n, self.limit)

    @property
    def queued(self) -> int:
        return 0 if self.limit is None else max(0, self.outstanding - self.limit)


class _Session:
    """One accepted connection."""

    def __init__(self, writer: asyncio.StreamWriter, doomed: bool) -> None:
        self.writer = writer
        self.doomed = doomed
        self.in_flight: set[int] = set()
        self.served = 0
        self.going_away = False
        self.closed = False
        #: the timer that closes a going-away connection left with nothing in flight
        self.closer: asyncio.TimerHandle | None = None
        #: stream id -> the timer that answers it, and whether it still holds a core
        self.timers: dict[int, tuple[asyncio.TimerHandle, bool]] = {}

    def send(self, kind: FrameType, stream_id: int, payload: bytes = b"") -> None:
        if not self.closed and not self.writer.is_closing():
            self.writer.write(encode(kind, stream_id, payload))

    def close(self) -> None:
        if self.closer is not None:
            self.closer.cancel()
            self.closer = None
        if not self.closed:
            self.closed = True
            self.writer.close()


class SimServer(LoopbackServer):
    """The simulated server. ``async with SimServer(SimSettings(...)) as server:`` starts it;
    connect to ``server.port`` on 127.0.0.1 (or use :func:`~.client.sim_async_connect`)."""

    def __init__(
        self, settings: SimSettings | None = None, *, host: str = LOCALHOST, port: int = 0
    ) -> None:
        check_host(host, "SimServer")
        self.settings = settings if settings is not None else SimSettings()
        self.host = host
        self._port = port
        self._rng = random.Random(self.settings.seed)
        self._max_streams = self.settings.max_streams
        self._cores = _Cores(self.settings.concurrency)
        # what a SimChange may change while the server runs (the settings are where it starts)
        self._service_time = self.settings.service_time
        self._drop_request = self.settings.drop_request_fraction
        self._drop_connection = self.settings.drop_connection_fraction
        self._scheduled: list[asyncio.TimerHandle] = []
        self._late = 0.0  # how late the loop's timers fire, on average (compensated)
        self._sessions: set[_Session] = set()
        self._handlers: set[asyncio.Task[Any]] = set()
        self._server: asyncio.Server | None = None
        self._stalls: list[tuple[float, float]] = []
        self._refusals: list[tuple[float, float]] = []
        self._counts = collections.Counter[str]()
        self._peak_open = 0
        self._closing = False

    # ------------------------------------------------------------------ life

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._server = await self._listen(self._handle)
        now = loop.time()
        self._stalls = [(now + s, now + s + d) for s, d in self.settings.stall_windows]
        self._refusals = [(now + s, now + s + d) for s, d in self.settings.refuse_windows]
        self._scheduled = [
            loop.call_at(now + change.at, self.change, change) for change in self.settings.schedule
        ]

    async def close(self) -> None:
        """Stop listening and close every connection (requests in flight are not answered)."""
        self._closing = True
        for handle in self._scheduled:
            handle.cancel()
        if self._server is not None:
            await stop_accepting(self._server)
        for session in list(self._sessions):
            session.close()
        for task in list(self._handlers):
            task.cancel()
        await asyncio.gather(*self._handlers, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    @property
    def max_streams(self) -> int:
        return self._max_streams

    # ------------------------------------------------------------------ run-time controls

    def set_max_streams(self, n: int) -> None:
        """A new stream limit for every connection, announced now in a ``SETTINGS`` frame."""
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"set_max_streams(n=...) must be an int >= 1, got {n!r}")
        self._max_streams = n
        for session in self._sessions:
            session.send(FrameType.SETTINGS, 0, u32(n))

    def change(self, change: SimChange) -> None:
        """Apply ``change`` now (its ``at`` is the schedule's, not read here): new cores, service
        time or failure rates for the requests and connections that come from now on."""
        if change.concurrency is not None:
            self._cores.set_limit(change.concurrency)
        if change.service_time is not None:
            self._service_time = change.service_time
        if change.drop_request_fraction is not None:
            self._drop_request = change.drop_request_fraction
        if change.drop_connection_fraction is not None:
            self._drop_connection = change.drop_connection_fraction

    @property
    def concurrency(self) -> int | None:
        """The server's cores now."""
        return self._cores.limit

    def goaway(self, reason: str = "server closing") -> None:
        """Every open connection announces ``GOAWAY``, then closes once its requests are done."""
        for session in list(self._sessions):
            self._goaway(session, reason)

    def stall(self, duration: float) -> None:
        """Answer nothing (greetings, responses) for ``duration`` seconds from now."""
        now = asyncio.get_running_loop().time()
        self._stalls.append((now, now + duration))

    def refuse_new(self, duration: float) -> None:
        """Refuse new connections for ``duration`` seconds from now."""
        now = asyncio.get_running_loop().time()
        self._refusals.append((now, now + duration))

    def stats(self) -> SimStats:
        c = self._counts
        return SimStats(
            connections_open=len(self._sessions),
            connections_peak=self._peak_open,
            connections_accepted=c["accepted"],
            connections_refused=c["refused"],
            connections_dropped=c["connections_dropped"],
            requests_served=c["served"],
            requests_dropped=c["requests_dropped"],
            streams_refused=c["streams_refused"],
            in_service=self._cores.in_service,
            queued=self._cores.queued,
            peak_in_service=self._cores.peak,
            goaways_sent=c["goaways"],
        )

    # ------------------------------------------------------------------ connections

    def _refusal(self) -> str | None:
        now = asyncio.get_running_loop().time()
        if any(start <= now < end for start, end in self._refusals):
            return "not accepting new connections"
        limit = self.settings.max_connections
        if limit is not None and len(self._sessions) >= limit:
            return f"too many connections (max_connections={limit})"
        return None

    def _stall_end(self, now: float) -> float | None:
        ends = [end for start, end in self._stalls if start <= now < end]
        return max(ends) if ends else None

    async def _wait_stalls(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            now = loop.time()
            ends = [end for start, end in self._stalls if start <= now < end]
            if not ends:
                return
            await asyncio.sleep(max(ends) - now)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        try:
            reason = self._refusal()
            if reason is not None:
                self._counts["refused"] += 1
                writer.write(encode(FrameType.REFUSED, 0, reason.encode()))
                with contextlib.suppress(OSError):
                    await writer.drain()
                writer.close()
            else:
                await self._session(reader, writer)
            # Its end retrieved: a connection the client reset leaves its error on the stream's
            # close future too, which asyncio reports as "never retrieved" when the cycle
            # collector frees the future before the protocol that would have read it.
            with contextlib.suppress(OSError, TimeoutError):
                await asyncio.wait_for(writer.wait_closed(), 1.0)
        except asyncio.CancelledError:
            if not self._closing:
                raise
            # (close() cancelled it: end quietly, asyncio's stream callback logs a cancellation)
        finally:
            self._handlers.discard(task)

    async def _session(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._counts["accepted"] += 1
        doomed = self._rng.random() < self._drop_connection
        session = _Session(writer, doomed)
        self._sessions.add(session)
        self._peak_open = max(self._peak_open, len(self._sessions))
        try:
            await asyncio.sleep(self.settings.handshake_latency)
            await self._wait_stalls()
            session.send(FrameType.HELLO, 0, u32(self._max_streams))
            while not session.closed:
                header = await reader.readexactly(HEADER.size)
                kind, stream_id, length = parse_header(header)
                payload = await reader.readexactly(length)
                if kind is not FrameType.REQUEST:
                    raise ProtocolError(f"a client may send requests only, not {kind.name}")
                self._request(session, stream_id, payload)
        except (OSError, EOFError, ProtocolError):
            pass  # (the client went, or spoke out of turn: close)
        finally:
            self._sessions.discard(session)
            for handle, serving in session.timers.values():
                handle.cancel()
                if serving:
                    self._cores.finish()
            session.timers.clear()
            session.close()

    def _request(self, session: _Session, stream_id: int, payload: bytes) -> None:
        if session.doomed or self._rng.random() < self._drop_request:
            self._counts["connections_dropped" if session.doomed else "requests_dropped"] += 1
            session.closed = True
            reset(session.writer)
            return
        refusal = None
        if stream_id in session.in_flight:
            refusal = f"stream {stream_id} is already in flight"
        elif len(session.in_flight) >= self._max_streams:
            refusal = f"over the stream limit of {self._max_streams}"
        if refusal is not None:
            self._counts["streams_refused"] += 1
            session.send(FrameType.STREAM_REFUSED, stream_id, refusal.encode())
            return
        session.in_flight.add(stream_id)
        if session.closer is not None:  # (going away: sent before its client read the GOAWAY)
            session.closer.cancel()
            session.closer = None
        service = draw_service_time(self._service_time, self._rng)
        loop = asyncio.get_running_loop()
        now = loop.time()
        done = self._cores.book(self._stall_end(now) or now, service)
        at = done - self._late
        handle = loop.call_at(at, self._served, session, stream_id, payload, at)
        session.timers[stream_id] = (handle, True)

    def _served(self, session: _Session, stream_id: int, payload: bytes, at: float) -> None:
        """A request's service ended (its timer was set early by the usual lateness)."""
        loop = asyncio.get_running_loop()
        now = loop.time()
        self._late = min(0.9 * self._late + 0.1 * max(0.0, now - at), 0.002)
        self._cores.finish()
        self._respond(session, stream_id, payload)

    def _respond(self, session: _Session, stream_id: int, payload: bytes) -> None:
        """Answer, unless the server is stalled: then answer when the stall ends."""
        loop = asyncio.get_running_loop()
        stall = self._stall_end(loop.time())
        if stall is not None:
            handle = loop.call_at(stall, self._respond, session, stream_id, payload)
            session.timers[stream_id] = (handle, False)
            return
        session.timers.pop(stream_id, None)
        session.in_flight.discard(stream_id)
        if session.closed:
            return
        session.served += 1
        after = self.settings.goaway_after_requests
        if after is not None and session.served >= after:  # (announced before this answer)
            self._goaway(session, f"served {after} requests")
        session.send(FrameType.RESPONSE, stream_id, payload)
        self._counts["served"] += 1
        self._close_when_drained(session)

    def _goaway(self, session: _Session, reason: str) -> None:
        if session.going_away or session.closed:
            return
        session.going_away = True
        self._counts["goaways"] += 1
        session.send(FrameType.GOAWAY, 0, reason.encode())
        self._close_when_drained(session)

    def _close_when_drained(self, session: _Session) -> None:
        """A going-away connection with nothing in flight closes after :data:`GOAWAY_GRACE`
        seconds, unless a request arrives meanwhile."""
        if session.going_away and not session.in_flight and session.closer is None:
            loop = asyncio.get_running_loop()
            session.closer = loop.call_later(GOAWAY_GRACE, self._close_drained, session)

    @staticmethod
    def _close_drained(session: _Session) -> None:
        session.closer = None
        if not session.in_flight:
            session.close()
