"""The state of a cursor and of a session, without I/O: the commands each sends next, what
their replies and errors change, and the calls their state forbids. Both MongoDB pools
(:mod:`.pool_async`, :mod:`.pool_sync`) run these commands.

Rules of this module
--------------------
* A cursor ends when its id is 0 (exhausted, closed, or its first command failed); an error
  that ended it early (a network error on its pinned connection, the end of the transaction it
  belonged to) is raised to the next call for more, and nothing is sent to kill it.
* A session's transaction moves as the Transactions spec has it:

  =============== ================= ================= ================== ==================
  state           start_transaction a command in it   commit             abort
  =============== ================= ================= ================== ==================
  none            starting          (outside: none)   refused            refused
  starting        refused           in_progress       committed_empty    aborted
  in_progress     refused           in_progress       committed (sent)   aborted (sent)
  committed       starting          (outside: none)   committed (again)  refused
  committed_empty starting          (outside: none)   committed_empty    refused
  aborted         starting          (outside: none)   refused            refused
  =============== ================= ================= ================== ==================

  A refused call raises :class:`~.errors.InvalidOperationError` before anything is sent.
* A network error in a transaction is labelled ``TransientTransactionError``; one on a commit
  ``UnknownTransactionCommitResult`` (the Transactions spec): a caller retries by its labels.
"""

from __future__ import annotations

import collections
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ._bson import bson
from .errors import InvalidOperationError, MongoError, NetworkError

if TYPE_CHECKING:
    from .pinning import ServerSession

__all__ = ["CursorState", "SessionState", "find_command", "releases_pin"]


def find_command(
    collection: str, filter: Mapping[str, Any] | None, batch_size: int
) -> dict[str, Any]:
    return {"find": collection, "filter": dict(filter or {}), "batchSize": batch_size}


class CursorState:
    """A cursor's state: its id, the documents fetched and not yet taken, the commands that go
    on with it (``getMore``, ``killCursors``) and what ended it."""

    def __init__(
        self,
        db: str,
        collection: str,
        batch_size: int,
        *,
        fields: Mapping[str, Any] | None = None,
        session: ServerSession | None = None,
    ) -> None:
        self.db = db
        self.collection = collection
        self.batch_size = batch_size
        self.id = 0
        self.batch: collections.deque[dict[str, Any]] = collections.deque()
        self.fields = dict(fields or {})  # (its session's lsid; a transaction's fields)
        #: an implicit server session the cursor owns: given back when it ends
        self.session = session
        #: the error that ended it early (module rules)
        self.failed: BaseException | None = None

    def take(self, reply: Mapping[str, Any], field: str) -> None:
        cursor = reply.get("cursor")
        if not isinstance(cursor, Mapping):
            self.id = 0
            raise TypeError(f"the reply to a cursor's command has no cursor: {sorted(reply)}")
        namespace = cursor.get("ns")
        if isinstance(namespace, str) and "." in namespace:  # (getMore names the collection:
            self.collection = namespace.partition(".")[2]  # listCollections' is $cmd....)
        self.batch.extend(cursor.get(field, ()))
        self.id = int(cursor.get("id", 0))

    def failed_with(self, error: BaseException) -> None:
        """An error of a command on its pinned connection: a network error ends it."""
        if isinstance(error, NetworkError):
            self.failed = error

    def orphaned(self, address: str) -> None:
        """The transaction whose connection it shared has ended (the server killed it)."""
        if self.id and self.failed is None:
            self.failed = InvalidOperationError(
                "this cursor belonged to a transaction that has ended", address=address
            )

    def next_command(self) -> dict[str, Any] | None:
        """What to send for more documents: ``getMore``, or None when the cursor is exhausted
        (or closed; the error that ended it early is raised instead)."""
        if self.id == 0:
            return None
        if self.failed is not None:
            raise self.failed
        return {
            "getMore": bson.int64.Int64(self.id),
            "collection": self.collection,
            "batchSize": self.batch_size,
            **self.fields,
        }

    def kill_command(self) -> dict[str, Any] | None:
        """On close: ``killCursors``, unless the cursor is exhausted or ended early; the cursor
        is done from here on."""
        cursor_id, self.id = self.id, 0
        self.batch.clear()
        if not cursor_id or self.failed is not None:
            return None
        return {
            "killCursors": self.collection,
            "cursors": [bson.int64.Int64(cursor_id)],
            **self.fields,
        }

    def session_done(self) -> ServerSession | None:
        """The implicit server session to give back once the cursor is exhausted or closed
        (None: it has none, or gave it back)."""
        if self.id != 0:
            return None
        session, self.session = self.session, None
        return session


