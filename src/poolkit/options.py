"""Pool options: one frozen value, validated once, with the CMAP names of each option.

Durations are seconds as floats; a :class:`datetime.timedelta` is accepted and converted. Every
invalid value raises :class:`ValueError` (or :class:`TypeError` for a wrong type) naming the
option and the rule it breaks.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Final, Literal

__all__ = ["Adaptive", "Backoff", "Hooks", "KeepAlive", "PoolOptions"]

Seconds = float | int | timedelta


def _seconds(
    name: str,
    value: object,
    *,
    allow_none: bool,
    allow_zero: bool,
    allow_inf: bool,
    owner: str = "PoolOptions",
) -> float | None:
    name = f"{owner}.{name}"
    limit = ">= 0" if allow_zero else "> 0"
    if value is None:
        if allow_none:
            return None
        raise TypeError(f"{name} must be a number of seconds {limit}, not None")
    if isinstance(value, timedelta):
        value = value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(
            f"{name} must be seconds as a float or a timedelta, not {type(value).__name__}"
        )
    try:
        seconds = float(value)
        got = repr(value)
    except OverflowError:  # an int beyond every float: as good as infinite
        seconds = math.inf if value > 0 else -math.inf
        got = f"{'an' if value > 0 else 'a negative'} int too large for a float"
    if math.isnan(seconds):
        raise ValueError(f"{name} must be a number of seconds, not NaN")
    if seconds < 0 or (seconds == 0 and not allow_zero):
        none = " or None (no limit)" if allow_none else ""
        raise ValueError(f"{name} must be {limit} seconds{none}, got {got}")
    if math.isinf(seconds) and not allow_inf:
        none = " or None for no limit" if allow_none else ""
        raise ValueError(f"{name} must be finite (a number of seconds {limit}{none}), got {got}")
    return seconds


def _finite_seconds(owner: str, obj: object) -> Callable[..., float | None]:
    """``seconds(field, none=..., zero=...)``: ``obj``'s field checked as finite seconds."""

    def seconds(field: str, *, none: bool, zero: bool) -> float | None:
        value = getattr(obj, field)
        return _seconds(
            field, value, allow_none=none, allow_zero=zero, allow_inf=False, owner=owner
        )

    return seconds


