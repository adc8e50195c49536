"""The CMAP log messages, on logger ``poolkit.connection`` at DEBUG.

Each message is a :class:`LogMessage`: ``str()`` gives the spec's unstructured form, ``fields`` the
structured key/value pairs (also on the log record as ``record.cmap``). Nothing is built unless the
logger is enabled for DEBUG: the pools ask :func:`enabled` before they build events at all.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any, Final

from . import events as ev

__all__ = [
    "LOGGER",
    "LogMessage",
    "enabled",
    "log_event",
    "split_address",
]

LOGGER: Final = logging.getLogger("poolkit.connection")
_DEBUG: Final = logging.DEBUG

_CLOSE_REASONS: Final = {
    ev.CLOSE_STALE: "Connection became stale because the pool was cleared",
    ev.CLOSE_IDLE: (
        "Connection has been available but unused for longer than the configured max idle time"
    ),
    ev.CLOSE_ERROR: "An error occurred while using the connection",
    ev.CLOSE_POOL_CLOSED: "Connection pool was closed",
}
_CHECKOUT_REASONS: Final = {
    ev.CHECKOUT_TIMEOUT: "Wait queue timeout elapsed without a connection becoming available",
    ev.CHECKOUT_CONNECTION_ERROR: "An error occurred while trying to establish a new connection",
    ev.CHECKOUT_POOL_CLOSED: "Connection pool was closed",
    ev.CHECKOUT_CANCELLED: "The checkout was cancelled by its caller",
}
_POOL_OPTION_ORDER: Final[tuple[str, ...]] = (
    "maxIdleTimeMS",
    "minPoolSize",
    "maxPoolSize",
    "maxConnecting",
    "waitQueueTimeoutMS",
)


def enabled() -> bool:
    """Whether CMAP log messages would be emitted now."""
    return LOGGER.isEnabledFor(_DEBUG)


#: The logger's own cache of "is level N enabled" answers, which the logging module empties on
#: every configuration change. The pools' hot paths read it with ``_LEVELS.get(10)`` (no Python
#: call) and fall back to :func:`enabled` when it says nothing (``None``). Where a Python version
#: has no such cache this is an empty dict, and the fallback always runs.
_cache = getattr(LOGGER, "_cache", None)
_LEVELS: Final[dict[int, bool]] = _cache if isinstance(_cache, dict) else {}
#: ``_LEVELS.get`` bound once: ``_cached_level(10)`` is True/False when the logger's answer for
#: DEBUG is cached, ``None`` when it is not (a bound builtin: the hot paths call it without an
#: attribute lookup). Both are the front ends' (private: not a user's to call).
_cached_level: Final = _LEVELS.get


def split_address(address: str) -> tuple[str, int | None]:
    """A pool's address as the log's (serverHost, serverPort): ``"host:port"``, IPv6 in brackets,
    or a URL (``redis://user:***@host:6379/0``: its scheme, user, path and query left out; a
    path after ``host:port`` too; of several hosts, ``a:5432,b:5433``, the first). No
    port given, none is made up (a pool is not always MongoDB's: its addresses always carry
    one); a path (Unix socket) or a name (``pool-1``) is the host, with no port."""
    if address.startswith("/") or address.endswith(".sock"):
        return address, None
    scheme, sep, rest = address.partition("://")
    if not (sep and scheme.replace("+", "").isidentifier()):
        rest = address
    rest = rest.rpartition("@")[2]  # (user info, its password masked already)
    for end in "/?#":  # (a database, a path, a query: ``host:5433/app``)
        rest = rest.partition(end)[0]
    rest = rest.partition(",")[0]  # (several hosts, as libpq takes them: the first one)
    if not rest:
        return address, None
    address = rest
    if address.startswith("["):
        host, _, tail = address[1:].partition("]")
        port = tail[1:] if tail.startswith(":") else ""
    else:
        host, sep, port = address.rpartition(":")
        if not sep or ":" in host:  # (no port; or a bare IPv6 address)
            return address, None
    return host, int(port) if port.isdigit() else None


class LogMessage:
    """One CMAP log message: structured ``fields`` and the unstructured text as ``str()``."""

    __slots__ = ("_text", "fields")

    def __init__(self, fields: dict[str, Any], text: str) -> None:
        self.fields = fields
        self._text = text

    def __str__(self) -> str:
        return self._text

    def __repr__(self) -> str:
        return f"LogMessage({self.fields!r})"


def _ms(seconds: float) -> float:
    return seconds * 1000.0


def build(event: ev.PoolEvent) -> LogMessage:
    """The CMAP log message for ``event``."""
    host, port = split_address(event.address)
    where = f"{host}:{port}" if port is not None else host
    fields: dict[str, Any] = {"serverHost": host}
    if port is not None:
        fields["serverPort"] = port
    cid = getattr(event, "connection_id", None)
    if cid is not None:
        fields["driverConnectionId"] = cid
    text: str
    match event:
        case ev.PoolCreatedEvent(options=options):
            fields["message"] = "Connection pool created"
            shown = {k: options[k] for k in _POOL_OPTION_ORDER if k in options}
            fields.update(shown)
            opts = ", ".join(f"{k}={v}" for k, v in shown.items())
            text = f"Connection pool created for {where} using options {opts}".rstrip()
        case ev.PoolReadyEvent():
            fields["message"] = "Connection pool ready"
            text = f"Connection pool ready for {where}"
        case ev.PoolClearedEvent(service_id=service_id):
            fields["message"] = "Connection pool cleared"
            if service_id is not None:
                fields["serviceId"] = str(service_id)
            text = f"Connection pool for {where} cleared for serviceId {service_id}"
        case ev.PoolClosedEvent():
            fields["message"] = "Connection pool closed"
            text = f"Connection pool closed for {where}"
        case ev.ConnectionCreatedEvent():
            fields["message"] = "Connection created"
            text = f"Connection created: address={where}, driver-generated ID={cid}"
        case ev.ConnectionReadyEvent(duration=duration):
            fields["message"] = "Connection ready"
            fields["durationMS"] = _ms(duration)
            text = (
                f"Connection ready: address={where}, driver-generated ID={cid}, "
                f"established in={fields['durationMS']} ms"
            )
        case ev.ConnectionClosedEvent(reason=reason, error=error):
            fields["message"] = "Connection closed"
            fields["reason"] = _CLOSE_REASONS.get(reason, reason)
            if error is not None:
                fields["error"] = repr(error)
            text = (
                f"Connection closed: address={where}, driver-generated ID={cid}. "
                f"Reason: {fields['reason']}. Error: {fields.get('error')}"
            )
        case ev.ConnectionCheckOutStartedEvent():
            fields["message"] = "Connection checkout started"
            text = f"Checkout started for connection to {where}"
        case ev.ConnectionCheckOutFailedEvent(reason=reason, error=error, duration=duration):
            fields["message"] = "Connection checkout failed"
            fields["reason"] = _CHECKOUT_REASONS.get(reason, reason)
            if error is not None:
                fields["error"] = repr(error)
            fields["durationMS"] = _ms(duration)
            text = (
                f"Checkout failed for connection to {where}. Reason: {fields['reason']}. "
                f"Error: {fields.get('error')}. Duration: {fields['durationMS']} ms"
            )
        case ev.ConnectionCheckedOutEvent(duration=duration):
            fields["message"] = "Connection checked out"
            fields["durationMS"] = _ms(duration)
            text = (
                f"Connection checked out: address={where}, driver-generated ID={cid}, "
                f"duration={fields['durationMS']} ms"
            )
        case ev.ConnectionCheckedInEvent():
            fields["message"] = "Connection checked in"
            text = f"Connection checked in: address={where}, driver-generated ID={cid}"
        case _:
            # poolkit's own events: the name, and every field but the stack
            fields["message"] = type(event).__name__
            for field in dataclasses.fields(event):
                if field.name not in ("address", "connection_id", "stack"):
                    fields[field.name] = getattr(event, field.name)
            text = f"{type(event).__name__} for {where}: " + ", ".join(
                f"{k}={v!r}" for k, v in fields.items() if k not in ("message", "serverHost")
            )
    return LogMessage(fields, text)


_POOL_LOGGER: Final = logging.getLogger("poolkit.pool")


def log_event(event: ev.PoolEvent, *, warn_connects_failing: bool = True) -> None:
    """Log ``event`` as its CMAP message if DEBUG is on for ``poolkit.connection``; a leaked
    lease and connects failing unseen also as a warning on ``poolkit.pool`` (the latter unless
    ``warn_connects_failing`` is false: ``PoolOptions.warn_connects_failing``), their recovery
    and an adaptive limit's change at INFO."""
    if type(event) is ev.LeaseLeakedEvent:
        if event.collected:
            how = "was garbage-collected while out (its connection is closed)"
        else:
            how = f"has been out for {event.held or 0.0:.3f} s"
        where = (
            f"it was checked out at:\n{event.stack}"
            if event.stack
            else "set PoolOptions.leak_timeout to see where it was checked out"
        )
        _POOL_LOGGER.warning(
            "poolkit: a lease on connection %d of %s %s; %s",
            event.connection_id,
            event.address,
            how,
            where,
        )
    elif type(event) is ev.ConnectFailingEvent:
        if warn_connects_failing:
            _POOL_LOGGER.warning(
                "poolkit: connects to %s are failing and no checkout was told (%d in a row): "
                "%r; the pool goes on trying",
                event.address,
                event.failures,
                event.error,
            )
    elif type(event) is ev.ConnectLostEvent:
        _POOL_LOGGER.warning(
            "poolkit: connect %d to %s was given up on and has not returned in %.3f s: it no "
            "longer counts against max_size and max_connecting (what it may still return is "
            "closed); a connect function should honour its timeout",
            event.connection_id,
            event.address,
            event.running_for,
        )
    elif type(event) is ev.ConnectRecoveredEvent:
        _POOL_LOGGER.info(
            "poolkit: connects to %s succeed again, after %d failures in %.3f s",
            event.address,
            event.failures,
            event.failing_for,
        )
    elif type(event) is ev.AdaptiveLimitChangedEvent:
        _POOL_LOGGER.info(
            "poolkit: the adaptive limit of %s went from %d to %d connections in use (knee %.1f "
            "at elasticity %s, share %.1f; operations take %.3f ms, %.3f ms on a server left: "
            "%.1f queueing)",
            event.address,
            event.previous,
            event.limit,
            event.knee,
            "?" if event.elasticity is None else f"{event.elasticity:.2f}",
            event.share,
            event.op_time * 1000.0,
            event.base_op_time * 1000.0,
            event.queued,
        )
    if LOGGER.isEnabledFor(_DEBUG):
        message = build(event)
        LOGGER.debug(message, extra={"cmap": message.fields})
