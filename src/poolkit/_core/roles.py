"""Roles: why the pool keeps each connection (kept, demand, overflow), and how many of each.

Rules of this module
--------------------
* A role is a field of the record (``Conn.role``), never a position in a list. It is given at
  birth (``new_role``, counted with ``count``) and changes only in ``set``, which keeps the
  counters and has the pool re-gate the connection (overflow ones take no fast path).
* ``kept`` and ``overflow`` count the records of the pool (``conns``) with those roles; demand
  ones are what remains.
* A connection that closes frees its role for the next one down (``promote``): a kept one is
  replaced by a demand one, a demand one by an overflow one; established connections are
  preferred, and nothing is created here.
* New limits (``resize``) move roles both ways until the counts fit them: kept ones beyond
  ``min_size`` become demand ones, demand ones beyond the soft limit overflow ones, and up again
  where there is room; nothing is closed or created here either.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from typing import final

from .records import _CONNECTING, _DEMAND, _KEPT, _OVERFLOW, Conn, Role


@final
class Roles:
    """The role counters of one pool, and the rules that give and move roles."""

    __slots__ = ("kept", "min_size", "overflow", "regate", "soft")

    def __init__(self, min_size: int, soft: int, regate: Callable[[Conn], None]) -> None:
        self.min_size = min_size
        self.soft = soft  #: the soft limit: connections above it are overflow
        self.regate = regate  #: ``records.regate``, called when a role changes
        self.kept = 0  #: connections whose role is KEPT
        self.overflow = 0  #: connections whose role is OVERFLOW

    def count(self, role: Role, delta: int) -> None:
        """A record of ``role`` is born (``delta`` 1) or leaves the pool (-1)."""
        if role is _KEPT:
            self.kept += delta
        elif role is _OVERFLOW:
            self.overflow += delta

    def new_role(self, total: int) -> Role:
        """The role of a connection about to be made, with ``total`` records in the pool."""
        if self.kept < self.min_size:
            return _KEPT
        if total - self.overflow < self.soft:
            return _DEMAND
        return _OVERFLOW

    def set(self, conn: Conn, role: Role) -> None:
        """The one place an existing connection's role changes (with the counters)."""
        self.count(conn.role, -1)
        self.count(role, 1)
        conn.role = role
        self.regate(conn)

    def promote(self, freed: Role, conns: Collection[Conn]) -> None:
        """A connection of role ``freed`` closed (it is out of ``conns``): the next role down
        moves up into its place. A kept connection is replaced by a demand one (its idle time no
        longer counts), a demand one by an overflow one (no longer closed as soon as it is
        idle)."""
        if freed is _OVERFLOW:
            return
        if freed is _KEPT and self.kept >= self.min_size:
            return
        if freed is _DEMAND and len(conns) - self.overflow >= self.soft:
            return
        below = _DEMAND if freed is _KEPT else _OVERFLOW
        chosen = None
        for conn in conns:
            if conn.role is below:
                chosen = conn
                if conn.state is not _CONNECTING:
                    break
        if chosen is None:
            if below is _DEMAND:  # no demand connection: an overflow one becomes kept
                for conn in conns:
                    if conn.role is _OVERFLOW:
                        self.set(conn, _KEPT)
                        return
            return
        self.set(chosen, freed)
        if below is _DEMAND:
            self.promote(_DEMAND, conns)  # a demand place is free now: an overflow one may take it

    def resize(self, min_size: int, soft: int, order: Sequence[Conn]) -> None:
        """The pool's limits changed (``Lifecycle.resize``): ``min_size`` and the soft limit are
        these now, and the roles of the records (``order``: all of them, the first to lose a role
        first, the last to gain one first) move until they fit: kept ones beyond ``min_size``
        become demand ones, then demand ones beyond the soft limit overflow ones; overflow ones
        below the soft limit become demand ones, then demand ones below ``min_size`` kept
        ones."""
        self.min_size = min_size
        self.soft = soft
        total = len(order)
        for conn in order:
            if self.kept <= min_size:
                break
            if conn.role is _KEPT:
                self.set(conn, _DEMAND)
        for conn in order:  # (kept ones are at most min_size <= soft: demand ones are there)
            if total - self.overflow <= soft:
                break
            if conn.role is _DEMAND:
                self.set(conn, _OVERFLOW)
        for conn in reversed(order):
            if total - self.overflow >= soft:
                break
            if conn.role is _OVERFLOW:
                self.set(conn, _DEMAND)
        for conn in reversed(order):
            if self.kept >= min_size:
                break
            if conn.role is _DEMAND:
                self.set(conn, _KEPT)

    def clear(self) -> None:
        """Forget every record (after a fork)."""
        self.kept = 0
        self.overflow = 0
