"""What one pool core knows, shared by its collaborators: :class:`CoreState`.

:class:`~poolkit._core.pool.PoolCore` is a facade over collaborators, each in a module of its own
with one concern, built in this order and each holding only the ones below it:

* ``CoreState`` (here): the pool's fields, its output (``actions``, ``events``) and the
  collaborators that own state with rules of its own (``WaitQueue``, ``IdleSet``,
  ``ConnectFailures``, ``Probes``, ``LeakWatch``, ``Roles``, ``Tally``, ``HookRuns``,
  ``TimerHeap``);
* ``ConnectionLife`` (``connection_life``): a connection made, given a role, moved through its
  states, closed;
* ``Handout`` (``handout``): checkout, check-in, hand-off to waiters, failing requests, the pool's
  state and the gates of the fast paths;
* ``Health`` (``health``): connect results, keep-alive, checks and resets, what a connection says
  of itself, leaked leases;
* ``Lifecycle`` (``lifecycle``): ready, clear, close, fork, and the timers.

No collaborator calls one above it: a call goes down the list, never up.

Rules of this module
--------------------
* Declarations and what only reads them: no decision is taken here. Every field is set in
  ``__init__``; the containers (``conns``, ``counts``, ``actions``, ``events`` and the
  collaborators' own) are never replaced, only changed in place, so that a collaborator may keep
  a reference to one (``Handout`` does, on its fast paths).
* Who writes a field is said beside it; everyone may read it.
* ``take`` hands the output over in new lists: what the front end takes is its own for good.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, assert_never

from ..events import PoolEvent
from ..options import PoolOptions
from ..stats import PoolState
from .actions import Action
from .adaptive import AdaptiveLimit
from .failures import ConnectFailures
from .hooks import HookRuns
from .idle import IdleSet
from .keepalive import Probes
from .leaks import LeakWatch
from .records import _CONNECTING, Conn, ConnState, regate
from .roles import Roles
from .tally import Tally
from .timers import TimerEntry, TimerHeap, TimerKind
from .waiters import WaitQueue


class CoreState:
    """The state of one pool, read by all its collaborators."""

    # Slots: every attribute read on the hot paths is a slot read.
    __slots__ = (
        "abandoned",
        "actions",
        "adaptive",
        "address",
        "background",
        "check_after",
        "clear_cause",
        "clocked",
        "conns",
        "counts",
        "events",
        "expected_streams",
        "failures",
        "fifo",
        "generation",
        "hooks",
        "idle_set",
        "lb",
        "leaks",
        "lifetime",
        "max_idle",
        "max_waiting",
        "next_id",
        "observed",
        "options",
        "probes",
        "rand",
        "roles",
        "service_generations",
        "size_limit",
        "state",
        "tally",
        "timers",
        "wait_queue",
    )

    def __init__(
        self,
        options: PoolOptions,
        address: str,
        *,
        observed: bool,
        rand: Callable[[], float],
    ) -> None:
        #: the options in force (``Lifecycle.resize`` replaces them, with ``size_limit``)
        self.options = options
        self.address = address
        #: whether events are built (the front end sets it as listeners come and go)
        self.observed = observed
        self.lb = options.load_balanced
        self.max_idle = options.max_idle_time
        #: ``max_size``; 0 is no limit (``Lifecycle.resize`` changes it)
        self.size_limit: int = options.max_size or 1 << 62
        self.lifetime = options.max_lifetime
        self.max_waiting = options.max_waiting
        #: ``idle_order="fifo"``: checkouts take the longest parked available connection (the
        #: left end of ``IdleSet.stack``) instead of the most recently used (its right end)
        self.fifo = options.idle_order == "fifo"
        #: the checkouts a connect in flight is counted to serve (``PoolOptions.expected_streams``;
        #: then the stream limit of the last connection made: ``Health.connected``)
        self.expected_streams = options.expected_streams
        #: ``max_lifetime``'s jitter: a uniform draw in [0, 1) (an input, like the time)
        self.rand = rand
        #: the pool's state and generation (``Handout.set_state`` writes them, with the gates)
        self.state: PoolState = PoolState.PAUSED
        self.generation = 0
        self.tally = Tally()  #: cumulative counts (``stats``)
        #: load-balanced mode: service id -> [generation, connection count]
        self.service_generations: dict[Any, list[int]] = {}
        #: every connection not closed, by id (``ConnectionLife``)
        self.conns: dict[int, Conn] = {}
        #: connections per state, indexed by state (``ConnectionLife.fire`` and ``new_record``)
        self.counts = [0] * len(ConnState)
        #: connects given up on whose function has not returned (they count against the limits)
        self.abandoned = 0
        self.next_id = 1  #: the id of the next record (``ConnectionLife.new_record``)
        self.clear_cause: BaseException | None = None  #: what the last clear said (``Lifecycle``)
        self.timers = TimerHeap(self.timer_is_live)
        self.background: TimerEntry | None = None  #: the one live BACKGROUND timer (``Lifecycle``)
        self.wait_queue = WaitQueue(self.timers)
        self.idle_set = IdleSet(self.timers, options.max_idle_time, self.fifo)
        self.failures = ConnectFailures(options.connect_retry, rand, address)
        self.probes = Probes(self.timers, options.keep_alive)
        self.hooks = HookRuns(self.timers, options.hooks)
        self.leaks = LeakWatch(self.timers, options.leak_timeout, address)
        #: ``HookRuns.check_after``, read on the checkout paths
        self.check_after = self.hooks.check_after
        #: whether a checkout reads ``now``; when false a front end may pass 0.0 to
        #: ``lease_idle`` and skip the clock (it only closes perished connections, and starts
        #: nothing, on that path). Every other input needs the real time: a check-in, say, may
        #: start a connect.
        self.clocked = (
            options.max_idle_time is not None
            or options.max_lifetime is not None
            or options.keep_alive is not None
            or self.check_after is not None  # (idle times decide the checks)
            or options.adaptive is not None  # (a checkout's time starts its operation's)
        )
        #: the limit on connections in use, when the pool finds it (``PoolOptions.adaptive``)
        self.adaptive: AdaptiveLimit | None = None
        if options.adaptive is not None:
            floor = min(max(options.min_size, 1), self.size_limit)
            self.adaptive = AdaptiveLimit(
                floor,
                self.size_limit,
                options.adaptive,
                initial=max(floor, options.max_connecting),
            )
        soft = options.soft_max_size
        self.roles = Roles(options.min_size, self.size_limit if soft is None else soft, regate)
        #: what the front end must do and what listeners must see (``take``)
        self.actions: list[Action] = []
        self.events: list[PoolEvent] = []

    def take(self) -> tuple[list[Action], list[PoolEvent]]:
        """Hand the pending actions and events to the front end, in lists of its own.

        The lists returned are the front end's for good: the core never appends to them (a
        threaded front end carries them out after releasing its lock, while another thread may
        already be feeding the core; handing it the core's own list once let two threads carry
        out the same actions)."""
        actions = self.actions
        events = self.events
        taken = actions.copy(), events.copy()
        actions.clear()
        events.clear()
        return taken

    def connect_cap(self) -> int:
        """The most connections the pool makes: ``max_size``, or an adaptive pool's limit (it
        makes no more than it lets be in use)."""
        adaptive = self.adaptive
        return self.size_limit if adaptive is None else adaptive.limit

    def timer_is_live(self, entry: TimerEntry) -> bool:
        """Whether ``entry`` still matters (the timer heap's ``is_live``): asked of its owner."""
        kind = entry.kind
        if kind is TimerKind.DEADLINE:
            return WaitQueue.timer_is_live(entry)
        if kind is TimerKind.WAIT_LINE:
            return entry is self.wait_queue.line
        if kind is TimerKind.IDLE_SWEEP:
            return entry is self.idle_set.sweep
        if kind is TimerKind.BACKGROUND:
            return entry is self.background
        if kind is TimerKind.CONNECT_TIMEOUT:
            conn: Conn = entry.target
            return conn.state is _CONNECTING
        if kind is TimerKind.LEAK:
            return LeakWatch.timer_is_live(entry)
        if kind is TimerKind.BACKOFF:
            return ConnectFailures.timer_is_live(entry)
        if kind is TimerKind.HOOK_TIMEOUT:
            return HookRuns.timer_is_live(entry)
        if kind is TimerKind.CONNECT_LOST:
            lost: Conn = entry.target
            return lost.abandoned
        if kind is TimerKind.KEEP_ALIVE or kind is TimerKind.PROBE_TIMEOUT:
            return Probes.timer_is_live(entry)
        assert_never(kind)  # (a new kind of timer is a type error until it is handled here)
