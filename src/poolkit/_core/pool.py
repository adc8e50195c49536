"""The pool's pure core: every decision, no I/O, no clock, no threads, no asyncio.

:class:`PoolCore` is what the front ends hold. It owns the pool's state (``state.CoreState``) and
the collaborators that decide, each in a module of its own (``state`` lists them and the order
they call each other in): a connection's life (``connection_life.ConnectionLife``), checkout,
check-in and hand-off (``handout.Handout``), connect results and health (``health.Health``), the
pool's lifecycle and timers (``lifecycle.Lifecycle``). It decides nothing itself: its inputs are
its collaborators' methods, and its views read the state.

Rules of this module
--------------------
* Each input (a checkout, a check-in, a connect result, a timer, clear, ready, close, cancel)
  takes ``now`` from its caller. It mutates the state and appends what the front end must do to
  ``actions`` and what listeners must see to ``events``; the front end takes both (``take``) and
  carries them out outside its lock. The rules of each input are those of the module that
  decides it.
* The inputs are the collaborators' bound methods, set once here: a front end's call costs what
  a method of this class would (no call in between), and the one definition of each input is in
  its collaborator.
* Views only read. What the front end takes is an input, named so: ``take``, which empties the
  output lists, and ``take_deadline``, which clears ``timers.dirty`` (the front end re-arms its
  timer with what it returns); and ``observed``'s setter says whether anyone observes the pool.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from ..events import PoolCreatedEvent
from ..options import PoolOptions
from ..stats import PoolState
from .connection_life import ConnectionLife
from .handout import Handout
from .health import Health
from .lifecycle import Lifecycle
from .records import (
    _CONNECTING,
    _DRAINING,
    _IDLE,
    _LEASED,
    _S_CLOSED,
    Conn,
    ConnState,
    Request,
)
from .state import CoreState


class PoolCore:
    """The state of one pool and the rules that change it."""

    __slots__ = (
        "actions",
        "address",
        "align_to_wall",
        "cancel",
        "check_done",
        "checked",
        "clear",
        "clocked",
        "close",
        "connect_failed",
        "connected",
        "conns",
        "discard",
        "events",
        "failures",
        "fire_timers",
        "handout",
        "health",
        "hold",
        "hooks",
        "idle_set",
        "keep_alive_done",
        "leaks",
        "lease_checking",
        "lease_collected",
        "lease_idle",
        "life",
        "lifecycle",
        "next_deadline",
        "note_wait",
        "options",
        "probes",
        "queue",
        "ready",
        "release",
        "release_idle",
        "request",
        "reset_after_fork",
        "reset_done",
        "roles",
        "service_generations",
        "set_max_streams",
        "shared",
        "stats",
        "take",
        "take_deadline",
        "tally",
        "timers",
        "unhold",
        "wait_queue",
        "will_close",
    )

    def __init__(
        self,
        options: PoolOptions,
        address: str,
        *,
        observed: bool = False,
        rand: Callable[[], float] = random.random,
    ) -> None:
        shared = self.shared = CoreState(options, address, observed=observed, rand=rand)
        life = self.life = ConnectionLife(shared)
        hand = self.handout = Handout(shared, life)
        health = self.health = Health(shared, life, hand)
        cycle = self.lifecycle = Lifecycle(shared, life, hand, health)
        # what the state holds and never replaces, for the front ends and diagnostics
        self.options = options
        self.address = address
        self.clocked = shared.clocked
        self.conns = shared.conns
        self.service_generations = shared.service_generations
        self.actions = shared.actions
        self.events = shared.events
        self.timers = shared.timers
        self.wait_queue = shared.wait_queue
        #: the waiting requests, oldest first (the wait queue's own deque: read it, never write)
        self.queue = shared.wait_queue.queue
        self.idle_set = shared.idle_set
        self.failures = shared.failures
        self.probes = shared.probes
        self.hooks = shared.hooks
        self.leaks = shared.leaks
        self.roles = shared.roles
        self.tally = shared.tally
        self.take = shared.take
        #: the earliest deadline, for the front end to arm its timer with; clears ``timers.dirty``
        self.take_deadline = shared.timers.take_deadline
        self.next_deadline = self.take_deadline  # the old name, until the front ends' rename
        # the inputs: checkout, check-in, hand-off
        self.lease_idle = hand.lease_idle
        self.request = hand.request
        self.cancel = hand.cancel
        self.release_idle = hand.release_idle
        self.note_wait = hand.note_wait
        self.release = hand.release
        self.discard = hand.discard
        self.stats = hand.stats
        # connect results, keep-alive, checks and resets, notices, leaks
        self.connected = health.connected
        self.connect_failed = health.connect_failed
        self.keep_alive_done = health.keep_alive_done
        self.check_done = health.check_done
        self.reset_done = health.reset_done
        self.lease_checking = health.lease_checking
        self.checked = health.checked
        self.will_close = health.will_close
        self.set_max_streams = health.set_max_streams
        self.hold = health.hold
        self.unhold = health.unhold
        self.lease_collected = health.lease_collected
        # the pool's life and its timers
        self.ready = cycle.ready
        self.clear = cycle.clear
        self.close = cycle.close
        self.reset_after_fork = cycle.reset_after_fork
        self.align_to_wall = cycle.align_to_wall
        self.fire_timers = cycle.fire_timers
        if observed:
            shared.events.append(PoolCreatedEvent(address=address, options=options.cmap_options()))

    # ------------------------------------------------------------------ views

    @property
    def observed(self) -> bool:
        """Whether events are built: the front end sets it before each input but the fast paths'
        (a listener, or DEBUG logging), as listeners come and go."""
        return self.shared.observed

    @observed.setter
    def observed(self, observed: bool) -> None:
        self.shared.observed = observed

    @property
    def state(self) -> PoolState:
        return self.shared.state

    @property
    def generation(self) -> int:
        return self.shared.generation

    @property
    def checkouts(self) -> int:
        """Checkouts served, ever."""
        return self.handout.checkouts

    @property
    def clear_cause(self) -> BaseException | None:
        return self.shared.clear_cause

    @property
    def total(self) -> int:
        return len(self.conns)

    @property
    def available(self) -> int:
        return len(self.idle_set.stack)

    @property
    def pending(self) -> int:
        return self.shared.counts[_CONNECTING]

    @property
    def in_use(self) -> int:
        return self.handout.in_use

    @property
    def waiting(self) -> int:
        return len(self.wait_queue.queue)

    def count(self, state: ConnState) -> int:
        """Connections in ``state`` (closed ones are not kept: 0)."""
        if state is _IDLE:
            return len(self.idle_set.stack)
        if state is _LEASED:
            return self.handout.in_use - self.shared.counts[_DRAINING]
        if state is _S_CLOSED:
            return 0
        return self.shared.counts[state]

    def waiters(self) -> list[Request]:
        """The waiting requests, oldest first (for tests and diagnostics)."""
        return list(self.wait_queue.queue)

    def idle_connections(self) -> list[Conn]:
        """Available connections, longest parked first (for tests and diagnostics)."""
        return list(self.idle_set.stack)
