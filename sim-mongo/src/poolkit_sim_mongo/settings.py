"""The simulated MongoDB server's settings (:class:`SimMongoSettings`), its counters
(:class:`SimMongoStats`, :class:`ServiceStats`) and what it knows of a connection
(:class:`ConnectionInfo`).

Rules of this module
--------------------
* Settings are checked when made: a bad value raises ValueError here, never in the server.
* Stats are frozen snapshots: taking one copies the counters.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from bson.objectid import ObjectId

__all__ = ["POLICIES", "ConnectionInfo", "ServiceStats", "SimMongoSettings", "SimMongoStats"]

#: how the server assigns an accepted connection to one of its services
POLICIES = ("round_robin", "random", "least_connections")


@dataclasses.dataclass(frozen=True, slots=True)
class SimMongoSettings:
    """How a :class:`~poolkit_sim_mongo.SimMongoServer` behaves.

    ``services``: how many services (mongos processes) the server fronts, each with its own
    ObjectId ``serviceId``, cursors and transactions; 1 makes the server one service alone (a
    mongos for a real load balancer, such as HAProxy, to front). ``policy``: which service an
    accepted connection goes to (:data:`POLICIES`). ``service_ids``: fixed ids (default: new
    ObjectIds). ``seed``: seeds the ``random`` policy and the cursor ids.

    ``load_balanced``: answer as a service behind a load balancer: the first ``hello`` of a
    connection must say ``loadBalanced: true`` (else error 354 LoadBalancerSupportMismatch, and
    the connection closes) and its reply carries ``serviceId``. False: a plain mongos, which
    never sends ``serviceId`` (a driver in load-balanced mode must refuse it).
    ``proxy_protocol``: every connection starts with a PROXY protocol header (v1 or v2), as on
    mongos's ``loadBalancerPort``; the client's address in it is the connection's ``peer``.

    ``version``, ``min_wire_version``, ``max_wire_version``, ``max_bson_object_size``,
    ``max_message_size_bytes``, ``max_write_batch_size``, ``logical_session_timeout_minutes``:
    what ``hello`` and ``buildInfo`` announce (a mongos 7.0 by default).
    ``default_batch_size``: the first batch of a ``find`` without ``batchSize``.
    ``reap_cursors_on_close``: a connection's close kills the cursors it opened (the load
    balancer spec allows a service to); its open transactions are aborted in any case.

    ``users``: when given, the services require authentication (SCRAM, :mod:`.scram`): a name
    (a user of ``admin``) or ``"<db>.<name>"``, and its password. A connection not
    authenticated runs only the handshake's commands (``hello``, ``saslStart``,
    ``saslContinue``, ``ping``, ``buildInfo``, ``endSessions``; and ``configureFailPoint``, the
    tests' own): anything else is error 13 Unauthorized. ``auth_mechanisms``: the users'
    credentials (``hello``'s ``saslSupportedMechs``); ``scram_iterations``: their iteration
    count (4096, the least a client takes, keeps tests fast); ``speculative_auth``: answer a
    ``hello``'s ``speculativeAuthenticate`` (as MongoDB 4.4 and later do; False: ignore it, as
    an older server does, and the client falls back to ``saslStart``).
    """

    services: int = 3
    policy: str = "round_robin"
    service_ids: tuple[ObjectId, ...] | None = None
    seed: int | None = None
    load_balanced: bool = True
    proxy_protocol: bool = False
    version: str = "7.0.0"
    min_wire_version: int = 0
    max_wire_version: int = 21
    max_bson_object_size: int = 16 * 1024 * 1024
    max_message_size_bytes: int = 48_000_000
    max_write_batch_size: int = 100_000
    logical_session_timeout_minutes: int = 30
    default_batch_size: int = 101
    reap_cursors_on_close: bool = True
    users: Mapping[str, str] = dataclasses.field(default_factory=dict, repr=False, hash=False)
    auth_mechanisms: tuple[str, ...] = ("SCRAM-SHA-1", "SCRAM-SHA-256")
    scram_iterations: int = 4096
    speculative_auth: bool = True

    def __post_init__(self) -> None:
        for name in (
            "services",
            "max_wire_version",
            "max_bson_object_size",
            "max_message_size_bytes",
            "max_write_batch_size",
            "logical_session_timeout_minutes",
            "default_batch_size",
            "scram_iterations",
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"SimMongoSettings({name}=...) must be an int >= 1, got {value!r}")
        if not 0 <= self.min_wire_version <= self.max_wire_version:
            raise ValueError("SimMongoSettings: min_wire_version must be in 0..max_wire_version")
        if self.policy not in POLICIES:
            raise ValueError(f"SimMongoSettings(policy={self.policy!r}): one of {POLICIES}")
        if self.service_ids is not None:
            ids = tuple(self.service_ids)
            if len(ids) != self.services or len(set(ids)) != len(ids):
                raise ValueError("SimMongoSettings(service_ids=...): one distinct id per service")
            if not all(isinstance(i, ObjectId) for i in ids):
                raise ValueError("SimMongoSettings(service_ids=...) must be ObjectIds")
        for name, password in dict(self.users).items():
            if not (isinstance(name, str) and name.strip(".") and isinstance(password, str)):
                raise ValueError("SimMongoSettings(users=...): user names to str passwords")
        known = ("SCRAM-SHA-1", "SCRAM-SHA-256")
        if not self.auth_mechanisms or not set(self.auth_mechanisms) <= set(known):
            raise ValueError(f"SimMongoSettings(auth_mechanisms=...): some of {known}")


@dataclasses.dataclass
class ConnectionInfo:
    """One connection as the server sees it: its ``service`` (index), its ``connection_id``
    (``hello``'s ``connectionId``, counted per service), the client's address ``peer``
    (``host:port``; from the PROXY header behind a proxy that sends one), and its handshake:
    the first ``hello`` document (``hello``) and the ``appName`` in it; ``user``: who it
    authenticated as (``"<db>.<name>"``), ``sasl``: its authentication under way."""

    service: int
    connection_id: int
    peer: str
    hello: dict[str, Any] | None = None
    app_name: str | None = None
    open: bool = True
    user: str | None = None
    sasl: Any = dataclasses.field(default=None, repr=False)


@dataclasses.dataclass(frozen=True, slots=True)
class ServiceStats:
    """One service's counters (``commands``: how many of each command it received)."""

    index: int
    service_id: ObjectId
    connections_open: int
    connections_accepted: int
    commands: Mapping[str, int]
    cursors_open: int
    transactions_open: int


@dataclasses.dataclass(frozen=True, slots=True)
class SimMongoStats:
    """The server's counters: ``services`` one by one, then totals. ``fault_hits``: commands a
    fail point caught; ``connections_closed_by_fault``: connections a fault closed (a fail
    point's ``close_connection``, or ``close_connections()``)."""

    services: tuple[ServiceStats, ...]
    connections_open: int
    connections_accepted: int
    commands: Mapping[str, int]
    fault_hits: int
    connections_closed_by_fault: int

    def service(self, service_id: ObjectId) -> ServiceStats:
        """The stats of the service whose id is ``service_id``."""
        for stats in self.services:
            if stats.service_id == service_id:
                return stats
        raise KeyError(service_id)
