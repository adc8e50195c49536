"""The load-balanced topology: what Server Discovery and Monitoring (SDAM) is for a client given
``loadBalanced=true`` (the "Load Balancer Support" spec, its "Server Discovery Logging and
Monitoring" section).

There is nothing to discover: the topology is ``LoadBalanced`` from the start and stays so, with
one server, of type ``LoadBalancer``, at the load balancer's address, every other field of its
description unset. What remains are the SDAM events a driver's users observe, which the spec
fixes. On :meth:`LoadBalancedTopology.open`, in this order:

1. :class:`TopologyOpeningEvent`;
2. :class:`TopologyDescriptionChangedEvent`: ``Unknown`` with no servers → ``LoadBalanced`` with
   one server of type ``Unknown``;
3. :class:`ServerOpeningEvent` (the load balancer's address);
4. :class:`ServerDescriptionChangedEvent`: ``Unknown`` → ``LoadBalancer``;
5. :class:`TopologyDescriptionChangedEvent`: → ``LoadBalanced`` with the ``LoadBalancer`` server.

On :meth:`~LoadBalancedTopology.close`: :class:`ServerClosedEvent`, then
:class:`TopologyDescriptionChangedEvent` (→ ``Unknown`` with no servers), then
:class:`TopologyClosedEvent`. No other event, ever.

Rules of this module
--------------------
* No I/O, no thread, no task, no timer: the spec forbids a monitoring connection in this mode,
  so there is no monitor at all (``monitors_started`` is 0). The address is never resolved;
  ``open()`` succeeds whether or not anything listens there.
* Every description is a frozen value; a change replaces the topology's description whole, and
  the events carry the descriptions before and after it.
* The lifecycle is new → open → closed, one way. ``open()`` on an open topology and ``close()``
  on a closed one do nothing; ``open()`` (and ``select_server()``) on a closed one raise
  :class:`TopologyClosedError`; ``close()`` on one never opened closes it without an event (no
  ``TopologyOpeningEvent`` went before). ``select_server()`` on a new topology opens it, as a
  driver's first operation does.
* Listeners are called outside the state lock, in the order the events were made, one event to
  all listeners before the next; when ``open()`` or ``close()`` returns, every event it made has
  been delivered. A listener that calls back into the topology (``close()`` from an open event)
  leaves delivery to the outer loop, so its events follow the ones already made. A listener that
  raises is logged on ``poolkit.events`` and never breaks the topology (the pool's rule).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import uuid
from collections import deque
from collections.abc import Iterable, Sequence
from typing import Final, Protocol

from ..errors import PoolError
from .sdam_events import (
    SdamEvent,
    SdamListener,
    ServerClosedEvent,
    ServerDescription,
    ServerDescriptionChangedEvent,
    ServerOpeningEvent,
    ServerType,
    TopologyClosedEvent,
    TopologyDescription,
    TopologyDescriptionChangedEvent,
    TopologyOpeningEvent,
    TopologyType,
)

__all__ = [
    "DEFAULT_PORT",
    "LoadBalancedTopology",
    "LoadBalancedURI",
    "TopologyClosedError",
    "normalize_address",
]

DEFAULT_PORT: Final = 27017

_log = logging.getLogger("poolkit.events")


class _Sink:
    """Delivers events in the order they were pushed, one thread at a time (see the rules)."""

    __slots__ = ("_listeners", "_local", "_lock", "_queue")

    def __init__(self, listeners: tuple[SdamListener, ...]) -> None:
        self._listeners = listeners
        self._queue: deque[SdamEvent] = deque()
        self._lock = threading.Lock()
        self._local = threading.local()

    def push(self, events: Iterable[SdamEvent]) -> None:
        self._queue.extend(events)

    def flush(self) -> None:
        local = self._local
        if getattr(local, "busy", False):  # a listener called back: the outer loop delivers
            return
        with self._lock:  # waits for a thread delivering (perhaps our events)
            local.busy = True
            try:
                while self._queue:
                    event = self._queue.popleft()
                    for listener in self._listeners:
                        try:
                            listener(event)
                        except Exception:
                            _log.exception(
                                "poolkit listener %r raised on %s", listener, type(event).__name__
                            )
            finally:
                local.busy = False


# ---------------------------------------------------------------------- the topology


class TopologyClosedError(PoolError):
    """An operation on a topology that was closed (it never reopens)."""

    def __init__(self, *, address: str, operation: str = "select a server from") -> None:
        super().__init__(f"Attempted to {operation} closed topology", address=address)
        self.operation = operation


class LoadBalancedURI(Protocol):
    """What :meth:`LoadBalancedTopology.from_uri` reads of a parsed URI (``parse_uri``'s
    ``MongoURI`` has both)."""

    @property
    def addresses(self) -> Sequence[str]: ...
    @property
    def load_balanced(self) -> bool: ...


def normalize_address(address: str) -> str:
    """``"host:port"`` with the host lower-cased and the port (default 27017) given: ``"A"`` →
    ``"a:27017"``, ``"[::1]"`` → ``"[::1]:27017"``. A Unix socket path (``/…`` or ``….sock``) is
    kept as it is. Raises ``ValueError`` for an address that is none."""
    if not isinstance(address, str):
        raise TypeError(f"address: expected a 'host[:port]' string, got {address!r}")
    if address.startswith("/") or address.endswith(".sock"):
        return address
    if address.startswith("["):
        end = address.find("]")
        host, rest = address[: end + 1], address[end + 1 :]
        if end < 2 or (rest and not rest.startswith(":")):
            raise ValueError(f"address: {address!r} is not '[ipv6]' or '[ipv6]:port'")
        port_text = rest[1:] if rest else None
    else:
        host, colon, port_text_or_empty = address.partition(":")
        if ":" in port_text_or_empty:
            raise ValueError(f"address: {address!r}: an IPv6 address needs brackets ('[::1]')")
        port_text = port_text_or_empty if colon else None
    if not host:
        raise ValueError(f"address: {address!r} has no host")
    if port_text is None:
        port = DEFAULT_PORT
    elif port_text.isascii() and port_text.isdigit() and 0 < int(port_text) < 65536:
        port = int(port_text)
    else:
        raise ValueError(f"address: {address!r}: the port must be an integer in 1..65535")
    return f"{host.lower()}:{port}"


def _new_topology_id() -> object:
    try:
        from bson import ObjectId
    except ImportError:  # (no pymongo: an id as unique, of the same form)
        return uuid.uuid4().hex[:24]
    return ObjectId()


_UNKNOWN_TOPOLOGY: Final = TopologyDescription(topology_type=TopologyType.Unknown)

_NEW, _OPEN, _CLOSED = "new", "open", "closed"


class LoadBalancedTopology:
    """The topology of a client given ``loadBalanced=true``: one load balancer at ``address``
    (``"host[:port]"``), no monitor. ``listeners``: callables taking each :class:`SdamEvent`
    (or :class:`TopologyListener` instances). Safe to use from any thread and from asyncio
    (nothing blocks but on the delivery of events).

    Use ``with LoadBalancedTopology(...) as topology:`` or :meth:`open` and :meth:`close`.
    """

    __slots__ = ("_address", "_description", "_lock", "_server", "_sink", "_state", "_topology_id")

    def __init__(self, address: str, *, listeners: Iterable[SdamListener] = ()) -> None:
        self._address = normalize_address(address)
        listener_tuple = tuple(listeners)
        for listener in listener_tuple:
            if not callable(listener):
                raise TypeError(
                    f"listeners: {listener!r} is not callable (a listener takes one event)"
                )
        self._sink = _Sink(listener_tuple)
        self._topology_id = _new_topology_id()
        self._lock = threading.Lock()
        self._state = _NEW
        self._description = _UNKNOWN_TOPOLOGY
        self._server = ServerDescription(address=self._address, server_type=ServerType.LoadBalancer)

    @classmethod
    def from_uri(
        cls, uri: LoadBalancedURI, *, listeners: Iterable[SdamListener] = ()
    ) -> LoadBalancedTopology:
        """The topology of a parsed URI that says ``loadBalanced=true`` and names one host
        (``ValueError`` otherwise)."""
        if not uri.load_balanced:
            raise ValueError("a load-balanced topology needs a URI with loadBalanced=true")
        if len(uri.addresses) != 1:
            raise ValueError(
                f"loadBalanced=true allows exactly one host, the URI names {len(uri.addresses)}"
            )
        return cls(uri.addresses[0], listeners=listeners)

    @property
    def address(self) -> str:
        """The load balancer's address, ``"host:port"``."""
        return self._address

    @property
    def topology_id(self) -> object:
        """The id every event of this topology carries."""
        return self._topology_id

    @property
    def description(self) -> TopologyDescription:
        """``Unknown`` with no servers until opened and once closed; ``LoadBalanced`` with the
        one ``LoadBalancer`` server while open."""
        return self._description

    @property
    def opened(self) -> bool:
        """Whether :meth:`open` ran (true after a close as well)."""
        return self._state != _NEW

    @property
    def closed(self) -> bool:
        return self._state == _CLOSED

    @property
    def monitors_started(self) -> int:
        """Server monitors started: always 0 (the spec forbids one in load-balanced mode)."""
        return 0

    def open(self) -> None:
        """Emit the five opening events (once). Raises :class:`TopologyClosedError` once
        closed."""
        self._open("open")

    def _open(self, operation: str) -> None:
        with self._lock:
            if self._state == _CLOSED:
                raise TopologyClosedError(address=self._address, operation=operation)
            if self._state == _NEW:
                self._state = _OPEN
                self._sink.push(self._opening_events())
        self._sink.flush()

    def close(self) -> None:
        """Emit the three closing events (once, and none if never opened). Idempotent."""
        with self._lock:
            if self._state == _OPEN:
                self._sink.push(self._closing_events())
            self._state = _CLOSED
            self._description = _UNKNOWN_TOPOLOGY
        self._sink.flush()

    def select_server(self) -> ServerDescription:
        """The load balancer's description, at once: in this mode it is always the one selected,
        for reads and writes alike. Opens a new topology; raises :class:`TopologyClosedError`
        once closed."""
        if self._state != _OPEN:
            self._open("select a server from")
        return self._server

    def _opening_events(self) -> list[SdamEvent]:
        tid, address = self._topology_id, self._address
        unknown_server = ServerDescription(address=address)
        discovering = TopologyDescription(
            topology_type=TopologyType.LoadBalanced, servers=(unknown_server,)
        )
        ready = dataclasses.replace(discovering, servers=(self._server,))
        self._description = ready
        return [
            TopologyOpeningEvent(topology_id=tid),
            TopologyDescriptionChangedEvent(
                topology_id=tid,
                previous_description=_UNKNOWN_TOPOLOGY,
                new_description=discovering,
            ),
            ServerOpeningEvent(topology_id=tid, address=address),
            ServerDescriptionChangedEvent(
                topology_id=tid,
                address=address,
                previous_description=unknown_server,
                new_description=self._server,
            ),
            TopologyDescriptionChangedEvent(
                topology_id=tid, previous_description=discovering, new_description=ready
            ),
        ]

    def _closing_events(self) -> list[SdamEvent]:
        tid = self._topology_id
        return [
            ServerClosedEvent(topology_id=tid, address=self._address),
            TopologyDescriptionChangedEvent(
                topology_id=tid,
                previous_description=self._description,
                new_description=_UNKNOWN_TOPOLOGY,
            ),
            TopologyClosedEvent(topology_id=tid),
        ]

    def __enter__(self) -> LoadBalancedTopology:
        self.open()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<LoadBalancedTopology {self._address} {self._state} id={self._topology_id}>"
