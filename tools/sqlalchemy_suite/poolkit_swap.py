"""A pytest plugin for SQLAlchemy's own tests (``-p poolkit_swap``, loaded by run.py).

With ``POOLKIT_SQLA_SUITE_POOLS=poolkit`` it puts poolkit's ``QueuePool`` and
``AsyncAdaptedQueuePool`` in the place of SQLAlchemy's, before any test module is imported, on
every module that binds those names: ``sqlalchemy``, ``sqlalchemy.pool`` (the tests'
``pool.QueuePool(...)``, and the dialects' default pool class, which
``DefaultDialect.get_pool_class`` looks up there when an engine is made) and
``sqlalchemy.pool.impl``. With ``sqlalchemy`` (or unset) it changes nothing.

``POOLKIT_SQLA_SUITE_DESELECT`` (a JSON list of node ids: ``path::name``, all its
parametrizations, or ``path::name[param]``, that one) deselects those tests.

Either way it notes, for each test, whether it built a pool of the side under test (SQLAlchemy's
``QueuePool`` or its subclass ``AsyncAdaptedQueuePool``, or poolkit's ``QueuePool`` or its
subclass), and with
``POOLKIT_SQLA_SUITE_RESULTS=FILE`` writes each test's outcome to FILE as JSON lines
``{"nodeid": ..., "outcome": "passed" | "failed" | "skipped", "built": bool}`` (see
``tools/peer_suite_outcomes.py``).
"""

from __future__ import annotations

import functools
from typing import Any

import pytest
from peer_suite_outcomes import Recorder, side

ENV = "POOLKIT_SQLA_SUITE"
POOLS = side(ENV, "sqlalchemy")
NAMES = ("QueuePool", "AsyncAdaptedQueuePool")
RECORDER = Recorder(ENV, "SQLAlchemy's own", "poolkit's")


def _noting(cls: type[Any]) -> None:
    """Note each pool of ``cls`` (or a subclass) built: through ``sqlalchemy.log.instance_logger``,
    which ``Pool.__init__`` calls, not by wrapping ``__init__`` (``create_engine`` reads the pool
    class's ``__init__`` signature for the keywords it passes: a wrapper's ``*args, **kwargs``
    would make it refuse ``pool_size`` and the like)."""
    import sqlalchemy.log

    make_logger = sqlalchemy.log.instance_logger

    @functools.wraps(make_logger)
    def noted(instance: Any, *args: Any, **kwargs: Any) -> None:
        if isinstance(instance, cls):
            RECORDER.built()
        make_logger(instance, *args, **kwargs)

    sqlalchemy.log.instance_logger = noted


def _swap() -> dict[str, str]:
    """Put poolkit's classes in SQLAlchemy's place; what now stands where."""
    import sqlalchemy
    import sqlalchemy.pool
    import sqlalchemy.pool.impl

    from poolkit.backends import sqlalchemy as pk

    _noting(pk.QueuePool)
    done: dict[str, str] = {}
    for name in NAMES:
        cls = getattr(pk, name)
        for module in (sqlalchemy, sqlalchemy.pool, sqlalchemy.pool.impl):
            setattr(module, name, cls)
            done[f"{module.__name__}.{name}"] = f"{cls.__module__}.{cls.__qualname__}"
    return done


if POOLS == "poolkit":
    RECORDER.swapped = _swap()
else:
    import sqlalchemy.pool.impl

    _noting(sqlalchemy.pool.impl.QueuePool)


def pytest_configure(config: pytest.Config) -> None:
    RECORDER.register(config)
