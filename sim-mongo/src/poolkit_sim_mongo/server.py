""":class:`SimMongoServer`: a simulated MongoDB load balancer on 127.0.0.1, fronting several
simulated services (mongos processes), each with its own ObjectId ``serviceId``.

Each accepted TCP connection is assigned to one service (round robin by default) for its
whole life, as a layer-4 load balancer does: its ``hello`` reply carries that service's
``serviceId`` and ``connectionId``, and the cursors and transactions it opens live in that
service only. The data is one cluster's, shared by all (:class:`~.store.SimMongoStore`; pass
one store to several servers to make them one cluster). With ``services=1`` the server is one
service alone: put several such servers behind HAProxy (:mod:`.haproxy`) and the real load
balancer does the assigning.

The server speaks OP_MSG (its own :mod:`.framing`, not the driver's), and answers a legacy OP_QUERY
``hello``/``isMaster`` with OP_REPLY. Faults, switchable at run time: :meth:`fail_command`
(the state-change error codes with the labels a server adds, a close before the reply, a
delay), :meth:`slow_hello`, :meth:`close_connections`; and MongoDB's own ``configureFailPoint``
command (``failCommand``), which drivers' tests send.

Rules of this module
--------------------
* Bind 127.0.0.1 only: any other host is a ValueError.
* Every method runs on the server's event loop (from another thread: ``ServerThread.call``),
  except :meth:`SimMongoServer.stats` and :meth:`SimMongoServer.connections`, which copy.
* A connection serves its commands one at a time, in order; one sent with ``moreToCome`` is
  run and not answered.
* A fault closes a connection without answering the command it caught; everything else is
  answered (with an error document if need be). A refused handshake (error 354) closes too.
* A monitor's awaitable ``hello`` (``maxAwaitTimeMS``) waits that long (10 s at most): nothing
  here ever changes, and answering at once would have the monitor ask again at once.
* A ``getMore`` of a change stream's cursor (tailable, awaitData) that finds nothing waits, as a
  server's does, until the store's change log grows (then it runs again) or its ``maxTimeMS``
  passes (1 s without one; a driver's ``maxAwaitTimeMS``), and answers an empty batch then.
  The wait polls :meth:`~.changes.ChangeLog.position` every ``AWAIT_DATA_POLL`` seconds: the
  store may be shared by servers on other threads' loops, and a poll needs nothing of theirs
  (no waiter to register or wake across loops, none left behind when a wait is cancelled).
  :meth:`~.services.SimService.execute` stays synchronous; a fault catches the ``getMore``
  before it runs, as any command. No other cursor's ``getMore`` waits.
* Fail points are the server's, over all its services (a ``configureFailPoint`` command too)
  unless one names a ``service``.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import ipaddress
import itertools
import random
import socket
import ssl
import struct
from collections.abc import Iterable
from typing import Any

from bson.objectid import ObjectId

from poolkit.testing import LoopbackServer, stop_accepting

from .faults import HANDSHAKE_COMMANDS, FailPoint, error_document
from .framing import OP_MSG, OP_QUERY, Frame, command_frame, read_frame, reply_frame
from .framing import FrameError as ProtocolError
from .scram import SimUsers
from .services import Sequences, SimService
from .settings import ConnectionInfo, ServiceStats, SimMongoSettings, SimMongoStats
from .store import SimMongoStore

__all__ = ["SimMongoServer"]

LOCALHOST = "127.0.0.1"
PROXY_V2_SIGNATURE = b"\r\n\r\n\x00\r\nQUIT\n"
PROXY_HEADER_TIMEOUT = 10.0
MAX_AWAIT_MS = 10_000.0
AWAIT_DATA_MS = 1000.0  # (a change stream's getMore without maxTimeMS waits this long)
AWAIT_DATA_POLL = 0.005  # (s: how often a waiting getMore looks at the change log)
MAX_KEPT = 10_000  # (connections() lists the last ones accepted)


class _Connection:
    def __init__(
        self, info: ConnectionInfo, service: SimService, writer: asyncio.StreamWriter
    ) -> None:
        self.info = info
        self.service = service
        self.writer = writer
        self.closed = False

    def close(self, *, reset: bool = False) -> None:
        if self.closed:
            return
        self.closed = True
        if reset:
            sock = self.writer.get_extra_info("socket")
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.writer.transport.abort()
        else:
            self.writer.close()


class SimMongoServer(LoopbackServer):
    """The simulated load balancer and its services (see the module's doc).
    ``async with SimMongoServer() as server:`` starts it; or ``server.start_in_thread()``."""

    def __init__(
        self,
        settings: SimMongoSettings | None = None,
        *,
        store: SimMongoStore | None = None,
        host: str = LOCALHOST,
        port: int = 0,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        if host != LOCALHOST:
            raise ValueError(f"SimMongoServer binds {LOCALHOST} only, not {host!r}")
        self.settings = settings if settings is not None else SimMongoSettings()
        self.store = store if store is not None else SimMongoStore()
        self.host = host
        self._port = port
        #: a TLS server context: the server speaks TLS only (as mongod with net.tls.mode
        #: requireTLS)
        self.tls = tls
        self._rng = random.Random(self.settings.seed)
        ids = self.settings.service_ids or tuple(ObjectId() for _ in range(self.settings.services))
        settings = self.settings
        #: the cluster's users (one salt per user and mechanism, as config servers keep them)
        self.users = SimUsers(settings.users, settings.auth_mechanisms, settings.scram_iterations)
        self._services = tuple(
            SimService(i, service_id, settings, self.store, self._rng, self.users)
            for i, service_id in enumerate(ids)
        )
        self._next_service = itertools.count()
        self._request_ids = itertools.count(1)
        self._connections: set[_Connection] = set()
        self._all: collections.deque[ConnectionInfo] = collections.deque(maxlen=MAX_KEPT)
        self._handlers: set[asyncio.Task[Any]] = set()
        self._writers: set[asyncio.StreamWriter] = set()  # (every accepted, until closed)
        self._fail_points: list[FailPoint] = []
        self._counts = collections.Counter[str]()
        self._server: asyncio.Server | None = None
        self._closing = False

    # ------------------------------------------------------------------ life

    async def start(self) -> None:
        self._server = await self._listen(self._accepted, self.tls)

    async def close(self) -> None:
        """Stop listening and close every connection."""
        self._closing = True
        if self._server is not None:
            await stop_accepting(self._server)  # (late connections reach _accepted: closed)
        for conn in list(self._connections):
            conn.close()
        for task in list(self._handlers):
            task.cancel()
        await asyncio.gather(*self._handlers, return_exceptions=True)
        # (a connection accepted just now has a handler that never ran: close it here)
        for writer in list(self._writers):
            writer.transport.abort()
        self._writers.clear()
        if self._server is not None:
            await self._server.wait_closed()
        await asyncio.sleep(0)  # (the transports' closing callbacks run)

    @property
    def uri(self) -> str:
        """A connection string for a driver in load-balanced mode."""
        return f"mongodb://{self.address}/?loadBalanced=true"

    @property
    def service_ids(self) -> tuple[ObjectId, ...]:
        return tuple(s.service_id for s in self._services)

    # ------------------------------------------------------------------ faults

    def fail_command(
        self,
        *commands: str,
        error_code: int | None = None,
        error_labels: Iterable[str] | None = None,
        errmsg: str | None = None,
        close_connection: bool = False,
        delay: float = 0.0,
        times: int | None = 1,
        app_name: str | None = None,
        service: int | None = None,
    ) -> FailPoint:
        """Catch the next ``times`` (None: all, until :meth:`clear_faults`) of ``commands``
        (none: any command but the handshake's), on every service or on ``service`` (an
        index), from any client or from ``app_name``'s: delay each ``delay`` seconds, then
        close its connection unanswered (``close_connection``) or answer ``error_code`` (with
        the server's labels unless ``error_labels`` are given). Returns the fail point (its
        ``hits`` count what it caught)."""
        if service is not None and not 0 <= service < len(self._services):
            raise ValueError(f"no service {service!r}: 0..{len(self._services) - 1}")
        point = FailPoint(
            commands=frozenset(commands),
            error_code=error_code,
            error_labels=tuple(error_labels) if error_labels is not None else None,
            errmsg=errmsg,
            close_connection=close_connection,
            delay=delay,
            times=times,
            app_name=app_name,
            service=service,
        )
        self._fail_points.append(point)
        return point

    def slow_hello(
        self,
        delay: float,
        *,
        times: int | None = None,
        app_name: str | None = None,
        service: int | None = None,
    ) -> FailPoint:
        """Delay the reply to ``hello``/``isMaster`` (the handshake) by ``delay`` seconds."""
        return self.fail_command(
            "hello", "isMaster", delay=delay, times=times, app_name=app_name, service=service
        )

    def clear_faults(self) -> None:
        """Remove every fail point (those of ``configureFailPoint`` too)."""
        self._fail_points.clear()

    def close_connections(self, service: int | None = None, *, reset: bool = False) -> int:
        """Close the open connections (of ``service``, an index; None: all) now, with a FIN
        (or a reset); how many. Their cursors go (if so set) and their transactions abort."""
        closed = 0
        for conn in list(self._connections):
            if service is None or conn.service.index == service:
                conn.close(reset=reset)
                closed += 1
        self._counts["closed_by_fault"] += closed
        return closed

    # ------------------------------------------------------------------ stats

    def stats(self) -> SimMongoStats:
        """A snapshot of the counters (callable from any thread)."""
        services = tuple(
            ServiceStats(
                index=s.index,
                service_id=s.service_id,
                connections_open=s.connections_open,
                connections_accepted=s.connections_accepted,
                commands=dict(s.commands),
                cursors_open=len(s.cursors),
                transactions_open=s.transactions_open,
            )
            for s in self._services
        )
        counts = dict(self._counts)
        commands: collections.Counter[str] = collections.Counter()
        for s in services:
            commands.update(s.commands)
        return SimMongoStats(
            services=services,
            connections_open=sum(s.connections_open for s in services),
            connections_accepted=sum(s.connections_accepted for s in services),
            commands=dict(commands),
            fault_hits=counts.get("fault_hits", 0),
            connections_closed_by_fault=counts.get("closed_by_fault", 0),
        )

    def connections(self, *, open_only: bool = False) -> list[ConnectionInfo]:
        """What the server knows of each connection it accepted (the last 10,000), as copies
        (callable from any thread)."""
        return [
            ConnectionInfo(
                c.service, c.connection_id, c.peer, c.hello, c.app_name, c.open, user=c.user
            )
            for c in list(self._all)
            if c.open or not open_only
        ]

    # ------------------------------------------------------------------ connections

    def _assign(self) -> SimService:
        policy = self.settings.policy
        if policy == "random":
            return self._rng.choice(self._services)
        if policy == "least_connections":
            return min(self._services, key=lambda s: (s.connections_open, s.index))
        return self._services[next(self._next_service) % len(self._services)]

    def _accepted(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """A new connection (called as it is accepted: its handler is known from now on)."""
        if self._closing:
            writer.transport.abort()
            return
        self._writers.add(writer)
        task = asyncio.get_running_loop().create_task(self._handle(reader, writer))
        self._handlers.add(task)
        task.add_done_callback(self._handlers.discard)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn: _Connection | None = None
        try:
            host, port = (writer.get_extra_info("peername") or ("?", 0))[:2]
            peer = f"{host}:{port}"
            if self.settings.proxy_protocol:
                async with asyncio.timeout(PROXY_HEADER_TIMEOUT):
                    peer = await read_proxy_header(reader) or peer
            service = self._assign()
            conn = _Connection(service.connection_opened(peer), service, writer)
            self._connections.add(conn)
            self._all.append(conn.info)
            await self._serve(conn, reader)
        except (OSError, EOFError, ProtocolError, TimeoutError, asyncio.LimitOverrunError):
            pass  # (the client went, or spoke out of turn: close)
        except asyncio.CancelledError:
            if not self._closing:
                raise
        finally:
            self._writers.discard(writer)
            if conn is not None:
                self._connections.discard(conn)
                conn.service.connection_closed(conn.info)
                conn.close()
            else:
                writer.close()

    async def _serve(self, conn: _Connection, reader: asyncio.StreamReader) -> None:
        limit = self.settings.max_message_size_bytes
        start = await reader.readexactly(2)  # (the stream's end: IncompleteReadError, an EOF)
        if start == b"\x16\x03":  # a TLS ClientHello: as mongod without TLS ("SSL handshake
            return  # received but server is started without SSL support")
        message = await read_frame(reader, limit, start)
        while True:
            await self._command(conn, message)
            if conn.closed:
                return
            message = await read_frame(reader, limit)

    async def _command(self, conn: _Connection, message: Frame) -> None:
        legacy = message.op_code == OP_QUERY
        if legacy:
            body = dict(message.body.get("$query", message.body))
        elif message.op_code == OP_MSG:
            body = dict(message.body)
        else:
            raise ProtocolError(f"a client sends OP_MSG or OP_QUERY, not opCode {message.op_code}")
        name = next(iter(body), "")
        conn.service.commands[name] += 1
        if name in HANDSHAKE_COMMANDS and conn.info.hello is None:
            conn.info.app_name = app_name(body)  # (a fail point may be for this client's)
        reply: dict[str, Any] | None = None
        if legacy and name not in HANDSHAKE_COMMANDS:
            reply = error_document(352, f"Unsupported OP_QUERY command: {name}")
        elif (point := self._caught(name, conn)) is not None:
            self._counts["fault_hits"] += 1
            if point.delay:
                await asyncio.sleep(point.delay)
            if point.close_connection:
                self._counts["closed_by_fault"] += 1
                conn.close()
                return
            reply = point.reply(name, body)  # (None: only a delay, then run it)
        if reply is None and name in HANDSHAKE_COMMANDS and "maxAwaitTimeMS" in body:
            # a monitor's awaitable hello: nothing changes here, so it waits its whole time (as
            # a server's does) instead of being asked again at once, and again
            await asyncio.sleep(min(float(body["maxAwaitTimeMS"]), MAX_AWAIT_MS) / 1000.0)
        if conn.closed:
            return
        if reply is None:
            if name == "configureFailPoint":
                reply = self._configure(body)
            else:
                reply = await self._execute(conn, name, body, message.sequences)
        if message.more_to_come or conn.closed:
            return
        request_id = next(self._request_ids)
        if legacy:
            data = reply_frame(reply, request_id, message.request_id)
        else:
            data = command_frame(reply, request_id, message.request_id)
        conn.writer.write(data)
        await conn.writer.drain()
        if reply.get("code") == 354:  # (LoadBalancerSupportMismatch closes the connection)
            conn.close()

    async def _execute(
        self, conn: _Connection, name: str, body: dict[str, Any], sequences: Sequences
    ) -> dict[str, Any]:
        """The service's reply to the command; a change stream's ``getMore`` that finds nothing
        waits for a change first (module rules)."""
        service = conn.service
        if name != "getMore" or not service.awaits_data(body):
            return service.execute(conn.info, name, body, sequences)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + await_data_ms(body) / 1000.0
        log = self.store.changes
        while True:
            seen = log.position()  # (before it runs: a change recorded meanwhile is not missed)
            reply = service.execute(conn.info, name, body, sequences)
            if not empty_batch(reply):
                return reply
            while log.position() == seen:
                left = deadline - loop.time()
                if left <= 0 or conn.closed:
                    return reply
                await asyncio.sleep(min(AWAIT_DATA_POLL, left))

    def _caught(self, name: str, conn: _Connection) -> FailPoint | None:
        for point in self._fail_points:
            if point.catches(name, conn.info.app_name, conn.service.index):
                return point
        return None

    def _configure(self, body: dict[str, Any]) -> dict[str, Any]:
        """``configureFailPoint: "failCommand"`` (replacing the one set before this way)."""
        try:
            point = FailPoint.from_command(body)
        except (ValueError, TypeError, KeyError) as exc:
            return error_document(2, str(exc))
        self._fail_points = [p for p in self._fail_points if p.origin != "command"]
        if point is not None:
            self._fail_points.append(point)
        return {"count": 0, "ok": 1.0}


def await_data_ms(get_more: dict[str, Any]) -> float:
    """How long (ms) a change stream's ``getMore`` waits for a change: its ``maxTimeMS``, or
    1000 without one (as a server's ``getMore`` on an awaitData cursor)."""
    max_time = get_more.get("maxTimeMS")
    if isinstance(max_time, bool) or not isinstance(max_time, (int, float)):
        return AWAIT_DATA_MS
    return max(float(max_time), 0.0)


def empty_batch(reply: dict[str, Any]) -> bool:
    """Whether ``reply`` is a successful ``getMore``'s, empty, of a cursor still open."""
    cursor = reply.get("cursor")
    return (
        reply.get("ok") == 1
        and isinstance(cursor, dict)
        and cursor.get("nextBatch") == []
        and cursor.get("id") != 0
    )


def app_name(hello: dict[str, Any]) -> str | None:
    """The ``appName`` of a handshake's client metadata (``client.application.name``)."""
    client = hello.get("client")
    application = client.get("application") if isinstance(client, dict) else None
    name = application.get("name") if isinstance(application, dict) else None
    return name if isinstance(name, str) else None


async def read_proxy_header(reader: asyncio.StreamReader) -> str | None:
    """Read a PROXY protocol header (v1 or v2): the client's ``host:port`` in it, or None (a
    ``LOCAL``/``UNKNOWN`` one: the proxy's own connection). Raises ProtocolError."""
    start = await reader.readexactly(12)
    if start == PROXY_V2_SIGNATURE:
        version_command, family, length = struct.unpack("!BBH", await reader.readexactly(4))
        payload = await reader.readexactly(length)
        if version_command >> 4 != 2:
            raise ProtocolError(f"PROXY v2 header of version {version_command >> 4}")
        if version_command & 0x0F == 0:  # LOCAL
            return None
        if family >> 4 == 1 and length >= 12:  # AF_INET
            host = str(ipaddress.IPv4Address(payload[:4]))
            (port,) = struct.unpack_from("!H", payload, 8)
            return f"{host}:{port}"
        if family >> 4 == 2 and length >= 36:  # AF_INET6
            host = str(ipaddress.IPv6Address(payload[:16]))
            (port,) = struct.unpack_from("!H", payload, 32)
            return f"[{host}]:{port}"
        return None
    if not start.startswith(b"PROXY "):
        raise ProtocolError("expected a PROXY protocol header")
    line = start + await reader.readuntil(b"\r\n")
    if len(line) > 107:
        raise ProtocolError("PROXY v1 header longer than 107 bytes")
    fields = line.decode("ascii", "replace").split()
    if len(fields) == 6 and fields[1] in ("TCP4", "TCP6"):
        return f"{fields[2]}:{fields[4]}" if fields[1] == "TCP4" else f"[{fields[2]}]:{fields[4]}"
    return None
