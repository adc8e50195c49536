"""Connection and request records of the pure core, and the connection state machine.

Rules of this module
--------------------
* A connection's lifecycle is the explicit enum :class:`ConnState`, and its state machine is one
  table, ``STEPS``, declared here once: ``STEPS[state][input]`` is ``(new state, whether a state
  counter changes)``, or ``None`` for a pair the machine does not have. Nothing else holds the
  table, and everything that moves a connection reads it: ``ConnectionLife.fire`` looks each
  pair up there (a ``None`` is a bug in the core and raises :class:`InvalidTransition`), and the
  tests check that lookup. Outside ``fire``, ``Conn.state`` is assigned only on the core's fast
  paths (checkout and check-in in ``handout``), and only with the two results ``handout`` reads
  from ``STEPS`` at import (``_IDLE_LEASE``, ``_LEASED_IDLE``), which change no counter.
* Roles, stream capacity and service ids are fields of the record, never positions in a list.
* Records hold no I/O objects the core looks at: ``connection`` and ``handle`` are opaque
  values the front ends put there and read back.
* Nothing here knows about clocks, threads, asyncio or events.
"""

from __future__ import annotations

import enum
from typing import Any, Final, final

from ..stats import PoolState


class ConnState(enum.IntEnum):
    """Where a connection is in its life. (Ints, so that tables index by them cheaply.)"""

    CONNECTING = 0  #: being established (CMAP "pending")
    BACKING_OFF = 1  #: waiting to retry a failed connect
    IDLE = 2  #: established, no stream in use (CMAP "available")
    LEASED = 3  #: established, at least one stream in use (CMAP "in use")
    DRAINING = 4  #: will close once its last lease is returned
    CLOSED = 5  #: gone; counts in nothing
    CHECKING = 6  #: ``Hooks.check`` runs on it before it is handed out (neither available nor used)
    RESETTING = 7  #: ``Hooks.reset`` runs on it after its check-in (neither available nor used)


class ConnInput(enum.IntEnum):
    """What can happen to a connection."""

    ESTABLISHED = 0
    CONNECT_FAILED = 1
    RETRY = 2  #: a backing-off slot's retry starts
    LEASE = 3
    RELEASE = 4  #: a lease came back and others remain
    RELEASE_LAST = 5  #: the last lease came back
    WILL_CLOSE = 6
    CLOSE = 7
    CHECK = 8  #: an available connection's check starts
    CHECKED = 9  #: its check passed
    RESET = 10  #: a connection back from its last lease goes to be reset
    RESET_DONE = 11  #: its reset passed


#: the close reason of a record the pool forgot in a forked child (never announced: the
#: connection is the parent's and stays open)
FORGOTTEN_AT_FORK: Final = "forgotten at fork"


class Role(enum.Enum):
    """Why the pool keeps a connection (the generic-pool proposal's three kinds)."""

    KEPT = "kept"  #: one of the min_size connections: never closed for idleness
    DEMAND = "demand"  #: made for demand up to the soft limit; closed after max idle time
    OVERFLOW = "overflow"  #: above the soft limit; closed as soon as it is idle


class InvalidTransition(RuntimeError):
    """The core asked for a state change its table does not allow (a poolkit bug)."""

    def __init__(self, conn_id: int, state: ConnState, event: ConnInput) -> None:
        super().__init__(
            f"connection {conn_id}: no transition from {state.value!r} on {event.value!r}"
        )
        self.connection_id = conn_id
        self.state = state
        self.input = event


_S = ConnState
_I = ConnInput

#: States whose number the core keeps in a counter. The others are derived: available is the
#: length of the idle stack, leased is what remains of the total.
COUNTED: Final[frozenset[ConnState]] = frozenset(
    {
        ConnState.CONNECTING,
        ConnState.BACKING_OFF,
        ConnState.DRAINING,
        ConnState.CLOSED,
        ConnState.CHECKING,
        ConnState.RESETTING,
    }
)

#: A step of the state machine: the new state, and whether a state counter changes (``COUNTED``).
Step = tuple[ConnState, bool]


def _dense(
    moves: dict[tuple[ConnState, ConnInput], ConnState],
) -> tuple[tuple[Step | None, ...], ...]:
    """The table ``moves`` declares, indexed ``[state][input]`` (the enums are ints): each move
    with whether it changes a counter, ``None`` where no move is declared. Run once, below."""
    return tuple(
        tuple(
            None
            if (new := moves.get((state, event))) is None
            else (new, new is not state and (state in COUNTED or new in COUNTED))
            for event in ConnInput
        )
        for state in ConnState
    )


