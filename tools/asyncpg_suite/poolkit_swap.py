"""A pytest plugin for asyncpg's own pool tests (``-p poolkit_swap``, loaded by run.py).

With ``POOLKIT_ASYNCPG_SUITE_POOLS=poolkit`` it puts poolkit's drop-in in the place of asyncpg's
pool before any test module is imported: ``asyncpg.Pool``, ``asyncpg.pool.Pool``,
``asyncpg.create_pool`` and ``asyncpg.pool.create_pool``, and, since ``asyncpg._testbase`` binds
the pool class as a default argument (``create_pool(..., pool_class=pg_pool.Pool)`` and
``ClusterTestCase.create_pool(self, pool_class=pg_pool.Pool, ...)``), those defaults too. With
``asyncpg`` (or unset) it changes nothing.

``POOLKIT_ASYNCPG_SUITE_DESELECT`` (a JSON list of node ids) deselects those tests. Either way it
notes, for each test, whether it built a pool of the side under test, and with
``POOLKIT_ASYNCPG_SUITE_RESULTS=FILE`` writes each test's outcome to FILE as JSON lines
``{"nodeid": ..., "outcome": ..., "built": bool}`` (``peer_suite_outcomes``).
"""

from __future__ import annotations

from typing import Any

import pytest
from peer_suite_outcomes import Recorder, side

ENV = "POOLKIT_ASYNCPG_SUITE"
POOLS = side(ENV, "asyncpg")
RECORDER = Recorder(ENV, "asyncpg's own", "poolkit's drop-in")


def _rebind(function: Any, old: Any, new: Any) -> None:
    """Replace ``old`` by ``new`` in ``function``'s default arguments."""
    if function.__defaults__:
        function.__defaults__ = tuple(new if d is old else d for d in function.__defaults__)
    if function.__kwdefaults__:
        function.__kwdefaults__ = {
            k: new if d is old else d for k, d in function.__kwdefaults__.items()
        }


def _swap() -> dict[str, str]:
    """Put poolkit's drop-in in asyncpg's pool's place; what now stands where."""
    import asyncpg
    import asyncpg.pool
    from asyncpg import _testbase as tb

    from poolkit.backends import asyncpg as pk

    old = asyncpg.pool.Pool
    RECORDER.noting(pk.Pool)
    done: dict[str, str] = {}
    for module in (asyncpg, asyncpg.pool):
        module.Pool = pk.Pool  # type: ignore[attr-defined,misc]
        module.create_pool = pk.create_pool  # type: ignore[attr-defined,assignment]
        done[f"{module.__name__}.Pool"] = "poolkit.backends.asyncpg.Pool"
        done[f"{module.__name__}.create_pool"] = "poolkit.backends.asyncpg.create_pool"
    _rebind(tb.create_pool, old, pk.Pool)
    _rebind(tb.ClusterTestCase.create_pool, old, pk.Pool)
    done["asyncpg._testbase: pool_class defaults"] = "poolkit.backends.asyncpg.Pool"
    return done


if POOLS == "poolkit":
    RECORDER.swapped = _swap()
else:
    import asyncpg.pool

    RECORDER.noting(asyncpg.pool.Pool)


def pytest_configure(config: pytest.Config) -> None:
    RECORDER.register(config)
