"""What both front ends share: leases, connect contexts, connect results, event delivery, fork.

Rules of this module
--------------------
* Nothing here decides anything about the pool: decisions are the core's.
* A :class:`Lease` is valid for one check-in. The front end checks that ``_pool`` is itself and
  replaces it by its ``Returned`` marker under its lock, so two check-ins of one lease can never
  both pass.
* Events are delivered in the order the core produced them, one event to all listeners before the
  next, and never while the pool's lock is held.
"""

from __future__ import annotations

import dataclasses
import os
import threading
import time
import traceback
import weakref
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from datetime import timedelta
from typing import Any, Final, Generic, Protocol, TypeVar, final, runtime_checkable

from . import log as _log
from ._core.records import Conn
from .errors import InvalidLeaseError
from .events import ConnectFailingEvent, ConnectRecoveredEvent, Listener, PoolEvent, deliver
from .stats import PoolState

C = TypeVar("C")
_POOL_CLOSED = PoolState.CLOSED

__all__ = ["Clock", "ConnectContext", "DrivenClock", "Established", "Lease", "ThreadLoad"]

#: the calling thread's scheduler statistics (Linux): nanoseconds it ran, nanoseconds it waited
#: runnable for a processor, timeslices
_SCHEDSTAT: Final = "/proc/thread-self/schedstat"
#: seconds a thread's load is measured over (``ThreadLoad.share``)
LOAD_EVERY: Final = 0.1


class Clock(Protocol):
    """A source of monotonic time in seconds: the pool's time (its deadlines, its durations).
    Its timers are the event loop's (``AsyncPool``) or a thread's (``Pool``)."""

    def monotonic(self) -> float: ...


class Timer(Protocol):
    def cancel(self) -> object: ...


class Signal(Protocol):
    """A one-shot wake-up: ``wait()`` blocks until ``set()``."""

    def wait(self) -> object: ...

    def set(self) -> object: ...


@final
class ThreadLoad:
    """The calling thread's load (an event loop's: made and read in its thread): the part of
    the time it ran, or waited runnable for a processor (Linux's run-queue delay: a thread
    starved of processors by its neighbours is as saturated as one busy with its own work),
    over at least ``LOAD_EVERY`` seconds. Where the kernel keeps no such figures, the time it
    ran alone (``time.thread_time``). The adaptive limit's client-side signal (issue 40)."""

    __slots__ = ("_at", "_schedstat", "_used")

    def __init__(self, now: float) -> None:
        self._schedstat = True
        self._at = now
        self._used = self._read()

    def _read(self) -> float:
        if self._schedstat:
            try:
                with open(_SCHEDSTAT, "rb") as stat:
                    ran, waited = stat.read().split()[:2]
                return (int(ran) + int(waited)) / 1e9
            except (OSError, ValueError):
                self._schedstat = False  # (not Linux, or /proc not mounted: the CPU time alone)
        return time.thread_time()

    def share(self, now: float) -> float | None:
        """The load since the last measure, 0 to 1, when ``LOAD_EVERY`` has passed since
        (``now`` on the clock of the one before); else None."""
        elapsed = now - self._at
        if elapsed < LOAD_EVERY:
            return None
        was = self._schedstat
        used = self._read()
        spent = used - self._used
        self._at, self._used = now, used
        if was != self._schedstat:
            return None  # (the measure changed between the two readings)
        return min(max(spent / elapsed, 0.0), 1.0)


class _ClientSink(Protocol):
    def client_lag(self, lag: float, now: float) -> None: ...

    def client_load(self, load: float, now: float) -> None: ...


def tell_client(
    core: _ClientSink, load: ThreadLoad, made_ready: float, at: float, now: float
) -> None:
    """What an adaptive pool's front end tells its core of the client every ``LAG_EVERY``
    (asyncio's and trio's alike): how long a callback made ready at ``made_ready`` waited to run
    (it ran at ``at``, on the loop's clock), and every ``LOAD_EVERY`` the loop thread's load;
    ``now`` on the pool's clock."""
    core.client_lag(at - made_ready, now)
    share = load.share(at)
    if share is not None:
        core.client_load(share, now)


