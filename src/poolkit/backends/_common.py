"""What the backends' one-call builders share: setting the hooks, making the pool ready, the
awaitable pool starter, an address fit to show."""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Generator
from typing import Any, Generic, TypeVar
from urllib.parse import urlsplit

from .. import AsyncPool, Hooks, Pool, PoolOptions

C = TypeVar("C")


def with_hooks(options: PoolOptions | None, chosen: Hooks, builder: str) -> PoolOptions:
    """``options`` (default ones if ``None``) with ``hooks=chosen``; refuses options whose
    ``hooks`` are set already (the builder's arguments set them)."""
    if options is None:
        options = PoolOptions()
    elif not isinstance(options, PoolOptions):
        raise TypeError(f"{builder}(options=...) must be a PoolOptions, got {options!r}")
    if options.hooks is not None:
        raise ValueError(
            f"{builder}() sets options.hooks from its own arguments (reset=, check=, ...): "
            "leave options.hooks unset, or build the pool yourself from the backend's connect "
            "function and hooks()"
        )
    return dataclasses.replace(options, hooks=chosen)


def default_hooks(options: PoolOptions | None, default: Hooks, builder: str) -> PoolOptions:
    """``options`` (default ones if ``None``) with ``default`` as hooks unless they have their
    own."""
    if options is None:
        options = PoolOptions()
    elif not isinstance(options, PoolOptions):
        raise TypeError(f"{builder}(options=...) must be a PoolOptions, got {options!r}")
    return options if options.hooks is not None else dataclasses.replace(options, hooks=default)


async def ready_async(pool: AsyncPool[Any]) -> None:
    """Make ``pool`` ready and one connection through it, so that a server that cannot be
    reached (a wrong DSN, a wrong password) fails now; then the pool is closed and the connect's
    error raised."""
    pool.ready()
    try:
        lease = await pool.checkout()
    except BaseException:
        await pool.close()
        raise
    lease.release()


def ready_sync(pool: Pool[Any]) -> None:
    """:func:`ready_async` for the threaded pool."""
    pool.ready()
    try:
        lease = pool.checkout()
    except BaseException:
        pool.close()
        raise
    lease.release()


class PoolStarter(Generic[C]):
    """What an async one-call builder returns: ``await`` it for the ready pool, or use it as
    ``async with builder(...) as pool:`` for a pool closed at the end of the block."""

    __slots__ = ("_pool", "_start")

    def __init__(self, start: Callable[[], Awaitable[AsyncPool[C]]]) -> None:
        self._start = start
        self._pool: AsyncPool[C] | None = None

    def __await__(self) -> Generator[Any, None, AsyncPool[C]]:
        return self._start().__await__()

    async def __aenter__(self) -> AsyncPool[C]:
        self._pool = await self._start()
        return self._pool

    async def __aexit__(self, *exc_info: object) -> None:
        if self._pool is not None:
            await self._pool.close()


def shown_address(params: dict[str, Any], default: str = "postgresql") -> str:
    """``host:port/dbname`` from connection parameters (never a password)."""
    host = params.get("host") or "localhost"
    port = f":{params['port']}" if params.get("port") else ""
    dbname = params.get("dbname") or params.get("database")
    db = f"/{dbname}" if dbname else ""
    return f"{host}{port}{db}" if params else default


def uri_params(dsn: str | None) -> dict[str, Any]:
    """host, port and dbname of a ``postgresql://`` URI (``{}`` if there is none)."""
    if not dsn:
        return {}
    parts = urlsplit(dsn)
    return {"host": parts.hostname, "port": parts.port, "dbname": parts.path.lstrip("/")}
