"""``poolkit.driver``: the seam the layers above the pools use (docs/architecture.md). Its names
are the pools' own (``DEFAULT`` is what the pools take as "not given"), none of them repeats one
of ``poolkit``'s, and its helpers behave as the backends and the MongoDB layer rely on."""

from __future__ import annotations

import socket
from datetime import timedelta

import pytest

import poolkit
from doubles import Conn
from poolkit import driver
from poolkit.backends import tcp
from poolkit.testing import FakeClock


def _connect(ctx: poolkit.ConnectContext) -> Conn:
    return Conn(1)


def test_the_seam_adds_to_poolkit_and_repeats_none_of_its_names() -> None:
    assert not set(driver.__all__) & set(poolkit.__all__)
    # the backends' socket check is the seam's (the MongoDB layer uses the same one)
    assert tcp.check is driver.check_socket


def test_default_means_the_pools_option() -> None:
    """A wrapper passing ``DEFAULT`` through gets the pool's ``wait_queue_timeout``, as a caller
    giving no timeout does: here 5 s of fake time pass before the checkout gives up."""
    clock = FakeClock()
    options = poolkit.PoolOptions(max_size=1, wait_queue_timeout=5.0)
    with poolkit.Pool(_connect, options=options, clock=clock) as pool:
        held = pool.checkout(driver.DEFAULT)
        assert isinstance(held, poolkit.Lease)
        outcome: list[tuple[float, Exception]] = []

        def wait() -> None:
            try:
                pool.checkout(driver.DEFAULT)
            except poolkit.WaitQueueTimeoutError as exc:
                outcome.append((clock.monotonic(), exc))

        clock.start_thread(wait)
        clock.advance(4.9)
        assert outcome == []
        clock.advance(0.1)
        assert len(outcome) == 1 and outcome[0][0] == 5.0
        held.release()


@pytest.mark.parametrize("good", [0, 0.5, 3, timedelta(seconds=2)])
def test_check_timeout_takes_seconds(good: float | timedelta) -> None:
    expected = good.total_seconds() if isinstance(good, timedelta) else float(good)
    taken = driver.check_timeout(good)
    assert taken == expected and type(taken) is float  # (an int too: the deadline is a float)


@pytest.mark.parametrize("bad", [-1, float("nan"), float("inf"), True, "1", None])
def test_check_timeout_names_the_call_at_fault(bad: object) -> None:
    with pytest.raises((TypeError, ValueError), match=r"command\(timeout=\.\.\.\)"):
        driver.check_timeout(bad, "command(timeout=...)")


def test_with_default_hooks_keeps_the_users_own() -> None:
    default, own = poolkit.Hooks(reset=lambda c: None), poolkit.Hooks(check=lambda c: None)
    assert driver.with_default_hooks(None, default, "build").hooks is default
    options = poolkit.PoolOptions(max_size=3)
    given = driver.with_default_hooks(options, default, "build")
    assert given.hooks is default and given.max_size == 3
    assert driver.with_default_hooks(poolkit.PoolOptions(hooks=own), default, "b").hooks is own
    with pytest.raises(TypeError, match=r"build\(options=\.\.\.\) must be a PoolOptions"):
        driver.with_default_hooks({"max_size": 3}, default, "build")  # type: ignore[arg-type]  # (the wrong type is the test)


def test_check_socket_tells_a_healthy_socket_from_a_closed_or_chatty_one() -> None:
    left, right = socket.socketpair()
    with left, right:
        driver.check_socket(left)  # nothing waiting: healthy, and nothing read
        right.sendall(b"x")
        with pytest.raises(ConnectionError, match="unexpected data"):
            driver.check_socket(left)
        assert left.recv(1) == b"x"  # (peeked, not consumed)
        right.close()
        with pytest.raises(ConnectionError, match="peer closed"):
            driver.check_socket(left)
    with pytest.raises(ConnectionError, match="socket is closed"):
        driver.check_socket(left)


def test_pip_install_names_the_extra() -> None:
    assert "poolkit[redis]" in driver.pip_install("redis")


def test_trio_running_tells_which_library_runs() -> None:
    import asyncio

    import trio

    async def under_asyncio() -> bool:
        return driver.trio_running()

    async def under_trio() -> bool:
        return driver.trio_running()

    assert driver.trio_running() is False  # (none running)
    assert asyncio.run(under_asyncio()) is False
    assert trio.run(under_trio) is True
