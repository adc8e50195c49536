"""MongoDB: what a driver built on poolkit needs around the pool.

Standard library only: the URI (:func:`parse_uri`) and the load-balanced topology with its SDAM
events (:class:`LoadBalancedTopology`). With the ``poolkit[mongodb]`` extra (pymongo's
``bson``): the wire protocol (:mod:`.wire`), connections (:mod:`.connection`: their connect
functions give them to the pools), and :class:`AsyncMongoPool` / :class:`MongoPool` (commands,
cursors, sessions and transactions over an :class:`~poolkit.AsyncPool` / a :class:`~poolkit.Pool`,
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
        async_connect,
        connect,
    )
    from .errors import (
        AuthenticationError,
        HandshakeError,
        InvalidOperationError,
        LoadBalancerUnsupportedError,
        MongoError,
        NetworkError,
        OperationFailure,
    )
    from .pinning import LoadBalancedTimeoutError, MongoPoolStats
    from .pool_async import AsyncCursor, AsyncMongoPool, AsyncSession, AsyncTransaction
    from .pool_sync import Cursor, MongoPool, Session, Transaction
    from .pools import (
        async_connect_uri,
        async_hooks,
        connect_uri,
        create_async_pool,
        create_pool,
        hooks,
    )

#: names that need bson, and their modules (imported on first use)
_LAZY = {
    "AsyncMongoConnection": "connection",
    "MongoConnection": "connection",
    "async_connect": "connection",
    "connect": "connection",
    "async_connect_uri": "pools",
    "connect_uri": "pools",
    "create_pool": "pools",
    "create_async_pool": "pools",
    "hooks": "pools",
    "async_hooks": "pools",
    "AuthenticationError": "errors",
    "HandshakeError": "errors",
    "InvalidOperationError": "errors",
    "LoadBalancerUnsupportedError": "errors",
    "MongoError": "errors",
    "NetworkError": "errors",
    "OperationFailure": "errors",
    "LoadBalancedTimeoutError": "pinning",
    "MongoPoolStats": "pinning",
    "AsyncCursor": "pool_async",
    "AsyncMongoPool": "pool_async",
    "AsyncSession": "pool_async",
    "AsyncTransaction": "pool_async",
    "Cursor": "pool_sync",
    "MongoPool": "pool_sync",
    "Session": "pool_sync",
    "Transaction": "pool_sync",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'poolkit.mongodb' has no attribute {name!r}")
    import importlib

    importlib.import_module(".wire", __name__)  # (first: its ImportError names the extra)
    return getattr(importlib.import_module(f".{module}", __name__), name)


__all__ = [
    "AsyncCursor",
    "AsyncMongoConnection",
    "AsyncMongoPool",
    "AsyncSession",
    "AsyncTransaction",
    "AuthenticationError",
    "Cursor",
    "HandshakeError",
    "InvalidOperationError",
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
    "Session",
    "TopologyClosedError",
    "TopologyClosedEvent",
    "TopologyDescription",
    "TopologyDescriptionChangedEvent",
    "TopologyListener",
    "TopologyOpeningEvent",
    "TopologyType",
    "Transaction",
    "URIOptionWarning",
    "URIOptions",
    "async_hooks",
    "async_connect",
    "async_connect_uri",
    "connect",
    "connect_uri",
    "create_async_pool",
    "create_pool",
    "hooks",
    "parse_uri",
]
