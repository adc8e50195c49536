"""The pool's statistics snapshot."""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping

__all__ = ["AdaptiveStats", "PoolState", "PoolStats"]


class PoolState(enum.Enum):
    """The CMAP pool states."""

    PAUSED = "paused"
    READY = "ready"
    CLOSED = "closed"


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class AdaptiveStats:
    """An adaptive pool's limit (``PoolOptions.adaptive``) and what it was decided from.

    * ``limit``: connections that may be in use at once now, within ``[floor, ceiling]``
      (``min_size`` or 1, and ``max_size``): ``min(knee, share)`` times ``gain`` (1.25 for a
      round to probe, 0.75 the next to drain, 1 the six after; 0 for a short round that measures
      the base, at half the connections in use less ``queued``).
    * ``knee``: the connections the pool finds worth holding, where one more in ten brings less
      than ``Adaptive.target`` of one in ten more throughput; ``elasticity``: the smoothed
      answer of the throughput to the connections (``None`` until measured): near 1 below the
      server's knee, near 0 past it.
    * ``share``: the most the server's queueing lets the pool hold: it falls while ``queued``,
      the connections in use whose time is spent queueing in the server (their number times
      ``1 - base_op_time / op_time``; the base measured on a server left unloaded every
      ``Adaptive.base_every`` seconds), is more than ``Adaptive.queue``: another pool, or an
      overload, makes the server queue.
    * ``rate_max``, ``op_min``, ``op_time``: the most operations a second, the least and the
      median mean operation time (check-out to check-in, seconds) of the last rounds;
      ``op_time`` less the client's own lag, where the front end measures it (an event loop's).
    * ``client_load``: the part of the time the client's own thread (an ``AsyncPool``'s event
      loop) ran or waited for a processor, the last rounds' median (``None`` where not measured:
      a thread pool, or before a round); at 0.9 or more the client is its own bottleneck and its
      operations' slowing is not read as the server queueing.
    * ``rounds``: rounds ended (the figures are 0.0 before the first); ``changes``: the changes
      reported so far (``AdaptiveLimitChangedEvent``).
    """

    limit: int
    floor: int
    ceiling: int
    knee: float = 0.0
    elasticity: float | None = None
    share: float = 0.0
    rate_max: float = 0.0
    op_min: float = 0.0
    op_time: float = 0.0
    base_op_time: float = 0.0
    queued: float = 0.0
    client_load: float | None = None
    gain: float = 1.0
    rounds: int = 0
    changes: int = 0


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class PoolStats:
    """A consistent snapshot of a pool, taken under its lock.

    Now:

    * ``total``: connections that exist (pending + available + in use + backing off), the CMAP
      ``totalConnectionCount``; ``available``, ``pending``: CMAP's counts of the same names;
      ``in_use``: connections with at least one lease out (or a keep-alive probe running);
      ``backing_off``: slots waiting to retry a failed connect (``connect_retry``);
      ``checking``, ``resetting``: connections a ``Hooks.check`` or ``Hooks.reset`` runs on
      (counted in ``total``, in neither ``available`` nor ``in_use``).
    * ``waiting``: checkouts queued for a connection.
    * ``abandoned``: connects the pool gave up on (connect timeout, an interrupting clear, close)
      whose function has not returned yet: not in ``total``, but they count against ``max_size``
      and ``max_connecting`` until they return (what they return is then closed).
    * ``kept``, ``demand``, ``overflow``: connections by role (see ``PoolOptions.soft_max_size``).
    * ``streams_in_use``: leases out (and probes running); ``stream_capacity``: the streams the
      established connections that take leases can serve at once (sum of their limits).
    * ``circuit_open``: whether checkouts are refused by ``connect_retry``'s circuit breaker.
    * ``adaptive``: the limit on connections in use and what it was decided from
      (:class:`AdaptiveStats`), in an adaptive pool (``PoolOptions.adaptive``); else ``None``.

    Since the pool was created:

    * ``connections_created``: connections established; ``connections_closed``: closed, by
      reason (``"idle"``, ``"stale"``, ``"error"``, ...); ``connect_attempts``,
      ``connect_failures``: connects started, and those that raised or timed out.
    * ``checkouts``: checkouts served; ``checkout_failures``: failed, by reason (``"timeout"``,
      ``"connectionError"``, ``"cancelled"``, ...).
    * ``checks``, ``checks_failed``: ``Hooks.check`` runs ended, and those that failed or timed
      out (each closed its connection); ``resets``, ``resets_failed``: the same for
      ``Hooks.reset`` (``resets`` also counts the resets ``Hooks.end`` ran itself, returning
      ``True``).
    * ``waits``: checkouts that had to queue; ``wait_time_total``, ``wait_time_max``: the seconds
      they waited, in all and at most.
    """

    state: PoolState
    generation: int
    total: int
    available: int
    pending: int
    in_use: int
    waiting: int
    backing_off: int = 0
    checking: int = 0
    resetting: int = 0
    abandoned: int = 0
    kept: int = 0
    demand: int = 0
    overflow: int = 0
    streams_in_use: int = 0
    stream_capacity: int = 0
    circuit_open: bool = False
    connections_created: int = 0
    connections_closed: Mapping[str, int] = dataclasses.field(default_factory=dict)
    connect_attempts: int = 0
    connect_failures: int = 0
    checkouts: int = 0
    checkout_failures: Mapping[str, int] = dataclasses.field(default_factory=dict)
    checks: int = 0
    checks_failed: int = 0
    resets: int = 0
    resets_failed: int = 0
    waits: int = 0
    wait_time_total: float = 0.0
    wait_time_max: float = 0.0
    adaptive: AdaptiveStats | None = None


AdaptiveStats.__module__ = "poolkit"
PoolState.__module__ = "poolkit"
PoolStats.__module__ = "poolkit"
