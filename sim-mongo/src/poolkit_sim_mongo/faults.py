"""Fault injection for the simulated MongoDB server: fail points, as MongoDB's ``failCommand``
(``configureFailPoint``) has them, and the error codes and labels a real server answers with.

A :class:`FailPoint` acts on the commands it names (none named: every command except the
handshake's ``hello``/``isMaster`` and ``configureFailPoint``), optionally only on connections
of one service or of one ``appName``, for its next ``times`` commands (None: until cleared). A
command it catches is first delayed by ``delay`` seconds (``blockTimeMS``), then either its
connection is closed without an answer (``close_connection``: a network error mid-command), or
it is answered with ``error_code`` (with the labels a server adds, unless ``error_labels``
says which), or, with neither, run as usual (a slow command: a slow ``hello`` is a slow
handshake).

Rules of this module
--------------------
* No I/O and no clock: :class:`FailPoint` decides, the server acts.
* The labels follow the server: ``RetryableWriteError`` on a retryable error of a retryable
  write (a write with ``txnNumber`` outside a transaction) or of ``commitTransaction``/
  ``abortTransaction``; ``TransientTransactionError`` on such an error inside a transaction.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

__all__ = [
    "CODE_NAMES",
    "CommandError",
    "FailPoint",
    "HANDSHAKE_COMMANDS",
    "NOT_PRIMARY_CODES",
    "RECOVERING_CODES",
    "RETRYABLE_WRITE_CODES",
    "SHUTDOWN_CODES",
    "STATE_CHANGE_CODES",
    "error_document",
    "error_labels",
]

#: SDAM's "not writable primary" errors
NOT_PRIMARY_CODES = frozenset({10107, 13435, 10058})
#: SDAM's "node is recovering" errors
RECOVERING_CODES = frozenset({11600, 11602, 13436, 189, 91})
#: the state-change errors (a driver clears its pool for the service on the shutdown ones)
STATE_CHANGE_CODES = NOT_PRIMARY_CODES | RECOVERING_CODES
SHUTDOWN_CODES = frozenset({11600, 91})
#: the errors a retryable write is retried on (the retryable writes spec)
RETRYABLE_WRITE_CODES = frozenset({11600, 11602, 10107, 13435, 13436, 189, 91, 7, 6, 89, 9001, 262})
CODE_NAMES: Mapping[int, str] = {
    2: "BadValue",
    6: "HostUnreachable",
    7: "HostNotFound",
    9: "FailedToParse",
    13: "Unauthorized",
    14: "TypeMismatch",
    17: "ProtocolError",
    18: "AuthenticationFailed",
    24: "LockTimeout",
    26: "NamespaceNotFound",
    27: "IndexNotFound",
    28: "PathNotViable",
    40: "ConflictingUpdateOperators",
    43: "CursorNotFound",
    48: "NamespaceExists",
    50: "MaxTimeMSExpired",
    52: "DollarPrefixedFieldName",
    54: "NotSingleValueField",
    56: "EmptyFieldName",
    59: "CommandNotFound",
    66: "ImmutableField",
    67: "CannotCreateIndex",
    72: "InvalidOptions",
    73: "InvalidNamespace",
    85: "IndexOptionsConflict",
    86: "IndexKeySpecsConflict",
    89: "NetworkTimeout",
    91: "ShutdownInProgress",
    112: "WriteConflict",
    117: "ConflictingOperationInProgress",
    189: "PrimarySteppedDown",
    225: "TransactionTooOld",
    251: "NoSuchTransaction",
    256: "TransactionCommitted",
    262: "ExceededTimeLimit",
    267: "PreparedTransactionInProgress",
    263: "OperationNotSupportedInTransaction",
    334: "MechanismUnavailable",
    352: "UnsupportedOpQueryCommand",
    354: "LoadBalancerSupportMismatch",
    9001: "SocketException",
    10058: "LegacyNotPrimary",
    10107: "NotWritablePrimary",
    11000: "DuplicateKey",
    11600: "InterruptedAtShutdown",
    11602: "InterruptedDueToReplStateChange",
    13435: "NotPrimaryNoSecondaryOk",
    13436: "NotPrimaryOrSecondary",
}
HANDSHAKE_COMMANDS = frozenset({"hello", "isMaster", "ismaster"})
_RETRYABLE_WRITES = frozenset({"insert", "update", "delete", "findAndModify"})
_TRANSACTION_ENDS = frozenset({"commitTransaction", "abortTransaction"})


#: errors that leave a transaction safe to retry whole (the server's isTransientTransactionError:
#: WriteConflict, LockTimeout, PreparedTransactionInProgress...)
TRANSIENT_TRANSACTION_CODES = frozenset({112, 24, 267, 251})


def error_labels(command: str, body: Mapping[str, Any], code: int) -> list[str]:
    """The labels a server puts on error ``code`` answering ``command`` (``body``)."""
    retryable = code in RETRYABLE_WRITE_CODES
    if command in _TRANSACTION_ENDS:
        labels = ["RetryableWriteError"] if retryable else []
        return labels + (
            ["TransientTransactionError"] if code in TRANSIENT_TRANSACTION_CODES else []
        )
    if body.get("autocommit") is False:
        transient = retryable or code in TRANSIENT_TRANSACTION_CODES
        return ["TransientTransactionError"] if transient else []
    if command in _RETRYABLE_WRITES and "txnNumber" in body and retryable:
        return ["RetryableWriteError"]
    return []


def error_document(
    code: int,
    errmsg: str | None = None,
    labels: Sequence[str] = (),
    details: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A command's error reply: ``{ok: 0, errmsg, code, codeName[, details...][,
    errorLabels]}`` (``details``: fields of the error, as a duplicate key's ``keyPattern``)."""
    name = CODE_NAMES.get(code, f"Location{code}")
    reply: dict[str, Any] = {"ok": 0.0, "errmsg": errmsg or name, "code": code, "codeName": name}
    reply.update(details or {})
    if labels:
        reply["errorLabels"] = list(labels)
    return reply


