"""What the psycopg_pool drop-ins share: ``ConnectionPool``, ``NullConnectionPool``
(``_psycopg_dropin_sync``, generated) and ``AsyncConnectionPool``, ``AsyncNullConnectionPool``
(``_psycopg_dropin_async``, the source), exported by ``poolkit.backends.psycopg``.

Moving from psycopg_pool is one line::

    from psycopg_pool import ConnectionPool                     # before
    from poolkit.backends.psycopg import ConnectionPool         # after

Each class takes psycopg_pool's constructor (the same keywords, the same defaults), has its
methods (``open``, ``close``, ``wait``, ``connection()``, ``getconn``, ``putconn``, ``resize``,
``check``, ``drain``, ``get_stats``, ``pop_stats``, ``check_connection``), its statistics keys,
its exceptions and its logger (``psycopg.pool``), and is generic at run time
(``ConnectionPool[MyConn[Row]]``). Underneath, a poolkit :class:`~poolkit.Pool` (or
:class:`~poolkit.AsyncPool`) does the waiting, the limits, the hand-off and the cancellation:
waiting callers are served in arrival order, and a cancelled or timed-out ``getconn`` leaves the
queue without losing a connection.

Rules of this module
--------------------
* Defaults are psycopg_pool's, so a swap changes nothing the caller did not ask for: ``min_size``
  4, ``max_size`` = ``min_size``, ``timeout`` 30 s, ``max_lifetime`` 1 h (-5 % jitter),
  ``max_idle`` 10 min, ``num_workers`` 3 (connects at once), ``open=None`` (opened in the
  constructor, with psycopg_pool's deprecation warnings), ``close_returns`` False.
* Where psycopg's own pool tests time or count it, the drop-in does what psycopg_pool does:
  ``check`` runs in ``getconn`` at every hand-out (a connection just made too); one that fails
  goes back (``_give_back``: closed if broken) and another is taken, the second at once, the
  next after ``CheckRetry``'s delays, to the deadline. Those delays and the reconnect delays
  (``RetryBackoff``) are psycopg_pool's ``AttemptWithBackoff`` class attributes, read at each
  retry (``retry_schedule``); a reconnect delay is cut so that a retry falls at
  ``reconnect_timeout`` after a run's first failure, where ``reconnect_failed`` is called.
  ``max_lifetime`` is checked when a connection is given back and by ``check()`` (not a rule of
  the poolkit pool, which would close it at a hand-out). Connects that grow the pool past
  ``min_size`` run one at a time (``num_workers`` bounds those that fill ``min_size``).
  ``requests_queued`` and ``requests_wait_ms`` are counted when a caller starts to wait. Idle
  connections are handed out in turn (``PoolOptions(idle_order="fifo")``), the one idle longest
  first, as psycopg_pool's deque.
* A connect the poolkit pool gives up (it closes) goes on in a task apart (asyncio) and closes
  what it makes; ``close`` waits for such tasks, at most its ``timeout``, as psycopg_pool's
  waits for its workers.
* A failed connect is logged once, on ``psycopg.pool`` as psycopg_pool logs it: the poolkit
  pool's own warning that connects fail unseen is off
  (``PoolOptions(warn_connects_failing=False)``).
* Given back, a connection is rolled back if it was left in a transaction (a warning on
  ``psycopg.pool``, as psycopg_pool), closed if it was given back mid-query, broken or past its
  lifetime (a null pool's: closed there unless a caller waits for it), then the caller's
  ``reset`` runs. That is all by default, as in psycopg_pool. ``reset_session=True``
  (poolkit's own keyword) asks for poolkit's full reset besides: the settings a caller can
  change on the connection object (``autocommit``, ``row_factory``, the isolation level...)
  given back as ``configure`` left them, and ``DEFAULT_RESET_QUERY`` (advisory locks released,
  cursors closed, ``UNLISTEN *``, ``RESET ALL``) sent; a string: that query instead. It is off by
  default because ``RESET ALL`` undoes what a ``configure`` set with ``SET`` (psycopg_pool's own
  documented way to set up a session), and a drop-in must not change that.
* A connection in the pool has ``conn._pool = None`` (psycopg's ``__del__`` then stays quiet);
  handed out, ``conn._pool`` is the drop-in pool, so that psycopg's ``Connection.close()`` gives
  it back when ``close_returns=True``, and ``with conn:`` does not close it.
* The exceptions are psycopg_pool's own classes' subclasses (``PoolTimeout``, ``PoolClosed``,
  ``TooManyRequests``): ``except psycopg_pool.PoolTimeout`` still catches them. psycopg_pool is
  therefore a dependency of the ``psycopg`` extra.
* ``resize()`` has no counterpart in poolkit's pools (their limits are fixed at construction): it
  starts a new poolkit pool with the new sizes, to which new checkouts go; the old one closes
  its idle connections at once and each connection in use when it comes back.
* ``drain()`` is poolkit's ``clear()`` (a new generation: old connections closed as met, those
  in use when given back), after which the pool is made ready again; checkouts that were
  waiting go on waiting.
"""

