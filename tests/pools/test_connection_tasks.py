"""``ConnectContext.start_soon``: a task for the life of a connection (a multiplexed protocol's
reader), started by its connect function. On asyncio a task of the pool's loop; under trio one
in the pool's nursery; cancelled when the pool has closed the connection (after an async close
has run) or when the connect fails; what it raises is logged. Under ``Pool``, or with no pool,
it says so. trio runs on its ``MockClock`` (``frontends.run_trio``), asyncio on
``poolkit.testing``'s virtual-time loop."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import pytest
import trio

import poolkit
from frontends import run_trio
from poolkit.testing import run as run_asyncio


class Life:
    """A connection whose connect starts one task for its life; the task records its end."""

    def __init__(self, cid: int, sleep: Callable[[float], Awaitable[None]]) -> None:
        self.id = cid
        self.sleep = sleep
        self.running = False
        self.ended: str | None = None  #: "cancelled", "returned" or "raised"
        self.closed_while_running: bool | None = None

    async def life(self, raise_after: float | None) -> None:
        self.running = True
        try:
            if raise_after is not None:
                await self.sleep(raise_after)
                self.ended = "raised"
                raise ValueError("the reader broke")
            await self.sleep(1e9)
        except BaseException as exc:
            if self.ended is None:
                self.ended = "cancelled" if not isinstance(exc, Exception) else "raised"
            raise
        finally:
            self.running = False

    async def aclose(self) -> None:
        await self.sleep(0.5)  # (an async close that takes time: the task outlives it)
        self.closed_while_running = self.running


class Kit:
    """What differs between the two libraries in these tests."""

    def __init__(self, library: str) -> None:
        self.library = library
        self.sleep: Callable[[float], Awaitable[None]] = (
            trio.sleep if library == "trio" else asyncio.sleep
        )

    def run(self, main: Callable[[], Coroutine[Any, Any, None]]) -> None:
        if self.library == "trio":
            run_trio(main)
        else:
            run_asyncio(main())


@pytest.fixture(params=["asyncio", "trio"])
def kit(request: pytest.FixtureRequest) -> Kit:
    return Kit(request.param)


def make_pool(
    kit: Kit,
    made: list[Life],
    *,
    raise_after: float | None = None,
    fail_connect: bool = False,
    max_size: int = 2,
) -> poolkit.AsyncPool[Life]:
    async def connect(ctx: poolkit.ConnectContext) -> Life:
        conn = Life(ctx.connection_id, kit.sleep)
        made.append(conn)
        ctx.start_soon(conn.life, raise_after, name=f"life-{ctx.connection_id}")
        await kit.sleep(0.1)
        assert conn.running  # (started at once, in the pool's nursery or loop)
        if fail_connect:
            raise ConnectionRefusedError("the handshake failed")
        return conn

    return poolkit.AsyncPool(
        connect, address="db:1", options=poolkit.PoolOptions(max_size=max_size)
    )


def test_a_connection_task_lives_until_its_connection_is_closed(kit: Kit) -> None:
    made: list[Life] = []

    async def main() -> None:
        pool = make_pool(kit, made)
        async with pool:
            async with pool.connection() as first, pool.connection() as second:
                assert first.running and second.running
            await kit.sleep(10)
            assert all(conn.running for conn in made)  # idle in the pool: still running
            pool.clear(interrupt_in_use=True)  # closes both (async closes)
            await kit.sleep(0.1)
            # the close is awaited first: the task runs through it, then is cancelled
            assert all(conn.running for conn in made)
            await kit.sleep(1)
            assert [conn.closed_while_running for conn in made] == [True, True]
            assert [conn.ended for conn in made] == ["cancelled", "cancelled"]
            pool.ready()  # (a clear pauses the pool)
            async with pool.connection() as third:
                assert third.running
        # the pool's block has ended: the last connection closed, its task with it
        assert [conn.ended for conn in made] == ["cancelled"] * 3
        assert not any(conn.running for conn in made)

    kit.run(main)


def test_a_failed_connect_ends_the_tasks_it_started(kit: Kit) -> None:
    made: list[Life] = []

    async def main() -> None:
        pool = make_pool(kit, made, fail_connect=True)
        async with pool:
            with pytest.raises(ConnectionRefusedError):
                await pool.checkout(timeout=5)
            await kit.sleep(0.01)
            # (inside the block: ended by the failed connect, not by the block's end)
            assert made and all(conn.ended == "cancelled" for conn in made)
            assert not any(conn.running for conn in made)

    kit.run(main)


def test_what_a_connection_task_raises_is_logged_not_raised(
    kit: Kit, caplog: pytest.LogCaptureFixture
) -> None:
    made: list[Life] = []

    async def main() -> None:
        pool = make_pool(kit, made, raise_after=1.0, max_size=1)
        async with pool:
            async with pool.connection() as conn:
                await kit.sleep(2)
                assert conn.ended == "raised" and not conn.running
            async with pool.connection() as again:  # the pool goes on
                assert again is conn

    with caplog.at_level(logging.ERROR, logger="poolkit.pool"):
        kit.run(main)
    assert "a task of connection 1 of db:1 raised" in caplog.text
    assert "the reader broke" in caplog.text


def test_start_soon_says_where_it_cannot_run() -> None:
    ctx = poolkit.ConnectContext(1, "db:1", None, 0)

    async def never() -> None:  # pragma: no cover  (never called: refused before)
        pass

    with pytest.raises(RuntimeError, match=r"only an AsyncPool's connect"):
        ctx.start_soon(never)

    seen: list[str] = []

    def connect(ctx: poolkit.ConnectContext) -> Any:
        try:
            ctx.start_soon(never)
        except RuntimeError as exc:
            seen.append(str(exc))
        return object()

    pool = poolkit.Pool(connect, options=poolkit.PoolOptions(max_size=1))
    with pool, pool.connection():
        pass
    assert seen and "only an AsyncPool's connect" in seen[0]
