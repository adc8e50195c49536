"""The simulated server's settings (:class:`SimSettings`) and its counters (:class:`SimStats`).

Times are in seconds. A service time is either a fixed number or a distribution spec:

* ``0.01`` -- every request takes 10 ms;
* ``("exp", mean)`` -- exponentially distributed with that mean;
* ``("uniform", lo, hi)`` -- uniform between ``lo`` and ``hi``.

Draws (service times, dropped requests and connections) come from one ``random.Random(seed)``
per server, so a seeded run drops the same requests each time it sends the same sequence.

Rules of this module
--------------------
* Settings are checked when made: a bad value raises ValueError here, never in the server.
"""

from __future__ import annotations

import dataclasses
import math
import random

__all__ = ["ServiceTime", "SimChange", "SimSettings", "SimStats", "draw_service_time"]

ServiceTime = float | tuple[str, float] | tuple[str, float, float]
Window = tuple[float, float]


def _check_time(name: str, value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"SimSettings({name}=...) must be a number of seconds, got {value!r}")
    if not (math.isfinite(value) and value >= 0):
        raise ValueError(f"SimSettings({name}=...) must be finite and >= 0, got {value!r}")


def _check_service_time(spec: object) -> None:
    if not isinstance(spec, tuple):
        _check_time("service_time", spec)  # type: ignore[arg-type]  # (a number here)
        return
    if spec and spec[0] == "exp" and len(spec) == 2:
        _check_time("service_time", spec[1])
        return
    if spec and spec[0] == "uniform" and len(spec) == 3:
        _check_time("service_time", spec[1])
        _check_time("service_time", spec[2])
        if spec[1] > spec[2]:
            raise ValueError(f"SimSettings(service_time={spec!r}): lo is above hi")
        return
    raise ValueError(
        f"SimSettings(service_time={spec!r}): expected seconds, ('exp', mean) or "
        "('uniform', lo, hi)"
    )


def draw_service_time(spec: ServiceTime, rng: random.Random) -> float:
    """One service time from ``spec`` (checked by :class:`SimSettings`)."""
    if not isinstance(spec, tuple):
        return float(spec)
    if spec[0] == "exp":
        mean = spec[1]
        return rng.expovariate(1.0 / mean) if mean > 0 else 0.0
    return rng.uniform(spec[1], spec[2])  # type: ignore[misc]  # (a "uniform" tuple)


def _check_fraction(name: str, value: object) -> None:
    if isinstance(value, bool) or not (isinstance(value, int | float) and 0.0 <= value <= 1.0):
        raise ValueError(f"SimSettings({name}=...) must be between 0 and 1")


@dataclasses.dataclass(frozen=True, slots=True)
class SimChange:
    """What changes ``at`` seconds after the server starts (``SimSettings.schedule``, or at once
    with ``SimServer.change``): its cores, its service time, its failures. A field left ``None``
    stays as it is (so a schedule cannot lift the core limit: give one)."""

    at: float = 0.0
    concurrency: int | None = None
    service_time: ServiceTime | None = None
    drop_request_fraction: float | None = None
    drop_connection_fraction: float | None = None

    def __post_init__(self) -> None:
        _check_time("schedule", self.at)
        value = self.concurrency
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int) or value < 1
        ):
            raise ValueError(f"SimSettings(concurrency=...) must be an int >= 1, got {value!r}")
        if self.service_time is not None:
            _check_service_time(self.service_time)
        for name in ("drop_request_fraction", "drop_connection_fraction"):
            if getattr(self, name) is not None:
                _check_fraction(name, getattr(self, name))


@dataclasses.dataclass(frozen=True, slots=True)
class SimSettings:
    """How a :class:`~poolkit.testing.sim.SimServer` behaves.

    ``handshake_latency``: seconds between accepting a connection and sending ``HELLO``.
    ``service_time``: seconds a request is served (once it holds one of the ``concurrency``
    slots); fixed, ``("exp", mean)`` or ``("uniform", lo, hi)``.
    ``seed``: seeds the server's random draws (None: unseeded).
    ``max_connections``: open connections beyond it are refused (``REFUSED``); None: no limit.
    ``concurrency``: the server's "cores": at most this many requests, from all connections
    together, are in service at once; the others queue, first come first served. None: no limit.
    ``max_streams``: requests a connection may have in flight (1: no multiplexing), announced in
    ``HELLO``; change it at run time with ``SimServer.set_max_streams``.
    ``drop_request_fraction``: each request is, with this probability, answered by closing the
    connection abruptly (reset) instead.
    ``drop_connection_fraction``: each accepted connection is, with this probability, marked
    doomed: its handshake succeeds but it is reset when its first request arrives.
    ``stall_windows``: ``(start, duration)`` pairs, seconds after ``start()``: during each the
    server answers nothing (greetings and responses wait until the window ends).
    ``refuse_windows``: ``(start, duration)`` pairs: new connections are refused meanwhile.
    ``goaway_after_requests``: a connection that has served this many requests announces
    ``GOAWAY``, finishes what it has in flight and closes; None: never.
    ``schedule``: :class:`SimChange` s applied at their times (seconds after ``start()``): a
    database that loses cores, slows down or fails for a while, as a run goes on.
    """

    handshake_latency: float = 0.0
    service_time: ServiceTime = 0.0
    seed: int | None = None
    max_connections: int | None = None
    concurrency: int | None = None
    max_streams: int = 1
    drop_request_fraction: float = 0.0
    drop_connection_fraction: float = 0.0
    stall_windows: tuple[Window, ...] = ()
    refuse_windows: tuple[Window, ...] = ()
    goaway_after_requests: int | None = None
    schedule: tuple[SimChange, ...] = ()

    def __post_init__(self) -> None:
        _check_time("handshake_latency", self.handshake_latency)
        _check_service_time(self.service_time)
        for name in ("max_connections", "concurrency", "goaway_after_requests"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value < 1):
                raise ValueError(f"SimSettings({name}=...) must be an int >= 1 or None")
        if isinstance(self.max_streams, bool) or not isinstance(self.max_streams, int):
            raise ValueError("SimSettings(max_streams=...) must be an int >= 1")
        if self.max_streams < 1:
            raise ValueError("SimSettings(max_streams=...) must be an int >= 1")
        for name in ("drop_request_fraction", "drop_connection_fraction"):
            _check_fraction(name, getattr(self, name))
        if not all(isinstance(change, SimChange) for change in self.schedule):
            raise ValueError("SimSettings(schedule=...): SimChange items")
        for name in ("stall_windows", "refuse_windows"):
            for window in getattr(self, name):
                if len(window) != 2:
                    raise ValueError(f"SimSettings({name}=...): (start, duration) pairs")
                _check_time(name, window[0])
                _check_time(name, window[1])


@dataclasses.dataclass(frozen=True, slots=True)
class SimStats:
    """A snapshot of a server's counters (``SimServer.stats()``)."""

    connections_open: int
    connections_peak: int
    connections_accepted: int
    connections_refused: int
    connections_dropped: int
    requests_served: int
    requests_dropped: int
    streams_refused: int
    in_service: int
    queued: int
    peak_in_service: int
    goaways_sent: int
