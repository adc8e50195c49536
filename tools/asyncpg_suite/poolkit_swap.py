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

import functools
import json
import os
from typing import Any

import pytest
from peer_suite_outcomes import Outcomes

POOLS = os.environ.get("POOLKIT_ASYNCPG_SUITE_POOLS", "asyncpg")
#: whether the test running now built a pool of the side under test
_built: list[bool] = [False]


def _noting(cls: type[Any]) -> None:
    """``cls.__init__`` notes that a pool was built (the class's own ``__init__``, wrapped)."""
    init = cls.__dict__["__init__"]

    @functools.wraps(init)
    def noted(self: Any, *args: Any, **kwargs: Any) -> None:
        _built[0] = True
        init(self, *args, **kwargs)

    cls.__init__ = noted  # type: ignore[misc]


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
    _noting(pk.Pool)
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
    SWAPPED = _swap()
elif POOLS == "asyncpg":
    import asyncpg.pool

    _noting(asyncpg.pool.Pool)
    SWAPPED = {}
else:
    raise RuntimeError(f"POOLKIT_ASYNCPG_SUITE_POOLS must be 'asyncpg' or 'poolkit', not {POOLS!r}")

DESELECT = frozenset(json.loads(os.environ.get("POOLKIT_ASYNCPG_SUITE_DESELECT", "[]")))
_outcomes = Outcomes()
_builders: set[str] = set()


def pytest_report_header() -> list[str]:
    if not SWAPPED:
        return ["pools: asyncpg's own"]
    return ["pools: poolkit's drop-in"] + [f"  {k} = {v}" for k, v in SWAPPED.items()]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not DESELECT:
        return
    kept = [item for item in items if item.nodeid not in DESELECT]
    if len(kept) < len(items):
        config.hook.pytest_deselected(items=[item for item in items if item not in kept])
        items[:] = kept


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Any:
    _built[0] = False
    try:
        return (yield)
    finally:
        if _built[0]:
            _builders.add(item.nodeid)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _outcomes.note(report)


def pytest_sessionfinish() -> None:
    _outcomes.write(os.environ.get("POOLKIT_ASYNCPG_SUITE_RESULTS"), _builders)
