"""The suite's watchdog: every test's hang ends the run, even where pytest-timeout cannot.

pytest-timeout (``timeout`` in pyproject.toml, its signal method) ends a test that runs too long
by raising ``Failed`` from a SIGALRM handler, in whatever the main thread runs at that instant,
once. That is the failure we want (reported, with a traceback, and the run goes on), but it is
not a bound:

* on a busy asyncio loop the exception lands in a task's step or a callback, and asyncio keeps
  it there: a task stores it as its result, a callback's is logged and dropped. The loop goes on
  waiting for what never comes. (Issue 37, point 10: with one hand-off removed from
  ``_AsyncLease.release``, a test on ``poolkit.testing``'s virtual-time loop spins, the jumps of
  its clock keeping the loop busy, and the run went past ``--timeout 60`` for 7 minutes);
* code that catches ``BaseException`` keeps it too, and the test waits again;
* the alarm fires once: a teardown that hangs after it is not bounded;
* a non-daemon thread left blocked keeps the interpreter from exiting after the last test.

So one thread here watches them all: each test (setup, call and teardown, as pytest-timeout's
``timeout_func_only = false``) gets the test's timeout plus ``watchdog_grace`` seconds; past
that it prints the test's id, what it captured and every thread's stack, and ends the process
with status 1 (``os._exit``: nothing the hang holds can stop it), as pytest-timeout's thread
method does. After the session, the process gets ``watchdog_grace`` seconds to exit. A timeout
of 0 (``--timeout 0``, to debug) turns the watchdog off with it, as do ``--pdb`` and ``--trace``.
"""

from __future__ import annotations

import os
import sys
import threading
import time
import traceback
from collections.abc import Generator

import pytest

__all__ = [
    "GRACE",
    "addoption",
    "give_hypothesis_time",
    "pytest_configure",
    "pytest_runtest_protocol",
    "pytest_sessionfinish",
    "pytest_unconfigure",
]

#: seconds past a test's own timeout before the watchdog ends the run (ini ``watchdog_grace``)
GRACE = 30.0
#: the name of the watchdog's thread (not ``poolkit-...``: tests look for the pools' threads)
THREAD_NAME = "suite-watchdog"


def addoption(parser: pytest.Parser) -> None:
    """The ini option (called by tests/conftest.py's ``pytest_addoption``)."""
    parser.addini(
        "watchdog_grace",
        "seconds past a test's timeout (pytest-timeout's) before the suite's watchdog ends the "
        f"run, and the seconds the process gets to exit after the session (default {GRACE:g})",
        default=str(GRACE),
    )


def timeout_of(item: pytest.Item) -> float:
    """The test's pytest-timeout timeout: its ``timeout`` mark, else ``--timeout``, else the
    ini's; 0 when none (or without pytest-timeout)."""
    marker = item.get_closest_marker("timeout")
    if marker is not None:
        value = marker.kwargs.get("timeout", marker.args[0] if marker.args else None)
        if value is not None:
            return float(value)
    for read in (item.config.getoption, item.config.getini):
        try:
            value = read("timeout")
        except ValueError:  # (pytest-timeout not loaded: no such option)
            continue
        if value not in (None, ""):
            return float(value)
    return 0.0


#: seconds Hypothesis may spend shrinking a failure it found (its own bound, ``engine``'s
#: ``MAX_SHRINKING_SECONDS``), given to its tests on top of their timeout: a failure found near
#: the end of a test's time, on a busy machine, is reported once shrunk, not lost to the watchdog
#: (or to pytest-timeout's exception, which the shrinking takes for one more failure)
HYPOTHESIS_SHRINKING = 300.0


def give_hypothesis_time(items: list[pytest.Item]) -> None:
    """Each Hypothesis test without a ``timeout`` mark of its own gets one: the suite's timeout
    plus :data:`HYPOTHESIS_SHRINKING` (none when the timeout is off: 0, to debug)."""
    for item in items:
        test = getattr(item, "obj", None)
        if not getattr(test, "is_hypothesis_test", False):
            continue
        if item.get_closest_marker("timeout") is not None:
            continue
        timeout = timeout_of(item)
        if timeout > 0:
            item.add_marker(pytest.mark.timeout(timeout + HYPOTHESIS_SHRINKING))


