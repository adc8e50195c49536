"""A pytest plugin for redis-py's own test suite (``-p poolkit_swap``, loaded by run.py).

With ``POOLKIT_REDIS_SUITE_POOLS=poolkit`` it replaces redis-py's pool classes by poolkit's
drop-ins before any test module is imported: ``redis.ConnectionPool`` and
``redis.BlockingConnectionPool``, their ``redis.asyncio`` twins, in every module that binds those
names for the tests or for redis-py's clients (``redis.client`` builds each client's pool by
``ConnectionPool``). With ``redis`` (or unset) it changes nothing.

Either way, with ``POOLKIT_REDIS_SUITE_RESULTS=FILE`` it writes each test's outcome to FILE as
JSON lines ``{"nodeid": ..., "outcome": "passed" | "failed" | "skipped"}``: failed if any phase
(setup, call, teardown) failed; skipped for skips and expected failures.
"""

from __future__ import annotations

from typing import Any

import pytest
from peer_suite_outcomes import Recorder, side

ENV = "POOLKIT_REDIS_SUITE"
POOLS = side(ENV, "redis")
RECORDER = Recorder(ENV, "redis-py's own", "poolkit's drop-ins", builds=False)


def _swap() -> dict[str, str]:
    """Put poolkit's classes in redis-py's place; what now stands where."""
    import redis
    import redis.asyncio
    import redis.asyncio.client
    import redis.asyncio.connection
    import redis.client
    import redis.connection

    from poolkit.backends import redis as pk

    swaps: dict[str, tuple[list[Any], Any]] = {
        "ConnectionPool": ([redis, redis.client, redis.connection], pk.ConnectionPool),
        "BlockingConnectionPool": ([redis, redis.connection], pk.BlockingConnectionPool),
    }
    async_swaps: dict[str, tuple[list[Any], Any]] = {
        "ConnectionPool": (
            [redis.asyncio, redis.asyncio.client, redis.asyncio.connection],
            pk.AsyncConnectionPool,
        ),
        "BlockingConnectionPool": (
            [redis.asyncio, redis.asyncio.connection],
            pk.AsyncBlockingConnectionPool,
        ),
    }
    done: dict[str, str] = {}
    for table in (swaps, async_swaps):
        for name, (modules, cls) in table.items():
            for module in modules:
                setattr(module, name, cls)
                done[f"{module.__name__}.{name}"] = f"{cls.__module__}.{cls.__qualname__}"
    return done


if POOLS == "poolkit":
    RECORDER.swapped = _swap()


def pytest_configure(config: pytest.Config) -> None:
    RECORDER.register(config)
