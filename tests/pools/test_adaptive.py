"""An adaptive AsyncPool (``PoolOptions(adaptive=...)``, issue 28) over the embedded server, on
virtual time (``poolkit.testing.loop``): real sockets, the server's cores' queue, the clock
jumping when nothing is ready. 32 tasks on a server of 8 cores at 1 ms: the pool finds the knee
instead of holding ``max_size``; when the server loses half its cores, the limit follows."""

from __future__ import annotations

import asyncio
import statistics

import poolkit
from poolkit.testing.loop import run
from poolkit.testing.sim import SimChange, SimConnection, SimServer, SimSettings, sim_connect


async def _load(pool: poolkit.AsyncPool[SimConnection], tasks: int, until: float) -> list[int]:
    """``tasks`` callers, each a request at a time until ``until``; the limit every 10 ms."""
    loop = asyncio.get_running_loop()
    core = pool._core  # (the limit is not in stats() yet: issue 28, point 2)
    adaptive = core.shared.adaptive
    assert adaptive is not None
    limits: list[int] = []

    async def caller() -> None:
        while loop.time() < until:
            async with pool.connection() as conn:
                await conn.request(b"x")

    async def watch() -> None:
        while loop.time() < until:
            await asyncio.sleep(0.01)
            limits.append(adaptive.limit)
            # (a limit lowered takes no lease back: in use may stay above it until they return)

    await asyncio.gather(watch(), *(caller() for _ in range(tasks)))
    return limits


def test_an_adaptive_pool_finds_the_knee_and_follows_the_server() -> None:
    settings = SimSettings(
        service_time=("exp", 0.001),
        concurrency=8,
        seed=3,
        schedule=(SimChange(at=6.0, concurrency=4),),
    )

    async def main() -> None:
        async with SimServer(settings) as server:
            options = poolkit.PoolOptions(max_size=32, adaptive=poolkit.Adaptive())
            pool = poolkit.AsyncPool(
                sim_connect("127.0.0.1", server.port), address="sim", options=options
            )
            pool.ready()
            limits = await _load(pool, 32, 12.0)
            steady = limits[300:600]  # (t = 3..6 s)
            after = limits[900:]  # (t = 9..12 s, cores 8 -> 4 at 6 s)
            assert 7 <= statistics.median(steady) <= 12, statistics.median(steady)
            assert 3 <= statistics.median(after) <= 6, statistics.median(after)
            assert pool.stats().total < 32
            await pool.close()

    run(main())