class CommandError(Exception):
    """A command's failure, answered as ``{ok: 0, code, errmsg, ...}``."""

    def __init__(
        self,
        code: int,
        errmsg: str,
        labels: tuple[str, ...] = (),
        details: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(errmsg)
        self.code = code
        self.errmsg = errmsg
        self.labels = labels
        self.details = dict(details or {})

    def document(self) -> dict[str, Any]:
        return error_document(self.code, self.errmsg, self.labels, self.details)


@dataclasses.dataclass(eq=False)
class FailPoint:
    """One fault (see the module's doc). ``hits`` counts the commands it caught."""

    commands: frozenset[str] = frozenset()
    error_code: int | None = None
    error_labels: tuple[str, ...] | None = None
    errmsg: str | None = None
    close_connection: bool = False
    delay: float = 0.0
    times: int | None = 1
    app_name: str | None = None
    service: int | None = None
    #: who set it: "api" (the server's methods) or "command" (``configureFailPoint``)
    origin: str = "api"
    hits: int = 0

    def __post_init__(self) -> None:
        if self.times is not None and (isinstance(self.times, bool) or self.times < 0):
            raise ValueError(f"FailPoint(times=...) must be None or >= 0, got {self.times!r}")
        if not (math.isfinite(self.delay) and self.delay >= 0):
            raise ValueError(f"FailPoint(delay=...) must be >= 0 seconds, got {self.delay!r}")
        names = set(self.commands)
        if names & {"isMaster", "ismaster"}:
            names |= {"isMaster", "ismaster"}
        self.commands = frozenset(names)

    @property
    def active(self) -> bool:
        return self.times is None or self.hits < self.times

    def catches(self, command: str, app_name: str | None, service: int) -> bool:
        """Whether this fail point acts on ``command`` (and counts it as a hit if so)."""
        if not self.active or command == "configureFailPoint":
            return False
        if self.commands:
            if command not in self.commands:
                return False
        elif command in HANDSHAKE_COMMANDS:
            return False
        if self.app_name is not None and app_name != self.app_name:
            return False
        if self.service is not None and service != self.service:
            return False
        self.hits += 1
        return True

    def reply(self, command: str, body: Mapping[str, Any]) -> dict[str, Any] | None:
        """The error answering ``command``, or None (not an error fail point)."""
        if self.error_code is None:
            return None
        labels = self.error_labels
        if labels is None:
            labels = tuple(error_labels(command, body, self.error_code))
        return error_document(
            self.error_code, self.errmsg or f"Failing command {command!r} via failCommand", labels
        )

    @classmethod
    def from_command(cls, body: Mapping[str, Any]) -> FailPoint | None:
        """The fail point of a ``configureFailPoint: "failCommand"`` command (None: ``mode:
        "off"``). Raises ValueError on what the simulator does not support."""
        if body.get("configureFailPoint") != "failCommand":
            raise ValueError(f"unknown fail point {body.get('configureFailPoint')!r}")
        mode = body.get("mode")
        if mode == "off":
            return None
        if mode == "alwaysOn":
            times: int | None = None
        elif isinstance(mode, Mapping) and set(mode) == {"times"}:
            times = int(mode["times"])
        else:
            raise ValueError(f"unsupported mode {mode!r}: 'alwaysOn', 'off' or {{times: n}}")
        data = body.get("data") or {}
        unknown = set(data) - _DATA_KEYS
        if unknown:
            raise ValueError(f"unsupported failCommand data: {sorted(unknown)}")
        commands = data.get("failCommands")
        if not isinstance(commands, list) or not commands:
            raise ValueError("failCommand needs data.failCommands, a nonempty array")
        labels = data.get("errorLabels")
        return cls(
            commands=frozenset(str(c) for c in commands),
            error_code=int(data["errorCode"]) if "errorCode" in data else None,
            error_labels=tuple(_strings(labels)) if labels is not None else None,
            close_connection=bool(data.get("closeConnection", False)),
            delay=float(data.get("blockTimeMS", 0)) / 1000.0
            if data.get("blockConnection")
            else 0.0,
            times=times,
            app_name=data.get("appName"),
            origin="command",
        )


_DATA_KEYS = frozenset(
    {
        "failCommands",
        "errorCode",
        "errorLabels",
        "closeConnection",
        "blockConnection",
        "blockTimeMS",
        "appName",
        "failInternalCommands",
    }
)


def _strings(values: Iterable[Any]) -> list[str]:
    return [str(v) for v in values]