def _fraction(name: str, value: object, high: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{name} must be a float, not {type(value).__name__}")
    if not 0 <= value <= high:
        raise ValueError(f"{name} must be a fraction in [0, {high}], got {value!r}")
    return float(value)


@dataclasses.dataclass(frozen=True, slots=True)
class KeepAlive:
    """Probe idle connections: ``PoolOptions(keep_alive=KeepAlive(interval, probe))``.

    A connection that has sat available for ``interval`` seconds is probed: ``probe(connection)``
    (an async function for :class:`~poolkit.AsyncPool`, a plain one for :class:`~poolkit.Pool`)
    runs outside the pool's lock while the probe occupies one of the connection's streams. If it
    returns, the connection is available again and probed ``interval`` later; if it raises (or
    takes longer than ``timeout`` seconds, when set), the connection is closed with reason
    ``"error"`` and ``min_size`` is refilled. A probe does not count as use: a demand
    connection's idle time runs on through it.
    """

    interval: float
    probe: Callable[[Any], Any]
    timeout: float | None = None

    if TYPE_CHECKING:  # what the constructor takes (durations also as timedelta; read as float)

        def __init__(
            self, interval: Seconds, probe: Callable[[Any], Any], timeout: Seconds | None = None
        ) -> None: ...

    def __post_init__(self) -> None:
        seconds = _finite_seconds("KeepAlive", self)
        object.__setattr__(self, "interval", seconds("interval", none=False, zero=False))
        object.__setattr__(self, "timeout", seconds("timeout", none=True, zero=False))
        if not callable(self.probe):
            raise TypeError(
                f"KeepAlive.probe must be a function of the connection, not "
                f"{type(self.probe).__name__}"
            )


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Backoff:
    """Retry failed connects: ``PoolOptions(connect_retry=Backoff())``.

    When a connect fails, the checkouts waiting keep waiting (until their own deadlines) while
    the pool retries one connection after ``min(base * factor ** (n - 1), max_delay)`` seconds
    for the n-th failure in a row, each delay moved by a uniform random fraction of up to
    ``jitter`` either way (the defaults are PostgresNIO's: 100 ms, x1.25, 60 s cap, +-3%). No
    other connect starts meanwhile. If connects have failed for ``circuit_breaker_after`` seconds
    and the pool has no open connection, the circuit opens: every waiting and every new checkout
    fails at once with :class:`~poolkit.CircuitOpenError` until a connect succeeds (retries go
    on). ``None`` never opens it.
    """

    base: float = 0.1
    factor: float = 1.25
    max_delay: float = 60.0
    jitter: float = 0.03
    circuit_breaker_after: float | None = 30.0

    if TYPE_CHECKING:  # what the constructor takes (durations also as timedelta; read as float)

        def __init__(
            self,
            *,
            base: Seconds = 0.1,
            factor: float = 1.25,
            max_delay: Seconds = 60.0,
            jitter: float = 0.03,
            circuit_breaker_after: Seconds | None = 30.0,
        ) -> None: ...

    def __post_init__(self) -> None:
        seconds = _finite_seconds("Backoff", self)
        base = seconds("base", none=False, zero=False)
        cap = seconds("max_delay", none=False, zero=False)
        trip = seconds("circuit_breaker_after", none=True, zero=True)
        factor = self.factor
        if isinstance(factor, bool) or not isinstance(factor, int | float):
            raise TypeError(f"Backoff.factor must be a float, not {type(factor).__name__}")
        try:
            as_float = float(factor)
            got = repr(factor)
        except OverflowError:  # an int beyond every float
            as_float, got = math.inf, "an int too large for a float"
        if not 1 <= as_float < math.inf:  # NaN fails it too
            raise ValueError(f"Backoff.factor must be a finite number >= 1, got {got}")
        assert base is not None and cap is not None
        if cap < base:
            raise ValueError(f"Backoff.max_delay ({cap}) must be >= Backoff.base ({base})")
        setattr_ = object.__setattr__
        setattr_(self, "base", base)
        setattr_(self, "max_delay", cap)
        setattr_(self, "factor", as_float)
        setattr_(self, "jitter", _fraction("Backoff.jitter", self.jitter, 0.5))
        setattr_(self, "circuit_breaker_after", trip)

    def delay(self, failures: int, rand: float = 0.5) -> float:
        """The wait before the retry after ``failures`` failed connects in a row; ``rand`` is a
        uniform draw in [0, 1) (0.5: no jitter)."""
        exponent = min(failures - 1, 10_000)
        try:
            raw = self.base * self.factor**exponent
        except OverflowError:
            raw = self.max_delay
        return min(raw, self.max_delay) * (1.0 + self.jitter * (2.0 * rand - 1.0))


_HOOK_NAMES: Final = ("configure", "check", "reset", "end", "is_broken", "lend")


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Hooks:
    """What the pool runs on a connection on its way in and out: ``PoolOptions(hooks=Hooks(...))``.

    Each hook takes the connection (what the connect function returned): an async function for
    :class:`~poolkit.AsyncPool`, a plain one for :class:`~poolkit.Pool`. The pool runs them
    outside its lock; the core decides when, like every other input.

    * ``configure(conn)``: once after a connect, before the connection's first use (session
      settings, prepared statements). It runs as part of the connect (inside
      ``connect_timeout``); if it raises, the connect failed and the connection is closed.
    * ``check(conn)``: before a connection is handed out, when it has sat available for at least
      ``check_after`` seconds (``0``: before every hand-out; a pre-ping). If it raises (or takes
      longer than ``timeout``), that connection is closed (reason ``"error"``) and the checkout
      goes on with another, or a new one, within its own deadline: the caller never sees it.
    * ``reset(conn)``: on check-in, before the connection is available again (roll back, reset
      the session). If it raises (or takes longer than ``timeout``), the connection is closed.
      A connection being reset is neither available nor counted in use.
    * ``end(conn, error)``: run by ``pool.connection()`` in the caller when its block ends,
      before the connection is given back: ``error`` is ``None`` if the block succeeded (commit),
      else the exception it raised (roll back). On success, what ``end`` raises reaches the
      caller (a COMMIT that fails); on an error, the block's error is the one raised and what
      ``end`` raised is logged. On success ``end`` may return ``True`` to say that it left the
      connection as ``reset`` would (it ran the reset itself, in the caller, as asyncpg's pool
      does in ``release()``): then no ``reset`` runs at this check-in.
    * ``is_broken(conn, error)``: asked (a plain function for both pools) when the block of
      ``pool.connection()`` raised ``error``; true: the connection is discarded instead of
      released.
    * ``cancel_safe``: a block of ``pool.connection()`` cancelled (asyncio) leaves the connection
      usable: the protocol ended itself what the caller abandoned (HTTP/2 resets the stream, the
      connection's other streams go on). The lease is then released, not discarded. False (the
      default): a cancelled block may have left its connection mid-message, and it is discarded.
    * ``timeout``: seconds a ``check`` or ``reset`` may take; ``None`` for no limit.
    * ``lend(conn, lease)``: what the caller is handed in place of ``conn`` (a plain function, for
      both pools): called once per lease, in the caller, the first time its ``connection`` is
      read (``pool.connection()`` reads it at once); ``lease.connection`` returns its result from
      then on. For a proxy that refuses use once the lease is given back (``lease.active``
      false), as asyncpg's pool hands out: keep ``lease`` in a weak reference (the lease keeps
      what ``lend`` returned). The other hooks and the pool's close get ``conn`` itself (``end``
      gets what the block got).
    """

    configure: Callable[[Any], Any] | None = None
    check: Callable[[Any], Any] | None = None
    check_after: float = 0.0
    reset: Callable[[Any], Any] | None = None
    end: Callable[[Any, BaseException | None], Any] | None = None
    is_broken: Callable[[Any, BaseException], Any] | None = None
    timeout: float | None = 30.0
    lend: Callable[[Any, Any], Any] | None = None
    cancel_safe: bool = False

    if TYPE_CHECKING:  # what the constructor takes (durations also as timedelta; read as float)

        def __init__(
            self,
            *,
            configure: Callable[[Any], Any] | None = None,
            check: Callable[[Any], Any] | None = None,
            check_after: Seconds = 0.0,
            reset: Callable[[Any], Any] | None = None,
            end: Callable[[Any, BaseException | None], Any] | None = None,
            is_broken: Callable[[Any, BaseException], Any] | None = None,
            timeout: Seconds | None = 30.0,
            lend: Callable[[Any, Any], Any] | None = None,
            cancel_safe: bool = False,
        ) -> None: ...

    def __post_init__(self) -> None:
        seconds = _finite_seconds("Hooks", self)
        if not isinstance(self.cancel_safe, bool):
            raise TypeError(
                f"Hooks.cancel_safe must be a bool, not {type(self.cancel_safe).__name__}"
            )
        object.__setattr__(self, "check_after", seconds("check_after", none=False, zero=True))
        object.__setattr__(self, "timeout", seconds("timeout", none=True, zero=False))
        for name in _HOOK_NAMES:
            hook = getattr(self, name)
            if hook is not None and not callable(hook):
                raise TypeError(
                    f"Hooks.{name} must be a function of the connection or None, not "
                    f"{type(hook).__name__}"
                )
        if inspect.iscoroutinefunction(self.lend):
            raise TypeError(
                f"Hooks.lend must be a plain function (it runs when lease.connection is read), "
                f"not the async function {self.lend!r}"
            )

    def functions(self) -> dict[str, Callable[..., Any]]:
        """The hooks that are set, by name."""
        names = _HOOK_NAMES
        return {name: getattr(self, name) for name in names if getattr(self, name) is not None}


def _count(name: str, value: object, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"PoolOptions.{name} must be an int, not {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"PoolOptions.{name} must be an integer >= {minimum}, got {value}")
    return value


@dataclasses.dataclass(frozen=True, slots=True)
class Adaptive:
    """``PoolOptions(adaptive=Adaptive())``: the pool finds its limit on connections in use as it
    runs (the server's knee: more in use would only queue inside it), from the operation times
    it sees (check-out to check-in), and follows it as the server changes (``docs/adaptive.md``
    and ``poolkit._core.adaptive`` say how and why). Experimental.

    * ``target``: the knee is where one more connection in ten brings less than ``target`` of
      one in ten more throughput (0.1); lower holds more connections for a little more
      throughput, higher fewer.
    * ``queue``: the share of the server the pool takes falls while more than ``queue`` of its
      connections in use are, by their operation times against those on a server the pool left,
      queueing inside it (2; TCP Vegas's estimate): the pools of a fleet, and an overload, do
      not pile up connections on a server already queueing, and a fleet's pools share it
      evenly.
    * ``base_every``: seconds (or a ``timedelta``, as ``shed_after``) between the short rounds
      that measure that time, at half the connections the server serves unqueued (10); a
      fleet's pools measure together (the rounds are aligned on the wall clock, which NTP keeps
      across hosts).
    * ``round_ops``: the least operations a round is measured over (64); ``window``: the rounds
      ``op_time`` is the median of (10).

    The limit and what it was decided from are in ``stats().adaptive``; a change of more than
    ``report_change`` of the limit last reported (0.2: a fifth) is an
    ``AdaptiveLimitChangedEvent`` and a line at INFO on the ``poolkit.pool`` logger.

    Connections the pool holds beyond what its next probe could use (the knee times the probe's
    gain, and one) that sit available for ``shed_after`` seconds are closed (reason ``"idle"``,
    longest parked first; ``min_size``'s never): a limit that went down gives its connections
    back to the server. ``None``: only ``max_idle_time`` closes them.
    """

    target: float = 0.1
    queue: float = 2.0
    base_every: float = 10.0
    window: int = 10
    round_ops: int = 64
    report_change: float = 0.2
    shed_after: float | None = 1.0

    if TYPE_CHECKING:  # what the constructor takes (durations also as timedelta; read as float)

        def __init__(
            self,
            target: float = 0.1,
            queue: float = 2.0,
            base_every: Seconds = 10.0,
            window: int = 10,
            round_ops: int = 64,
            report_change: float = 0.2,
            shed_after: Seconds | None = 1.0,
        ) -> None: ...

    def __post_init__(self) -> None:
        seconds = _finite_seconds("Adaptive", self)
        object.__setattr__(self, "base_every", seconds("base_every", none=False, zero=False))
        object.__setattr__(self, "shed_after", seconds("shed_after", none=True, zero=True))
        for name in ("window", "round_ops"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"Adaptive.{name} must be an int >= 1, got {value!r}")
        for name, low, high in (
            ("target", 0.0, 1.0),
            ("queue", 0.0, math.inf),
        ):
            value = getattr(self, name)
            if (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or not low < value < high
            ):
                raise ValueError(
                    f"Adaptive.{name} must be a number in ({low:g}, {high:g}), got {value!r}"
                )
        change = self.report_change
        if isinstance(change, bool) or not isinstance(change, int | float) or not change >= 0:
            raise ValueError(f"Adaptive.report_change must be a number >= 0, got {change!r}")


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class PoolOptions:
    """How a pool behaves. Frozen; build a new one with :func:`dataclasses.replace`.

    * ``max_size`` (CMAP ``maxPoolSize``): the most connections at once, counting those being
      established; ``0`` means no limit.
    * ``min_size`` (``minPoolSize``): connections kept open while the pool is ready, made in the
      background; at most ``max_size`` when that is set.
    * ``max_idle_time`` (``maxIdleTimeMS``): seconds a connection may sit available before it is
      closed as idle; ``None`` for no limit.
    * ``max_connecting`` (``maxConnecting``): connections being established at once, >= 1.
    * ``expected_streams``: the checkouts a connection being made is counted to serve until it is
      made, >= 1: the stream limit a multiplexed protocol's server is expected to give (HTTP/2's
      ``SETTINGS_MAX_CONCURRENT_STREAMS``). Concurrent checkouts of a pool with no connection
      then wait for one connection instead of each starting one. Once a connection is made, the
      limit it reports (``Established.max_streams``) replaces it. 1 (the default): one
      connection per waiting checkout, as CMAP's.
    * ``wait_queue_timeout`` (``waitQueueTimeoutMS``): default seconds a checkout may wait,
      > 0; ``None`` waits without limit. ``0`` is refused: CMAP's ``waitQueueTimeoutMS=0`` means
      no limit (``None`` here) while ``0`` seconds reads as "never wait", and a pool that never
      lets a checkout wait serves only what is already idle. ``checkout(timeout=0)`` tries
      without waiting (it still starts a connect the pool has room for).
    * ``background_interval``: seconds between background runs (closing perished connections,
      refilling ``min_size``); ``math.inf`` for never on a timer. ``ready()`` still starts
      populating at once and ``clear()`` still schedules a run at once.
    * ``connect_timeout``: seconds a connect function may take before the pool abandons it
      (``ConnectContext.cancelled`` turns true) and counts it as failed; ``None`` for no limit.
    * ``load_balanced``: the pool serves a load balancer: connections carry the service id their
      connect function reports, and ``clear(service_id=...)`` clears one service.
    * ``soft_max_size`` (the generic pool's soft limit; ``None``: the same as ``max_size``, no
      overflow): connections up to ``min_size`` are *kept* (never closed for idleness); up to
      ``soft_max_size`` they are *demand* connections, closed after ``max_idle_time`` idle; above
      it, up to ``max_size``, *overflow* connections, closed as soon as they are idle. Between
      ``min_size`` and ``max_size`` when those are set.
    * ``max_lifetime``: seconds after which a connection is retired (closed with reason
      ``"lifetime"`` when next met idle, at check-in, or in a background run); ``None`` for no
      limit. Each connection's lifetime is shortened by a random fraction of up to
      ``max_lifetime_jitter`` (default 0.1) so that connections made together do not all retire
      together; ``0`` for exact lifetimes.
    * ``max_waiting``: the most checkouts that may wait at once; one more fails at once with
      :class:`~poolkit.TooManyWaitersError`. ``0``: no limit.
    * ``idle_order``: which available connection a checkout takes. ``"lifo"`` (the default):
      the one given back last, so that a quiet pool leaves the others idle, where
      ``max_idle_time`` closes them; ``"fifo"``: the one given back first, so that every
      connection is used in turn (none sits idle long enough for a firewall or the server to
      drop it; what psycopg_pool and SQLAlchemy's ``QueuePool`` do by default).
    * ``keep_alive``: a :class:`KeepAlive` to probe idle connections; ``None``: no probes.
    * ``connect_retry``: a :class:`Backoff` to retry failed connects while checkouts wait (and
      trip a circuit breaker); ``None`` (the CMAP behaviour): a failed connect fails the checkout
      that needed it.
    * ``leak_timeout``: seconds after which a lease still out is reported as a leak, once (a
      warning on logger ``poolkit.pool`` and a :class:`~poolkit.events.LeaseLeakedEvent`, with
      the stack of its checkout), while the pool is open. ``None``: leases are not watched
      (watching records a stack at each checkout and turns the fast paths off: a diagnostic
      setting). Watched or not, a lease garbage-collected while out is reported and its
      connection closed, never lost.
    * ``adaptive``: an :class:`Adaptive` to let the pool find how many connections may be in use
      at once (between ``min_size``, or 1, and ``max_size``, which must be set) from the
      operation times it sees; checkouts beyond that limit wait in the same FIFO queue.
      ``None`` (the default): ``max_size`` is the limit. (Experimental: its measurements are
      issue 28's.)
    * ``hooks``: a :class:`Hooks` (configure after connect, check before hand-out, reset on
      check-in, is_broken after an error); ``None``: connections go in and out as they are.
    * ``warn_connects_failing``: whether the pool warns, on logger ``poolkit.pool``, that
      connects are failing while no checkout is told (once per run of failures: filling
      ``min_size``, refilling, retrying). ``False`` for a layer that logs each failed connect
      itself (the psycopg_pool drop-ins log it on ``psycopg.pool``, as psycopg_pool does);
      listeners get the :class:`~poolkit.events.ConnectFailingEvent` either way.
    """

    max_size: int = 100
    min_size: int = 0
    max_idle_time: float | None = None
    max_connecting: int = 2
    expected_streams: int = 1
    wait_queue_timeout: float | None = None
    background_interval: float = 1.0
    connect_timeout: float | None = 30.0
    load_balanced: bool = False
    soft_max_size: int | None = None
    max_lifetime: float | None = None
    max_lifetime_jitter: float = 0.1
    max_waiting: int = 0
    idle_order: Literal["lifo", "fifo"] = "lifo"
    keep_alive: KeepAlive | None = None
    connect_retry: Backoff | None = None
    leak_timeout: float | None = None
    hooks: Hooks | None = None
    adaptive: Adaptive | None = None
    warn_connects_failing: bool = True

    if TYPE_CHECKING:  # what the constructor takes (durations also as timedelta; read as float)

        def __init__(
            self,
            *,
            max_size: int = 100,
            min_size: int = 0,
            max_idle_time: Seconds | None = None,
            max_connecting: int = 2,
            expected_streams: int = 1,
            wait_queue_timeout: Seconds | None = None,
            background_interval: Seconds = 1.0,
            connect_timeout: Seconds | None = 30.0,
            load_balanced: bool = False,
            soft_max_size: int | None = None,
            max_lifetime: Seconds | None = None,
            max_lifetime_jitter: float = 0.1,
            max_waiting: int = 0,
            idle_order: Literal["lifo", "fifo"] = "lifo",
            keep_alive: KeepAlive | None = None,
            connect_retry: Backoff | None = None,
            leak_timeout: Seconds | None = None,
            hooks: Hooks | None = None,
            adaptive: Adaptive | None = None,
            warn_connects_failing: bool = True,
        ) -> None: ...

    def __post_init__(self) -> None:
        setattr_ = object.__setattr__
        # Each value alone first (its type, then its range), so that the rules between options
        # below compare validated values only.
        for name, minimum in _COUNTS.items():
            setattr_(self, name, _count(name, getattr(self, name), minimum))
        if self.soft_max_size is not None:
            setattr_(self, "soft_max_size", _count("soft_max_size", self.soft_max_size, 0))
        if self.wait_queue_timeout == 0 and not isinstance(self.wait_queue_timeout, bool):
            raise ValueError(
                "PoolOptions.wait_queue_timeout must be > 0 seconds or None (no limit), got "
                f"{self.wait_queue_timeout!r}: CMAP's waitQueueTimeoutMS=0 means no limit, so "
                "pass None for that; checkout(timeout=0) tries a checkout without waiting"
            )
        for name, (none, zero, inf) in _DURATIONS.items():
            value = getattr(self, name)
            setattr_(
                self,
                name,
                _seconds(name, value, allow_none=none, allow_zero=zero, allow_inf=inf),
            )
        jitter = _fraction("PoolOptions.max_lifetime_jitter", self.max_lifetime_jitter, 0.5)
        setattr_(self, "max_lifetime_jitter", jitter)
        for name in ("load_balanced", "warn_connects_failing"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(
                    f"PoolOptions.{name} must be a bool, not {type(getattr(self, name)).__name__}"
                )
        if self.idle_order not in ("lifo", "fifo"):
            raise ValueError(
                f'PoolOptions.idle_order must be "lifo" or "fifo", got {self.idle_order!r}'
            )
        if self.keep_alive is not None and not isinstance(self.keep_alive, KeepAlive):
            raise TypeError(
                "PoolOptions.keep_alive must be a poolkit.KeepAlive or None, not "
                f"{type(self.keep_alive).__name__}"
            )
        if self.hooks is not None and not isinstance(self.hooks, Hooks):
            raise TypeError(
                "PoolOptions.hooks must be a poolkit.Hooks or None, not "
                f"{type(self.hooks).__name__}"
            )
        if self.connect_retry is not None and not isinstance(self.connect_retry, Backoff):
            raise TypeError(
                "PoolOptions.connect_retry must be a poolkit.Backoff or None, not "
                f"{type(self.connect_retry).__name__}"
            )
        if self.adaptive is not None and not isinstance(self.adaptive, Adaptive):
            raise TypeError(
                "PoolOptions.adaptive must be a poolkit.Adaptive or None, not "
                f"{type(self.adaptive).__name__}"
            )
        # Then the rules between options.
        if self.adaptive is not None and not self.max_size:
            raise ValueError(
                "PoolOptions.adaptive needs max_size set (> 0): the limit it finds stays below it"
            )
        if self.max_size and self.min_size > self.max_size:
            raise ValueError(
                f"PoolOptions.min_size ({self.min_size}) must be <= max_size ({self.max_size}) "
                "when max_size is set"
            )
        soft = self.soft_max_size
        if soft is not None and (soft < self.min_size or (self.max_size and soft > self.max_size)):
            limit = f" and <= max_size ({self.max_size})" if self.max_size else ""
            raise ValueError(
                f"PoolOptions.soft_max_size ({soft}) must be >= min_size ({self.min_size}){limit}"
            )

    @property
    def soft_limit(self) -> int:
        """The soft limit in force: ``soft_max_size``, else ``max_size`` (0: no limit)."""
        return self.max_size if self.soft_max_size is None else self.soft_max_size

    def cmap_options(self) -> dict[str, Any]:
        """The options that differ from the defaults, by CMAP name, durations in integer ms.

        This is ``PoolCreatedEvent.options``; ``{}`` when every option is the default.
        """
        out: dict[str, Any] = {}
        for name, (cmap_name, is_duration) in _CMAP_NAMES.items():
            value = getattr(self, name)
            if value == _DEFAULTS[name]:
                continue
            if is_duration:
                value = -1 if value is None or math.isinf(value) else round(value * 1000)
            out[cmap_name] = value
        return out


#: the integer options and their least value
_COUNTS: Final[dict[str, int]] = {
    "max_size": 0,
    "min_size": 0,
    "max_connecting": 1,
    "expected_streams": 1,
    "max_waiting": 0,
}

#: the duration options: (None allowed, 0 allowed, inf allowed)
_DURATIONS: Final[dict[str, tuple[bool, bool, bool]]] = {
    "max_idle_time": (True, False, False),
    "wait_queue_timeout": (True, False, False),
    "background_interval": (False, False, True),
    "connect_timeout": (True, False, False),
    "max_lifetime": (True, False, False),
    "leak_timeout": (True, False, False),
}

_CMAP_NAMES: Final[dict[str, tuple[str, bool]]] = {
    "max_size": ("maxPoolSize", False),
    "min_size": ("minPoolSize", False),
    "max_idle_time": ("maxIdleTimeMS", True),
    "max_connecting": ("maxConnecting", False),
    "wait_queue_timeout": ("waitQueueTimeoutMS", True),
    "background_interval": ("backgroundThreadIntervalMS", True),
    "connect_timeout": ("connectTimeoutMS", True),
    "load_balanced": ("loadBalanced", False),
}

_DEFAULTS: Final[dict[str, Any]] = {f.name: f.default for f in dataclasses.fields(PoolOptions)}

PoolOptions.__module__ = KeepAlive.__module__ = Backoff.__module__ = Hooks.__module__ = "poolkit"
