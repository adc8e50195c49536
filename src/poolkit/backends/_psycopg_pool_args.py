"""psycopg_pool's ``ConnectionPool`` keywords as the psycopg builders take them, so that moving
from ``psycopg_pool.ConnectionPool(conninfo, min_size=..., max_size=..., timeout=...)`` to
``poolkit.backends.psycopg.create_pool(conninfo, min_size=..., ...)`` is a one-line change.

Rules of this module
--------------------
* A keyword with a meaning in poolkit becomes that :class:`~poolkit.PoolOptions` field (table
  below), with psycopg_pool's default when neither it nor ``options=`` is given.
* ``options=`` is the base when given (poolkit's own defaults); the keywords given override it.
* A keyword of psycopg_pool's without a meaning here raises a ``TypeError`` at the builder's
  call naming what to use instead, rather than reaching ``psycopg.connect`` as a connection
  option (``invalid connection option``).

psycopg_pool's keyword -> PoolOptions field (psycopg_pool's default): ``min_size`` ->
``min_size`` (4); ``max_size`` -> ``max_size`` (None: ``min_size``); ``timeout`` ->
``wait_queue_timeout`` (30 s); ``max_waiting`` -> ``max_waiting`` (0: no limit);
``max_lifetime`` -> ``max_lifetime`` (3600 s); ``max_idle`` -> ``max_idle_time`` (600 s, only
connections above ``min_size``); ``num_workers`` -> ``max_connecting`` (3).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Final

from .. import PoolOptions
from ..driver import DEFAULT

#: the pool a psycopg builder makes when given neither ``options=`` nor psycopg_pool's keywords:
#: psycopg_pool's defaults (a pool of 4, kept open; 30 s to wait; connections retired after an
#: hour, those above ``min_size`` closed after 10 idle minutes; 3 connects at once)
PSYCOPG_POOL_DEFAULTS: Final = PoolOptions(
    min_size=4,
    max_size=4,
    wait_queue_timeout=30.0,
    max_waiting=0,
    max_lifetime=3600.0,
    max_idle_time=600.0,
    max_connecting=3,
)

#: psycopg_pool's keyword -> the PoolOptions field it sets
_FIELDS: Final = {
    "min_size": "min_size",
    "max_size": "max_size",
    "timeout": "wait_queue_timeout",
    "max_waiting": "max_waiting",
    "max_lifetime": "max_lifetime",
    "max_idle": "max_idle_time",
    "num_workers": "max_connecting",
}

_RETRY = (
    "poolkit retries failed connects with options=poolkit.PoolOptions(connect_retry="
    "poolkit.Backoff(...)) and reports failures to listeners= (ConnectAttemptFailedEvent, "
    "ConnectFailingEvent); a first connect that fails fails the builder's call itself"
)

#: psycopg_pool's keywords that mean nothing here -> what to use instead
ELSEWHERE: Final[Mapping[str, str]] = {
    "name": "poolkit names a pool by its address in logs and events: pass address='...'",
    "close_returns": (
        "a poolkit pool takes a connection back when its pool.connection() block ends (or at "
        "lease.release()); conn.close() closes the connection"
    ),
    "reconnect_timeout": _RETRY,
    "reconnect_failed": _RETRY,
}


def refuse_elsewhere(builder: str, connect_kwargs: Mapping[str, Any]) -> None:
    """Raise a ``TypeError`` for a psycopg_pool keyword among ``connect_kwargs`` that has no
    meaning here (it would reach ``psycopg.connect`` as a connection option)."""
    for name, instead in ELSEWHERE.items():
        if name in connect_kwargs:
            raise TypeError(f"{builder}({name}=...) is psycopg_pool's, not poolkit's: {instead}")


def pool_options(
    builder: str, options: PoolOptions | None, given: Mapping[str, Any]
) -> PoolOptions:
    """``options`` (:data:`PSYCOPG_POOL_DEFAULTS` if ``None``) with psycopg_pool's keywords in
    ``given`` (their values; ``DEFAULT`` for those not given) applied, the sizes checked by
    psycopg_pool's rules."""
    if options is None:
        base = PSYCOPG_POOL_DEFAULTS
    elif isinstance(options, PoolOptions):
        base = options
    else:
        raise TypeError(f"{builder}(options=...) must be a PoolOptions, got {options!r}")
    chosen = {name: value for name, value in given.items() if value is not DEFAULT}
    unknown = set(chosen) - set(_FIELDS)
    if unknown:
        raise AssertionError(f"not psycopg_pool keywords: {sorted(unknown)}")
    if "min_size" in chosen or "max_size" in chosen:
        chosen["min_size"], chosen["max_size"] = _sizes(builder, base, chosen)
    changes = {_FIELDS[name]: value for name, value in chosen.items()}
    try:
        return dataclasses.replace(base, **changes)
    except (TypeError, ValueError) as exc:
        shown = ", ".join(f"{name}={value!r}" for name, value in chosen.items())
        raise type(exc)(f"{builder}({shown}): {exc}") from exc


def _sizes(builder: str, base: PoolOptions, chosen: Mapping[str, Any]) -> tuple[Any, Any]:
    """``min_size`` and ``max_size`` as psycopg_pool reads them: ``max_size`` None (or not given
    while ``min_size`` is, on psycopg_pool's defaults) is ``min_size``; never below it; not both
    0. (0 is no limit only in ``PoolOptions(max_size=0)``.)"""
    min_size = chosen.get("min_size", base.min_size)
    max_size = chosen.get("max_size", base.max_size if base is not PSYCOPG_POOL_DEFAULTS else None)
    if max_size is None:
        max_size = min_size
    if isinstance(min_size, int) and isinstance(max_size, int):
        if max_size < min_size:
            raise ValueError(
                f"{builder}(min_size={min_size}, max_size={max_size}): max_size must be >= "
                "min_size (as in psycopg_pool; min_size is 4 unless given)"
            )
        if min_size == max_size == 0:
            raise ValueError(f"{builder}(min_size=0): give max_size > 0 (as in psycopg_pool)")
    return min_size, max_size
