"""A checkout that may not wait (issue 24, defect 4): ``PoolOptions(wait_queue_timeout=0)`` made a
pool that never connected (20 checkouts 50 ms apart: 0 served, ``connect_attempts=0``). The option
now refuses 0 (CMAP's ``waitQueueTimeoutMS=0`` means no limit: ``None`` here), and a checkout
with ``timeout=0`` that finds nothing idle fails at once but starts the connect it would have
waited for, so the next one is served."""

from __future__ import annotations

from datetime import timedelta

import pytest

import poolkit
from frontends import Front, drive


@pytest.mark.parametrize("zero", [0, 0.0, timedelta(0)])
def test_the_option_refuses_zero_and_says_what_to_pass(zero: object) -> None:
    with pytest.raises(ValueError, match=r"wait_queue_timeout must be > 0 seconds or None"):
        poolkit.PoolOptions(wait_queue_timeout=zero)  # type: ignore[arg-type]


def test_the_message_for_zero_names_cmap_and_the_try_form() -> None:
    with pytest.raises(ValueError, match=r"waitQueueTimeoutMS=0 means no limit.*timeout=0"):
        poolkit.PoolOptions(wait_queue_timeout=0)


def test_checkouts_that_never_wait_still_get_a_pool_that_connects(front_kind: str) -> None:
    async def scenario(f: Front) -> None:
        f.connect_delay = 0.01
        served = 0
        for _ in range(20):
            try:
                lease = await f.lease(timeout=0)
            except poolkit.WaitQueueTimeoutError:
                pass
            else:
                served += 1
                lease.release()
            await f.advance(0.05)
        stats = f.pool.stats()
        assert served == 19  # only the first, which started the connect, found nothing
        assert stats.connect_attempts == 1
        assert stats.checkout_failures == {"timeout": 1}
        assert stats.total == 1

    drive(front_kind, scenario)


def test_a_burst_of_zero_timeouts_starts_one_connect(front_kind: str) -> None:
    async def scenario(f: Front) -> None:
        f.connect_delay = 1.0
        for _ in range(10):
            with pytest.raises(poolkit.WaitQueueTimeoutError):
                await f.lease(timeout=0)
        # The connect in flight covers the next checkout (as it covers a waiter): not one each.
        assert f.pool.stats().pending == 1
        await f.advance(1.0)
        await f.settle()
        stats = f.pool.stats()
        assert (stats.total, stats.available) == (1, 1)
        lease = await f.lease(timeout=0)  # served at once now
        lease.release()

    drive(front_kind, scenario)


def test_zero_timeouts_never_connect_past_max_size(front_kind: str) -> None:
    async def scenario(f: Front) -> None:
        held = [await f.lease(), await f.lease()]
        for _ in range(5):
            with pytest.raises(poolkit.WaitQueueTimeoutError):
                await f.lease(timeout=0)
        assert f.pool.stats().total == 2
        for lease in held:
            lease.release()

    drive(front_kind, scenario, max_size=2)


def test_a_zero_timeout_on_an_open_circuit_starts_no_connect(front_kind: str) -> None:
    async def scenario(f: Front) -> None:
        f.connect_errors = [OSError("down")] * 100
        waiter = f.start(timeout=10.0)
        await f.advance(3.0)  # connects keep failing: the breaker opens after 2 s
        await f.settle()
        assert waiter.done and isinstance(waiter.error, poolkit.CircuitOpenError)
        attempts = f.pool.stats().connect_attempts
        with pytest.raises(poolkit.CircuitOpenError):
            await f.lease(timeout=0)
        assert f.pool.stats().connect_attempts == attempts

    retry = poolkit.Backoff(base=0.5, factor=1.0, jitter=0.0, circuit_breaker_after=2.0)
    drive(front_kind, scenario, connect_retry=retry)
