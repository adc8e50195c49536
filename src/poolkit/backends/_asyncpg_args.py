"""``asyncpg.create_pool``'s keywords in the asyncpg backend's builder: what they mean in poolkit,
and where the others go.

Rules of this module
--------------------
* A keyword of ``asyncpg.create_pool`` that means the same in poolkit is taken under its own name
  (the call that makes asyncpg's pool is a one-line swap); the builder's defaults are asyncpg's
  pool's.
* Any other keyword is refused at the call, with a ``TypeError`` that says where it goes: a pool
  option into ``options=``, what poolkit has no equivalent for to the nearest thing it has, and
  what ``asyncpg.connect`` does not take is named as such. Nothing is left to fail at the first
  connect.
* ``options=`` is the pool's whole configuration: with it, the pool keywords are refused rather
  than merged (one place says each setting).
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from typing import Any, Final

from .. import KeepAlive, PoolOptions

#: ``asyncpg.create_pool``'s defaults, the builder's when neither the keywords nor ``options=``
#: say otherwise: ``min_size``, ``max_size``, ``max_inactive_connection_lifetime`` (seconds)
MIN_SIZE: Final = 10
MAX_SIZE: Final = 10
MAX_INACTIVE_CONNECTION_LIFETIME: Final = 300.0
#: seconds between the drop-in's checks of an idle connection (``is_closed()``: no I/O)
PROBE_INTERVAL: Final = 1.0

#: asyncpg.create_pool's keywords that poolkit does not take, and where to go instead
_ELSEWHERE: Final = {
    "hooks": "create_pool() sets the hooks from reset=, check=, check_after=, configure=, "
    "hooks_timeout=; for hooks of your own, build the pool from connect() and hooks()",
}


def pool_options(
    builder: str,
    options: PoolOptions | None,
    min_size: int | None,
    max_size: int | None,
    max_inactive_connection_lifetime: float | None,
) -> PoolOptions:
    """The pool's options: ``options`` as given, or asyncpg's pool's defaults with the keywords
    given (``max_inactive_connection_lifetime`` is ``max_idle_time``, ``0``: none)."""
    given = {
        name: value
        for name, value in (
            ("min_size", min_size),
            ("max_size", max_size),
            ("max_inactive_connection_lifetime", max_inactive_connection_lifetime),
        )
        if value is not None
    }
    if options is not None:
        if given:
            name = next(iter(given))
            field = "max_idle_time" if name.startswith("max_inactive") else name
            raise TypeError(
                f"{builder}({name}=...) with options=: give it once, in "
                f"options=poolkit.PoolOptions({field}=...) (options= is the whole pool's "
                "configuration; the keywords stand for it, as asyncpg.create_pool's)"
            )
        return options
    if max_size is None:
        max_size = MAX_SIZE
    elif isinstance(max_size, int) and not isinstance(max_size, bool) and max_size <= 0:
        raise ValueError(  # (PoolOptions' 0 means "no limit": asyncpg's pool refuses it)
            f"{builder}(max_size={max_size}): max_size is expected to be greater than zero, as "
            "asyncpg.create_pool says (for a pool without a limit: "
            "options=poolkit.PoolOptions(max_size=0))"
        )
    if min_size is None:  # (asyncpg's 10, or less to fit a smaller max_size: 0 is no limit)
        min_size = max_size if 0 < max_size < MIN_SIZE else MIN_SIZE
    idle = max_inactive_connection_lifetime
    if idle is None:
        idle = MAX_INACTIVE_CONNECTION_LIFETIME
    return PoolOptions(min_size=min_size, max_size=max_size, max_idle_time=idle or None)


def dropin_sizes(
    options: PoolOptions | None,
    init_size: int | None,
    min_size: int | None,
    max_size: int | None,
    max_inactive_connection_lifetime: float | None,
    probe: Callable[[Any], Any],
) -> tuple[PoolOptions, int]:
    """The drop-in ``Pool``'s options (without hooks) and ``init_size``, asyncpg's arguments
    checked with asyncpg's messages. Without ``options``, as asyncpg's pool runs: connects for
    every waiter at once (``max_connecting`` = ``max_size``), no connect timeout but asyncpg's own
    (``timeout=``), no wait limit but ``acquire(timeout=)``, and an idle connection the server
    closed is replaced by itself (asyncpg's pool hears of it from the connection; here ``probe``,
    ``is_closed()`` with no I/O, every ``PROBE_INTERVAL`` seconds)."""
    builder = "create_pool"
    if options is None and isinstance(min_size, int) and isinstance(max_size, int):
        if min_size < 0:
            raise ValueError("min_size is expected to be greater or equal to zero")
        if max_size > 0 and min_size > max_size:
            raise ValueError("min_size is greater than max_size")
    idle = max_inactive_connection_lifetime
    if idle is not None and idle < 0:
        raise ValueError(
            "max_inactive_connection_lifetime is expected to be greater or equal to zero"
        )
    opts = pool_options(builder, options, min_size, max_size, idle)
    if options is None:
        opts = PoolOptions(
            min_size=opts.min_size,
            max_size=opts.max_size,
            max_idle_time=opts.max_idle_time,
            max_connecting=opts.max_size,
            connect_timeout=None,
            wait_queue_timeout=None,
            keep_alive=KeepAlive(PROBE_INTERVAL, probe),
        )
    if init_size is None:
        init_size = opts.min_size
    if init_size < 0:
        raise ValueError("init_size is expected to be greater or equal to zero")
    if opts.max_size and init_size > opts.max_size:
        raise ValueError("init_size is greater than max_size")
    if init_size < opts.min_size:
        raise ValueError("init_size is smaller than min_size")
    return opts, init_size


def refuse_elsewhere(
    builder: str, kwargs: dict[str, Any], connect: Callable[..., Any], shown: str
) -> None:
    """Refuse the keywords in ``kwargs`` (bound for ``connect``, named ``shown``) that are not
    ``connect``'s, saying where each goes."""
    for name in kwargs:
        if name in _ELSEWHERE:
            raise TypeError(f"{builder}({name}=...): {_ELSEWHERE[name]}")
        if name in {f.name for f in dataclasses.fields(PoolOptions)}:
            raise TypeError(
                f"{builder}({name}=...) is a pool option: options=poolkit.PoolOptions({name}=...)"
            )
    parameters = inspect.signature(connect).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
        return  # (a connect function of yours that takes anything)
    unknown = sorted(set(kwargs) - set(parameters))
    if unknown:
        raise TypeError(
            f"{builder}() got {', '.join(f'{n}=' for n in unknown)}: not a keyword of "
            f"{builder}() nor of {shown}()"
        )
