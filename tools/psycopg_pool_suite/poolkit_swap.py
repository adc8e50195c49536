"""A pytest plugin for psycopg's own pool tests (``-p poolkit_swap``, loaded by run.py).

With ``POOLKIT_PSYCOPG_SUITE_POOLS=poolkit`` it puts poolkit's drop-ins in the place of
psycopg_pool's four pool classes, on the ``psycopg_pool`` module, before any test module is
imported: the tests look ``psycopg_pool.<Class>`` up when they run (``import psycopg_pool as
pool`` ... ``pool.ConnectionPool(...)``), so every pool they build is poolkit's. psycopg_pool's
exceptions stay (poolkit's are their subclasses). With ``psycopg_pool`` (or unset) it changes
nothing.

``POOLKIT_PSYCOPG_SUITE_DESELECT`` (a JSON list of ``path::name``) deselects those tests, each
with all its parametrizations.

Either way it notes, for each test, whether it built a pool of the side under test (psycopg_pool's
``BasePool.__init__``, or the drop-ins' ``__init__``), and with
``POOLKIT_PSYCOPG_SUITE_RESULTS=FILE`` writes each test's outcome to FILE as JSON lines
``{"nodeid": ..., "outcome": "passed" | "failed" | "skipped", "built": bool}``: failed if any
phase (setup, call, teardown) failed; skipped for skips and expected failures.
"""

from __future__ import annotations

import functools
import json
import os
from typing import Any

import pytest
from peer_suite_outcomes import Outcomes

POOLS = os.environ.get("POOLKIT_PSYCOPG_SUITE_POOLS", "psycopg_pool")
NAMES = ("ConnectionPool", "AsyncConnectionPool", "NullConnectionPool", "AsyncNullConnectionPool")

#: whether the test running now built a pool of the side under test
_built: list[bool] = [False]


def _noting(cls: type[Any]) -> None:
    """``cls.__init__`` notes that a pool was built (the class's own ``__init__``, wrapped)."""
    init = cls.__dict__["__init__"]

    @functools.wraps(init)
    def noted(self: Any, *args: Any, **kwargs: Any) -> None:
        _built[0] = True
        init(self, *args, **kwargs)

    cls.__init__ = noted


def _swap() -> dict[str, str]:
    """Put poolkit's classes in psycopg_pool's place; what now stands where."""
    import psycopg_pool

    from poolkit.backends import _psycopg_dropin_async, _psycopg_dropin_sync
    from poolkit.backends import psycopg as pk

    _noting(_psycopg_dropin_async.AsyncConnectionPool)
    _noting(_psycopg_dropin_sync.ConnectionPool)
    done: dict[str, str] = {}
    for name in NAMES:
        cls = getattr(pk, name)
        setattr(psycopg_pool, name, cls)
        done[f"psycopg_pool.{name}"] = f"{cls.__module__}.{cls.__qualname__}"
    return done


if POOLS == "poolkit":
    SWAPPED = _swap()
elif POOLS == "psycopg_pool":
    import psycopg_pool.base

    _noting(psycopg_pool.base.BasePool)
    SWAPPED = {}
else:
    raise RuntimeError(
        f"POOLKIT_PSYCOPG_SUITE_POOLS must be 'psycopg_pool' or 'poolkit', not {POOLS!r}"
    )

#: test names (``path::name``) not to run, each with all its parametrizations
DESELECT = frozenset(json.loads(os.environ.get("POOLKIT_PSYCOPG_SUITE_DESELECT", "[]")))

_outcomes = Outcomes()
_builders: set[str] = set()


def pytest_report_header() -> list[str]:
    if not SWAPPED:
        return ["pools: psycopg_pool's own"]
    return ["pools: poolkit's drop-ins"] + [f"  {k} = {v}" for k, v in SWAPPED.items()]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not DESELECT:
        return
    kept = [item for item in items if item.nodeid.split("[", 1)[0] not in DESELECT]
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
    _outcomes.write(os.environ.get("POOLKIT_PSYCOPG_SUITE_RESULTS"), _builders)
