"""The one error tree of poolkit. Every error carries machine-readable attributes.

``str(error)`` of the CMAP errors is exactly the message the CMAP spec tests expect.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .stats import PoolStats

__all__ = [
    "CircuitOpenError",
    "ConnectCancelledError",
    "ConnectTimeoutError",
    "HookTimeoutError",
    "InvalidLeaseError",
    "KeepAliveTimeoutError",
    "PoolClearedError",
    "PoolClosedError",
    "PoolError",
    "RequestCancelledError",
    "TooManyWaitersError",
    "WaitQueueTimeoutError",
]


class PoolError(Exception):
    """Root of every error the pool raises. ``address`` names the pool's endpoint."""

    #: whether retrying the operation (on this or another pool) may succeed
    retryable: bool = False

    def __init__(self, message: str, *, address: str) -> None:
        super().__init__(message)
        self.address = address


class PoolClosedError(PoolError):
    """A checkout on a pool that was closed (CMAP ``PoolClosedError``)."""

    def __init__(self, *, address: str, operation: str = "check out a connection from") -> None:
        super().__init__(f"Attempted to {operation} closed connection pool", address=address)
        self.operation = operation


class PoolClearedError(PoolError):
    """A checkout on a paused pool, or one that was waiting when the pool was cleared.

    Retryable, and not an error that should mark the server unknown. ``cause`` is the error that
    made the owner clear the pool, when it said. ``str(error)`` is the CMAP message; how to make
    the pool ready is a note (:pep:`678`, shown under the traceback).
    """

    retryable = True

    def __init__(
        self, *, address: str, cause: BaseException | None = None, interrupted: bool = False
    ) -> None:
        if interrupted:
            message = f"Connection to {address} interrupted due to server monitor timeout"
        elif cause is not None:
            message = (
                f"Connection pool for {address} was cleared because another operation "
                f"failed with: {cause}"
            )
        else:
            message = f"Connection pool for {address} is paused"
        super().__init__(message, address=address)
        self.cause = cause
        self.interrupted = interrupted
        if not interrupted:
            self.add_note(_CLEARED_HINT if cause is not None else _PAUSED_HINT)


#: the note of a checkout on a paused pool: a new pool (the likely case) or one cleared without a
#: cause; the error does not tell which
_PAUSED_HINT = (
    "A new pool is paused until it is made ready: call pool.ready(), or use it as "
    "`with pool:` / `async with pool:`, before checking out. A pool paused by pool.clear() is "
    "made ready again by its owner (a driver: after its next successful server check); retry then."
)
#: the note of a checkout on a pool its owner cleared because of an error
_CLEARED_HINT = (
    "The pool's owner cleared it (pool.clear()) after that error; it is paused until the owner "
    "makes it ready again with pool.ready() (a driver: after its next successful server check). "
    "The checkout is retryable."
)


class WaitQueueTimeoutError(PoolError):
    """A checkout waited longer than its timeout (CMAP ``WaitQueueTimeoutError``).

    ``waited`` is how long it waited, in seconds; ``stats`` the pool's snapshot when it timed out,
    so a pool too small can be told from a server too slow. ``str(error)`` is the CMAP message;
    the pool, the wait and its size are a note (:pep:`678`, shown under the traceback), as
    :meth:`explain` words them.
    """

    def __init__(self, *, address: str, waited: float, stats: PoolStats | None = None) -> None:
        super().__init__(
            "Timed out while checking out a connection from connection pool", address=address
        )
        self.waited = waited
        self.stats = stats

    def explain(self, max_size: int) -> None:
        """Add the note a user needs: where, how long, and how full the pool was."""
        stats = self.stats
        size = f"max_size={max_size}" if max_size else "max_size=0 (no limit)"
        note = f"poolkit: no connection to {self.address} after waiting {self.waited:.3f} s"
        if stats is None:
            self.add_note(f"{note} ({size})")
            return
        if max_size and stats.total >= max_size:
            why = (
                "the pool is at its limit: give connections back sooner, raise max_size, or "
                "wait longer"
            )
        else:
            why = "the pool is below its limit: it waited for connects to its server"
        self.add_note(
            f"{note}: {size}, {stats.in_use} in use, {stats.available} available, "
            f"{stats.pending} being made, {stats.waiting} other checkouts waiting; {why}"
        )


