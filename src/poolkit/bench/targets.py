"""The operation ``poolkit bench`` repeats, per target, and how it connects.

One :class:`Workload` per target kind, built in each worker process from the run's
:class:`~.config.RunConfig`; its drivers are imported only there (an extra that is missing
raises the backend's ``ImportError``, naming the ``pip install``).

Rules of this module
--------------------
* Each target's connections carry the run's name (``RunConfig.app_name``,
  :data:`APPLICATION_NAME` and the parent's pid) where the server can show one (PostgreSQL's
  ``application_name``, Redis's client name): that is how the bench counts the connections the
  server sees, apart from another run's, and how a test finds any left behind.
* An operation is bounded by ``op_timeout``: a target that stops answering is an error, not a
  hang.
"""

from __future__ import annotations

import asyncio
import socket
import urllib.parse
import warnings
from collections.abc import Callable, Iterable
from typing import Any

from ..options import Hooks
from ..testing.sim import (
    SimConnection,
    SimGoingAwayError,
    SimSocketConnection,
    sim_async_connect,
    sim_check,
    sim_connect,
    sim_is_broken,
)
from .config import RunConfig

__all__ = ["APPLICATION_NAME", "PREPARED_STATEMENT_ERRORS", "Workload", "hint", "workload"]

#: the start of the name the bench's connections carry on the server
APPLICATION_NAME = "poolkit-bench"

#: what a driver raises when named prepared statements meet a pooler's transaction pooling
PREPARED_STATEMENT_ERRORS = frozenset(
    {
        "InvalidSQLStatementNameError",  # asyncpg: prepared statement ... does not exist
        "DuplicatePreparedStatementError",  # asyncpg: ... already exists
        "InvalidSqlStatementName",  # psycopg
        "DuplicatePreparedStatement",
    }
)


def hint(config: RunConfig, kinds: Iterable[str]) -> str | None:
    """What to try, when errors of these kinds say more than their names."""
    failing = any(kind in PREPARED_STATEMENT_ERRORS for kind in kinds)
    if failing and config.target.kind == "postgresql" and not config.pgbouncer:
        return (
            "prepared statements fail: is the target PgBouncer in transaction mode? "
            "Use --pgbouncer (see docs/bench-pgbouncer.md)"
        )
    return None


Connect = Callable[[Any], Any]


class Workload:
    """How to connect and what one operation is, for ``AsyncPool`` (``async_*``) and for
    ``Pool`` (``sync_*``)."""

    address = ""
    #: the pool's ``load_balanced`` (connections carry a service id)
    load_balanced = False
    #: what ``*_op`` raises for a request the target refused before it was sent: the operation
    #: is retried on another checkout (as an HTTP/2 client retries a request a GOAWAY refused)
    retryable: tuple[type[BaseException], ...] = ()
    #: the pool's ``expected_streams`` (a multiplexed protocol's stream limit)
    expected_streams = 1

    def async_connect(self) -> Connect:
        raise NotImplementedError

    async def async_op(self, conn: Any) -> None:
        raise NotImplementedError

    def async_hooks(self) -> Hooks | None:
        return None

    def trio_connect(self) -> Connect:
        """The connect function under trio (``--trio``: the targets that have one), whose
        connections ``async_op`` takes too."""
        raise NotImplementedError

    def trio_hooks(self) -> Hooks | None:
        return None

    def sync_connect(self) -> Connect:
        raise NotImplementedError

    def sync_op(self, conn: Any) -> None:
        raise NotImplementedError

    def sync_hooks(self) -> Hooks | None:
        return None


def _sim_async_check(conn: SimConnection) -> None:
    """A plain function: ``AsyncPool`` runs it at once, no task (a check at every checkout)."""
    if conn.closed:
        raise ConnectionError("the simulated server closed this connection")


