"""Old names kept for a while, each warning where it is called (``DeprecationWarning``)."""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")

#: why the asyncio connect functions were renamed
CONNECT_RENAMED = (
    "connect and connect_uri will be the blocking connect functions (connect_sync and "
    "connect_sync_uri now), as in poolkit's backends: connect for threads, async_connect for "
    "asyncio"
)


def renamed(function: Callable[P, R], old: str, why: str) -> Callable[P, R]:
    """``function`` under its ``old`` name: the same call, with a ``DeprecationWarning`` that
    names the new one and says ``why``."""

    @functools.wraps(function)
    def old_name(*args: P.args, **kwargs: P.kwargs) -> R:
        warnings.warn(
            f"poolkit.mongodb.{old} is now {function.__name__}: {why}",
            DeprecationWarning,
            stacklevel=2,
        )
        return function(*args, **kwargs)

    old_name.__name__ = old_name.__qualname__ = old
    old_name.__doc__ = f"Deprecated: :func:`{function.__name__}` under its old name ({why})."
    return old_name
