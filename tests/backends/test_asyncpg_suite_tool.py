"""tools/asyncpg_suite, which .ci/run runs (asyncpg's own pool tests with poolkit's drop-in in
place of its pool): its pytest plugin puts the drop-in where asyncpg's tests find the pool,
including the defaults ``asyncpg._testbase`` binds, and its list of skipped tests names tests of
the file it runs, each with a reason."""

from __future__ import annotations

import importlib.util
import pathlib
import subprocess
import sys
import textwrap
from typing import Any

TOOL = pathlib.Path(__file__).parents[2] / "tools" / "asyncpg_suite"

CHECK = textwrap.dedent(
    """
    import inspect, os, sys
    os.environ["POOLKIT_ASYNCPG_SUITE_POOLS"] = sys.argv[1]
    sys.path[:0] = [sys.argv[2], os.path.dirname(sys.argv[2])]  # (as run.py: tools/ too)
    import poolkit_swap
    import asyncpg, asyncpg.pool
    from asyncpg import _testbase as tb
    print(asyncpg.Pool.__module__, asyncpg.pool.Pool.__module__)
    print(asyncpg.create_pool.__module__, asyncpg.pool.create_pool.__module__)
    print(inspect.signature(tb.create_pool).parameters["pool_class"].default.__module__)
    method = tb.ClusterTestCase.create_pool
    print(inspect.signature(method).parameters["pool_class"].default.__module__)
    """
)


def _run(pools: str) -> list[str]:
    run = subprocess.run(
        [sys.executable, "-c", CHECK, pools, str(TOOL)], capture_output=True, text=True, timeout=60
    )
    assert run.returncode == 0, run.stderr
    return run.stdout.split("\n")


def test_plugin_puts_the_drop_in_in_place_of_asyncpgs_pool_and_testbase_defaults() -> None:
    dropin = "poolkit.backends._asyncpg_dropin"
    assert _run("poolkit")[:4] == [
        f"{dropin} {dropin}",
        "poolkit.backends.asyncpg poolkit.backends.asyncpg",
        dropin,
        dropin,
    ]
    assert _run("asyncpg")[:4] == [
        "asyncpg.pool asyncpg.pool",
        "asyncpg.pool asyncpg.pool",
        "asyncpg.pool",
        "asyncpg.pool",
    ]


def test_skips_name_tests_of_the_file_run_each_with_a_reason() -> None:
    spec = importlib.util.spec_from_file_location("asyncpg_suite_run", TOOL / "run.py")
    assert spec is not None and spec.loader is not None
    module: Any = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    files = set(module.TESTS)
    assert module.SKIPS
    for nodeid, reason in module.SKIPS.items():
        assert nodeid.split("::")[0] in files, nodeid
        assert "private" in reason, (nodeid, reason)


def test_server_env_reads_the_clusters_dsn() -> None:
    spec = importlib.util.spec_from_file_location("asyncpg_suite_run", TOOL / "run.py")
    assert spec is not None and spec.loader is not None
    module: Any = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    env = module.server_env("host=127.0.0.1 port=6543 user=postgres", "db1")
    assert env == {
        "PGHOST": "127.0.0.1",
        "PGPORT": "6543",
        "PGUSER": "postgres",
        "PGDATABASE": "db1",
    }