class SimWorkload(Workload):
    retryable = (SimGoingAwayError,)

    def __init__(self, config: RunConfig) -> None:
        self.host, self.port = config.target.host, config.target.port
        self.address = f"{self.host}:{self.port}"
        self.payload = b"x" * config.payload
        self.timeout = config.op_timeout
        self.connect_timeout = config.connect_timeout

    def async_connect(self) -> Connect:
        return sim_async_connect(self.host, self.port, timeout=self.connect_timeout)

    async def async_op(self, conn: SimConnection) -> None:
        await conn.request(self.payload, timeout=self.timeout)

    def async_hooks(self) -> Hooks:
        return Hooks(check=_sim_async_check, is_broken=sim_is_broken)

    def trio_connect(self) -> Connect:
        from ..testing.sim.trio_client import sim_trio_connect

        return sim_trio_connect(self.host, self.port, timeout=self.connect_timeout)

    def trio_hooks(self) -> Hooks:
        from ..testing.sim.trio_client import sim_trio_check

        return Hooks(check=sim_trio_check, is_broken=sim_is_broken)

    def sync_connect(self) -> Connect:
        return sim_connect(self.host, self.port, timeout=self.connect_timeout)

    def sync_op(self, conn: SimSocketConnection) -> None:
        conn.request(self.payload, timeout=self.timeout)

    def sync_hooks(self) -> Hooks:
        return Hooks(check=sim_check, is_broken=sim_is_broken)


class AsyncpgWorkload(Workload):
    def __init__(self, config: RunConfig) -> None:
        from ..backends import asyncpg as backend

        self.backend = backend
        self.address = config.target.shown
        self.query = config.query
        self.timeout = config.op_timeout
        kwargs: dict[str, Any] = {"timeout": config.connect_timeout}
        if config.pgbouncer:
            kwargs["statement_cache_size"] = 0  # PgBouncer's transaction pooling: see docs/bench.md
        self.connect = backend.async_connect(
            config.target.url, application_name=config.app_name, **kwargs
        )

    def async_connect(self) -> Connect:
        return self.connect

    async def async_op(self, conn: Any) -> None:
        await conn.fetchval(self.query, timeout=self.timeout)

    def async_hooks(self) -> Hooks:
        return self.backend.async_hooks()


class PsycopgWorkload(Workload):
    def __init__(self, config: RunConfig) -> None:
        from ..backends import psycopg as backend

        self.backend = backend
        self.address = config.target.shown
        self.query = config.query
        self.timeout = config.op_timeout
        self.url = config.target.url
        self.kwargs: dict[str, Any] = {
            "autocommit": True,
            "application_name": config.app_name,
            "connect_timeout": max(1, round(config.connect_timeout)),
        }
        if config.pgbouncer:
            self.kwargs["prepare_threshold"] = None

    def async_connect(self) -> Connect:
        return self.backend.async_connect(self.url, **self.kwargs)

    async def async_op(self, conn: Any) -> None:
        async with asyncio.timeout(self.timeout):
            cursor = await conn.execute(self.query)
            await cursor.fetchall()

    def async_hooks(self) -> Hooks:
        return self.backend.async_hooks()

    def sync_connect(self) -> Connect:
        return self.backend.connect(self.url, **self.kwargs)

    def sync_op(self, conn: Any) -> None:
        conn.execute(self.query).fetchall()

    def sync_hooks(self) -> Hooks:
        return self.backend.hooks()


class RedisWorkload(Workload):
    def __init__(self, config: RunConfig) -> None:
        from ..backends import redis as backend

        self.backend = backend
        self.address = config.target.shown
        self.url = config.target.url
        self.kwargs = {
            "client_name": config.app_name,
            "socket_timeout": config.op_timeout,
            "socket_connect_timeout": config.connect_timeout,
        }

    def async_connect(self) -> Connect:
        return self.backend.async_connect(self.url, **self.kwargs)

    async def async_op(self, conn: Any) -> None:
        await conn.ping()

    def async_hooks(self) -> Hooks:
        return self.backend.async_hooks()

    def sync_connect(self) -> Connect:
        return self.backend.connect(self.url, **self.kwargs)

    def sync_op(self, conn: Any) -> None:
        conn.ping()

    def sync_hooks(self) -> Hooks:
        return self.backend.hooks()


