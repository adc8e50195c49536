"""A simulated database-like server on 127.0.0.1 and its clients, for tests and benchmarks.

See :mod:`.protocol` for the wire protocol, :class:`SimSettings` for what can be set, and
:class:`SimServer` for the run-time controls.
"""

from .blocking import SimSocketConnection, sim_check, sim_connect
from .client import (
    SimConnection,
    SimGoingAwayError,
    SimRefusedError,
    SimStreamRefusedError,
    sim_async_connect,
    sim_is_broken,
)
from .server import SimServer
from .settings import SimChange, SimSettings, SimStats

__all__ = [
    "SimConnection",
    "SimGoingAwayError",
    "SimRefusedError",
    "SimServer",
    "SimChange",
    "SimSettings",
    "SimSocketConnection",
    "SimStats",
    "SimStreamRefusedError",
    "sim_check",
    "sim_async_connect",
    "sim_connect",
    "sim_is_broken",
]
