"""Backends: ready-made connect functions and hooks for real servers.

Each backend is a module of its own, imported on its own, needing its driver as an optional
extra (``pip install 'poolkit[asyncpg]'``...): importing this package imports no driver.

* ``poolkit.backends.asyncpg``: PostgreSQL with asyncpg (``AsyncPool``).
* ``poolkit.backends.psycopg``: PostgreSQL with psycopg 3 (``Pool`` and ``AsyncPool``).
* ``poolkit.backends.redis``: Redis with redis-py (``Pool`` and ``AsyncPool``), and drop-in
  ``ConnectionPool`` classes for ``redis.Redis(connection_pool=...)``.
* ``poolkit.backends.sqlalchemy``: ``QueuePool`` and ``AsyncAdaptedQueuePool`` for SQLAlchemy's
  engines (``create_engine(url, poolclass=QueuePool)``).
* ``poolkit.backends.tcp``: raw TCP, optionally TLS (asyncio streams and blocking sockets).
* ``poolkit.backends.http2``: HTTP/2 with h2 (``AsyncPool``, one connection serving many
  streams), and an httpx transport on it.
"""

__all__: list[str] = []  # (the backends are its modules, each imported on its own)