class SessionState:
    """A session's state: its server session, its transaction number and state (module rules),
    and the fields each command carries."""

    def __init__(self, session: ServerSession, address: str) -> None:
        self.server_session = session
        self.address = address
        self.transaction = "none"
        self.ended = False
        #: the last ``recoveryToken`` the transaction's replies carried (Sharded Transactions:
        #: a mongos other than the one it ran on commits or aborts it with this)
        self.recovery_token: Any = None

    @property
    def lsid(self) -> dict[str, Any]:
        return self.server_session.lsid

    @property
    def txn_number(self) -> int:
        """The transaction number now: the server session's, which goes on past this session
        (the server refuses a number it has seen on that session)."""
        return self.server_session.txn_number

    @property
    def in_transaction(self) -> bool:
        return self.transaction in ("starting", "in_progress")

    def _refuse(self, message: str) -> InvalidOperationError:
        return InvalidOperationError(message, address=self.address)

    def check_open(self) -> None:
        if self.ended:
            raise self._refuse("this session has ended")

    def start_transaction(self) -> None:
        self.check_open()
        if self.in_transaction:
            raise self._refuse("a transaction is already in progress on this session")
        self.server_session.txn_number += 1
        self.transaction = "starting"
        self.recovery_token = None

    def fields(self) -> dict[str, Any]:
        """The fields of the session's next command (``startTransaction`` on the first of a
        transaction); a command outside a transaction ends the last one's state."""
        fields: dict[str, Any] = {"lsid": self.lsid}
        if not self.in_transaction:
            self.transaction = "none"
            return fields
        fields["txnNumber"] = bson.int64.Int64(self.txn_number)
        fields["autocommit"] = False
        if self.transaction == "starting":
            fields["startTransaction"] = True
            self.transaction = "in_progress"
        return fields

    def _end_command(self, name: str) -> dict[str, Any]:
        command = {
            name: 1,
            "lsid": self.lsid,
            "txnNumber": bson.int64.Int64(self.txn_number),
            "autocommit": False,
        }
        if self.recovery_token is not None:
            command["recoveryToken"] = self.recovery_token
        return command

    def replied(self, command: Mapping[str, Any], reply: Mapping[str, Any]) -> None:
        """A reply to one of the session's commands: a transaction's ``recoveryToken`` is
        kept, for its commit and abort."""
        if "txnNumber" in command and "recoveryToken" in reply:
            self.recovery_token = reply["recoveryToken"]

    def commit(self) -> dict[str, Any] | None:
        """The commit to send (again, after a commit: the same transaction); None for a
        transaction that sent nothing."""
        self.check_open()
        state = self.transaction
        if state == "none":
            raise self._refuse("no transaction started")
        if state == "aborted":
            raise self._refuse("cannot call commit_transaction after calling abort_transaction")
        if state in ("starting", "committed_empty"):
            self.transaction = "committed_empty"
            return None
        self.transaction = "committed"
        return self._end_command("commitTransaction")

    def abort(self) -> dict[str, Any] | None:
        """The abort to send; None for a transaction that sent nothing."""
        self.check_open()
        state = self.transaction
        if state == "none":
            raise self._refuse("no transaction started")
        if state in ("committed", "committed_empty"):
            raise self._refuse("cannot call abort_transaction after calling commit_transaction")
        if state == "aborted":
            raise self._refuse("cannot call abort_transaction twice")
        self.transaction = "aborted"
        return self._end_command("abortTransaction") if state == "in_progress" else None

    def label(self, error: MongoError, command: Mapping[str, Any]) -> None:
        """The labels the Transactions spec has a driver add to ``error``, raised by
        ``command`` of this session."""
        if not isinstance(error, NetworkError):
            return
        name = next(iter(command), "")
        if name == "commitTransaction":
            error.add_error_label("UnknownTransactionCommitResult")
        elif "txnNumber" in command and name != "abortTransaction":
            error.add_error_label("TransientTransactionError")


def releases_pin(error: MongoError) -> bool:
    """Whether an error in a pinned transaction gives the pin back at once: a transient one
    (``TransientTransactionError``, a network error)."""
    return isinstance(error, NetworkError) or error.has_error_label("TransientTransactionError")
