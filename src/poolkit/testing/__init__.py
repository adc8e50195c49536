"""Test support for poolkit and for code built on it: fake time, a simulated server on
127.0.0.1 (:class:`SimServer`), a fault-injecting TCP proxy (:class:`FaultProxy`), and what
they are built of, for a test server of your own (:class:`LoopbackServer`,
:func:`stop_accepting`, :class:`ServerThread`). The simulated MongoDB load balancer is a
distribution of its own in poolkit's repository (``sim-mongo/``: ``poolkit_sim_mongo``)."""

from ._serving import LoopbackServer, stop_accepting
from ._thread import ServerThread
from .clock import FakeClock, SettleTimeout
from .loop import VirtualTimeLoop, run
from .proxy import FaultProxy, ProxyStats
from .sim import (
    SimChange,
    SimConnection,
    SimServer,
    SimSettings,
    SimSocketConnection,
    SimStats,
    sim_async_connect,
    sim_check,
    sim_connect,
    sim_is_broken,
)

__all__ = [
    "FakeClock",
    "FaultProxy",
    "LoopbackServer",
    "ProxyStats",
    "ServerThread",
    "SettleTimeout",
    "SimConnection",
    "SimServer",
    "SimChange",
    "SimSettings",
    "SimSocketConnection",
    "SimStats",
    "VirtualTimeLoop",
    "run",
    "sim_check",
    "sim_async_connect",
    "sim_connect",
    "sim_is_broken",
    "stop_accepting",
]