@runtime_checkable
class DrivenClock(Clock, Protocol):
    """A clock that also runs what a pool would leave to the machine: its timers (``call_at``),
    and for ``Pool`` its worker threads (``start_thread``) and the blocking waits of its
    checkouts (``new_signal``), so that a test can tell when every thread is blocked and move
    time on (:class:`poolkit.testing.FakeClock`). A pool asks whether its clock is one once, when
    it is made: this protocol is the only way a clock reaches more of a pool than its time."""

    def call_at(self, when: float, callback: Callable[[], Any]) -> Timer: ...

    def start_thread(self, target: Callable[[], Any], name: str) -> object: ...

    def new_signal(self) -> Signal: ...


@dataclasses.dataclass(frozen=True, slots=True)
class Established(Generic[C]):
    """What a connect function may return instead of the bare connection, to tell the pool more.

    ``max_streams``: how many leases the connection serves at once (a multiplexed protocol such as
    HTTP/2 says so in its handshake); each lease is one stream. Change it later with the pool's
    ``set_max_streams``.
    ``service_id``: in load-balanced mode, the id of the service behind the load balancer this
    connection reached (from the handshake); its generation is then the service's.
    """

    connection: C
    max_streams: int = 1
    service_id: Any = None

    def __post_init__(self) -> None:
        check_max_streams(self.max_streams, "Established")


def redact(address: str) -> str:
    """``address`` with the password of its user info masked: ``user:***@host:27017``, also in a
    URI (``scheme://user:***@host/...``). What has no password is returned as it is."""
    if "@" not in address:
        return address
    userinfo, hosts = address.rsplit("@", 1)
    scheme = ""
    if "://" in userinfo:
        scheme, userinfo = userinfo.split("://", 1)
        scheme += "://"
    if ":" not in userinfo:
        return address
    return f"{scheme}{userinfo.split(':', 1)[0]}:***@{hosts}"


def check_max_streams(n: object, call: str = "set_max_streams") -> int:
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"{call}(max_streams=...) must be an int >= 1, got {n!r}")
    return n


def unwrap(result: Any) -> tuple[Any, int, Any]:
    """(connection, max_streams, service_id) from what a connect function returned."""
    if type(result) is Established:
        return result.connection, result.max_streams, result.service_id
    return result, 1, None


@final
class ConnectContext:
    """What a connect function is told about the connection it makes.

    ``cancelled`` turns true when the pool abandons this connect (``clear(interrupt_in_use=True)``,
    ``close()``, or the connect timeout); a blocking connect function may poll it.
    :meth:`start_soon` starts a task for the life of the connection (``AsyncPool`` only).
    """

    __slots__ = (
        "_cancelled",
        "_spawner",
        "_task",
        "address",
        "connection_id",
        "generation",
        "pool",
    )

    def __init__(self, connection_id: int, address: str, pool: Any, generation: int) -> None:
        self.connection_id = connection_id
        self.address = address
        self.pool = pool
        self.generation = generation
        self._cancelled = False
        self._task: Any = None
        #: the pool's way to start a task for the connection's life (``AsyncPool``'s), or None
        self._spawner: Callable[[ConnectContext, Any, str], None] | None = None

    @property
    def cancelled(self) -> bool:
        return self._cancelled

    def start_soon(
        self, function: Callable[..., Awaitable[Any]], *args: Any, name: str | None = None
    ) -> None:
        """Start ``function(*args)`` as a task that lives as long as the connection being made
        (a multiplexed protocol's reader, say), as ``trio.Nursery.start_soon`` takes it.

        On asyncio it is a task of the pool's loop that the pool keeps; under trio it runs in
        the pool's nursery (the one ``async with pool:`` opens: no task outlives the block).
        The pool cancels it when it has closed the connection (after an async close has run),
        or when this connect fails; a task that ends earlier simply ends. What it raises (but a
        cancellation) is logged, never raised into the pool. Only ``AsyncPool`` has tasks:
        under ``Pool``, or for a context no pool made, this raises ``RuntimeError``."""
        spawner = self._spawner
        if spawner is None:
            raise RuntimeError(
                "ConnectContext.start_soon(): only an AsyncPool's connect can start a task for "
                "its connection's life (this context is a Pool's, or no pool's)"
            )
        work = function(*args)
        spawner(self, work, name or f"poolkit-conn-{self.connection_id}")

    def __repr__(self) -> str:
        return f"<ConnectContext id={self.connection_id} address={redact(self.address)!r}>"


