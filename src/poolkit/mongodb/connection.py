"""A MongoDB connection: OP_MSG over asyncio streams (:class:`AsyncMongoConnection`) or a
blocking socket (:class:`MongoConnection`), established with the ``hello`` handshake, and the
connect functions that give them to :class:`poolkit.AsyncPool` and :class:`poolkit.Pool`.

Rules of this module
--------------------
* Establishing is connect (TCP, TLS) then ``hello``; any network error or timeout in it is a
  :class:`~.errors.HandshakeError` (labelled, clears no pool). In load-balanced mode the
  ``hello`` says ``loadBalanced: true`` and a reply without ``serviceId`` fails with the spec's
  exact message; the connection's ``service_id`` is the reply's.
* Then, given credentials, authentication (:mod:`.auth`; its first step, speculatively, in the
  ``hello``), unmonitored as the ``hello`` is: its failure is
  :class:`~.errors.AuthenticationError`, a network error or timeout in it a
  :class:`~.errors.NetworkError` (no label); both ``after_hello``, with the ``service_id``.
  ``connect_timeout`` bounds the whole establishment.
* One command at a time on a connection (OP_MSG has no multiplexing); a network error breaks
  the connection (``closed``), an ``ok: 0`` reply does not.
* What is sent and checked is decided by :class:`_Protocol` (no I/O), shared by both
  connection classes: they only move bytes.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
import threading
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any

from ..driver import ConnectContext, Established, check_socket, check_timeout
from ._bson import bson
from ._renamed import CONNECT_RENAMED, renamed
from .auth import Credentials, Speculation, authenticate, authenticate_async
from .errors import HandshakeError, LoadBalancerUnsupportedError, NetworkError, OperationFailure
from .handshake import client_metadata, hello_command, opening_hello
from .monitoring import (
    CommandFailedEvent,
    CommandListener,
    CommandStartedEvent,
    CommandSucceededEvent,
    is_sensitive,
    publish,
)
from .wire import MAX_MESSAGE_SIZE, Message, MessageReader, ProtocolError, encode_msg

__all__ = [
    "AsyncMongoConnection",
    "MongoConnection",
    "client_metadata",
    "async_connect",
    "connect",
    "connect_sync",
    "hello_command",
]


class _Protocol:
    """The conversation of one connection, without I/O: request ids, the handshake's checks,
    replies matched to requests and turned into documents or errors."""

    def __init__(
        self,
        address: str,
        load_balanced: bool,
        listeners: tuple[CommandListener, ...] = (),
    ) -> None:
        self.address = address
        self.load_balanced = load_balanced
        self.listeners = listeners
        self.reader = MessageReader()
        self.next_id = 1
        self.hello: dict[str, Any] = {}
        self.service_id: Any = None
        self.max_wire_version = 0
        self.connection_id: Any = None
        self.auth_mechanism: str | None = None

    def request(
        self,
        db: str,
        command: Mapping[str, Any],
        sequences: Mapping[str, Sequence[Mapping[str, Any]]] | None,
    ) -> tuple[int, bytes]:
        if sequences is not None and not isinstance(sequences, Mapping):
            raise TypeError(f"command(sequences=...): a mapping, not {type(sequences).__name__}")
        try:
            request_id = self.next_id
            data = encode_msg({**command, "$db": db}, request_id, sequences=sequences)
        except (bson.errors.InvalidDocument, TypeError, AttributeError) as exc:
            name = next(iter(command), "?")
            raise TypeError(f"command({name!r}): cannot be encoded as BSON: {exc}") from None
        self.next_id += 1
        return request_id, data

    def reply(self, request_id: int, message: Message) -> dict[str, Any]:
        if message.response_to != request_id:
            raise ProtocolError(f"a reply to request {message.response_to}, expected {request_id}")
        body = message.body
        if body.get("ok") != 1 and body.get("ok") is not True:
            raise OperationFailure(body, address=self.address, service_id=self.service_id)
        return body

    def started(self, db: str, command: Mapping[str, Any], request_id: int) -> float:
        """Publish the command's start (with listeners); returns its start time."""
        if self.listeners:
            name = next(iter(command), "")
            shown = {} if is_sensitive(name, command) else {**command, "$db": db}
            publish(
                self.listeners,
                CommandStartedEvent(
                    command_name=name,
                    database_name=db,
                    request_id=request_id,
                    address=self.address,
                    server_connection_id=self.connection_id,
                    service_id=self.service_id,
                    command=shown,
                ),
            )
        return time.perf_counter()

    def ended(
        self,
        db: str,
        command: Mapping[str, Any],
        request_id: int,
        began: float,
        reply: Mapping[str, Any] | None,
        failure: BaseException | None,
    ) -> None:
        if not self.listeners:
            return
        name = next(iter(command), "")
        fields: dict[str, Any] = {
            "command_name": name,
            "database_name": db,
            "request_id": request_id,
            "address": self.address,
            "server_connection_id": self.connection_id,
            "service_id": self.service_id,
            "duration": time.perf_counter() - began,
        }
        if failure is None:
            shown = {} if is_sensitive(name, command) else dict(reply or {})
            publish(self.listeners, CommandSucceededEvent(reply=shown, **fields))
        else:
            publish(self.listeners, CommandFailedEvent(failure=failure, **fields))

    def handshake_done(self, reply: dict[str, Any]) -> None:
        if self.load_balanced and "serviceId" not in reply:
            raise LoadBalancerUnsupportedError(address=self.address)
        self.hello = {k: v for k, v in reply.items() if k != "speculativeAuthenticate"}
        self.service_id = reply.get("serviceId") if self.load_balanced else None
        self.max_wire_version = int(reply.get("maxWireVersion", 0))
        self.connection_id = reply.get("connectionId")


