"""What the backends' one-call builders share: setting the hooks, making the pool ready."""

from __future__ import annotations

import dataclasses
from typing import Any

from .. import AsyncPool, Hooks, Pool, PoolOptions


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
