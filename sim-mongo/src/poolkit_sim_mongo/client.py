""":class:`WireClient`: a blocking MongoDB client of one TCP connection, speaking OP_MSG through
:mod:`poolkit.mongodb.wire`, for tests that drive a server command by command (which a
driver's pool would hide: on which connection, so on which service, each command runs).

Rules of this module
--------------------
* One connection, one command at a time: :meth:`WireClient.command` sends, then reads until
  the reply to that request arrives.
* A reply with ``ok: 0`` raises :class:`WireCommandError` (unless ``check=False``); a closed
  connection raises ``ConnectionError``.
"""

from __future__ import annotations

import itertools
import socket
from collections.abc import Mapping, Sequence
from typing import Any

from bson.objectid import ObjectId

from .framing import OP_MSG, OP_REPLY, command_frame, query_frame, recv_frame

__all__ = ["WireClient", "WireCommandError"]


class WireCommandError(Exception):
    """A command answered ``ok: 0``: its ``code`` and the whole ``reply``."""

    def __init__(self, reply: Mapping[str, Any]) -> None:
        name, code = reply.get("codeName", ""), reply.get("code")
        super().__init__(f"{name} ({code}): {reply.get('errmsg')}")
        self.code: int | None = reply.get("code")
        self.reply = dict(reply)


class WireClient:
    """A connection to ``host:port``; unless ``handshake=False``, its handshake ``hello``
    (``loadBalanced: true`` if ``load_balanced``) is sent at once and its reply kept as
    ``hello_reply``."""

    def __init__(
        self,
        port: int,
        host: str = "127.0.0.1",
        *,
        timeout: float = 10.0,
        handshake: bool = True,
        load_balanced: bool = True,
        app_name: str = "poolkit-wire-client",
    ) -> None:
        self._sock = socket.create_connection((host, port), timeout)
        self._ids = itertools.count(1)
        self.hello_reply: dict[str, Any] = {}
        if handshake:
            hello: dict[str, Any] = {
                "hello": 1,
                "client": {
                    "application": {"name": app_name},
                    "driver": {"name": "poolkit.testing", "version": "0"},
                },
            }
            if load_balanced:
                hello["loadBalanced"] = True
            try:
                self.hello_reply = self.command("admin", hello)
            except BaseException:
                self.close()
                raise

    @property
    def service_id(self) -> ObjectId | None:
        """The ``serviceId`` of the handshake's reply."""
        service_id: ObjectId | None = self.hello_reply.get("serviceId")
        return service_id

    def command(
        self,
        database: str,
        document: Mapping[str, Any],
        *,
        sequences: Mapping[str, Sequence[Mapping[str, Any]]] | None = None,
        check: bool = True,
    ) -> dict[str, Any]:
        """Run ``document`` against ``database``: the reply document."""
        request_id = next(self._ids)
        body = {**document, "$db": database}
        self._sock.sendall(command_frame(body, request_id, sequences=sequences))
        return self._reply(request_id, check)

    @property
    def local_port(self) -> int:
        """The client's port of the connection (what a server sees as the peer's)."""
        port: int = self._sock.getsockname()[1]
        return port

    def legacy_hello(
        self, command: str = "isMaster", *, load_balanced: bool = True
    ) -> dict[str, Any]:
        """An OP_QUERY ``isMaster`` (or ``hello``) on ``admin.$cmd``, as old drivers began
        their handshake: the OP_REPLY's document (its ``ok: 0`` raises)."""
        request_id = next(self._ids)
        query: dict[str, Any] = {command: 1, "helloOk": True}
        if load_balanced:
            query["loadBalanced"] = True
        self._sock.sendall(query_frame("admin.$cmd", query, request_id))
        return self._reply(request_id, check=True)

    def _reply(self, request_id: int, check: bool) -> dict[str, Any]:
        while True:
            message = recv_frame(self._sock)
            if message.op_code in (OP_MSG, OP_REPLY) and message.response_to == request_id:
                if check and not message.body.get("ok"):
                    raise WireCommandError(message.body)
                return message.body

    def close(self) -> None:
        self._sock.close()

    def __enter__(self) -> WireClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
