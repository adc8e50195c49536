"""``PoolOptions(hooks=...)``: what the front ends run around a connection (issue 16). Both
pools, real connect functions, no timing."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import poolkit
from conftest import Conn


class Session(Conn):
    """A connection with session state that a hook configures."""

    def __init__(self, conn_id: int) -> None:
        super().__init__(conn_id)
        self.settings: dict[str, str] = {}


def run_both(front_kind: str, options: poolkit.PoolOptions, body: Any) -> list[Session]:
    """Run ``body(pool)`` (a coroutine function for asyncio, a plain one for threads) on a ready
    pool of ``front_kind`` whose connect makes ``Session`` objects; returns them."""
    made: list[Session] = []
    if front_kind == "asyncio":

        async def aconnect(ctx: poolkit.ConnectContext) -> Session:
            made.append(Session(ctx.connection_id))
            return made[-1]

        async def main() -> None:
            async with poolkit.AsyncPool(aconnect, options=options) as pool:
                await body(pool)

        asyncio.run(main())
    else:

        def connect(ctx: poolkit.ConnectContext) -> Session:
            made.append(Session(ctx.connection_id))
            return made[-1]

        with poolkit.Pool(connect, options=options) as pool:
            body(pool)
    return made


def test_configure_runs_once_per_connection_before_its_first_use(front_kind: str) -> None:
    calls: list[int] = []

    def set_up(conn: Session) -> None:
        assert conn.settings == {}
        conn.settings["timezone"] = "UTC"
        calls.append(conn.id)

    async def aset_up(conn: Session) -> None:
        set_up(conn)

    hooks = poolkit.Hooks(configure=aset_up if front_kind == "asyncio" else set_up)
    options = poolkit.PoolOptions(max_size=2, hooks=hooks)
    seen: list[dict[str, str]] = []

    async def abody(pool: poolkit.AsyncPool[Session]) -> None:
        for _ in range(3):
            async with pool.connection() as conn:
                seen.append(dict(conn.settings))

    def body(pool: poolkit.Pool[Session]) -> None:
        for _ in range(3):
            with pool.connection() as conn:
                seen.append(dict(conn.settings))

    made = run_both(front_kind, options, abody if front_kind == "asyncio" else body)
    assert seen == [{"timezone": "UTC"}] * 3
    assert calls == [c.id for c in made] == [1]


def test_a_failed_configure_is_a_failed_connect_and_closes_the_connection(
    front_kind: str,
) -> None:
    failures = [RuntimeError("SET failed")]

    def set_up(conn: Session) -> None:
        if failures:
            raise failures.pop()

    async def aset_up(conn: Session) -> None:
        set_up(conn)

    hooks = poolkit.Hooks(configure=aset_up if front_kind == "asyncio" else set_up)
    options = poolkit.PoolOptions(max_size=1, hooks=hooks)
    stats: list[poolkit.PoolStats] = []

    async def abody(pool: poolkit.AsyncPool[Session]) -> None:
        with pytest.raises(RuntimeError, match="SET failed"):
            await pool.checkout(timeout=5)
        lease = await pool.checkout(timeout=5)
        lease.release()
        stats.append(pool.stats())

    def body(pool: poolkit.Pool[Session]) -> None:
        with pytest.raises(RuntimeError, match="SET failed"):
            pool.checkout(timeout=5)
        pool.checkout(timeout=5).release()
        stats.append(pool.stats())

    made = run_both(front_kind, options, abody if front_kind == "asyncio" else body)
    assert [c.closed for c in made] == [1, 1]  # the first at once, the second at close
    (s,) = stats
    assert (s.connect_failures, s.connect_attempts, s.connections_created, s.total) == (1, 2, 1, 1)


def test_is_broken_decides_between_discard_and_release(front_kind: str) -> None:
    asked: list[tuple[int, str]] = []

    def is_broken(conn: Session, error: BaseException) -> bool:
        asked.append((conn.id, type(error).__name__))
        return isinstance(error, ConnectionError)

    options = poolkit.PoolOptions(max_size=1, hooks=poolkit.Hooks(is_broken=is_broken))

    async def abody(pool: poolkit.AsyncPool[Session]) -> None:
        for error in (ZeroDivisionError(), ConnectionResetError(), ValueError()):
            with pytest.raises(type(error)):
                async with pool.connection():
                    raise error
        async with pool.connection():
            pass  # no error: is_broken is not asked

    def body(pool: poolkit.Pool[Session]) -> None:
        for error in (ZeroDivisionError(), ConnectionResetError(), ValueError()):
            with pytest.raises(type(error)), pool.connection():
                raise error
        with pool.connection():
            pass

    made = run_both(front_kind, options, abody if front_kind == "asyncio" else body)
    assert asked == [
        (1, "ZeroDivisionError"),
        (1, "ConnectionResetError"),
        (2, "ValueError"),
    ]
    assert [c.closed for c in made] == [1, 1]  # discarded as broken; the second at close


def test_an_is_broken_that_raises_discards(front_kind: str) -> None:
    def is_broken(conn: Session, error: BaseException) -> bool:
        raise RuntimeError("cannot tell")

    options = poolkit.PoolOptions(max_size=1, hooks=poolkit.Hooks(is_broken=is_broken))

    async def abody(pool: poolkit.AsyncPool[Session]) -> None:
        with pytest.raises(KeyError):
            async with pool.connection():
                raise KeyError("x")

    def body(pool: poolkit.Pool[Session]) -> None:
        with pytest.raises(KeyError), pool.connection():
            raise KeyError("x")

    made = run_both(front_kind, options, abody if front_kind == "asyncio" else body)
    assert [c.closed for c in made] == [1]


def test_pool_refuses_async_hooks() -> None:
    async def reset(conn: Any) -> None:
        pass

    with pytest.raises(TypeError, match=r"PoolOptions\.hooks\.reset must be a plain function"):
        poolkit.Pool(
            lambda ctx: Conn(1), options=poolkit.PoolOptions(hooks=poolkit.Hooks(reset=reset))
        )


def test_hooks_are_checked() -> None:
    with pytest.raises(TypeError, match=r"Hooks\.check must be a function"):
        poolkit.Hooks(check=42)  # type: ignore[arg-type]  # (the wrong type on purpose)
    with pytest.raises(ValueError, match=r"Hooks\.check_after must be >= 0"):
        poolkit.Hooks(check_after=-1)
    with pytest.raises(TypeError, match=r"PoolOptions\.hooks must be a poolkit\.Hooks"):
        poolkit.PoolOptions(hooks={"check": print})  # type: ignore[arg-type]
