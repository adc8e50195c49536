"""tools/sqlalchemy_suite, which .ci/run runs (SQLAlchemy's own tests with poolkit's pools in
place of its QueuePool and AsyncAdaptedQueuePool): its pytest plugin puts poolkit's classes where
SQLAlchemy's tests and its dialects find their pools, notes the tests that built one without
changing what create_engine accepts, and its list of skipped tests names tests of its files, each
with a reason."""

from __future__ import annotations

import importlib.util
import pathlib
import subprocess
import sys
import textwrap
from typing import Any

TOOL = pathlib.Path(__file__).parents[2] / "tools" / "sqlalchemy_suite"

CHECK = textwrap.dedent(
    """
    import os, sys
    os.environ["POOLKIT_SQLA_SUITE_POOLS"] = sys.argv[1]
    sys.path[:0] = [sys.argv[2], os.path.dirname(sys.argv[2])]  # (as run.py: tools/ too)
    import poolkit_swap
    import sqlalchemy, sqlalchemy.pool, sqlalchemy.pool.impl
    from sqlalchemy.ext.asyncio import create_async_engine
    url = "postgresql+psycopg://postgres@127.0.0.1:1/none"
    engine = sqlalchemy.create_engine(url, pool_size=3, max_overflow=1, pool_timeout=2)
    print(type(engine.pool).__module__, engine.pool.size())
    a = create_async_engine(url.replace("psycopg", "asyncpg"), pool_size=4)
    print(type(a.sync_engine.pool).__name__, type(a.sync_engine.pool).__module__)
    print(len({sqlalchemy.QueuePool, sqlalchemy.pool.QueuePool, sqlalchemy.pool.impl.QueuePool}))
    print(poolkit_swap.RECORDER.building)
    """
)


def _run(pools: str) -> list[str]:
    run = subprocess.run(
        [sys.executable, "-c", CHECK, pools, str(TOOL)], capture_output=True, text=True, timeout=60
    )
    assert run.returncode == 0, run.stderr
    return run.stdout.split("\n")


def test_plugin_puts_poolkits_pools_in_place_of_sqlalchemys() -> None:
    assert _run("poolkit")[:4] == [
        "poolkit.backends.sqlalchemy 3",
        "AsyncAdaptedQueuePool poolkit.backends.sqlalchemy",
        "1",
        "True",
    ]
    assert _run("sqlalchemy")[:4] == [
        "sqlalchemy.pool.impl 3",
        "AsyncAdaptedQueuePool sqlalchemy.pool.impl",
        "1",
        "True",
    ]


def test_skips_name_tests_of_the_files_run_each_with_a_reason() -> None:
    spec = importlib.util.spec_from_file_location("sqlalchemy_suite_run", TOOL / "run.py")
    assert spec is not None and spec.loader is not None
    module: Any = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    files = set(module.FILES)
    assert module.SKIPS
    for nodeid, reason in module.SKIPS.items():
        assert nodeid.split("::")[0] in files, nodeid
        assert "private" in reason, (nodeid, reason)
    assert module.dburi("host=127.0.0.1 port=5999 user=postgres", "asyncpg", "db1") == (
        "postgresql+asyncpg://postgres@127.0.0.1:5999/db1"
    )