class _LeaseOwner(Protocol):
    address: str
    #: ``hooks.lend``: what a lease hands out in place of its connection (``None``: the connection)
    _lend: Callable[[Any, Lease[Any]], Any] | None

    def _release(self, lease: Lease[Any], clean: bool = False) -> None: ...
    def _discard(self, lease: Lease[Any], error: BaseException | None) -> None: ...


@final
class Returned:
    """Stands in for the pool in a lease that was given back: releasing it again raises."""

    __slots__ = ("_pool", "address")
    #: never the fast check-in (a pool's own ``_quick`` may be true): the front ends' lease
    #: ``release`` asks ``lease._pool._quick`` without first asking whether it is the pool (and
    #: ``connection()``'s exit ``_quick_exit``)
    _quick = _quick_exit = False

    def __init__(self, pool: Any) -> None:
        self.address: str = pool.address
        self._pool = pool

    def _release(self, lease: Lease[Any], clean: bool = False) -> None:
        raise self._pool._invalid_lease(lease)

    def _discard(self, lease: Lease[Any], error: BaseException | None) -> None:
        raise self._pool._invalid_lease(lease)


class Lease(Generic[C]):
    """One checked-out connection. Give it back once: ``release()``, ``discard()`` or the pool's
    ``checkin()``.

    Each front end hands out a private subclass whose ``release`` is its check-in fast path
    inlined (one call less on the hottest path); do not subclass it yourself."""

    __slots__ = ("__weakref__", "_conn", "_lent", "_pool")

    # No ``__init__``: a pool makes its leases with :func:`new_lease`, or on its fast paths with
    # the same stores inlined (a class called without a Python ``__init__`` runs no frame).
    _conn: Conn
    #: the pool while the lease is out; the pool's ``Returned`` marker once given back
    _pool: _LeaseOwner | Returned
    #: what ``hooks.lend`` made of the connection for this lease, once asked (``connection``)
    _lent: Any

    @property
    def connection(self) -> C:
        """The object the connect function returned (or what ``hooks.lend`` made of it for this
        lease); :class:`~poolkit.InvalidLeaseError` once the lease was given back (another caller
        may hold the connection now)."""
        pool = self._pool
        if type(pool) is Returned:
            raise InvalidLeaseError(
                f"lease.connection: {self!r} was given back; check out again",
                address=pool.address,
                reason="already returned",
                lease=self,
            )
        lend = pool._lend
        if lend is None:  # (``_lent`` is read only with ``lend``: ``connection()`` sets it then)
            return self._conn.connection  # type: ignore[no-any-return]  # (the core keeps Any)
        lent = self._lent
        if lent is None:
            lent = self._lent = lend(self._conn.connection, self)
        return lent  # type: ignore[no-any-return]  # (hooks.lend returns Any)

    @property
    def connection_id(self) -> int:
        return self._conn.id

    @property
    def generation(self) -> int:
        return self._conn.generation

    @property
    def address(self) -> str:
        """The address of the pool the lease is from, as the pool shows it (a password masked),
        also once given back."""
        return self._pool.address

    @property
    def service_id(self) -> Any:
        return self._conn.service_id

    @property
    def active(self) -> bool:
        """True until the lease is given back."""
        return type(self._pool) is not Returned

    def release(self, reset: bool = True) -> None:
        """Give the connection back to the pool. ``reset=False``: the caller has reset the
        connection itself (as a ``hooks.end`` that returns ``True`` has), so ``hooks.reset`` is
        not run for it; it is handed out again as it is."""
        self._pool._release(self, not reset)

    def discard(self, error: BaseException | None = None) -> None:
        """Give the connection back to be closed (reason ``error``), e.g. after a network error."""
        self._pool._discard(self, error)

    def __del__(self) -> None:
        pool: Any = self._pool
        if type(pool) is not Returned:  # garbage-collected while out: the pool closes its
            try:  # connection at its next step (a deque append: safe from any thread and lock)
                pool._orphans.append(self._lost())
                if pool._core.state is _POOL_CLOSED:
                    pool._reap_soon()  # a closed pool has no next step
            except Exception:  # pragma: no cover - interpreter shutdown
                pass

    def _lost(self) -> Any:
        """What ``__del__`` hands the pool for a lease lost while out: its connection."""
        return self._conn

    def __repr__(self) -> str:
        state = "out" if self.active else "returned"
        return f"<Lease connection_id={self._conn.id} {state} address={self._pool.address!r}>"


