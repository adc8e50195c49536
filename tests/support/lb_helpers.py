"""Helpers of the tests of poolkit.mongodb's pools against the simulated load balancer."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

import poolkit
from poolkit.mongodb import AsyncMongoPool, async_connect
from poolkit_sim_mongo import SimMongoServer


def run(test: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(asyncio.wait_for(test(), 30))


class Recorder:
    def __init__(self) -> None:
        self.events: list[object] = []

    def __call__(self, event: object) -> None:
        self.events.append(event)

    def of(self, kind: type) -> list[Any]:
        return [e for e in self.events if isinstance(e, kind)]


async def lb_pool(
    server: SimMongoServer,
    recorder: Recorder | None = None,
    commands: Recorder | None = None,
    **options: Any,
) -> poolkit.AsyncPool[Any]:
    """A ready pool of load-balanced connections to ``server``: pool events to ``recorder``,
    command monitoring events to ``commands``."""
    host, port = server.host, server.port
    pool = poolkit.AsyncPool(
        async_connect(
            host,
            port,
            load_balanced=True,
            connect_timeout=options.pop("timeout", 5.0),
            listeners=[commands] if commands is not None else [],
        ),
        address=server.address,
        options=poolkit.PoolOptions(load_balanced=True, **options),
        listeners=[recorder] if recorder is not None else [],
    )
    pool.ready()
    return pool


async def spread(mongo: AsyncMongoPool, n: int) -> list[Any]:
    """Make ``n`` connections at once (round robin: one per service) and give them back."""
    leases = [await mongo.pool.checkout() for _ in range(n)]
    services = [lease.connection.service_id for lease in leases]
    for lease in leases:
        lease.release()
    return services


async def filled(server: SimMongoServer, mongo: AsyncMongoPool, n: int = 25) -> None:
    await mongo.insert("test", "items", [{"_id": i, "kind": "item"} for i in range(n)])
