"""What a leased redis-py client has done to its connection's server session, known without
asking the server: the bookkeeping behind the redis backend's ``reset`` hook.

Every command a redis-py client sends goes through its connection's ``send_command`` (one
command: the client's commands, pub/sub, ``MONITOR``, the connection's own handshake) or
``pack_commands`` + ``send_packed_command`` (pipelines and transactions), and every reply comes
back through ``read_response``. The connection classes made by :func:`tracked` (a subclass of
the class redis-py would use: plain, TLS or Unix socket, sync or asyncio) note each command sent
and each reply read in a :class:`Session`; a (re)connect clears it, since a new socket is a new
server session set up by redis-py's handshake (``AUTH``/``HELLO``, ``CLIENT SETNAME``,
``SELECT``). At check-in the session tells the hook which of three cases it is in:

* ``CLEAN``: nothing the next caller could notice: every reply read, outside ``MULTI``, nothing
  watched, no session-changing command sent. Nothing is sent.
* ``RESET``: a session-changing command was sent (``SELECT``, ``CLIENT SETNAME``, ``CLIENT
  TRACKING``, ``AUTH``, ``HELLO``, ``READONLY``, ``RESET``...), or a ``MULTI`` or ``WATCH`` is
  left open. Redis (6.2 or later) puts such a session back with ``RESET``, after which the
  handshake is run again.
* ``DISCARD``: replies and commands are out of step, so no command can be trusted to get its
  own reply: a reply left unread (a command sent and never read, as a caller interrupted between
  the two), pub/sub (``SUBSCRIBE`` and its kin: messages arrive unasked), ``MONITOR``,
  ``CLIENT REPLY``, ``QUIT``, replication commands, or bytes sent with ``send_packed_command``
  that were not packed here. Or a command was sent whose effect ``RESET`` does not undo on every
  server: ``CLIENT NO-EVICT`` and ``CLIENT NO-TOUCH``, which ``RESET`` turns off only from Redis
  7.2 (``NO-EVICT`` stays on through it on 7.0 and 7.1). The connection is closed.

  Why not ``RESET`` and then ``CLIENT NO-EVICT OFF`` (and ``NO-TOUCH OFF``)? That is right only
  on servers that have the subcommand (``NO-TOUCH`` came in 7.2, ``NO-EVICT`` in 7.0) and needs
  the server's version, or a reply to fail, to know which to send; closing the connection is
  right on every version and on servers that speak Redis's protocol with another ``RESET``, and
  it costs a reconnect only after an admin command hardly ever sent on a pooled connection.

``MULTI``/``EXEC`` and ``WATCH``/``UNWATCH`` are followed, not just noted, so that a finished
transaction (a ``pipeline()``, ``WATCH``ed or not) leaves a clean session: ``EXEC`` and
``DISCARD`` end a ``MULTI`` and forget every watched key; ``EXEC`` or ``DISCARD`` outside
``MULTI`` is an error that changes nothing. Since every reply has been read when the session is
clean, the server has run every command noted.

Rules of this module
--------------------
* It only notes what goes over the wire; it never sends anything nor decides about pooling.
* A command is noted once it is sent (a send that fails has redis-py disconnect the socket, and
  a socket that is gone carries no session); a reply once it is read (an error reply too; not a
  RESP3 push message, which answers no command).
* A connection the pool closed for good (``poolkit_retired``) refuses to connect again, so that
  an object kept from the lease (a PubSub, a pipeline) cannot open a socket nobody would close.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence
from typing import Any

from ._extras import require

require("redis", "redis", "redis")  # no redis-py: an ImportError naming poolkit[redis]

import redis  # noqa: E402

__all__ = ["Session", "Verdict", "command_words", "session_of", "tracked", "tracked_async"]


class Verdict(enum.Enum):
    """What a connection needs at check-in."""

    CLEAN = "clean"
    RESET = "reset"
    DISCARD = "discard"


#: commands that change the server session for the commands after them (``RESET`` puts them
#: back): ``AUTH`` and ``HELLO`` (user, protocol, name), ``SELECT``, cluster modes, ``RESET``
SESSION_COMMANDS = frozenset(
    {"SELECT", "AUTH", "HELLO", "RESET", "READONLY", "READWRITE", "ASKING"}
)
#: ``CLIENT`` subcommands that do the same
SESSION_CLIENT_COMMANDS = frozenset({"SETNAME", "SETINFO", "TRACKING", "CACHING"})
#: ``CLIENT`` subcommands whose effect ``RESET`` does not undo on every server: it turns
#: ``NO-EVICT`` and ``NO-TOUCH`` off only from Redis 7.2 (on 7.0 and 7.1 ``NO-EVICT`` stays on)
UNRESETTABLE_CLIENT_COMMANDS = frozenset({"NO-EVICT", "NO-TOUCH"})
#: commands after which replies no longer answer commands one for one
OUT_OF_STEP_COMMANDS = frozenset(
    {
        "SUBSCRIBE",
        "PSUBSCRIBE",
        "SSUBSCRIBE",
        "UNSUBSCRIBE",
        "PUNSUBSCRIBE",
        "SUNSUBSCRIBE",
        "MONITOR",
        "QUIT",
        "SYNC",
        "PSYNC",
        "REPLCONF",
    }
)
#: ``CLIENT`` subcommands that do the same (``CLIENT REPLY OFF|SKIP``: no replies)
OUT_OF_STEP_CLIENT_COMMANDS = frozenset({"REPLY"})


def _word(arg: object) -> str:
    if isinstance(arg, bytes | bytearray | memoryview):
        return bytes(arg).decode("latin-1")
    return str(arg)


def command_words(args: Sequence[Any]) -> tuple[str, str]:
    """A command's name and (for ``CLIENT``) subcommand, upper case, from redis-py's arguments;
    redis-py lets the name carry its subcommand (``("CLIENT SETNAME", name)``)."""
    if not args:
        return "", ""
    words = _word(args[0]).split()
    if not words:
        return "", ""
    name = words[0].upper()
    if name != "CLIENT":
        return name, ""
    if len(words) > 1:
        return name, words[1].upper()
    return name, _word(args[1]).upper() if len(args) > 1 else ""


class Session:
    """What one connection's server session holds since its last (re)connect or reset."""

    __slots__ = ("changed", "in_multi", "kept", "lost", "pending", "watching")

    def __init__(self) -> None:
        self.clear()

    def clear(self) -> None:
        """A new session: the connection (re)connected, or was reset."""
        #: replies owed by the server: commands sent minus replies read
        self.pending = 0
        self.in_multi = False
        self.watching = False
        #: the last session-changing command sent (``None``: none)
        self.changed: str | None = None
        #: why replies are out of step (``None``: they are not)
        self.lost: str | None = None
        #: the last command sent whose effect ``RESET`` may not undo (``None``: none)
        self.kept: str | None = None

    def sent(self, commands: Iterable[Sequence[Any]]) -> None:
        """``commands`` (each redis-py's arguments: name first) went to the server."""
        for args in commands:
            self.pending += 1
            name, sub = command_words(args)
            if name == "MULTI":
                self.in_multi = True
            elif name in ("EXEC", "DISCARD"):
                if self.in_multi:
                    self.in_multi = self.watching = False
            elif name == "WATCH":
                self.watching = True
            elif name == "UNWATCH":
                self.watching = False
            elif name in OUT_OF_STEP_COMMANDS or (
                name == "CLIENT" and sub in OUT_OF_STEP_CLIENT_COMMANDS
            ):
                self.lost = f"{name} {sub}".strip()
            elif name == "CLIENT" and sub in UNRESETTABLE_CLIENT_COMMANDS:
                self.kept = f"{name} {sub}"
            elif name in SESSION_COMMANDS or (name == "CLIENT" and sub in SESSION_CLIENT_COMMANDS):
                self.changed = f"{name} {sub}".strip()

    def sent_unknown(self) -> None:
        """Bytes went to the server that were not packed by the connection's ``pack_commands``."""
        self.lost = "send_packed_command() of bytes packed elsewhere"

    def replied(self) -> None:
        """A reply was read (an error reply too)."""
        self.pending -= 1

    def verdict(self) -> tuple[Verdict, str]:
        """What the connection needs before another caller may have it, and why."""
        if self.lost is not None:
            return Verdict.DISCARD, f"{self.lost} was sent: replies no longer answer commands"
        if self.pending > 0:
            return Verdict.DISCARD, f"{self.pending} reply(ies) left unread"
        if self.pending < 0:
            return Verdict.DISCARD, "replies were read that no command asked for"
        if self.kept is not None:
            return Verdict.DISCARD, f"{self.kept} was sent: RESET turns it off only from Redis 7.2"
        if self.changed is not None:
            return Verdict.RESET, f"{self.changed} changed the session"
        if self.in_multi:
            return Verdict.RESET, "a MULTI was left open"
        if self.watching:
            return Verdict.RESET, "keys were left WATCHed"
        return Verdict.CLEAN, ""