L = TypeVar("L", bound=Lease[Any])


def block_repr(block: Lease[Any], state: Any, entered: Any, address: str) -> str:
    """The repr of a ``connection()`` block (a lease of the front end's; ``state``: its
    ``_state``, ``entered`` the value that says "entered, the block is the lease")."""
    if isinstance(state, Lease):
        return repr(state)
    if state is entered and hasattr(block, "_conn"):
        return Lease.__repr__(block)
    how = "not entered" if state is not entered else "its checkout failed"
    return f"<pool.connection() block, {how}, address={address!r}>"


def new_lease(cls: type[L], conn: Conn, pool: _LeaseOwner) -> L:
    """A lease of class ``cls`` on ``conn``, out from ``pool`` (``Lease`` has no ``__init__``:
    see there)."""
    lease = cls()
    lease._conn = conn
    lease._lent = None
    lease._pool = pool
    return lease


def watched(base: Any) -> Any:
    """A subclass of the front end lease class ``base`` for leases watched for leaks
    (``leak_timeout``): it tells the pool (``_unhold``) when given back, and, garbage-collected
    while out, hands its watch to the pool instead of its bare connection (``_lost``)."""

    class Watched(base):  # type: ignore[misc]  # (a class made from a variable)
        __slots__ = ("_held",)  # (set by the pool right after ``new_lease``)

        def release(self, reset: bool = True) -> None:
            pool = self._pool
            if type(pool) is not Returned:
                pool._unhold(self._held)
            super().release(reset)

        def discard(self, error: BaseException | None = None) -> None:
            pool = self._pool
            if type(pool) is not Returned:
                pool._unhold(self._held)
            super().discard(error)

        def _lost(self) -> Any:
            return self._held  # the pool reports it with its stack and time

    Watched.__name__ = Watched.__qualname__ = f"Watched{base.__name__}"
    return Watched


def invalid_lease(pool: Any, returned: Returned, lease: Lease[Any]) -> InvalidLeaseError:
    """The error for checking in ``lease`` to ``pool`` when it is not out from that pool."""
    if lease._pool is returned:
        return InvalidLeaseError(
            f"checkin: {lease!r} was already returned",
            address=pool.address,
            reason="already returned",
            lease=lease,
        )
    return InvalidLeaseError(
        f"checkin: {lease!r} was not checked out from this pool ({pool.address})",
        address=pool.address,
        reason="foreign",
        lease=lease,
    )


def check_lease(lease: Any, call: str) -> None:
    """Refuse what is not a lease at all, naming ``call`` (a foreign or returned lease is the
    pool's to judge)."""
    if not isinstance(lease, Lease):
        raise TypeError(f"{call} takes a Lease (from checkout()), got {lease!r}")


def listener_tuple(listeners: Iterable[Listener]) -> tuple[Listener, ...]:
    out = tuple(listeners)
    for listener in out:
        if not callable(listener):
            raise TypeError(f"listeners: {listener!r} is not callable (a listener takes one event)")
    return out


#: the events whose log lines a builder's first checkout holds (``EventSink.hold``): connects
#: failing with no checkout told ("... the pool goes on trying"), and their recovery
HELD: Final = frozenset({ConnectFailingEvent, ConnectRecoveredEvent})


