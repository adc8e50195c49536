"""The embedded server's process: ``poolkit bench``'s ``sim://`` target.

Rules of this module
--------------------
* The embedded server runs in a process of its own (spawned), so that it never competes with
  the measured pool for the interpreter's lock: the figures are the pool's, not the server's.
* It serves until the parent says ``"stop"`` or goes away; SIGINT is the parent's to handle.
"""

from __future__ import annotations

import asyncio
import contextlib
import selectors
import signal
import threading
import time
from multiprocessing.connection import Connection
from typing import Any

from ..testing.sim import SimServer, SimSettings, SimStats

__all__ = ["SimProcess", "sim_main"]


def sim_main(settings: SimSettings, channel: Connection) -> None:
    """The embedded server's process: serves until ``"stop"`` (or the parent goes away)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    with asyncio.Runner(loop_factory=lambda: _precise_loop(settings)) as runner:
        runner.run(_serve(settings, channel))


def _precise_loop(settings: SimSettings) -> asyncio.AbstractEventLoop:
    """An event loop whose timers fire within tens of microseconds: ``select()`` takes its
    timeout in microseconds, where epoll rounds it up to whole milliseconds (a 1 ms service
    time would be served in up to 2). ``select()`` handles descriptors below 1024 only: with
    more connections allowed, the default loop."""
    limit = settings.max_connections
    if limit is not None and limit <= 900:
        return asyncio.SelectorEventLoop(selectors.SelectSelector())
    return asyncio.new_event_loop()


async def _serve(settings: SimSettings, channel: Connection) -> None:
    server = SimServer(settings)
    await server.start()
    done = asyncio.Event()
    loop = asyncio.get_running_loop()

    def on_message() -> None:
        try:
            message = channel.recv()
        except (EOFError, OSError):
            message = "stop"
        if message == "stats":
            channel.send(server.stats())
        else:
            loop.remove_reader(channel.fileno())
            done.set()

    loop.add_reader(channel.fileno(), on_message)
    channel.send(server.port)
    try:
        await done.wait()
    finally:
        await server.close()
        with contextlib.suppress(OSError):
            channel.send("stopped")


class SimProcess:
    """The parent's handle on the embedded server's process."""

    def __init__(self, settings: SimSettings, context: Any) -> None:
        self._channel, child = context.Pipe()
        self._process = context.Process(
            target=sim_main, args=(settings, child), name="poolkit-bench-sim", daemon=True
        )
        self._process.start()
        child.close()
        self._lock = threading.Lock()
        if not self._channel.poll(30.0):
            self.stop()
            raise RuntimeError("the embedded server did not start within 30 s")
        self.port: int = self._channel.recv()
        #: when it started (``time.perf_counter``, within the pipe's latency): its schedule's 0
        self.started_at = time.perf_counter()

    def stats(self) -> SimStats | None:
        with self._lock:
            try:
                self._channel.send("stats")
                if self._channel.poll(5.0):
                    stats: SimStats = self._channel.recv()
                    return stats
            except (EOFError, OSError):
                pass
        return None

    def stop(self) -> None:
        with self._lock, contextlib.suppress(OSError):
            self._channel.send("stop")
            if self._channel.poll(5.0):
                self._channel.recv()
        self._process.join(5.0)
        if self._process.is_alive():
            self._process.kill()
            self._process.join()
        self._channel.close()
