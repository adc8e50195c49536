"""Old names kept for a while, each warning where it is called (``DeprecationWarning``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import ParamSpec, TypeVar

from ..driver import renamed as _renamed

P = ParamSpec("P")
R = TypeVar("R")

#: why the asyncio connect functions were renamed
CONNECT_RENAMED = (
    "connect and connect_uri will be the blocking connect functions (connect_sync and "
    "connect_sync_uri now), as in poolkit's backends: connect for threads, async_connect for "
    "asyncio"
)


def renamed(function: Callable[P, R], old: str, why: str) -> Callable[P, R]:
    """``function`` under its ``old`` name in ``poolkit.mongodb`` (see ``driver.renamed``)."""
    return _renamed(function, old, where="poolkit.mongodb", why=why)
