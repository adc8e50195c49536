"""A hang fails the run, it does not hang it (issue 37, point 10): pytest on a small file of tests
that hang on purpose, one front end each, in a subprocess with the suite's configuration
(pyproject.toml, and tests/conftest.py as a plugin: its watchdog, tests/support/hang_watchdog.py)
and short limits (``--timeout 2``, ``watchdog_grace`` 2 s). Each run must end, reported failed, well
within a bound; the subprocess's own timeout keeps this test from hanging if it does not."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hang_watchdog import HYPOTHESIS_SHRINKING, timeout_of

ROOT = Path(__file__).resolve().parents[2]

HANGS = '''
import asyncio
import threading

import pytest

import poolkit
from poolkit.testing import run as run_on_virtual_time


async def connect(ctx):
    return object()


def sync_connect(ctx):
    return object()


def test_asyncio_waiter_never_woken():
    """A checkout nobody serves, on the virtual-time loop kept busy by a timer (as the pool's
    own keep the loop of tests/pools busy): pytest-timeout's exception lands in the ticking
    task, which keeps it, and the loop goes on waiting."""

    async def main():
        async def ticking():
            while True:
                await asyncio.sleep(1)

        ticker = asyncio.create_task(ticking())
        async with poolkit.AsyncPool(connect, options=poolkit.PoolOptions(max_size=1)) as pool:
            held = await pool.checkout()
            await pool.checkout()  # never served
        ticker.cancel()

    run_on_virtual_time(main())


@pytest.fixture
def stuck_worker():
    """A thread waiting, in the pool's lock, for a checkout nobody serves; the teardown waits
    for it to be done (the timeout's one exception is spent by then)."""
    pool = poolkit.Pool(sync_connect, options=poolkit.PoolOptions(max_size=1))
    pool.ready()
    held = pool.checkout()
    served = threading.Event()

    def work():
        pool.checkout()
        served.set()

    threading.Thread(target=work, daemon=True).start()
    yield served
    served.wait()


def test_thread_waiting_on_a_lock(stuck_worker):
    stuck_worker.wait()


def test_thread_checkout_never_served():
    """The plain case: pytest-timeout fails the test, and the run goes on to the next."""
    with poolkit.Pool(sync_connect, options=poolkit.PoolOptions(max_size=1)) as pool:
        held = pool.checkout()
        pool.checkout()


def test_next():
    pass
'''

#: pytest's limits in the subprocess, and the bound its run must end within (its start-up on a
#: loaded machine included): each hang is met 2 s (pytest-timeout) or 4 s (the watchdog) after
#: its test starts
TIMEOUT = 2
GRACE = 2
BOUND = 45.0


def run_hangs(tmp_path: Path, select: str) -> tuple[subprocess.CompletedProcess[str], float]:
    """pytest on the tests of ``HANGS`` that ``-k select`` selects: what it printed, and the
    seconds it took."""
    test_file = tmp_path / "test_hangs_on_purpose.py"
    test_file.write_text(HANGS)
    tests = ROOT / "tests"
    # (COLUMNS: the summary's lines whole)
    env = dict(
        os.environ, COLUMNS="250", PYTHONPATH=os.pathsep.join([str(tests), str(tests / "support")])
    )
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-c",
        str(ROOT / "pyproject.toml"),
        "--rootdir",
        str(ROOT),
        "-p",
        "conftest",  # tests/conftest.py (on PYTHONPATH): the suite's hooks, its watchdog
        "-p",
        "no:cacheprovider",
        "--timeout",
        str(TIMEOUT),
        "-o",
        f"watchdog_grace={GRACE}",
        "-k",
        select,
        str(test_file),
    ]
    start = time.monotonic()
    try:
        ran = subprocess.run(
            command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=BOUND + 30
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"{select}: the run hung (killed after {exc.timeout:g} s): {exc.output!r}")
    return ran, time.monotonic() - start


def test_an_asyncio_hang_that_swallows_the_timeout_ends_the_run(tmp_path: Path) -> None:
    ran, took = run_hangs(tmp_path, "test_asyncio_waiter_never_woken")
    out = ran.stdout + ran.stderr
    assert ran.returncode == 1, out
    assert took < BOUND, (took, out)
    # pytest-timeout's exception, or (when a task kept it) the watchdog's verdict
    failed_by_timeout = "test_asyncio_waiter_never_woken - Failed: Timeout" in out
    failed_by_watchdog = (
        "FAILED " in out and "::test_asyncio_waiter_never_woken: still running" in out
    )
    assert failed_by_timeout or failed_by_watchdog, out


def test_a_thread_hang_whose_teardown_hangs_too_ends_the_run(tmp_path: Path) -> None:
    ran, took = run_hangs(tmp_path, "test_thread_waiting_on_a_lock")
    out = ran.stdout + ran.stderr
    assert ran.returncode == 1, out
    assert took < BOUND, (took, out)
    assert "FAILED " in out and "::test_thread_waiting_on_a_lock: still running" in out, out
    assert "suite watchdog: the run ends here" in out and "Stack of MainThread" in out


def test_a_hang_pytest_timeout_ends_is_one_failure_and_the_run_goes_on(tmp_path: Path) -> None:
    ran, took = run_hangs(tmp_path, "test_thread_checkout_never_served or test_next")
    out = ran.stdout + ran.stderr
    assert ran.returncode == 1, out
    assert took < BOUND, (took, out)
    assert "1 failed, 1 passed" in out, out
    assert "test_thread_checkout_never_served - Failed: Timeout" in out, out


def test_the_suite_has_the_watchdog_and_its_timeouts(pytestconfig: pytest.Config) -> None:
    """What the runs above rely on is this suite's configuration, not theirs."""
    assert pytestconfig.pluginmanager.hasplugin("timeout")
    assert float(pytestconfig.getini("timeout")) > 0
    assert pytestconfig.getini("timeout_method") == "signal"
    assert pytestconfig.getini("timeout_func_only") is False
    assert float(pytestconfig.getini("watchdog_grace")) > 0
    assert any(t.name == "suite-watchdog" for t in threading.enumerate())


@settings(max_examples=1, database=None)
@given(st.none())
def test_a_hypothesis_test(value: None) -> None:
    """(A Hypothesis test, whose timeout the next test reads.)"""
    assert value is None


def test_hypothesis_tests_have_time_to_shrink_a_failure(request: pytest.FixtureRequest) -> None:
    """A Hypothesis test's timeout leaves room for Hypothesis's shrinking (which a failure found
    late on a busy machine would otherwise spend past the watchdog, its report lost); the other
    tests keep the suite's."""
    items = {item.name: item for item in request.session.items}
    if "test_a_hypothesis_test" not in items:
        pytest.skip("test_a_hypothesis_test was not collected in this run (-k)")
    suite = float(request.config.getoption("timeout") or request.config.getini("timeout"))
    assert timeout_of(items["test_a_hypothesis_test"]) == suite + HYPOTHESIS_SHRINKING
    assert timeout_of(request.node) == suite
