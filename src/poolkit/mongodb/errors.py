"""The errors of ``poolkit.mongodb``, under :class:`poolkit.PoolError`, with MongoDB's error
labels, and the SDAM rules that say which errors clear a pool.

Rules of this module
--------------------
* An error carries machine-readable attributes (``code``, ``code_name``, ``labels``,
  ``service_id``); its message never holds a password or a whole reply document.
* Which error clears what is decided here, once (:func:`clear_scope`), for the pool's owner to
  act on: the connection code never clears a pool itself.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, TypeAlias

from ..errors import PoolError

if TYPE_CHECKING:
    from bson import ObjectId

#: a load-balanced service's id: the ``serviceId`` of the ``hello`` reply, an ``ObjectId`` (None
#: when the connection is not load-balanced, or the error came before the ``hello``)
ServiceId: TypeAlias = "ObjectId | None"

__all__ = [
    "LOAD_BALANCER_UNSUPPORTED",
    "NOT_PRIMARY_CODES",
    "SHUTDOWN_CODES",
    "AuthenticationError",
    "HandshakeError",
    "InvalidOperationError",
    "LoadBalancerUnsupportedError",
    "MongoError",
    "NetworkError",
    "OperationFailure",
    "clear_scope",
    "is_state_change",
]

#: the exact message the Load Balancer spec requires when a hello reply has no serviceId
LOAD_BALANCER_UNSUPPORTED = (
    "Driver attempted to initialize in load balancing mode, but the server does not support "
    "this mode."
)

#: "node is shutting down" (SDAM): the pool is cleared whatever the server's version
SHUTDOWN_CODES = frozenset({11600, 91})  # InterruptedAtShutdown, ShutdownInProgress
#: "not writable primary" / "node is recovering" (SDAM's state change errors, with the above)
NOT_PRIMARY_CODES = frozenset(
    {
        10107,  # NotWritablePrimary
        13435,  # NotPrimaryNoSecondaryOk
        13436,  # NotPrimaryOrSecondary
        11602,  # InterruptedDueToReplStateChange
        189,  # PrimarySteppedDown
        10058,  # LegacyNotPrimary
    }
)


class MongoError(PoolError):
    """An error of a MongoDB connection or command. ``labels``: the server's ``errorLabels``
    and the driver's own (``RetryableError``, ``SystemOverloadedError``...).
    ``after_hello``: raised while the connection was being established, after its ``hello``
    completed (during authentication): ``service_id`` is then the ``hello``'s, and the Load
    Balancer spec has the error go through SDAM's error handling (:func:`clear_scope`)."""

    def __init__(
        self,
        message: str,
        *,
        address: str,
        labels: Iterable[str] = (),
        service_id: ServiceId = None,
        after_hello: bool = False,
    ) -> None:
        super().__init__(message, address=address)
        self.labels = frozenset(labels)
        self.service_id = service_id
        self.after_hello = after_hello

    def has_error_label(self, label: str) -> bool:
        return label in self.labels

    def add_error_label(self, label: str) -> None:
        """A label the driver adds (``TransientTransactionError`` to a network error in a
        transaction, ...)."""
        self.labels = self.labels | {label}

    @property
    def retryable(self) -> bool:  # type: ignore[override]  # (a property where PoolError has a field)
        return "RetryableError" in self.labels


class NetworkError(MongoError, ConnectionError):
    """The connection failed (reset, closed, timed out): the connection is broken.
    ``timeout``: it was a timeout. ``local``: the client had closed the connection (a command
    cancelled mid-way): not the server's failure, it clears nothing."""

    def __init__(
        self,
        message: str,
        *,
        address: str,
        labels: Iterable[str] = (),
        service_id: ServiceId = None,
        timeout: bool = False,
        after_hello: bool = False,
        local: bool = False,
    ) -> None:
        super().__init__(
            message, address=address, labels=labels, service_id=service_id, after_hello=after_hello
        )
        self.timeout = timeout
        self.local = local


