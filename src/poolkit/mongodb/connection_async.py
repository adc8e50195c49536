"""A MongoDB connection on asyncio streams (:class:`AsyncMongoConnection`), its SCRAM
authentication (:func:`async_authenticate`), and the connect function that gives it to
:class:`poolkit.AsyncPool` (:func:`async_connect`).

This is the source of ``connection_sync`` (the blocking twin), which tools/async_to_sync.py
writes from it: what differs for threads is in ``if True:  # ASYNC`` blocks, whose ``else`` is
the blocking code.

Rules of this module
--------------------
* :mod:`.connection`'s. The bytes move here; what is sent and checked is :mod:`._protocol`'s.
* One command at a time on a connection (a lock); the command's events are published outside it.
* A command interrupted mid-way (the task cancelled; in the twin, ``KeyboardInterrupt``) closes
  the connection: its reply would come to the next caller.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
import threading
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from .. import ConnectContext, Established
from ..driver import check_socket, check_timeout, require_asyncio
from ._protocol import (
    NETWORK,
    Handshaken,
    Protocol,
    check_endpoint,
    eof,
    establishing_error,
    network_error,
    opening,
)
from .auth import Conversation, Credentials, Speculation
from .errors import OperationFailure, ServiceId
from .monitoring import CommandListener
from .wire import MAX_MESSAGE_SIZE

__all__ = ["AsyncMongoConnection", "async_connect", "async_authenticate"]

#: ``exchange(db, command) -> reply``: one command of the handshake (no monitoring)
AsyncExchange = Callable[[str, Mapping[str, Any]], Awaitable[dict[str, Any]]]


async def async_authenticate(
    exchange: AsyncExchange,
    credentials: Credentials,
    hello: Mapping[str, Any],
    *,
    address: str,
    service_id: ServiceId = None,
    speculation: Speculation | None = None,
) -> str:
    """Authenticate over ``exchange`` (it raises :class:`~.errors.OperationFailure` on
    ``ok: 0``), from the ``hello``'s reply to ``speculation`` when it has one, else from
    ``saslStart`` (:class:`~.auth.Conversation`). Returns the mechanism used."""
    conversation = Conversation(
        credentials, hello, address=address, service_id=service_id, speculation=speculation
    )
    source = conversation.source
    try:
        first = conversation.speculated
        if first is None:
            first = await exchange(source, conversation.start())
        command: dict[str, Any] | None
        if True:  # ASYNC: PBKDF2, when not cached, runs on a thread, off the event loop
            if conversation.challenge(first):
                command = await asyncio.to_thread(conversation.proof)
            else:
                command = conversation.proof()
        else:
            conversation.challenge(first)
            command = conversation.proof()
        while command is not None:
            command = conversation.finish(await exchange(source, command))
    except OperationFailure as exc:
        raise conversation.refused(exc) from exc
    return conversation.mechanism


class AsyncMongoConnection(Handshaken):
    """A connection on asyncio streams. Open one with :meth:`open` (connect and handshake)."""

    if True:  # ASYNC
        _reader: asyncio.StreamReader
        _writer: asyncio.StreamWriter
    else:
        _sock: socket.socket

    def __init__(self, protocol: Protocol) -> None:
        self._protocol = protocol
        self._broken = False
        if True:  # ASYNC
            self._lock = asyncio.Lock()
        else:
            self._lock = threading.Lock()

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
        """Connect, ``hello``, and authenticate if given a user (see :mod:`.connection`'s
        rules). ``connect_timeout`` bounds it: on asyncio the whole of it, on threads each step
        (the socket's timeout)."""
        credentials = Credentials.of(username, password, auth_source, auth_mechanism)
        protocol, hello, speculation = opening(
            host, port, load_balanced, app_name, listeners, credentials
        )
        conn = cls(protocol)
        try:
            async with conn._deadline(connect_timeout, connecting=True):
                await conn._connect(host, port, tls, connect_timeout)
                reply = await conn._exchange("admin", hello)
                protocol.handshake_done(reply)
                if credentials is not None:
                    protocol.auth_mechanism = await async_authenticate(
                        conn._exchange,
                        credentials,
                        reply,
                        address=protocol.address,
                        service_id=protocol.service_id,
                        speculation=speculation,
                    )
        except NETWORK as exc:
            conn._break()
            raise establishing_error(protocol.address, exc, protocol) from exc
        except BaseException:
            conn._break()
            raise
        return conn

    async def _connect(
        self, host: str, port: int, tls: ssl.SSLContext | None, timeout: float | None
    ) -> None:
        if True:  # ASYNC
            self._reader, self._writer = await asyncio.open_connection(
                host, port, ssl=tls, server_hostname=host if tls else None
            )
        else:
            sock = socket.create_connection((host, port), timeout=timeout)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if tls is not None:
                sock = tls.wrap_socket(sock, server_hostname=host)
            self._sock = sock

    if True:  # ASYNC

        def _deadline(self, timeout: float | None, *, connecting: bool = False) -> asyncio.Timeout:
            """``timeout`` seconds for what runs under it (None: no limit)."""
            return asyncio.timeout(timeout)
    else:

        @contextlib.contextmanager
        def _deadline(self, timeout: float | None, *, connecting: bool = False) -> Iterator[None]:
            """``timeout`` seconds for each step of what runs under it (the socket's timeout;
            connecting: the socket is made under it, with it)."""
            if not connecting:
                self._sock.settimeout(timeout)
            yield
            self._sock.settimeout(None)

    @property
    def closed(self) -> bool:
        if True:  # ASYNC
            if not hasattr(self, "_writer"):
                return True
            return self._broken or self._writer.is_closing() or self._reader.at_eof()
        else:
            return self._broken or not hasattr(self, "_sock") or self._sock.fileno() < 0

    def check_idle(self) -> None:
        """Raise ``ConnectionError`` if the server closed this idle connection or sent bytes
        nobody asked for."""
        if True:  # ASYNC: as the loop has seen so far (the ``check`` hook lets it turn)
            if self.closed:
                raise ConnectionError(f"{self!r}: the server closed the connection")
            if len(getattr(self._reader, "_buffer", b"")):  # (StreamReader has no public peek)
                raise ConnectionError(f"{self!r}: unexpected data waiting on an idle connection")
        else:  # a non-blocking peek: nothing is read from a healthy one
            if self._broken:
                raise ConnectionError(f"{self!r} is broken")
            check_socket(self._sock)

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
        error: BaseException | None = None
        async with self._lock:
            request_id, data = protocol.request(db, command, sequences)
            began = protocol.started(db, command, request_id)
            try:
                async with self._deadline(timeout):
                    reply = await self._round_trip(request_id, data)
            except NETWORK as exc:
                self._break()
                error = network_error(self.address, exc, self.service_id)
                error.__cause__ = exc
            except OperationFailure as exc:
                error = exc
            except asyncio.CancelledError as exc:
                self._closed_here = True  # (mid-command: the reply would come to the next caller)
                self._break()
                protocol.ended(db, command, request_id, began, None, exc)
                raise
        # (the events outside the connection's lock)
        if error is not None:
            protocol.ended(db, command, request_id, began, None, error)
            raise error
        protocol.ended(db, command, request_id, began, reply, None)
        return reply

    async def _exchange(self, db: str, command: Mapping[str, Any]) -> dict[str, Any]:
        """A command without monitoring (the handshake's)."""
        return await self._round_trip(*self._protocol.request(db, command, None))

    async def _round_trip(self, request_id: int, data: bytes) -> dict[str, Any]:
        reader = self._protocol.reader
        if True:  # ASYNC
            self._writer.write(data)
            await self._writer.drain()
        else:
            self._sock.sendall(data)
        while True:
            size = min(max(reader.needed(), 65536), MAX_MESSAGE_SIZE)
            if True:  # ASYNC
                chunk = await self._reader.read(size)
            else:
                chunk = self._sock.recv(size)
            messages = reader.feed(chunk or eof())
            if messages:
                return self._protocol.reply(request_id, messages[0])

    def _break(self) -> None:
        """The connection can serve no more: its transport is closed (if it was made)."""
        self._broken = True
        if True:  # ASYNC
            if hasattr(self, "_writer"):
                self._writer.close()
        else:
            if hasattr(self, "_sock"):
                self._sock.close()

    async def aclose(self) -> None:
        self._closed_here = True
        self._break()
        if True:  # ASYNC
            if hasattr(self, "_writer"):
                with contextlib.suppress(OSError):
                    await self._writer.wait_closed()


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
    check_endpoint(host, port, tls, connect_timeout, "async_connect")
    Credentials.of(username, password, auth_source, auth_mechanism)
    options: dict[str, Any] = dict(
        load_balanced=load_balanced, app_name=app_name, tls=tls, connect_timeout=connect_timeout,
        listeners=tuple(listeners), username=username, password=password,
        auth_source=auth_source, auth_mechanism=auth_mechanism,
    )  # fmt: skip

    async def connect_mongo(ctx: ConnectContext) -> Established[AsyncMongoConnection]:
        if True:  # ASYNC
            require_asyncio("mongodb.async_connect", "poolkit.mongodb's AsyncMongoConnection")
        conn = await AsyncMongoConnection.open(host, port, **options)
        return Established(conn, service_id=conn.service_id)

    return connect_mongo