class TcpWorkload(Workload):
    """An echo-style target: send ``payload`` bytes, read as many back."""

    def __init__(self, config: RunConfig) -> None:
        from ..backends import tcp as backend

        self.backend = backend
        self.host, self.port = config.target.host, config.target.port
        self.address = f"{self.host}:{self.port}"
        self.payload = b"x" * (config.payload - 1) + b"\n"
        self.timeout = config.op_timeout
        self.connect_timeout = config.connect_timeout

    def async_connect(self) -> Connect:
        return self.backend.async_connect(
            self.host, self.port, connect_timeout=self.connect_timeout
        )

    async def async_op(self, conn: Any) -> None:
        async with asyncio.timeout(self.timeout):
            conn.writer.write(self.payload)
            await conn.reader.readexactly(len(self.payload))

    def async_hooks(self) -> Hooks:
        return self.backend.async_hooks()

    def sync_connect(self) -> Connect:
        return self.backend.connect(
            self.host, self.port, connect_timeout=self.connect_timeout, timeout=self.timeout
        )

    def sync_op(self, conn: socket.socket) -> None:
        conn.sendall(self.payload)
        left = len(self.payload)
        while left:
            chunk = conn.recv(left)
            if not chunk:
                raise ConnectionError("the target closed the connection")
            left -= len(chunk)

    def sync_hooks(self) -> Hooks:
        return self.backend.hooks()


class MongoWorkload(Workload):
    """MongoDB (``poolkit.mongodb``): ``ping`` on the ``admin`` database, through a load
    balancer when the URI says ``loadBalanced=true``."""

    def __init__(self, config: RunConfig) -> None:
        from .. import mongodb

        self.mongodb = mongodb
        with warnings.catch_warnings():  # (the parent showed them when it read the target)
            warnings.simplefilter("ignore")
            uri = mongodb.parse_uri(config.target.url)
        if not uri.hosts:
            raise ValueError("mongodb+srv:// needs a DNS lookup: give the hosts (mongodb://)")
        if uri.hosts[0][1] is None:
            raise ValueError("a MongoDB target needs a host and port, not a socket path")
        from ..mongodb.pools import uri_connect_options

        # the URI's credentials, TLS and loadBalanced; the bench's name and connect timeout
        self.host, self.port, self.kwargs = uri_connect_options(uri)
        self.kwargs.update(app_name=config.app_name, connect_timeout=config.connect_timeout)
        self.address = uri.addresses[0]
        self.load_balanced = uri.load_balanced
        self.timeout = config.op_timeout

    def async_connect(self) -> Connect:
        return self.mongodb.async_connect(self.host, self.port, **self.kwargs)

    async def async_op(self, conn: Any) -> None:
        await conn.command("admin", {"ping": 1}, timeout=self.timeout)

    def async_hooks(self) -> Hooks:
        return self.mongodb.async_hooks()

    def sync_connect(self) -> Connect:
        return self.mongodb.connect(self.host, self.port, **self.kwargs)

    def sync_op(self, conn: Any) -> None:
        conn.command("admin", {"ping": 1}, timeout=self.timeout)

    def sync_hooks(self) -> Hooks:
        return self.mongodb.hooks()


class HttpWorkload(Workload):
    """HTTP/2 (``poolkit.backends.http2``): a GET of the target URL, its body read; asyncio
    only."""

    def __init__(self, config: RunConfig) -> None:
        from ..backends import http2

        self.http2 = http2
        self.url = config.target.url
        parts = urllib.parse.urlsplit(self.url)
        self.path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        self.address = config.target.shown
        self.timeout = config.op_timeout
        self.retryable = (http2.StreamRefusedError,)  # (a GOAWAY refused it: not processed)
        self.expected_streams = http2.EXPECTED_STREAMS

    def async_connect(self) -> Connect:
        return self.http2.async_connect(self.url)

    async def async_op(self, conn: Any) -> None:
        async with asyncio.timeout(self.timeout):
            response = await conn.request("GET", self.path)
            await response.aread()
        if response.status >= 500:
            raise ConnectionError(f"HTTP {response.status}")

    def async_hooks(self) -> Hooks:
        return self.http2.async_hooks()


def workload(config: RunConfig) -> Workload:
    """The :class:`Workload` of ``config``'s target (drivers imported here)."""
    kind = config.target.kind
    if kind == "sim":
        return SimWorkload(config)
    if kind == "postgresql":
        driver = config.driver or ("psycopg" if config.threads else "asyncpg")
        return AsyncpgWorkload(config) if driver == "asyncpg" else PsycopgWorkload(config)
    if kind == "redis":
        return RedisWorkload(config)
    if kind == "mongodb":
        return MongoWorkload(config)
    if kind == "http":
        return HttpWorkload(config)
    return TcpWorkload(config)