def _network_error(
    address: str, exc: BaseException, service_id: Any, *, after_hello: bool = False
) -> NetworkError:
    timeout = isinstance(exc, TimeoutError | socket.timeout)
    what = "timed out" if timeout else f"failed: {type(exc).__name__}: {exc}".rstrip(": ")
    during = " during authentication" if after_hello else ""
    return NetworkError(
        f"connection to {address} {what}{during}",
        address=address,
        service_id=service_id,
        timeout=timeout,
        after_hello=after_hello,
    )


def _establishing_error(address: str, exc: BaseException, protocol: _Protocol) -> NetworkError:
    """A network error of ``open()``: before the ``hello`` completed a :class:`HandshakeError`."""
    error = _network_error(address, exc, protocol.service_id, after_hello=bool(protocol.hello))
    if protocol.hello:
        return error
    return HandshakeError(f"establishing a {error}", address=address, timeout=error.timeout)


#: what breaks a connection (TimeoutError is an OSError; asyncio's is the builtin one)
_NETWORK = (OSError, EOFError, asyncio.IncompleteReadError, ProtocolError, TimeoutError)


class _Handshaken:
    """What both connection classes tell of their handshake."""

    _protocol: _Protocol
    #: the client closed it (a command cancelled mid-way, ``close()``): using it then is not
    #: the server's failure, and clears nothing
    _closed_here = False

    @property
    def address(self) -> str:
        return self._protocol.address

    @property
    def service_id(self) -> Any:
        """The ``serviceId`` of the ``hello`` reply (load-balanced mode), else None."""
        return self._protocol.service_id

    @property
    def max_wire_version(self) -> int:
        return self._protocol.max_wire_version

    @property
    def hello(self) -> dict[str, Any]:
        """The handshake's ``hello`` reply (without ``speculativeAuthenticate``: the
        authentication's)."""
        return self._protocol.hello

    @property
    def auth_mechanism(self) -> str | None:
        """The mechanism the connection authenticated with (None: no credentials)."""
        return self._protocol.auth_mechanism

    @property
    def closed(self) -> bool:
        raise NotImplementedError

    def _closed_error(self) -> NetworkError:
        message = f"connection to {self.address} is closed"
        return NetworkError(
            message, address=self.address, service_id=self.service_id, local=self._closed_here
        )

    def __repr__(self) -> str:
        service = f" service={self.service_id}" if self.service_id is not None else ""
        return f"<{type(self).__name__} {self.address}{service}{' closed' if self.closed else ''}>"


