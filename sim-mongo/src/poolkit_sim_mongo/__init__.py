"""A simulated MongoDB load balancer and its services, on 127.0.0.1, for testing drivers in
load-balanced mode (the ``poolkit[mongodb]`` extra: pymongo's ``bson``).

* :class:`SimMongoServer`: the load balancer and N services (mongos processes) behind it, each
  with its own ``serviceId``, cursors and transactions, over one shared
  :class:`SimMongoStore`; set by :class:`SimMongoSettings`, with faults at run time
  (:meth:`~SimMongoServer.fail_command`, :meth:`~SimMongoServer.slow_hello`,
  :meth:`~SimMongoServer.close_connections`, MongoDB's ``configureFailPoint``) and counters
  (:class:`SimMongoStats`).
* :class:`HAProxy`: a real load balancer (HAProxy in TCP mode) in front of servers of one
  service each.
* :class:`WireClient`: one blocking connection, command by command.
"""


from .client import WireClient, WireCommandError
from .faults import (
    NOT_PRIMARY_CODES,
    RECOVERING_CODES,
    RETRYABLE_WRITE_CODES,
    SHUTDOWN_CODES,
    STATE_CHANGE_CODES,
    FailPoint,
)
from .haproxy import HAProxy, HAProxyError, find_haproxy
from .server import SimMongoServer
from .settings import ConnectionInfo, ServiceStats, SimMongoSettings, SimMongoStats
from .store import SimMongoStore

__all__ = [
    "NOT_PRIMARY_CODES",
    "RECOVERING_CODES",
    "RETRYABLE_WRITE_CODES",
    "SHUTDOWN_CODES",
    "STATE_CHANGE_CODES",
    "ConnectionInfo",
    "FailPoint",
    "HAProxy",
    "HAProxyError",
    "ServiceStats",
    "SimMongoServer",
    "SimMongoSettings",
    "SimMongoStats",
    "SimMongoStore",
    "WireClient",
    "WireCommandError",
    "find_haproxy",
]
