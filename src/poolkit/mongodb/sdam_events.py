"""SDAM's values: the topology and server types, their descriptions, and the SDAM monitoring
events with their listeners (the "Server Discovery and Monitoring" spec's names, snake_case).

Rules of this module
--------------------
* Values only: every description and event is a frozen, slotted, keyword-only dataclass, built
  whole (nothing filled in later). A change of description is a new description.
* No behaviour beyond reading them: what emits the events is :mod:`.topology`.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable
from typing import Any, Final

__all__ = [
    "SdamEvent",
    "SdamListener",
    "ServerClosedEvent",
    "ServerDescription",
    "ServerDescriptionChangedEvent",
    "ServerOpeningEvent",
    "ServerType",
    "TopologyClosedEvent",
    "TopologyDescription",
    "TopologyDescriptionChangedEvent",
    "TopologyListener",
    "TopologyOpeningEvent",
    "TopologyType",
]


class TopologyType(enum.StrEnum):
    """SDAM's topology types; the value is the spec's name."""

    Unknown = "Unknown"
    Single = "Single"
    ReplicaSetNoPrimary = "ReplicaSetNoPrimary"
    ReplicaSetWithPrimary = "ReplicaSetWithPrimary"
    Sharded = "Sharded"
    LoadBalanced = "LoadBalanced"


class ServerType(enum.StrEnum):
    """SDAM's server types; the value is the spec's name."""

    Unknown = "Unknown"
    Standalone = "Standalone"
    Mongos = "Mongos"
    PossiblePrimary = "PossiblePrimary"
    RSPrimary = "RSPrimary"
    RSSecondary = "RSSecondary"
    RSArbiter = "RSArbiter"
    RSOther = "RSOther"
    RSGhost = "RSGhost"
    LoadBalancer = "LoadBalancer"


_DATA_BEARING: Final = frozenset(
    {
        ServerType.Standalone,
        ServerType.Mongos,
        ServerType.RSPrimary,
        ServerType.RSSecondary,
        ServerType.LoadBalancer,
    }
)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ServerDescription:
    """One server as SDAM sees it. In load-balanced mode only ``address`` and ``server_type``
    are ever set (the spec: "All other fields ... MUST remain unset")."""

    address: str
    server_type: ServerType = ServerType.Unknown
    min_wire_version: int | None = None
    max_wire_version: int | None = None
    set_name: str | None = None
    set_version: int | None = None
    election_id: Any = None
    logical_session_timeout_minutes: int | None = None
    topology_version: dict[str, Any] | None = None

    @property
    def is_data_bearing(self) -> bool:
        """Whether the server holds data (a ``LoadBalancer`` does, as the spec says)."""
        return self.server_type in _DATA_BEARING


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class TopologyDescription:
    """The deployment as SDAM sees it: its type and its servers, in address order."""

    topology_type: TopologyType
    servers: tuple[ServerDescription, ...] = ()
    compatible: bool = True
    set_name: str | None = None
    max_set_version: int | None = None
    max_election_id: Any = None
    logical_session_timeout_minutes: int | None = None

    def server_descriptions(self) -> dict[str, ServerDescription]:
        """The servers by address."""
        return {server.address: server for server in self.servers}


# ---------------------------------------------------------------------- events


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class SdamEvent:
    """Base of every SDAM event. ``topology_id``: the topology's unique id (a ``bson.ObjectId``
    when pymongo's ``bson`` is installed, else a 24-digit hex string)."""

    topology_id: object


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class TopologyOpeningEvent(SdamEvent):
    """The topology was created (opened)."""


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class TopologyDescriptionChangedEvent(SdamEvent):
    """The topology's description changed."""

    previous_description: TopologyDescription
    new_description: TopologyDescription


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class TopologyClosedEvent(SdamEvent):
    """The topology was closed."""


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ServerOpeningEvent(SdamEvent):
    """A server (``address``) was added to the topology."""

    address: str


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ServerDescriptionChangedEvent(SdamEvent):
    """A server's description changed."""

    address: str
    previous_description: ServerDescription
    new_description: ServerDescription


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ServerClosedEvent(SdamEvent):
    """A server (``address``) was removed from the topology."""

    address: str


SdamListener = Callable[[SdamEvent], object]


class TopologyListener:
    """Base class for SDAM listeners with one method per event type (pymongo style).

    Override the methods you need; the others do nothing. An instance is itself a listener.
    """

    def topology_opening(self, event: TopologyOpeningEvent) -> None: ...
    def topology_description_changed(self, event: TopologyDescriptionChangedEvent) -> None: ...
    def topology_closed(self, event: TopologyClosedEvent) -> None: ...
    def server_opening(self, event: ServerOpeningEvent) -> None: ...
    def server_description_changed(self, event: ServerDescriptionChangedEvent) -> None: ...
    def server_closed(self, event: ServerClosedEvent) -> None: ...

    def __call__(self, event: SdamEvent) -> None:
        getattr(self, _METHODS[type(event)])(event)


_METHODS: Final[dict[type[SdamEvent], str]] = {
    TopologyOpeningEvent: "topology_opening",
    TopologyDescriptionChangedEvent: "topology_description_changed",
    TopologyClosedEvent: "topology_closed",
    ServerOpeningEvent: "server_opening",
    ServerDescriptionChangedEvent: "server_description_changed",
    ServerClosedEvent: "server_closed",
}
