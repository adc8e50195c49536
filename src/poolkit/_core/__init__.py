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
    TRANSITIONS,
    Conn,
    ConnInput,
    ConnState,
    Hold,
    InvalidTransition,
    Request,
    RequestState,
    Role,
    next_state,
)
from .timers import TimerEntry, TimerHeap, TimerKind

__all__ = [
    "TRANSITIONS",
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
    "next_state",
]
