"""Test support for poolkit and for code built on it: fake time, a simulated server on
127.0.0.1 (:class:`SimServer`) and a fault-injecting TCP proxy (:class:`FaultProxy`)."""

from ._thread import ServerThread
from .clock import FakeClock, SettleTimeout
from .loop import VirtualTimeLoop, run
from .proxy import FaultProxy, ProxyStats
from .sim import (
    SimConnection,
    SimServer,
    SimSettings,
    SimSocketConnection,
    SimStats,
    sim_check,
    sim_connect,
    sim_connect_sync,
    sim_is_broken,
)

__all__ = [
    "FakeClock",
    "FaultProxy",
    "ProxyStats",
    "ServerThread",
    "SettleTimeout",
    "SimConnection",
    "SimServer",
    "SimSettings",
    "SimSocketConnection",
    "SimStats",
    "VirtualTimeLoop",
    "run",
    "sim_check",
    "sim_connect",
    "sim_connect_sync",
    "sim_is_broken",
]
