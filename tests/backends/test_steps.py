"""The backends' step-by-step awaiting (``poolkit.backends._steps``): ``Rest`` awaits what a
first step left as ``await`` would, ``at_least_once`` suspends its caller at least once."""

from __future__ import annotations

import asyncio

import pytest

from poolkit.backends._steps import Rest, at_least_once


def test_at_least_once_yields_once_after_a_coroutine_that_did_not_wait() -> None:
    async def at_once() -> int:
        return 7

    async def main() -> None:
        log: list[str] = []

        async def body() -> None:
            log.append("start")
            assert await at_least_once(at_once()) == 7
            log.append("end")

        task = asyncio.ensure_future(body())
        await asyncio.sleep(0)  # (the body starts, and yields once)
        log.append("other")
        await task
        assert log == ["start", "other", "end"]

    asyncio.run(main())


def test_at_least_once_adds_no_yield_to_a_coroutine_that_waits() -> None:
    async def waits(loop: asyncio.AbstractEventLoop) -> int:
        fut: asyncio.Future[int] = loop.create_future()
        loop.call_soon(fut.set_result, 3)
        return await fut + 1

    async def main() -> None:
        loop = asyncio.get_running_loop()
        steps = 0

        def count() -> None:
            nonlocal steps
            steps += 1

        task = asyncio.ensure_future(at_least_once(waits(loop)))
        task.add_done_callback(lambda _: count())
        assert await task == 4
        assert steps == 1

    asyncio.run(main())


def test_rest_passes_a_cancellation_into_the_coroutine_and_returns_what_it_returns() -> None:
    async def guarded(loop: asyncio.AbstractEventLoop) -> str:
        try:
            await loop.create_future()
        except asyncio.CancelledError:
            return "handled"
        return "not reached"

    async def main() -> None:
        loop = asyncio.get_running_loop()
        coro = guarded(loop)
        step = coro.send(None)
        task = asyncio.ensure_future(_await(Rest(coro, step)))
        await asyncio.sleep(0)
        task.cancel()
        assert await task == "handled"

    asyncio.run(main())


async def _await(rest: Rest) -> str:
    result: str = await rest
    return result


def test_a_failing_first_step_raises_from_at_least_once() -> None:
    async def fails() -> None:
        raise LookupError("first step")

    async def main() -> None:
        with pytest.raises(LookupError, match="first step"):
            await at_least_once(fails())

    asyncio.run(main())
