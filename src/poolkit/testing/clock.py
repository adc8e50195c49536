"""A fake clock for deterministic tests of both front ends.

``FakeClock`` only moves when told (:meth:`FakeClock.advance`, :meth:`FakeClock.jump`). A
:class:`poolkit.DrivenClock`, it takes over the pool's timers (``call_at``) and, for the threaded
pool, its worker threads (``start_thread``) and blocking waits (``new_signal``). Because it knows
every thread it started and every wait it handed out, :meth:`FakeClock.settle` can wait (in real
time, bounded) until each such thread is blocked on the clock or finished: at that point nothing
will happen until time moves, so moving it is deterministic.
"""

from __future__ import annotations

import heapq
import itertools
import threading
from collections.abc import Callable
from typing import Any, final

__all__ = ["FakeClock", "SettleTimeout"]


class SettleTimeout(AssertionError):
    """Threads kept running (not blocked on the clock) for longer than the settle timeout."""


@final
class _Timer:
    __slots__ = ("callback", "cancelled", "when")

    def __init__(self, when: float, callback: Callable[[], Any]) -> None:
        self.when = when
        self.callback = callback
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


@final
class _Signal:
    """A one-shot wake-up whose waiter the clock counts as blocked."""

    __slots__ = ("_clock", "_set", "_waiting")

    def __init__(self, clock: FakeClock) -> None:
        self._clock = clock
        self._set = False
        self._waiting = False

    def wait(self) -> None:
        clock = self._clock
        with clock._cv:
            if self._set:
                return
            self._waiting = True
            clock._blocked += 1
            clock._cv.notify_all()
            while not self._set:
                clock._cv.wait()

    def set(self) -> None:
        clock = self._clock
        with clock._cv:
            if self._set:
                return
            self._set = True
            if self._waiting:
                self._waiting = False
                clock._blocked -= 1
            clock._cv.notify_all()


@final
class FakeClock:
    """Monotonic time that moves only when a test moves it."""

    def __init__(self, start: float = 0.0, *, settle_timeout: float = 10.0) -> None:
        self._now = float(start)
        self._timers: list[tuple[float, int, _Timer]] = []
        self._seq = itertools.count()
        self._cv = threading.Condition(threading.RLock())
        self._threads = 0
        self._blocked = 0
        self._errors: list[BaseException] = []
        self.settle_timeout = settle_timeout

    # ------------------------------------------------------------------ time and timers

    def monotonic(self) -> float:
        return self._now

    def call_at(self, when: float, callback: Callable[[], Any]) -> _Timer:
        """Run ``callback`` when the clock reaches ``when`` (from ``advance``/``jump``)."""
        timer = _Timer(when, callback)
        with self._cv:
            heapq.heappush(self._timers, (when, next(self._seq), timer))
        return timer

    def next_timer(self) -> float | None:
        """When the earliest live timer is due, or ``None``."""
        with self._cv:
            while self._timers and self._timers[0][2].cancelled:
                heapq.heappop(self._timers)
            return self._timers[0][0] if self._timers else None

    def advance(self, seconds: float) -> None:
        """Move time forward by ``seconds``, running each timer due on the way at its own
        instant, settling threads between timers."""
        if seconds < 0:
            raise ValueError("FakeClock.advance: time cannot go backwards")
        self.settle()
        target = self._now + seconds
        while True:
            with self._cv:
                when = self.next_timer()
                if when is None or when > target:
                    self._now = target
                    return
                _, _, timer = heapq.heappop(self._timers)
                self._now = max(self._now, when)
            timer.callback()
            self.settle()

    def jump(self) -> bool:
        """Move time to the next timer and run it (and any due with it). False if none."""
        self.settle()
        when = self.next_timer()
        if when is None:
            return False
        self.advance(max(0.0, when - self._now))
        return True

    # ------------------------------------------------------------------ threads

    def start_thread(
        self, target: Callable[[], Any], name: str = "fakeclock-thread"
    ) -> threading.Thread:
        """Start a thread the clock tracks (for :meth:`settle`)."""
        with self._cv:
            self._threads += 1

        def run() -> None:
            try:
                target()
            except BaseException as exc:  # pragma: no cover - reported through errors
                self._errors.append(exc)
            finally:
                with self._cv:
                    self._threads -= 1
                    self._cv.notify_all()

        thread = threading.Thread(target=run, name=name, daemon=True)
        thread.start()
        return thread

    def new_signal(self) -> _Signal:
        """A one-shot wake-up; a thread waiting on it counts as blocked."""
        return _Signal(self)

    def sleep(self, seconds: float) -> None:
        """Block the calling thread until the clock has moved ``seconds`` forward."""
        signal = self.new_signal()
        self.call_at(self._now + seconds, signal.set)
        signal.wait()

    def settle(self, timeout: float | None = None) -> None:
        """Wait (real time, bounded) until every tracked thread is blocked on the clock or done."""
        limit = self.settle_timeout if timeout is None else timeout
        with self._cv:
            if not self._cv.wait_for(lambda: self._blocked >= self._threads, timeout=limit):
                raise SettleTimeout(
                    f"{self._threads - self._blocked} thread(s) still running after {limit} s"
                )

    @property
    def errors(self) -> list[BaseException]:
        """Exceptions that escaped tracked threads."""
        return list(self._errors)

    def __repr__(self) -> str:
        return f"<FakeClock t={self._now} threads={self._threads} blocked={self._blocked}>"
