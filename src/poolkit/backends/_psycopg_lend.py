"""What the psycopg backend hands out: for each lease, a connection object of its own that
refuses use once the lease is given back, as asyncpg's pool's proxy does, so that a reference kept
after the block cannot run anything in the session of the connection's next owner.

A psycopg connection is a Python object over a libpq ``PGconn``, its state all in its instance
``__dict__`` (the ``pgconn``, the lock, ``autocommit``, the prepared statements, the pipeline,
the handlers...). ``lend`` (the pool's ``Hooks.lend``, once per lease) makes a new instance of a
subclass of the connection's own class (``connection_class``, ``row_factory`` and all) whose
``__dict__`` *is* the pooled connection's: the same state, not a copy, with no wrapper between
the caller and psycopg. Every cursor, server-side cursor, transaction, pipeline, copy and
``notifies()`` generator made from it keeps it (not the pooled connection) as its connection, and
reaches the server only through its attributes (``lock``, ``wait``, ``pgconn``...). When the
lease ends, the object's class becomes its *released* twin, whose ``__getattribute__`` and
``__setattr__`` raise :class:`ConnectionReleasedError` (a ``psycopg.InterfaceError``) for every
name but the dunders, and its ``__dict__`` a new empty one: every way to the session from that
object, or from what was made from it, is cut at once.

Rules of this module
--------------------
* While the lease is out, the caller's object is the connection for every purpose but identity:
  its methods are its class's own, unwrapped, and read the shared ``__dict__`` (no wrapper,
  no frame, no test added to any call). A hand-out costs one small object, a weak reference and a
  few stores; giving back, a class and a ``__dict__`` swapped.
* The lease's object is released by the first of: the ``end`` hook of ``pool.connection()``'s
  block (:func:`given_back`, in the caller, once the block's COMMIT or ROLLBACK went through
  that object), the ``reset`` hook at check-in (:func:`release_lent`, before it sends anything),
  the next ``lend`` of the connection.
  A connection closed instead has no next owner: its old object gets psycopg's own "closed".
* The pool's hooks (configure, check, reset, is_broken, the keep-alive probe) and its close get
  the pooled connection itself, never a lease's object; ``end`` gets the lease's object, ends the
  transaction through it, and keeps its books on the pooled connection (:func:`given_back`).
* The pooled connection's ``__dict__`` gets one key of poolkit's (``_CURRENT``), set once and
  then only reassigned: adding and deleting a key at each lease would change the dict's layout,
  and with it the attribute caches of every psycopg call site reading the connection.
* For a type checker the object *is* the connection's class (a subclass at run time: what
  ``isinstance`` says holds, ``type(conn) is psycopg.Connection`` does not).
"""

from __future__ import annotations

import weakref
from typing import Any, Final, TypeVar

import psycopg

from .. import Lease

__all__ = ["ConnectionReleasedError", "given_back", "lend", "pooled", "release_lent"]

C = TypeVar("C", bound="psycopg.Connection[Any] | psycopg.AsyncConnection[Any]")

#: the key under which the pooled connection's ``__dict__`` keeps a weak reference to the object
#: its current lease was handed
_CURRENT: Final = "_poolkit_lent"
#: the slots of a lease's object, readable after it was released
_OWN: Final = frozenset({"_poolkit_pooled", "_poolkit_address", "_poolkit_connection_id"})


class ConnectionReleasedError(psycopg.InterfaceError):
    """A psycopg connection leased from a poolkit pool (or a cursor, transaction, pipeline or
    copy made from it) used after its lease was given back: the connection may serve another
    caller now. ``address`` names the pool, ``connection_id`` the connection the lease had,
    ``attribute`` what was asked of the connection object."""

    def __init__(self, address: str, connection_id: int, attribute: str) -> None:
        super().__init__(
            f"the connection was released back to the pool: this psycopg connection was leased "
            f"from the poolkit pool for {address} (connection {connection_id}), and another "
            f"caller may hold it now ({attribute!r} asked after the lease). Use a leased "
            "connection, and the cursors, transactions and pipelines made from it, only inside "
            "its block, or check out again"
        )
        self.address = address
        self.connection_id = connection_id
        self.attribute = attribute


ConnectionReleasedError.__module__ = "poolkit.backends.psycopg"  # (its public name)