class RequestCancelledError(PoolError):
    """What a request object's ``complete`` receives when ``cancel_request`` took it out of the
    queue. ``request_id`` is its id."""

    def __init__(self, *, address: str, request_id: Any) -> None:
        super().__init__(f"Request {request_id!r} to {address} was cancelled", address=address)
        self.request_id = request_id


class TooManyWaitersError(PoolError):
    """A checkout found ``PoolOptions.max_waiting`` checkouts already waiting and did not wait.

    ``max_waiting`` is the limit. Retryable: the queue may be shorter a moment later.
    """

    retryable = True

    def __init__(self, *, address: str, max_waiting: int) -> None:
        super().__init__(
            f"Too many checkouts waiting for a connection from the pool for {address} "
            f"(max_waiting={max_waiting})",
            address=address,
        )
        self.max_waiting = max_waiting


class ConnectTimeoutError(PoolError):
    """A connect function ran longer than ``PoolOptions.connect_timeout``; it was abandoned."""

    retryable = True

    def __init__(self, *, address: str, timeout: float) -> None:
        super().__init__(
            f"Connecting to {address} took longer than the {timeout:g} s connect timeout",
            address=address,
        )
        self.timeout = timeout


class ConnectCancelledError(PoolError):
    """The task running a connect was cancelled from outside the pool (the event loop shutting
    down, say): the checkout that waited for that connect fails with this, not with a
    cancellation nobody asked of it. Retryable."""

    retryable = True

    def __init__(self, *, address: str, connection_id: int) -> None:
        super().__init__(
            f"The connect of connection {connection_id} to {address} was cancelled",
            address=address,
        )
        self.connection_id = connection_id


class KeepAliveTimeoutError(PoolError):
    """A keep-alive probe ran longer than ``KeepAlive.timeout``; its connection was closed."""

    def __init__(self, *, address: str, connection_id: int, timeout: float) -> None:
        super().__init__(
            f"Keep-alive probe of connection {connection_id} to {address} took longer than "
            f"{timeout:g} s",
            address=address,
        )
        self.connection_id = connection_id
        self.timeout = timeout


class HookTimeoutError(PoolError):
    """A connection's ``Hooks.check`` or ``Hooks.reset`` (``hook``) ran longer than
    ``Hooks.timeout``; the connection was closed."""

    def __init__(self, *, address: str, connection_id: int, hook: str, timeout: float) -> None:
        super().__init__(
            f"Hooks.{hook} of connection {connection_id} to {address} took longer than "
            f"{timeout:g} s",
            address=address,
        )
        self.connection_id = connection_id
        self.hook = hook
        self.timeout = timeout


class CircuitOpenError(PoolError):
    """Connects to the pool's endpoint have failed for ``failing_for`` seconds in a row and no
    connection is open (``PoolOptions.connect_retry``): the checkout fails at once instead of
    waiting. ``failures`` is the number of failed connects, ``cause`` the last one's error.
    Retryable: the pool goes on retrying and closes the circuit when a connect succeeds."""

    retryable = True

    def __init__(
        self, *, address: str, failing_for: float, failures: int, cause: BaseException | None
    ) -> None:
        super().__init__(
            f"Circuit open for {address}: connects have failed for {failing_for:g} s "
            f"({failures} attempts); last error: {cause!r}",
            address=address,
        )
        self.failing_for = failing_for
        self.failures = failures
        self.cause = cause


class InvalidLeaseError(PoolError, ValueError):
    """A check-in of a lease this pool did not give out, or one already returned.

    ``reason`` is ``"foreign"`` or ``"already returned"``. The pool is unchanged.
    """

    def __init__(self, message: str, *, address: str, reason: str, lease: Any = None) -> None:
        super().__init__(message, address=address)
        self.reason = reason
        self.lease = lease


for _cls in (
    ConnectCancelledError,
    ConnectTimeoutError,
    PoolError,
    PoolClosedError,
    PoolClearedError,
    WaitQueueTimeoutError,
    InvalidLeaseError,
    TooManyWaitersError,
    RequestCancelledError,
    KeepAliveTimeoutError,
    CircuitOpenError,
):
    _cls.__module__ = "poolkit"
