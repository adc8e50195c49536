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
from typing import Any

from ..errors import PoolError

__all__ = [
    "LOAD_BALANCER_UNSUPPORTED",
    "NOT_PRIMARY_CODES",
    "SHUTDOWN_CODES",
    "HandshakeError",
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
    and the driver's own (``RetryableError``, ``SystemOverloadedError``...)."""

    def __init__(
        self,
        message: str,
        *,
        address: str,
        labels: Iterable[str] = (),
        service_id: Any = None,
    ) -> None:
        super().__init__(message, address=address)
        self.labels = frozenset(labels)
        self.service_id = service_id

    def has_error_label(self, label: str) -> bool:
        return label in self.labels

    @property
    def retryable(self) -> bool:  # type: ignore[override]
        return "RetryableError" in self.labels


class NetworkError(MongoError, ConnectionError):
    """The connection failed (reset, closed, timed out): the connection is broken.
    ``timeout``: it was a timeout."""

    def __init__(
        self,
        message: str,
        *,
        address: str,
        labels: Iterable[str] = (),
        service_id: Any = None,
        timeout: bool = False,
    ) -> None:
        super().__init__(message, address=address, labels=labels, service_id=service_id)
        self.timeout = timeout


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


class OperationFailure(MongoError):
    """A command answered ``ok: 0``. ``code``/``code_name``: the server's; ``reply``: the
    reply document (for inspection; not in the message)."""

    def __init__(
        self,
        reply: Mapping[str, Any],
        *,
        address: str,
        service_id: Any = None,
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
    * a network error (not a timeout) after it: yes;
    * a state change error: for servers before 4.2 (wire version 8) every one; since then only
      "shutting down"."""
    if not handshake_done or isinstance(error, HandshakeError):
        return False
    if isinstance(error, NetworkError):
        return not error.timeout
    if is_state_change(error):
        code = getattr(error, "code", None)
        return max_wire_version < 8 or code in SHUTDOWN_CODES
    return False
