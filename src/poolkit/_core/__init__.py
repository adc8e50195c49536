"""The pure core of poolkit: records, actions, timers and the decisions of the pool."""

from .actions import (
    Action,
    CloseConnection,
    CompleteRequest,
    StartCheck,
    StartConnect,
    StartKeepAlive,
    StartReset,
)
from .pool import PoolCore
from .records import (
    STEPS,
    Conn,
    ConnInput,
    ConnState,
    Hold,
    InvalidTransition,
    Request,
    RequestState,
    Role,
)
from .timers import TimerEntry, TimerHeap, TimerKind

__all__ = [
    "STEPS",
    "Action",
    "CloseConnection",
    "CompleteRequest",
    "Conn",
    "ConnInput",
    "ConnState",
    "Hold",
    "InvalidTransition",
    "PoolCore",
    "Request",
    "RequestState",
    "Role",
    "StartCheck",
    "StartConnect",
    "StartKeepAlive",
    "StartReset",
    "TimerEntry",
    "TimerHeap",
    "TimerKind",
]
