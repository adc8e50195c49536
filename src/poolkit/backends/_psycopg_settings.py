"""What a caller can change on a leased psycopg connection without a query, remembered once the
connection is configured and given back by the reset.

Rules of this module
--------------------
* The settings are taken after the connect and the user's ``configure`` (:func:`remember`, run
  by the ``configure`` hook that ``hooks()`` and ``async_hooks()`` set): what ``configure`` chose
  (a ``dict_row`` for every connection, a notice handler) is what every caller gets.
* A connection nobody remembered (a reset used without those hooks' ``configure``) keeps the
  attributes the transaction rules govern as today (``autocommit`` as asked, the isolation level,
  read-only and deferrable attributes unset) and the others as they are.
* Restoring costs no round trip except where psycopg needs one (the async setters of
  ``autocommit`` and the transaction characteristics, only when they changed).
* psycopg lists the handlers only in its private ``_notice_handlers`` and ``_notify_handlers``;
  they are read (never written: the public add/remove methods change them), and if a psycopg
  release renames them the handlers are left as they are.
* ``conn.adapters`` cannot be put back (psycopg has no public way): register adapters in
  ``configure``, where they belong to the connection for good.
"""

from __future__ import annotations

import dataclasses
import weakref
from collections.abc import Callable
from typing import Any

import psycopg

Conn = psycopg.Connection[Any]
AsyncConn = psycopg.AsyncConnection[Any]


@dataclasses.dataclass(frozen=True, slots=True)
class Settings:
    """A connection's client-side settings at one moment."""

    autocommit: bool
    isolation_level: psycopg.IsolationLevel | None
    read_only: bool | None
    deferrable: bool | None
    row_factory: Any
    cursor_factory: Any
    server_cursor_factory: Any
    prepare_threshold: int | None
    prepared_max: int | None
    notice_handlers: tuple[Callable[..., Any], ...] | None
    notify_handlers: tuple[Callable[..., Any], ...] | None


#: the settings of each configured connection, until it is collected
_REMEMBERED: weakref.WeakKeyDictionary[Conn | AsyncConn, Settings] = weakref.WeakKeyDictionary()


def _handlers(conn: Conn | AsyncConn, name: str) -> tuple[Callable[..., Any], ...] | None:
    found = getattr(conn, name, None)
    return tuple(found) if isinstance(found, list) else None


def settings_of(conn: Conn | AsyncConn) -> Settings:
    """``conn``'s settings now."""
    return Settings(
        autocommit=conn.autocommit,
        isolation_level=conn.isolation_level,
        read_only=conn.read_only,
        deferrable=conn.deferrable,
        row_factory=conn.row_factory,
        cursor_factory=conn.cursor_factory,
        server_cursor_factory=conn.server_cursor_factory,
        prepare_threshold=conn.prepare_threshold,
        prepared_max=conn.prepared_max,
        notice_handlers=_handlers(conn, "_notice_handlers"),
        notify_handlers=_handlers(conn, "_notify_handlers"),
    )


def remember(conn: Conn | AsyncConn) -> None:
    """Remember ``conn``'s settings now as those every caller gets (after ``configure``)."""
    _REMEMBERED[conn] = settings_of(conn)


def remembered(conn: Conn | AsyncConn) -> Settings | None:
    """What :func:`remember` took for ``conn``, if it did."""
    return _REMEMBERED.get(conn)


def restore_plain_attributes(conn: Conn | AsyncConn, wanted: Settings) -> None:
    """Give back the settings that are plain attributes (the factories, the prepared-statement
    settings) and the handlers: no I/O. (Read first, written only when changed: this runs on
    every check-in.)"""
    if conn.row_factory is not wanted.row_factory:
        conn.row_factory = wanted.row_factory
    if conn.cursor_factory is not wanted.cursor_factory:
        conn.cursor_factory = wanted.cursor_factory
    if conn.server_cursor_factory is not wanted.server_cursor_factory:
        conn.server_cursor_factory = wanted.server_cursor_factory
    if conn.prepare_threshold != wanted.prepare_threshold:
        conn.prepare_threshold = wanted.prepare_threshold
    if conn.prepared_max != wanted.prepared_max:
        conn.prepared_max = wanted.prepared_max
    notice = getattr(conn, "_notice_handlers", None)
    if notice or wanted.notice_handlers:  # (none now and none wanted: every check-in)
        _give_back_handlers(conn, notice, wanted.notice_handlers, "notice")
    notify = getattr(conn, "_notify_handlers", None)
    if notify or wanted.notify_handlers:
        _give_back_handlers(conn, notify, wanted.notify_handlers, "notify")


def _give_back_handlers(
    conn: Conn | AsyncConn,
    found: Any,
    wanted: tuple[Callable[..., Any], ...] | None,
    kind: str,
) -> None:
    """The ``kind`` handlers as ``wanted``; ``found``: psycopg's list of them now (read once)."""
    _restore_handlers(
        tuple(found) if isinstance(found, list) else None,
        wanted,
        getattr(conn, f"add_{kind}_handler"),
        getattr(conn, f"remove_{kind}_handler"),
    )


def _restore_handlers(
    now: tuple[Callable[..., Any], ...] | None,
    wanted: tuple[Callable[..., Any], ...] | None,
    add: Callable[[Any], None],
    remove: Callable[[Any], None],
) -> None:
    if now is None or wanted is None or now == wanted:
        return
    for handler in now:
        remove(handler)
    for handler in wanted:
        add(handler)