#: The whole per-connection state machine, the one table the core runs: ``STEPS[state][input]``
#: is ``(new state, whether a counter changes)``, ``None`` where the move is impossible. Declared
#: as the moves below (anything absent is impossible), laid out dense for the hot paths' lookup.
STEPS: Final = _dense(
    {
        (_S.CONNECTING, _I.ESTABLISHED): _S.IDLE,
        (_S.CONNECTING, _I.CONNECT_FAILED): _S.CLOSED,
        (_S.CONNECTING, _I.CLOSE): _S.CLOSED,
        # A backing-off record is a slot the pool holds for its next connect attempt
        # (connect_retry): born in BACKING_OFF, it becomes CONNECTING when its retry starts.
        (_S.BACKING_OFF, _I.RETRY): _S.CONNECTING,
        (_S.BACKING_OFF, _I.CLOSE): _S.CLOSED,
        (_S.IDLE, _I.LEASE): _S.LEASED,
        (_S.IDLE, _I.WILL_CLOSE): _S.CLOSED,
        (_S.IDLE, _I.CLOSE): _S.CLOSED,
        (_S.LEASED, _I.LEASE): _S.LEASED,
        (_S.LEASED, _I.RELEASE): _S.LEASED,
        (_S.LEASED, _I.RELEASE_LAST): _S.IDLE,
        (_S.LEASED, _I.WILL_CLOSE): _S.DRAINING,
        (_S.LEASED, _I.CLOSE): _S.CLOSED,
        (_S.DRAINING, _I.RELEASE): _S.DRAINING,
        (_S.DRAINING, _I.RELEASE_LAST): _S.CLOSED,
        (_S.DRAINING, _I.CLOSE): _S.CLOSED,
        # A connection the pool already closed (interrupted by a clear, or closed by the pool while
        # its lease was out) may still see its leases come back.
        (_S.CLOSED, _I.RELEASE): _S.CLOSED,
        (_S.CLOSED, _I.RELEASE_LAST): _S.CLOSED,
        # Hooks (``PoolOptions.hooks``): a check before an available connection is handed out, a
        # reset after its last lease came back (from IDLE: the check-in makes it idle first). A
        # failed check or reset, a will-close notice or the pool's close closes it.
        (_S.IDLE, _I.CHECK): _S.CHECKING,
        (_S.CHECKING, _I.CHECKED): _S.IDLE,
        (_S.CHECKING, _I.WILL_CLOSE): _S.CLOSED,
        (_S.CHECKING, _I.CLOSE): _S.CLOSED,
        (_S.IDLE, _I.RESET): _S.RESETTING,
        (_S.RESETTING, _I.RESET_DONE): _S.IDLE,
        (_S.RESETTING, _I.WILL_CLOSE): _S.CLOSED,
        (_S.RESETTING, _I.CLOSE): _S.CLOSED,
    }
)


@final
class Conn:
    """The core's record of one connection."""

    __slots__ = (
        "abandoned",
        "close_reason",
        "connection",
        "created_at",
        "dirty",
        "expires",
        "gate",
        "generation",
        "handle",
        "hook_started",
        "hook_timer",
        "id",
        "idle_since",
        "ka_timer",
        "leased_at",
        "max_streams",
        "probe_started",
        "role",
        "service_id",
        "state",
        "streams",
    )

    def __init__(
        self,
        conn_id: int,
        generation: int,
        role: Role,
        now: float,
        state: ConnState = ConnState.CONNECTING,
    ) -> None:
        self.id: Final = conn_id
        #: the pool's generation (or the service's, once known) when the connection was made
        self.generation = generation
        self.service_id: Any = None
        self.state = state
        self.role = role
        self.max_streams = 1
        self.streams = 0  #: streams in use (leases out)
        self.connection: Any = None  #: the object the connect function returned
        self.handle: Any = None  #: the front end's own data (connect context, task)
        self.created_at = now
        self.idle_since = now
        #: when its last checkout was served (an adaptive pool's operation time starts there)
        self.leased_at = now
        #: when ``max_lifetime`` retires it (``inf``: never)
        self.expires = float("inf")
        #: what the core's fast paths compare with the pool's gate values: the generation while
        #: the connection is plain, ``_NO_GATE`` otherwise ("Gates" in ``handout`` says it all).
        #: Kept by ``regate`` (below) whenever generation, role, streams or state change.
        self.gate = generation
        self.close_reason: str | None = None
        #: a lease's stream came back while others were out (a multiplexed connection): the
        #: session may have changed, so the last stream back resets it even if a keep-alive
        #: probe's (which alone is no use)
        self.dirty = False
        #: closed while its connect function runs: counted against the limits until it returns
        self.abandoned = False
        #: keep-alive: while idle, the timer of its next probe; while probed, the probe's timeout
        self.ka_timer: Any = None
        #: when the keep-alive probe in flight started (it holds one stream); ``None``: no probe
        self.probe_started: float | None = None
        #: when the check or reset running on it started (``Hooks``); ``None``: none runs
        self.hook_started: float | None = None
        #: the timeout of that check or reset, if ``Hooks.timeout`` is set
        self.hook_timer: Any = None

    def __repr__(self) -> str:
        return f"<Conn {self.id} {self.state.name} gen={self.generation} streams={self.streams}>"


