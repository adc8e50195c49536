"""Awaiting a coroutine step by step, where the backends must know whether it waits.

Rules of this module
--------------------
* A coroutine's first step is run by the caller (``coro.send(None)``): it either ends (served
  without waiting) or yields what the task must wait on. :class:`Rest` awaits the rest as
  ``await`` would have: a backend that runs a first step itself (``at_least_once`` here, the
  SQLAlchemy drop-in's bridged checkout) ends the coroutine through it, or, where nothing may
  wait, throws a cancellation into it (``coro.close()`` would skip the coroutine's own clean-up
  of a cancellation: a queued request left in the queue).
* No event loop, no I/O: what is yielded goes to whatever task awaits (asyncio's).
"""

from __future__ import annotations

import types
from collections.abc import Coroutine, Generator
from typing import Any, TypeVar

__all__ = ["Rest", "at_least_once"]

T = TypeVar("T")


class Rest:
    """The rest of a coroutine whose first step yielded ``step``, as an awaitable: it yields
    ``step`` to the task awaiting it, then drives the coroutine as ``await`` would (what the
    task sends or throws goes in, what the coroutine yields goes out, its return is the
    result)."""

    __slots__ = ("coro", "step")

    def __init__(self, coro: Coroutine[Any, Any, Any], step: Any) -> None:
        self.coro = coro
        self.step = step

    def __await__(self) -> Generator[Any, Any, Any]:
        coro, step = self.coro, self.step
        while True:
            try:
                sent = yield step
            except GeneratorExit:
                coro.close()
                raise
            except BaseException as exc:  # (a cancellation, most often: the coroutine's to handle)
                try:
                    step = coro.throw(exc)
                except StopIteration as done:
                    return done.value
                continue
            try:
                step = coro.send(sent)
            except StopIteration as done:
                return done.value


@types.coroutine
def at_least_once(coro: Coroutine[Any, Any, T]) -> Generator[Any, Any, T]:
    """``await coro``, the awaiting task suspended at least once: a coroutine that ends at its
    first step (it had nothing to wait for) is followed by one yield to the loop, as
    ``asyncio.sleep(0)`` (use: ``await at_least_once(coro)`` in a ``types.coroutine``, or
    ``yield from``). A cancellation in that yield is the caller's, after ``coro`` has ended."""
    try:
        step = coro.send(None)
    except StopIteration as done:
        yield  # (asyncio: a bare yield is sleep(0))
        result: T = done.value
        return result
    rest: T = yield from Rest(coro, step).__await__()
    return rest