def _refuse(self: Any, name: str) -> Any:
    """A released object's ``__getattribute__``: only the dunders (``__class__`` for
    ``isinstance``, ``__dict__``...) and its own slots are read."""
    if name.startswith("__") or name in _OWN:
        return object.__getattribute__(self, name)
    raise ConnectionReleasedError(
        object.__getattribute__(self, "_poolkit_address"),
        object.__getattribute__(self, "_poolkit_connection_id"),
        name,
    )


def _refuse_setting(self: Any, name: str, value: Any) -> None:
    """A released object's ``__setattr__``: what a caller sets (``row_factory``,
    ``prepare_threshold``...) would reach the next owner; only the dunders and its own slots."""
    if name.startswith("__") or name in _OWN:
        object.__setattr__(self, name, value)
        return
    _refuse(self, name)


def _released_repr(self: Any) -> str:
    cls = type(self)
    return f"<{cls.__module__}.{cls.__qualname__} [released] at 0x{id(self):x}>"


def _no_finalizer(self: Any) -> None:
    """A lease's object never owns its connection: no "deleted while still open" warning."""


#: a connection class -> the class of its leases' objects; that class -> its released twin
_LENT: dict[type, type] = {}
_RELEASED: dict[type, type] = {}


def _lent_class(cls: type) -> type:
    """The class of the objects lent for connections of ``cls`` (made once per class)."""
    name = f"Pooled{cls.__name__}"
    namespace = {
        "__slots__": tuple(sorted(_OWN)),
        "__module__": "poolkit.backends.psycopg",
        "__qualname__": name,
        "__del__": _no_finalizer,
    }
    lent: type = type(cls)(name, (cls,), namespace)
    released: type = type(cls)(
        name,
        (lent,),
        {
            "__slots__": (),
            "__module__": "poolkit.backends.psycopg",
            "__qualname__": name,
            "__getattribute__": _refuse,
            "__setattr__": _refuse_setting,
            "__repr__": _released_repr,
        },
    )
    _RELEASED[lent] = released
    _LENT[cls] = lent
    return lent


def lend(conn: C, lease: Lease[Any]) -> C:
    """``Hooks.lend`` (for both pools): ``conn`` for the length of ``lease`` (see the module's
    rules); the object an earlier lease of ``conn`` was handed is released, if it was not yet."""
    cls = _LENT.get(type(conn)) or _lent_class(type(conn))
    state = conn.__dict__
    if state.get(_CURRENT) is not None:
        release_lent(conn)
    lent: Any = object.__new__(cls)
    lent.__dict__ = state
    lent._poolkit_pooled = conn
    lent._poolkit_address = lease.address
    lent._poolkit_connection_id = lease.connection_id
    state[_CURRENT] = weakref.ref(lent)
    return lent  # type: ignore[no-any-return]  # (an instance of a subclass of type(conn))


def _release(lent: Any, released: type) -> Any:
    """Cut ``lent`` (a lease's object not released yet; ``released``: its class's twin) from its
    connection; the pooled connection."""
    pooled = lent._poolkit_pooled
    state = lent.__dict__
    lent._poolkit_pooled = None
    lent.__dict__ = {}  # (cut first: a use from another thread meanwhile finds nothing at all)
    lent.__class__ = released  # (from here on, every name raises)
    state[_CURRENT] = None  # (it was this object's: one lease at a time. The key stays: the
    return pooled  # dict's layout, which the interpreter's attribute caches rely on, too)


def pooled(handed: C) -> C:
    """The pooled connection behind ``handed`` (a lease's object not released yet, or the
    connection itself)."""
    if type(handed) in _RELEASED:
        return handed._poolkit_pooled  # type: ignore[no-any-return,union-attr]  # (its slot)
    return handed


def given_back(handed: C) -> C:
    """The pooled connection behind ``handed`` (what a block was given: a lease's object, or the
    connection itself), the lease's object released: for the ``end`` hook."""
    released = _RELEASED.get(type(handed))
    if released is None:  # the connection itself (or an object released already)
        return handed
    return _release(handed, released)  # type: ignore[no-any-return]  # (type(handed)'s base)


def release_lent(conn: Any) -> None:
    """Release the object the current lease of ``conn`` (a pooled connection) was handed, if it
    was not yet: for the ``reset`` hook."""
    state = conn.__dict__
    current = state.get(_CURRENT)
    if current is not None:
        state[_CURRENT] = None
        lent = current()
        if lent is not None:  # (not collected: not released either, or the key would be None)
            _release(lent, _RELEASED[type(lent)])