class HandshakeError(NetworkError):
    """A network error or timeout while the connection was being established (TCP, TLS, the
    ``hello``): labelled ``SystemOverloadedError`` and ``RetryableError`` (the newest CMAP: an
    overloaded server sheds connections this way), and it clears no pool."""

    LABELS = frozenset({"SystemOverloadedError", "RetryableError"})

    def __init__(self, message: str, *, address: str, timeout: bool = False) -> None:
        super().__init__(message, address=address, labels=self.LABELS, timeout=timeout)


class LoadBalancerUnsupportedError(MongoError):
    """``loadBalanced=true``, and the server's ``hello`` reply has no ``serviceId``."""

    def __init__(self, *, address: str) -> None:
        super().__init__(LOAD_BALANCER_UNSUPPORTED, address=address)


class InvalidOperationError(MongoError):
    """A call the state of its object forbids, refused before anything is sent (a commit after
    an abort, a cursor whose transaction has ended...)."""


class AuthenticationError(MongoError):
    """The authentication of a new connection failed: the server refused it (``code``,
    ``code_name``: its, such as 18 AuthenticationFailed) or the server's answers failed the
    client's checks (``code`` None). Always ``after_hello`` (with the ``hello``'s
    ``service_id``); not labelled retryable. SDAM's rules for connection establishment apply
    (:func:`clear_scope`): in load-balanced mode it clears the ``hello``'s service.
    ``mechanism``: the SCRAM mechanism tried. The message names the user, never the password."""

    def __init__(
        self,
        message: str,
        *,
        address: str,
        service_id: ServiceId = None,
        mechanism: str = "",
        code: int | None = None,
        code_name: str = "",
    ) -> None:
        super().__init__(message, address=address, service_id=service_id, after_hello=True)
        self.mechanism = mechanism
        self.code = code
        self.code_name = code_name


class OperationFailure(MongoError):
    """A command answered ``ok: 0``. ``code``/``code_name``: the server's; ``reply``: the
    reply document (for inspection; not in the message)."""

    def __init__(
        self,
        reply: Mapping[str, Any],
        *,
        address: str,
        service_id: ServiceId = None,
    ) -> None:
        self.code: int | None = reply.get("code")
        self.code_name: str = str(reply.get("codeName", ""))
        errmsg = str(reply.get("errmsg", "command failed"))
        what = f" ({self.code_name or 'code'} {self.code})" if self.code is not None else ""
        super().__init__(
            f"{errmsg}{what}",
            address=address,
            labels=reply.get("errorLabels", ()),
            service_id=service_id,
        )
        self.reply = dict(reply)


def is_state_change(error: BaseException) -> bool:
    """SDAM's "state change" errors: not writable primary, node recovering or shutting down."""
    code = getattr(error, "code", None)
    return isinstance(error, OperationFailure) and (
        code in SHUTDOWN_CODES or code in NOT_PRIMARY_CODES
    )


def clear_scope(error: BaseException, *, handshake_done: bool, max_wire_version: int = 0) -> bool:
    """Whether ``error`` requires the pool (in load-balanced mode: the connection's service's
    connections) to be cleared, by SDAM's rules and the Load Balancer spec's:

    * before the handshake completed (connect, TLS, ``hello``): never;
    * while the connection was being established after its ``hello`` (the error's
      ``after_hello``; ``handshake_done`` is then not needed): a network error, a timeout too,
      and an :class:`AuthenticationError`, as SDAM has it for connection establishment (the
      Load Balancer spec: "errors during authentication commands MUST go through the SDAM
      error handling flow", clearing only the service; pymongo does the same);
    * a network error (not a timeout, nor one on a connection the client closed) after it:
      yes;
    * a state change error: for servers before 4.2 (wire version 8) every one; since then only
      "shutting down"."""
    if getattr(error, "after_hello", False):
        return isinstance(error, NetworkError | AuthenticationError)
    if not handshake_done or isinstance(error, HandshakeError):
        return False
    if isinstance(error, NetworkError):
        return not error.timeout and not error.local
    if is_state_change(error):
        code = getattr(error, "code", None)
        return max_wire_version < 8 or code in SHUTDOWN_CODES
    return False
