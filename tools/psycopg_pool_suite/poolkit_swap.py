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

import pytest
from peer_suite_outcomes import Recorder, side

ENV = "POOLKIT_PSYCOPG_SUITE"
POOLS = side(ENV, "psycopg_pool")
NAMES = ("ConnectionPool", "AsyncConnectionPool", "NullConnectionPool", "AsyncNullConnectionPool")
RECORDER = Recorder(ENV, "psycopg_pool's own", "poolkit's drop-ins")


def _swap() -> dict[str, str]:
    """Put poolkit's classes in psycopg_pool's place; what now stands where."""
    import psycopg_pool

    from poolkit.backends import _psycopg_dropin_async, _psycopg_dropin_sync
    from poolkit.backends import psycopg as pk

    RECORDER.noting(_psycopg_dropin_async.AsyncConnectionPool)
    RECORDER.noting(_psycopg_dropin_sync.ConnectionPool)
    done: dict[str, str] = {}
    for name in NAMES:
        cls = getattr(pk, name)
        setattr(psycopg_pool, name, cls)
        done[f"psycopg_pool.{name}"] = f"{cls.__module__}.{cls.__qualname__}"
    return done


if POOLS == "poolkit":
    RECORDER.swapped = _swap()
else:
    import psycopg_pool.base

    RECORDER.noting(psycopg_pool.base.BasePool)


def pytest_configure(config: pytest.Config) -> None:
    RECORDER.register(config)