from __future__ import annotations

import dataclasses
import logging
import random
import threading
from collections import Counter
from collections.abc import Callable
from time import monotonic
from typing import Any, Final

from ._extras import require

require("psycopg", "psycopg", "psycopg")
require("psycopg_pool", "psycopg", "psycopg")  # (its exceptions are the base classes)

import psycopg_pool  # noqa: E402

from .. import Backoff, KeepAlive, PoolOptions, PoolStats  # noqa: E402

__all__ = [
    "PoolClosed",
    "PoolTimeout",
    "TooManyRequests",
]

#: psycopg_pool's logger: the drop-ins log what psycopg_pool logs, there
logger = logging.getLogger("psycopg.pool")

# psycopg_pool's statistics keys (its ``BasePool``'s)
POOL_MIN: Final = "pool_min"
POOL_MAX: Final = "pool_max"
POOL_SIZE: Final = "pool_size"
POOL_AVAILABLE: Final = "pool_available"
REQUESTS_WAITING: Final = "requests_waiting"
REQUESTS_NUM: Final = "requests_num"
REQUESTS_QUEUED: Final = "requests_queued"
REQUESTS_WAIT_MS: Final = "requests_wait_ms"
REQUESTS_ERRORS: Final = "requests_errors"
USAGE_MS: Final = "usage_ms"
RETURNS_BAD: Final = "returns_bad"
CONNECTIONS_NUM: Final = "connections_num"
CONNECTIONS_MS: Final = "connections_ms"
CONNECTIONS_ERRORS: Final = "connections_errors"
CONNECTIONS_LOST: Final = "connections_lost"

#: seconds between the probes of an idle connection: poolkit's ``check`` (no I/O unless the
#: server sent something, as it does when the backend ends or the link is reset; then a round
#: trip), so that connections lost while idle are replaced without a caller meeting them
#: (psycopg_pool #370, #1315: psycopg_pool finds them only when handing them out)
PROBE_INTERVAL: Final = 1.0
#: a null pool's connects at once when its ``max_size`` is 0 (no limit): psycopg_pool's null pool
#: connects in each caller, with no bound of its own
_NULL_MAX_CONNECTING: Final = 100


def null_max_connecting(max_size: int) -> int:
    """A null pool's ``max_connecting`` for its ``max_size``: every connection it may hold at
    once (its callers connect side by side, as psycopg_pool's each connect in the caller)."""
    return max_size or _NULL_MAX_CONNECTING

#: psycopg_pool's retry delays (its ``AttemptWithBackoff``'s defaults): 1 s, doubling, +-10 %
_RETRY_BASE: Final = 1.0
_RETRY_FACTOR: Final = 2.0
_RETRY_JITTER: Final = 0.1
#: psycopg_pool's shortening of each connection's ``max_lifetime``: up to 5 %
LIFETIME_JITTER: Final = 0.05