def session_of(connection: Any) -> Session | None:
    """The :class:`Session` of a connection made from a :func:`tracked` class (``None`` for any
    other)."""
    session = getattr(connection, "poolkit_session", None)
    return session if isinstance(session, Session) else None


class _TrackingBase:
    """What :func:`tracked` and :func:`tracked_async` add to a redis-py connection class."""

    poolkit_session: Session
    #: why the pool closed this connection for good (``None``: it did not)
    poolkit_retired: str | None = None
    _poolkit_in_send: bool
    _poolkit_packed: tuple[object, list[Sequence[Any]]] | None

    def _up(self) -> Any:
        """The connection class's own methods (the class after this one in the MRO)."""
        return super()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._up().__init__(*args, **kwargs)
        self.poolkit_session = Session()
        self._poolkit_in_send = False
        self._poolkit_packed = None
        # (run after redis-py's handshake, before the callbacks registered later: pub/sub's)
        self._up().register_connect_callback(self._poolkit_connected)

    def _poolkit_connected(self, connection: Any) -> None:
        self.poolkit_session.clear()
        self._poolkit_packed = None

    def pack_commands(self, commands: Iterable[Sequence[Any]]) -> Any:
        listed = list(commands)
        packed = self._up().pack_commands(listed)
        self._poolkit_packed = (packed, listed)
        return packed

    def _poolkit_replied(self, kwargs: dict[str, Any]) -> None:
        if not kwargs.get("push_request"):  # (a push message, RESP3's, answers no command)
            self.poolkit_session.replied()

    def _poolkit_sent_packed(self, command: Any, packed: tuple[object, list[Any]] | None) -> None:
        if packed is not None and packed[0] is command:
            self.poolkit_session.sent(packed[1])
        else:
            self.poolkit_session.sent_unknown()

    def _poolkit_refuse(self) -> None:
        if self.poolkit_retired is not None:
            raise redis.ConnectionError(
                f"this connection was closed by its poolkit pool ({self.poolkit_retired}): "
                "an object kept from the lease (a PubSub, a pipeline) cannot reconnect it"
            )


