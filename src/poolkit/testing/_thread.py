"""Run an asyncio server of :mod:`poolkit.testing` (``SimServer``, ``FaultProxy``) on a thread.

Rules of this module
--------------------
* The server lives on the thread's own event loop: every call into it from another thread goes
  through :meth:`ServerThread.call`, which runs it on that loop and waits for its result.
* ``stop()`` closes the server, stops the loop and joins the thread; calling it twice is fine.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import threading
from collections.abc import Callable
from typing import Any, Generic, Protocol, TypeVar

__all__ = ["ServerThread"]


class _Server(Protocol):
    @property
    def port(self) -> int: ...

    async def start(self) -> None: ...

    async def close(self) -> None: ...


S = TypeVar("S", bound=_Server)


class ServerThread(Generic[S]):
    """``server`` started on a daemon thread with its own event loop (started on creation)."""

    def __init__(self, server: S, *, timeout: float = 10.0) -> None:
        self.server = server
        self._loop = asyncio.new_event_loop()
        self._started: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._stopped = False
        self._thread = threading.Thread(
            target=self._run, name="poolkit-testing-server", daemon=True
        )
        self._thread.start()
        self._started.result(timeout)

    def _run(self) -> None:
        loop = self._loop
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(self.server.start())
        except BaseException as exc:
            self._started.set_exception(exc)
            loop.close()
            return
        self._started.set_result(None)
        try:
            loop.run_forever()
        finally:
            tasks = asyncio.all_tasks(loop)
            for task in tasks:
                task.cancel()
            loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    @property
    def port(self) -> int:
        return self.server.port

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.server.port}"

    def call(self, fn: Callable[..., Any], *args: Any, timeout: float = 10.0) -> Any:
        """``fn(*args)`` run on the server's loop (awaited if it returns an awaitable)."""

        async def run() -> Any:
            result = fn(*args)
            if inspect.isawaitable(result):
                return await result
            return result

        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(timeout)

    def stop(self, timeout: float = 10.0) -> None:
        """Close the server, stop its loop and join the thread."""
        if self._stopped:
            return
        self._stopped = True
        try:
            self.call(self.server.close, timeout=timeout)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout)

    def __enter__(self) -> ServerThread[S]:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
