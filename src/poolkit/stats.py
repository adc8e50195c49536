"""The pool's statistics snapshot."""

from __future__ import annotations

import dataclasses
import enum

__all__ = ["PoolState", "PoolStats"]


class PoolState(enum.Enum):
    """The CMAP pool states."""

    PAUSED = "paused"
    READY = "ready"
    CLOSED = "closed"


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class PoolStats:
    """A consistent snapshot of a pool, taken under its lock.

    * ``total``: connections that exist (pending + available + in use), the CMAP
      ``totalConnectionCount``; ``available``, ``pending``: CMAP's counts of the same names;
      ``in_use``: connections checked out.
    * ``waiting``: checkouts queued for a connection.
    """

    state: PoolState
    generation: int
    total: int
    available: int
    pending: int
    in_use: int
    waiting: int


PoolState.__module__ = "poolkit"
PoolStats.__module__ = "poolkit"