class AsyncMongoConnection(_Handshaken):
    """A connection on asyncio streams. Open one with :meth:`open` (connect and handshake)."""

    def __init__(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, protocol: _Protocol
    ) -> None:
        self._reader = reader
        self._writer = writer
        self._protocol = protocol
        self._broken = False
        self._lock = asyncio.Lock()

    @classmethod
    async def open(
        cls,
        host: str,
        port: int = 27017,
        *,
        load_balanced: bool = False,
        app_name: str | None = None,
        tls: ssl.SSLContext | None = None,
        connect_timeout: float | None = 20.0,
        listeners: Iterable[CommandListener] = (),
        username: str | None = None,
        password: str | None = None,
        auth_source: str = "admin",
        auth_mechanism: str | None = None,
    ) -> AsyncMongoConnection:
        """Connect, ``hello``, and authenticate if given a user (see the module's rules)."""
        credentials = Credentials.of(username, password, auth_source, auth_mechanism)
        protocol, hello, speculation = _opening(
            host, port, load_balanced, app_name, listeners, credentials
        )
        address = protocol.address
        writer: asyncio.StreamWriter | None = None
        try:
            async with asyncio.timeout(connect_timeout):
                reader, writer = await asyncio.open_connection(
                    host, port, ssl=tls, server_hostname=host if tls else None
                )
                conn = cls(reader, writer, protocol)
                reply = await conn._exchange("admin", hello)
                protocol.handshake_done(reply)
                if credentials is not None:
                    protocol.auth_mechanism = await authenticate_async(
                        conn._exchange,
                        credentials,
                        reply,
                        address=address,
                        service_id=protocol.service_id,
                        speculation=speculation,
                    )
        except _NETWORK as exc:
            if writer is not None:
                writer.close()
            raise _establishing_error(address, exc, protocol) from exc
        except BaseException:
            if writer is not None:
                writer.close()
            raise
        return conn

    @property
    def closed(self) -> bool:
        return self._broken or self._writer.is_closing() or self._reader.at_eof()

    def check_idle(self) -> None:
        """Raise ``ConnectionError`` if the server closed this idle connection or sent bytes
        nobody asked for (as the loop has seen so far: the ``check`` hook lets it turn)."""
        if self.closed:
            raise ConnectionError(f"{self!r}: the server closed the connection")
        if len(getattr(self._reader, "_buffer", b"")):  # (StreamReader has no public peek)
            raise ConnectionError(f"{self!r}: unexpected data waiting on an idle connection")

    async def command(
        self,
        db: str,
        command: Mapping[str, Any],
        *,
        sequences: Mapping[str, Sequence[Mapping[str, Any]]] | None = None,
        timeout: float | None = None,
    ) -> dict[str, Any]:
        """Run ``command`` on ``db``; its reply, or :class:`~.errors.OperationFailure`
        (``ok: 0``) or :class:`~.errors.NetworkError` (the connection is then broken).
        ``timeout``: seconds for the round trip (None: no limit); when it passes, a
        ``NetworkError`` with ``timeout`` set."""
        if timeout is not None:
            timeout = check_timeout(timeout, "command(timeout=...)")
        if self.closed:
            raise self._closed_error()
        protocol = self._protocol
        request_id, data = protocol.request(db, command, sequences)
        began = protocol.started(db, command, request_id)
        try:
            async with self._lock, asyncio.timeout(timeout):
                reply = await self._round_trip(request_id, data)
        except _NETWORK as exc:
            self._broken = True
            self._writer.close()
            error = _network_error(self.address, exc, self.service_id)
            protocol.ended(db, command, request_id, began, None, error)
            raise error from exc
        except OperationFailure as exc:
            protocol.ended(db, command, request_id, began, None, exc)
            raise
        except asyncio.CancelledError as exc:
            self._broken = self._closed_here = True  # (mid-command: the reply would come to
            self._writer.close()  # the next caller)
            protocol.ended(db, command, request_id, began, None, exc)
            raise
        protocol.ended(db, command, request_id, began, reply, None)
        return reply

    async def _exchange(self, db: str, command: Mapping[str, Any]) -> dict[str, Any]:
        """A command without monitoring (the handshake's)."""
        return await self._round_trip(*self._protocol.request(db, command, None))

    async def _round_trip(self, request_id: int, data: bytes) -> dict[str, Any]:
        self._writer.write(data)
        await self._writer.drain()
        while True:
            messages = self._protocol.reader.feed(
                await self._reader.read(max(self._protocol.reader.needed(), 65536)) or _eof()
            )
            if messages:
                return self._protocol.reply(request_id, messages[0])

    async def aclose(self) -> None:
        self._broken = self._closed_here = True
        self._writer.close()
        with contextlib.suppress(OSError):
            await self._writer.wait_closed()


