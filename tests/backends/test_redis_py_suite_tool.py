"""tools/redis_py_suite, which .ci/run runs (redis-py's own tests with poolkit's drop-ins in place
of its pools): its pytest plugin puts the drop-ins where redis-py's tests and clients find their
pools, and its list of skipped tests names tests of its files, each with a reason."""

from __future__ import annotations

import importlib.util
import pathlib
import subprocess
import sys
import textwrap
from typing import Any

TOOL = pathlib.Path(__file__).parents[2] / "tools" / "redis_py_suite"

CHECK = textwrap.dedent(
    """
    import os, sys
    os.environ["POOLKIT_REDIS_SUITE_POOLS"] = sys.argv[1]
    sys.path[:0] = [sys.argv[2], os.path.dirname(sys.argv[2])]  # (as run.py: tools/ too)
    import poolkit_swap
    import redis, redis.asyncio, redis.asyncio.client, redis.asyncio.connection, redis.client
    import redis.connection
    print(redis.Redis().connection_pool.__class__.__module__)
    print(redis.asyncio.Redis().connection_pool.__class__.__module__)
    print(len({redis.ConnectionPool, redis.client.ConnectionPool, redis.connection.ConnectionPool}))
    print(redis.BlockingConnectionPool.__module__, redis.asyncio.BlockingConnectionPool.__module__)
    print(redis.asyncio.client.ConnectionPool is redis.asyncio.connection.ConnectionPool)
    """
)


def _run(pools: str) -> list[str]:
    run = subprocess.run(
        [sys.executable, "-c", CHECK, pools, str(TOOL)], capture_output=True, text=True, timeout=60
    )
    assert run.returncode == 0, run.stderr
    return run.stdout.split("\n")


def test_plugin_puts_the_drop_ins_in_place_of_redis_py_pools() -> None:
    assert _run("poolkit")[:5] == [
        "poolkit.backends._redis_dropin_sync",
        "poolkit.backends._redis_dropin_async",
        "1",
        "poolkit.backends._redis_dropin_sync poolkit.backends._redis_dropin_async",
        "True",
    ]
    assert _run("redis")[:2] == ["redis.connection", "redis.asyncio.connection"]


def test_skips_name_tests_of_the_files_run_each_with_a_reason() -> None:
    spec = importlib.util.spec_from_file_location("redis_py_suite_run", TOOL / "run.py")
    assert spec is not None and spec.loader is not None
    module: Any = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    files = set(module.FILES)
    assert module.SKIPS
    for nodeid, reason in module.SKIPS.items():
        assert nodeid.split("::")[0] in files, nodeid
        assert "private" in reason, (nodeid, reason)
