"""Command monitoring: the events a connection emits around each command, with the
``serviceId`` of its service in load-balanced mode (the Load Balancer spec's "Events").

Rules of this module
--------------------
* Events are frozen, slotted dataclasses; durations are seconds.
* A security-sensitive command (authentication, user management, a ``hello`` carrying
  ``speculativeAuthenticate``) is published with an empty command and reply, as the Command
  Logging and Monitoring spec says.
* A listener that raises is logged (``poolkit.events``) and the others still get the event:
  monitoring never changes what a command does.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from .errors import ServiceId

__all__ = [
    "CommandEvent",
    "CommandFailedEvent",
    "CommandListener",
    "CommandStartedEvent",
    "CommandSucceededEvent",
]

_log = logging.getLogger("poolkit.events")

SENSITIVE = frozenset(
    {
        "authenticate",
        "saslstart",
        "saslcontinue",
        "getnonce",
        "createuser",
        "updateuser",
        "copydbgetnonce",
        "copydbsaslstart",
        "copydb",
    }
)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class CommandEvent:
    """``request_id``: the message's; ``server_connection_id``: the server's ``connectionId``
    for this connection; ``service_id``: its service (load-balanced mode), else None."""

    command_name: str
    database_name: str
    request_id: int
    address: str
    server_connection_id: int | None = None
    service_id: ServiceId = None


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class CommandStartedEvent(CommandEvent):
    command: Mapping[str, Any]


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class CommandSucceededEvent(CommandEvent):
    duration: float
    reply: Mapping[str, Any]


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class CommandFailedEvent(CommandEvent):
    duration: float
    failure: BaseException


CommandListener = Callable[[CommandEvent], object]


def is_sensitive(name: str, document: Mapping[str, Any]) -> bool:
    lowered = name.lower()
    if lowered in SENSITIVE:
        return True
    return lowered in {"hello", "ismaster"} and "speculativeAuthenticate" in document


def publish(listeners: Iterable[CommandListener], event: CommandEvent) -> None:
    for listener in listeners:
        try:
            listener(event)
        except Exception:
            _log.exception("command listener %r raised on %s", listener, type(event).__name__)