def _opening(
    host: str,
    port: int,
    load_balanced: bool,
    app_name: str | None,
    listeners: Iterable[CommandListener],
    credentials: Credentials | None,
) -> tuple[_Protocol, dict[str, Any], Speculation | None]:
    """What both ``open`` methods start from: the connection's protocol, its ``hello`` (asking
    for the user's mechanisms and starting the authentication when there is a user)."""
    hello, speculation = opening_hello(credentials, load_balanced=load_balanced, app_name=app_name)
    return _Protocol(f"{host}:{port}", load_balanced, tuple(listeners)), hello, speculation


def _eof() -> bytes:
    raise EOFError("the server closed the connection")


class MongoConnection(_Handshaken):
    """A connection on a blocking socket (for :class:`poolkit.Pool`)."""

    def __init__(self, sock: socket.socket, protocol: _Protocol) -> None:
        self._sock = sock
        self._protocol = protocol
        self._broken = False
        self._lock = threading.Lock()

    @classmethod
    def open(
        cls,
        host: str,
        port: int = 27017,
        *,
        load_balanced: bool = False,
        app_name: str | None = None,
        tls: ssl.SSLContext | None = None,
        connect_timeout: float | None = 20.0,
        listeners: Iterable[CommandListener] = (),
        username: str | None = None,
        password: str | None = None,
        auth_source: str = "admin",
        auth_mechanism: str | None = None,
    ) -> MongoConnection:
        """:meth:`AsyncMongoConnection.open`, blocking (``connect_timeout`` bounds each step)."""
        credentials = Credentials.of(username, password, auth_source, auth_mechanism)
        protocol, hello, speculation = _opening(
            host, port, load_balanced, app_name, listeners, credentials
        )
        address = protocol.address
        sock: socket.socket | None = None
        try:
            sock = socket.create_connection((host, port), timeout=connect_timeout)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if tls is not None:
                sock = tls.wrap_socket(sock, server_hostname=host)
            conn = cls(sock, protocol)
            reply = conn._exchange("admin", hello)
            protocol.handshake_done(reply)
            if credentials is not None:
                protocol.auth_mechanism = authenticate(
                    conn._exchange,
                    credentials,
                    reply,
                    address=address,
                    service_id=protocol.service_id,
                    speculation=speculation,
                )
            sock.settimeout(None)
        except _NETWORK as exc:
            if sock is not None:
                sock.close()
            raise _establishing_error(address, exc, protocol) from exc
        except BaseException:
            if sock is not None:
                sock.close()
            raise
        return conn

    @property
    def closed(self) -> bool:
        return self._broken or self._sock.fileno() < 0

    def check_idle(self) -> None:
        """Raise ``ConnectionError`` if the server closed this idle connection or sent bytes
        nobody asked for (a non-blocking peek; nothing is read from a healthy one)."""
        if self._broken:
            raise ConnectionError(f"{self!r} is broken")
        check_socket(self._sock)

    def command(
        self,
        db: str,
        command: Mapping[str, Any],
        *,
        sequences: Mapping[str, Sequence[Mapping[str, Any]]] | None = None,
        timeout: float | None = None,
    ) -> dict[str, Any]:
        """:meth:`AsyncMongoConnection.command`, blocking."""
        if timeout is not None:
            timeout = check_timeout(timeout, "command(timeout=...)")
        if self.closed:
            raise self._closed_error()
        protocol = self._protocol
        error: BaseException | None = None
        with self._lock:
            request_id, data = protocol.request(db, command, sequences)
            began = protocol.started(db, command, request_id)
            try:
                self._sock.settimeout(timeout)
                reply = self._round_trip(request_id, data)
            except _NETWORK as exc:
                self._broken = True
                self._sock.close()
                error = _network_error(self.address, exc, self.service_id)
                error.__cause__ = exc
            except OperationFailure as exc:
                error = exc
        # (the events outside the connection's lock)
        if error is not None:
            protocol.ended(db, command, request_id, began, None, error)
            raise error
        protocol.ended(db, command, request_id, began, reply, None)
        return reply

    def _exchange(self, db: str, command: Mapping[str, Any]) -> dict[str, Any]:
        """A command without monitoring (the handshake's)."""
        return self._round_trip(*self._protocol.request(db, command, None))

    def _round_trip(self, request_id: int, data: bytes) -> dict[str, Any]:
        self._sock.sendall(data)
        reader = self._protocol.reader
        while True:
            chunk = self._sock.recv(min(max(reader.needed(), 65536), MAX_MESSAGE_SIZE))
            if not chunk:
                raise EOFError("the server closed the connection")
            messages = reader.feed(chunk)
            if messages:
                return self._protocol.reply(request_id, messages[0])

    def close(self) -> None:
        self._broken = self._closed_here = True
        self._sock.close()


