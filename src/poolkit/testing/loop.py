"""An asyncio event loop on virtual time that jumps ahead whenever every task is blocked.

``loop.time()`` starts at 0 and moves only when the loop would otherwise sleep: if no callback is
ready and no I/O is pending, time jumps straight to the next timer (trio's ``MockClock`` with
``autojump_threshold=0``). ``asyncio.sleep``, ``asyncio.timeout``, ``loop.call_at`` and an
``AsyncPool`` without a ``clock`` all run on it, so a test of minutes of pool time takes
milliseconds and always takes the same path.

Real I/O still works (it is polled before each jump); threads that call back into the loop are
not waited for, so keep them out of tests on this loop.
"""

from __future__ import annotations

import asyncio
import selectors
from collections.abc import Coroutine
from typing import Any, TypeVar

__all__ = ["VirtualTimeLoop", "run"]

T = TypeVar("T")


class _JumpingSelector(selectors.BaseSelector):
    def __init__(self, loop: VirtualTimeLoop, real: selectors.BaseSelector) -> None:
        self._loop = loop
        self._real = real

    def register(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        return self._real.register(fileobj, events, data)

    def unregister(self, fileobj: Any) -> selectors.SelectorKey:
        return self._real.unregister(fileobj)

    def modify(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        return self._real.modify(fileobj, events, data)

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        if timeout is None or timeout <= 0:
            return self._real.select(timeout)
        ready = self._real.select(0)
        if not ready:
            self._loop._virtual_now += timeout
        return ready

    def close(self) -> None:
        self._real.close()

    def get_map(self) -> Any:
        return self._real.get_map()


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    """A selector event loop whose clock is virtual and jumps when the loop is idle."""

    def __init__(self) -> None:
        self._virtual_now = 0.0
        super().__init__(selector=_JumpingSelector(self, selectors.DefaultSelector()))

    def time(self) -> float:
        return self._virtual_now


def run(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run`` on a fresh :class:`VirtualTimeLoop`."""
    with asyncio.Runner(loop_factory=VirtualTimeLoop) as runner:
        return runner.run(main)