def retry_schedule() -> tuple[float, float, float]:
    """psycopg_pool's retry delays as its ``AttemptWithBackoff`` says them now: the first delay,
    its jitter (a fraction either way) and the factor of each next one. Read at each use, as
    psycopg_pool reads its class attributes, so that a program (or a test) that sets them sets
    the drop-ins' too; psycopg_pool's defaults if that class is not there."""
    attempt = getattr(getattr(psycopg_pool, "base", None), "AttemptWithBackoff", None)
    return (
        float(getattr(attempt, "INITIAL_DELAY", _RETRY_BASE)),
        float(getattr(attempt, "DELAY_JITTER", _RETRY_JITTER)),
        float(getattr(attempt, "DELAY_BACKOFF", _RETRY_FACTOR)),
    )


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class RetryBackoff(Backoff):
    """The poolkit pool's ``connect_retry`` with psycopg_pool's delays (``retry_schedule``, read
    at each retry): the n-th failed connect in a row waits ``INITIAL_DELAY * DELAY_BACKOFF **
    (n - 1)`` (+-``DELAY_JITTER``), at most ``max_delay``, and, as psycopg_pool cuts it, at most
    the seconds ``give_up_in()`` says are left until the drop-in gives the run of failures up
    (``reconnect_timeout`` after its first: the last retry falls then, and a failure there calls
    ``reconnect_failed``); ``give_up_in()`` is ``None`` while no run is being timed."""

    give_up_in: Callable[[], float | None] | None = None

    def delay(self, failures: int, rand: float = 0.5) -> float:
        initial, jitter, factor = retry_schedule()
        try:
            raw = initial * factor ** min(failures - 1, 10_000)
        except OverflowError:
            raw = self.max_delay
        wait = min(raw, self.max_delay) * (1.0 + jitter * (2.0 * rand - 1.0))
        left = None if self.give_up_in is None else self.give_up_in()
        return wait if left is None else min(wait, max(left, 0.0))


class CheckRetry:
    """psycopg_pool's schedule for a ``getconn`` whose ``check`` fails (its
    ``_getconn_with_check_loop``): the connection goes back, the second try is at once, then
    after ``retry_schedule``'s delays, the last one cut to end at the deadline; past the
    deadline, ``PoolTimeout``."""

    __slots__ = ("_deadline", "_delay")

    def __init__(self, deadline: float) -> None:
        self._deadline = deadline
        self._delay: float | None = None

    def wait(self, now: float) -> float | None:
        """Seconds to wait before the next try after a failed check at ``now``; ``None``: give
        up (the deadline has passed)."""
        if now >= self._deadline:
            return None
        if self._delay is None:
            self._delay = 0.0
            return 0.0
        initial, jitter, factor = retry_schedule()
        if self._delay == 0.0:
            self._delay = initial * (1.0 + jitter * (2.0 * random.random() - 1.0))
        else:
            self._delay *= factor
        return min(self._delay, self._deadline - now)


def expiry(created: float, max_lifetime: float) -> float:
    """When a connection made at ``created`` expires: ``max_lifetime`` shortened by up to 5 %, as
    psycopg_pool does (so that connections made together do not all expire together)."""
    return created + max_lifetime * (1.0 - LIFETIME_JITTER * random.random())


class PoolTimeout(psycopg_pool.PoolTimeout):
    """psycopg_pool's ``PoolTimeout``: no connection in time (a subclass of it)."""

    __module__ = "poolkit.backends.psycopg"


class PoolClosed(psycopg_pool.PoolClosed):
    """psycopg_pool's ``PoolClosed``: the pool is closed, or not open yet (a subclass of it)."""

    __module__ = "poolkit.backends.psycopg"


class TooManyRequests(psycopg_pool.TooManyRequests):
    """psycopg_pool's ``TooManyRequests``: ``max_waiting`` callers wait already (a subclass of
    it)."""

    __module__ = "poolkit.backends.psycopg"


def check_size(min_size: int, max_size: int | None, *, null: bool) -> tuple[int, int]:
    """``min_size`` and ``max_size`` by psycopg_pool's rules and messages (``null``: a null
    pool's, whose ``min_size`` is 0 and whose ``max_size`` 0 means no limit)."""
    if max_size is None:
        max_size = min_size
    if null:
        if min_size != 0:
            raise ValueError("null pools must have min_size = 0")
    elif min_size < 0:
        raise ValueError("min_size cannot be negative")
    if max_size < min_size:
        raise ValueError("max_size must be greater or equal than min_size")
    if not null and min_size == max_size == 0:
        raise ValueError("if min_size is 0 max_size must be greater than 0")
    return min_size, max_size