class Watchdog:
    """One daemon thread, for the whole session: ``arm`` before each test, ``disarm`` after."""

    def __init__(self, config: pytest.Config, grace: float) -> None:
        self.config = config
        self.grace = grace
        self._cond = threading.Condition()
        self._deadline: float | None = None
        self._what = ""
        self._item: pytest.Item | None = None
        self._thread = threading.Thread(target=self._watch, name=THREAD_NAME, daemon=True)
        self._thread.start()

    def arm(self, seconds: float, what: str, item: pytest.Item | None = None) -> None:
        with self._cond:
            self._deadline = time.monotonic() + seconds
            self._what = what
            self._item = item
            self._cond.notify()

    def disarm(self) -> None:
        with self._cond:
            self._deadline = None
            self._item = None
            self._cond.notify()

    def _watch(self) -> None:
        with self._cond:
            while True:
                if self._deadline is None:
                    self._cond.wait()
                    continue
                left = self._deadline - time.monotonic()
                if left > 0:
                    self._cond.wait(left)
                    continue
                self._bite(self._what, self._item)

    def _bite(self, what: str, item: pytest.Item | None) -> None:
        terminal = self.config.get_terminal_writer()
        try:
            out = err = ""
            capman = self.config.pluginmanager.getplugin("capturemanager")
            if capman is not None and capman.is_globally_capturing():
                capman.suspend_global_capture(in_=True)
                out, err = capman.read_global_capture()
            terminal.line()
            terminal.sep("+", title="suite watchdog")
            terminal.line(f"FAILED {what}")
            for title, text in (("Captured stdout", out), ("Captured stderr", err)):
                if text:
                    terminal.sep("~", title=title)
                    terminal.write(text)
            me = threading.get_ident()
            names = {t.ident: t.name for t in threading.enumerate()}
            for ident, frame in sys._current_frames().items():
                if ident != me:
                    terminal.sep("~", title=f"Stack of {names.get(ident, '?')} ({ident})")
                    terminal.write("".join(traceback.format_stack(frame)))
            terminal.sep("+", title="suite watchdog: the run ends here (exit status 1)")
        except Exception:
            traceback.print_exc()
        finally:
            terminal.flush()
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(1)


_watchdog: list[Watchdog] = []


def pytest_configure(config: pytest.Config) -> None:
    grace = float(config.getini("watchdog_grace"))
    _watchdog.append(Watchdog(config, grace))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(
    item: pytest.Item, nextitem: pytest.Item | None
) -> Generator[None, object, object]:
    timeout = timeout_of(item)
    debugging = item.config.getoption("usepdb") or item.config.getoption("trace")
    if timeout <= 0 or not _watchdog or debugging:  # (--pdb, --trace: a person at the prompt)
        return (yield)
    dog = _watchdog[-1]
    limit = timeout + dog.grace
    dog.arm(
        limit,
        f"{item.nodeid}: still running {limit:g} s after it started (its timeout of {timeout:g} s "
        "did not end it: the hang swallowed pytest-timeout's exception, or blocks where a "
        "signal cannot reach)",
        item,
    )
    try:
        return (yield)
    finally:
        dog.disarm()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if _watchdog:
        _watchdog[-1].disarm()


def pytest_unconfigure(config: pytest.Config) -> None:
    """The process gets ``watchdog_grace`` seconds to exit: a thread a test left blocked (not a
    daemon) would keep it waiting for ever at the interpreter's exit."""
    if _watchdog:
        dog = _watchdog.pop()
        dog.arm(
            dog.grace,
            f"the run did not exit within {dog.grace:g} s of its end: a thread it started (not "
            "a daemon) is still running",
        )
