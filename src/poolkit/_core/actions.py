"""What the core asks its front end to do, outside any lock, in the order given.

Rules of this module
--------------------
* Actions are plain values; the core never calls the front end.
* ``StartConnect``: run the connect function for ``conn`` and report ``connected`` or
  ``connect_failed`` back to the core.
* ``CloseConnection``: the core has already removed ``conn`` from every count. Close
  ``connection``, the object the core decided to close (never re-read from the record: another
  thread may have fed the core since), unless ``pending``: then the connect is still running:
  abandon it (cancel the task, mark its context cancelled). The same record may be named twice:
  once when the core abandons a pending connect and once more, with the object, if that connect
  returns a connection anyway; never twice with the same object.
* ``StartKeepAlive``: run the keep-alive probe on ``conn.connection`` and report
  ``keep_alive_done`` back to the core (with the error if it raised).
* ``StartCheck`` / ``StartReset``: run ``Hooks.check`` / ``Hooks.reset`` on
  ``conn.connection`` and report ``check_done`` / ``reset_done`` back to the core (with the
  error if it raised).
* ``CompleteRequest``: ``request`` left the wait queue with ``conn`` or ``error`` set; wake its
  owner.
"""

from __future__ import annotations

from typing import Any, TypeAlias, final

from .records import Conn, Request


class _ActionBase:
    __slots__ = ()


@final
class StartConnect(_ActionBase):
    __slots__ = ("conn",)

    def __init__(self, conn: Conn) -> None:
        self.conn = conn

    def __repr__(self) -> str:
        return f"StartConnect({self.conn.id})"


@final
class CloseConnection(_ActionBase):
    __slots__ = ("conn", "connection", "pending")

    def __init__(self, conn: Conn, connection: Any, pending: bool = False) -> None:
        self.conn = conn
        #: what to close, fixed when the core decided (what the connect function returned)
        self.connection = connection
        #: the connect is still running: nothing to close yet, the connect is abandoned
        self.pending = pending

    def __repr__(self) -> str:
        return f"CloseConnection({self.conn.id}, {self.conn.close_reason!r})"


@final
class StartKeepAlive(_ActionBase):
    __slots__ = ("conn",)

    def __init__(self, conn: Conn) -> None:
        self.conn = conn

    def __repr__(self) -> str:
        return f"StartKeepAlive({self.conn.id})"


@final
class StartCheck(_ActionBase):
    __slots__ = ("conn",)

    def __init__(self, conn: Conn) -> None:
        self.conn = conn

    def __repr__(self) -> str:
        return f"StartCheck({self.conn.id})"


@final
class StartReset(_ActionBase):
    __slots__ = ("conn",)

    def __init__(self, conn: Conn) -> None:
        self.conn = conn

    def __repr__(self) -> str:
        return f"StartReset({self.conn.id})"


@final
class CompleteRequest(_ActionBase):
    __slots__ = ("request",)

    def __init__(self, request: Request) -> None:
        self.request = request

    def __repr__(self) -> str:
        return f"CompleteRequest({self.request!r})"


#: every action: a front end's dispatch over them ends in ``assert_never``, so that a new kind
#: of action is a type error wherever it is not handled yet
Action: TypeAlias = (
    StartConnect | CloseConnection | StartKeepAlive | StartCheck | StartReset | CompleteRequest
)
