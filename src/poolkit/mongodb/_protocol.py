"""What both MongoDB connection classes share, without I/O: the conversation of one connection
(:class:`Protocol`: request ids, the handshake's checks, replies matched to requests and turned
into documents or errors), what a connection tells of its handshake (:class:`Handshaken`), the
errors of a broken or unestablished connection, and the checks of a connect function's
arguments.

Rules of this module
--------------------
* No I/O: the connection classes (``connection_async`` and its generated twin
  ``connection_sync``) move bytes; what is sent and checked is decided here, once.
* A network error or timeout while establishing is a :class:`~.errors.HandshakeError` before the
  ``hello`` completed, a :class:`~.errors.NetworkError` (``after_hello``) after it.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..driver import check_timeout
from ._bson import bson
from .auth import Credentials, Speculation
from .errors import (
    HandshakeError,
    LoadBalancerUnsupportedError,
    NetworkError,
    OperationFailure,
    ServiceId,
)
from .handshake import opening_hello
from .monitoring import (
    CommandFailedEvent,
    CommandListener,
    CommandStartedEvent,
    CommandSucceededEvent,
    is_sensitive,
    publish,
)
from .wire import Message, MessageReader, ProtocolError, encode_msg


class Protocol:
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
        self.service_id: ServiceId = None
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


def network_error(
    address: str, exc: BaseException, service_id: ServiceId, *, after_hello: bool = False
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


def establishing_error(address: str, exc: BaseException, protocol: Protocol) -> NetworkError:
    """A network error of ``open()``: before the ``hello`` completed a :class:`HandshakeError`."""
    error = network_error(address, exc, protocol.service_id, after_hello=bool(protocol.hello))
    if protocol.hello:
        return error
    return HandshakeError(f"establishing a {error}", address=address, timeout=error.timeout)


#: what breaks a connection (TimeoutError is an OSError; asyncio's is the builtin one)
NETWORK = (OSError, EOFError, asyncio.IncompleteReadError, ProtocolError, TimeoutError)


class Handshaken:
    """What both connection classes tell of their handshake."""

    _protocol: Protocol
    #: the client closed it (a command cancelled mid-way, ``close()``): using it then is not
    #: the server's failure, and clears nothing
    _closed_here = False

    @property
    def address(self) -> str:
        return self._protocol.address

    @property
    def service_id(self) -> ServiceId:
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


def opening(
    host: str,
    port: int,
    load_balanced: bool,
    app_name: str | None,
    listeners: Iterable[CommandListener],
    credentials: Credentials | None,
) -> tuple[Protocol, dict[str, Any], Speculation | None]:
    """What both ``open`` methods start from: the connection's protocol, its ``hello`` (asking
    for the user's mechanisms and starting the authentication when there is a user)."""
    hello, speculation = opening_hello(credentials, load_balanced=load_balanced, app_name=app_name)
    return Protocol(f"{host}:{port}", load_balanced, tuple(listeners)), hello, speculation


def eof() -> bytes:
    raise EOFError("the server closed the connection")


def check_endpoint(
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