@final
class EventSink:
    """Delivers events to listeners and the CMAP log, in core order, outside the pool lock.

    Events are appended under the pool's lock (``push``) and delivered by ``flush`` after it is
    released. One thread delivers at a time; a flush that finds another thread delivering (its
    own events may be among those) waits for it, so that when a pool call returns every event it
    caused has been delivered. A listener that calls back into the pool (re-entering ``flush``)
    leaves delivery to the outer loop.
    """

    __slots__ = ("_delivering", "_held", "_listeners", "_local", "_lock", "_queue", "_warn")

    def __init__(
        self, listeners: tuple[Listener, ...], *, warn_connects_failing: bool = True
    ) -> None:
        self._listeners = listeners
        #: ``PoolOptions.warn_connects_failing``: whether ``ConnectFailingEvent`` is warned of
        self._warn = warn_connects_failing
        self._queue: deque[PoolEvent] = deque()
        self._lock = threading.Lock()
        self._local = threading.local()
        #: a thread holds ``_lock`` and may be delivering events it took off the queue
        self._delivering = False
        #: while a builder's first checkout runs (:meth:`hold`): the events of ``HELD`` kinds
        #: delivered to listeners but not yet logged
        self._held: list[PoolEvent] | None = None

    @property
    def listeners(self) -> tuple[Listener, ...]:
        return self._listeners

    def observed(self) -> bool:
        """Whether anyone observes the pool now: a listener, or DEBUG logging on. The pools ask
        only here (``PoolBase._input``); their fast paths run only where the cheaper test
        ``_quick and log._cached_level(10) is False`` already proves the answer false."""
        return bool(self._listeners) or (_log._cached_level(10) is not False and _log.enabled())

    def push(self, events: list[PoolEvent]) -> None:
        self._queue.extend(events)

    def flush(self) -> None:
        queue = self._queue
        # (the queue first: an event of ours gone from it was taken by a thread that set
        # ``_delivering`` before, and clears it only once the event is delivered)
        if not queue and not self._delivering:
            return
        local = self._local
        if getattr(local, "busy", False):
            return
        with self._lock:  # waits for a thread delivering our events
            self._delivering = True
            local.busy = True
            try:
                listeners = self._listeners
                while queue:
                    try:
                        event = queue.popleft()
                    except IndexError:
                        break
                    deliver(listeners, event)
                    held = self._held
                    if held is not None and type(event) in HELD:
                        held.append(event)
                    else:
                        _log.log_event(event, warn_connects_failing=self._warn)
            finally:
                local.busy = False
                self._delivering = False

    def hold(self) -> None:
        """Hold the log lines of the ``HELD`` events from now (listeners still get them)."""
        with self._lock:
            self._held = []

    def unhold(self, *, say: bool) -> None:
        """Stop holding; log what was held if ``say``, else drop it."""
        self.flush()  # (what was pushed before is delivered under the hold)
        with self._lock:
            held, self._held = self._held, None
            if say and held:
                for event in held:
                    _log.log_event(event, warn_connects_failing=self._warn)

    def reinit_after_fork(self) -> None:
        self._held = None
        self._lock = threading.Lock()
        self._local = threading.local()
        self._delivering = False


# ---------------------------------------------------------------------- fork

_pools: weakref.WeakSet[Any] = weakref.WeakSet()


def register_for_fork(pool: Any) -> None:
    """Have ``pool._reset_after_fork()`` called in the child after every ``os.fork()``."""
    _pools.add(pool)


def _after_fork_in_child() -> None:
    for pool in list(_pools):
        pool._reset_after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


_INF: Final = float("inf")


def check_timeout(timeout: Any, what: str = "checkout(timeout=...)") -> float:
    """Validate a per-call timeout: seconds (float or timedelta) >= 0."""
    if timeout.__class__ is float:  # (the usual cases, at once)
        if 0.0 <= timeout < _INF:
            return timeout
    elif timeout.__class__ is int and timeout >= 0:  # (SQLAlchemy's QueuePool waits the int 30;
        return float(timeout)  # not a bool)
    if isinstance(timeout, timedelta):
        timeout = timeout.total_seconds()
    if (
        isinstance(timeout, bool)
        or not isinstance(timeout, int | float)
        or timeout != timeout
        or timeout < 0
        or timeout == _INF
    ):
        raise ValueError(f"{what} must be seconds >= 0 (or None for no limit), got {timeout!r}")
    return float(timeout)


_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def checkout_stack() -> str:
    """Where the caller's code checked out a lease: the current stack, poolkit's frames left
    out (for leak reports)."""
    frames = [f for f in traceback.extract_stack() if not f.filename.startswith(_PACKAGE_DIR)]
    return "".join(traceback.format_list(frames))


def call_close(connection: Any, *, prefer_aclose: bool = False) -> Any:
    """Close ``connection`` and return what its close method returned (maybe an awaitable).

    With ``prefer_aclose`` (``AsyncPool``) its ``aclose()`` is called when it has one (redis-py
    5 deprecates ``close()`` for it, as asyncio streams and httpx do), else ``close()``."""
    close: Callable[[], Any] | None = None
    if prefer_aclose:
        close = getattr(connection, "aclose", None)
    if close is None:
        close = getattr(connection, "close", None)
        if close is None:
            return None
    return close()