def pool_options(
    *,
    min_size: int,
    max_size: int,
    null: bool,
    max_waiting: int,
    max_idle: float,
    reconnect_timeout: float,
    num_workers: int,
    hooks: Any,
    probe: Any = None,
    give_up_in: Callable[[], float | None] | None = None,
) -> PoolOptions:
    """The poolkit pool's options for psycopg_pool's arguments. A null pool keeps no connection
    (every connection is overflow: closed as soon as it is idle, unless a caller waits for it),
    and a connect that fails fails the caller that needed it, as psycopg_pool's null pool
    connects in the caller; a pool retries failed connects with psycopg_pool's delays, and its
    waiting callers wait for their own deadline. ``probe``: the pool's idle connections are
    probed with it every ``PROBE_INTERVAL`` seconds (a connection found dead is closed and
    ``min_size`` refilled); a null pool keeps none to probe. ``give_up_in``: ``RetryBackoff``'s."""
    if null:
        return PoolOptions(
            min_size=0,
            max_size=max_size,  # (0: no limit, as in psycopg_pool's null pool)
            soft_max_size=0,
            max_connecting=null_max_connecting(max_size),
            max_waiting=max_waiting,
            connect_timeout=None,
            hooks=hooks,
            warn_connects_failing=False,  # (the drop-in logs each failed connect itself)
        )
    return PoolOptions(
        min_size=min_size,
        max_size=max_size,
        idle_order="fifo",  # (psycopg_pool hands its idle connections out in turn)
        max_connecting=num_workers,
        max_waiting=max_waiting,
        max_idle_time=max_idle,
        connect_timeout=None,  # (libpq's connect_timeout, in the DSN or kwargs, is the limit)
        keep_alive=None if probe is None else KeepAlive(PROBE_INTERVAL, probe),
        connect_retry=RetryBackoff(
            base=_RETRY_BASE,
            factor=_RETRY_FACTOR,
            jitter=_RETRY_JITTER,
            max_delay=max(_RETRY_BASE, min(reconnect_timeout, 60.0)),
            circuit_breaker_after=None,  # (psycopg_pool's callers wait for their timeout)
            give_up_in=give_up_in,
        ),
        hooks=hooks,
        warn_connects_failing=False,  # (the drop-in logs each failed connect itself)
    )


