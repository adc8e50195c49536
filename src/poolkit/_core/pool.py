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
* The inputs are the collaborators' bound methods, set once here: a front end's call runs the
  collaborator's method with no frame in between, and the one definition of each input is in its
  collaborator. The four that every checkout and check-in calls (``lease_idle``, ``request``,
  ``release_idle``, ``note_waits``) are reached through ``fast`` instead, a port typed by
  ``FastPaths`` that is the hand-out itself: a method call, cheaper than a bound method read from
  a slot (see ``FastPaths``). Nothing else of a collaborator is reachable from here.
* Views only read. What the front end takes is an input, named so: ``take``, which empties the
  output lists, and ``take_deadline``, which clears ``timers.dirty`` (the front end re-arms its
  timer with what it returns); and ``observed``'s setter says whether anyone observes the pool.
* Every member is for the front ends (``src/poolkit``): none is here for tests or diagnostics
  alone. A test that reads the state itself reaches into it explicitly, through its own
  support module (``tests/support/core_view.py``), never through a view kept here for it.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Collection
from typing import Protocol

from ..events import PoolCreatedEvent
from ..options import PoolOptions
from ..stats import PoolState
from .connection_life import ConnectionLife
from .handout import Handout
from .health import Health
from .lifecycle import Lifecycle
from .records import Conn, Request
from .state import CoreState


class FastPaths(Protocol):
    """``PoolCore.fast``: the inputs of every checkout and check-in (``handout.Handout``'s, whose
    rules say what each does), called as methods. CPython runs a method call faster than a call
    of a bound method held in an attribute (which a slot of this class would be): on the hot
    paths the difference was 3-8 % of an uncontended checkout and check-in (measured), so these
    are reached through this port, and only these (``release_adapted``: an adaptive pool's
    check-in)."""

    def lease_idle(self, now: float) -> Conn | None: ...
    def request(self, req: Request, now: float) -> None: ...
    def release_idle(self, conn: Conn) -> Request | bool: ...
    def release_idle_clean(self, conn: Conn) -> Request | bool: ...
    def release_adapted(self, conn: Conn, now: float) -> Request | None: ...
    def note_waits(self, seconds: Collection[float]) -> None: ...


class PoolCore:
    """The state of one pool and the rules that change it."""

    __slots__ = (
        "_st",
        "actions",
        "align_to_wall",
        "cancel",
        "check_done",
        "checked",
        "clear",
        "client_lag",
        "client_load",
        "clocked",
        "close",
        "connect_failed",
        "connected",
        "discard",
        "events",
        "fast",
        "fire_timers",
        "hold",
        "idle",
        "keep_alive_done",
        "lease_checking",
        "lease_collected",
        "queue",
        "ready",
        "release",
        "reset_after_fork",
        "reset_done",
        "resize",
        "service_generations",
        "set_max_streams",
        "stats",
        "take",
        "take_deadline",
        "timers",
        "unhold",
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
        shared = self._st = CoreState(options, address, observed=observed, rand=rand)
        life = ConnectionLife(shared)
        hand = Handout(shared, life)
        health = Health(shared, life, hand)
        cycle = Lifecycle(shared, life, hand, health)
        # what the state holds and never replaces, for the front ends
        self.clocked = shared.clocked
        self.service_generations = shared.service_generations
        self.actions = shared.actions
        self.events = shared.events
        self.timers = shared.timers
        #: the waiting requests, oldest first (the wait queue's own deque: read it, never write)
        self.queue = shared.wait_queue.queue
        #: the available connections (the idle set's own deque: read it, never write)
        self.idle = shared.idle_set.stack
        self.take = shared.take
        #: the earliest deadline, for the front end to arm its timer with; clears ``timers.dirty``
        self.take_deadline = shared.timers.take_deadline
        # the inputs: checkout, check-in, hand-off
        #: the check-out and check-in inputs every checkout and check-in calls, as the methods of
        #: the collaborator that decides them (see ``FastPaths``)
        self.fast: FastPaths = hand
        self.cancel = hand.cancel
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
        self.resize = cycle.resize
        self.reset_after_fork = cycle.reset_after_fork
        self.align_to_wall = cycle.align_to_wall
        self.client_lag = cycle.client_lag
        self.client_load = cycle.client_load
        self.fire_timers = cycle.fire_timers
        if observed:
            shared.events.append(PoolCreatedEvent(address=address, options=options.cmap_options()))

    # ------------------------------------------------------------------ views

    @property
    def observed(self) -> bool:
        """Whether events are built: the front end sets it before each input but the fast paths'
        (a listener, or DEBUG logging), as listeners come and go."""
        return self._st.observed

    @observed.setter
    def observed(self, observed: bool) -> None:
        self._st.observed = observed

    @property
    def state(self) -> PoolState:
        return self._st.state

    @property
    def generation(self) -> int:
        return self._st.generation
