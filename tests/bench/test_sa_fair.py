"""``peerbench.sa_fair``: the fair queue the peers benchmark puts under SQLAlchemy's async pool
(its "fair queue" rows) hands items to the oldest waiting ``get``, lets no newcomer take one a
waiter is owed, and loses none to a waiter that gives up. Driven as SQLAlchemy's pool drives it:
from greenlets (``greenlet_spawn``), on asyncio."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("sqlalchemy")
pytest.importorskip("greenlet")

from sqlalchemy.util.concurrency import greenlet_spawn
from sqlalchemy.util.queue import Empty, Full

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from peerbench.sa_fair import FairQueue


def get(queue: FairQueue, timeout: float | None = None) -> Any:
    return greenlet_spawn(queue.get, True, timeout)


def run(main: Any) -> None:
    """``main()`` on a new loop, failed after 5 s (a queue that loses an item hangs its waiter)."""

    async def bounded() -> None:
        async with asyncio.timeout(5):
            await main()

    asyncio.run(bounded())


def test_items_go_to_the_oldest_waiter_before_any_newcomer() -> None:
    async def main() -> None:
        queue = FairQueue(3)
        waiters = [asyncio.create_task(get(queue)) for _ in range(3)]
        await asyncio.sleep(0)  # (all three waiting, in that order)
        queue.put_nowait("a")
        # a newcomer asks before the woken waiter runs: it waits, "a" is owed to the first
        newcomer = asyncio.create_task(get(queue))
        await asyncio.sleep(0)
        queue.put_nowait("b")
        queue.put_nowait("c")
        queue.put_nowait("d")
        assert [await w for w in waiters] == ["a", "b", "c"]
        assert await newcomer == "d"
        assert queue.empty()

    run(main)


def test_an_item_sits_only_while_nobody_waits() -> None:
    async def main() -> None:
        queue = FairQueue(1)
        queue.put_nowait("a")
        assert queue.qsize() == 1 and queue.full()
        with pytest.raises(Full):
            queue.put_nowait("b")
        assert await get(queue) == "a"  # (nobody waits: taken at once)
        with pytest.raises(Empty):
            queue.get_nowait()
        with pytest.raises(Empty):
            queue.get(block=False)

    run(main)


def test_a_waiter_that_gives_up_passes_its_item_on() -> None:
    async def main() -> None:
        queue = FairQueue()
        first = asyncio.create_task(get(queue))
        second = asyncio.create_task(get(queue))
        await asyncio.sleep(0)
        queue.put_nowait("a")  # handed to the first...
        first.cancel()  # ...which is cancelled before it runs
        with pytest.raises(asyncio.CancelledError):
            await first
        assert await second == "a"
        # a waiter cancelled before anything came leaves the line
        third = asyncio.create_task(get(queue))
        await asyncio.sleep(0)
        third.cancel()
        with pytest.raises(asyncio.CancelledError):
            await third
        queue.put_nowait("b")
        assert queue.qsize() == 1

    run(main)


def test_a_timed_out_get_is_empty_and_leaves_the_line() -> None:
    async def main() -> None:
        queue = FairQueue()
        with pytest.raises(Empty):
            await get(queue, timeout=0.01)
        queue.put_nowait("a")
        assert queue.qsize() == 1  # (not handed to the waiter that timed out)

    run(main)


def test_lifo_is_refused() -> None:
    with pytest.raises(ValueError, match="use_lifo=False"):
        FairQueue(5, use_lifo=True)