class RequestState(enum.Enum):
    WAITING = "waiting"
    SERVED = "served"
    FAILED = "failed"
    CANCELLED = "cancelled"


@final
class Request:
    """One checkout: created by a front end, queued and completed by the core.

    When the core completes it, exactly one of ``conn`` (served) and ``error`` (failed) is set and
    ``state`` leaves WAITING for good.
    """

    __slots__ = ("conn", "deadline", "error", "heaped", "owner", "queued", "started", "state")

    def __init__(self, started: float, deadline: float | None, owner: Any = None) -> None:
        self.started = started
        self.deadline = deadline
        self.state = RequestState.WAITING
        self.conn: Conn | None = None
        self.error: BaseException | None = None
        #: the front end's waiter (a future, a lock, a user request object)
        self.owner = owner
        self.queued = False
        #: its deadline has an entry of its own in the timer heap (queued out of line: ``waiters``)
        self.heaped = False

    def __repr__(self) -> str:
        return f"<Request {self.state.value} started={self.started} deadline={self.deadline}>"


@final
class Hold:
    """A lease the pool watches for leaks (``leak_timeout``): made by the front end at checkout
    with the stack where it happened (text, opaque to the core)."""

    __slots__ = ("conn", "done", "since", "stack")

    def __init__(self, conn: Conn, since: float, stack: str) -> None:
        self.conn = conn
        self.since = since
        self.stack = stack
        #: given back (released, discarded) or reported as garbage-collected: watched no more
        self.done = False

    def __repr__(self) -> str:
        return f"<Hold conn={self.conn.id} since={self.since} done={self.done}>"


# ---------------------------------------------------------------------- aliases for the core
# The enum members the core's modules compare with, as module globals (a global load is cheaper
# than a global plus an attribute load on the hot paths). Declared here once; the core's modules
# import them.

_READY: Final = PoolState.READY
_PAUSED: Final = PoolState.PAUSED
_CLOSED: Final = PoolState.CLOSED
_WAITING: Final = RequestState.WAITING
_SERVED: Final = RequestState.SERVED
_CONNECTING: Final = ConnState.CONNECTING
_BACKING_OFF: Final = ConnState.BACKING_OFF
_IDLE: Final = ConnState.IDLE
_LEASED: Final = ConnState.LEASED
_DRAINING: Final = ConnState.DRAINING
_S_CLOSED: Final = ConnState.CLOSED
_CHECKING: Final = ConnState.CHECKING
_RESETTING: Final = ConnState.RESETTING
_KEPT: Final = Role.KEPT
_DEMAND: Final = Role.DEMAND
_OVERFLOW: Final = Role.OVERFLOW
_LEASE: Final = ConnInput.LEASE
_RELEASE: Final = ConnInput.RELEASE
_RELEASE_LAST: Final = ConnInput.RELEASE_LAST
#: a connection's gate that no fast path matches (see "Gates" in ``handout``)
_NO_GATE: Final = -2


def regate(conn: Conn) -> None:
    """Refresh ``conn.gate`` after its generation, role, stream limit or state changed (see
    "Gates" in ``handout``): its generation while it is plain, else ``_NO_GATE``."""
    plain = (
        conn.max_streams == 1
        and conn.streams <= 1  # (a limit lowered to 1 under two leases: not yet)
        and conn.role is not _OVERFLOW
        and conn.state is not _DRAINING
        and conn.state is not _S_CLOSED
    )
    conn.gate = conn.generation if plain else _NO_GATE
