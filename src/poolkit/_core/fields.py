"""The fields of a pool core, declared once for the classes that make up
:class:`~poolkit._core.pool.PoolCore`.

``PoolCore`` is one class built on three others (all on :class:`CoreFields`), each in a module
of its own so that each module has one concern: ``ConnectionLife`` (``connection_life``: a
connection made, given a role, closed) under ``Health`` (``health``: connect results,
keep-alive, what a connection says of itself, leaks) under ``Lifecycle`` (``lifecycle``:
ready, clear, close, fork, timers, failing requests) under ``PoolCore`` (``pool``: checkout,
check-in, hand-off). They share the fields below; the state that has rules of its own lives in
collaborators that own it (``WaitQueue``, ``IdleSet``, ``ConnectFailures``, ``Probes``,
``LeakWatch``, ``Roles``, ``Tally``, ``TimerHeap``).

Rules of this module
--------------------
* Declarations only: ``PoolCore.__init__`` sets every field, and no code runs here.
* The methods a lower class calls on a higher one are declared at the end, for the type checker
  only; their one definition is in the class named beside each.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..events import PoolEvent
from ..options import PoolOptions
from ..stats import PoolState, PoolStats
from .actions import Action
from .failures import ConnectFailures
from .hooks import HookRuns
from .idle import IdleSet
from .keepalive import Probes
from .leaks import LeakWatch
from .records import Conn, Request
from .roles import Roles
from .tally import Tally
from .timers import TimerEntry, TimerHeap
from .waiters import WaitQueue


class CoreFields:
    """What a pool core holds (see ``PoolCore.__init__`` for what each field means)."""

    # Slots: every attribute read on the hot paths is a slot read (without slots, an instance
    # with more than 30 attributes gets a plain dict in CPython 3.11, and slower lookups).
    __slots__ = (
        "_abandoned",
        "_background",
        "_check_after",
        "_counts",
        "_idle",
        "_lb",
        "_lease_gen",
        "_lifetime",
        "_max_idle",
        "_max_size",
        "_max_waiting",
        "_next_id",
        "_open",
        "_quick_gen",
        "_rand",
        "_release_gen",
        "_waiters",
        "actions",
        "address",
        "checkouts",
        "clear_cause",
        "clocked",
        "conns",
        "events",
        "failures",
        "generation",
        "hooks",
        "idle_set",
        "leaks",
        "observed",
        "options",
        "probes",
        "roles",
        "service_generations",
        "state",
        "tally",
        "timers",
        "wait_queue",
    )

    options: PoolOptions
    address: str
    observed: bool
    clocked: bool
    state: PoolState
    generation: int
    _lease_gen: int
    _release_gen: int
    _quick_gen: int
    _lb: bool
    _max_idle: float | None
    _max_size: int
    _lifetime: float | None
    _max_waiting: int
    _rand: Callable[[], float]
    tally: Tally
    checkouts: int
    service_generations: dict[Any, list[int]]
    conns: dict[int, Conn]
    _counts: list[int]
    _abandoned: int
    _next_id: int
    clear_cause: BaseException | None
    timers: TimerHeap
    _background: TimerEntry | None
    wait_queue: WaitQueue
    _waiters: OrderedDict[Request, None]
    idle_set: IdleSet
    _idle: deque[Conn]
    _open: dict[Conn, None]
    failures: ConnectFailures
    probes: Probes
    roles: Roles
    leaks: LeakWatch
    hooks: HookRuns
    _check_after: float | None
    actions: list[Action]
    events: list[PoolEvent]

    if TYPE_CHECKING:
        # PoolCore's (pool)
        def _set_state(self, state: PoolState, generation: int) -> None: ...
        def stats(self) -> PoolStats: ...
        def _serve(self, req: Request, conn: Conn, now: float) -> None: ...
        def _lease(self, conn: Conn) -> None: ...
        def _give_back(
            self, conn: Conn, now: float, idle_since: float, *, used: bool = True
        ) -> bool: ...
        def _dispatch(self, now: float) -> None: ...
        def discard(self, conn: Conn, now: float, error: BaseException | None = None) -> None: ...

        # Lifecycle's (lifecycle)
        def _push_idle(self, conn: Conn, now: float) -> None: ...
        def _fail(self, req: Request, error: BaseException, reason: str, now: float) -> None: ...
        def _fail_all_waiters(self, now: float, make_error: Any, reason: str) -> None: ...
