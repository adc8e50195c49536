"""A MongoDB connection: OP_MSG over asyncio streams (:class:`AsyncMongoConnection`) or a
blocking socket (:class:`MongoConnection`), established with the ``hello`` handshake, and the
connect functions that give them to :class:`poolkit.AsyncPool` and :class:`poolkit.Pool`.

Rules of this module
--------------------
* Establishing is connect (TCP, TLS) then ``hello``; any network error or timeout in it is a
  :class:`~.errors.HandshakeError` (labelled, clears no pool). In load-balanced mode the
  ``hello`` says ``loadBalanced: true`` and a reply without ``serviceId`` fails with the spec's
  exact message; the connection's ``service_id`` is the reply's.
* Then, given credentials, authentication (:mod:`.auth`; its first step, speculatively, in the
  ``hello``), unmonitored as the ``hello`` is: its failure is
  :class:`~.errors.AuthenticationError`, a network error or timeout in it a
  :class:`~.errors.NetworkError` (no label); both ``after_hello``, with the ``service_id``.
  ``connect_timeout`` bounds the establishment (asyncio: the whole; threads: each step).
* One command at a time on a connection (OP_MSG has no multiplexing); a network error breaks
  the connection (``closed``), an ``ok: 0`` reply does not.
* What is sent and checked is decided by :class:`~._protocol.Protocol` (no I/O), shared by
  both connection classes: they only move bytes.

The asyncio connection is written once, in ``connection_async``; the blocking one
(``connection_sync``) is generated from it by tools/async_to_sync.py. This module gives both
their public home.
"""

from __future__ import annotations

from .connection_async import AsyncMongoConnection, async_connect
from .connection_sync import MongoConnection, connect

__all__ = [
    "AsyncMongoConnection",
    "MongoConnection",
    "async_connect",
    "connect",
]
