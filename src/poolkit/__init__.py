"""poolkit: a spec-exact connection pool for Python client libraries.

One pure core (``poolkit._core``) decides everything; :class:`AsyncPool` runs it on asyncio and
:class:`Pool` on threads. See the README for a quickstart.
"""

from ._frontend import Clock, ConnectContext, DrivenClock, Established, Lease
from ._requests import LeaseRequest
from .asyncio import AsyncPool
from .errors import (
    CircuitOpenError,
    ConnectCancelledError,
    ConnectTimeoutError,
    HookTimeoutError,
    InvalidLeaseError,
    KeepAliveTimeoutError,
    PoolClearedError,
    PoolClosedError,
    PoolError,
    RequestCancelledError,
    TooManyWaitersError,
    WaitQueueTimeoutError,
)
from .events import PoolListener
from .options import Adaptive, Backoff, Hooks, KeepAlive, PoolOptions
from .stats import AdaptiveStats, PoolState, PoolStats
from .threaded import Pool

__all__ = [
    "Adaptive",
    "AdaptiveStats",
    "AsyncPool",
    "Backoff",
    "CircuitOpenError",
    "Clock",
    "ConnectCancelledError",
    "ConnectContext",
    "ConnectTimeoutError",
    "DrivenClock",
    "Established",
    "HookTimeoutError",
    "Hooks",
    "InvalidLeaseError",
    "KeepAlive",
    "KeepAliveTimeoutError",
    "Lease",
    "LeaseRequest",
    "Pool",
    "PoolClearedError",
    "PoolClosedError",
    "PoolError",
    "PoolListener",
    "PoolOptions",
    "PoolState",
    "PoolStats",
    "RequestCancelledError",
    "TooManyWaitersError",
    "WaitQueueTimeoutError",
]

for _name in ("ConnectContext", "Established", "Lease", "AsyncPool", "Pool"):
    globals()[_name].__module__ = "poolkit"
del _name

__version__ = "0.1.0.dev0"