class _Tracking(_TrackingBase):
    """The sync connection's methods."""

    def _connect(self) -> Any:
        self._poolkit_refuse()
        return self._up()._connect()

    def send_command(self, *args: Any, **kwargs: Any) -> Any:
        outer, self._poolkit_in_send = self._poolkit_in_send, True
        try:
            result = self._up().send_command(*args, **kwargs)
        finally:
            self._poolkit_in_send = outer
        self.poolkit_session.sent((args,))
        return result

    def send_packed_command(self, command: Any, *args: Any, **kwargs: Any) -> Any:
        if self._poolkit_in_send:
            return self._up().send_packed_command(command, *args, **kwargs)
        packed, self._poolkit_packed = self._poolkit_packed, None
        result = self._up().send_packed_command(command, *args, **kwargs)
        self._poolkit_sent_packed(command, packed)
        return result

    def read_response(self, *args: Any, **kwargs: Any) -> Any:
        try:
            response = self._up().read_response(*args, **kwargs)
        except redis.ResponseError:
            self._poolkit_replied(kwargs)
            raise
        self._poolkit_replied(kwargs)
        return response


class _AsyncTracking(_TrackingBase):
    """The ``redis.asyncio`` connection's methods (its I/O methods are async)."""

    async def _connect(self) -> Any:
        self._poolkit_refuse()
        return await self._up()._connect()

    async def send_command(self, *args: Any, **kwargs: Any) -> Any:
        outer, self._poolkit_in_send = self._poolkit_in_send, True
        try:
            result = await self._up().send_command(*args, **kwargs)
        finally:
            self._poolkit_in_send = outer
        self.poolkit_session.sent((args,))
        return result

    async def send_packed_command(self, command: Any, *args: Any, **kwargs: Any) -> Any:
        if self._poolkit_in_send:
            return await self._up().send_packed_command(command, *args, **kwargs)
        packed, self._poolkit_packed = self._poolkit_packed, None
        result = await self._up().send_packed_command(command, *args, **kwargs)
        self._poolkit_sent_packed(command, packed)
        return result

    async def read_response(self, *args: Any, **kwargs: Any) -> Any:
        try:
            response = await self._up().read_response(*args, **kwargs)
        except redis.ResponseError:
            self._poolkit_replied(kwargs)
            raise
        self._poolkit_replied(kwargs)
        return response


_made: dict[tuple[type[Any], type[Any]], type[Any]] = {}


def _subclass(tracking: type[Any], connection_class: type[Any]) -> type[Any]:
    if issubclass(connection_class, tracking):
        return connection_class
    key = (tracking, connection_class)
    made = _made.get(key)
    if made is None:
        name = f"Tracked{connection_class.__name__}"
        made = _made[key] = type(name, (tracking, connection_class), {"__module__": __name__})
    return made


def tracked(connection_class: type[Any]) -> type[Any]:
    """A subclass of the redis-py connection class ``connection_class`` whose instances note
    their commands and replies in ``poolkit_session``."""
    return _subclass(_Tracking, connection_class)


def tracked_async(connection_class: type[Any]) -> type[Any]:
    """:func:`tracked` for a ``redis.asyncio`` connection class."""
    return _subclass(_AsyncTracking, connection_class)
