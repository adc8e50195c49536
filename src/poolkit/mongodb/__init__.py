"""MongoDB: what a driver built on poolkit needs around the pool.

Standard library only: the URI (:func:`parse_uri`) and the load-balanced topology with its SDAM
events (:class:`LoadBalancedTopology`). With the ``poolkit[mongodb]`` extra (pymongo's
``bson``): the wire protocol (:mod:`.wire`), connections (:mod:`.connection`: their connect
functions give them to the pools), and :class:`MongoPool` (commands, cursors and transactions
with the Load Balancer spec's pinning); these are imported on first use.
"""

from typing import TYPE_CHECKING, Any

from .sdam_events import (
    SdamEvent,
    SdamListener,
    ServerClosedEvent,
    ServerDescription,
    ServerDescriptionChangedEvent,
    ServerOpeningEvent,
    ServerType,
    TopologyClosedEvent,
    TopologyDescription,
    TopologyDescriptionChangedEvent,
    TopologyListener,
    TopologyOpeningEvent,
    TopologyType,
)
from .topology import LoadBalancedTopology, TopologyClosedError
from .uri import MongoURI, parse_uri
from .uri_options import InvalidURIError, URIOptions, URIOptionWarning

if TYPE_CHECKING:
    from .connection import (
        AsyncMongoConnection,
        MongoConnection,
        connect,
        connect_sync,
        connect_sync_uri,
        connect_uri,
    )
    from .errors import (
        AuthenticationError,
        HandshakeError,
        LoadBalancerUnsupportedError,
        MongoError,
        NetworkError,
        OperationFailure,
    )
    from .pinning import (
        AsyncCursor,
        AsyncTransaction,
        LoadBalancedTimeoutError,
        MongoPool,
        MongoPoolStats,
    )
    from .session import AsyncSession

#: names that need bson, and their modules (imported on first use)
_LAZY = {
    "AsyncMongoConnection": "connection",
    "MongoConnection": "connection",
    "connect": "connection",
    "connect_sync": "connection",
    "connect_uri": "connection",
    "connect_sync_uri": "connection",
    "AuthenticationError": "errors",
    "HandshakeError": "errors",
    "LoadBalancerUnsupportedError": "errors",
    "MongoError": "errors",
    "NetworkError": "errors",
    "OperationFailure": "errors",
    "AsyncCursor": "pinning",
    "AsyncTransaction": "pinning",
    "LoadBalancedTimeoutError": "pinning",
    "MongoPool": "pinning",
    "MongoPoolStats": "pinning",
    "AsyncSession": "session",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'poolkit.mongodb' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f".{module}", __name__), name)


__all__ = [
    "AsyncCursor",
    "AsyncMongoConnection",
    "AsyncSession",
    "AsyncTransaction",
    "AuthenticationError",
    "HandshakeError",
    "InvalidURIError",
    "LoadBalancedTimeoutError",
    "LoadBalancedTopology",
    "LoadBalancerUnsupportedError",
    "MongoConnection",
    "MongoError",
    "MongoPool",
    "MongoPoolStats",
    "MongoURI",
    "NetworkError",
    "OperationFailure",
    "SdamEvent",
    "SdamListener",
    "ServerClosedEvent",
    "ServerDescription",
    "ServerDescriptionChangedEvent",
    "ServerOpeningEvent",
    "ServerType",
    "TopologyClosedError",
    "TopologyClosedEvent",
    "TopologyDescription",
    "TopologyDescriptionChangedEvent",
    "TopologyListener",
    "TopologyOpeningEvent",
    "TopologyType",
    "URIOptionWarning",
    "URIOptions",
    "connect",
    "connect_sync",
    "connect_sync_uri",
    "connect_uri",
    "parse_uri",
]
