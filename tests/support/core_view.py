"""Test support: what the core's tests read of a :class:`~poolkit._core.PoolCore` beyond its
inputs, the output lists and ``stats()``.

``PoolCore`` shows only what the front ends use (issue 38, point 3): no view is kept on it for
tests. A test that checks the state itself reaches into it here, explicitly and in one place:

* :func:`state_of`: the core's ``CoreState`` (its private ``_st``), whose fields and
  collaborators (``conns``, ``counts``, ``failures``, ``idle_set``, ``roles``, ``hooks``...) a
  test reads as they are;
* :func:`handout_of`: the core's ``Handout``, the object whose bound methods its checkout inputs
  are (for the gates of the fast paths and ``in_use``);
* :func:`core_view`: the counts the core keeps only implicitly (connections per state, the
  waiting requests, the available connections), derived from that state as the core reads them.

Reading is all these do: nothing here changes the core.
"""

from __future__ import annotations

from poolkit._core import Conn, ConnState, PoolCore, Request
from poolkit._core.handout import Handout
from poolkit._core.state import CoreState


def state_of(core: PoolCore) -> CoreState:
    """The state ``core`` decides on (read it; write it only to set a test's scene)."""
    return core._st


def handout_of(core: PoolCore) -> Handout:
    """The ``Handout`` of ``core``: what its check-out and check-in port (``core.fast``) is."""
    hand = core.fast
    assert isinstance(hand, Handout)
    return hand


class CoreView:
    """The counts of one core, derived from its state each time they are read."""

    __slots__ = ("_hand", "_st")

    def __init__(self, core: PoolCore) -> None:
        self._st = state_of(core)
        self._hand = handout_of(core)

    @property
    def total(self) -> int:
        """Connections the pool holds (not closed)."""
        return len(self._st.conns)

    @property
    def available(self) -> int:
        return len(self._st.idle_set.stack)

    @property
    def pending(self) -> int:
        return self._st.counts[ConnState.CONNECTING]

    @property
    def in_use(self) -> int:
        """Connections leased or draining (``Handout.in_use``, which the adaptive limit reads)."""
        return self._hand.in_use

    @property
    def waiting(self) -> int:
        return len(self._st.wait_queue.queue)

    def count(self, state: ConnState) -> int:
        """Connections in ``state`` (closed ones are not kept: 0)."""
        if state is ConnState.IDLE:
            return len(self._st.idle_set.stack)
        if state is ConnState.LEASED:
            return self._hand.in_use - self._st.counts[ConnState.DRAINING]
        if state is ConnState.CLOSED:
            return 0
        return self._st.counts[state]

    def waiters(self) -> list[Request]:
        """The waiting requests, oldest first."""
        return list(self._st.wait_queue.queue)

    def idle_connections(self) -> list[Conn]:
        """Available connections, longest parked first."""
        return list(self._st.idle_set.stack)


def core_view(core: PoolCore) -> CoreView:
    """The implicit counts of ``core``, read now (see :class:`CoreView`)."""
    return CoreView(core)