class Tally:
    """psycopg_pool's statistics: the counters the drop-in counts itself (``counts``), those
    the poolkit pool counts (cumulative, read from its :class:`~poolkit.PoolStats`, less what was
    popped), and the measures of now. ``requests_queued`` and ``requests_wait_ms`` are the
    drop-in's own, counted when a caller starts to wait, as psycopg_pool counts them (the poolkit
    pool counts a wait when it ends, and a null pool's caller waits there for its own
    connect); a null pool's wait counts from the end of the connects ahead (``ConnectsAhead``)."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self._popped: dict[str, int] = {}

    @staticmethod
    def _derived(stats: PoolStats | None, handoff_waits: int) -> dict[str, int]:
        if stats is None:
            return {}
        return {CONNECTIONS_LOST: stats.checks_failed}

    def read(self, stats: PoolStats | None, measures: dict[str, int]) -> dict[str, int]:
        out = dict(self.counts)
        for key, value in self._derived(stats, 0).items():
            value -= self._popped.get(key, 0)
            value += out.get(key, 0)
            if value:
                out[key] = value
        out.update(measures)
        return out

    def pop(self, stats: PoolStats | None, measures: dict[str, int]) -> dict[str, int]:
        out = self.read(stats, measures)
        self.counts = Counter()
        self._popped = self._derived(stats, 0)
        return out


class _Wait:
    """One caller of a null pool that found no room: the connects in flight when it came
    (``ahead``) and the time its wait counts from (``since``)."""

    __slots__ = ("ahead", "since")

    def __init__(self, ahead: set[int], since: float) -> None:
        self.ahead = ahead
        self.since = since


class ConnectsAhead:
    """A null pool's ``requests_wait_ms``, counted as psycopg_pool's null pool counts it.

    psycopg_pool's null pool makes a caller's connection in that caller, holding the pool's lock
    (``_get_ready_connection`` under ``_getconn_unchecked``'s lock): a caller that comes while
    others connect waits for the lock, uncounted, and once it holds it and finds ``max_size``
    connections made, it enters the queue and its wait counts from then (``t0``) until a
    connection given back is handed to it, or it gives up. The drop-in's connects are made by
    the poolkit pool, side by side (``max_connecting``), while the callers wait in its queue; a
    caller that finds no room counts its wait from the moment the connects in flight when it
    came have all ended (at once if none was), which is when psycopg_pool's would have held
    the lock with ``max_size`` connections made: the same span, from the same event. Connects
    started after it came (to replace a connection given back broken) count in its wait, as
    psycopg_pool's workers' do; a caller served or giving up while a connect it found still
    runs has waited no time in psycopg_pool's queue (0)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # (the blocking drop-ins connect in the pool's threads)
        self._running: set[int] = set()
        self._waits: set[_Wait] = set()

    def started(self, connection_id: int) -> None:
        with self._lock:
            self._running.add(connection_id)

    def ended(self, connection_id: int) -> None:
        now = monotonic()
        with self._lock:
            self._running.discard(connection_id)
            for wait in self._waits:
                if connection_id in wait.ahead:
                    wait.ahead.discard(connection_id)
                    wait.since = now

    def queued(self) -> _Wait:
        """A caller found no room: its wait, from now or from the end of the connects running."""
        now = monotonic()
        with self._lock:
            wait = _Wait(set(self._running), now)
            if wait.ahead:
                self._waits.add(wait)
        return wait

    def waited_ms(self, wait: _Wait) -> int:
        """The caller of ``wait`` was served or gave up: its wait, in milliseconds."""
        now = monotonic()
        with self._lock:
            self._waits.discard(wait)
            if wait.ahead:
                return 0
        return int(1000.0 * (now - wait.since))


def measures(min_size: int, max_size: int, stats: PoolStats | None, null: bool) -> dict[str, int]:
    """psycopg_pool's measures: sizes, connections (in the pool, out, being made), available,
    callers waiting."""
    return {
        POOL_MIN: min_size,
        POOL_MAX: max_size,
        POOL_SIZE: 0 if stats is None else stats.total + stats.abandoned,
        POOL_AVAILABLE: 0 if stats is None else stats.available,
        REQUESTS_WAITING: 0 if stats is None else stats.waiting,
    }


def putconn_refusal(pool: Any, conn: Any) -> ValueError:
    """psycopg_pool's refusal of ``conn``, which is not out from ``pool`` (its ``_pool`` is
    another pool's, or none)."""
    owner = getattr(conn, "_pool", None)
    where = f"it comes from pool {owner.name!r}" if owner else "it doesn't come from any pool"
    return ValueError(f"can't return connection to pool {pool.name!r}, {where}: {conn}")


#: a pool's number, for its default name (``pool-1``...), as psycopg_pool counts
_numbers: list[int] = [0]


def pool_name(name: str | None) -> str:
    if name:
        return name
    _numbers[0] += 1
    return f"pool-{_numbers[0]}"


def open_warning(kind: str) -> str:
    return (
        f"the default for the {kind} 'open' parameter will become 'False' in a future release. "
        "Please use open={True|False} explicitly, or use the pool as context manager using: "
        f"`with {kind}(...) as pool: ...`"
    )


def async_open_warning(kind: str) -> str:
    return (
        f"opening the async pool {kind} in the constructor is deprecated and will not be "
        "supported anymore in a future release. Please use `await pool.open()`, or use the pool "
        f"as context manager using: `async with {kind}(...) as pool: `..."
    )


Callback = Callable[..., Any]