def _check_endpoint(
    host: object, port: object, tls: object, connect_timeout: object, call: str
) -> None:
    if not isinstance(host, str) or not host:
        raise ValueError(f"{call}(host=...): a host name or address, not {host!r}")
    if type(port) is not int or not 0 < port < 65536:
        raise ValueError(f"{call}(port=...): an int from 1 to 65535, not {port!r}")
    if tls is not None and not isinstance(tls, ssl.SSLContext):
        raise TypeError(f"{call}(tls=...): an ssl.SSLContext or None, not {type(tls).__name__}")
    if connect_timeout is not None:
        check_timeout(connect_timeout, f"{call}(connect_timeout=...)")


def async_connect(
    host: str,
    port: int = 27017,
    *,
    load_balanced: bool = False,
    app_name: str | None = None,
    tls: ssl.SSLContext | None = None,
    connect_timeout: float | None = 20.0,
    listeners: Iterable[CommandListener] = (),
    username: str | None = None,
    password: str | None = None,
    auth_source: str = "admin",
    auth_mechanism: str | None = None,
) -> Callable[[ConnectContext], Awaitable[Established[AsyncMongoConnection]]]:
    """A connect function for :class:`poolkit.AsyncPool` (with
    ``PoolOptions(load_balanced=...)`` the same): each connection handshaken (and authenticated
    as ``username``, given one), its ``service_id`` given to the pool (per-service generations
    and ``clear(service_id=...)``). ``listeners``: command monitoring (:mod:`.monitoring`),
    each event with the service. The arguments are checked here (a ValueError or TypeError
    naming the one at fault)."""
    _check_endpoint(host, port, tls, connect_timeout, "async_connect")
    Credentials.of(username, password, auth_source, auth_mechanism)
    options: dict[str, Any] = dict(
        load_balanced=load_balanced, app_name=app_name, tls=tls, connect_timeout=connect_timeout,
        listeners=tuple(listeners), username=username, password=password,
        auth_source=auth_source, auth_mechanism=auth_mechanism,
    )  # fmt: skip

    async def connect_mongo(ctx: ConnectContext) -> Established[AsyncMongoConnection]:
        conn = await AsyncMongoConnection.open(host, port, **options)
        return Established(conn, service_id=conn.service_id)

    return connect_mongo


def connect_sync(
    host: str,
    port: int = 27017,
    *,
    load_balanced: bool = False,
    app_name: str | None = None,
    tls: ssl.SSLContext | None = None,
    connect_timeout: float | None = 20.0,
    listeners: Iterable[CommandListener] = (),
    username: str | None = None,
    password: str | None = None,
    auth_source: str = "admin",
    auth_mechanism: str | None = None,
) -> Callable[[ConnectContext], Established[MongoConnection]]:
    """:func:`async_connect` for :class:`poolkit.Pool`."""
    _check_endpoint(host, port, tls, connect_timeout, "connect_sync")
    Credentials.of(username, password, auth_source, auth_mechanism)
    options: dict[str, Any] = dict(
        load_balanced=load_balanced, app_name=app_name, tls=tls, connect_timeout=connect_timeout,
        listeners=tuple(listeners), username=username, password=password,
        auth_source=auth_source, auth_mechanism=auth_mechanism,
    )  # fmt: skip

    def connect_mongo(ctx: ConnectContext) -> Established[MongoConnection]:
        conn = MongoConnection.open(host, port, **options)
        return Established(conn, service_id=conn.service_id)

    return connect_mongo


#: the old name of :func:`async_connect`: ``connect`` will be the blocking connect function, as
#: in the backends (``connect`` for threads, ``async_connect`` for asyncio)
connect = renamed(async_connect, "connect", CONNECT_RENAMED)
